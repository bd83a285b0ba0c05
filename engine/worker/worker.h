/* worker — the generation queue and the one thread that owns the device.
 *
 * The server submits generation requests (prompt ids + sampling knobs) to a
 * bounded FIFO; one worker thread takes them in order into up to `parallel`
 * running sequences, each on its own KV slot, and runs them step by step
 * (engine/worker/sched.c):
 *
 *   prefill   the prompt in chunks (prefill_chunk tokens; at most step_prefill in a
 *             step that also carries decodes), each chunk one plan of runlists of
 *             at most K layers (engine/worker/plan.h), each runlist waited for
 *             before the next is submitted;
 *   decode    one position per step; sample (engine/worker/sample.h), detokenize
 *             (eng_detok, stop-string safe), check stop ids, stop strings,
 *             max_tokens and the context;
 *
 * all running sequences' pieces of a step as one batch on a device that batches
 * (cpu), one after the other on one that does not (NPU, sim). It reports back
 * through one callback, on the worker thread: TOKEN events, then exactly one final
 * event (DONE or ERROR) for every accepted request — also when it was cancelled,
 * and also at shutdown.
 *
 * When a runlist does not complete, the worker resets the device, every running
 * sequence drops its KV state and replays it; the one whose step failed asks the
 * K policy (--runlist-layers auto: a smaller K) and replays too, or ends in ERROR
 * carrying a struct eng_device_error (engine/ert.h). The worker keeps serving
 * either way.
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
#include "engine/ert.h"
#include "engine/worker/plan.h"
#include "engine/gen.h"
#include "engine/worker/sample.h"
#include "engine/tokenizer.h"
#include "engine/types.h"

/* ---- the worker --------------------------------------------------------------- */

struct eng_worker_opts {
    int queue_size;             /* requests waiting (the running one not counted), >= 1 */
    int prefill_chunk;          /* prompt tokens per chunk; <= 0:
                                   UT_PREFILL_CHUNK_DEFAULT. Clamped to the device's
                                   max batch */
    bool prompt_cache;          /* start a prompt after the longest prefix it shares with
                                   the tokens in the KV cache (the previous request's
                                   prompt and output); its positions are not computed
                                   again */
    int parallel;               /* sequences running at once; <= 0: UT_PARALLEL_DEFAULT.
                                   At most the device's max_seqs (and 4) */
    int step_prefill;           /* prompt tokens a step may carry beside running
                                   decodes; <= 0: UT_STEP_PREFILL_DEFAULT */
    int n_ctx;                  /* positions of the sequence; <= 0: the model's
                                   max_position_embeddings */
    enum eng_kmode kmode;       /* --runlist-layers auto (default) | all | N */
    int fixed_k;                /* FIXED: K >= 1 */
    int max_retries;            /* AUTO: replays per request; < 0: the policy's default */
    const char *state_dir;      /* where the remembered K lives; NULL: not remembered */
    const char *model_id;       /* key of the remembered K; NULL: the pack's directory */
    /* (optional) the vocabulary trie of the grammar matcher, shared with its
     * owner: gram_vocab(gram_vocab_ctx) gives it (made from `tok`, freed after the
     * worker; any thread). NULL: the worker makes its own for the first grammar. */
    const eng_gram_vocab *(*gram_vocab)(void *ctx);
    void *gram_vocab_ctx;
    /* (optional) one line per event worth logging (K changes, device faults, the
     * remembered K); called on the worker thread, and on the caller's in new. */
    eng_log_fn log;
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

void eng_worker_get_stats(const eng_worker *w, struct eng_worker_stats *out);

/* Stop: cancel every queued and running request (the device wait is
 * interrupted), emit their final events (DONE cancelled) on the worker thread,
 * join it, end the sequence, free everything. The device stays open for the
 * caller to close. NULL is fine. Must not be called from the emit callback. */
void eng_worker_free(eng_worker *w);

#endif
