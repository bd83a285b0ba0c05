/* xrt-state — the xrt device's state, shared by its two files: dev-xrt.c (loading,
 * running runlists, reset) and xrt-seq.c (the KV slots: sequences, their state BOs,
 * and the KV the CPU hands over).
 *
 * Internal to engine/device/xrt/. */
#ifndef MINICPMD_ENGINE_XRT_STATE_H
#define MINICPMD_ENGINE_XRT_STATE_H

#include "engine/device/device.h"
#include "engine/device/xrt/bridge.h"
#include "engine/device/xrt/kset.h"
#include "engine/device/xrt/npu-layout.h"
#include "engine/device/xrt/xrt-prefill.h"
#include "engine/xrt.h"

/* The per-layer BOs every sequence shares; each slot has its own `state`. */
enum { LB_POOL, LB_CONSTS, LB_ACT, LB_N };

/* A KV slot: one sequence's state BO per layer, and the layer runs bound to them. */
struct eng_device_seq {
    struct xrt_dev *x;
    int index;
    bool open;
    int n_ctx;
    int len;                     /* positions in the state BOs */
    int32_t *ids;                /* (capacity) the token of each of them */
    int *state_bo;               /* (n_layers) */
    int *run;                    /* (n_layers) the layer step over this slot's state */
    xpf_seq *cpu;                /* the CPU's copy (--npu-prefill cpu|auto), or NULL */
};

struct xrt_dev {
    struct eng_device dev;       /* dev.context points back here */
    struct eng_xrt_config cfg;
    char kernels_dir[4096];
    xrtb_dev *b;
    struct eng_kset ks;
    eng_st *st;
    int n_layers, hidden, n_vocab, capacity;
    int *ctx_of;                 /* per kset context: bridge id, -1 = not loaded */
    int *kern_of;                /* per kset kernel: bridge id, -1 */
    struct eng_npu_patch (*patch)[4];  /* per kset kernel with attnpos */
    int *glob_bo;                /* per kset global */
    int *layer_bo;               /* (n_layers, LB_N) */
    struct eng_device_seq *slots;
    int n_slots;
    int tail_run[2];
    int xres, logits;            /* global indices */
    bool loaded, needs_reset;
    bool single;                 /* one run per dispatch (RUN, or AUTO after every K failed) */
    bool to_single;              /* AUTO: a one-layer runlist failed; single runs from reset */
    bool changed;                /* the last reset switched to single runs */
    struct eng_device_opts opts; /* threads and activations of the CPU prefill */
    xpf *pf;                     /* the CPU prefill (--npu-prefill cpu|auto), or NULL */
    uint16_t *kv_scratch;        /* one row's K and V of the source's heads */
    float *xres_keep;            /* a multi-position NPU batch: each position's residual
                                    between runlists (max_batch x hidden) */
    enum eng_ert_state last_failure;
    char desc[320];
};

/* The conformance build compiles these files against the double (xrt-impl.h); its
 * copies of the functions below, which call the bridge, get other names so that
 * both can live in one binary. */
#ifdef MINICPMD_XRT_DOUBLE
#define xd_make_layer_run xd_make_layer_run_double
#define xs_alloc_slots xs_alloc_slots_double
#define xs_free_slots xs_free_slots_double
#define xs_sync_back xs_sync_back_double
#define xs_rows xs_rows_double
#define xs_lost_all xs_lost_all_double
#define xs_max_seqs xs_max_seqs_double
#define xs_seq_begin xs_seq_begin_double
#define xs_seq_end xs_seq_end_double
#define xs_seq_truncate xs_seq_truncate_double
#define xs_seq_write_kv xs_seq_write_kv_double
#define xs_prefill_start xs_prefill_start_double
#define xs_prefill_finish xs_prefill_finish_double
#endif

/* dev-xrt.c: the run of the layer step for layer l over `state` (a slot's BO). */
int xd_make_layer_run(struct xrt_dev *x, int l, int state_bo, int *out, char *err,
                      size_t errlen);

/* xrt-seq.c */
/* How many slots --parallel asks for and memory allows: their state BOs and runs
 * (and the CPU copies, with x->pf), logged. */
int xs_alloc_slots(struct xrt_dev *x, char *err, size_t errlen);
void xs_free_slots(struct xrt_dev *x);
/* The slot's rows [from, len) back from the device (one sync per layer) and the
 * eng_kv_src that reads them. */
int xs_sync_back(struct eng_device_seq *s, int from, char *err, size_t errlen);
struct eng_kv_src xs_rows(struct eng_device_seq *s);
/* Every slot lost its KV (a reset). */
void xs_lost_all(struct xrt_dev *x);

int xs_max_seqs(void *ctx);
int xs_seq_begin(void *ctx, int n_ctx, eng_device_seq **out, char *err, size_t errlen);
void xs_seq_end(void *ctx, eng_device_seq *s);
void xs_seq_truncate(void *ctx, eng_device_seq *s, int n);
int xs_seq_write_kv(void *ctx, eng_device_seq *s, const struct eng_kv_src *src, int pos, int n,
                    char *err, size_t errlen);
int xs_prefill_start(void *ctx, eng_device_seq *s, const struct eng_batch *b);
bool xs_prefill_finish(void *ctx, eng_device_seq *s, bool wait, struct eng_run_result *out);

#endif
