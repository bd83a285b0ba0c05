/* BF16 <-> float. BF16 is the top 16 bits of an IEEE binary32, so widening is
 * exact; narrowing rounds to nearest, ties to even, and keeps NaNs NaN. */
#ifndef MINICPMD_ENGINE_BF16_H
#define MINICPMD_ENGINE_BF16_H

#include <stdint.h>
#include <string.h>

static inline float eng_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t eng_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    /* A NaN whose payload sits only in the low half would round to infinity (or
     * carry into the sign): keep the sign, force a quiet NaN. */
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Adding 0x7fff plus the lowest kept bit rounds half to even; a carry into
     * the exponent is the correct rounding (up to infinity at the top). */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Element i of a little-endian BF16 array at a possibly unaligned address
 * (safetensors data offsets need not be even). */
static inline float eng_bf16_load(const void *p, size_t i)
{
    uint16_t h;
    memcpy(&h, (const uint8_t *)p + 2 * i, sizeof h);
    return eng_bf16_to_f32(h);
}

#endif
