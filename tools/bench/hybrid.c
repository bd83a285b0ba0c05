/* minicpmd-bench --hybrid: see hybrid.h.
 *
 * What is measured, on this CPU: the prompt's forward pass in batches of `chunk`
 * positions (as the daemon cuts a prompt), and the hand-off of its K/V rows in the
 * NPU's layout (every layer's state rows [K_p | V_p], bf16, the pack's KV heads
 * repeated to the kernel set's, as engine/device/xrt/xrt-seq.c writes them; the
 * BO syncs, which an NPU's driver does, are not in it). What is given: the NPU's
 * decode rate (--npu-tps, default OpenFlowLM-Next's ~26 tokens/s for MiniCPM5-2B),
 * from which both times to first token follow: the hybrid one is the CPU's prefill
 * and hand-off plus one NPU step; the NPU's own is one step per prompt token. */
#include "tools/bench/hybrid.h"
#include "util/clock.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One rep: prefill seconds and hand-off seconds. */
static int rep(eng_model *m, const struct hybrid_opts *o, const int32_t *toks, uint8_t *state,
               double *t_prefill, double *t_handoff)
{
    const struct eng_model_info *mi = eng_model_get_info(m);
    int L = mi->hp.n_layers, nk = mi->n_kv_real, hd = mi->hp.head_dim, rc;
    int r = o->npu_kv_heads / nk;
    size_t row = (size_t)o->npu_kv_heads * (size_t)hd * 4;
    uint16_t *k = malloc((size_t)nk * hd * 2), *v = malloc((size_t)nk * hd * 2);
    eng_seq *s = NULL;
    char err[256];
    if (!k || !v || (rc = eng_seq_new(m, o->tokens, &s, err, sizeof err))) {
        fprintf(stderr, "minicpmd-bench: --hybrid: %s\n", k && v ? err : "out of memory");
        rc = -1;
        goto out;
    }
    double t0 = ut_now_s();
    for (int at = 0; at < o->tokens; at += o->chunk) {
        int n = o->tokens - at < o->chunk ? o->tokens - at : o->chunk;
        if (eng_seq_forward(s, toks + at, n, NULL)) {
            fprintf(stderr, "minicpmd-bench: --hybrid: %s\n", eng_seq_error(s));
            rc = -1;
            goto out;
        }
    }
    double t1 = ut_now_s();
    for (int l = 0; l < L; l++)
        for (int p = 0; p < o->tokens; p++) {
            eng_seq_kv_get(s, l, p, k, v);
            uint16_t *dst = (uint16_t *)(state + ((size_t)l * o->tokens + p) * row);
            for (int j = 0; j < o->npu_kv_heads; j++) {
                memcpy(dst + (size_t)j * hd, k + (size_t)(j / r) * hd, (size_t)hd * 2);
                memcpy(dst + (size_t)(o->npu_kv_heads + j) * hd, v + (size_t)(j / r) * hd,
                       (size_t)hd * 2);
            }
        }
    *t_prefill = t1 - t0;
    *t_handoff = ut_now_s() - t1;
    rc = 0;
out:
    eng_seq_free(s);
    free(k);
    free(v);
    return rc;
}

int bench_hybrid(eng_model *m, const struct hybrid_opts *o)
{
    const struct eng_model_info *mi = eng_model_get_info(m);
    int L = mi->hp.n_layers, V = mi->hp.n_vocab, rc = -1;
    if (o->npu_kv_heads < mi->n_kv_real || o->npu_kv_heads % mi->n_kv_real) {
        fprintf(stderr, "minicpmd-bench: --npu-kv-heads %d is not a multiple of the pack's %d "
                "KV heads\n", o->npu_kv_heads, mi->n_kv_real);
        return -1;
    }
    size_t row = (size_t)o->npu_kv_heads * (size_t)mi->hp.head_dim * 4;
    uint8_t *state = malloc((size_t)L * (size_t)o->tokens * row);
    int32_t *toks = malloc((size_t)o->tokens * sizeof *toks);
    double *tp = malloc((size_t)o->reps * sizeof *tp), *th = malloc((size_t)o->reps * sizeof *th);
    if (!state || !toks || !tp || !th) {
        fprintf(stderr, "minicpmd-bench: --hybrid: out of memory\n");
        goto out;
    }
    uint64_t x = 0x6879627269640000ull;
    for (int i = 0; i < o->tokens; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)V);
    }
    double warm_p, warm_h;   /* faults the weights in */
    if (rep(m, &(struct hybrid_opts){.tokens = 1, .chunk = 1, .npu_kv_heads = o->npu_kv_heads},
            toks, state, &warm_p, &warm_h))
        goto out;
    for (int i = 0; i < o->reps; i++)
        if (rep(m, o, toks, state, &tp[i], &th[i]))
            goto out;
    qsort(tp, (size_t)o->reps, sizeof *tp, cmp);
    qsort(th, (size_t)o->reps, sizeof *th, cmp);
    double p = tp[o->reps / 2], h = th[o->reps / 2];
    double step = 1.0 / o->npu_tps;
    double hybrid = p + h + step, npu = o->tokens * step;
    if (o->json) {
        json_t *j = json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
                              "hybrid_tokens", o->tokens, "chunk", o->chunk, "threads",
                              mi->n_threads, "npu_kv_heads", o->npu_kv_heads,
                              "cpu_prefill_s", p, "cpu_prefill_tok_s", o->tokens / p,
                              "handoff_s", h, "handoff_mb",
                              (double)L * o->tokens * (double)row / 1e6, "npu_tps_given",
                              o->npu_tps, "ttft_hybrid_s", hybrid, "ttft_npu_s", npu,
                              "speedup", npu / hybrid);
        if (!j) {
            fprintf(stderr, "minicpmd-bench: cannot build the JSON report\n");
            goto out;
        }
        json_dumpf(j, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
        putchar('\n');
        json_decref(j);
    } else {
        printf("hybrid          a %d-token prompt, %d threads, batches of %d, medians of %d\n",
               o->tokens, mi->n_threads, o->chunk, o->reps);
        printf("  cpu prefill   %8.3f s  = %.1f tok/s (measured)\n", p, o->tokens / p);
        printf("  hand-off      %8.3f s  %.0f MB of state rows, %d KV heads (measured; the "
               "NPU's BO syncs not included)\n", h,
               (double)L * o->tokens * (double)row / 1e6, o->npu_kv_heads);
        printf("  npu decode    %8.1f tok/s (given, --npu-tps)\n", o->npu_tps);
        printf("  first token   %8.2f s hybrid (prefill + hand-off + one NPU step) against "
               "%.2f s token by token on the NPU: %.1fx\n", hybrid, npu, npu / hybrid);
    }
    rc = 0;
out:
    free(th);
    free(tp);
    free(toks);
    free(state);
    return rc;
}
