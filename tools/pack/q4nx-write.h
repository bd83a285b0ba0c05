/* Writing Q4NX files: a safetensors container whose matmul weights are Q4_1
 * chunks (docs/model-minicpm5.md §3.9). The reader lives in engine/model/q4nx.c; this
 * is the producer side for `minicpmd-pack gen` and `convert`.
 *
 * The writer streams: the caller declares every tensor up front (so the header
 * with all data_offsets can go first), then appends each tensor's bytes in the
 * declared order. Nothing but one row block needs to be in memory, which is what
 * lets the 1.6 GB `2b` pack be generated on a small machine. */
#ifndef MINICPMD_TOOLS_Q4NX_WRITE_H
#define MINICPMD_TOOLS_Q4NX_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define Q4NX_CHUNK_BYTES 5120  /* 32 rows x 256 columns: 512 B d, 512 B m, 4096 B nibbles */
#define Q4NX_CHUNK_ROWS 32
#define Q4NX_CHUNK_COLS 256

enum q4nx_kind {
    Q4NX_BF16,  /* dtype BF16, shape [rows, cols] (or [cols] when rows == 0) */
    Q4NX_Q4_1,  /* dtype I8, shape [num_chunks, 5120] holding W[rows, cols] */
};

struct q4nx_tensor {
    char name[96];
    enum q4nx_kind kind;
    int64_t rows, cols;  /* the logical (HF) shape W[rows = out, cols = in] */
    uint64_t begin, end; /* data_offsets, filled by q4nx_writer_open */
};

struct q4nx_writer {
    /* private */
    FILE *f;
    const struct q4nx_tensor *t;
    size_t n, cur;     /* tensors, and the one being appended */
    uint64_t pos;      /* bytes of data written so far */
};

/* Bytes a tensor occupies in the file; 0 for a Q4_1 shape that cannot be packed
 * (rows not a multiple of 32). */
uint64_t q4nx_tensor_bytes(const struct q4nx_tensor *t);

/* Number of 5,120-byte chunks of a Q4_1 tensor W[rows, cols]. */
int64_t q4nx_num_chunks(int64_t rows, int64_t cols);

/* Creates `path`, lays out the n tensors back to back in array order, and writes
 * the header. The array is borrowed until q4nx_writer_close and gets its
 * begin/end filled in. Returns 0 or -errno / -EINVAL (unpackable shape). */
int q4nx_writer_open(struct q4nx_writer *w, const char *path, struct q4nx_tensor *t, size_t n);

/* Appends bytes of the current tensor; moving on to the next tensor is implicit
 * when one is complete. Writing past the declared sizes is -EOVERFLOW. */
int q4nx_writer_append(struct q4nx_writer *w, const void *data, size_t len);

/* Checks every tensor was written in full, flushes and closes (also on error
 * paths: then it only closes). Returns 0, -EIO or -EPROTO (short data). */
int q4nx_writer_close(struct q4nx_writer *w);

/* Progress on stderr while a file of `total` bytes is written: once it is 64 MB
 * or more, a line per 5 % ("<who>: 35% (700 of 2000 MB) 3.2 s"). */
struct q4nx_progress {
    const char *who;
    uint64_t total, done, next;
    double t0;
};
void q4nx_progress_start(struct q4nx_progress *pr, const char *who, uint64_t total);
void q4nx_progress_add(struct q4nx_progress *pr, uint64_t n);

struct pack_spec;
/* The file tensor for a pack tensor: Q4_1 chunks for a matmul weight, else BF16.
 * A matmul whose rows are not a multiple of 32 cannot be packed: -EINVAL, after
 * one line on stderr starting with `who`. */
int pack_q4nx_tensor(const char *who, const struct pack_spec *s, struct q4nx_tensor *t);

/* float -> bfloat16 with round-to-nearest-even, NaN kept a (quiet) NaN. */
uint16_t q4nx_f32_to_bf16(float x);
float q4nx_bf16_to_f32(uint16_t h);

/* Quantizes one block of 32 rows of W (row-major, `cols` floats per row, row
 * stride `cols`) into ceil(cols/256) chunks at out, in column order. Columns past
 * `cols` up to the next multiple of 256 are zero padding. Per (32-column group,
 * row): m = min, d = (max - min) / 15, q = floor((w - m) / d + 0.5) clamped to
 * 0..15 (as llama.cpp / gguf-py quantize Q4_1), then d and m stored as BF16. */
void q4nx_pack_rowblock(const float *w, int64_t cols, uint8_t *out);

/* n floats as BF16 (round to nearest even), little-endian, at out (2n bytes). */
void q4nx_put_bf16(const float *x, size_t n, uint8_t *out);

/* nr rows of tensor t (floats, row stride t->cols) in its file encoding at out:
 * Q4_1 chunks (nr must be 32) or BF16. Returns the bytes written. */
size_t q4nx_encode_rows(const struct q4nx_tensor *t, const float *rows, int64_t nr,
                        uint8_t *out);

/* The same layout from Q4_1 parts already made (a GGUF's Q4_0/Q4_1 blocks, kept
 * as they are): q [32][cols] codes 0..15, d and m [32][cols / 32] BF16 bits;
 * cols a multiple of 32. */
void q4nx_pack_rowblock_codes(const uint8_t *q, const uint16_t *d, const uint16_t *m,
                              int64_t cols, uint8_t *out);

#endif
