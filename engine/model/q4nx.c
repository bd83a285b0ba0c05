/* Q4_1 chunk reading, deliberately scalar and index-by-index: every accessor is
 * the docs/model-minicpm5.md §3.9 formula written out once, to check against it.
 */
#include "engine/err.h"
#include "engine/model/q4nx.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/kernels/bf16.h"

/* Chunks W[rows, cols] needs, or -1 if the shape cannot be stored. */
static int64_t chunks_needed(int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0 || rows % ENG_Q4NX_ROWS != 0)
        return -1;
    int64_t n, cb = cols / ENG_Q4NX_COLS + (cols % ENG_Q4NX_COLS != 0);
    if (__builtin_mul_overflow(rows / ENG_Q4NX_ROWS, cb, &n))
        return -1;
    return n;
}

int eng_q4nx_init(struct eng_q4nx *q, const void *chunks, int64_t num_chunks, int64_t rows,
                  int64_t cols)
{
    int64_t need = chunks_needed(rows, cols);
    if (need < 0 || need != num_chunks)
        return -EINVAL;
    q->chunks = chunks;
    q->rows = rows;
    q->cols = cols;
    q->row_blocks = rows / ENG_Q4NX_ROWS;
    q->col_blocks = need / q->row_blocks;
    return 0;
}

int eng_q4nx_from_st(struct eng_q4nx *q, const eng_st *st, const char *name, int64_t rows,
                     int64_t cols, char *err, size_t errlen)
{
    int64_t need = chunks_needed(rows, cols);
    if (need < 0)
        return eng__fail(err, errlen, -EINVAL,
                    "%s: tensor '%s': W[%lld, %lld] cannot be stored as Q4_1 chunks (rows "
                    "must be a positive multiple of 32, cols positive)",
                    eng_st_path(st), name, (long long)rows, (long long)cols);
    const struct eng_st_tensor *t;
    int rc = eng_st_get(st, name, ENG_ST_I8, 2, (const int64_t[]){ need, ENG_Q4NX_CHUNK_BYTES },
                        &t, err, errlen);
    if (rc < 0) {
        /* Say why that chunk count: the raw "expected I8 [n, 5120]" alone
         * leaves the reader to redo the arithmetic. */
        if (rc == -EINVAL && err && errlen) {
            size_t n = strnlen(err, errlen);
            if (n + 1 < errlen)
                snprintf(err + n, errlen - n, " (Q4_1 chunks of W[%lld, %lld])",
                         (long long)rows, (long long)cols);
        }
        return rc;
    }
    return eng_q4nx_init(q, t->data, t->shape[0], rows, cols);
}

const uint8_t *eng_q4nx_chunk(const struct eng_q4nx *q, int64_t rb, int64_t cb)
{
    assert(rb >= 0 && rb < q->row_blocks && cb >= 0 && cb < q->col_blocks);
    return q->chunks + (size_t)(rb * q->col_blocks + cb) * ENG_Q4NX_CHUNK_BYTES;
}

float eng_q4nx_chunk_scale(const uint8_t *chunk, int g, int r)
{
    return eng_bf16_load(chunk, (size_t)(g * ENG_Q4NX_ROWS + r));
}

float eng_q4nx_chunk_min(const uint8_t *chunk, int g, int r)
{
    return eng_bf16_load(chunk + ENG_Q4NX_MINS_OFF, (size_t)(g * ENG_Q4NX_ROWS + r));
}

int eng_q4nx_chunk_nibble(const uint8_t *chunk, int r, int c)
{
    uint8_t b = chunk[ENG_Q4NX_NIBBLES_OFF + (r / 16) * 2048 + c * 8 + (r % 16) / 2];
    return r % 2 == 0 ? b & 0x0f : b >> 4;
}

/* q * d + m as two float32 roundings. Separate statements, so that no compiler
 * contracts them into an FMA (clang's default -ffp-contract=on only fuses within
 * one expression; GCC in ISO C mode does not fuse) and numpy's float32
 * `q * d + m` gives identical bits. */
static float dequant(const uint8_t *chunk, int r, int c)
{
    int g = c / ENG_Q4NX_GROUP;
    float p = (float)eng_q4nx_chunk_nibble(chunk, r, c) * eng_q4nx_chunk_scale(chunk, g, r);
    float w = p + eng_q4nx_chunk_min(chunk, g, r);
    return w;
}

float eng_q4nx_get(const struct eng_q4nx *q, int64_t row, int64_t col)
{
    const uint8_t *ch = eng_q4nx_chunk(q, row / ENG_Q4NX_ROWS, col / ENG_Q4NX_COLS);
    return dequant(ch, (int)(row % ENG_Q4NX_ROWS), (int)(col % ENG_Q4NX_COLS));
}

void eng_q4nx_dequant_row(const struct eng_q4nx *q, int64_t row, float *out)
{
    for (int64_t c = 0; c < q->cols; c++)
        out[c] = eng_q4nx_get(q, row, c);
}

void eng_q4nx_dequant_tile(const struct eng_q4nx *q, int64_t rb, int64_t cb, float *out)
{
    const uint8_t *ch = eng_q4nx_chunk(q, rb, cb);
    for (int r = 0; r < ENG_Q4NX_ROWS; r++)
        for (int c = 0; c < ENG_Q4NX_COLS; c++)
            out[r * ENG_Q4NX_COLS + c] = dequant(ch, r, c);
}
