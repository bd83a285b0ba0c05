/* The AVX-512 roof loops (compiled with -mavx512f -mavx512vnni; roof.c calls
 * them only on a CPU that has both). Accumulators are named variables, not an
 * array: at -O2 gcc does not always unroll a loop over an array of vectors, and
 * an array left in memory would time the store-to-load path instead. */
#include "tools/bench/roof-impl.h"

#include <immintrin.h>

#define REP16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) \
                 X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

/* Horizontal sums by hand: gcc's _mm512_reduce_add_epi64/epi32 add in signed
 * types, which wrap here (the values are meaningless) and UBSan rightly calls
 * that overflow. */
static uint64_t hsum64(__m512i v)
{
    uint64_t w[8], s = 0;
    _mm512_storeu_si512(w, v);
    for (int i = 0; i < 8; i++)
        s += w[i];
    return s;
}

static int32_t hsum32(__m512i v)
{
    uint32_t w[16], s = 0;
    _mm512_storeu_si512(w, v);
    for (int i = 0; i < 16; i++)
        s += w[i];
    return (int32_t)(s & 0x7FFFFFFF);
}

uint64_t roof__sum_avx512(const void *p, size_t bytes)
{
    const __m512i *v = p;
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    /* Four independent adds so the loop is bound by the loads, 256 bytes (four
     * cache lines) a round. */
    for (size_t i = 0; i < bytes / 64; i += 4) {
        a = _mm512_add_epi64(a, _mm512_load_si512(v + i));
        b = _mm512_add_epi64(b, _mm512_load_si512(v + i + 1));
        c = _mm512_add_epi64(c, _mm512_load_si512(v + i + 2));
        d = _mm512_add_epi64(d, _mm512_load_si512(v + i + 3));
    }
    return hsum64(_mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d)));
}

int32_t roof__int8_vnni(long iters, int32_t seed)
{
    /* vpdpbusd has a latency of 4-5 cycles and up to 2 issue per cycle, so about
     * ten chains keep it busy; sixteen leave margin and still fit in 32 zmm
     * with the two operands. */
    __m512i a = _mm512_set1_epi32(seed), b = _mm512_set1_epi32(seed * 7 + 3);
#define DECL(k) __m512i acc##k = _mm512_set1_epi32(k);
    REP16(DECL)
#undef DECL
    for (long i = 0; i < iters; i++) {
/* Inline asm, not _mm512_dpbusd_epi32: gcc 12 does not tie the intrinsic's
 * accumulator to its result and fills the loop with register copies and
 * spills, which then cap the rate below the instruction's. */
#define STEP(k) __asm__("vpdpbusd %[b], %[a], %[acc]" : [acc] "+v"(acc##k) : [a] "v"(a), [b] "v"(b));
        REP16(STEP)
#undef STEP
    }
    __m512i s = _mm512_setzero_si512();
#define SUM(k) s = _mm512_add_epi32(s, acc##k);
    REP16(SUM)
#undef SUM
    return hsum32(s);
}

float roof__f32_avx512(long iters, float seed)
{
    /* acc = acc * m + c with 0 < m < 1 converges to c / (1 - m): no overflow, no
     * denormals, whatever iters is (either would time something else). FMA
     * latency 4 cycles x 2 per cycle: 8 chains suffice, 16 leave margin. */
    __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(seed);
#define DECL(k) __m512 acc##k = _mm512_set1_ps((float)(k));
    REP16(DECL)
#undef DECL
    for (long i = 0; i < iters; i++) {
#define STEP(k) acc##k = _mm512_fmadd_ps(acc##k, m, c);
        REP16(STEP)
#undef STEP
    }
    __m512 s = _mm512_setzero_ps();
#define SUM(k) s = _mm512_add_ps(s, acc##k);
    REP16(SUM)
#undef SUM
    return _mm512_reduce_add_ps(s);
}
