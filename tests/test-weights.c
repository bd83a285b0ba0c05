/* Weight files: the safetensors container (engine/model/safetensors.c), the Q4_1 chunk
 * reader (engine/model/q4nx.c) and the BF16 conversions (engine/kernels/bf16.h).
 *
 * Each bad-file case writes a small hand-made file to a temporary directory and
 * checks that eng_st_open() refuses it with NULL, a negative errno and one line
 * naming the file and the problem. The numpy oracle (tests/weights/make_q4nx.py
 * and weights-check.c) checks dequantization against an independent packer. */
#include "engine/kernels/bf16.h"
#include "engine/model/q4nx.h"
#include "engine/model/safetensors.h"
#include "tests/check.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- building files --------------------------------------------------------- */

static char tmpdir[64];
static char fpath[128];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mcd-test-weights-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(fpath, sizeof fpath, "%s/w.safetensors", tmpdir);
}

static void teardown(void)
{
    unlink(fpath);
    rmdir(tmpdir);
}

static void write_bytes(const void *buf, size_t len)
{
    FILE *f = fopen(fpath, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* 8-byte LE length + header + `data_len` bytes of data (byte i = i * 7 + 1), with
 * the header length field overridable (`hlen` < 0: the true length). Returns the
 * malloc'd file; *len gets its size. */
static uint8_t *build(const char *header, size_t data_len, int64_t hlen, size_t *len)
{
    size_t n = strlen(header);
    *len = 8 + n + data_len;
    uint8_t *b = malloc(*len);
    cr_assert_not_null(b);
    uint64_t h = hlen < 0 ? n : (uint64_t)hlen;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(h >> (8 * i));
    memcpy(b + 8, header, n);
    for (size_t i = 0; i < data_len; i++)
        b[8 + n + i] = (uint8_t)(i * 7 + 1);
    return b;
}

static void write_st(const char *header, size_t data_len)
{
    size_t len;
    uint8_t *b = build(header, data_len, -1, &len);
    write_bytes(b, len);
    free(b);
}

/* Open fpath, expecting failure `code` and a one-line message holding the file
 * name and `want`. */
static void expect_fail(int code, const char *want)
{
    eng_st *st = (eng_st *)1;
    char err[512] = "";
    int rc = eng_st_open(fpath, &st, err, sizeof err);
    cr_assert_eq(rc, code, "rc %d, want %d (%s)", rc, code, err);
    cr_assert_null(st);
    cr_assert_not_null(strstr(err, fpath), "no file name in: %s", err);
    cr_assert_not_null(strstr(err, want), "want '%s' in: %s", want, err);
    cr_assert_null(strchr(err, '\n'), "not one line: %s", err);
}

static void expect_bad(const char *header, size_t data_len, const char *want)
{
    write_st(header, data_len);
    expect_fail(-EINVAL, want);
}

static eng_st *open_ok(void)
{
    eng_st *st = NULL;
    char err[512] = "";
    int rc = eng_st_open(fpath, &st, err, sizeof err);
    cr_assert_eq(rc, 0, "open failed: %s", err);
    cr_assert_not_null(st);
    return st;
}

/* ---- a good file ------------------------------------------------------------- */

/* Deliberately not in name or offset order, with a gap, an empty tensor and a
 * scalar: none of that is an error. */
static const char good_header[] =
    "{\"b.norm\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]},"
    "\"__metadata__\":{\"format\":\"pt\",\"flm_version\":\"1.0.2\"},"
    "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"c.empty\":{\"dtype\":\"I64\",\"shape\":[0,4],\"data_offsets\":[30,30]},"
    "\"d.scalar\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[32,33]}}  ";

TestSuite(weights, .init = setup, .fini = teardown);

MCD_TEST(weights, good_file)
{
    write_st(good_header, 40);
    eng_st *st = open_ok();
    cr_assert_str_eq(eng_st_path(st), fpath);
    cr_assert_eq(eng_st_file_size(st), 8 + strlen(good_header) + 40);
    cr_assert_eq(eng_st_count(st), 4);
    const char *names[] = { "a.weight", "b.norm", "c.empty", "d.scalar" };
    for (size_t i = 0; i < 4; i++)
        cr_assert_str_eq(eng_st_at(st, i)->name, names[i]);
    cr_assert_null(eng_st_at(st, 4));

    const struct eng_st_tensor *a = eng_st_find(st, "a.weight");
    cr_assert_not_null(a);
    cr_assert_eq(a->dtype, ENG_ST_F32);
    cr_assert_eq(a->n_dims, 2);
    cr_assert_eq(a->shape[0], 2);
    cr_assert_eq(a->shape[1], 3);
    cr_assert_eq(a->numel, 6);
    cr_assert_eq(a->nbytes, 24);
    const uint8_t *base = (const uint8_t *)a->data;
    cr_assert_eq(base[0], 1);   /* data byte 0 */
    cr_assert_eq(base[5], 36);  /* data byte 5 */

    const struct eng_st_tensor *b = eng_st_find(st, "b.norm");
    cr_assert_eq((const uint8_t *)b->data - base, 24);
    cr_assert_eq(((const uint8_t *)b->data)[0], (uint8_t)(24 * 7 + 1));
    const struct eng_st_tensor *s = eng_st_find(st, "d.scalar");
    cr_assert_eq(s->n_dims, 0);
    cr_assert_eq(s->numel, 1);
    cr_assert_eq(eng_st_find(st, "c.empty")->numel, 0);

    cr_assert_str_eq(eng_st_metadata(st, "flm_version"), "1.0.2");
    cr_assert_null(eng_st_metadata(st, "nope"));
    cr_assert_null(eng_st_find(st, "__metadata__"));
    cr_assert_null(eng_st_find(st, "a.weigh"));

    const struct eng_st_tensor *t = NULL;
    char err[256];
    cr_assert_eq(eng_st_get(st, "a.weight", ENG_ST_F32, 2, (const int64_t[]){ 2, -1 }, &t, err,
                            sizeof err), 0);
    cr_assert_eq(t, a);
    eng_st_free(st);
}

MCD_TEST(weights, get_mismatch_and_missing)
{
    write_st(good_header, 40);
    eng_st *st = open_ok();
    const struct eng_st_tensor *t = (const void *)1;
    char err[256], want[512];
    cr_assert_eq(eng_st_get(st, "b.norm", ENG_ST_F32, 1, (const int64_t[]){ 3 }, &t, err,
                            sizeof err), -EINVAL);
    cr_assert_null(t);
    snprintf(want, sizeof want, "%s: tensor 'b.norm': expected F32 [3], got BF16 [3]", fpath);
    cr_assert_str_eq(err, want);
    cr_assert_eq(eng_st_get(st, "a.weight", ENG_ST_F32, 2, (const int64_t[]){ 3, 2 }, &t, err,
                            sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s: tensor 'a.weight': expected F32 [3, 2], got F32 [2, 3]",
             fpath);
    cr_assert_str_eq(err, want);
    cr_assert_eq(eng_st_get(st, "model.norm.weight", ENG_ST_BF16, 1, (const int64_t[]){ 3 }, &t,
                            err, sizeof err), -ENOENT);
    snprintf(want, sizeof want, "%s: tensor 'model.norm.weight' not found", fpath);
    cr_assert_str_eq(err, want);
    eng_st_free(st);
}

MCD_TEST(weights, empty_header_object)
{
    write_st("{}", 0);
    eng_st *st = open_ok();
    cr_assert_eq(eng_st_count(st), 0);
    cr_assert_null(eng_st_find(st, "x"));
    eng_st_free(st);
}

MCD_TEST(weights, free_null) { eng_st_free(NULL); }

/* ---- bad files --------------------------------------------------------------- */

MCD_TEST(weights, missing_file)
{
    expect_fail(-ENOENT, "cannot open");
}

MCD_TEST(weights, zero_length_file)
{
    write_bytes("", 0);
    expect_fail(-EINVAL, "file is 0 bytes, too short for the 8-byte header length");
}

MCD_TEST(weights, shorter_than_length_field)
{
    write_bytes("\x10\0\0\0\0\0\0", 7);
    expect_fail(-EINVAL, "file is 7 bytes");
}

MCD_TEST(weights, header_length_past_eof)
{
    size_t len;
    uint8_t *b = build(good_header, 40, (int64_t)strlen(good_header) + 41, &len);
    write_bytes(b, len);
    free(b);
    expect_fail(-EINVAL, "runs past the end of the file");
}

MCD_TEST(weights, header_length_absurd)
{
    size_t len;
    uint8_t *b = build("{}", 0, INT64_MAX, &len);
    write_bytes(b, len);
    free(b);
    expect_fail(-EINVAL, "is absurd");
}

/* A download cut short in the data region: the header is intact, the last
 * tensor's bytes are not there. */
MCD_TEST(weights, truncated_data)
{
    size_t len;
    uint8_t *b = build(good_header, 40, -1, &len);
    write_bytes(b, len - 8); /* data region 32 bytes: d.scalar [32,33] is past it */
    free(b);
    expect_fail(-EINVAL, "tensor 'd.scalar': data_offsets [32, 33] outside the data region of 32 bytes");
}

/* The header length claims more than the JSON it covers: cut mid-object. */
MCD_TEST(weights, truncated_header)
{
    size_t len;
    uint8_t *b = build(good_header, 0, 20, &len);
    write_bytes(b, 8 + 20);
    free(b);
    expect_fail(-EINVAL, "header is not valid JSON");
}

MCD_TEST(weights, header_not_json)
{
    expect_bad("this is not json", 0, "header is not valid JSON");
}

/* jansson quotes the bad token; a raw newline in it must not split the line
 * (found by fuzz-safetensors). */
MCD_TEST(weights, header_bad_json_with_newline)
{
    expect_bad("{\"a\\\n\n\":1}", 0, "header is not valid JSON");
}

MCD_TEST(weights, header_empty)
{
    expect_bad("", 0, "header is not valid JSON");
}

MCD_TEST(weights, header_not_object)
{
    expect_bad("[1, 2, 3]", 0, "header is not a JSON object");
}

MCD_TEST(weights, duplicate_key)
{
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
               2, "duplicate object key");
}

MCD_TEST(weights, tensor_not_object)
{
    expect_bad("{\"a\":[1]}", 0, "tensor 'a': expected an object");
}

MCD_TEST(weights, bad_dtype)
{
    expect_bad("{\"a\":{\"dtype\":\"Q4_1\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               "tensor 'a': unsupported dtype 'Q4_1' (expected one of BOOL, U8, I8");
    expect_bad("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               "tensor 'a': missing \"dtype\" string");
    expect_bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               "tensor 'a': missing \"dtype\" string");
}

MCD_TEST(weights, bad_shape)
{
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1,
               "tensor 'a': shape[0] is not a non-negative integer");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1,
               "shape[0] is not a non-negative integer");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":\"1\",\"data_offsets\":[0,1]}}", 1,
               "tensor 'a': missing \"shape\" array");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
               1, "tensor 'a': 9 dimensions, at most 8 supported");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],"
               "\"data_offsets\":[0,1]}}", 1, "tensor 'a': shape product overflows");
    expect_bad("{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
               "\"data_offsets\":[0,1]}}", 1, "tensor 'a': byte size overflows");
}

MCD_TEST(weights, shape_size_mismatch)
{
    expect_bad("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,10]}}", 10,
               "tensor 'w': data_offsets span 10 bytes, expected 12 for BF16 [2, 3]");
}

MCD_TEST(weights, offsets_out_of_range)
{
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 4,
               "tensor 'w': data_offsets [2, 6] outside the data region of 4 bytes");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[3,2]}}", 4,
               "tensor 'w': data_offsets [3, 2] outside the data region");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 4,
               "tensor 'w': data_offsets must be non-negative integers");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
               "tensor 'w': expected \"data_offsets\": [begin, end]");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 4,
               "expected \"data_offsets\"");
    /* Offsets near 2^63 must not wrap into range. */
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
               "\"data_offsets\":[9223372036854775807,9223372036854775807]}}", 4,
               "outside the data region");
}

MCD_TEST(weights, overlapping_tensors)
{
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[12,16]},"
               "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}", 16,
               "tensor 'c' (bytes 6..8) overlaps tensor 'a' (bytes 0..8)");
    /* Identical ranges. */
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
               "overlaps");
    /* An empty tensor inside another one's bytes occupies nothing: allowed. */
    write_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
             "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}", 4);
    eng_st_free(open_ok());
}

MCD_TEST(weights, bad_metadata)
{
    expect_bad("{\"__metadata__\":{\"a\":1}}", 0, "__metadata__ 'a' is not a string");
    expect_bad("{\"__metadata__\":[]}", 0, "__metadata__ is not an object");
}

/* A hostile name cannot break the one-line message. */
MCD_TEST(weights, name_with_newline)
{
    expect_bad("{\"a\\nb\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               "tensor 'a?b': unsupported dtype 'X'");
}

MCD_TEST(weights, directory_is_not_a_file)
{
    eng_st *st = NULL;
    char err[256];
    cr_assert_eq(eng_st_open(tmpdir, &st, err, sizeof err), -EISDIR);
    cr_assert_null(st);
    cr_assert_not_null(strstr(err, "not a regular file"));
}

/* ---- Q4_1 chunks -------------------------------------------------------------- */

MCD_TEST(weights, q4nx_init_shapes)
{
    static uint8_t dummy[1];
    struct eng_q4nx q;
    cr_assert_eq(eng_q4nx_init(&q, dummy, 1, 32, 256), 0);
    cr_assert_eq(q.row_blocks, 1);
    cr_assert_eq(q.col_blocks, 1);
    cr_assert_eq(eng_q4nx_init(&q, dummy, 2 * 2, 64, 257), 0);
    cr_assert_eq(q.col_blocks, 2);
    cr_assert_eq(eng_q4nx_init(&q, dummy, 8 * 3, 256, 600), 0);
    cr_assert_eq(eng_q4nx_init(&q, dummy, 3, 64, 257), -EINVAL);  /* wants 4 */
    cr_assert_eq(eng_q4nx_init(&q, dummy, 1, 33, 256), -EINVAL);  /* rows % 32 */
    cr_assert_eq(eng_q4nx_init(&q, dummy, 0, 0, 256), -EINVAL);
    cr_assert_eq(eng_q4nx_init(&q, dummy, 0, 32, 0), -EINVAL);
    cr_assert_eq(eng_q4nx_init(&q, dummy, 1, -32, 256), -EINVAL);
    /* MiniCPM5-2B: q_proj 2048x2048 -> 64*8, down_proj 2048x6144 -> 64*24,
     * lm_head 130560x2048 -> 4080*8. */
    cr_assert_eq(eng_q4nx_init(&q, dummy, 512, 2048, 2048), 0);
    cr_assert_eq(eng_q4nx_init(&q, dummy, 1536, 2048, 6144), 0);
    cr_assert_eq(eng_q4nx_init(&q, dummy, 32640, 130560, 2048), 0);
}

MCD_TEST(weights, q4nx_from_st)
{
    /* Two chunks of I8, e.g. W[32, 300]; and a BF16 norm. */
    write_st("{\"w\":{\"dtype\":\"I8\",\"shape\":[2,5120],\"data_offsets\":[0,10240]},"
             "\"n\":{\"dtype\":\"BF16\",\"shape\":[2,5120],\"data_offsets\":[10240,30720]}}",
             30720);
    eng_st *st = open_ok();
    struct eng_q4nx q;
    char err[512], want[512];
    cr_assert_eq(eng_q4nx_from_st(&q, st, "w", 32, 300, err, sizeof err), 0, "%s", err);
    cr_assert_eq(q.chunks, eng_st_find(st, "w")->data);
    cr_assert_eq(eng_q4nx_chunk(&q, 0, 1), (const uint8_t *)q.chunks + 5120);

    cr_assert_eq(eng_q4nx_from_st(&q, st, "w", 64, 300, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want,
             "%s: tensor 'w': expected I8 [4, 5120], got I8 [2, 5120] (Q4_1 chunks of W[64, 300])",
             fpath);
    cr_assert_str_eq(err, want);
    cr_assert_eq(eng_q4nx_from_st(&q, st, "n", 32, 300, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "expected I8 [2, 5120], got BF16 [2, 5120]"), "%s", err);
    cr_assert_eq(eng_q4nx_from_st(&q, st, "w", 48, 300, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "cannot be stored as Q4_1 chunks"), "%s", err);
    cr_assert_eq(eng_q4nx_from_st(&q, st, "gone", 32, 300, err, sizeof err), -ENOENT);
    cr_assert_not_null(strstr(err, "tensor 'gone' not found"), "%s", err);
    eng_st_free(st);
}

/* One chunk built by hand with the *other* nibble formula of docs/model-minicpm5.md
 * §3.9 (nibble index (r/16)*4096 + bc*512 + i*16 + r%16, c = 32*bc + i, even index
 * = low nibble)
 * and distinct values everywhere, read back through the accessors. */
MCD_TEST(weights, q4nx_chunk_layout)
{
    static uint8_t chunk[ENG_Q4NX_CHUNK_BYTES];
    memset(chunk, 0, sizeof chunk);
    for (int g = 0; g < 8; g++)
        for (int r = 0; r < 32; r++) {
            uint16_t d = eng_f32_to_bf16((float)(g * 32 + r + 1) / 64.0f);
            uint16_t m = eng_f32_to_bf16(-(float)(g * 32 + r));
            memcpy(chunk + 2 * (g * 32 + r), &d, 2);
            memcpy(chunk + 512 + 2 * (g * 32 + r), &m, 2);
        }
    for (int r = 0; r < 32; r++)
        for (int c = 0; c < 256; c++) {
            int q = (r * 7 + c * 3 + c / 16) & 15;
            int k = (r / 16) * 4096 + (c / 32) * 512 + (c % 32) * 16 + r % 16;
            chunk[1024 + k / 2] |= (uint8_t)(k % 2 == 0 ? q : q << 4);
        }
    struct eng_q4nx w;
    cr_assert_eq(eng_q4nx_init(&w, chunk, 1, 32, 200), 0);
    static float tile[32 * 256];
    eng_q4nx_dequant_tile(&w, 0, 0, tile);
    float row[200];
    for (int r = 0; r < 32; r++) {
        eng_q4nx_dequant_row(&w, r, row);
        for (int c = 0; c < 256; c++) {
            int g = c / 32;
            int q = (r * 7 + c * 3 + c / 16) & 15;
            float d = (float)(g * 32 + r + 1) / 64.0f, m = -(float)(g * 32 + r);
            cr_assert_eq(eng_q4nx_chunk_nibble(chunk, r, c), q, "r %d c %d", r, c);
            cr_assert_eq(eng_q4nx_chunk_scale(chunk, g, r), d);  /* exact in bf16 */
            cr_assert_eq(eng_q4nx_chunk_min(chunk, g, r), m);
            float p = (float)q * d;
            float want = p + m;
            cr_assert_eq(tile[r * 256 + c], want, "r %d c %d", r, c);
            cr_assert_eq(eng_q4nx_get(&w, r, c), want);
            if (c < 200)
                cr_assert_eq(row[c], want);
        }
    }
}

/* ---- BF16 -------------------------------------------------------------------- */

static uint16_t bf(uint32_t f32_bits)
{
    float f;
    memcpy(&f, &f32_bits, sizeof f);
    return eng_f32_to_bf16(f);
}

MCD_TEST(weights, bf16_rounding)
{
    cr_assert_eq(bf(0x3f800000), 0x3f80);     /* 1.0 */
    cr_assert_eq(bf(0x3f807fff), 0x3f80);     /* below half: down */
    cr_assert_eq(bf(0x3f808000), 0x3f80);     /* tie, even stays */
    cr_assert_eq(bf(0x3f818000), 0x3f82);     /* tie, odd rounds up to even */
    cr_assert_eq(bf(0x3f808001), 0x3f81);     /* above half: up */
    cr_assert_eq(bf(0xbf808001), 0xbf81);     /* sign symmetric */
    cr_assert_eq(bf(0x7f7fffff), 0x7f80);     /* max float rounds to +inf */
    cr_assert_eq(bf(0x7f800000), 0x7f80);     /* +inf */
    cr_assert_eq(bf(0xff800000), 0xff80);     /* -inf */
    cr_assert_eq(bf(0x00000001), 0x0000);     /* tiny denormal to +0 */
    cr_assert_eq(bf(0x80000000), 0x8000);     /* -0 */
    cr_assert_eq(bf(0x7f800001) & 0x7fc0, 0x7fc0);  /* NaN with low payload: quiet NaN */
    cr_assert_eq(bf(0xff800001), 0xffc0);
    cr_assert_eq(bf(0x7fffffff), 0x7fff);     /* NaN, no carry into the sign */
    cr_assert(isnan(eng_bf16_to_f32(bf(0x7f800001))));
    cr_assert_eq(eng_bf16_to_f32(0x4049), 3.140625f);
    uint8_t two[3] = { 0xff, 0x80, 0x3f };   /* unaligned BF16 1.0 at byte 1 */
    cr_assert_eq(eng_bf16_load(two + 1, 0), 1.0f);
}

/* Every non-NaN BF16 survives widening and narrowing unchanged. */
MCD_TEST(weights, bf16_round_trip_exhaustive)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = eng_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        cr_assert_eq(eng_f32_to_bf16(f), h, "0x%04x", h);
    }
}
