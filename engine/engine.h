/* engine — a MiniCPM5 pack opened for serving: the facade over the engine's rooms.
 *
 * The public engine surface is the headers directly in engine/: this one (packs
 * and the engine), gen.h (generation requests and their events), ert.h (how a
 * device run ends), tokenizer.h, template.h, prompt.h, outparse.h and xrt.h (the
 * NPU's preflight and probe). server/ and api/ include nothing else of the engine
 * (tests/check-includes.sh); the rooms (kernels/, model/, text/, device/,
 * worker/) are the engine's own. docs/DESIGN.md draws the whole.
 *
 * Threading: eng_pack_open() and eng_engine_open() do file I/O and may take long
 * on a real pack; the daemon calls them off the event loop. An eng_pack is
 * immutable once open and may be read from any thread.
 */
#ifndef MINICPMD_ENGINE_H
#define MINICPMD_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/gen.h"
#include "engine/tokenizer.h"

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

/* ---- the engine: a pack, its tokenizer, a device and the worker over it --------- */

typedef struct eng_engine eng_engine;

struct eng_engine_opts {
    const char *device;         /* "cpu", "sim", "xrt" (eng_engine_choose_device); NULL:
                                   text only (pack, tokenizer, defaults; no device and
                                   no worker: eng_engine_submit answers -ESHUTDOWN) */
    int n_threads;              /* compute pool; <= 0: online CPUs */
    enum eng_act act;
    enum eng_qk_norm qk_norm;
    enum eng_weights_place weights; /* cpu and sim devices */
    int n_ctx;                  /* positions a request may use; <= 0: the model's */
    int queue_size;             /* requests waiting, >= 1 */
    int parallel;               /* sequences at once; <= 0: the worker's default */
    int step_prefill;           /* prompt tokens per step beside decodes; <= 0: default */
    int prefill_chunk;          /* prompt tokens per chunk; <= 0: the worker's default */
    bool prompt_cache;
    enum eng_kmode kmode;
    int fixed_k;                /* ENG_KMODE_FIXED: layers per runlist */
    int max_retries;            /* ENG_KMODE_AUTO: replays per request; < 0: default */
    const char *state_dir;      /* where the remembered K lives; NULL: not remembered */
    const char *faults;         /* sim fault specs (README, "Fault injection"); NULL */
    int sim_runlist_limit, sim_timeout_ms, sim_latency_us;  /* the sim's NPU model */
    /* (optional) one line per event worth logging; any thread. */
    void (*log)(void *ctx, enum eng_log_level level, const char *msg);
    void *log_ctx;
};

/* "auto" (or NULL) becomes "xrt" when the bridge is built, the NPU node exists and a
 * kernel set matches the pack at `pack_dir`, else "cpu" (with the reason the NPU
 * was passed over in `why`, "" when there is none to tell); "xrt" is checked the same
 * way and refused with the reason; other names are returned as they are (the
 * registry judges them at open). Returns the name (static storage) or NULL with
 * the reason in `err`. Call before serving, so an unusable NPU stops the start. */
const char *eng_engine_choose_device(const char *want, const char *pack_dir, char *why,
                                     size_t whylen, char *err, size_t errlen);

/* Open the pack at `dir` and everything serving it needs: its tokenizer, sampling
 * defaults (generation_config.json) and stop ids, the device with the model
 * loaded, and the worker that owns it, emitting to emit(emit_ctx, …). A non-fatal
 * finding (an unofficial chat template) is logged at WARN. Returns 0 and *out, or
 * a negative errno-style value with a one-line reason in `err`. */
int eng_engine_open(const char *dir, const struct eng_engine_opts *o, eng_worker_emit_fn emit,
                    void *emit_ctx, eng_engine **out, char *err, size_t errlen);

/* Stop the worker (every request gets its final event first, on the worker
 * thread), close the device, free everything. NULL is fine. Must not be called
 * from the emit callback. */
void eng_engine_free(eng_engine *e);

/* Stop the worker only, as eng_engine_free does first; the rest stays readable. */
void eng_engine_stop(eng_engine *e);

const eng_pack *eng_engine_pack(const eng_engine *e);
const eng_tokenizer *eng_engine_tokenizer(const eng_engine *e);
/* The vocabulary trie of the grammar matcher (engine/grammar.h), made on the first
 * call (~35-120 ms for MiniCPM5's vocabulary) and shared with the worker; NULL
 * when out of memory. Any thread. */
const eng_gram_vocab *eng_engine_gram_vocab(eng_engine *e);
/* The pack's sampling defaults: what a request's knobs go on top of. */
const struct eng_sampling *eng_engine_sampling(const eng_engine *e);
int eng_engine_n_ctx(const eng_engine *e);
/* "cpu", "sim", "xrt"; and one line for logs and /health. */
const char *eng_engine_device_name(const eng_engine *e);
const char *eng_engine_device_description(const eng_engine *e);

/* The ids that end generation (eng_gen_params.stop_ids): generation_config.json's
 * and config.json's eos_token_id. Returns how many; *ids lives with the engine. */
int eng_engine_stop_ids(const eng_engine *e, const int32_t **ids);

/* Queue a request (FIFO). Returns 0 (accepted: the engine holds a reference and
 * will emit exactly one final event), -EBUSY (the queue is full) or -ESHUTDOWN
 * (stopping); nothing is emitted for those. Never blocks on the device. Any
 * thread. A request may be submitted once. */
int eng_engine_submit(eng_engine *e, eng_gen_req *r);

/* Counters for /metrics and /health; any thread. Zero before the worker starts. */
void eng_engine_get_stats(const eng_engine *e, struct eng_worker_stats *out);

#endif
