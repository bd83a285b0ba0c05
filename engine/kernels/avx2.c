/* AVX2 + FMA kernels (this file alone is compiled with -mavx2 -mfma -mf16c).
 *
 * Q4_1: within a 16-row half of a chunk, column c's 8 bytes hold its 16 rows as
 * row pairs, so one 8-byte load widened to 8 dwords gives the even rows (low
 * nibbles) and odd rows (high nibbles) of that column: the kernel vectorizes over
 * rows, broadcasting x[c], and keeps even and odd rows in separate accumulators.
 * Per 32-column group it sums q*x, then applies the scale and the min once:
 * sum_c (q*d + m)*x = d*sum_c q*x + m*sum_c x. The BF16 scales of rows 2p, 2p+1
 * share a dword, so the even scales are that dword << 16 and the odd ones the
 * dword with its low half masked off: no shuffles. */
#include <immintrin.h>

#include "engine/kernels/kernels-impl.h"

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 BF16 pairs (16 rows) at p -> the even rows' and the odd rows' floats. */
static inline void bf16_pairs(const uint8_t *p, __m256 *even, __m256 *odd)
{
    __m256i w = _mm256_loadu_si256((const __m256i *)p);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* sum over the group's 32 columns of q*x for one half: even rows, odd rows. */
static inline void q4_group_half(const uint8_t *nb, const float *xg, __m256 *ae, __m256 *ao)
{
    const __m256i lo4 = _mm256_set1_epi32(15);
    __m256 e0 = _mm256_setzero_ps(), o0 = e0, e1 = e0, o1 = e0;
    for (int c = 0; c < ENG_Q4_1_GROUP; c += 2) {
        __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(nb + c * 8)));
        __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(nb + c * 8 + 8)));
        __m256 x0 = _mm256_broadcast_ss(xg + c), x1 = _mm256_broadcast_ss(xg + c + 1);
        e0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v0, lo4)), x0, e0);
        o0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4)), x0, o0);
        e1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v1, lo4)), x1, e1);
        o1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4)), x1, o1);
    }
    *ae = _mm256_add_ps(e0, e1);
    *ao = _mm256_add_ps(o0, o1);
}

/* Even rows 0,2,..,14 and odd rows 1,3,..,15 -> rows 0..15 in order at y. */
static inline void store_interleaved(float *y, __m256 even, __m256 odd)
{
    __m256 t0 = _mm256_unpacklo_ps(even, odd); /* rows 0-3 | 8-11 */
    __m256 t1 = _mm256_unpackhi_ps(even, odd); /* rows 4-7 | 12-15 */
    _mm256_storeu_ps(y, _mm256_permute2f128_ps(t0, t1, 0x20));
    _mm256_storeu_ps(y + 8, _mm256_permute2f128_ps(t0, t1, 0x31));
}

void eng__matvec_q4_1_avx2(const uint8_t *chunks, int in, int row_begin, int row_end,
                           const float *x, float *y)
{
    int ncol = (in + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS;
    float xt[ENG_Q4_1_COLS];

    for (int rb = row_begin / ENG_Q4_1_ROWS; rb < row_end / ENG_Q4_1_ROWS; rb++) {
        __m256 ye[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
        __m256 yo[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
        for (int cb = 0; cb < ncol; cb++) {
            const uint8_t *ch = chunks + ((size_t)rb * ncol + cb) * ENG_Q4_1_CHUNK_BYTES;
            const float *xb = kern_x_block(x, in, cb, xt);
            /* Half-major, so the chunk is read in memory order (d, m, then the
             * 2,048 bytes of each half): interleaving the halves costs a third
             * of the DRAM bandwidth. */
            for (int h = 0; h < 2; h++)
            for (int g = 0; g < ENG_Q4_1_COLS / ENG_Q4_1_GROUP; g++) {
                const float *xg = xb + g * ENG_Q4_1_GROUP;
                __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xg), _mm256_loadu_ps(xg + 8)),
                                         _mm256_add_ps(_mm256_loadu_ps(xg + 16), _mm256_loadu_ps(xg + 24)));
                __m256 sx = _mm256_set1_ps(hsum8(s));
                {
                    __m256 ae, ao, de, dod, me, mo;
                    q4_group_half(ch + 1024 + h * 2048 + g * 256, xg, &ae, &ao);
                    bf16_pairs(ch + (g * 32 + h * 16) * 2, &de, &dod);
                    bf16_pairs(ch + 512 + (g * 32 + h * 16) * 2, &me, &mo);
                    ye[h] = _mm256_fmadd_ps(me, sx, _mm256_fmadd_ps(de, ae, ye[h]));
                    yo[h] = _mm256_fmadd_ps(mo, sx, _mm256_fmadd_ps(dod, ao, yo[h]));
                }
            }
        }
        float *yr = y + (size_t)rb * ENG_Q4_1_ROWS;
        store_interleaved(yr, ye[0], yo[0]);
        store_interleaved(yr + 16, ye[1], yo[1]);
    }
}

static inline __m256 bf16x8(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Row-major BF16: one row at a time against x, four accumulators to cover the
 * FMA latency; the row tail (in % 32) is scalar. */
void eng__matvec_bf16_avx2(const uint16_t *w, int in, int row_begin, int row_end,
                           const float *x, float *y)
{
    for (int r = row_begin; r < row_end; r++) {
        const uint16_t *wr = w + (size_t)r * in;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int c = 0;
        for (; c + 32 <= in; c += 32) {
            a0 = _mm256_fmadd_ps(bf16x8(wr + c), _mm256_loadu_ps(x + c), a0);
            a1 = _mm256_fmadd_ps(bf16x8(wr + c + 8), _mm256_loadu_ps(x + c + 8), a1);
            a2 = _mm256_fmadd_ps(bf16x8(wr + c + 16), _mm256_loadu_ps(x + c + 16), a2);
            a3 = _mm256_fmadd_ps(bf16x8(wr + c + 24), _mm256_loadu_ps(x + c + 24), a3);
        }
        float acc = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (; c < in; c++)
            acc += eng_bf16_to_f32(wr[c]) * x[c];
        y[r] = acc;
    }
}
