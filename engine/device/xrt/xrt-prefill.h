/* xrt-prefill — the xrt device's prompt on the CPU (--npu-prefill): the CPU engine
 * runs a prefill batch through its batched forward pass on the same pack (the
 * weights mapped for the CPU beside the NPU's packed copy), and its K/V rows are
 * handed to the NPU's state BOs (the device's seq_write_kv), so that decoding
 * continues on the NPU from there. Each device sequence has a CPU copy of its KV
 * (xpf_seq); positions the NPU decoded are read back from the state BOs before the
 * CPU prefills after them (a second turn).
 *
 * A batch runs either on the calling thread (xpf_run, runlist by runlist) or in
 * the background (xpf_start .. xpf_finish): one thread of xpf's computes it on the
 * CPU model's pool while the caller drives the NPU for other sequences; the
 * hand-off to the state BOs stays the caller's step. The CPU computes one batch at
 * a time.
 *
 * Internal to engine/device/xrt/. */
#ifndef MINICPMD_ENGINE_XRT_PREFILL_H
#define MINICPMD_ENGINE_XRT_PREFILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
typedef struct xpf_seq xpf_seq;

/* The CPU side for `pack` with the device options' threads and activations,
 * sequences of n_ctx positions. Measures the CPU's rates when mode is AUTO. */
int xpf_open(const eng_pack *pack, const struct eng_device_opts *o, int mode, int n_ctx,
             xpf **out, char *err, size_t errlen);
/* Waits out a background batch. */
void xpf_free(xpf *p);
/* The rates (the NPU's is the caller's to fill). */
struct xpf_rates *xpf_rates(xpf *p);
/* Resident memory the CPU side added at open, bytes (VmRSS before/after). */
long long xpf_rss_added(const xpf *p);
/* Bytes of one sequence's CPU copy of the KV. */
size_t xpf_seq_bytes(const xpf *p);

/* The CPU copy of one device sequence; freed (after its background batch, if any)
 * by xpf_seq_free, before xpf_free. */
int xpf_seq_new(xpf *p, xpf_seq **out, char *err, size_t errlen);
void xpf_seq_free(xpf_seq *s);

/* Positions the CPU's copy holds (rows past the device's may be kept: the ids say
 * which a later batch can take, e.g. a replay after a reset). */
int xpf_len(const xpf_seq *s);
/* Of the device's first n positions, with tokens ids[0..n), how many leading ones
 * the copy holds (the rest are read back from the device before a batch). */
int xpf_agree(const xpf_seq *s, const int32_t *ids, int n);
/* Drop the copy's positions n.. (after waiting out its background batch): a new
 * sequence on the slot. */
void xpf_truncate(xpf_seq *s, int n);

/* Does batch b run on the CPU? Logs AUTO's reason once per prefill through log. */
bool xpf_takes(xpf *p, int mode, const struct eng_batch *b, eng_log_fn log, void *log_ctx);

/* Run runlist rl of prefill batch b on the CPU, on the calling thread. The device's
 * sequence holds dev_len positions (read back through dev_rows when the CPU's copy
 * is shorter); at the HEAD command the batch's rows go to the device through
 * eng_device_seq_write_kv. Fills *out. */
void xpf_run(xpf_seq *s, struct eng_device *dev, eng_device_seq *seq, int dev_len,
             const struct eng_kv_src *dev_rows, const struct eng_runlist *rl,
             const struct eng_batch *b, struct eng_run_result *out);

/* Start all of prefill batch b (embedding, every layer, the head into b->logits,
 * which must stay valid until xpf_finish) in the background, after catching up on
 * the device's dev_len positions here. 0; -EBUSY while the CPU computes another
 * sequence's batch; another negative value (err says why) when the catch-up fails. */
int xpf_start(xpf_seq *s, int dev_len, const struct eng_kv_src *dev_rows,
              const struct eng_batch *b, char *err, size_t errlen);
/* Is the CPU computing a background batch? */
bool xpf_busy(xpf *p);
/* Has s a batch started and not finished? */
bool xpf_pending(const xpf_seq *s);
/* Is s's background batch computed? With `wait`, waits for it (true). */
bool xpf_ready(xpf_seq *s, bool wait);
/* After xpf_ready: hand the batch's rows to the device (on the calling thread) and
 * fill *out (state, the computing time plus the hand-off in elapsed_us). */
void xpf_finish(xpf_seq *s, struct eng_device *dev, eng_device_seq *seq,
                struct eng_run_result *out);

#endif
