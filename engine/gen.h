/* gen — generating text on the engine: requests, the events that answer them,
 * and the counters of the worker that runs them. The public half of
 * engine/worker/worker.h (the worker itself is opened by eng_engine_open()).
 *
 * The worker runs up to --parallel requests at once from a bounded FIFO, on the
 * one thread that owns the device: prefill in chunks of layer-chunked runlists,
 * then one step per generated token (sample, detokenize, stop ids, stop strings,
 * max_tokens, the context); the running requests share each step (one batch on
 * the cpu, interleaved on the NPU). It reports through one callback, on the worker
 * thread: TOKEN events, then exactly one final event (DONE or ERROR) for every
 * accepted request — also when it was cancelled, and also at shutdown. A device
 * fault ends the request in ERROR with a struct eng_device_error (engine/ert.h)
 * after the worker reset the device and, with --runlist-layers auto, replayed on
 * a smaller K; the worker keeps serving either way.
 *
 * Threading: everything eng_gen_req_* from any thread; the emit callback runs on
 * the worker thread only. */
#ifndef MINICPMD_ENGINE_GEN_H
#define MINICPMD_ENGINE_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ert.h"
#include "engine/grammar.h"
#include "util/defaults.h"   /* UT_MAX_STOP(_BYTES), UT_MAX_TOP_LOGPROBS */

/* ---- sampling ------------------------------------------------------------------
 * The knobs of the sampler chain (engine/worker/sample.h says the order). */

struct eng_logit_bias {
    int32_t id;
    float bias;
};

struct eng_sampling {
    float temperature;        /* <= 0: greedy */
    float top_p;              /* (0, 1]; 1 = off */
    int top_k;                /* 0 = off */
    float min_p;              /* [0, 1); 0 = off */
    float repetition_penalty; /* > 0; 1 = off */
    int penalty_last_n;       /* window of the repetition penalty; 0 = all; <= 2^20 */
    float presence_penalty;   /* [-2, 2]; 0 = off */
    float frequency_penalty;  /* [-2, 2]; 0 = off */
    const struct eng_logit_bias *bias; /* borrowed; copied by the request */
    int n_bias;
    uint64_t seed;
};

struct eng_top_logprob {
    int32_t id;
    float logprob;
};

#define ENG_GEN_MAX_STOP_IDS 16     /* stop ids per request */

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
    const char *stop[UT_MAX_STOP]; /* stop strings; copied whole */
    size_t stop_len[UT_MAX_STOP];  /* their lengths in bytes (a stop string may hold NUL
                                      bytes); 0: strlen(stop[i]). At most
                                      UT_MAX_STOP_BYTES in all */
    int n_stop;                 /* 0 .. UT_MAX_STOP */
    bool logprobs;              /* report each token's logprob */
    int top_logprobs;           /* 0 .. UT_MAX_TOP_LOGPROBS (with logprobs) */
    /* Score the prompt: before any generated token, one TOKEN event per prompt
     * token (`prompt` set, in order; the first has no logprob), its logprob and
     * top_logprobs alternatives under the logits of the position before it. The
     * prompt then runs from position 0 (no prompt cache: every position's logits
     * are wanted) in prefill's batches, each HEAD computing all of its positions'
     * logits: the numbers decode gives the same tokens (batch invariance). */
    bool prompt_logprobs;
    bool prompt_only;           /* end after the prompt (DONE "length", no token
                                   sampled; max_tokens is not read) */
    /* Constrained decoding (engine/grammar.h): NULL, or the grammar every token
     * must keep the output in; the request takes a reference. Its mask is applied
     * to the logits before the sampler chain (bias, penalties, temperature, …); the
     * stop ids are allowed exactly where the grammar is complete. */
    eng_grammar *grammar;
    bool grammar_after_think;   /* the grammar starts after "</think>" (thinking on) */
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


struct eng_token_event {
    int32_t id;
    const char *text;           /* the text this token made certain (eng_detok): may be
                                   "" (part of a character, or held back as the
                                   possible start of a stop string); NUL-terminated */
    size_t text_len;            /* bytes (the text may hold U+0000) */
    int index;                  /* 0-based position among the completion's tokens
                                   (prompt: among the prompt's) */
    bool prompt;                /* a prompt token scored (prompt_logprobs); text "" */
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
    double prompt_device_ms;    /* of the prompt's: on the device */
    double prompt_host_ms;      /* on the host CPU (xrt's --npu-prefill cpu|auto) */
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
    int stop_index;             /* STOP by a stop string: its index in
                                   eng_gen_params.stop; -1 otherwise (a stop id) */
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
    bool grammar;               /* code == -EINVAL: the request's grammar ended it (a
                                   limit or a dead end; the message says which) */
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

#define ENG_BATCH_BUCKETS 8

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
    uint64_t k_probes;          /* times auto tried a larger K again after good tokens */
    bool device_down;           /* the last device reset failed: requests are refused
                                   until one works (each request tries it first) */
    int active;                 /* sequences running (KV slots in use) */
    int parallel;               /* at most this many (--parallel, capped by the device) */
    bool batched;               /* they run as one batch (cpu), else interleaved */
    uint64_t steps;             /* scheduler steps that ran the device */
    uint64_t batch_hist[ENG_BATCH_BUCKETS]; /* steps by sequences in them: [i] counts
                                   steps of i+1 sequences (interleaved: all count 1) */
    uint64_t queue_wait_us;     /* time requests waited in the queue, summed */
    uint64_t queue_waits;       /* requests that left the queue */
    uint64_t prefill_device_us; /* prefill runlists run one sequence at a time, by where
                                   they ran: the device, */
    uint64_t prefill_host_us;   /* or the host CPU for it (xrt's --npu-prefill cpu) */
};

/* Called on the worker thread, in order; must not block for long nor call into
 * the engine except eng_gen_req_* and the stats. */
typedef void (*eng_worker_emit_fn)(void *ctx, const struct eng_event *ev);

#endif
