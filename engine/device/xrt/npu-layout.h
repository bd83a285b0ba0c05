/* npu-layout — the bytes the open dense kernels stream, built on the host: weight
 * pools packed from the pack's Q4NX chunks, the position-record table, the token
 * embedding row, and the per-token `attnpos` patch of the dx instruction stream.
 *
 * Laws, from docs/npu-kernels.md and the OpenFlowLM-Next sources it cites
 * (recipes/pack.py, harness/stream_patch.hpp; re-implemented from their statement,
 * not copied):
 *
 *   std_perm   pool chunk c (of nch, a projection W[out, in_dim] as q4_1 chunks of
 *              32 rows x 256 columns) holds the file chunk of row block
 *              rb = 2 * (c / per_band) + c % 2 and k-tile kt = (c % per_band) / 2,
 *              per_band = in_dim / 128 (a band is 64 output rows); the file is a
 *              plain raster, chunk (rb, kt) at rb * (in_dim / 256) + kt, counted
 *              from `chunk0`. Chunks are copied verbatim (5120 bytes each).
 *   put        the tensor's bytes verbatim at dst; at most `cap` bytes.
 *   ptab row p [i32 valid @0][i32 nf @4][f32 cos[rot/2] @512][f32 sin[rot/2] right
 *              after], valid = p - s, nf = max(1, valid), s = max(0, p+1-window)
 *              (window 0: s = 0); angle = p * inv_freq[i].
 *   attnpos    in the instruction stream (ops of 6/12/7/4/12 words for opcodes
 *              0/1/3/0x80/0x81, scan from word 4), the DDR patch ops (0x81: register
 *              at +6, buffer argument at +8, offset at +10) that carry the position:
 *              arg 3 at offset 0 (the KV window fill; its length is word +4 of the BD
 *              write before it, whose word +2 + 4 is the patch's register), arg 3 at
 *              offset kv_row (the new row's drain), arg 5 (the position record). Per
 *              token: length nf * kv_row / 4 words, drain pos * kv_row, record
 *              pos * ptab_row, window start s * kv_row; bit 31 of an offset word
 *              (mlir-aie's kDDRAIEAddrOffset fold on args >= 5) is kept.
 *
 * Pure C, no XRT: tested on the tiny pack in CI. */
#ifndef MINICPMD_ENGINE_XRT_NPU_LAYOUT_H
#define MINICPMD_ENGINE_XRT_NPU_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/safetensors.h"
#include "engine/device/xrt/kset.h"

#define ENG_NPU_CHUNK 5120

/* The file chunk (relative to chunk0) that std_perm puts at pool chunk c. */
uint64_t eng_npu_std_perm_src(uint64_t c, uint64_t in_dim);

/* Apply the ops to dst[0..dst_len) for layer `layer` ("{l}"), reading tensors from
 * st. Returns 0 or -EINVAL / -ENOENT with a line naming the op and tensor. */
int eng_npu_pack(const eng_st *st, const struct eng_kset_op *ops, int n_ops, int layer,
                 uint8_t *dst, size_t dst_len, char *err, size_t errlen);

/* Rows [0, rows) of a position table into dst (rows * per_row bytes). */
void eng_npu_ptab(uint8_t *dst, int rows, uint64_t per_row, const double *inv_freq,
                  int n_inv_freq, uint64_t window);

/* The window of position pos: first cached row *start, rows streamed *nf. */
void eng_npu_attn_window(uint64_t pos, uint64_t window, uint64_t *start, uint64_t *nf);

/* One patch site. */
struct eng_npu_patch {
    size_t word;
    int kind;          /* 0 window length, 1 row drain, 2 record fill, 3 window start */
    uint32_t flags;    /* bit 31 of the original offset word */
};

/* Find the four attnpos sites of a stream compiled for position 1. Returns 0 with
 * out[0..3] filled, or -EINVAL (err says which site is missing or repeated). */
int eng_npu_attn_table(const uint32_t *w, size_t n, uint64_t kv_row, struct eng_npu_patch out[4],
                       char *err, size_t errlen);

/* Point the stream at position pos. */
void eng_npu_attn_apply(uint32_t *w, const struct eng_npu_patch t[4], uint64_t pos,
                        uint64_t kv_row, uint64_t ptab_row, uint64_t window, uint64_t rb);

/* BF16 row `token` of the [vocab, hidden] embedding into f32 out[hidden]. */
int eng_npu_embed_row(const eng_st *st, const char *tensor, int token, int hidden, float *out,
                      char *err, size_t errlen);

#endif
