/* Internal to the functional model (model.h): the kernel-set spec it computes
 * with, and the numerics its kernels share. */
#ifndef MINICPMD_TESTS_XRT_MODEL_IMPL_H
#define MINICPMD_TESTS_XRT_MODEL_IMPL_H

#include "model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define XM_CHUNK 5120

enum xm_role { XM_DX = 0, XM_LN, XM_LM };
enum xm_proj_id { XM_Q = 0, XM_K, XM_V, XM_O, XM_UP, XM_GATE, XM_DOWN, XM_NPROJ };

/* One Q4_1 projection in a pool: nch chunks from byte dst, K = in_dim. */
struct xm_proj {
    uint64_t dst, nch, in_dim;
    int rows;
};

struct xm_spec {
    char dir[1024];
    int hidden, n_heads, n_kv, head_dim, rot, ff;
    float eps;
    uint64_t kv_row, ptab_row;
    struct xm_proj proj[XM_NPROJ];
    struct xm_proj lm;
    uint64_t lnw, postln;           /* byte offsets of the two norms in consts */
    char ctx_xclbin[3][256];        /* the xclbin of dx, ln and lm, relative */
};

/* The spec of the kernel set holding `xclbin_path`, and which kernel it is. */
int xm_spec_for(const char *xclbin_path, const struct xm_spec **out, enum xm_role *role,
                char *err, size_t errlen);

/* ---- numerics (model-num.c) ------------------------------------------------------ */

float xm_bf16(float x);                       /* round to bf16, half to even */
float xm_bf16_at(const uint8_t *p);           /* a stored bf16 */
void xm_bf16_put(uint8_t *p, float x);        /* store x (already bf16) */

/* The activation table of a K-long bf16 activation. */
struct xm_tab {
    int K;
    int16_t *xi;
    int *s;
    float *hi, *lo;
};
int xm_tab_init(struct xm_tab *t, int K);
void xm_tab_free(struct xm_tab *t);
void xm_tab_prep(struct xm_tab *t, const float *x);   /* x: bf16 values */

/* y[0..p->rows) = W x for the projection p of `pool` (walked in the kernel's
 * band order), with x's table. swap01: read pool chunks 0 and 1 swapped. */
int xm_gemv(const uint8_t *pool, size_t pool_len, const struct xm_proj *p,
            const struct xm_tab *t, float *y, bool swap01);

/* out[i] = bf16(x[i] * r * w[i]), r = 1/sqrt(mean(x^2) + eps), w bf16 bytes. */
void xm_rmsnorm(const float *x, const uint8_t *w, int n, float eps, float *out);

/* ---- kernels (model-dx.c, model-tail.c) -------------------------------------------- */

enum xm_fault xm_fault(void);
int xm_run_dx(const struct xm_spec *sp, const uint32_t *insts, size_t n_words,
              const struct xm_buf *b, int n, char *err, size_t errlen);
int xm_run_ln(const struct xm_spec *sp, const struct xm_buf *b, int n, char *err,
              size_t errlen);
int xm_run_lm(const struct xm_spec *sp, const struct xm_buf *b, int n, char *err,
              size_t errlen);

#endif
