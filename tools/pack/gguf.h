/* GGUF (llama.cpp's model file, versions 2 and 3): a validating reader over a
 * byte buffer, and the little there is to decode its tensor blocks.
 *
 * Anchor: the GGUF spec (gguf.md of the ggml repository) and gguf-py's
 * constants.py (the file layout, the metadata value types and the ggml_type numbers and block sizes of F32, F16,
 * Q4_0, Q4_1, Q8_0 and BF16). Nothing is copied from them.
 *
 * Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count; metadata as
 * (string key, u32 type, value); tensor infos as (string name, u32 n_dims, u64
 * dims[n_dims] innermost first, u32 ggml type, u64 offset); padding to
 * general.alignment (default 32); the data region, offsets relative to its start.
 * A string is a u64 length and that many bytes (no NUL).
 *
 * A GGUF file is untrusted input: gguf_parse checks every length against the
 * bytes left, every count against a limit, every tensor's type, shape (the row a
 * whole number of blocks, no product overflow) and offset (aligned, inside the
 * buffer, no two tensors overlapping) before returning, so that afterwards
 * every accessor below stays inside the buffer. Keys and names with a NUL byte,
 * duplicate keys or names, nested arrays and big-endian files are refused. */
#ifndef MINICPMD_TOOLS_PACK_GGUF_H
#define MINICPMD_TOOLS_PACK_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Metadata value types (gguf_metadata_value_type). */
enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12,
};

/* The ggml tensor types this reader accepts (ggml_type numbers). */
enum gguf_ttype {
    GGUF_T_F32 = 0, GGUF_T_F16 = 1, GGUF_T_Q4_0 = 2, GGUF_T_Q4_1 = 3, GGUF_T_Q8_0 = 8,
    GGUF_T_BF16 = 30,
};

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_TENSORS (1u << 16)
#define GGUF_MAX_KV (1u << 16)
#define GGUF_MAX_ARRAY (1u << 26)  /* elements of one metadata array */

struct gguf_kv {
    char *key;             /* NUL-terminated copy */
    enum gguf_vtype type;
    enum gguf_vtype atype; /* arrays: the element type */
    uint64_t n;            /* arrays: element count; strings: byte length */
    const uint8_t *p;      /* the value (arrays: the first element; strings: the bytes) */
};

struct gguf_tensor {
    char *name;            /* NUL-terminated copy */
    enum gguf_ttype type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] innermost (a row's length); unused dims 1 */
    int64_t rows;          /* product of ne[1..] */
    uint64_t row_bytes, nbytes, offset;
    const uint8_t *data;   /* inside the buffer */
};

struct gguf {
    uint32_t version;
    uint32_t alignment;
    size_t n_kv, n_tensors;
    struct gguf_kv *kv;
    struct gguf_tensor *t;
    /* private: the mapping of gguf_open, if any */
    void *map;
    size_t map_len;
};

/* Parses `len` bytes at `buf` (borrowed: it must outlive g). Returns 0, or
 * -EINVAL / -ENOMEM with one line in err (offset and what was wrong); nothing to
 * free on failure. */
int gguf_parse(struct gguf *g, const void *buf, size_t len, char *err, size_t errlen);
/* Maps `path` read-only and parses it; gguf_close unmaps. */
int gguf_open(struct gguf *g, const char *path, char *err, size_t errlen);
void gguf_close(struct gguf *g);
/* 1 when the file at `path` starts with the GGUF magic. */
int gguf_is_gguf(const char *path);

const struct gguf_kv *gguf_kv(const struct gguf *g, const char *key);
const struct gguf_tensor *gguf_tensor(const struct gguf *g, const char *name);
const char *gguf_ttype_name(enum gguf_ttype t);
const char *gguf_vtype_name(enum gguf_vtype t);

/* Typed reads of a metadata value: 0, -ENOENT (absent) or -EINVAL (another
 * type; the message names the key and both types). Any integer type is an
 * integer (range-checked into int64); F32 and F64 are reals. A string is
 * returned with its length (not NUL-terminated). */
int gguf_get_int(const struct gguf *g, const char *key, int64_t *out, char *err, size_t errlen);
int gguf_get_real(const struct gguf *g, const char *key, double *out, char *err, size_t errlen);
int gguf_get_bool(const struct gguf *g, const char *key, int *out, char *err, size_t errlen);
int gguf_get_str(const struct gguf *g, const char *key, const char **s, size_t *len, char *err,
                 size_t errlen);

/* A string array's elements in order: calls fn(i, s, len, arg) for each, stopping
 * at (and returning) the first non-zero result. */
int gguf_str_array(const struct gguf_kv *kv, int (*fn)(uint64_t i, const char *s, size_t len,
                                                       void *arg), void *arg);
/* Element i of an integer array as int64 (the caller checked kv->atype is an
 * integer type and i < kv->n). */
int64_t gguf_int_at(const struct gguf_kv *kv, uint64_t i);

/* Row r of a tensor as ne[0] floats (every accepted type; exact for F32, F16,
 * BF16; q*d (+ m) in float32 for the block types). */
void gguf_row_f32(const struct gguf_tensor *t, int64_t r, float *out);
/* Row r of a Q4_0 or Q4_1 tensor as codes (ne[0] bytes 0..15) and per 32-column
 * block d and m as floats (the F16 values widened exactly). A Q4_0 block is a
 * Q4_1 block with m = -8 d (exact in float32): code q means (q - 8) d. */
void gguf_row_q4(const struct gguf_tensor *t, int64_t r, uint8_t *q, float *d, float *m);

/* IEEE binary16 widened to float, exactly (subnormals, inf and NaN kept); the
 * one F16 conversion of the pack tools (GGUF rows and safetensors F16 tensors). */
float gguf_f16_to_f32(uint16_t h);

#endif
