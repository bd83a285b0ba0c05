/* Internals shared by worker.c (requests, the queue, metrics), sched.c (the
 * thread: which sequences run each step, and how) and gen.c (one sequence: its
 * start, sampling, faults and end). Not for use outside engine/. */
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
    bool prompt_logprobs, prompt_only;
    eng_grammar *grammar;         /* a reference, or NULL */
    bool grammar_after_think;
    void *user;
};

#define WORKER_BATCH_BUCKETS 8

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
    atomic_int active;            /* sequences running */
    atomic_uint_fast64_t steps;   /* scheduler steps that ran the device */
    atomic_uint_fast64_t batch_hist[WORKER_BATCH_BUCKETS]; /* steps by sequences in
                                     them: [i] counts steps of i+1 (the last: or more) */
    atomic_uint_fast64_t queue_wait_us; /* summed over requests that left the queue */
    atomic_uint_fast64_t queue_waits;   /* how many */
    /* prefill runlists' time, by where they ran: the device, or the host CPU for it */
    atomic_uint_fast64_t prefill_device_us, prefill_host_us;
};

/* A prompt-cache slot: a device sequence, its own KV cache, and the ids that KV
 * holds. One slot unless the prompt cache is on and the device keeps several
 * sequences (eng_device_max_seqs). */
#define WORKER_MAX_SLOTS 4
struct worker_slot {
    eng_device_seq *seq;
    int32_t *ids;                 /* (n_ctx + 1) prompt + generated */
    float *logits;                /* (n_vocab) of the sequence running on it */
    int n_kv;                     /* seq's KV holds ids[0 .. n_kv) */
    uint64_t used;                /* when it last served a request (LRU) */
    bool busy;                    /* a sequence runs on it */
};

/* Positions per prefill batch of a prompt being scored (prompt_logprobs): their
 * logits are kept until reported, SCORE_ROWS * n_vocab floats (16.7 MB for
 * MiniCPM5's 130,560 tokens). */
#define SCORE_ROWS 32

/* One piece of a step: a sequence's prompt chunk or decode position (sched.c). */
struct worker_item {
    struct gen *g;
    struct eng_batch b;
    struct eng_prefill_chunk pc;
    bool prefill, want;
    bool score;             /* a scored prompt's chunk: the logits of all its positions */
    bool failed;
};

/* One running sequence (a request on its slot); gen.c's story. */
struct gen {
    struct eng_worker *w;
    eng_gen_req *r;
    struct worker_slot *slot;
    eng_sampler *sampler;
    eng_detok *detok;
    eng_gram_matcher *gm;        /* constrained decoding, or NULL */
    bool gm_on;                  /* the grammar applies (false until "</think>") */
    char tail[8];                /* the last bytes output, to see "</think>" */
    int32_t *ids;                /* slot->ids */
    int n_prompt, n_gen, n_fed;
    int n_cached;                /* prompt positions reused from the KV cache */
    float *plogits;              /* prompt_logprobs: (SCORE_ROWS, n_vocab) the logits of
                                    a prompt chunk's positions */
    int n_scored;                /* prompt tokens reported so far */
    bool have_logits;            /* slot->logits hold the next token's logits */
    bool ended;                  /* its final event was emitted */
    bool succeeded;              /* ended in stop or length */
    int attempts;                /* 1 + replays after its own faults */
    struct gen *follow;          /* a running sequence with the same prompt: wait for
                                    its prefill and copy `share` positions of its KV */
    int share;
    int64_t t_start, t_prompt_done;
    /* a prompt chunk the device computes in the background (eng_device_prefill_start):
     * started at bg_t0, while bg_steps steps of the others ran */
    bool bg_on;
    struct worker_item bg;
    int64_t bg_t0;
    int bg_steps;
    struct eng_gen_timings tm;
    /* the last failed runlist */
    struct eng_device_error derr;
    char dev_message[160];
};

struct eng_worker {
    /* set by eng_worker_new, then read-only */
    struct eng_device *dev;
    const eng_pack *pack;
    const eng_tokenizer *tok;
    eng_worker_emit_fn emit;
    void *emit_ctx;
    eng_log_fn log;
    void *log_ctx;
    int n_layers, n_vocab, n_ctx, prefill_chunk, queue_size;
    int parallel;                 /* sequences running at once (<= n_slots) */
    int step_prefill;             /* prompt tokens per step beside running decodes */
    int max_batch;                /* the device's positions per batch; 0: no limit */
    bool batch;                   /* the device runs several sequences as one batch */
    bool async;                   /* the device may prefill in the background */
    bool prompt_cache;
    char device_name[64];
    char *model_id;
    char *kstate_path;            /* NULL: K is not remembered */

    /* the queue: guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    eng_gen_req **ring;           /* (queue_size) */
    int head, count;
    eng_gen_req *running[WORKER_MAX_SLOTS]; /* the sequences' requests, for a stop */
    bool stopping;
    uint64_t next_seq_no;
    pthread_t thread;

    /* the worker thread's own */
    struct worker_slot slots[WORKER_MAX_SLOTS];
    int n_slots;
    struct gen *active[WORKER_MAX_SLOTS]; /* running, in admission order */
    int n_active;
    uint64_t n_runs;              /* requests that reached a slot, for LRU */
    struct eng_kpolicy kp;
    struct eng_plan plan;         /* for kp's K */
    bool device_broken;           /* a reset failed; try again before the next request */
    struct eng_device_error broken_by; /* with device_broken: the failure that left the
                                          device down, reported while it stays down */
    float *raw_logits;            /* (n_vocab) scratch for logprobs */
    const eng_gram_vocab *gvocab; /* the vocabulary trie, once the first grammar came */
    eng_gram_vocab *gvocab_own;   /* gvocab when the worker made it */
    const eng_gram_vocab *(*gvocab_fn)(void *ctx);   /* eng_worker_opts.gram_vocab */
    void *gvocab_ctx;
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

/* The worker thread (sched.c). */
void *eng__worker_main(void *arg);

/* ---- one sequence (gen.c), worker thread ---- */

/* Start a request: checks, sampler, detokenizer, grammar, a free slot (the one
 * sharing the longest prompt prefix). Returns the sequence, or NULL when the
 * request has ended already (its final event emitted: cancelled, refused, or the
 * device is down). */
struct gen *eng__gen_start(struct eng_worker *w, eng_gen_req *r);

/* Sample the next token from the slot's logits and report it. Returns true when
 * the request has ended (its final event emitted). */
bool eng__gen_sample(struct gen *g);

/* A prompt chunk of a scored prompt ran: g->plogits hold the logits of positions
 * begin .. begin+n-1; report the prompt tokens they score (once each, also after a
 * replay) and, for the prompt's last chunk with `want`, keep the next token's
 * logits. */
void eng__gen_score(struct gen *g, int begin, int n, bool want);

/* The final DONE event (stop, length or cancelled). */
void eng__gen_done(struct gen *g, enum eng_finish finish);

/* A runlist of g's step ended in res (not COMPLETED): fill g's device error. `pc`:
 * the prompt chunk in prefill, NULL in decode. */
void eng__gen_fault(struct gen *g, const struct eng_runlist *rl, const struct eng_run_result *res,
                    const struct eng_batch *b, const struct eng_prefill_chunk *pc);

/* Count one runlist in g's timings and the worker's counters. */
void eng__gen_count_run(struct gen *g, const struct eng_run_result *res, bool worker_too);

/* After a device reset (reset_ok: it worked; err: why not) that lost every
 * sequence's KV: ask the policy about g's fault. Returns true to replay, false when
 * g has ended (its final event emitted). */
bool eng__gen_after_fault(struct gen *g, bool reset_ok, const char *err);

/* The sequence's end: remember K, probe a larger one, keep what the slot's KV
 * holds, free it. */
void eng__gen_finish(struct gen *g);

/* End g with the device error that left the device down (a reset failed). */
void eng__gen_device_down(struct gen *g, const char *msg);

/* Rebuild w->plan for the policy's current K. Returns 0 or -ENOMEM. */
int eng__worker_replan(struct eng_worker *w);

#endif
