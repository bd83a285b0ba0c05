/* q4nx — the Q4_1 chunk layout of FastFlowLM Q4NX matmul weights
 * (docs/model-minicpm5.md §3.9), read with plain scalar code. This is the reference
 * reading that the fast kernels (engine/kernels/) and the numpy oracle are checked
 * against.
 *
 * A logical weight W[rows, cols] (HF orientation: rows = out, cols = in) is stored
 * as an I8 tensor [num_chunks, 5120]. The input dim is padded up to a multiple of
 * 256; rows must be a multiple of 32. Chunk f = rb * col_blocks + cb covers rows
 * 32*rb .. +31 and columns 256*cb .. +255. Inside a chunk (r = 0..31, c = 0..255,
 * g = c / 32):
 *   bytes    0 ..  511  BF16 scale d at index g*32 + r
 *   bytes  512 .. 1023  BF16 min   m at index g*32 + r
 *   bytes 1024 .. 5119  nibbles: q(r, c) in byte (r/16)*2048 + c*8 + (r%16)/2,
 *                       low nibble for even r, high nibble for odd r
 *   w[r][c] = q * d + m, computed in float32 (one rounding for the product, one
 *   for the sum; no FMA), so any float32 implementation gets the same bits.
 */
#ifndef MINICPMD_ENGINE_Q4NX_H
#define MINICPMD_ENGINE_Q4NX_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/safetensors.h"

#define ENG_Q4NX_CHUNK_BYTES 5120
#define ENG_Q4NX_ROWS 32     /* rows per chunk */
#define ENG_Q4NX_COLS 256    /* input columns per chunk */
#define ENG_Q4NX_GROUP 32    /* input columns per (d, m) pair */
#define ENG_Q4NX_MINS_OFF 512
#define ENG_Q4NX_NIBBLES_OFF 1024

/* A view of one Q4_1 weight; it borrows `chunks` (e.g. from an eng_st mapping). */
struct eng_q4nx {
    const uint8_t *chunks;  /* (row_blocks * col_blocks, 5120) */
    int64_t rows;           /* logical out */
    int64_t cols;           /* logical in (unpadded) */
    int64_t row_blocks;     /* rows / 32 */
    int64_t col_blocks;     /* ceil(cols / 256) */
};

/* Describe `num_chunks` chunks at `chunks` as W[rows, cols]. Returns 0, or
 * -EINVAL when rows is not a positive multiple of 32, cols is not positive, or
 * num_chunks != (rows / 32) * ceil(cols / 256). */
int eng_q4nx_init(struct eng_q4nx *q, const void *chunks, int64_t num_chunks, int64_t rows,
                  int64_t cols);

/* Find tensor `name` in `st`, check it is I8 [num_chunks, 5120] with the chunk
 * count that W[rows, cols] needs, and fill *q. Returns 0, or -ENOENT / -EINVAL
 * with one line in `err` naming the file, the tensor and what was expected. */
int eng_q4nx_from_st(struct eng_q4nx *q, const eng_st *st, const char *name, int64_t rows,
                     int64_t cols, char *err, size_t errlen);

/* Chunk of row block rb, column block cb (no bounds check beyond an assert). */
const uint8_t *eng_q4nx_chunk(const struct eng_q4nx *q, int64_t rb, int64_t cb);

/* Within one chunk: scale d and min m of (group g 0..7, row r 0..31), and the
 * 4-bit q of (row r 0..31, column c 0..255). */
float eng_q4nx_chunk_scale(const uint8_t *chunk, int g, int r);
float eng_q4nx_chunk_min(const uint8_t *chunk, int g, int r);
int eng_q4nx_chunk_nibble(const uint8_t *chunk, int r, int c);

/* One dequantized element of W, row < rows, col < col_blocks * 256 (padding
 * columns included). */
float eng_q4nx_get(const struct eng_q4nx *q, int64_t row, int64_t col);

/* Row `row` of W into out[0 .. cols - 1] (padding columns dropped). */
void eng_q4nx_dequant_row(const struct eng_q4nx *q, int64_t row, float *out);

/* The whole chunk (rb, cb) into out[32][256] (row-major), padding included. */
void eng_q4nx_dequant_tile(const struct eng_q4nx *q, int64_t rb, int64_t cb, float *out);

#endif
