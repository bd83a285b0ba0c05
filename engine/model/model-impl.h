/* Internals shared by model.c (opening a model: binding and checking its weights)
 * and forward.c (sequences and the forward pass). Not for use outside engine/. */
#ifndef MINICPMD_ENGINE_MODEL_IMPL_H
#define MINICPMD_ENGINE_MODEL_IMPL_H

#include <stdint.h>

#include "engine/kernels/kernels.h"
#include "engine/model/model.h"
#include "engine/kernels/pool.h"
#include "engine/model/safetensors.h"
#include "util/defaults.h"

#define ENG_MAX_SHARDS 64
#define ENG_MAX_KV_HEADS 64
/* Positions one batch may hold: eng_seq_forward() cuts longer prompts. */
#define ENG_MAX_BATCH UT_MAX_BATCH

enum eng_wfmt { ENG_W_Q4_1, ENG_W_BF16 };

/* A weight W[rows, cols] in HF orientation (rows = out, cols = in), borrowed from
 * the mapping. Q4_1: chunks of 32 x 256 (rows % 32 == 0); BF16: row-major. */
struct eng_mat {
    enum eng_wfmt fmt;
    const uint8_t *data;
    int rows, cols;
};

struct eng_layer {
    const uint16_t *attn_norm, *ffn_norm; /* (n_embd) BF16 */
    const uint16_t *q_norm, *k_norm;      /* (head_dim) BF16, NULL when not applied */
    struct eng_mat wq;                    /* (n_heads * head_dim, n_embd) */
    /* The real KV heads only: rows of stored head u * kv_replication, so a pack
     * with replicated heads computes each distinct one once. */
    struct eng_mat wk[ENG_MAX_KV_HEADS], wv[ENG_MAX_KV_HEADS]; /* (head_dim, n_embd) */
    struct eng_mat wo;                    /* (n_embd, n_heads * head_dim) */
    struct eng_mat wgate, wup;            /* (n_ff, n_embd) */
    struct eng_mat wdown;                 /* (n_embd, n_ff) */
};

struct eng_model {
    const eng_pack *pack;
    struct eng_model_opts opts;
    struct eng_model_info info;
    char isa[32];
    eng_st *st[ENG_MAX_SHARDS];
    int n_st;
    eng_pool *pool;

    const uint16_t *embed;     /* (n_vocab, n_embd) BF16 */
    const uint16_t *out_norm;  /* (n_embd) BF16 */
    struct eng_mat lm_head;    /* (n_vocab, n_embd) */
    struct eng_layer *layers;  /* (n_layers) */
    void *anon;                /* --weights copy: the weights' region (place.c) */
    size_t anon_len;
};

/* kchoice.c: the decode kernel by measurement (info.decode_*). */
/* One line to the model's log callback (none: nothing), at level lv. */
void eng__model_say(const eng_model *m, enum eng_log_level lv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void eng__model_choose_kernel(eng_model *m);

/* place.c: copy the weights per opts.weights (falls back to the mapping with a
 * line in the log: never fails); and unmap the copy. */
int eng__model_place_weights(eng_model *m);
void eng__model_unplace_weights(eng_model *m);

/* A view of rows [row0, row0 + n) of m (row0 and n multiples of 32 for Q4_1). */
struct eng_mat eng__mat_rows(const struct eng_mat *m, int row0, int n);

#endif
