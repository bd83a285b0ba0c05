/* safetensors — read-only, validated access to a safetensors file (Hugging Face
 * checkpoints and FastFlowLM's model.q4nx, which is the same container).
 *
 * Layout: an 8-byte little-endian header length N, N bytes of a JSON object
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, ..., "__metadata__"?},
 * then the data region; offsets are relative to byte 8 + N.
 *
 * eng_st_open() maps the file (mmap, MAP_PRIVATE, read-only: never copied) and
 * checks everything before returning: the header length against the file size,
 * the JSON, every dtype, shape and offset range, that each tensor's byte size is
 * numel * dtype size, and that no two tensors overlap. After a successful open,
 * every eng_st_tensor's `data` .. `data + nbytes` lies inside the mapping.
 *
 * The mapping is private and read-only, but a file truncated by someone else
 * while mapped still faults (SIGBUS) on access: packs must not be rewritten in
 * place while the daemon runs.
 *
 * Thread safety: an eng_st is immutable after open; any thread may read it.
 */
#ifndef MINICPMD_ENGINE_SAFETENSORS_H
#define MINICPMD_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef struct eng_st eng_st;

/* Accepted dtypes: every fixed-size numeric type of the safetensors spec except
 * the FP8 and sub-byte ones, which no MiniCPM5 file uses. */
enum eng_st_dtype {
    ENG_ST_BOOL = 0,
    ENG_ST_U8,
    ENG_ST_I8,
    ENG_ST_I16,
    ENG_ST_U16,
    ENG_ST_F16,
    ENG_ST_BF16,
    ENG_ST_I32,
    ENG_ST_U32,
    ENG_ST_F32,
    ENG_ST_I64,
    ENG_ST_U64,
    ENG_ST_F64,
    ENG_ST_DTYPE_COUNT
};

#define ENG_ST_MAX_DIMS 8
/* The JSON header may not exceed this (the reference implementation's limit). */
#define ENG_ST_MAX_HEADER (100u << 20)

struct eng_st_tensor {
    const char *name;
    enum eng_st_dtype dtype;
    int n_dims;                       /* 0 (a scalar) .. ENG_ST_MAX_DIMS */
    int64_t shape[ENG_ST_MAX_DIMS];   /* shape[0] outermost; unused dims are 0 */
    int64_t numel;                    /* product of shape (1 for a scalar) */
    uint64_t offset;                  /* from the start of the data region */
    uint64_t nbytes;                  /* numel * dtype size */
    const void *data;                 /* into the mapping; NOT necessarily aligned */
};

/* Open and validate `path`. Returns 0 and a handle the caller frees with
 * eng_st_free(), or a negative errno (-ENOENT, -EINVAL for a bad file, -ENOMEM)
 * with one line in `err` naming the file, the tensor and what was expected. On
 * failure *out is NULL and nothing is left mapped or allocated. */
int eng_st_open(const char *path, eng_st **out, char *err, size_t errlen);
/* Unmap and free; accepts NULL. Invalidates every tensor pointer. */
void eng_st_free(eng_st *st);

const char *eng_st_path(const eng_st *st);
uint64_t eng_st_file_size(const eng_st *st);
/* The start of the file's mapping (eng_st_file_size bytes). */
const void *eng_st_map(const eng_st *st);

/* Tensors in name order (strcmp), i in 0 .. eng_st_count() - 1. */
size_t eng_st_count(const eng_st *st);
const struct eng_st_tensor *eng_st_at(const eng_st *st, size_t i);
/* By exact name, or NULL. */
const struct eng_st_tensor *eng_st_find(const eng_st *st, const char *name);

/* Look up `name` and check its dtype and shape (`n_dims` entries of `shape`; an
 * entry of -1 matches any size). Returns 0 and the tensor, or -ENOENT / -EINVAL
 * with e.g. "model.q4nx: tensor 'model.norm.weight': expected BF16 [2048], got
 * F32 [2048]" in `err`. */
int eng_st_get(const eng_st *st, const char *name, enum eng_st_dtype dtype, int n_dims,
               const int64_t *shape, const struct eng_st_tensor **out, char *err,
               size_t errlen);

/* __metadata__ value for `key`, or NULL. Strings live as long as the handle. */
const char *eng_st_metadata(const eng_st *st, const char *key);

const char *eng_st_dtype_name(enum eng_st_dtype dt);
size_t eng_st_dtype_size(enum eng_st_dtype dt);
/* Parse a safetensors dtype string ("BF16"); -1 if not accepted. */
int eng_st_dtype_parse(const char *s);

/* Write "[2048, 256]" (or "[]") into buf; returns buf. For error messages. */
char *eng_st_shape_str(const struct eng_st_tensor *t, char *buf, size_t len);

#endif
