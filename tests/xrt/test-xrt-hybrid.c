/* --npu-prefill cpu against --npu-prefill npu on the functional model of the kernel
 * set: the CPU engine prefills a prompt in batches and hands its K/V rows to the
 * state BOs (seq_write_kv), the NPU decodes from there; the other path prefills
 * token by token on the NPU. Both must give the same greedy tokens and the same
 * top-5 at every decode step, for prompts of several lengths, and a second turn
 * must reuse the first turn's KV on both paths (the CPU reading back the rows the
 * NPU decoded).
 *
 * The rule for near-ties. The paths differ only in how each K/V row was computed
 * before its bf16 rounding (the CPU's f32 matmuls against the model's gemv), so a
 * row may differ by one bf16 unit here and there; the logits then move by far less
 * than the model's own tie tolerance. Two tokens whose logits on the NPU path are
 * within XH_TIE of each other may trade ranks (the rule and the value of
 * test-xrt-model.c); the greedy token itself must be the same. On MiniCPM5-2B's
 * shapes (42 layers) a logit moves by up to ~0.015 between the paths (measured), so
 * a gap between two of them by up to twice that: there the tie is XH_TIE_2B. */
#include "engine/device/device.h"
#include "engine/worker/plan.h"
#include "engine/device/xrt/xrt-dev.h"
#include "engine/device/xrt/xrt-prefill.h"
#include "tests/check.h"
#include "double/model.h"
#include "xrt-double.h"
#include "xrt-fx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XH_TIE 0.02
#define XH_TIE_2B 0.04
#define XH_MAX_GEN 64

struct path {
    struct eng_device *d;
    struct eng_plan plan;
    eng_device_seq *seq;
    float *logits;
    int V;
    int32_t toks[XH_MAX_GEN];
    int top5[XH_MAX_GEN][5];
    float *lg[XH_MAX_GEN];      /* the logits of each step */
    int n;                      /* generated */
    int cached;                 /* positions the device held when the turn began */
};

static void path_open(struct path *p, eng_pack *pack, const char *kdir, int mode, int n_ctx)
{
    char err[512];
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kdir, .accel_node = "/dev/null",
                                               .ctx_size = n_ctx, .prefill = mode});
    struct eng_device_opts o = {.n_threads = 1, .act = ENG_ACT_F32};
    memset(p, 0, sizeof *p);
    cr_assert_eq(eng__device_xrt_double_open(&o, &p->d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_device_load_model(p->d, pack, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_plan_init(&p->plan, pi->hp.n_layers, ENG_PLAN_ALL, err, sizeof err), 0,
                 "%s", err);
    cr_assert_eq(eng_device_seq_begin(p->d, n_ctx, &p->seq, err, sizeof err), 0, "%s", err);
    p->V = pi->hp.n_vocab;
    p->logits = calloc((size_t)p->V, sizeof *p->logits);
    cr_assert(p->logits);
}

static void path_close(struct path *p)
{
    for (int i = 0; i < XH_MAX_GEN; i++)
        free(p->lg[i]);
    eng_device_seq_end(p->d, p->seq);
    eng_plan_deinit(&p->plan);
    free(p->logits);
    eng_device_free(p->d);
}

static void run(struct path *p, const int32_t *t, int n, enum eng_phase ph, int index)
{
    struct eng_batch b = {.tokens = t, .n_tokens = n, .logits = p->logits, .phase = ph,
                          .token_index = index};
    struct eng_run_result res;
    for (int i = 0; i < p->plan.n_runlists; i++)
        cr_assert_eq(eng_device_run_runlist(p->d, p->seq, &p->plan.runlists[i], &b, &res), 0,
                     "%s", res.message);
}

/* One turn: the prompt t[0..n) after `cached` positions the device holds, in
 * batches of the device's max_batch, then n_gen greedy tokens. */
static void turn(struct path *p, const int32_t *t, int n, int n_gen)
{
    int mb = eng_device_max_batch(p->d);
    mb = mb <= 0 ? n : mb;
    for (int i = 0; i < n; i += mb)
        run(p, t + i, n - i < mb ? n - i : mb, ENG_PHASE_PREFILL, i);
    p->n = 0;
    for (int s = 0; s < n_gen; s++) {
        top5(p->logits, p->V, p->top5[s]);
        free(p->lg[s]);
        p->lg[s] = malloc((size_t)p->V * sizeof(float));
        cr_assert(p->lg[s]);
        memcpy(p->lg[s], p->logits, (size_t)p->V * sizeof(float));
        p->toks[s] = p->top5[s][0];
        p->n++;
        if (s + 1 < n_gen)
            run(p, &p->toks[s], 1, ENG_PHASE_DECODE, s);
    }
}

/* Same tokens; same top-5 but for near-ties (on the NPU path's logits). Returns the
 * number of tied swaps; fails the test on a real difference. A greedy token that
 * differs between two candidates within XH_TIE on both paths' logits is a tie at
 * the argmax: the continuations then legitimately part, so the comparison ends
 * there (*tie_at = the step, else -1). */
static int compare(const struct path *c, const struct path *npu, const char *what, double tie,
                   int *tie_at)
{
    int ties = 0;
    *tie_at = -1;
    cr_assert_eq(c->n, npu->n);
    for (int s = 0; s < c->n; s++) {
        int a0 = c->toks[s], b0 = npu->toks[s];
        if (a0 != b0 && fabs((double)npu->lg[s][a0] - (double)npu->lg[s][b0]) <= tie &&
            fabs((double)c->lg[s][a0] - (double)c->lg[s][b0]) <= tie) {
            *tie_at = s;
            return ties;
        }
        cr_assert_eq(c->toks[s], npu->toks[s], "%s: step %d: token %d (cpu prefill) vs %d (npu "
                     "prefill), npu logits %.5f vs %.5f, cpu logits %.5f vs %.5f", what, s,
                     c->toks[s], npu->toks[s], (double)npu->lg[s][c->toks[s]],
                     (double)npu->lg[s][npu->toks[s]], (double)c->lg[s][c->toks[s]],
                     (double)c->lg[s][npu->toks[s]]);
        for (int k = 0; k < 5; k++) {
            int a = c->top5[s][k], b = npu->top5[s][k];
            if (a == b)
                continue;
            double gap = fabs((double)npu->lg[s][a] - (double)npu->lg[s][b]);
            cr_assert(gap <= tie, "%s: step %d rank %d: %d vs %d, %.5f apart", what, s, k,
                      a, b, gap);
            ties++;
        }
    }
    return ties;
}

/* Prompts of lens[0..n) tokens, n_gen greedy tokens, then a second turn of 12 tokens
 * on the same sequence: cpu and npu prefill agree on every step. */
static void agreement(const char *preset_pack, const char *kdir, const int *lens, int n,
                      int n_gen, double tie)
{
    char err[512];
    eng_pack *pack = NULL;
    cr_assert_eq(eng_pack_open(preset_pack, &pack, err, sizeof err), 0, "%s", err);
    int V = eng_pack_get_info(pack)->hp.n_vocab;
    xrtdbl_reset();
    xrtdbl_set_model(true);
    xmodel_reset();
    int n_tie_ended = 0;
    for (int i = 0; i < n; i++) {
        int32_t *t = malloc((size_t)(lens[i] + 16) * sizeof *t);
        cr_assert(t);
        random_ids(t, lens[i], 0, V, (uint64_t)i + 1);
        struct path c, u;
        int ctx = lens[i] + 2 * n_gen + 16;
        path_open(&c, pack, kdir, ENG_XRT_PREFILL_CPU, ctx);
        path_open(&u, pack, kdir, ENG_XRT_PREFILL_NPU, ctx);
        cr_assert_gt(eng_device_max_batch(c.d), 1, "cpu prefill runs in batches");
        size_t before = xrtdbl_log_lines();
        turn(&c, t, lens[i], n_gen);
        /* the hand-off synced each layer's written rows once per prefill batch:
         * [K|V] bf16 rows of the pack's stored KV heads */
        const struct eng_pack_info *pi = eng_pack_get_info(pack);
        int row = pi->hp.n_kv_heads * pi->hp.head_dim * 4, mb = eng_device_max_batch(c.d);
        for (int at = 0; at < lens[i]; at += mb) {
            int nb = lens[i] - at < mb ? lens[i] - at : mb;
            char want[96];
            snprintf(want, sizeof want, ".sync(to_device, %d, %d)", nb * row, at * row);
            size_t syncs = 0;
            for (size_t k = before; k < xrtdbl_log_lines(); k++)
                syncs += strstr(xrtdbl_log_line(k), want) != NULL;
            cr_assert_eq(syncs, (size_t)pi->hp.n_layers, "%zu syncs of %s, not one per layer",
                         syncs, want);
        }
        turn(&u, t, lens[i], n_gen);
        char what[64];
        snprintf(what, sizeof what, "%d tokens, turn 1", lens[i]);
        int tie_at;
        int ties = compare(&c, &u, what, tie, &tie_at);
        if (tie_at >= 0) {
            printf("%-24s %d tokens: the greedy token is a tie (within %.2f on both paths) at "
                   "step %d; compared up to there, tied top-5 swaps %d\n", what, lens[i],
                   tie, tie_at, ties);
            n_tie_ended++;
            path_close(&c);
            path_close(&u);
            free(t);
            continue;
        }
        /* Turn 2: the last greedy token (not yet in the KV) and 11 new ones. */
        int32_t t2[12];
        t2[0] = c.toks[n_gen - 1];
        random_ids(t2 + 1, 11, 0, V, (uint64_t)i + 101);
        turn(&c, t2, 12, n_gen);
        turn(&u, t2, 12, n_gen);
        snprintf(what, sizeof what, "%d tokens, turn 2", lens[i]);
        int ties2 = compare(&c, &u, what, tie, &tie_at);
        if (tie_at >= 0) {
            printf("%-24s the greedy token is a tie (within %.2f on both paths) at step %d; "
                   "compared up to there, tied top-5 swaps %d + %d\n", what, tie, tie_at,
                   ties, ties2);
            n_tie_ended++;
            path_close(&c);
            path_close(&u);
            free(t);
            continue;
        }
        printf("%-24s %d + %d greedy tokens and a second turn (%d positions reused) agree; "
               "tied top-5 swaps %d + %d\n", what, lens[i], n_gen, lens[i] + n_gen - 1, ties,
               ties2);
        fflush(stdout);
        path_close(&c);
        path_close(&u);
        free(t);
    }
    /* ties at the argmax are rare; a comparison that ends early on most prompts
     * compares nothing */
    cr_assert_leq(n_tie_ended, n / 4, "%d of %d prompts ended at a tie", n_tie_ended, n);
    eng_pack_free(pack);
}

static bool long_run(void)
{
    const char *lg = getenv("MINICPMD_XRT_LONG");
    return lg && strcmp(lg, "1") == 0;
}

MCD_TEST(hybrid, tiny_cpu_and_npu_prefill_agree, .timeout = 1200)
{
    static const int quick[] = {16, 97, 300}, full[] = {16, 23, 31, 48, 64, 77, 97, 128, 150,
                                                        200, 256, 300, 384, 450, 512, 600,
                                                        700, 800, 900, 1024};
    const char *kdir = kset_dir("tiny", "hybrid", "--designs --max-ctx 1200");
    if (long_run())
        agreement(pack_dir("tiny"), kdir, full, 20, 16, XH_TIE);
    else
        agreement(pack_dir("tiny"), kdir, quick, 3, 16, XH_TIE);
}

/* The CPU's K/V rows of 2 distinct heads written into a kernel set of 4 (the pack's
 * heads replicated 2x, as MiniCPM5's 2 are to 8). */
MCD_TEST(hybrid, replicated_kv_heads_agree)
{
    const char *d = kv_pack_dir("tiny", 4), *kd = kv_kset_dir(d, "tiny-kv4", 256);
    static const int lens[] = {40};
    agreement(d, kd, lens, 1, 16, XH_TIE);
}

/* AUTO's choice from given rates (never from timing): NPU 38 ms/token (OpenFlowLM's
 * ~26 tokens/s), CPU 200 ms a batch (a pass over the weights and the hand-off) +
 * 6 ms/token (~160 tokens/s): a 4-token prompt stays on the NPU, a long one goes to
 * the CPU; the fixed modes ignore the rates. */
MCD_TEST(hybrid, auto_chooses_by_length)
{
    struct xpf_rates r = {.npu_ms_per_token = 38.0, .cpu_ms_fixed = 200.0,
                          .cpu_ms_per_token = 6.0};
    char why[256];
    cr_assert(!xpf_choose_cpu(ENG_XRT_PREFILL_AUTO, 4, &r, why, sizeof why), "%s", why);
    cr_assert(strstr(why, "4 tokens on the NPU"), "%s", why);
    printf("%s\n", why);
    cr_assert(xpf_choose_cpu(ENG_XRT_PREFILL_AUTO, 1500, &r, why, sizeof why), "%s", why);
    cr_assert(strstr(why, "1500 tokens on the CPU"), "%s", why);
    printf("%s\n", why);
    /* the break-even: 200 / (38 - 6) = 6.25 tokens */
    cr_assert(!xpf_choose_cpu(ENG_XRT_PREFILL_AUTO, 6, &r, NULL, 0));
    cr_assert(xpf_choose_cpu(ENG_XRT_PREFILL_AUTO, 7, &r, NULL, 0));
    cr_assert(xpf_choose_cpu(ENG_XRT_PREFILL_CPU, 1, &r, NULL, 0));
    cr_assert(!xpf_choose_cpu(ENG_XRT_PREFILL_NPU, 5000, &r, NULL, 0));
}

/* MiniCPM5-2B's shapes (random weights) with its 2 KV heads replicated to 8 as the
 * kernel set holds them: a 1.9 GB pack, prompts of 16-128 tokens (the NPU path
 * prefills token by token through the model: seconds a token on this class of
 * machine), so only with MINICPMD_XRT_LONG=1 (tools/test.sh --long). */
MCD_TEST(hybrid, b2_with_8_kv_heads_agree, .timeout = 3600)
{
    if (!long_run())
        cr_skip_test("MiniCPM5-2B's shapes: with MINICPMD_XRT_LONG=1 (tools/test.sh --long)");
    const char *d = kv_pack_dir("2b", 8), *kd = kv_kset_dir(d, "2b-kv8-hybrid", 256);
    static const int lens[] = {16, 24, 64, 128};
    agreement(d, kd, lens, 4, 8, XH_TIE_2B);
}

/* ---- two sequences: the CPU prefills one while the NPU decodes the other ---------- */

/* Greedy decode of n tokens on seq from the logits in lg (the prompt's), through
 * every runlist of plan. */
static void greedy(struct eng_device *d, const struct eng_plan *plan, eng_device_seq *seq,
                   float *lg, int V, int n, int32_t *toks)
{
    for (int s = 0; s < n; s++) {
        int best = 0;
        for (int i = 1; i < V; i++)
            best = lg[i] > lg[best] ? i : best;
        toks[s] = best;
        struct eng_batch b = {.tokens = &toks[s], .n_tokens = 1, .logits = lg,
                              .phase = ENG_PHASE_DECODE, .token_index = s};
        struct eng_run_result res;
        for (int k = 0; k < plan->n_runlists; k++)
            cr_assert_eq(eng_device_run_runlist(d, seq, &plan->runlists[k], &b, &res), 0, "%s",
                         res.message);
    }
}

static struct eng_device *open_dev(eng_pack *pack, const char *kdir, int mode, int slots,
                                   int n_ctx)
{
    char err[512];
    struct eng_device *d;
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kdir, .accel_node = "/dev/null",
                                               .ctx_size = n_ctx, .prefill = mode,
                                               .slots = slots});
    struct eng_device_opts o = {.n_threads = 1, .act = ENG_ACT_F32};
    cr_assert_eq(eng__device_xrt_double_open(&o, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_device_load_model(d, pack, err, sizeof err), 0, "%s", err);
    return d;
}

/* Sequence A prefills (CPU) and decodes 4 tokens; B's 97-token prompt then starts in
 * the background and A decodes 12 more on the NPU before B is handed over; then B
 * decodes. Each sequence's tokens are those of the same sequence alone on a
 * one-slot device, bit for bit (the same computations in the same order), and
 * the hand-off wrote B's rows into B's state BOs only. */
MCD_TEST(hybrid, background_prefill_beside_decode)
{
    char err[512];
    const char *kdir = kset_dir("tiny", "hybrid", "--designs --max-ctx 1200");
    eng_pack *pack = NULL;
    cr_assert_eq(eng_pack_open(pack_dir("tiny"), &pack, err, sizeof err), 0, "%s", err);
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    int V = pi->hp.n_vocab, L = pi->hp.n_layers;
    xrtdbl_reset();
    xrtdbl_set_model(true);
    xmodel_reset();
    int32_t pa[40], pb[97], ta[16], tb[8], ra[16], rb[8];
    random_ids(pa, 40, 0, V, 7);
    random_ids(pb, 97, 0, V, 8);
    float *lga = malloc((size_t)V * sizeof *lga), *lgb = malloc((size_t)V * sizeof *lgb);
    cr_assert(lga && lgb);
    struct eng_plan plan;
    cr_assert_eq(eng_plan_init(&plan, L, 2, err, sizeof err), 0, "%s", err);
    struct eng_run_result res;

    /* alone, one slot each: the reference tokens */
    for (int which = 0; which < 2; which++) {
        struct eng_device *d = open_dev(pack, kdir, ENG_XRT_PREFILL_CPU, 1, 256);
        cr_assert_eq(eng_device_max_seqs(d), 1);
        eng_device_seq *s;
        cr_assert_eq(eng_device_seq_begin(d, 256, &s, err, sizeof err), 0, "%s", err);
        struct eng_batch b = {.tokens = which ? pb : pa, .n_tokens = which ? 97 : 40,
                              .logits = which ? lgb : lga, .phase = ENG_PHASE_PREFILL};
        for (int k = 0; k < plan.n_runlists; k++)
            cr_assert_eq(eng_device_run_runlist(d, s, &plan.runlists[k], &b, &res), 0, "%s",
                         res.message);
        greedy(d, &plan, s, which ? lgb : lga, V, which ? 8 : 16, which ? rb : ra);
        eng_device_seq_end(d, s);
        eng_device_free(d);
    }

    struct eng_device *d = open_dev(pack, kdir, ENG_XRT_PREFILL_CPU, 2, 256);
    cr_assert_eq(eng_device_max_seqs(d), 2);
    cr_assert(eng_device_can_prefill_async(d));
    eng_device_seq *sa, *sb, *sc;
    cr_assert_eq(eng_device_seq_begin(d, 256, &sa, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_device_seq_begin(d, 256, &sb, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_device_seq_begin(d, 256, &sc, err, sizeof err), -EBUSY, "a third slot");
    struct eng_batch ba = {.tokens = pa, .n_tokens = 40, .logits = lga,
                           .phase = ENG_PHASE_PREFILL};
    cr_assert_eq(eng_device_prefill_start(d, sa, &ba), 1);
    cr_assert_eq(eng_device_prefill_finish(d, sa, true, &res), 0, "%s", res.message);
    cr_assert(res.on_host);
    greedy(d, &plan, sa, lga, V, 4, ta);
    struct eng_batch bb = {.tokens = pb, .n_tokens = 97, .logits = lgb,
                           .phase = ENG_PHASE_PREFILL};
    size_t before = xrtdbl_log_lines();
    cr_assert_eq(eng_device_prefill_start(d, sb, &bb), 1);
    /* a decode batch never goes to the host */
    struct eng_batch dec = {.tokens = pa, .n_tokens = 1, .phase = ENG_PHASE_DECODE};
    cr_assert_eq(eng_device_prefill_start(d, sa, &dec), 0);
    greedy(d, &plan, sa, lga, V, 12, ta + 4);
    cr_assert_eq(eng_device_prefill_finish(d, sb, true, &res), 0, "%s", res.message);
    cr_assert(res.on_host && res.elapsed_us > 0);
    size_t handoff = 0;
    char want[96];
    snprintf(want, sizeof want, ".sync(to_device, %d, 0)", 97 * pi->hp.n_kv_heads *
             pi->hp.head_dim * 4);
    for (size_t k = before; k < xrtdbl_log_lines(); k++)
        handoff += strstr(xrtdbl_log_line(k), want) != NULL;
    cr_assert_eq(handoff, (size_t)L, "B's rows: one sync per layer, not %zu", handoff);
    greedy(d, &plan, sb, lgb, V, 8, tb);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(ta[i], ra[i], "A's token %d: %d beside B's prefill, %d alone", i, ta[i],
                     ra[i]);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(tb[i], rb[i], "B's token %d: %d after a background prefill, %d alone", i,
                     tb[i], rb[i]);
    /* a finish with nothing started is an error, not a hang */
    cr_assert_eq(eng_device_prefill_finish(d, sb, true, &res), -EIO);
    eng_device_seq_end(d, sa);
    eng_device_seq_end(d, sb);
    eng_device_free(d);
    eng_plan_deinit(&plan);
    free(lga);
    free(lgb);
    eng_pack_free(pack);
}

/* A short prompt --npu-prefill auto leaves on the NPU is one batch of several
 * positions: the device runs it token by token through each runlist (each
 * position's residual kept between runlists) and gives the logits and KV of
 * running the positions one batch each. */
MCD_TEST(hybrid, npu_batch_of_several_positions)
{
    char err[512];
    const char *kdir = kset_dir("tiny", "hybrid", "--designs --max-ctx 1200");
    eng_pack *pack = NULL;
    cr_assert_eq(eng_pack_open(pack_dir("tiny"), &pack, err, sizeof err), 0, "%s", err);
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    int V = pi->hp.n_vocab;
    xrtdbl_reset();
    xrtdbl_set_model(true);
    xmodel_reset();
    int32_t p[6], t1[8], t2[8];
    random_ids(p, 6, 0, V, 21);
    float *l1 = malloc((size_t)V * sizeof *l1), *l2 = malloc((size_t)V * sizeof *l2);
    cr_assert(l1 && l2);
    int ks[] = {ENG_PLAN_ALL, 1};
    for (int ki = 0; ki < 2; ki++) {
        struct eng_plan plan;
        cr_assert_eq(eng_plan_init(&plan, pi->hp.n_layers, ks[ki], err, sizeof err), 0, "%s",
                     err);
        for (int way = 0; way < 2; way++) {
            struct eng_device *d = open_dev(pack, kdir, ENG_XRT_PREFILL_NPU, 1, 64);
            eng_device_seq *s;
            struct eng_run_result res;
            cr_assert_eq(eng_device_seq_begin(d, 64, &s, err, sizeof err), 0, "%s", err);
            cr_assert_eq(eng_device_prefill_start(d, s, &(struct eng_batch){
                             .tokens = p, .n_tokens = 6, .phase = ENG_PHASE_PREFILL}), 0,
                         "--npu-prefill npu never prefills on the host");
            int step = way ? 6 : 1;
            for (int i = 0; i < 6; i += step) {
                struct eng_batch b = {.tokens = p + i, .n_tokens = step,
                                      .logits = way ? l2 : l1, .phase = ENG_PHASE_PREFILL,
                                      .token_index = i};
                for (int k = 0; k < plan.n_runlists; k++)
                    cr_assert_eq(eng_device_run_runlist(d, s, &plan.runlists[k], &b, &res), 0,
                                 "%s", res.message);
            }
            greedy(d, &plan, s, way ? l2 : l1, V, 8, way ? t2 : t1);
            eng_device_seq_end(d, s);
            eng_device_free(d);
        }
        cr_assert_eq(memcmp(l1, l2, (size_t)V * sizeof *l1), 0, "K %d: logits differ", ks[ki]);
        cr_assert_eq(memcmp(t1, t2, sizeof t1), 0, "K %d: tokens differ", ks[ki]);
        eng_plan_deinit(&plan);
    }
    free(l1);
    free(l2);
    eng_pack_free(pack);
}
