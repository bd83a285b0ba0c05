/* Internals shared by worker.c (requests, the queue, the thread, metrics) and
 * gen.c (running one request on the device). Not for use outside engine/. */
#ifndef MINICPMD_ENGINE_WORKER_IMPL_H
#define MINICPMD_ENGINE_WORKER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/worker/worker.h"

struct eng_gen_req {
    atomic_int refs;
    atomic_bool cancel;
    atomic_uint_fast64_t seq_no;  /* 0 until accepted */
    int64_t t_submit_us;          /* set under the worker's lock at submit */

    int32_t *prompt;
    int n_prompt;
    struct eng_sampling sampling; /* .bias points to `bias` */
    struct eng_logit_bias *bias;
    int max_tokens;
    int32_t stop_ids[ENG_GEN_MAX_STOP_IDS];
    int n_stop_ids;
    char *stop[UT_MAX_STOP];      /* whole, by length (may hold NUL) */
    size_t stop_len[UT_MAX_STOP];
    int n_stop;
    bool logprobs;
    int top_logprobs;
    eng_grammar *grammar;         /* a reference, or NULL */
    bool grammar_after_think;
    void *user;
};

/* Counters any thread may read (relaxed atomics: each is exact, a snapshot of
 * several is not a transaction). */
struct worker_metrics {
    atomic_int queue_depth;
    atomic_bool busy;
    atomic_int current_k;
    atomic_uint_fast64_t requests, rejected;
    atomic_uint_fast64_t finished_stop, finished_length, cancelled, failed;
    atomic_uint_fast64_t tokens_in, tokens_cached, tokens_out;
    atomic_uint_fast64_t runlists_by_state[ENG_ERT_LAST + 1];
    atomic_uint_fast64_t device_resets, k_halvings, k_probes;
    atomic_bool device_down;      /* mirrors device_broken for other threads */
};

/* A prompt-cache slot: a device sequence, its own KV cache, and the ids that KV
 * holds. One slot unless the prompt cache is on and the device keeps several
 * sequences (eng_device_max_seqs). */
#define WORKER_MAX_SLOTS 4
struct worker_slot {
    eng_device_seq *seq;
    int32_t *ids;                 /* (n_ctx + 1) prompt + generated */
    int n_kv;                     /* seq's KV holds ids[0 .. n_kv) */
    uint64_t used;                /* when it last served a request (LRU) */
};

struct eng_worker {
    /* set by eng_worker_new, then read-only */
    struct eng_device *dev;
    const eng_pack *pack;
    const eng_tokenizer *tok;
    eng_worker_emit_fn emit;
    void *emit_ctx;
    void (*log)(void *ctx, enum eng_log_level level, const char *msg);
    void *log_ctx;
    int n_layers, n_vocab, n_ctx, prefill_chunk, queue_size;
    bool prompt_cache;
    char device_name[64];
    char *model_id;
    char *kstate_path;            /* NULL: K is not remembered */

    /* the queue: guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    eng_gen_req **ring;           /* (queue_size) */
    int head, count;
    eng_gen_req *running;
    bool stopping;
    uint64_t next_seq_no;
    pthread_t thread;

    /* the worker thread's own */
    struct worker_slot slots[WORKER_MAX_SLOTS];
    int n_slots;
    struct worker_slot *cur;      /* the slot of the running (or last) request */
    uint64_t n_runs;              /* requests that reached a slot, for LRU */
    struct eng_kpolicy kp;
    struct eng_plan plan;         /* for kp's K */
    bool device_broken;           /* a reset failed; try again before the next request */
    struct eng_device_error broken_by; /* with device_broken: the failure that left the
                                          device down, reported while it stays down */
    float *logits, *raw_logits;   /* (n_vocab) */
    eng_gram_vocab *gvocab;       /* the vocabulary trie, built for the first grammar */
    eng_gen_req **swept;          /* (queue_size) scratch for eng__worker_sweep */

    struct worker_metrics m;
};

/* Log a formatted line through opts.log (if any). */
void eng__worker_log(struct eng_worker *w, enum eng_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* End every queued request that was cancelled: removed from the queue, one DONE
 * "cancelled" event each. Worker thread; called between runlists. */
void eng__worker_sweep(struct eng_worker *w);

/* Emit the final DONE "cancelled" for a request that never ran (queue_ms given). */
void eng__worker_done_cancelled(struct eng_worker *w, eng_gen_req *r, double queue_ms);

/* Run one request to its end on the device and emit its events, the final one
 * included. Worker thread. (gen.c) */
void eng__worker_run(struct eng_worker *w, eng_gen_req *r);

/* Rebuild w->plan for the policy's current K. Returns 0 or -ENOMEM. */
int eng__worker_replan(struct eng_worker *w);

#endif
