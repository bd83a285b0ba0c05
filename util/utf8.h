/* utf8 — the one UTF-8 decoder and encoder of the tree, and its one policy for
 * bytes that are not UTF-8.
 *
 * Valid UTF-8 is RFC 3629's: no overlong forms, no surrogates (U+D800..U+DFFF),
 * nothing above U+10FFFF. NUL is a valid character here; a caller that needs C
 * strings deals with it.
 *
 * Invalid bytes: every maximal subpart of an ill-formed subsequence becomes one
 * U+FFFD (Unicode 15 §3.9 "U+FFFD Substitution of Maximal Subparts", the WHATWG
 * Encoding standard's decoder, what browsers and Python's "replace" do). A
 * maximal subpart is the longest prefix of a well-formed sequence that the input
 * starts (a lead byte and the continuation bytes that fit it so far), or else one
 * byte. So "\xE2\x82" alone is one U+FFFD, "\xC0\xAF" is two, "\xF0\x9F\x98A" is
 * one and then "A". Everything that repairs text (the streamed deltas, a logprob's
 * token, the tokenizer's input, error messages) goes through here, so the same
 * bytes always read the same.
 *
 * Pure functions of their arguments, apart from the ut_buf they append to and the
 * decoder state a caller owns; any thread. */
#ifndef MINICPMD_UTIL_UTF8_H
#define MINICPMD_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* U+FFFD REPLACEMENT CHARACTER in UTF-8. */
#define UT_UTF8_REPLACEMENT "\xEF\xBF\xBD"

/* The sequence at s[0 .. n), n >= 1: its length (1..4) and *cp when it is a whole
 * valid character; 0 when it is the valid beginning of one that s ends before
 * (n too short); or -(the length of its maximal subpart) when it is ill-formed.
 * cp may be NULL; it is set only for a positive return. */
int ut_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* The UTF-8 form of code point cp (<= 0x10FFFF, not a surrogate) into out[0..4):
 * returns its length, 1..4; 0 (nothing written) for a code point that has none. */
int ut_utf8_encode(uint32_t cp, char out[4]);

/* How many bytes of s[0 .. n) are valid UTF-8 from the start (n when all are). */
size_t ut_utf8_valid_prefix(const char *s, size_t n);

/* Append s[0 .. n) to out with the policy above. With `hold`, a valid but
 * incomplete sequence at the very end is not replaced but left out, and its
 * length goes to *held (0 when none; held may be NULL): the caller keeps those
 * bytes for the next piece of a stream. Returns 0 or -ENOMEM. */
int ut_utf8_repair(ut_buf *out, const char *s, size_t n, bool hold, size_t *held);

/* Bytes to keep of the NUL-terminated s so that it does not end inside a
 * character (a truncating snprintf may cut one): strlen(s) less a valid but
 * incomplete sequence at the end. */
size_t ut_utf8_whole_len(const char *s);

/* Where the character that holds byte i of s begins: i stepped back over
 * continuation bytes (10xxxxxx), to 0 at most. Over valid UTF-8 it is the cut at
 * or before i that keeps whole characters. */
size_t ut_utf8_char_start(const char *s, size_t i);

/* Characters begun in s[0 .. n): the bytes that are not continuation bytes, so a
 * character cut across two pieces of a stream counts once, in the piece that
 * starts it (a text offset in characters). Over valid UTF-8, its code points. */
size_t ut_utf8_count_starts(const char *s, size_t n);

/* A decoder over a stream that arrives in pieces cut anywhere: a character split
 * between two pieces is joined, and what is left incomplete when the stream ends
 * is one U+FFFD. Zero-initialise it. */
struct ut_utf8_stream {
    char pend[4];      /* the valid start of a character cut by the last piece */
    int n_pend;
};

/* Append the piece s[0 .. n) to out, repaired. Returns 0 or -ENOMEM. */
int ut_utf8_stream_feed(struct ut_utf8_stream *st, ut_buf *out, const char *s, size_t n);
/* The stream ended (or is interrupted): an incomplete character held back becomes
 * one U+FFFD. Returns 0 or -ENOMEM. */
int ut_utf8_stream_finish(struct ut_utf8_stream *st, ut_buf *out);

#endif
