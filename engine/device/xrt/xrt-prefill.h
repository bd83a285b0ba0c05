/* xrt-prefill — the xrt device's prompt on the CPU (--npu-prefill): the CPU engine
 * runs a prefill batch through its batched forward pass on the same pack (the
 * weights mapped for the CPU beside the NPU's packed copy), and its K/V rows are
 * handed to the NPU's state BOs (the device's seq_write_kv), so that decoding
 * continues on the NPU from there. The CPU keeps its own copy of the sequence's KV;
 * positions the NPU decoded are read back from the state BOs before the CPU
 * prefills after them (a second turn).
 *
 * Internal to engine/device/xrt/. */
#ifndef MINICPMD_ENGINE_XRT_PREFILL_H
#define MINICPMD_ENGINE_XRT_PREFILL_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/device/device.h"
#include "engine/xrt.h"

/* Rates the auto choice compares (measured at load). */
struct xpf_rates {
    double npu_ms_per_token;    /* one NPU decode step (prefill there is token by token) */
    double cpu_ms_fixed;        /* a CPU batch's cost independent of its length (one
                                   pass over the weights) plus the hand-off */
    double cpu_ms_per_token;    /* each further position of a CPU batch */
};

/* Where a prefill of n positions runs under `mode` (enum eng_xrt_prefill): true =
 * the CPU. AUTO compares n * npu_ms_per_token with cpu_ms_fixed + n *
 * cpu_ms_per_token; `why` (may be NULL) gets one line with the numbers. */
bool xpf_choose_cpu(int mode, int n, const struct xpf_rates *r, char *why, size_t whylen);

typedef struct xpf xpf;

/* The CPU side for `pack` with the device options' threads and activations, a
 * sequence of n_ctx positions. Measures the CPU's rates when mode is AUTO. */
int xpf_open(const eng_pack *pack, const struct eng_device_opts *o, int mode, int n_ctx,
             xpf **out, char *err, size_t errlen);
void xpf_free(xpf *p);
/* The rates (the NPU's is the caller's to fill). */
struct xpf_rates *xpf_rates(xpf *p);
/* Resident memory the CPU side added at open, bytes (VmRSS before/after). */
long long xpf_rss_added(const xpf *p);

/* Positions the CPU's copy holds. */
int xpf_len(const xpf *p);

/* The device dropped positions n.. (truncate, reset): so does the CPU's copy. */
void xpf_truncate(xpf *p, int n);

/* Does batch b run on the CPU? Logs AUTO's reason once per prefill through log. */
bool xpf_takes(xpf *p, int mode, const struct eng_batch *b, eng_log_fn log, void *log_ctx);

/* Run runlist rl of prefill batch b on the CPU. The device's sequence holds
 * dev_len positions (read back through dev_rows when the CPU's copy is shorter);
 * at the HEAD command the batch's rows go to the device through
 * eng_device_seq_write_kv. Fills *out. */
void xpf_run(xpf *p, struct eng_device *dev, eng_device_seq *seq, int dev_len,
             const struct eng_kv_src *dev_rows, const struct eng_runlist *rl,
             const struct eng_batch *b, struct eng_run_result *out);

#endif
