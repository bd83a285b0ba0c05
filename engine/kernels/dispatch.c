/* Kernel dispatch: one table of per-ISA entry points, filled on first use from
 * cpuid, or forced by eng_kernels_set_isa(). */
#include <stdatomic.h>

#include "engine/kernels/kernels-impl.h"

struct kern_table {
    kern_q4_1_fn q4_1;
    kern_bf16_fn bf16;
    kern_q4_1_q8_fn q4_1_q8;         /* one token (decode) */
    kern_q4_1_q8_mm_fn q4_1_q8_few;  /* 2 .. ENG_GEMV_MAX_TOK tokens; NULL: q4_1_q8_mm */
    kern_q4_1_q8_mm_fn q4_1_q8_mm;   /* more (prefill): the tile kernel */
    kern_q8x_batch_fn q8x_batch;
    kern_attn_fn attn;
    kern_silu_fn silu;
};

static const struct kern_table table_scalar = {
    .q4_1 = eng__matvec_q4_1_scalar,
    .bf16 = eng__matvec_bf16_scalar,
    .q4_1_q8 = eng__matvec_q4_1_q8_scalar,
    .q4_1_q8_mm = eng__matmul_q4_1_q8_scalar,
    .q8x_batch = eng__q8x_quantize_batch_scalar,
    .attn = eng__attn_gqa_scalar,
    .silu = eng__silu_mul_scalar,
};
/* Every table routes a product of Q4_1 weights and int8 x by its token count
 * (eng_matmul_q4_1_q8_rows): one token to its decode kernel, a decode batch of
 * up to ENG_GEMV_MAX_TOK tokens (--parallel) to the decode kernel's few-token form
 * where it has one (it streams the weights once for all of them and gives each
 * token the 1-token kernel's result bit for bit), more to the tile kernel, whose
 * per-chunk unpack pays off only over many tokens. AVX2: gemv-avx2.c and
 * gemm-avx2.c, the scalar reference's bits. */
static const struct kern_table table_avx2 = {
    .q4_1 = eng__matvec_q4_1_avx2,
    .bf16 = eng__matvec_bf16_avx2,
    .q4_1_q8 = eng__matvec_q4_1_q8_avx2,
    .q4_1_q8_few = eng__matmul_q4_1_q8_avx2_small,
    .q4_1_q8_mm = eng__matmul_q4_1_q8_avx2,
    .q8x_batch = eng__q8x_quantize_batch_scalar,
    .attn = eng__attn_gqa_avx2,
    .silu = eng__silu_mul_avx2,
};
static const struct kern_table table_avx512 = {
    .q4_1 = eng__matvec_q4_1_avx512,
    .bf16 = eng__matvec_bf16_avx512,
    /* no VNNI (Skylake-SP): the AVX2 int8 kernels, the scalar ones' bits */
    .q4_1_q8 = eng__matvec_q4_1_q8_avx2,
    .q4_1_q8_few = eng__matmul_q4_1_q8_avx2_small,
    .q4_1_q8_mm = eng__matmul_q4_1_q8_avx2,
    .q8x_batch = eng__q8x_quantize_batch_avx512,
    .attn = eng__attn_gqa_avx512,
    .silu = eng__silu_mul_avx512,
};
/* Without VBMI the batched kernel serves one token too: from DRAM it beats a
 * matvec built on the same in-lane shuffles (gemm-avx512.c). */
static void matvec_q4_1_q8_by_matmul(const uint8_t *chunks, int in, int row_begin, int row_end,
                                     const struct eng_q8x *xq, float *y)
{
    eng__matmul_q4_1_q8_vnni(chunks, in, row_begin, row_end, xq, 1, y, 0);
}
static const struct kern_table table_avx512_vnni = {
    .q4_1 = eng__matvec_q4_1_avx512,
    .bf16 = eng__matvec_bf16_avx512,
    .q4_1_q8 = matvec_q4_1_q8_by_matmul,
    .q4_1_q8_mm = eng__matmul_q4_1_q8_vnni,
    .q8x_batch = eng__q8x_quantize_batch_avx512,
    .attn = eng__attn_gqa_avx512,
    .silu = eng__silu_mul_avx512,
};
/* With VBMI: gemv-vbmi.c's decode kernel and its few-token form, the VNNI tile
 * kernel for prefill. */
static const struct kern_table table_avx512_vbmi = {
    .q4_1 = eng__matvec_q4_1_avx512,
    .bf16 = eng__matvec_bf16_avx512,
    .q4_1_q8 = eng__matvec_q4_1_q8_vbmi,
    .q4_1_q8_few = eng__matmul_q4_1_q8_vbmi_small,
    .q4_1_q8_mm = eng__matmul_q4_1_q8_vnni,
    .q8x_batch = eng__q8x_quantize_batch_avx512,
    .attn = eng__attn_gqa_avx512,
    .silu = eng__silu_mul_avx512,
};

/* NULL until first use; a race there only makes two threads store the same
 * pointer. */
static _Atomic(const struct kern_table *) kern_active;
static _Atomic int kern_active_isa;
static _Atomic int kern_forced; /* eng_kernels_set_isa was called */

/* The one-token decode kernels (and their few-token forms) one table may swap
 * in: every one gives the scalar reference's bits, so which runs is a matter of
 * speed alone, chosen by measurement (engine/model/kchoice.c). */
enum { NEED_VBMI, NEED_VNNI, NEED_AVX2 };
static const struct kern_decode {
    const char *name;
    kern_q4_1_q8_fn one;
    kern_q4_1_q8_mm_fn few; /* NULL: the table's tile kernel serves 2+ tokens */
    int need;
} kern_decodes[] = {
    { "vbmi", eng__matvec_q4_1_q8_vbmi, eng__matmul_q4_1_q8_vbmi_small, NEED_VBMI },
    { "vnni-tile", matvec_q4_1_q8_by_matmul, NULL, NEED_VNNI },
    { "avx2", eng__matvec_q4_1_q8_avx2, eng__matmul_q4_1_q8_avx2_small, NEED_AVX2 },
};
#define KERN_N_DECODES (int)(sizeof kern_decodes / sizeof *kern_decodes)
/* the active table with its decode kernels swapped (eng_decode_kernel_set,
 * eng_few_kernel_set) */
static struct kern_table kern_custom;
static _Atomic(const char *) kern_decode_name;
static _Atomic(const char *) kern_few_name; /* NULL: the decode kernel's own */

static int cpu_has(enum eng_isa isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case ENG_ISA_SCALAR:
        return 1;
    case ENG_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case ENG_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && cpu_has(ENG_ISA_AVX2);
    }
    return 0;
}

int eng_isa_has_vnni(void)
{
    __builtin_cpu_init();
    return cpu_has(ENG_ISA_AVX512) && __builtin_cpu_supports("avx512vnni");
}

int eng_isa_has_vbmi(void)
{
    __builtin_cpu_init();
    return eng_isa_has_vnni() && __builtin_cpu_supports("avx512vbmi");
}

enum eng_isa eng_isa_detect(void)
{
    if (cpu_has(ENG_ISA_AVX512))
        return ENG_ISA_AVX512;
    if (cpu_has(ENG_ISA_AVX2))
        return ENG_ISA_AVX2;
    return ENG_ISA_SCALAR;
}

static int set_isa(enum eng_isa isa)
{
    const struct kern_table *t;
    if (!cpu_has(isa))
        return -1;
    switch (isa) {
    case ENG_ISA_AVX512:
        t = eng_isa_has_vbmi()   ? &table_avx512_vbmi
            : eng_isa_has_vnni() ? &table_avx512_vnni
                                 : &table_avx512;
        break;
    case ENG_ISA_AVX2:
        t = &table_avx2;
        break;
    default:
        t = &table_scalar;
        break;
    }
    atomic_store(&kern_active_isa, (int)isa);
    atomic_store(&kern_decode_name, (const char *)NULL);
    atomic_store(&kern_few_name, (const char *)NULL);
    atomic_store(&kern_active, t);
    return 0;
}

int eng_kernels_set_isa(enum eng_isa isa)
{
    int rc = set_isa(isa);
    if (rc == 0)
        atomic_store(&kern_forced, 1);
    return rc;
}

int eng_kernels_forced(void)
{
    return atomic_load(&kern_forced);
}

static const struct kern_table *kern_get(void)
{
    const struct kern_table *t = atomic_load_explicit(&kern_active, memory_order_acquire);
    if (!t) {
        set_isa(eng_isa_detect());
        t = atomic_load(&kern_active);
    }
    return t;
}

/* The decode kernels the active ISA may use: AVX-512 takes any of them the CPU
 * has, AVX2 its own, scalar none but the reference. */
static int decode_usable(const struct kern_decode *d)
{
    enum eng_isa isa = eng_kernels_isa();
    switch (d->need) {
    case NEED_VBMI: return isa == ENG_ISA_AVX512 && eng_isa_has_vbmi();
    case NEED_VNNI: return isa == ENG_ISA_AVX512 && eng_isa_has_vnni();
    default: return isa != ENG_ISA_SCALAR;
    }
}

int eng_decode_kernels(const char **names, int max)
{
    int n = 0;
    for (int i = 0; i < KERN_N_DECODES; i++)
        if (decode_usable(&kern_decodes[i]) && n < max)
            names[n++] = kern_decodes[i].name;
    if (n == 0 && max > 0)
        names[n++] = "scalar";
    return n;
}

const char *eng_decode_kernel(void)
{
    const struct kern_table *t = kern_get();
    const char *name = atomic_load(&kern_decode_name);
    if (name)
        return name;
    for (int i = 0; i < KERN_N_DECODES; i++)
        if (t->q4_1_q8 == kern_decodes[i].one)
            return kern_decodes[i].name;
    return "scalar";
}

static const struct kern_decode *decode_find(const char *name)
{
    for (int i = 0; name && i < KERN_N_DECODES; i++)
        if (strcmp(name, kern_decodes[i].name) == 0 && decode_usable(&kern_decodes[i]))
            return &kern_decodes[i];
    return NULL;
}

/* kern_custom, from the active table unless that is kern_custom already; the
 * caller swaps its kernels in and then publishes it (custom_publish). */
static struct kern_table *custom_begin(void)
{
    const struct kern_table *t = kern_get();
    if (t != &kern_custom)
        kern_custom = *t;
    return &kern_custom;
}

static void custom_publish(void)
{
    atomic_store(&kern_active, (const struct kern_table *)&kern_custom);
}

int eng_decode_kernel_set(const char *name)
{
    const struct kern_decode *d = decode_find(name);
    if (!d)
        return name && strcmp(name, eng_decode_kernel()) == 0 ? 0 : -1;
    struct kern_table *t = custom_begin();
    t->q4_1_q8 = d->one;
    t->q4_1_q8_few = d->few;
    atomic_store(&kern_decode_name, d->name);
    atomic_store(&kern_few_name, (const char *)NULL);
    custom_publish();
    return 0;
}

const char *eng_few_kernel(void)
{
    const char *name = atomic_load(&kern_few_name);
    return name ? name : eng_decode_kernel();
}

int eng_few_kernel_set(const char *name)
{
    const struct kern_decode *d = decode_find(name);
    if (!d)
        return name && strcmp(name, eng_few_kernel()) == 0 ? 0 : -1;
    custom_begin()->q4_1_q8_few = d->few;
    atomic_store(&kern_few_name, d->name);
    custom_publish();
    return 0;
}

int eng_few_kernel_run(const char *name, const uint8_t *chunks, int in, int row_begin,
                       int row_end, const struct eng_q8x *xq, int n_tok, float *y, int ldy)
{
    const struct kern_decode *d = decode_find(name);
    if (n_tok < 2 || n_tok > ENG_GEMV_MAX_TOK)
        return -1;
    if (d && d->few)
        d->few(chunks, in, row_begin, row_end, xq, n_tok, y, ldy);
    else if (d) /* no few-token form: the tile kernel serves, as in eng_matmul_q4_1_q8_rows */
        kern_get()->q4_1_q8_mm(chunks, in, row_begin, row_end, xq, n_tok, y, ldy);
    else if (name && strcmp(name, "scalar") == 0)
        eng__matmul_q4_1_q8_scalar(chunks, in, row_begin, row_end, xq, n_tok, y, ldy);
    else
        return -1;
    return 0;
}

int eng_decode_kernel_run(const char *name, const uint8_t *chunks, int in, int row_begin,
                          int row_end, const struct eng_q8x *xq, float *y)
{
    const struct kern_decode *d = decode_find(name);
    if (d)
        d->one(chunks, in, row_begin, row_end, xq, y);
    else if (name && strcmp(name, "scalar") == 0)
        eng__matvec_q4_1_q8_scalar(chunks, in, row_begin, row_end, xq, y);
    else
        return -1;
    return 0;
}

enum eng_isa eng_kernels_isa(void)
{
    kern_get();
    return (enum eng_isa)atomic_load(&kern_active_isa);
}

const char *eng_isa_name(enum eng_isa isa)
{
    switch (isa) {
    case ENG_ISA_SCALAR:
        return "scalar";
    case ENG_ISA_AVX2:
        return "avx2";
    case ENG_ISA_AVX512:
        return "avx512";
    }
    return "?";
}

int eng_isa_parse(const char *name, enum eng_isa *out)
{
    static const enum eng_isa all[] = {ENG_ISA_SCALAR, ENG_ISA_AVX2, ENG_ISA_AVX512};
    for (size_t i = 0; name && i < sizeof all / sizeof *all; i++)
        if (strcmp(name, eng_isa_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -1;
}

void eng_matvec_q4_1_rows(const uint8_t *chunks, int in, int row_begin, int row_end,
                          const float *x, float *y)
{
    kern_get()->q4_1(chunks, in, row_begin, row_end, x, y);
}

void eng_matvec_q4_1(const uint8_t *chunks, int out, int in, const float *x, float *y)
{
    kern_get()->q4_1(chunks, in, 0, out, x, y);
}

void eng_matvec_bf16_rows(const uint16_t *w, int in, int row_begin, int row_end,
                          const float *x, float *y)
{
    kern_get()->bf16(w, in, row_begin, row_end, x, y);
}

void eng_attn_gqa(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t ld, int n,
                  int hd, float scale, float *sc, float *o)
{
    kern_get()->attn(q, nq, k, v, ld, n, hd, scale, sc, o);
}

void eng_silu_mul(float *g, const float *u, int n)
{
    kern_get()->silu(g, u, n);
}

void eng_matvec_bf16(const uint16_t *w, int out, int in, const float *x, float *y)
{
    kern_get()->bf16(w, in, 0, out, x, y);
}

void eng_matvec_q4_1_q8_rows(const uint8_t *chunks, int in, int row_begin, int row_end,
                             const struct eng_q8x *xq, float *y)
{
    kern_get()->q4_1_q8(chunks, in, row_begin, row_end, xq, y);
}

void eng_matmul_q4_1_q8_rows(const uint8_t *chunks, int in, int row_begin, int row_end,
                             const struct eng_q8x *xq, int n_tok, float *y, int ldy)
{
    const struct kern_table *t = kern_get();
    if (n_tok == 1)
        t->q4_1_q8(chunks, in, row_begin, row_end, xq, y);
    else if (n_tok <= ENG_GEMV_MAX_TOK && t->q4_1_q8_few)
        t->q4_1_q8_few(chunks, in, row_begin, row_end, xq, n_tok, y, ldy);
    else
        t->q4_1_q8_mm(chunks, in, row_begin, row_end, xq, n_tok, y, ldy);
}

void eng_q8x_quantize_batch(const struct eng_q8x *xq, const float *x, int ldx, int in,
                            int n_tok)
{
    kern_get()->q8x_batch(xq, x, ldx, in, n_tok);
}
