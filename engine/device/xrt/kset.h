/* kset — an open NPU kernel set (OpenFlowLM-Next's export: manifest.json beside
 * the xclbin / insts.bin pairs, docs/npu-kernels.md §2) as minicpmd reads it: found,
 * parsed and checked against the loaded model before anything touches the device.
 *
 * Only the dense recipe is driven (family llama3 or qwen3, every layer of the one
 * layer type "dense": one `dx` run per layer, the `ln` + `lm` tail; dense.py
 * `programs()`), with the pack ops std_perm and put. Everything the device needs —
 * contexts, kernels, per-layer buffers, globals, the packing plan, the KV row and
 * position-record sizes — comes from the manifest, not from constants here.
 *
 * Pure C over jansson: built whether or not XRT is, so `--device xrt` can say what
 * is wrong with a kernel set on any machine. */
#ifndef MINICPMD_ENGINE_XRT_KSET_H
#define MINICPMD_ENGINE_XRT_KSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/types.h"

#define ENG_KSET_MANIFEST "manifest.json"
#define ENG_KSET_SUBDIR "open_kernels"
#define ENG_KSET_NAME 48
#define ENG_KSET_MAX_ARGS 8

enum eng_kset_op_kind { ENG_KSET_OP_STD_PERM = 0, ENG_KSET_OP_PUT };

/* One packing-plan op (recipes/pack.py apply_op). */
struct eng_kset_op {
    enum eng_kset_op_kind kind;
    char tensor[128];           /* "{l}" stands for the layer index */
    uint64_t dst;               /* byte offset in the destination buffer */
    uint64_t cap;               /* put: the slot's capacity */
    uint64_t nch, in_dim, chunk0; /* std_perm: pool chunks, K (a multiple of 256), first
                                     source chunk */
};

struct eng_kset_context {
    char name[ENG_KSET_NAME];
    char *xclbin;               /* relative to the set's directory */
};

struct eng_kset_kernel {
    char name[ENG_KSET_NAME];
    int context;                /* index into contexts */
    char *insts;                /* relative path of insts.bin */
    bool attnpos;               /* patch "attnpos" (per-token KV window / row / record) */
    uint64_t window;            /* attnpos: sliding window rows, 0 = every row */
    uint64_t rb;                /* attnpos: rows per block, 1 = unblocked */
};

/* A run: a kernel and its buffer arguments by name. */
struct eng_kset_step {
    int kernel;
    int n_args;
    char args[ENG_KSET_MAX_ARGS][ENG_KSET_NAME];
};

/* A global buffer: fixed bytes, or max_ctx rows of per_row bytes (a position
 * table, filled on the host from inv_freq). */
struct eng_kset_global {
    char name[ENG_KSET_NAME];
    uint64_t bytes;             /* fixed size; 0 for a per-row global */
    uint64_t per_row;
    double *inv_freq;           /* (n_inv_freq) RoPE frequencies of a per-row global */
    int n_inv_freq;
    uint64_t window;
};

struct eng_kset {
    char *dir;                  /* the set's directory (as found) */
    char *manifest_path;
    int version;
    char family[32];
    char spec_hash[80];
    int max_ctx_default;
    /* spec */
    int n_layers, n_heads, n_kv_heads, head_dim, hidden, intermediate, vocab;
    char quant[16];
    /* layout */
    uint64_t layout_vocab, real_vocab, chunk_bytes, pool_bytes, lmhead_pool_bytes;
    uint64_t kv_row, ptab_row, rotary_dim;
    /* the layer type every layer has */
    char layer_type[ENG_KSET_NAME];
    uint64_t consts_bytes, act_bytes, state_row;
    struct eng_kset_step layer_step;
    struct eng_kset_op *pool_ops, *consts_ops, *lm_ops;
    int n_pool_ops, n_consts_ops, n_lm_ops;
    struct eng_kset_step tail[2];   /* ln, then lm */
    int n_tail;
    struct eng_kset_context *contexts;
    int n_contexts;
    struct eng_kset_kernel *kernels;
    int n_kernels;
    struct eng_kset_global *globals;
    int n_globals;
    char embed_tensor[128], norm_tensor[128];
    uint64_t norm_bytes;
    void *hf_config_check;      /* json_t *, owned */
    void *hf_config_defaults;   /* json_t *, owned, may be NULL */
};

/* The set's directory: `explicit_dir` when given (--npu-kernels), else
 * "<pack_dir>/open_kernels". Returns 0 with the path in out, or -ENOENT when the
 * directory has no manifest.json (err says where it looked and what to do). */
int eng_kset_locate(const char *explicit_dir, const char *pack_dir, char *out, size_t outlen,
                    char *err, size_t errlen);

/* Parse <dir>/manifest.json. Returns 0 (free with eng_kset_free) or -ENOENT /
 * -EINVAL / -ENOMEM with one line in err naming the file and the key. */
int eng_kset_load(const char *dir, struct eng_kset *ks, char *err, size_t errlen);
void eng_kset_free(struct eng_kset *ks);   /* zeroes *ks; a zeroed ks is fine */

/* Check the set against the model: layers, heads, kv heads, head_dim, hidden,
 * intermediate, vocab, the quantization (q4_1 needs a model.q4nx pack), and every
 * key of hf_config_check against config.json. Returns 0 or -EINVAL with a line
 * naming the mismatch, e.g. "kernel set …: num_layers is 42, the model has 4". */
int eng_kset_check_model(const struct eng_kset *ks, const eng_pack *pack, char *err,
                         size_t errlen);

/* Every file the manifest names exists: xclbins non-empty, insts.bin non-empty and a
 * whole number of 32-bit words. Returns 0 or -ENOENT / -EINVAL naming the file. */
int eng_kset_check_files(const struct eng_kset *ks, char *err, size_t errlen);

/* Index by name, or -1. */
int eng_kset_kernel_index(const struct eng_kset *ks, const char *name);
const struct eng_kset_global *eng_kset_global(const struct eng_kset *ks, const char *name);

#endif
