/* plan — runlist planning: how one decode step or one prompt chunk is cut into
 * runlists of at most K layer commands, how a prompt is cut into chunks, how K
 * adapts when the device hangs, and where the K that worked is remembered.
 *
 * Why: the stock NPU runtime puts all 42 decode layers of MiniCPM5-2B into one
 * runlist and the NPU answers ERT_CMD_STATE_TIMEOUT on the first token. The root
 * cause is unproven (docs/npu-xrt.md §3, the upstream bug report), so K is a policy that adapts
 * and reports, not a constant. The worker submits one runlist and waits for its
 * final state before it submits the next.
 *
 * ---- The plan of one step ----------------------------------------------------
 *
 * A step (one decode token, or one prompt chunk: a batch of positions) is the
 * commands EMBED, LAYER 0 .. LAYER n-1, HEAD, in that order, grouped into runlists:
 *
 *   runlist 0          EMBED, LAYER 0 .. LAYER K-1
 *   runlist 1          LAYER K .. LAYER 2K-1
 *   …                  (greedy: every layer runlist has K layers but the last)
 *   runlist r-1        LAYER (r-2)K .. LAYER n-1
 *   runlist r          HEAD                       <- always a runlist of its own
 *
 * so there are ceil(n/K) layer runlists plus one head runlist. K counts LAYER
 * commands only; K = ENG_PLAN_ALL (or any K >= n) gives the monolithic plan, one
 * runlist of all layers, then the head.
 *
 * Why EMBED joins the first runlist: on the NPU the embedding is a host-side row
 * copy into the activation buffer before the first layer run (docs/npu-kernels.md
 * §3.4), so it costs no submission; on the CPU it is one call.
 * Why HEAD is its own runlist: on the NPU the tail (final RMSNorm `ln`, then
 * `lm_head`) runs on other hw_contexts than the layers, and a runlist is bound to
 * one hw_context (docs/npu-kernels.md "What matters", §3.5), so it is a separate
 * submission whatever K is. Keeping it separate on every device makes the plan,
 * the error's chunk index and the fault sites the same on cpu, sim and xrt; the
 * cost on the CPU is one more loop iteration.
 *
 * The plan does not depend on the token position: the worker builds it once per K
 * and reuses it for every decode step and prompt chunk.
 *
 * ---- Prefill ------------------------------------------------------------------
 *
 * A prompt of P tokens is prefilled in ceil(P / C) chunks of C = prefill_chunk
 * tokens (the last one holds the rest), each planned as above with the same K.
 * Every chunk ends with HEAD: in the engine's sequence model the head is what
 * commits a batch's positions to the KV cache (eng_seq_head: len += n); only the
 * last chunk's logits are used (eng_prefill_chunk.last).
 *
 * Threading: everything here belongs to the worker thread; the functions keep no
 * global state. */
#ifndef MINICPMD_ENGINE_PLAN_H
#define MINICPMD_ENGINE_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/device/device.h"  /* eng_cmd, eng_runlist, ENG_PLAN_ALL */
#include "engine/ert.h"
#include "engine/types.h"

/* Upper bound on n_layers the planner accepts (sanity, not a model limit). */
#define ENG_PLAN_MAX_LAYERS 4096

/* One step's runlists. Caller storage; eng_plan_init fills it, eng_plan_deinit
 * frees what it allocated. All fields are read-only to the caller. */
struct eng_plan {
    int n_layers;
    int k;                       /* effective K, 1 .. n_layers */
    int n_runlists;              /* ceil(n_layers / k) + 1 */
    struct eng_runlist *runlists;
    int n_cmds;                  /* n_layers + 2 */
    struct eng_cmd *cmds;        /* EMBED, LAYER 0 .. n-1, HEAD */
};

/* Plan one step of a model with n_layers (1 .. ENG_PLAN_MAX_LAYERS) in runlists
 * of at most k layer commands: k >= 1 (clamped to n_layers), or ENG_PLAN_ALL.
 * Returns 0, -EINVAL (bad n_layers or k; the reason in err) or -ENOMEM. On error
 * *p is zeroed, and eng_plan_deinit on it is harmless. */
int eng_plan_init(struct eng_plan *p, int n_layers, int k, char *err, size_t errlen);

/* Free the arrays and zero *p. NULL and a zeroed plan are fine. */
void eng_plan_deinit(struct eng_plan *p);

/* ---- Prefill chunks --------------------------------------------------------- */

struct eng_prefill_chunk {
    int index, count;            /* this chunk, 0-based, of count */
    int token_begin, n_tokens;   /* prompt tokens [token_begin, token_begin + n_tokens) */
    bool last;                   /* index == count - 1: its logits are the prompt's */
};

/* How many chunks a prompt of n_prompt tokens takes with chunks of at most
 * chunk_tokens: ceil(n_prompt / chunk_tokens); 0 for n_prompt <= 0.
 * chunk_tokens <= 0 means no limit (one chunk). */
int eng_plan_prefill_count(int n_prompt, int chunk_tokens);

/* Chunk `index` of that split. Returns 0, or -EINVAL when index is out of range. */
int eng_plan_prefill_chunk(int n_prompt, int chunk_tokens, int index,
                           struct eng_prefill_chunk *out);

/* ---- Adaptive K --------------------------------------------------------------
 *
 * Modes (--runlist-layers):
 *   ALL     K = n_layers, never changes; a failure ends the request (this mode
 *           reproduces the monolithic behaviour on purpose).
 *   FIXED   K = N (clamped to n_layers), never changes; a failure ends the request.
 *   AUTO    K starts at the remembered K for this model and device, else the
 *           device's default (ENG_PLAN_ALL or <= 0: all layers). When a runlist
 *           ends in a hang-like state (eng_kpolicy_adapts) the worker resets the
 *           device, drops the sequence's KV state, and asks the policy:
 *             K <- ceil(K / 2)       e.g. 42 -> 21 -> 11 -> 6 -> 3 -> 2 -> 1
 *           and the prompt is replayed with the new K, at most max_retries times
 *           per request. The policy gives up when the state is not hang-like, when
 *           K is already 1, or when the retries are used up. A smaller K stays for
 *           the next requests even when this one gave up (it continues the search;
 *           it costs one more submission per runlist, not correctness).
 *           K recovers: after probe_tokens tokens run without a
 *           fault at a K below the device's default, the next request runs at
 *           min(2K, default) — a probe. A probe that completes resets the interval;
 *           one that hangs halves K back (the usual replay) and doubles the interval
 *           (exponential back-off, at most UT_RUNLIST_PROBE_TOKENS_MAX). No probes
 *           when max_retries is 0: a failed probe must be replayable, never cost the
 *           request. A restart starts from the remembered K if it is younger than
 *           UT_RUNLIST_K_MAX_AGE_S, and probes up from it the same way.
 *
 * On success the policy reports once per new K that it should be remembered
 * (eng_kstate_save): only in AUTO mode.
 *
 * Which states adapt K, and why (docs/npu-xrt.md §1a, §1d):
 *   TIMEOUT     amdxdna's TDR found no progress: the faulting command.
 *   ABORT       the commands behind it after TDR; mainline amdxdna reports a hang
 *               as ABORT.
 *   NORESPONSE  timeout and the scheduler failed to reset: a hang too.
 *   NEW         the chain never started: a chain whose slots overflow the driver's
 *               4 KiB buffer stays NEW, and NEW is one of the states FastFlowLM's
 *               report gives for the 42-layer list. A shorter runlist is exactly the fix.
 *   QUEUED, RUNNING, SUBMITTED
 *               a wait that ended before the command did (XRT's
 *               "qds_device::wait() unexpected command state", a host timeout).
 * Which do not:
 *   ERROR       the firmware's verdict on a command (bad instruction stream, bad
 *               arguments): a shorter runlist runs the same command and fails the
 *               same way, so replays only delay the error.
 *   SKERROR, SKCRASHED  soft-kernel failures, not a runlist-length matter.
 *   COMPLETED and values outside 1..11.
 * The worker resets the device after any failure either way. */


struct eng_kpolicy_opts {
    enum eng_kmode mode;
    int fixed_k;            /* FIXED: K >= 1 */
    int n_layers;           /* 1 .. ENG_PLAN_MAX_LAYERS */
    int device_default_k;   /* AUTO: the device's default K; ENG_PLAN_ALL or <= 0 = all */
    int remembered_k;       /* AUTO: K from eng_kstate_load, 0 = none */
    int max_retries;        /* AUTO: replays per request; < 0 = UT_RUNLIST_RETRIES_DEFAULT */
    int probe_tokens;       /* AUTO: tokens before trying 2K; <= 0 = UT_RUNLIST_PROBE_TOKENS */
};

enum eng_kverdict {
    ENG_KVERDICT_RETRY = 0,  /* reset, drop KV, replay the prompt with eng_kpolicy_k() */
    ENG_KVERDICT_GIVE_UP,    /* end the request with the structured device error */
};

/* Caller storage; fields are read-only outside plan.c. */
struct eng_kpolicy {
    enum eng_kmode mode;
    int n_layers;
    int k;                  /* K for the next attempt, 1 .. n_layers */
    int max_retries;        /* AUTO only; 0 for ALL/FIXED */
    int attempts;           /* tries of the current request so far (>= 1 once begun) */
    int remembered_k;       /* last K reported for saving (or loaded); 0 = none */
    int k_top;              /* AUTO: the device's default K, where recovery stops */
    long long run;          /* AUTO: tokens without a fault at this K */
    int probe_base;         /* AUTO: tokens before a probe, after a good one */
    int probe_after;        /* AUTO: tokens before the next probe (backs off) */
    bool probing;           /* AUTO: K was raised and has not completed a request */
    bool device_changed;    /* the last reset changed how the device runs layers: a
                               failure at K = 1 gets one more replay */
};

/* Returns 0, or -EINVAL (bad n_layers, FIXED with fixed_k < 1, unknown mode; the
 * reason in err). */
int eng_kpolicy_init(struct eng_kpolicy *p, const struct eng_kpolicy_opts *o, char *err,
                     size_t errlen);

/* K for the next runlist plan: 1 .. n_layers. */
int eng_kpolicy_k(const struct eng_kpolicy *p);

/* A new request starts: attempts = 1. */
void eng_kpolicy_begin(struct eng_kpolicy *p);

/* Does a runlist that ended in `state` make AUTO halve K? (table above) */
bool eng_kpolicy_adapts(int state);

/* The current attempt failed with `state`. In AUTO with a hang-like state and
 * K > 1, K is halved (ceil). Returns RETRY (attempts is then incremented: the
 * replay is attempt number p->attempts) or GIVE_UP (attempts unchanged: it is the
 * number of tries made, for eng_device_error.attempts). */
enum eng_kverdict eng_kpolicy_failed(struct eng_kpolicy *p, int state);

/* The request's device work completed. Returns true when K should be saved now
 * (AUTO, and K differs from the remembered one); it is then taken as remembered,
 * so a failing save is not retried after every request. */
bool eng_kpolicy_succeeded(struct eng_kpolicy *p);

/* After a request that completed with `n_tokens` device tokens (prompt fed and
 * generated), and after eng_kpolicy_succeeded(): a probe that completed ends (the
 * interval resets); once probe_after tokens ran at a K below k_top, K becomes
 * min(2K, k_top) for the next request. Returns the new K when it grew, else 0. */
int eng_kpolicy_grow(struct eng_kpolicy *p, int n_tokens);

/* ---- Remembered K ------------------------------------------------------------
 *
 * One JSON file holds the K that worked, per model and device:
 *
 *   {"version": 1,
 *    "entries": {"<model id>": {"<device id>": {"k": 21, "n_layers": 42,
 *                                                "updated": "2026-09-30T12:00:00Z"}}}}
 *
 * Model and device ids are any non-empty strings the caller chooses (e.g. the
 * pack name and hash, and "sim" / "xrt:0000:c6:00.1"). Writes are atomic: a
 * temporary file in the same directory, fsync, rename. Only the worker writes it.
 */

#define ENG_KSTATE_FILE "runlist-k.json"

/* "<state_dir>/runlist-k.json" into buf. Returns 0, or -ENAMETOOLONG. */
int eng_kstate_path(const char *state_dir, char *buf, size_t len);

/* Look up (model_id, device_id) in the file at `path`.
 * Returns 1 and sets *k (>= 1) when found; 0 when the file or the entry does not
 * exist (nothing in err); negative when the file cannot be read (-errno) or is
 * corrupt, or the entry is invalid (-EINVAL): *k is untouched and err holds a
 * one-line warning naming the file. Never fatal: go on without a remembered K. */
int eng_kstate_load(const char *path, const char *model_id, const char *device_id, int *k,
                    char *err, size_t errlen);

/* eng_kstate_load(), and an entry whose "updated" is more than max_age_s seconds
 * before `now` (or missing, or unreadable) has expired: returns 2, *k set to the
 * old value, err saying so. */
int eng_kstate_load_fresh(const char *path, const char *model_id, const char *device_id,
                          long long max_age_s, long long now, int *k, char *err,
                          size_t errlen);

/* Set (model_id, device_id) to k (>= 1; n_layers is recorded for humans, 0 to
 * omit), keeping the file's other entries. Missing parent directories are created
 * (0755). Returns 0; 1 when written but the old file was unreadable or corrupt and
 * has been replaced (its other entries are lost; err says why); negative -errno or
 * -EINVAL when nothing was written (err says why; the old file is untouched). */
int eng_kstate_save(const char *path, const char *model_id, const char *device_id, int k,
                    int n_layers, char *err, size_t errlen);

#endif
