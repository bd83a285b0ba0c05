/* tokenizer — Hugging Face tokenizer.json (byte-level BPE) in C.
 *
 * Loads the model's own tokenizer.json: vocab, merges (with ranks), added tokens
 * with their special/lstrip/rstrip/normalized flags, the normalizer (NFC & co.
 * through utf8proc) and the pre-tokenizer (Split regexes run by PCRE2 straight
 * from the file, ByteLevel). Immutable once loaded: any thread may encode and
 * decode concurrently (the only shared mutable state, the BPE word cache, is
 * lock-striped). Checked id for id against Hugging Face's tokenizers.js (the
 * tokenizer of transformers.js) by the "tokenizer-oracle" test.
 *
 * Only byte-level BPE is accepted (pre_tokenizer ending in ByteLevel); anything a
 * file asks for that is not implemented fails the load with a reason instead of
 * tokenizing differently.
 */
#ifndef MINICPMD_ENGINE_TOKENIZER_H
#define MINICPMD_ENGINE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct eng_tokenizer eng_tokenizer;

/* Load `path` (a tokenizer.json). Returns 0 and *out, or a negative errno-style
 * value (-ENOENT, -EINVAL for a malformed file, -ENOMEM) with a one-line reason in
 * `err`. */
int eng_tokenizer_load(const char *path, eng_tokenizer **out, char *err, size_t errlen);
void eng_tokenizer_free(eng_tokenizer *t);

/* Number of ids (vocab + added tokens; the largest id + 1). */
int32_t eng_tokenizer_n_vocab(const eng_tokenizer *t);

/* Does this tokenizer fit a model of `n_vocab` embedding rows? Every id it can
 * produce must be below n_vocab (an added token beyond it would fail every request
 * that contains it), and model.vocab must hold the 256 byte-level tokens (without
 * one, text with that byte is silently dropped). 0, or -EINVAL with one line in
 * `err` naming the token. */
int eng_tokenizer_check_model(const eng_tokenizer *t, int32_t n_vocab, char *err, size_t errlen);

/* The id of a token string (vocab or added), or -1. */
int32_t eng_tokenizer_token_id(const eng_tokenizer *t, const char *token);

/* Encode `len` bytes of UTF-8. Invalid sequences are first replaced by U+FFFD, one
 * per maximal subpart (WHATWG, what TextDecoder gives the reference); a BOM is kept.
 * `special`: match added tokens marked special (true for chat prompts rendered by
 * the template; false treats "<|im_end|>" in user text as text, and text never
 * becomes a special id). Added tokens that are not special (MiniCPM5's <think> and
 * </think>) are matched in both modes, as the reference always does. lstrip/rstrip,
 * normalized and single_word are honoured (single_word as the Rust crate does).
 * No BOS is added: MiniCPM5's template emits "<s>" itself; post_processor is ignored.
 * Returns the count of ids written to a malloc'd *ids (caller frees; non-NULL even
 * for 0 ids), or -errno. Any thread. */
int eng_tokenizer_encode(const eng_tokenizer *t, const char *text, size_t len, bool special,
                         int32_t **ids);

/* eng_tokenizer_encode(), then with `add_special` the special tokens the
 * tokenizer.json's post_processor (TemplateProcessing, "single") puts around the
 * text, as Hugging Face's add_special_tokens=True does (MiniCPM5: "<s>" first).
 * Without such a post_processor, or with add_special false, the same as encode. For
 * /tokenize's add_special; chat prompts never add them (the template writes
 * "<s>"). */
int eng_tokenizer_encode_special(const eng_tokenizer *t, const char *text, size_t len,
                                 bool special, bool add_special, int32_t **ids);

/* The raw bytes one id stands for (byte-level decoded; may be part of a UTF-8
 * character). Returns the byte count (0 for an unknown id) and sets *bytes to
 * memory owned by the tokenizer. `skip_special`: special added tokens give 0. */
size_t eng_tokenizer_token_bytes(const eng_tokenizer *t, int32_t id, bool skip_special,
                                 const char **bytes);

/* Decode ids to UTF-8 as the reference's ByteLevel decoder does: the bytes of a
 * run of ordinary tokens are decoded together (invalid sequences -> U+FFFD), an
 * added token stands for its content and ends the run; unknown ids are nothing;
 * no clean-up of spaces. `skip_special` drops special added tokens (they then do
 * not end a run). Returns a malloc'd NUL-terminated string, or NULL. */
char *eng_tokenizer_decode(const eng_tokenizer *t, const int32_t *ids, size_t n,
                           bool skip_special);
/* The same, also giving the byte length in *len: the text may contain U+0000. */
char *eng_tokenizer_decode_len(const eng_tokenizer *t, const int32_t *ids, size_t n,
                               bool skip_special, size_t *len);

/* ---- streaming detokenizer ----------------------------------------------- */

typedef struct eng_detok eng_detok;

/* A stream of ids -> UTF-8 text pieces that never split a character and are never
 * invalid UTF-8; with stop strings, text that might be the start of one is held
 * back until it is certain. */
eng_detok *eng_detok_new(const eng_tokenizer *t, bool skip_special, const char *const *stops,
                         size_t n_stops);
/* The same with each stop string's length in bytes (lens[i]; lens NULL: strlen), so
 * a stop string may hold NUL bytes; it is matched byte for byte, whole. */
eng_detok *eng_detok_new_len(const eng_tokenizer *t, bool skip_special, const char *const *stops,
                             const size_t *lens, size_t n_stops);
void eng_detok_free(eng_detok *d);

/* With skip_special: still give the text of MiniCPM5's tool-call markup tokens
 * (`<function`, `</function>`, `<param`, `</param>`), which its tokenizer.json marks
 * special but which the output parser must see to find tool calls. Off by default
 * (then the stream equals eng_tokenizer_decode() with skip_special). */
void eng_detok_keep_markup(eng_detok *d);

/* Feed one id. Appends the text that is now certain to *out (malloc'd,
 * NUL-terminated, caller frees; NULL when nothing is ready) and returns its length,
 * or -errno. Sets *stopped when a stop string completed: the text before it has
 * been emitted, the stop string and anything after it are not; later pushes and
 * the flush then give nothing. Without stop strings, the pieces of a stream plus
 * its flush concatenate to exactly eng_tokenizer_decode() of the same ids. Empty
 * stop strings are ignored. One stream belongs to one thread at a time. */
int eng_detok_push(eng_detok *d, int32_t id, char **out, bool *stopped);

/* Which stop string ended the stream: its index in the list given to
 * eng_detok_new*() (the earliest in the text wins; of two at the same place, the
 * first listed), or -1 while none has. */
int eng_detok_stop_index(const eng_detok *d);

/* End of stream: whatever is held back (an incomplete character becomes U+FFFD). */
int eng_detok_flush(eng_detok *d, char **out);

#endif
