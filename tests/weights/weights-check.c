/* Driver for the numpy weight oracle (tests/weights/make_q4nx.py): opens the
 * model.q4nx the script wrote with its own safetensors writer and Q4_1 packer,
 * and checks, bit for bit, that our reader gives numpy's values:
 *   - BF16 tensors: every element widened to float;
 *   - Q4_1 tensors: every nibble, scale and min through the chunk accessors, every
 *     row through eng_q4nx_dequant_row() (logical columns), every chunk through
 *     eng_q4nx_dequant_tile() (padding included), against numpy's float32 q*d + m.
 * Exact equality is the right test: both sides round q*d and then +m in float32.
 *
 * Usage: weights-check OUTDIR. Exit 0 when everything matches. */
#include "engine/kernels/bf16.h"
#include "engine/model/q4nx.h"
#include "engine/model/safetensors.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *outdir;

/* The raw file OUTDIR/<name><ext> of exactly `len` bytes, or NULL. */
static void *slurp(const char *name, const char *ext, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s%s", outdir, name, ext);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return NULL;
    }
    void *b = malloc(len ? len : 1);
    size_t got = b ? fread(b, 1, len, f) : 0;
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (!b || got != len || extra) {
        fprintf(stderr, "%s: expected %zu bytes\n", path, len);
        free(b);
        return NULL;
    }
    return b;
}

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

static int check_bf16(const eng_st *st, json_t *e)
{
    const char *name = json_string_value(json_object_get(e, "name"));
    json_t *js = json_object_get(e, "shape");
    int64_t shape[ENG_ST_MAX_DIMS];
    int nd = (int)json_array_size(js);
    for (int i = 0; i < nd; i++)
        shape[i] = json_integer_value(json_array_get(js, (size_t)i));
    const struct eng_st_tensor *t;
    char err[512];
    if (eng_st_get(st, name, ENG_ST_BF16, nd, shape, &t, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    float *want = slurp(name, ".f32", (size_t)t->numel * 4);
    if (!want)
        return 1;
    int bad = 0;
    for (int64_t i = 0; i < t->numel && bad < 5; i++)
        if (!same_bits(eng_bf16_load(t->data, (size_t)i), want[i])) {
            fprintf(stderr, "%s[%lld]: got %.9g want %.9g\n", name, (long long)i,
                    eng_bf16_load(t->data, (size_t)i), want[i]);
            bad++;
        }
    free(want);
    return bad != 0;
}

static int check_q4(const eng_st *st, json_t *e)
{
    const char *name = json_string_value(json_object_get(e, "name"));
    int64_t rows = json_integer_value(json_object_get(e, "rows"));
    int64_t cols = json_integer_value(json_object_get(e, "cols"));
    int64_t cp = json_integer_value(json_object_get(e, "padded_cols"));
    struct eng_q4nx q;
    char err[512];
    if (eng_q4nx_from_st(&q, st, name, rows, cols, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (q.col_blocks * 256 != cp ||
        q.row_blocks * q.col_blocks != json_integer_value(json_object_get(e, "num_chunks"))) {
        fprintf(stderr, "%s: chunk grid disagrees with numpy\n", name);
        return 1;
    }
    size_t n = (size_t)(rows * cp), ng = n / 32;
    float *want = slurp(name, ".f32", n * 4);
    uint8_t *wq = slurp(name, ".q", n);
    uint16_t *wd = slurp(name, ".d", ng * 2), *wm = slurp(name, ".m", ng * 2);
    float *row = malloc((size_t)cols * sizeof *row);
    float *tile = malloc(32 * 256 * sizeof *tile);
    int bad = !want || !wq || !wd || !wm || !row || !tile;
    for (int64_t r = 0; !bad && r < rows; r++) {
        const uint8_t *ch;
        for (int64_t c = 0; c < cp && bad < 5; c++) {
            ch = eng_q4nx_chunk(&q, r / 32, c / 256);
            int lr = (int)(r % 32), lc = (int)(c % 256);
            size_t gi = (size_t)(r * (cp / 32) + c / 32);
            if (eng_q4nx_chunk_nibble(ch, lr, lc) != wq[r * cp + c] ||
                !same_bits(eng_q4nx_chunk_scale(ch, lc / 32, lr), eng_bf16_to_f32(wd[gi])) ||
                !same_bits(eng_q4nx_chunk_min(ch, lc / 32, lr), eng_bf16_to_f32(wm[gi])) ||
                !same_bits(eng_q4nx_get(&q, r, c), want[r * cp + c])) {
                fprintf(stderr, "%s (%lld, %lld): q %d/%d d %g/%g m %g/%g w %.9g/%.9g\n", name,
                        (long long)r, (long long)c, eng_q4nx_chunk_nibble(ch, lr, lc),
                        wq[r * cp + c], eng_q4nx_chunk_scale(ch, lc / 32, lr),
                        eng_bf16_to_f32(wd[gi]), eng_q4nx_chunk_min(ch, lc / 32, lr),
                        eng_bf16_to_f32(wm[gi]), eng_q4nx_get(&q, r, c), want[r * cp + c]);
                bad++;
            }
        }
        eng_q4nx_dequant_row(&q, r, row);
        for (int64_t c = 0; c < cols && !bad; c++)
            if (!same_bits(row[c], want[r * cp + c])) {
                fprintf(stderr, "%s: dequant_row %lld col %lld: %.9g want %.9g\n", name,
                        (long long)r, (long long)c, row[c], want[r * cp + c]);
                bad++;
            }
    }
    for (int64_t rb = 0; !bad && rb < q.row_blocks; rb++)
        for (int64_t cb = 0; !bad && cb < q.col_blocks; cb++) {
            eng_q4nx_dequant_tile(&q, rb, cb, tile);
            for (int i = 0; i < 32 * 256 && !bad; i++) {
                int64_t r = rb * 32 + i / 256, c = cb * 256 + i % 256;
                if (!same_bits(tile[i], want[r * cp + c])) {
                    fprintf(stderr, "%s: tile (%lld, %lld) at (%d, %d): %.9g want %.9g\n",
                            name, (long long)rb, (long long)cb, i / 256, i % 256, tile[i],
                            want[r * cp + c]);
                    bad++;
                }
            }
        }
    free(tile);
    free(row);
    free(wm);
    free(wd);
    free(wq);
    free(want);
    return bad != 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: weights-check OUTDIR\n");
        return 2;
    }
    outdir = argv[1];
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.json", outdir);
    json_error_t jerr;
    json_t *man = json_load_file(path, 0, &jerr);
    if (!man) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return 1;
    }
    snprintf(path, sizeof path, "%s/%s", outdir,
             json_string_value(json_object_get(man, "file")));
    eng_st *st = NULL;
    char err[512];
    if (eng_st_open(path, &st, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        json_decref(man);
        return 1;
    }
    json_t *list = json_object_get(man, "tensors");
    int fails = 0;
    if (eng_st_count(st) != json_array_size(list)) {
        fprintf(stderr, "%s: %zu tensors, numpy wrote %zu\n", path, eng_st_count(st),
                json_array_size(list));
        fails++;
    }
    if (!eng_st_metadata(st, "generator")) {
        fprintf(stderr, "%s: __metadata__ 'generator' missing\n", path);
        fails++;
    }
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        const char *kind = json_string_value(json_object_get(e, "kind"));
        int f = strcmp(kind, "bf16") == 0 ? check_bf16(st, e) : check_q4(st, e);
        printf("%-45s %-5s %s\n", json_string_value(json_object_get(e, "name")), kind,
               f ? "MISMATCH" : "ok (bit-identical)");
        fails += f;
    }
    eng_st_free(st);
    json_decref(man);
    return fails ? 1 : 0;
}
