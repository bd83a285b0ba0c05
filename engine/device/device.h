/* device — the interface every backend (cpu, sim, xrt) implements, for the worker.
 *
 * A device is a driver: open it, load a model into it, begin a sequence (its KV
 * slots), run one runlist at a time, reset it after a fault, close it. A runlist
 * (struct eng_runlist below; the worker's planner, engine/worker/plan.h, makes
 * them) is an ordered list of commands — EMBED, LAYER i, HEAD — over one batch of
 * positions; running it ends in an XRT command state (engine/ert.h), and
 * only ENG_ERT_COMPLETED is success.
 *
 * Shape: `struct eng_device` is a `const struct eng_device_i *` of function
 * pointers plus the backend's `void *context`. Only the eng_device_* wrappers
 * below read `iface`; they assert their arguments and stand in for (optional)
 * members left NULL, so a caller never tests a pointer.
 *
 * Backends are found by name in a small registry (eng_device_open); "auto" is
 * not a name here: eng_engine_choose_device() (engine/engine.h) settles it.
 *
 * Threading: a device, its model and its sequences belong to one thread at a time
 * (the worker). The one exception is the cancel flag of a batch, which any thread
 * may set while a runlist runs (see struct eng_batch).
 *
 * Internal to the engine: the facade (engine/engine.c) opens the device and hands
 * it to the worker, which alone drives it; server/ and api/ never see it. */
#ifndef MINICPMD_ENGINE_DEVICE_H
#define MINICPMD_ENGINE_DEVICE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/device/fault.h"
#include "engine/ert.h"
#include "engine/types.h"

/* ---- runlists ------------------------------------------------------------------
 * What a device runs. The worker's planner (engine/worker/plan.h) cuts a step into
 * runlists; a device only executes them, so the types live here. */

/* K meaning "all layers in one runlist" (the value of cfg's CFG_RUNLIST_ALL). */
#define ENG_PLAN_ALL (-1)

enum eng_cmd_kind {
    ENG_CMD_EMBED = 0,   /* token embedding of the batch */
    ENG_CMD_LAYER,       /* one decoder layer (attention + MLP) */
    ENG_CMD_HEAD,        /* final norm + lm_head */
};

struct eng_cmd {
    enum eng_cmd_kind kind;
    int layer;           /* LAYER: 0 .. n_layers-1; EMBED/HEAD: -1 */
};

struct eng_runlist {
    int index;                   /* position in the step, 0 .. n_runlists-1 */
    const struct eng_cmd *cmds;  /* its commands, in order (points into the plan) */
    int n_cmds;
    int layer_begin, layer_end;  /* its LAYER commands are [layer_begin, layer_end);
                                    equal for the head runlist */
    bool has_embed, has_head;
};

/* A sequence on a device: its KV cache. Opaque; each backend defines it. */
typedef struct eng_device_seq eng_device_seq;

/* The positions one runlist works on. Caller storage; borrowed for one run. */
struct eng_batch {
    const int32_t *tokens;      /* (n_tokens) ids; read by EMBED */
    int n_tokens;               /* >= 1; 1 in decode */
    float *logits;              /* (n_vocab) written by HEAD for the batch's last
                                   position; NULL: HEAD commits the batch to the KV
                                   cache without computing logits */
    int n_logits;               /* with logits: the rows HEAD writes, one per position
                                   of the batch's last n_logits (row after row, each
                                   n_vocab); 0 or 1: the last position only. A prompt
                                   scored in prefill's batches asks for all of them */
    /* Where the batch sits in its request, for fault matching and messages: */
    enum eng_phase phase;
    int token_index;            /* prefill: the index of the batch's first prompt
                                   token; decode: the decode step, 0 = the first
                                   (the coordinates of fault.h's `token=`) */
    /* (optional) Set by any thread to ask the device to stop waiting: a device that
     * waits (the sim's hang, a real NPU's wait) polls it and ends the run early in
     * ENG_ERT_ABORT. NULL = never. */
    const atomic_bool *cancel;
};

/* How a runlist ended. */
struct eng_run_result {
    enum eng_ert_state state;   /* only ENG_ERT_COMPLETED is success */
    int failed_cmd;             /* index in rl->cmds of the command that failed; -1 when
                                   COMPLETED or unknown */
    int failed_layer;           /* that command's layer, -1 for EMBED/HEAD or unknown */
    int64_t elapsed_us;         /* from submission to the final state (measured by
                                   eng_device_run_runlist, backends leave it) */
    bool on_host;               /* the host CPU ran it, not the device (xrt's prefill
                                   on the CPU, --npu-prefill) */
    char message[160];          /* one line, empty when COMPLETED */
};

/* KV rows computed elsewhere (the CPU engine's prefill, handed to the NPU), for
 * seq_write_kv. */
struct eng_kv_src {
    int n_kv;                   /* distinct KV heads in a row (a device holding more,
                                   repeated, repeats each n_kv_dev / n_kv times in
                                   turn: HF repeat_interleave) */
    int head_dim;
    /* Fill k and v (n_kv * head_dim bf16 each, head after head; K rotated, no scale
     * folded in) with layer l's row of position pos. 0 or negative. */
    int (*row)(const void *arg, int layer, int pos, uint16_t *k, uint16_t *v);
    const void *arg;
    const int32_t *ids;         /* (optional) the token of each position, or NULL */
};

/* What eng_device_open gives a backend. Zero ({0}) is a sane default for each. */
struct eng_device_opts {
    /* cpu and sim (the model they compute with) */
    int n_threads;              /* compute pool size; <= 0: online CPUs */
    enum eng_act act;           /* ENG_ACT_Q8 (default) or ENG_ACT_F32 */
    enum eng_qk_norm qk_norm;
    enum eng_weights_place weights;
    const char *state_dir;      /* where the measured decode kernel is remembered; NULL */
    eng_log_fn log;             /* the model's lines, warnings included; may be NULL */
    void *log_ctx;

    /* sim: the model of NPU firmware */
    int sim_runlist_limit;      /* a runlist with more LAYER commands runs nothing, hangs
                                   sim_timeout_ms and ends in TIMEOUT; failed_cmd is the
                                   first LAYER command over the limit; 0 = no limit */
    int sim_timeout_ms;         /* how long a hang lasts before TIMEOUT; 0 = at once */
    int sim_latency_us;         /* slept per command */
    const struct eng_fault_list *faults; /* injected faults; copied at open; NULL = none */
};

/* The backend's functions. `ctx` is eng_device.context. */
struct eng_device_i {
    /* Short name: "cpu", "sim"; also the device id of the remembered K. */
    const char *(*get_name)(void *ctx);
    /* One line for logs and /health, e.g. "sim: cpu (avx512-vnni) behind a runlist
     * limit of 36 layers, 2000 ms timeout". Valid until close. */
    const char *(*get_description)(void *ctx);
    /* The K the planner's AUTO starts from: ENG_PLAN_ALL or >= 1. */
    int (*default_k)(void *ctx);
    /* Positions one batch may hold; 0 = no limit. (optional) */
    int (*max_batch)(void *ctx);
    /* Sequences that may exist at once, each with its own KV cache; the worker keeps
     * that many prompt-cache slots. (optional: 1) */
    int (*max_seqs)(void *ctx);
    /* Map/upload the pack's weights (the pack must outlive the device). */
    int (*load_model)(void *ctx, const eng_pack *pack, char *err, size_t errlen);
    /* A sequence with room for n_ctx positions. */
    int (*seq_begin)(void *ctx, int n_ctx, eng_device_seq **out, char *err, size_t errlen);
    void (*seq_end)(void *ctx, eng_device_seq *seq);
    /* Drop positions n.. and any batch in flight (0 after a fault: the KV is lost). */
    void (*seq_truncate)(void *ctx, eng_device_seq *seq, int n);
    /* Run one runlist to its final state; fills *out (always). */
    void (*run_runlist)(void *ctx, eng_device_seq *seq, const struct eng_runlist *rl,
                        const struct eng_batch *b, struct eng_run_result *out);
    /* (optional) Run one runlist over the batches of n sequences at once
     * (continuous batching: each weight is read once for all of them; attention per
     * sequence over its own KV cache); b[i].logits gets sequence i's logits. A
     * device without it (the NPU, whose kernels decode one position per run, and
     * the sim that models it) gets the sequences' steps one after another. */
    void (*run_runlist_multi)(void *ctx, eng_device_seq *const *seqs,
                              const struct eng_runlist *rl, const struct eng_batch *b, int n,
                              struct eng_run_result *out);
    /* (optional) dst's KV becomes src's first n positions (src holds at least n):
     * a prompt several requests share is computed once. */
    int (*seq_copy)(void *ctx, eng_device_seq *dst, eng_device_seq *src, int n);
    /* (optional) Positions [pos, pos + n) of every layer from src (pos <= the
     * sequence's length), then the sequence's length becomes pos + n: KV computed by
     * another device joins this one's cache, and decoding continues from it. */
    int (*seq_write_kv)(void *ctx, eng_device_seq *seq, const struct eng_kv_src *src, int pos,
                        int n, char *err, size_t errlen);
    /* (optional) A whole prefill batch (every runlist of a plan) computed off the
     * calling thread while the caller runs other sequences' runlists: xrt's prompt
     * on the CPU beside NPU decode. b->logits must stay valid, and the sequence untouched, until
     * prefill_finish. Returns 1 when the batch started; 0 when it is to run through
     * run_runlist as usual (the device would not run it on the host); -EBUSY while
     * the host computes another sequence's batch (try again later). */
    int (*prefill_start)(void *ctx, eng_device_seq *seq, const struct eng_batch *b);
    /* (optional) Finish seq's started batch: with `wait` wait for it, else return
     * false while it still runs; then hand its KV over on the calling thread and
     * fill *out as run_runlist does (the batch's positions join the sequence when
     * it COMPLETED). */
    bool (*prefill_finish)(void *ctx, eng_device_seq *seq, bool wait,
                           struct eng_run_result *out);
    /* Bring the device back after a failed runlist. (optional: nothing to do) */
    int (*reset)(void *ctx, char *err, size_t errlen);
    /* (optional) True once after a reset that changed how the device runs layers
     * (xrt's AUTO submission: runlists -> one run per dispatch), so a failure at
     * K = 1 is still worth a replay. */
    bool (*reset_changed_mode)(void *ctx);
    /* Free everything; sequences must have ended. */
    void (*close)(void *ctx);
};

struct eng_device {
    const struct eng_device_i *iface;
    void *context;
};

/* ---- opening ------------------------------------------------------------------ */

/* Open the backend called `name` ("cpu", "sim", "xrt" when built). Returns 0 and a device the caller
 * closes with eng_device_free(), or -ENOENT (no such backend; err lists the
 * names), -EINVAL (bad options) or -ENOMEM, with a one-line reason in err. */
int eng_device_open(const char *name, const struct eng_device_opts *o, struct eng_device **out,
                    char *err, size_t errlen);

/* Close the device (NULL is fine). Its sequences must have ended. */
void eng_device_free(struct eng_device *d);

/* The registered backends, in registry order: the name of backend i, or NULL past
 * the last. */
const char *eng_device_reg_name(size_t i);

/* ---- the wrappers (the only readers of iface) --------------------------------- */

const char *eng_device_get_name(const struct eng_device *d);
const char *eng_device_get_description(const struct eng_device *d);
int eng_device_default_k(const struct eng_device *d);
int eng_device_max_batch(const struct eng_device *d);        /* 0 = no limit */
int eng_device_max_seqs(const struct eng_device *d);         /* >= 1 */
int eng_device_load_model(struct eng_device *d, const eng_pack *pack, char *err, size_t errlen);
int eng_device_seq_begin(struct eng_device *d, int n_ctx, eng_device_seq **out, char *err,
                         size_t errlen);
void eng_device_seq_end(struct eng_device *d, eng_device_seq *seq);   /* NULL seq is fine */
void eng_device_seq_truncate(struct eng_device *d, eng_device_seq *seq, int n);

/* Run `rl` over batch `b` and wait for its final state. Always fills *out.
 * Returns 0 when out->state is ENG_ERT_COMPLETED, -EIO otherwise. A device that
 * failed a runlist may refuse to run another until eng_device_reset(). */
int eng_device_run_runlist(struct eng_device *d, eng_device_seq *seq, const struct eng_runlist *rl,
                           const struct eng_batch *b, struct eng_run_result *out);

/* Copy src's first n KV positions into dst (seq_copy). Returns 0, -ENOTSUP (the
 * device cannot) or -EINVAL. */
bool eng_device_can_copy(const struct eng_device *d);
int eng_device_seq_copy(struct eng_device *d, eng_device_seq *dst, eng_device_seq *src, int n);

/* Write KV rows from src into seq (seq_write_kv). Returns 0, -ENOTSUP (the device
 * cannot), or negative with err. */
int eng_device_seq_write_kv(struct eng_device *d, eng_device_seq *seq,
                            const struct eng_kv_src *src, int pos, int n, char *err,
                            size_t errlen);

/* Background prefill (prefill_start/prefill_finish): eng_device_prefill_start
 * returns 0 from a device without it. eng_device_prefill_finish returns -EAGAIN while the batch still runs (not
 * waiting), else as eng_device_run_runlist. */
bool eng_device_can_prefill_async(const struct eng_device *d);
int eng_device_prefill_start(struct eng_device *d, eng_device_seq *seq,
                             const struct eng_batch *b);
int eng_device_prefill_finish(struct eng_device *d, eng_device_seq *seq, bool wait,
                              struct eng_run_result *out);

/* Can the device run several sequences' batches as one (run_runlist_multi)? */
bool eng_device_can_batch(const struct eng_device *d);

/* Run `rl` over the batches b[0 .. n) of seqs[0 .. n) as one batch (only when
 * eng_device_can_batch). As eng_device_run_runlist otherwise; a failure fails the
 * step of every sequence in it. */
int eng_device_run_runlist_multi(struct eng_device *d, eng_device_seq *const *seqs,
                                 const struct eng_runlist *rl, const struct eng_batch *b, int n,
                                 struct eng_run_result *out);

/* Reset after a failed runlist. Returns 0 (also when the backend has nothing to
 * reset) or negative when the device could not recover (err says why). */
int eng_device_reset(struct eng_device *d, char *err, size_t errlen);
bool eng_device_reset_changed_mode(struct eng_device *d);   /* false when not implemented */

/* ---- backends (device.c's registry calls these) ------------------------------- */

int eng__device_cpu_open(const struct eng_device_opts *o, struct eng_device **out, char *err,
                         size_t errlen);
int eng__device_sim_open(const struct eng_device_opts *o, struct eng_device **out, char *err,
                         size_t errlen);

#endif
