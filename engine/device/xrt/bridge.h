/* bridge — the C face of the C++17 translation unit that talks to XRT.
 *
 * XRT's hw_context, runlist, ext::bo and the exceptions the NPU path throws exist
 * only in C++ (docs/npu-xrt.md §1b: no extern "C" block in xrt_hw_context.h or
 * experimental/xrt_{kernel,ext}.h), so engine/device/xrt/dev-xrt.c drives the NPU through
 * these functions and bridge.cpp alone includes XRT. Modelled on the public headers
 * of XRT 2.18 (202420.2.18.*) and HEAD 963c58ee22: xrt/xrt_device.h,
 * xrt/xrt_kernel.h, xrt/xrt_bo.h, xrt/xrt_hw_context.h,
 * {xrt/,}experimental/xrt_kernel.h (xrt::runlist), {xrt/,}experimental/xrt_ext.h
 * (xrt::ext::bo).
 *
 * Objects live inside the bridge and are named by small integer ids, in creation
 * order from 0: contexts (one xrt::hw_context per xclbin), kernels (an
 * xrt::kernel "MLIR_AIE" plus its instruction BO), BOs and runs. Every xrt::run is
 * created once and kept alive at a stable address until xrtb_close (a runlist does
 * not own its runs: docs/npu-kernels.md §6).
 *
 * Errors: no C++ exception ever leaves the bridge. Setup calls return 0 or a
 * negative errno with one line in `err`; xrtb_submit reports how the submission
 * ended as an ERT state (engine/ert.h numbering, XRT's own) in struct xrtb_status.
 *
 * Threading: one xrtb_dev belongs to one thread at a time (the worker).
 *
 * The conformance double (tests/xrt/double) compiles bridge.cpp against a
 * stand-in of exactly this XRT surface; that build renames the functions below
 * (MINICPMD_XRT_DOUBLE) so both can live in one test binary next to a real one. */
#ifndef MINICPMD_ENGINE_XRT_BRIDGE_H
#define MINICPMD_ENGINE_XRT_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef MINICPMD_XRT_DOUBLE
#define xrtb_version xrtbd_version
#define xrtb_open xrtbd_open
#define xrtb_close xrtbd_close
#define xrtb_context xrtbd_context
#define xrtb_kernel xrtbd_kernel
#define xrtb_kernel_insts xrtbd_kernel_insts
#define xrtb_kernel_sync xrtbd_kernel_sync
#define xrtb_bo xrtbd_bo
#define xrtb_bo_map xrtbd_bo_map
#define xrtb_bo_size xrtbd_bo_size
#define xrtb_bo_sync xrtbd_bo_sync
#define xrtb_run xrtbd_run
#define xrtb_submit xrtbd_submit
#define xrtb_reset xrtbd_reset
#define xrtb_set_runlist xrtbd_set_runlist
#define xrtb_uses_runlist xrtbd_uses_runlist
#endif

typedef struct xrtb_dev xrtb_dev;

/* Data BO sizes are rounded up to this ("XDNA wants 1 MB-aligned buffer sizes",
 * docs/npu-kernels.md §3.1). */
#define XRTB_BO_ALIGN (1u << 20)
/* Opcode 3: the transaction opcode of an mlir-aie run (arg 0). */
#define XRTB_OPCODE 3
/* After a host wait times out, one more wait this long tells a late command from
 * a hung one before anything is reset (OpenFlowLM-Next's run_split waits once
 * more too, docs/npu-kernels.md §5). */
#define XRTB_LATE_MS 1000
/* At most 8 buffer arguments per run (docs/npu-kernels.md §3.8). */
#define XRTB_MAX_BUFS 8

struct xrtb_opts {
    unsigned device_index;      /* xrt::device(index); 0 = /dev/accel/accel0 */
    bool no_runlist;            /* submit runs one at a time even where XRT has
                                   xrt::runlist (also forced when it has not) */
};

/* How one submission ended. */
struct xrtb_status {
    int state;                  /* ENG_ERT_*: COMPLETED (4) or the failure */
    int failed;                 /* index into the submitted runs of the run that
                                   failed, -1 when unknown or none */
    bool host_timeout;          /* the host-side wait gave up, and a second wait of
                                   XRTB_LATE_MS did not see it finish either: hung
                                   (the device may still be working: xrtb_reset
                                   waits it out) */
    bool late;                  /* a wait ran past timeout_ms but the submission
                                   finished within the second wait: late, not hung */
    bool cancelled;             /* the cancel flag ended the wait (state ABORT) */
    bool has_health;            /* aie_error context-health words below */
    uint32_t txn_op_idx, ctx_pc, fatal_error_type;
    int n_health;               /* raw health words XRT returned */
    int n_submissions;          /* runlists (or single runs) submitted */
    char message[160];          /* one line; "" on success */
};

/* "XRT 2.18.179 (runlist)" or "conformance double"; static storage. */
const char *xrtb_version(void);

/* Open the NPU. Returns 0, or negative with a reason in err. */
int xrtb_open(const struct xrtb_opts *o, xrtb_dev **out, char *err, size_t errlen);

/* Wait out anything in flight, free everything. NULL is fine. */
void xrtb_close(xrtb_dev *d);

/* xrt::xclbin(path), device.register_xclbin, xrt::hw_context(device, uuid). */
int xrtb_context(xrtb_dev *d, const char *xclbin_path, int *out, char *err, size_t errlen);

/* xrt::kernel(ctx, "MLIR_AIE") and its instruction BO:
 * xrt::bo(device, 4 * n_words, xrt::bo::flags::cacheable, kernel.group_id(1)),
 * filled with `words` and synced to the device. */
int xrtb_kernel(xrtb_dev *d, int ctx, const uint32_t *words, size_t n_words, int *out,
                char *err, size_t errlen);

/* The mapped instruction words of kernel k (patch them, then xrtb_kernel_sync). */
uint32_t *xrtb_kernel_insts(xrtb_dev *d, int k, size_t *n_words);
int xrtb_kernel_sync(xrtb_dev *d, int k, char *err, size_t errlen);

/* A data BO: xrt::ext::bo(device, bytes rounded up to XRTB_BO_ALIGN), mapped and
 * zeroed (not yet synced). */
int xrtb_bo(xrtb_dev *d, size_t bytes, int *out, char *err, size_t errlen);
void *xrtb_bo_map(xrtb_dev *d, int bo);
size_t xrtb_bo_size(xrtb_dev *d, int bo);
/* bo.sync(to_device ? XCL_BO_SYNC_BO_TO_DEVICE : XCL_BO_SYNC_BO_FROM_DEVICE, size,
 * offset); size 0 = the whole BO. */
int xrtb_bo_sync(xrtb_dev *d, int bo, bool to_device, size_t size, size_t offset, char *err,
                 size_t errlen);

/* xrt::run(kernel k) with arg 0 = opcode 3, arg 1 = the kernel's instruction BO,
 * arg 2 = its length in 32-bit words, args 3.. = the n_bos data BOs. */
int xrtb_run(xrtb_dev *d, int k, const int *bos, int n_bos, int *out, char *err, size_t errlen);

/* Execute runs[0..n) in order and wait. Consecutive runs of one hw_context go
 * into one xrt::runlist (kept and re-executed while the same runs are submitted
 * together again), which is waited for before the next one is submitted; without
 * runlists each run is started and waited alone. Each wait gives up after
 * timeout_ms (0 = never) and asks stop(stop_arg) (may be NULL) every 50 ms: true
 * ends the wait in ABORT. The first failure ends the submission; the rest is not
 * submitted. Always fills *st. */
void xrtb_submit(xrtb_dev *d, const int *runs, int n, int timeout_ms,
                 bool (*stop)(const void *stop_arg), const void *stop_arg,
                 struct xrtb_status *st);

/* Submit layer groups as runlists (true, where XRT has them) or one run at a time
 * (false). Only between submissions, with nothing in flight (after xrtb_reset). */
void xrtb_set_runlist(xrtb_dev *d, bool on);
bool xrtb_uses_runlist(const xrtb_dev *d);

/* After a failed submission: wait out every runlist still executing (up to
 * wait_ms each), reset and forget them (they are rebuilt on the next submit), and
 * replace the runs of any list that would not finish. Returns 0, or negative
 * when something is still stuck (err says what; the caller may close and reopen). */
int xrtb_reset(xrtb_dev *d, int wait_ms, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
