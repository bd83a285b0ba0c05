/* util/utf8: validity (RFC 3629), the replacement policy (one U+FFFD per maximal
 * subpart, the Unicode standard's table 3-8 example), streams cut anywhere, the
 * encoder, and cutting a truncated tail. */
#include "util/utf8.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

#define R UT_UTF8_REPLACEMENT

static char *repaired(const char *s, size_t n)
{
    ut_buf b = {0};
    cr_assert_eq(ut_utf8_repair(&b, s, n, false, NULL), 0);
    return b.p;
}

#define CHECK_REPAIR(in, want)                                                              \
    do {                                                                                    \
        char *got_ = repaired(in, sizeof(in) - 1);                                          \
        cr_assert_str_eq(got_, want, "repair of %s", #in);                                  \
        free(got_);                                                                         \
    } while (0)

MCD_TEST(utf8, valid_text_is_kept)
{
    CHECK_REPAIR("", "");
    CHECK_REPAIR("abc", "abc");
    CHECK_REPAIR("\xC2\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "\xC2\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
    CHECK_REPAIR("\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF");   /* U+10FFFF */
    CHECK_REPAIR("\xED\x9F\xBF", "\xED\x9F\xBF");           /* U+D7FF */
}

/* Unicode 15 §3.9, table 3-8: "61 F1 80 80 E1 80 C2 62 80 63 80 BF 64" reads
 * a U+FFFD U+FFFD U+FFFD b U+FFFD c U+FFFD U+FFFD d. */
MCD_TEST(utf8, maximal_subparts_as_the_standard)
{
    CHECK_REPAIR("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",
                 "a" R R R "b" R "c" R R "d");
}

MCD_TEST(utf8, one_replacement_per_subpart_not_per_byte)
{
    CHECK_REPAIR("\xE2\x82", R);                 /* a cut 3-byte character */
    CHECK_REPAIR("\xE2\x82" "A", R "A");
    CHECK_REPAIR("\xF0\x9F\x98" "A", R "A");
    CHECK_REPAIR("\xC0\xAF", R R);                /* overlong: C0 never leads */
    CHECK_REPAIR("\xE0\x80\x80", R R R);          /* overlong: E0 needs A0.. */
    CHECK_REPAIR("\xED\xA0\x80", R R R);          /* a surrogate */
    CHECK_REPAIR("\xF4\x90\x80\x80", R R R R);    /* past U+10FFFF */
    CHECK_REPAIR("\xFF\xFE", R R);
    CHECK_REPAIR("\x80\x80\x80", R R R);          /* lone continuations */
}

MCD_TEST(utf8, hold_keeps_an_incomplete_tail)
{
    ut_buf b = {0};
    size_t held = 9;
    cr_assert_eq(ut_utf8_repair(&b, "ab\xE2\x82", 4, true, &held), 0);
    cr_assert_str_eq(b.p, "ab");
    cr_assert_eq(held, 2);
    b.n = 0;
    cr_assert_eq(ut_utf8_repair(&b, "a\xE2\x28", 3, true, &held), 0);  /* ill-formed: not held */
    cr_assert_str_eq(b.p, "a" R "(");
    cr_assert_eq(held, 0);
    ut_buf_free(&b);
}

MCD_TEST(utf8, decode_and_encode_round_trip)
{
    static const uint32_t cps[] = {0, 0x41, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD,
                                   0xFFFF, 0x10000, 0x1F600, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
        char b[4];
        int n = ut_utf8_encode(cps[i], b);
        cr_assert(n >= 1 && n <= 4);
        uint32_t cp = 0;
        cr_assert_eq(ut_utf8_decode(b, (size_t)n, &cp), n, "U+%04X", cps[i]);
        cr_assert_eq(cp, cps[i]);
        cr_assert_eq(ut_utf8_decode(b, (size_t)n - 1 + (n == 1), NULL), n == 1 ? 1 : 0);
    }
    char b[4];
    cr_assert_eq(ut_utf8_encode(0xD800, b), 0);
    cr_assert_eq(ut_utf8_encode(0x110000, b), 0);
    cr_assert_eq(ut_utf8_decode("\xE0\x80", 2, NULL), -1);
    cr_assert_eq(ut_utf8_decode("\xF0\x9F\x98" "A", 4, NULL), -3);
}

MCD_TEST(utf8, valid_prefix_stops_at_the_first_bad_byte)
{
    cr_assert_eq(ut_utf8_valid_prefix("ab\xC3\xA9", 4), 4);
    cr_assert_eq(ut_utf8_valid_prefix("ab\xC3", 3), 2);
    cr_assert_eq(ut_utf8_valid_prefix("ab\xFF" "cd", 5), 2);
}

MCD_TEST(utf8, whole_len_cuts_only_a_truncated_character)
{
    cr_assert_eq(ut_utf8_whole_len("abc"), 3);
    cr_assert_eq(ut_utf8_whole_len("ab\xE2\x82\xAC"), 5);
    cr_assert_eq(ut_utf8_whole_len("ab\xE2\x82"), 2);
    cr_assert_eq(ut_utf8_whole_len("ab\xF0"), 2);
    cr_assert_eq(ut_utf8_whole_len("\xF0\x9F\x98"), 0);
    cr_assert_eq(ut_utf8_whole_len(""), 0);
}

/* A stream gives the same text as the whole input repaired at once, wherever it
 * is cut. */
MCD_TEST(utf8, a_stream_reads_as_the_whole)
{
    static const char in[] = "a\xF0\x9F\x98\x80" "b\xE2\x82" "c\xC3\xA9\xFF\xF1\x80\x80\xE1\x80\xC2"
                             "d\xE2\x82";
    size_t n = sizeof in - 1;
    char *want = repaired(in, n);
    for (size_t cut1 = 0; cut1 <= n; cut1++) {
        for (size_t cut2 = cut1; cut2 <= n; cut2++) {
            struct ut_utf8_stream st = {0};
            ut_buf b = {0};
            cr_assert_eq(ut_utf8_stream_feed(&st, &b, in, cut1), 0);
            cr_assert_eq(ut_utf8_stream_feed(&st, &b, in + cut1, cut2 - cut1), 0);
            cr_assert_eq(ut_utf8_stream_feed(&st, &b, in + cut2, n - cut2), 0);
            cr_assert_eq(ut_utf8_stream_finish(&st, &b), 0);
            cr_assert_str_eq(b.p ? b.p : "", want, "cut at %zu, %zu", cut1, cut2);
            ut_buf_free(&b);
        }
    }
    /* one byte at a time */
    struct ut_utf8_stream st = {0};
    ut_buf b = {0};
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ut_utf8_stream_feed(&st, &b, in + i, 1), 0);
    cr_assert_eq(ut_utf8_stream_finish(&st, &b), 0);
    cr_assert_str_eq(b.p, want);
    ut_buf_free(&b);
    free(want);
}

/* Cutting at a character and counting characters begun, the two byte-level helpers
 * the API and the tokenizer use (a cut must never split "€", a character split
 * across two pieces counts once). */
MCD_TEST(utf8, char_start_and_count_starts)
{
    const char *s = "a\xE2\x82\xAC" "b\xF0\x9F\x98\x80";   /* a € b 😀 */
    cr_assert_eq(ut_utf8_char_start(s, 0), 0);
    cr_assert_eq(ut_utf8_char_start(s, 1), 1);
    cr_assert_eq(ut_utf8_char_start(s, 2), 1);
    cr_assert_eq(ut_utf8_char_start(s, 3), 1);
    cr_assert_eq(ut_utf8_char_start(s, 4), 4);
    cr_assert_eq(ut_utf8_char_start(s, 8), 5);
    cr_assert_eq(ut_utf8_count_starts(s, strlen(s)), 4);
    cr_assert_eq(ut_utf8_count_starts(s, 2) + ut_utf8_count_starts(s + 2, 3), 3,
                 "a, € cut in two, b: € counts once");
    cr_assert_eq(ut_utf8_count_starts("", 0), 0);
}
