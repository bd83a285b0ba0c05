/* xrt — the NPU device's face to the daemon: its process-wide settings, the early
 * check `--device xrt` / `--device auto` make before the daemon listens
 * (eng_engine_choose_device), and --npu-probe. The backend's own entry points are
 * in engine/device/xrt/xrt-dev.h.
 *
 * The backend itself (dev-xrt.c) and the C++ bridge exist only in builds that
 * found XRT >= 2.18 (MINICPMD_HAVE_XRT); everything declared here links in every
 * build and says so when the backend is absent. */
#ifndef MINICPMD_ENGINE_XRT_H
#define MINICPMD_ENGINE_XRT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The device node of NPU 0 (amdxdna). */
#define ENG_XRT_ACCEL_NODE "/dev/accel/accel0"
/* Host-side wait per submission: above every amdxdna TDR window but mainline's
 * 60 s (docs/npu-xrt.md §1d), so the driver's own TIMEOUT normally arrives first. */
#define ENG_XRT_DEFAULT_TIMEOUT_MS 10000

/* Settings of the xrt device; set once at startup, before any device opens. Zero is
 * the default for each. Strings are copied. */
struct eng_xrt_config {
    const char *kernels_dir;    /* --npu-kernels; NULL: <pack>/open_kernels */
    int ctx_size;               /* --ctx-size; 0: the model's, capped at the kernel set's
                                   max_ctx_default */
    int timeout_ms;             /* host wait per submission; 0: ENG_XRT_DEFAULT_TIMEOUT_MS */
    const char *accel_node;     /* NULL: ENG_XRT_ACCEL_NODE (tests point it elsewhere) */
    bool no_runlist;            /* run one at a time (tests; XRT without runlist) */
    int submit;                 /* enum eng_xrt_submit */
    int prefill;                /* enum eng_xrt_prefill */
    int slots;                  /* KV slots (--parallel): each one set of state BOs per
                                   layer; fewer when half the available memory does not
                                   hold them; 0: 1 */
};

/* How layer runs are submitted. AUTO: runlists of the planner's K; when a runlist
 * of a single layer fails too (every K has failed: the planner halves K down to 1
 * first), the device falls back to RUN for good. RUN: one xrt::run per dispatch,
 * started and waited, the only mode the kernels are known to decode in on XDNA 2
 * (docs/npu-kernels.md §3.5). */
enum eng_xrt_submit { ENG_XRT_SUBMIT_AUTO = 0, ENG_XRT_SUBMIT_RUNLIST, ENG_XRT_SUBMIT_RUN };

/* Where the xrt device prefills a prompt. NPU: token by token through the kernels
 * (no second copy of the weights). CPU: the CPU engine's batched forward pass on
 * the same pack, its K/V rows then handed to the NPU, which decodes. AUTO: per
 * prefill batch, whichever the rates measured at load say is faster. */
enum eng_xrt_prefill { ENG_XRT_PREFILL_NPU = 0, ENG_XRT_PREFILL_CPU, ENG_XRT_PREFILL_AUTO };

void eng_xrt_configure(const struct eng_xrt_config *c);

/* Was the backend built (XRT >= 2.18 found)? "XRT 2.18…" / why not. */
bool eng_xrt_built(void);
const char *eng_xrt_build_info(void);
/* Does the configured device node (default /dev/accel/accel0) exist? */
bool eng_xrt_node_present(void);

/* Everything `--device xrt` needs, checked without touching the device, in this
 * order: a kernel set is found for the pack at pack_dir (or in the configured
 * kernels_dir) and matches the model, every file it names exists, the context
 * fits it; the backend is built; the NPU's device node exists. Returns 0, or
 * negative with one line in err (the first problem). */
int eng_xrt_preflight(const char *pack_dir, char *err, size_t errlen);

/* The whole probe for main(): preflight, open the xrt device, run. Prints the
 * report to out and one line to errout when there is no NPU. Returns the exit code:
 * 0 some K worked, 1 no NPU or nothing worked. */
int eng_xrt_probe_main(const char *pack_dir, const char *state_dir, FILE *out, FILE *errout);

#endif
