/* xmodel — a functional model of the open dense kernel set (dx, ln, lm), run by
 * the XRT conformance double when a run executes: it computes what the kernels
 * compute on the bytes the bridge wrote into the run's buffers, reading the
 * instruction stream's patched attnpos words as the DMA would, and writes the
 * outputs (xres, the drained KV row, hn, logits) back into those buffers.
 *
 * Written from the kernel designs' statement (docs/npu-kernels.md, and
 * OpenFlowLM-Next's designs/dense/dx.py, gemv_q4/gemv_tab.h, the attn and ln designs), not
 * from minicpmd's CPU engine: it shares no code with engine/, so agreeing with the
 * CPU engine means something. What the kernels do and how it is modelled:
 *
 *   activations   each GEMV input is block-quantised per 32 values: s = 14 -
 *                 floor(log2 max|x|) (at most 126), xi = round-half-even(x * 2^s)
 *                 as int16, and the block's bf16 values summed in f32 (the
 *                 kernel's tree order) and split into bf16 hi + lo
 *   GEMV          per row and 32-column group: the exact integer sum of q * xi,
 *                 then d * (sum * 2^-s) + m * hi + m * lo in f32; groups summed in
 *                 f32 in column order (the hardware's reduction order is not
 *                 specified: modelled as f32, sequential)
 *   norms         RMSNorm in f32 (sum of squares sequential), xn / xm / hn
 *                 rounded to bf16
 *   attention     q in f32 after RoPE (half rotation, cos / sin from the position
 *                 record), K rotated then stored as bf16, V as bf16; scores in f32
 *                 scaled by 1/sqrt(head_dim); online softmax in f32 (expf: the
 *                 kernel's exp approximation is not specified); og rounded to bf16
 *   MLP           h = silu(gate) * up in f32 (expf), rounded to bf16 before the
 *                 down projection
 *
 * Not modelled (only an NPU can tell): timing, the DMA's tiling, the cores' lock
 * protocol, the exact vector exp / rsqrt approximations and accumulation orders,
 * and anything the instruction stream does besides the attnpos transfers.
 *
 * A run whose DMA words disagree with its position record (the window fill's
 * length is not nf rows) hangs on a real NPU; the model refuses it (-ETIMEDOUT)
 * and the double reports ERT TIMEOUT.
 *
 * Deliberate corruption for tests (so the agreement test can be seen failing):
 * xmodel_set_fault() with one of XM_FAULT_*, modelling a bridge that wrote one
 * thing wrong. */
#ifndef MINICPMD_TESTS_XRT_MODEL_H
#define MINICPMD_TESTS_XRT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct xm_buf {
    uint8_t *p;
    size_t n;
};

enum xm_fault {
    XM_FAULT_NONE = 0,
    XM_FAULT_PERM,      /* pool chunks 0 and 1 of each projection swapped */
    XM_FAULT_ATTNPOS,   /* the record-fill word points one record further */
    XM_FAULT_COSSIN,    /* the position record's cos and sin swapped */
    XM_FAULT_KVROW,     /* the new KV row drained one row further */
};

/* Run the kernel of the xclbin at `xclbin_path` (its directory names the kernel:
 * dx, ln or lm_head_q4; the kernel set's manifest.json two levels up gives the
 * spec) on bufs[0..n_bufs) (the data buffers, arg 3 on) with the instruction
 * words `insts`. Returns 0, -ETIMEDOUT (the run would hang), or another negative
 * errno with one line in err. */
int xmodel_run(const char *xclbin_path, const uint32_t *insts, size_t n_words,
               const struct xm_buf *bufs, int n_bufs, char *err, size_t errlen);

void xmodel_set_fault(enum xm_fault f);
/* Parse "perm", "attnpos", "cossin", "kvrow" or "" / NULL (none); -1 if unknown. */
int xmodel_fault_parse(const char *s);
/* Forget cached kernel-set specs. */
void xmodel_reset(void);

#ifdef __cplusplus
}
#endif

#endif
