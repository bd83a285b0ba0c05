/* AVX-512 kernels (this file alone is compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512vnni; the VNNI kernel is only dispatched when cpuid says so).
 *
 * Float Q4_1 path: as the AVX2 kernel (see avx2.c), but a 16-byte load
 * widened to 16 dwords covers two columns, lanes 0-7 column c and 8-15 column
 * c+1, against an x vector of x[c] x8, x[c+1] x8; the two halves are folded once
 * per group.
 *
 * Int8 Q4_1 path (VNNI): vpdpbusd sums 4 adjacent u8*s8 products into a dword,
 * so the 4 bytes must be one row at 4 consecutive columns; the chunk stores a
 * column's row pairs contiguously instead. A 64-byte load is 8 columns x 8 row
 * pairs; vpermd gathers, per 128-bit lane, one 4-column quad and one 4-pair half
 * (dword j = column j), then vpshufb transposes each lane's 4x4 bytes (dword p =
 * row pair p, byte j = column j). Low nibbles are then the even rows, high
 * nibbles the odd rows, each dword a 4-column dot product with x. */
#include <immintrin.h>

#include "engine/kernels/kernels-impl.h"

/* 8 BF16 pairs (16 rows) at p -> the even rows' and the odd rows' floats
 * (little-endian: the even row is the low half of the dword). */
static inline void bf16_pairs(const uint8_t *p, __m256 *even, __m256 *odd)
{
    __m256i w = _mm256_loadu_si256((const __m256i *)p);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xFFFF0000u)));
}

static inline __m256 fold_ps(__m512 v)
{
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

static inline void store_interleaved(float *y, __m256 even, __m256 odd)
{
    const __m512i idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    _mm512_storeu_ps(y, _mm512_permutex2var_ps(_mm512_castps256_ps512(even), idx,
                                               _mm512_castps256_ps512(odd)));
}

void eng__matvec_q4_1_avx512(const uint8_t *chunks, int in, int row_begin, int row_end,
                             const float *x, float *y)
{
    const __m512i lo4 = _mm512_set1_epi32(15);
    const __m512i pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
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
                __m512 xa = _mm512_loadu_ps(xg), xz = _mm512_loadu_ps(xg + 16);
                __m256 sx = _mm256_set1_ps(_mm512_reduce_add_ps(_mm512_add_ps(xa, xz)));
                /* xp[j]: x of columns 2j, 2j+1, each repeated over 8 lanes. */
                __m512 xp[16];
                for (int j = 0; j < 8; j++) {
                    __m512i idx = _mm512_add_epi32(pair, _mm512_set1_epi32(2 * j));
                    xp[j] = _mm512_permutexvar_ps(idx, xa);
                    xp[j + 8] = _mm512_permutexvar_ps(idx, xz);
                }
                {
                    const uint8_t *nb = ch + 1024 + h * 2048 + g * 256;
                    __m512 e0 = _mm512_setzero_ps(), o0 = e0, e1 = e0, o1 = e0;
                    for (int j = 0; j < 16; j += 2) {
                        __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(nb + j * 16)));
                        __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(nb + j * 16 + 16)));
                        e0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v0, lo4)), xp[j], e0);
                        o0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v0, 4)), xp[j], o0);
                        e1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v1, lo4)), xp[j + 1], e1);
                        o1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v1, 4)), xp[j + 1], o1);
                    }
                    __m256 ae = fold_ps(_mm512_add_ps(e0, e1)), ao = fold_ps(_mm512_add_ps(o0, o1));
                    __m256 de, dod, me, mo;
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

static inline __m512 bf16x16(const uint16_t *p)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* Row-major BF16: one row at a time, four accumulators; the row tail (in % 64)
 * is masked. */
void eng__matvec_bf16_avx512(const uint16_t *w, int in, int row_begin, int row_end,
                             const float *x, float *y)
{
    for (int r = row_begin; r < row_end; r++) {
        const uint16_t *wr = w + (size_t)r * in;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int c = 0;
        for (; c + 64 <= in; c += 64) {
            a0 = _mm512_fmadd_ps(bf16x16(wr + c), _mm512_loadu_ps(x + c), a0);
            a1 = _mm512_fmadd_ps(bf16x16(wr + c + 16), _mm512_loadu_ps(x + c + 16), a1);
            a2 = _mm512_fmadd_ps(bf16x16(wr + c + 32), _mm512_loadu_ps(x + c + 32), a2);
            a3 = _mm512_fmadd_ps(bf16x16(wr + c + 48), _mm512_loadu_ps(x + c + 48), a3);
        }
        for (; c < in; c += 16) {
            __mmask16 k = in - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (in - c)) - 1);
            __m512i wi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, wr + c));
            __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(wi, 16));
            a0 = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(k, x + c), a0);
        }
        y[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    }
}
