/* types — the engine's base types: the pack (its parsed config.json and the
 * functions that open and read it), the options the rooms share, and the log hook.
 *
 * Everything in engine/ may include this header; it includes nothing of the
 * engine. The rooms (kernels/, model/, text/, device/, worker/) include it, never
 * the facade engine/engine.h (tests/check-includes.sh refuses that), so a room
 * sees the pack without the generation, grammar and tokenizer API that the facade
 * brings with it.
 *
 * Threading: eng_pack_open() does file I/O and may take long on a real pack. An
 * eng_pack is immutable once open and may be read from any thread. */
#ifndef MINICPMD_ENGINE_TYPES_H
#define MINICPMD_ENGINE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct eng_pack eng_pack;

enum eng_weights_format {
    ENG_WEIGHTS_Q4NX = 0,         /* FastFlowLM model.q4nx */
    ENG_WEIGHTS_SAFETENSORS,      /* Hugging Face model.safetensors */
    ENG_WEIGHTS_SAFETENSORS_SHARDED, /* model.safetensors.index.json + shards */
};

/* Architecture from the pack's config.json, checked for consistency. */
struct eng_hparams {
    int n_layers;          /* num_hidden_layers */
    int n_embd;            /* hidden_size */
    int n_heads;           /* num_attention_heads */
    int n_kv_heads;        /* num_key_value_heads (as stored; a pack may replicate) */
    int head_dim;          /* head_dim, or n_embd / n_heads */
    int n_ff;              /* intermediate_size */
    int n_vocab;           /* vocab_size */
    int n_ctx_train;       /* max_position_embeddings */
    double rms_norm_eps;
    double rope_theta;
    int tie_embeddings;    /* tie_word_embeddings */
};

struct eng_pack_info {
    const char *dir;              /* absolute pack directory */
    const char *model_type;       /* config.json model_type, e.g. "llama" or "qwen3" */
    enum eng_weights_format format;
    int64_t weights_bytes;        /* total size of the weight files */
    struct eng_hparams hp;
};

/* Open the pack in directory `dir`: read and validate config.json, find the weights
 * and the tokenizer. Returns 0 and a pack the caller frees with eng_pack_free(), or
 * a negative errno-style value with a one-line reason in `err` (which file, which
 * field, what was expected). Never leaves a partial pack behind. */
int eng_pack_open(const char *dir, eng_pack **out, char *err, size_t errlen);
void eng_pack_free(eng_pack *p);
const struct eng_pack_info *eng_pack_get_info(const eng_pack *p);
const char *eng_weights_format_name(enum eng_weights_format f);

/* config.json as parsed at open (a jansson object, borrowed, lives as long as the
 * pack): read it here rather than from the file again. */
struct json_t;
const struct json_t *eng_pack_config(const eng_pack *p);

/* The ids that end generation: generation_config.json eos_token_id (number or
 * array) united with config.json's, deduplicated, ascending. Returns how many were
 * found and written (<= max), or -EINVAL with a reason, also when there are more
 * than max (dropping one would let generation run past it). MiniCPM5: {1, 130073}.
 * (engine/worker/sample-pack.c, beside the sampling defaults read from the same
 * file.) */
int eng_pack_stop_ids(const eng_pack *p, int32_t *ids, int max, char *err, size_t errlen);

/* ---- options shared by the rooms ------------------------------------------------ */

/* Activations into the matrix products: int8 per 32 columns (fast) or float32. */
enum eng_act { ENG_ACT_Q8 = 0, ENG_ACT_F32 };

/* Where the CPU forward pass reads the matmul weights from (--weights): the pack's
 * file mapping, or a copy in 2 MB-page anonymous memory made at load (everything
 * but the embedding); AUTO copies when the copy fits in MemAvailable with a margin
 * and huge pages are to be had (engine/model/place.c). */
enum eng_weights_place {
    ENG_WEIGHTS_PLACE_MMAP = 0,
    ENG_WEIGHTS_PLACE_COPY,
    ENG_WEIGHTS_PLACE_AUTO,
};

enum eng_qk_norm {
    ENG_QK_NORM_AUTO = 0, /* use q_norm/k_norm unless they are the synthetic all-ones
                             shim on a llama-architecture model (warned) */
    ENG_QK_NORM_OFF,      /* ignore them */
    ENG_QK_NORM_ON,       /* apply them whenever present */
};

/* Layers per runlist: adaptive (halved after a fault), all in one, or fixed. */
enum eng_kmode {
    ENG_KMODE_AUTO = 0,
    ENG_KMODE_ALL,
    ENG_KMODE_FIXED,
};

enum eng_log_level { ENG_LOG_ERROR = 0, ENG_LOG_WARN, ENG_LOG_INFO, ENG_LOG_DEBUG };

/* The one log hook of the engine and its rooms: one line (no newline) at a level.
 * Warnings are lines at ENG_LOG_WARN; there is no second channel. Called on
 * whatever thread did the work (the loader, the worker); it must not call back
 * into the engine. */
typedef void (*eng_log_fn)(void *ctx, enum eng_log_level level, const char *msg);

#endif
