/* engine — a MiniCPM5 pack opened for serving: the facade over the engine's rooms.
 *
 * The public engine surface is the headers directly in engine/: this one (the
 * engine), types.h (packs, the shared options, the log hook), gen.h (generation
 * requests and their events), ert.h (how a device run ends), tokenizer.h,
 * grammar.h, template.h, prompt.h, outparse.h and xrt.h (the NPU's preflight and
 * probe). server/ and api/ include nothing else of the engine
 * (tests/check-includes.sh); the rooms (kernels/, model/, text/, device/,
 * worker/) are the engine's own. docs/DESIGN.md draws the whole.
 *
 * The pack, the shared options and the log hook are in engine/types.h, which
 * this header includes; the engine's rooms include that one, never this.
 *
 * Threading: eng_pack_open() and eng_engine_open() do file I/O and may take long
 * on a real pack; the daemon calls them off the event loop.
 */
#ifndef MINICPMD_ENGINE_H
#define MINICPMD_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/gen.h"
#include "engine/tokenizer.h"
#include "engine/types.h"

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
    const char *state_dir;      /* where the remembered K (and the cpu device's measured
                                   decode kernel) live; NULL: not remembered */
    const char *faults;         /* sim fault specs (docs/usage.md, the worker); NULL */
    int sim_runlist_limit, sim_timeout_ms, sim_latency_us;  /* the sim's NPU model */
    /* (optional) one line per event worth logging; any thread. */
    eng_log_fn log;
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
/* The pack's answer length when a request sets none (generation_config.json
 * max_new_tokens), or 0: until a stop or the context's end. */
int32_t eng_engine_max_new_tokens(const eng_engine *e);
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
