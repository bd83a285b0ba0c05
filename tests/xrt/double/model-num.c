/* The functional model's numerics: bf16, the activation table and the Q4_1 GEMV
 * as the kernels compute them (the laws are stated in model.h). */
#include "model-impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

float xm_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) {
        u &= 0xffff0000u;      /* inf stays inf; a NaN keeps a payload bit */
        if (x != x)
            u |= 0x00400000u;
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
    }
    float r;
    memcpy(&r, &u, 4);
    return r;
}

float xm_bf16_at(const uint8_t *p)
{
    uint32_t u = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 24;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

void xm_bf16_put(uint8_t *p, float x)
{
    uint32_t u;
    x = xm_bf16(x);
    memcpy(&u, &x, 4);
    p[0] = (uint8_t)(u >> 16);
    p[1] = (uint8_t)(u >> 24);
}

int xm_tab_init(struct xm_tab *t, int K)
{
    t->K = K;
    t->xi = calloc((size_t)K, sizeof *t->xi);
    t->s = calloc((size_t)K / 32 + 1, sizeof *t->s);
    t->hi = calloc((size_t)K / 32 + 1, sizeof *t->hi);
    t->lo = calloc((size_t)K / 32 + 1, sizeof *t->lo);
    if (!t->xi || !t->s || !t->hi || !t->lo) {
        xm_tab_free(t);
        return -ENOMEM;
    }
    return 0;
}

void xm_tab_free(struct xm_tab *t)
{
    if (!t)
        return;
    free(t->xi);
    free(t->s);
    free(t->hi);
    free(t->lo);
    memset(t, 0, sizeof *t);
}

/* The block sum in the kernel's tree order: 32 -> 16 -> 8 lanes by halves, then
 * three rotate-adds over 16 lanes whose upper 8 are zero; lane 0. */
static float block_sum(const float *x)
{
    float v16[16], t[16];
    for (int i = 0; i < 16; i++)
        v16[i] = x[i] + x[i + 16];
    for (int i = 0; i < 8; i++)
        t[i] = v16[i] + v16[i + 8];
    for (int i = 8; i < 16; i++)
        t[i] = 0.0f;
    for (int s = 4; s >= 1; s >>= 1) {
        float u[16];
        for (int i = 0; i < 16; i++)
            u[i] = t[i] + t[(i + s) % 16];
        memcpy(t, u, sizeof t);
    }
    return t[0];
}

void xm_tab_prep(struct xm_tab *t, const float *x)
{
    for (int b = 0; b < t->K / 32; b++) {
        const float *xb = x + 32 * b;
        uint32_t mx = 0;
        for (int i = 0; i < 32; i++) {
            uint32_t u;
            memcpy(&u, &xb[i], 4);
            u = (u >> 16) & 0x7fffu;         /* |x| as bf16 bits order as magnitudes */
            if (u > mx)
                mx = u;
        }
        int s = 141 - (int)(mx >> 7);        /* 14 - (biased exponent - 127) */
        if (s > 126)
            s = 126;
        t->s[b] = s;
        for (int i = 0; i < 32; i++) {
            float q = nearbyintf(ldexpf(xb[i], s));   /* default rounding: half to even */
            t->xi[32 * b + i] = (int16_t)(q > 32767.0f ? 32767 : q < -32768.0f ? -32768 : q);
        }
        float sum = block_sum(xb);
        t->hi[b] = xm_bf16(sum);
        t->lo[b] = xm_bf16(sum - t->hi[b]);
    }
}

/* The 4-bit codes of a chunk: q(r, c) in byte (r/16)*2048 + c*8 + (r%16)/2, the
 * low nibble for even r. */
static void codes(const uint8_t *chunk, uint8_t q[32][256])
{
    for (int r = 0; r < 32; r++)
        for (int c = 0; c < 256; c++) {
            uint8_t byte = chunk[1024 + (r / 16) * 2048 + c * 8 + (r % 16) / 2];
            q[r][c] = (r % 2) ? byte >> 4 : byte & 15;
        }
}

int xm_gemv(const uint8_t *pool, size_t pool_len, const struct xm_proj *p,
            const struct xm_tab *t, float *y, bool swap01)
{
    uint64_t per_band = p->in_dim / 128, ktiles = p->in_dim / 256;
    if (!per_band || p->nch % per_band || (uint64_t)t->K != p->in_dim ||
        p->dst + p->nch * XM_CHUNK > pool_len)
        return -EINVAL;
    for (int r = 0; r < p->rows; r++)
        y[r] = 0.0f;
    /* The kernel streams a band (64 rows) at a time; inside it, for each k tile
     * of 256 columns, the chunk of the band's first 32 rows, then of the second. */
    uint64_t c = 0;
    for (uint64_t band = 0; band < p->nch / per_band; band++)
        for (uint64_t kt = 0; kt < ktiles; kt++)
            for (int half = 0; half < 2; half++, c++) {
                uint64_t src = c;
                if (swap01 && c < 2)
                    src = 1 - c;
                const uint8_t *ch = pool + p->dst + src * XM_CHUNK;
                int rb = (int)(2 * band) + half;
                uint8_t q[32][256];
                codes(ch, q);
                for (int r = 0; r < 32; r++) {
                    int row = rb * 32 + r;
                    if (row >= p->rows)
                        continue;
                    float acc = y[row];
                    for (int g = 0; g < 8; g++) {
                        int kb = (int)kt * 8 + g;
                        const int16_t *xi = t->xi + 32 * kb;
                        int32_t part = 0;
                        for (int cc = 0; cc < 32; cc++)
                            part += q[r][g * 32 + cc] * (int32_t)xi[cc];
                        float d = xm_bf16_at(ch + 2 * (g * 32 + r));
                        float m = xm_bf16_at(ch + 512 + 2 * (g * 32 + r));
                        acc += d * ldexpf((float)part, -t->s[kb]);
                        acc += m * t->hi[kb];
                        acc += m * t->lo[kb];
                    }
                    y[row] = acc;
                }
            }
    return 0;
}

void xm_rmsnorm(const float *x, const uint8_t *w, int n, float eps, float *out)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++)
        out[i] = xm_bf16(x[i] * r * xm_bf16_at(w + 2 * i));
}
