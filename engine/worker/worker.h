/* worker — the generation queue and the one thread that owns the device.
 *
 * The server submits generation requests (prompt ids + sampling knobs) to a
 * bounded FIFO; one worker thread takes them in order and runs each on the device:
 *
 *   prefill   the prompt in chunks of prefill_chunk tokens, each chunk one plan of
 *             runlists of at most K layers (engine/worker/plan.h), each runlist waited
 *             for before the next is submitted;
 *   decode    one plan per generated token; sample (engine/worker/sample.h), detokenize
 *             (eng_detok, stop-string safe), check stop ids, stop strings,
 *             max_tokens and the context;
 *
 * and reports back through one callback, on the worker thread: TOKEN events, then
 * exactly one final event (DONE or ERROR) for every accepted request — also when it
 * was cancelled, and also at shutdown.
 *
 * When a runlist does not complete, the worker resets the device, drops the KV
 * state and, with --runlist-layers auto, asks the K policy for a smaller K and
 * replays (see "Replay" in worker.c); otherwise, or when the policy gives up, the
 * request ends in ERROR carrying a struct eng_device_error (engine/device/ert.h). The
 * worker keeps serving either way.
 *
 * Threading: eng_worker_new/eng_worker_free on one (the owning) thread;
 * eng_worker_submit, eng_worker_get_stats and everything eng_gen_req_* from any
 * thread. The emit callback runs on the worker thread only.
 */
#ifndef MINICPMD_ENGINE_WORKER_H
#define MINICPMD_ENGINE_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/device/device.h"
#include "engine/engine.h"
#include "engine/device/ert.h"
#include "engine/worker/plan.h"
#include "engine/worker/sample.h"
#include "engine/text/tokenizer.h"

#define ENG_GEN_MAX_STOP 4          /* stop strings per request (OpenAI's limit) */
#define ENG_GEN_MAX_STOP_IDS 16     /* stop ids per request */
#define ENG_GEN_MAX_TOP_LOGPROBS 20 /* eng_logprobs' limit */

/* ---- requests ------------------------------------------------------------------
 *
 * Ownership: a request is reference counted. eng_gen_req_new() returns it with one
 * reference, the caller's. eng_worker_submit() takes a second one for the worker
 * when it accepts the request; the worker drops it right after the final event. So
 * the caller may drop its own reference (eng_gen_req_free) at any time — e.g. when
 * the client disconnects, after eng_gen_req_cancel() — and the request lives on
 * until the worker is done with it. Events name the request and its `user`
 * pointer: the worker never dereferences `user`; a caller that frees what `user`
 * points to before the final event must not look at it in the callback (the
 * recommended pattern, docs/style.md rule 10: keep it until the final event, then free it
 * on the loop thread). */

typedef struct eng_gen_req eng_gen_req;

struct eng_gen_params {
    const int32_t *prompt;      /* (n_prompt) ids, >= 1; copied */
    int n_prompt;
    struct eng_sampling sampling;  /* copied, its bias array too */
    int max_tokens;             /* >= 1; 0 = until a stop or the context is full */
    const int32_t *stop_ids;    /* ids that end generation (eng_pack_stop_ids);
                                   never emitted as text; copied */
    int n_stop_ids;             /* 0 .. ENG_GEN_MAX_STOP_IDS */
    const char *stop[ENG_GEN_MAX_STOP]; /* stop strings (NUL-terminated); copied */
    int n_stop;                 /* 0 .. ENG_GEN_MAX_STOP */
    bool logprobs;              /* report each token's logprob */
    int top_logprobs;           /* 0 .. ENG_GEN_MAX_TOP_LOGPROBS (with logprobs) */
    void *user;                 /* handed back in every event; never dereferenced */
};

/* Build a request (one reference, the caller's). Returns 0, -EINVAL (a field out
 * of range; err names it) or -ENOMEM. Any thread. */
int eng_gen_req_new(const struct eng_gen_params *p, eng_gen_req **out, char *err, size_t errlen);

/* Take one more reference; returns r. */
eng_gen_req *eng_gen_req_ref(eng_gen_req *r);

/* Drop one reference; the last one frees the request. NULL is fine. */
void eng_gen_req_free(eng_gen_req *r);

/* Ask for the request to end (atomic; any thread, any number of times). Honoured
 * while queued (the worker ends it within one runlist of the running request),
 * between prompt chunks, between runlists and between tokens; the final event is
 * DONE with finish reason "cancelled" (unless it had already finished). */
void eng_gen_req_cancel(eng_gen_req *r);
bool eng_gen_req_cancelled(const eng_gen_req *r);

void *eng_gen_req_user(const eng_gen_req *r);
/* 1, 2, … in submission order (0 before it was accepted). */
uint64_t eng_gen_req_seq_no(const eng_gen_req *r);

/* ---- events ------------------------------------------------------------------- */

enum eng_event_kind {
    ENG_EVENT_TOKEN = 0,        /* one generated token */
    ENG_EVENT_DONE,             /* final: generation ended normally or was cancelled */
    ENG_EVENT_ERROR,            /* final: it failed */
};

enum eng_finish {
    ENG_FINISH_STOP = 0,        /* a stop id or a stop string */
    ENG_FINISH_LENGTH,          /* max_tokens, or the context is full */
    ENG_FINISH_CANCELLED,       /* eng_gen_req_cancel, or the worker shut down */
};

/* "stop", "length", "cancelled". */
const char *eng_finish_name(enum eng_finish f);

struct eng_token_event {
    int32_t id;
    const char *text;           /* the text this token made certain (eng_detok): may be
                                   "" (part of a character, or held back as the
                                   possible start of a stop string); NUL-terminated */
    size_t text_len;            /* bytes (the text may hold U+0000) */
    int index;                  /* 0-based position among the completion's tokens */
    /* with logprobs: */
    bool has_logprob;
    float logprob;              /* of `id` under the model's distribution */
    const struct eng_top_logprob *top;  /* (n_top) most likely, descending */
    int n_top;
};

/* What one request cost. All times in ms, rates in tokens/s (0 when undefined). */
struct eng_gen_timings {
    double queue_ms;            /* accepted -> the worker started it */
    double prompt_ms;           /* start -> the prompt's logits (replays included) */
    double prompt_tps;          /* prompt tokens computed (not cached) / prompt time */
    double decode_ms;           /* the prompt's logits -> the end */
    double decode_tps;          /* completion_tokens / decode time */
    int runlists;               /* runlists submitted, replays included */
    int runlists_by_state[ENG_ERT_LAST + 1]; /* of those, by final ERT state */
    double device_ms;           /* summed run time of those runlists */
    double max_runlist_ms;      /* the slowest of them */
    int attempts;               /* 1 + replays after device faults */
    int k;                      /* layers per runlist of the last attempt */
};

struct eng_done_event {
    enum eng_finish finish;
    const char *text;           /* text held back until the end (a partial stop-string
                                   prefix that turned out not to be one): append it;
                                   usually ""; NUL-terminated */
    size_t text_len;
    int prompt_tokens;
    int cached_tokens;          /* of those, reused from the KV cache (prompt_cache) */
    int completion_tokens;      /* tokens sampled, a final stop id included */
    struct eng_gen_timings timings;
};

struct eng_error_event {
    int code;                   /* negative errno: -EIO device fault (see below),
                                   -EINVAL bad request (e.g. the prompt does not fit the
                                   context, an id out of the vocabulary), -ENOMEM */
    bool retryable;             /* true: the device recovered and serves the next
                                   request (HTTP 503 + Retry-After); false: it did not,
                                   or the request itself is bad (500 / 400) */
    bool has_device_error;      /* code == -EIO: `device` is filled */
    struct eng_device_error device;
    char message[256];          /* one line for humans */
    int prompt_tokens;
    int cached_tokens;          /* of those, reused from the KV cache */
    int completion_tokens;      /* tokens already emitted before the failure */
    struct eng_gen_timings timings;
};

/* Every pointer in an event is valid only during the callback: copy what you keep. */
struct eng_event {
    enum eng_event_kind kind;
    eng_gen_req *req;           /* borrowed: eng_gen_req_ref() to keep it */
    void *user;                 /* eng_gen_req_user(req) */
    union {
        struct eng_token_event token;
        struct eng_done_event done;
        struct eng_error_event error;
    };
};

/* Called on the worker thread, in order; must not block for long nor call into
 * the worker except eng_gen_req_* and eng_worker_get_stats. */
typedef void (*eng_worker_emit_fn)(void *ctx, const struct eng_event *ev);

/* ---- the worker --------------------------------------------------------------- */

enum eng_log_level { ENG_LOG_ERROR = 0, ENG_LOG_WARN, ENG_LOG_INFO, ENG_LOG_DEBUG };

struct eng_worker_opts {
    int queue_size;             /* requests waiting (the running one not counted), >= 1 */
    int prefill_chunk;          /* prompt tokens per chunk; <= 0: 256. Clamped to the
                                   device's max batch */
    bool prompt_cache;          /* start a prompt after the longest prefix it shares with
                                   the tokens in the KV cache (the previous request's
                                   prompt and output); its positions are not computed
                                   again */
    int n_ctx;                  /* positions of the sequence; <= 0: the model's
                                   max_position_embeddings */
    enum eng_kmode kmode;       /* --runlist-layers auto (default) | all | N */
    int fixed_k;                /* FIXED: K >= 1 */
    int max_retries;            /* AUTO: replays per request; < 0: the policy's default */
    const char *state_dir;      /* where the remembered K lives; NULL: not remembered */
    const char *model_id;       /* key of the remembered K; NULL: the pack's directory */
    /* (optional) one line per event worth logging (K changes, device faults, the
     * remembered K); called on the worker thread, and on the caller's in new. */
    void (*log)(void *ctx, enum eng_log_level level, const char *msg);
    void *log_ctx;
};

typedef struct eng_worker eng_worker;

/* Take the device over (the caller must not use it until eng_worker_free, then
 * closes it): load the pack's model into it, begin the sequence, look up the
 * remembered K, start the thread. `pack` and `tok` are borrowed and must outlive
 * the worker. Returns 0 and *out, or negative with a one-line reason in err (the
 * device is then unchanged or has a model loaded; the caller closes it). */
int eng_worker_new(struct eng_device *dev, const eng_pack *pack, const eng_tokenizer *tok,
                   const struct eng_worker_opts *o, eng_worker_emit_fn emit, void *emit_ctx,
                   eng_worker **out, char *err, size_t errlen);

/* Queue a request (FIFO). Returns 0 (accepted: the worker holds a reference and
 * will emit exactly one final event), -EBUSY (the queue is full; nothing is
 * emitted) or -ESHUTDOWN (the worker is stopping; nothing is emitted). Never
 * blocks on the device. Any thread. A request may be submitted once. */
int eng_worker_submit(eng_worker *w, eng_gen_req *r);

/* Counters for /metrics and /health; a consistent-enough snapshot from any thread. */
struct eng_worker_stats {
    int queue_depth;            /* requests waiting */
    int queue_size;
    bool busy;                  /* a request is running */
    int current_k;              /* layers per runlist the next step would use */
    int n_layers;
    uint64_t requests;          /* accepted */
    uint64_t rejected;          /* -EBUSY */
    uint64_t finished_stop, finished_length, cancelled, failed;
    uint64_t tokens_in;         /* prompt tokens of requests that ran */
    uint64_t tokens_cached;     /* of those, reused from the KV cache */
    uint64_t tokens_out;        /* tokens sampled */
    uint64_t runlists_by_state[ENG_ERT_LAST + 1]; /* [state]: runlists that ended so */
    uint64_t device_resets;
    uint64_t k_halvings;
    bool device_down;           /* the last device reset failed: requests are refused
                                   until one works (each request tries it first) */
};

void eng_worker_get_stats(const eng_worker *w, struct eng_worker_stats *out);

/* Stop: cancel every queued and the running request (the device wait is
 * interrupted), emit their final events (DONE cancelled) on the worker thread,
 * join it, end the sequence, free everything. The device stays open for the
 * caller to close. NULL is fine. Must not be called from the emit callback. */
void eng_worker_free(eng_worker *w);

#endif
