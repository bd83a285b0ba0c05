/* The functional model's tail kernels and its entry point:
 *
 *   ln [xres, zero, normw, xresf, hn]   xresf = xres + zero (f32),
 *                                        hn = bf16(rmsnorm(xresf) * normw)
 *   lm [lmpool, hn, logits]             logits (f32, one per lm_head row) = W hn
 *
 * and xmodel_run, which picks the kernel by the run's xclbin. */
#include "model-impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum xm_fault fault;

enum xm_fault xm_fault(void)
{
    return fault;
}

void xmodel_set_fault(enum xm_fault f)
{
    fault = f;
}

int xmodel_fault_parse(const char *s)
{
    static const char *const names[] = {"", "perm", "attnpos", "cossin", "kvrow"};
    if (!s)
        return XM_FAULT_NONE;
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

int xm_run_ln(const struct xm_spec *sp, const struct xm_buf *b, int n, char *err, size_t errlen)
{
    int H = sp->hidden;
    if (n != 5 || b[0].n < (size_t)H * 4 || b[1].n < (size_t)H * 4 || b[2].n < (size_t)H * 2 ||
        b[3].n < (size_t)H * 4 || b[4].n < (size_t)H * 2) {
        snprintf(err, errlen, "model: ln takes xres, zero, normw, xresf, hn of the hidden size");
        return -EINVAL;
    }
    float *x = malloc((size_t)H * 4), *hn = malloc((size_t)H * 4);
    if (!x || !hn) {
        free(x);
        free(hn);
        snprintf(err, errlen, "model: out of memory");
        return -ENOMEM;
    }
    for (int i = 0; i < H; i++) {
        float a, z;
        memcpy(&a, b[0].p + 4 * (size_t)i, 4);
        memcpy(&z, b[1].p + 4 * (size_t)i, 4);
        x[i] = a + z;
    }
    memcpy(b[3].p, x, (size_t)H * 4);
    xm_rmsnorm(x, b[2].p, H, sp->eps, hn);
    for (int i = 0; i < H; i++)
        xm_bf16_put(b[4].p + 2 * (size_t)i, hn[i]);
    free(x);
    free(hn);
    return 0;
}

int xm_run_lm(const struct xm_spec *sp, const struct xm_buf *b, int n, char *err, size_t errlen)
{
    int H = sp->hidden;
    if (n != 3 || b[1].n < (size_t)H * 2 || b[2].n < (size_t)sp->lm.rows * 4 ||
        sp->lm.in_dim != (uint64_t)H) {
        snprintf(err, errlen, "model: lm takes lmpool, hn and logits of the lm_head's rows");
        return -EINVAL;
    }
    struct xm_tab t;
    float *x = malloc((size_t)H * 4), *y = malloc((size_t)sp->lm.rows * 4);
    int rc = -ENOMEM;
    if (x && y && xm_tab_init(&t, H) == 0) {
        for (int i = 0; i < H; i++)
            x[i] = xm_bf16_at(b[1].p + 2 * (size_t)i);
        xm_tab_prep(&t, x);
        rc = xm_gemv(b[0].p, b[0].n, &sp->lm, &t, y, false);
        if (rc == 0)
            memcpy(b[2].p, y, (size_t)sp->lm.rows * 4);
        xm_tab_free(&t);
    }
    free(x);
    free(y);
    if (rc)
        snprintf(err, errlen, "model: %s", rc == -ENOMEM ? "out of memory"
                                                         : "the lm_head does not fit lmpool");
    return rc;
}

int xmodel_run(const char *xclbin_path, const uint32_t *insts, size_t n_words,
               const struct xm_buf *bufs, int n_bufs, char *err, size_t errlen)
{
    const struct xm_spec *sp;
    enum xm_role role;
    int rc = xm_spec_for(xclbin_path, &sp, &role, err, errlen);
    if (rc)
        return rc;
    switch (role) {
    case XM_DX: return xm_run_dx(sp, insts, n_words, bufs, n_bufs, err, errlen);
    case XM_LN: return xm_run_ln(sp, bufs, n_bufs, err, errlen);
    default: return xm_run_lm(sp, bufs, n_bufs, err, errlen);
    }
}
