/* eng_model — the MiniCPM5 forward pass on the CPU.
 *
 * A model is opened over an eng_pack (it borrows the pack: free the model first)
 * and maps its weights: Q4NX Q4_1 chunks or Hugging Face BF16; with
 * opts.weights COPY or AUTO all but the embedding are copied once into 2 MB-page
 * anonymous memory (engine/model/place.c), with identical bytes. A
 * sequence owns a KV cache and runs batches of positions in three steps, so a
 * scheduler can cut the layers into chunks (the NPU worker's runlists):
 *
 *   eng_seq_embed(s, tokens, n)        start a batch at positions len .. len+n-1
 *   eng_seq_layers(s, l0, l1)          run layers [l0, l1) over it (any split)
 *   eng_seq_head(s, logits)            final norm + lm_head of the batch's last
 *                                      position; the batch's positions join the
 *                                      sequence (len += n)
 *
 * Numerics: activations float32; RMSNorm, RoPE, softmax and SwiGLU in float32;
 * the KV cache in BF16 (round to nearest even), the model's real KV heads only.
 * Matrix products take the activations quantized to int8 per 32 columns
 * (ENG_ACT_Q8, the fast default: AVX-512 VNNI) or float32 (ENG_ACT_F32, exact
 * arithmetic on the dequantized weights: the reference the tests compare with).
 *
 * Threading: a model and its sequences belong to one thread at a time (the
 * worker); the model's compute pool does the parallel work inside each call. */
#ifndef MINICPMD_ENGINE_MODEL_H
#define MINICPMD_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/types.h"

typedef struct eng_model eng_model;
typedef struct eng_seq eng_seq;

struct eng_model_opts {
    int n_threads;          /* compute pool size, caller included; <= 0: online CPUs */
    enum eng_act act;
    enum eng_qk_norm qk_norm;
    int no_kv_dedup;        /* compute replicated KV heads as stored (tests) */
    enum eng_weights_place weights;  /* 0: the file mapping */
    /* (optional) where the decode kernel measured at load is remembered, per CPU
     * and shapes (engine/model/kchoice.c); NULL: measured at every load */
    const char *state_dir;
    /* (optional) one line per finding: warnings (the all-ones QK-norm shim) and
     * the weights' copy (progress, huge pages) at INFO. */
    eng_log_fn log;
    void *log_ctx;
};

struct eng_model_info {
    struct eng_hparams hp;  /* as in config.json */
    int n_kv_real;          /* KV heads computed and cached (after de-duplication) */
    int kv_replication;     /* stored / real: 4 for an 8-head pack of MiniCPM5 */
    int qk_norm;            /* 1 when q_norm/k_norm are applied */
    int n_threads;
    int64_t kv_bytes_per_token;  /* all layers, K and V */
    int64_t weight_bytes_per_token; /* weight bytes one decode step reads */
    int64_t macs_per_token;      /* multiply-accumulates of one decode step's matmuls */
    int64_t head_macs;           /* of those, the lm_head's: a prompt runs it once, for its
                                  * last position, not once per token */
    const char *isa;             /* kernels in use, e.g. "avx512-vnni" */
    const char *weights;         /* "mmap" or "copy": where the matmul weights are read */
    /* The one-token int8 kernel (eng_decode_kernel) and how it was chosen:
     * "measured" at this load, "remembered" from the state directory, "forced"
     * (eng_kernels_set_isa), "only one" usable, or "f32" / "no Q4_1 weights" (no
     * int8 kernel runs). */
    const char *decode_kernel;
    const char *decode_choice;
    /* every candidate with its rate on this model's matrices, GB/s of weights
     * (measured or remembered; 0 when not measured) */
    int n_decode_rates;
    struct eng_decode_rate {
        const char *name;
        double gb_s;
    } decode_rates[4];
    /* The kernel of decode batches of 2 .. ENG_GEMV_MAX_TOK tokens (eng_few_kernel),
     * chosen alike at that many tokens: every candidate's rate there, GB/s of
     * weights (n_decode_rates of them). */
    const char *few_kernel;
    struct eng_decode_rate few_rates[4];
    int64_t weights_bytes;       /* copy: bytes copied (all but the embedding) */
    int64_t weights_huge_bytes;  /* copy: of those, in huge pages at load (smaps
                                    AnonHugePages, or all with hugetlb); -1: unknown */
};

int eng_model_open(const eng_pack *pack, const struct eng_model_opts *o, eng_model **out,
                   char *err, size_t errlen);
void eng_model_free(eng_model *m);
const struct eng_model_info *eng_model_get_info(const eng_model *m);

/* A sequence with room for n_ctx positions (1 .. hp.n_ctx_train). */
int eng_seq_new(eng_model *m, int n_ctx, eng_seq **out, char *err, size_t errlen);
void eng_seq_free(eng_seq *s);
int eng_seq_len(const eng_seq *s);   /* positions in the KV cache */
/* Forget positions n.. (n <= len) and any batch in flight: prompt-cache reuse, or
 * a device fault that lost the KV state. */
void eng_seq_truncate(eng_seq *s, int n);
/* Free the batch buffers of a sequence with no batch in flight (they grow again
 * on its next batch, ~115 KB per position of a 2B prompt chunk): an idle sequence
 * then holds only its KV cache. */
void eng_seq_trim(eng_seq *s);

/* Returns 0, or -EINVAL (bad token id, n < 1, len + n > n_ctx, layers out of
 * order or out of range, head before all layers ran) with the reason in the
 * sequence's last error (eng_seq_error). Nothing is half-done on error. */
int eng_seq_embed(eng_seq *s, const int32_t *tokens, int n);
int eng_seq_layers(eng_seq *s, int l_begin, int l_end);
int eng_seq_head(eng_seq *s, float *logits /* n_vocab */);
/* eng_seq_head with the logits of the batch's last `rows` positions (1 .. n), row
 * after row (rows * n_vocab floats): a prompt scored in prefill's batches. Each row
 * is the number decode would give for that position (batch invariance). */
int eng_seq_head_rows(eng_seq *s, float *logits, int rows);
const char *eng_seq_error(const eng_seq *s);

/* Several sequences' batches as one (continuous batching): seqs[0] leads and
 * holds the batch; seqs[i] contributes tokens[i][0 .. n[i]) at its own positions,
 * into its own KV cache (attention per sequence). Then eng_seq_layers(seqs[0], …)
 * as for one sequence, and eng_seqs_head(seqs[0], logits): logits[i] (NULL: none)
 * gets sequence i's last position, and every sequence's positions join it. Each
 * sequence's numbers are bit-identical to running its batch alone: every kernel
 * computes a token's row the same whatever else is in the batch. The sequences
 * are distinct, of the same model, none with a batch in flight, none with a longer
 * context than the leader; at most ENG_MAX_BATCH positions in all. Errors are
 * reported on the leader (eng_seq_error(seqs[0])). */
int eng_seqs_embed(eng_seq *const *seqs, const int32_t *const *tokens, const int *n, int nseq);
int eng_seqs_head(eng_seq *lead, float *const *logits);
/* The same with nrows[i] (>= 1; NULL: all 1) rows for sequence i: its last
 * nrows[i] positions' logits, row after row. */
int eng_seqs_head_rows(eng_seq *lead, float *const *logits, const int *nrows);

/* dst's KV cache becomes src's first n positions (bytes copied: the same as
 * computing them), dst's length n: requests with the same prompt (`n` > 1
 * choices) prefill it once. Same model and context; no batch in flight in
 * either. Returns 0 or -EINVAL (reason in dst's error). */
int eng_seq_copy_prefix(eng_seq *dst, const eng_seq *src, int n);

/* One position's cached K (rotated) and V of layer l, bf16, n_kv_real * head_dim
 * each, real KV head after head: read (pos < len) or written (pos < n_ctx; no batch
 * in flight; positions past len count once eng_seq_set_len covers them). KV
 * computed on another device joins the sequence this way. 0 or -EINVAL. */
int eng_seq_kv_get(const eng_seq *s, int l, int pos, uint16_t *k, uint16_t *v);
int eng_seq_kv_put(eng_seq *s, int l, int pos, const uint16_t *k, const uint16_t *v);
/* The length becomes n (0 .. n_ctx): positions up to n must have been written. */
int eng_seq_set_len(eng_seq *s, int n);

/* embed + all layers + head in one call. */
int eng_seq_forward(eng_seq *s, const int32_t *tokens, int n, float *logits);

#endif
