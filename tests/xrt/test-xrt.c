/* The xrt device without an NPU: the kernel-set reader, the host-side layouts the
 * kernels stream (weight pools on the tiny pack, position records, the attnpos
 * instruction patch), and the real bridge (engine/device/xrt/bridge.cpp) and backend
 * (engine/device/xrt/dev-xrt.c) compiled against the XRT conformance double
 * (tests/xrt/double): the recorded call sequence of decode steps with K = all / 21
 * / 1, the ERT state and message of every failure the double injects, recovery,
 * the one-run-at-a-time fallback, and --npu-probe.
 *
 * Packs come from minicpmd-pack gen (MINICPMD_PACK) and stand-in kernel sets from
 * tests/xrt/mkkset.py (MINICPMD_MKKSET), under MINICPMD_TEST_WORK. */
#include "engine/device/device.h"
#include "engine/worker/plan.h"
#include "engine/model/q4nx.h"
#include "engine/model/safetensors.h"
#include "engine/device/xrt/kset.h"
#include "engine/device/xrt/npu-layout.h"
#include "engine/device/xrt/xrt-dev.h"
#include "tests/check.h"
#include "xrt-double.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int eng__device_xrt_double_open(const struct eng_device_opts *o, struct eng_device **out,
                                char *err, size_t errlen);

/* ---- fixtures -------------------------------------------------------------------- */

static const char *work(void)
{
    const char *w = getenv("MINICPMD_TEST_WORK");
    cr_assert(w && getenv("MINICPMD_PACK") && getenv("MINICPMD_MKKSET"),
              "MINICPMD_TEST_WORK, MINICPMD_PACK and MINICPMD_MKKSET are set by meson test");
    return w;
}

static const char *pack_dir(const char *preset)
{
    static char dir[2][2048];
    char *d = dir[strcmp(preset, "tiny") == 0];
    snprintf(d, 2048, "%s/%s", work(), preset);
    struct stat st;
    if (stat(d, &st) != 0) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' gen --preset %s --seed 11 --out '%s.tmp%d' "
                 ">/dev/null && mv '%s.tmp%d' '%s' 2>/dev/null; test -d '%s'", work(),
                 getenv("MINICPMD_PACK"), preset, d, (int)getpid(), d, (int)getpid(), d, d);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
    }
    return d;
}

/* A stand-in kernel set for `preset` under <work>/kset-<name>, built with `args`. */
static const char *kset_dir(const char *preset, const char *name, const char *args)
{
    static char dir[4][2048];
    static int next;
    char *d = dir[next++ % 4];
    snprintf(d, 2048, "%s/kset-%s-%s", work(), preset, name);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && /usr/bin/python3 -B '%s' '%s' '%s' %s", d,
             getenv("MINICPMD_MKKSET"), pack_dir(preset), d, args ? args : "");
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    return d;
}

static eng_pack *open_pack(const char *preset)
{
    eng_pack *p = NULL;
    char err[512];
    cr_assert_eq(eng_pack_open(pack_dir(preset), &p, err, sizeof err), 0, "%s", err);
    return p;
}

/* The double device over `preset` with the kernel set `kdir`. */
static struct eng_device *open_double(eng_pack *pack, const char *kdir, int timeout_ms,
                                      bool no_runlist)
{
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kdir, .accel_node = "/dev/null",
                                               .timeout_ms = timeout_ms,
                                               .no_runlist = no_runlist});
    struct eng_device *d = NULL;
    char err[512];
    cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_device_load_model(d, pack, err, sizeof err), 0, "%s", err);
    return d;
}

struct step {
    struct eng_plan plan;
    eng_device_seq *seq;
    float *logits;
    int n_vocab;
};

static void step_init(struct step *s, struct eng_device *d, eng_pack *pack, int k)
{
    char err[256];
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    cr_assert_eq(eng_plan_init(&s->plan, pi->hp.n_layers, k, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_device_seq_begin(d, 64, &s->seq, err, sizeof err), 0, "%s", err);
    s->n_vocab = pi->hp.n_vocab;
    s->logits = calloc((size_t)s->n_vocab, sizeof *s->logits);
    cr_assert(s->logits);
}

static void step_deinit(struct step *s, struct eng_device *d)
{
    eng_device_seq_end(d, s->seq);
    eng_plan_deinit(&s->plan);
    free(s->logits);
}

/* One decode step: every runlist of the plan in order. Returns 0 or the first
 * failure in *res. */
static int decode(struct step *s, struct eng_device *d, int32_t tok, const atomic_bool *cancel,
                  struct eng_run_result *res)
{
    struct eng_batch b = {.tokens = &tok, .n_tokens = 1, .logits = s->logits,
                          .phase = ENG_PHASE_DECODE, .cancel = cancel};
    for (int i = 0; i < s->plan.n_runlists; i++)
        if (eng_device_run_runlist(d, s->seq, &s->plan.runlists[i], &b, res) != 0)
            return -1;
    return 0;
}

static size_t count_lines(const char *needle)
{
    size_t n = 0;
    for (size_t i = 0; i < xrtdbl_log_lines(); i++)
        if (strstr(xrtdbl_log_line(i), needle))
            n++;
    return n;
}

/* ---- kernel sets ----------------------------------------------------------------- */

MCD_TEST(kset, loads_and_matches_the_tiny_pack)
{
    eng_pack *p = open_pack("tiny");
    struct eng_kset ks;
    char err[512];
    const char *d = kset_dir("tiny", "ok", NULL);
    cr_assert_eq(eng_kset_load(d, &ks, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_kset_check_model(&ks, p, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_kset_check_files(&ks, err, sizeof err), 0, "%s", err);
    cr_assert_eq(ks.n_layers, 4);
    cr_assert_eq(ks.n_pool_ops, 7);
    cr_assert_eq(ks.n_consts_ops, 2);
    cr_assert_eq(ks.n_tail, 2);
    cr_assert(ks.kernels[ks.layer_step.kernel].attnpos);
    cr_assert_eq(ks.layer_step.n_args, 6);
    eng_kset_free(&ks);
    eng_pack_free(p);
}

MCD_TEST(kset, mismatch_names_what_differs)
{
    eng_pack *p = open_pack("tiny");
    struct {
        const char *args, *want;
    } cases[] = {
        {"--set spec.num_layers=42 --set layers='[\"dense\"]'", "layers"},
        {"--set spec.head_dim=128", "head_dim is 128 in the kernel set, 64 in the model"},
        {"--set spec.num_heads=16", "num_heads is 16 in the kernel set, 4 in the model"},
        {"--set spec.quant='\"q8\"'", "quant is 'q8'"},
        {"--set hf_config_check.vocab_size=7", "vocab_size is 7 in the kernel set"},
        {"--set hf_config_check.model_type='[\"qwen3\"]'", "model_type"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct eng_kset ks;
        char err[512] = "";
        char name[16];
        snprintf(name, sizeof name, "bad%zu", i);
        const char *d = kset_dir("tiny", name, cases[i].args);
        int rc = eng_kset_load(d, &ks, err, sizeof err);
        if (rc == 0) {
            rc = eng_kset_check_model(&ks, p, err, sizeof err);
            eng_kset_free(&ks);
        }
        cr_assert_neq(rc, 0, "case %zu passed", i);
        cr_assert(strstr(err, cases[i].want), "case %zu: '%s' lacks '%s'", i, err,
                  cases[i].want);
    }
    /* The spec's layer count against the model's, with a consistent layers list. */
    struct eng_kset ks;
    char err[512];
    const char *d = kset_dir("tiny", "layers42",
                             "--set spec.num_layers=42 --set layers='[\"dense\"," \
                             "\"dense\",\"dense\",\"dense\",\"dense\",\"dense\",\"dense\"," \
                             "\"dense\",\"dense\",\"dense\",\"dense\",\"dense\",\"dense\"," \
                             "\"dense\",\"dense\",\"dense\",\"dense\",\"dense\",\"dense\"," \
                             "\"dense\",\"dense\",\"dense\",\"dense\",\"dense\",\"dense\"," \
                             "\"dense\",\"dense\",\"dense\",\"dense\",\"dense\",\"dense\"," \
                             "\"dense\",\"dense\",\"dense\",\"dense\",\"dense\",\"dense\"," \
                             "\"dense\",\"dense\",\"dense\",\"dense\",\"dense\"]'");
    cr_assert_eq(eng_kset_load(d, &ks, err, sizeof err), 0, "%s", err);
    cr_assert_neq(eng_kset_check_model(&ks, p, err, sizeof err), 0);
    cr_assert(strstr(err, "num_layers is 42 in the kernel set, 4 in the model"), "%s", err);
    eng_kset_free(&ks);
    eng_pack_free(p);
}

MCD_TEST(kset, missing_file_and_missing_set)
{
    struct eng_kset ks;
    char err[512], dir[4096];
    const char *d = kset_dir("tiny", "noinsts", "--drop dx/insts.bin");
    cr_assert_eq(eng_kset_load(d, &ks, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_kset_check_files(&ks, err, sizeof err), -ENOENT);
    cr_assert(strstr(err, "dx/insts.bin (named in manifest.json) does not exist"), "%s", err);
    eng_kset_free(&ks);
    cr_assert_eq(eng_kset_locate(NULL, pack_dir("tiny"), dir, sizeof dir, err, sizeof err),
                 -ENOENT);
    cr_assert(strstr(err, "open_kernels/manifest.json does not exist"), "%s", err);
    cr_assert_eq(eng_kset_locate("/nonexistent", NULL, dir, sizeof dir, err, sizeof err), -ENOENT);
    cr_assert(strstr(err, "--npu-kernels /nonexistent: no such directory"), "%s", err);
}

MCD_TEST(kset, refuses_what_it_cannot_drive)
{
    struct {
        const char *args, *want;
    } cases[] = {
        {"--set family='\"qwen36moe\"'", "not a dense family"},
        {"--set manifest_version=2", "manifest_version is not 1"},
        {"--set kernels.dx.patch='\"moeroute2\"'", "patch other than attnpos"},
        {"--set layout.chunk_bytes=8704", "not 5120"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct eng_kset ks;
        char err[512] = "", name[16];
        snprintf(name, sizeof name, "ref%zu", i);
        cr_assert_neq(eng_kset_load(kset_dir("tiny", name, cases[i].args), &ks, err, sizeof err),
                      0, "case %zu loaded", i);
        cr_assert(strstr(err, cases[i].want), "case %zu: %s", i, err);
    }
}

/* ---- layouts ----------------------------------------------------------------------- */

/* The band law as docs/npu-kernels.md states it (recipes/pack.py std_perm), written
 * out here on its own: pool chunk c covers row half c % 2 of band c / per_band and
 * k-tile (c % per_band) / 2. */
static void doc_law(uint64_t c, uint64_t in_dim, int64_t *rb, int64_t *kt)
{
    uint64_t per_band = in_dim / 128;
    *rb = (int64_t)(2 * (c / per_band) + c % 2);
    *kt = (int64_t)((c % per_band) / 2);
}

MCD_TEST(layout, weight_pool_follows_the_band_law_on_the_tiny_pack)
{
    eng_pack *p = open_pack("tiny");
    const struct eng_hparams *hp = &eng_pack_get_info(p)->hp;
    struct eng_kset ks;
    eng_st *st = NULL;
    char err[512], path[4096];
    cr_assert_eq(eng_kset_load(kset_dir("tiny", "ok", NULL), &ks, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/model.q4nx", pack_dir("tiny"));
    cr_assert_eq(eng_st_open(path, &st, err, sizeof err), 0, "%s", err);
    uint8_t *pool = calloc(1, ks.pool_bytes);
    cr_assert(pool);
    for (int layer = 0; layer < hp->n_layers; layer += 3) {
        cr_assert_eq(eng_npu_pack(st, ks.pool_ops, ks.n_pool_ops, layer, pool, ks.pool_bytes, err,
                                  sizeof err), 0, "%s", err);
        int checked = 0;
        for (int o = 0; o < ks.n_pool_ops; o++) {
            const struct eng_kset_op *op = &ks.pool_ops[o];
            char name[160];
            const char *l = strstr(op->tensor, "{l}");
            snprintf(name, sizeof name, "%.*s%d%s", (int)(l - op->tensor), op->tensor, layer,
                     l + 3);
            const struct eng_st_tensor *t = eng_st_find(st, name);
            cr_assert(t, "%s", name);
            struct eng_q4nx q;
            int64_t rows = (int64_t)t->shape[0] / (int64_t)(op->in_dim / 256) * 32;
            cr_assert_eq(eng_q4nx_init(&q, t->data, t->shape[0], rows, (int64_t)op->in_dim), 0);
            for (uint64_t c = 0; c < op->nch; c++) {
                int64_t rb, kt;
                doc_law(c, op->in_dim, &rb, &kt);
                const uint8_t *pc = pool + op->dst + c * 5120;
                /* byte for byte the file's chunk (rb, kt) ... */
                cr_assert_eq(memcmp(pc, eng_q4nx_chunk(&q, rb, kt), 5120), 0,
                             "%s: pool chunk %llu is not file chunk (%lld, %lld)", name,
                             (unsigned long long)c, (long long)rb, (long long)kt);
                /* ... so it reads back W[32 rb + r][256 kt + col] */
                for (int r = 0; r < 32; r += 7)
                    for (int col = 0; col < 256; col += 37) {
                        float d = eng_q4nx_chunk_scale(pc, col / 32, r);
                        float m = eng_q4nx_chunk_min(pc, col / 32, r);
                        float w = (float)eng_q4nx_chunk_nibble(pc, r, col) * d + m;
                        cr_assert_eq(w, eng_q4nx_get(&q, 32 * rb + r, 256 * kt + col));
                    }
                checked++;
            }
        }
        cr_assert_gt(checked, 0);
        /* The region past the last op is zero (the pool is 1 MB-padded). */
        const struct eng_kset_op *last = &ks.pool_ops[ks.n_pool_ops - 1];
        for (uint64_t i = last->dst + last->nch * 5120; i < ks.pool_bytes; i += 4099)
            cr_assert_eq(pool[i], 0);
    }
    /* consts: the two norms verbatim at 0 and at hidden * 2 */
    uint8_t *consts = calloc(1, ks.consts_bytes);
    cr_assert_eq(eng_npu_pack(st, ks.consts_ops, ks.n_consts_ops, 2, consts, ks.consts_bytes, err,
                              sizeof err), 0, "%s", err);
    const struct eng_st_tensor *ln = eng_st_find(st, "model.layers.2.input_layernorm.weight");
    const struct eng_st_tensor *pln = eng_st_find(st, "model.layers.2.post_attention_layernorm.weight");
    cr_assert(ln && pln);
    cr_assert_eq(memcmp(consts, ln->data, ln->nbytes), 0);
    cr_assert_eq(memcmp(consts + hp->n_embd * 2, pln->data, pln->nbytes), 0);
    /* A plan that reads past the tensor is refused, naming it. */
    struct eng_kset_op bad = ks.pool_ops[0];
    bad.nch *= 4;
    cr_assert_neq(eng_npu_pack(st, &bad, 1, 0, pool, ks.pool_bytes, err, sizeof err), 0);
    cr_assert(strstr(err, "q_proj"), "%s", err);
    free(consts);
    free(pool);
    eng_st_free(st);
    eng_kset_free(&ks);
    eng_pack_free(p);
}

MCD_TEST(layout, position_records)
{
    double f[4] = {1.0, 0.5, 0.25, 0.125};
    uint8_t t[3 * 1024];
    eng_npu_ptab(t, 3, 1024, f, 4, 0);
    int32_t head[2];
    float c, s;
    memcpy(head, t + 2 * 1024, 8);
    cr_assert_eq(head[0], 2);
    cr_assert_eq(head[1], 2);
    memcpy(head, t, 8);
    cr_assert_eq(head[0], 0);
    cr_assert_eq(head[1], 1, "position 0 streams one dummy row");
    memcpy(&c, t + 2 * 1024 + 512 + 4 * 1, 4);
    memcpy(&s, t + 2 * 1024 + 512 + 4 * (4 + 1), 4);
    cr_assert_float_eq(c, (float)cos(2 * 0.5), 1e-6);
    cr_assert_float_eq(s, (float)sin(2 * 0.5), 1e-6);
    /* a sliding window of 2: position 5 sees rows [4, 5) */
    uint64_t start, nf;
    eng_npu_attn_window(5, 2, &start, &nf);
    cr_assert_eq(start, 4);
    cr_assert_eq(nf, 1);
}

MCD_TEST(layout, attnpos_patch)
{
    struct eng_kset ks;
    char err[512], path[4200];
    cr_assert_eq(eng_kset_load(kset_dir("tiny", "ok", NULL), &ks, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/dx/insts.bin", ks.dir);
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    uint32_t w[256];
    size_t n = fread(w, 4, 256, f);
    fclose(f);
    struct eng_npu_patch t[4];
    cr_assert_eq(eng_npu_attn_table(w, n, ks.kv_row, t, err, sizeof err), 0, "%s", err);
    eng_npu_attn_apply(w, t, 9, ks.kv_row, ks.ptab_row, 0, 1);
    for (int i = 0; i < 4; i++) {
        uint32_t want = t[i].kind == 0   ? (uint32_t)(9 * ks.kv_row / 4)
                        : t[i].kind == 1 ? (uint32_t)(9 * ks.kv_row)
                        : t[i].kind == 2 ? (uint32_t)(9 * ks.ptab_row) | 0x80000000u
                                         : 0;
        cr_assert_eq(w[t[i].word], want, "kind %d", t[i].kind);
    }
    /* the weight fill (arg 0) is left alone */
    cr_assert_eq(w[4 + 6 + 12 + 12 + 4 + 12 + 12 + 10], 4096);
    /* a stream built for another KV row has no drain at one row: refused */
    cr_assert_neq(eng_npu_attn_table(w, n, ks.kv_row * 2, t, err, sizeof err), 0);
    eng_kset_free(&ks);
}

/* ---- the bridge on the conformance double: call sequences ------------------------ */

struct parsed {
    int run_ctx[512];       /* run id -> ctx id */
    int list_ctx[512];      /* runlist id -> ctx id */
    int instr_bo[16];       /* kernel id -> its instruction BO */
    int kern_words[16];
};

static void parse_log(struct parsed *p)
{
    memset(p, -1, sizeof *p);
    int last_group_kernel = -1;
    for (size_t i = 0; i < xrtdbl_log_lines(); i++) {
        const char *l = xrtdbl_log_line(i);
        int a, b, c, g;
        size_t sz;
        if (sscanf(l, "run#%d(kernel#%d, ctx#%d)", &a, &b, &c) == 3)
            p->run_ctx[a] = c;
        else if (sscanf(l, "runlist#%d(ctx#%d)", &a, &b) == 2)
            p->list_ctx[a] = b;
        else if (sscanf(l, "kernel#%d.group_id(1) -> %d", &a, &g) == 2)
            last_group_kernel = a;
        else if (sscanf(l, "bo#%d(size=%zu, flags=cacheable, group=%d)", &a, &sz, &g) == 3) {
            cr_assert_geq(last_group_kernel, 0, "an instruction BO before any group_id(1)");
            cr_assert_eq(g, 101, "the instruction BO is not in the group of arg 1: %s", l);
            p->instr_bo[last_group_kernel] = a;
            p->kern_words[last_group_kernel] = (int)(sz / 4);
        }
    }
}

/* Args 0-2 of every run: opcode 3, its kernel's instruction BO, its word count; and
 * every runlist only holds runs of its own hw_context. */
static void check_runs_and_contexts(void)
{
    struct parsed p;
    parse_log(&p);
    int runs = 0;
    for (size_t i = 0; i < xrtdbl_log_lines(); i++) {
        const char *l = xrtdbl_log_line(i);
        int r, k, c, bo;
        long long v;
        cr_assert_null(strstr(l, "-> throw"), "unexpected failure: %s", l);
        if (sscanf(l, "run#%d(kernel#%d, ctx#%d)", &r, &k, &c) == 3) {
            runs++;
            const char *a0 = xrtdbl_log_line(i + 1), *a1 = xrtdbl_log_line(i + 2),
                       *a2 = xrtdbl_log_line(i + 3);
            cr_assert(a0 && a1 && a2);
            cr_assert_eq(sscanf(a0, "run#%*d.set_arg(0, scalar32 %lld)", &v), 1, "%s", a0);
            cr_assert_eq(v, 3, "arg 0 is the opcode 3: %s", a0);
            cr_assert_eq(sscanf(a1, "run#%*d.set_arg(1, bo#%d)", &bo), 1, "%s", a1);
            cr_assert_eq(bo, p.instr_bo[k], "arg 1 is the kernel's instruction BO: %s", a1);
            cr_assert_eq(sscanf(a2, "run#%*d.set_arg(2, scalar32 %lld)", &v), 1, "%s", a2);
            cr_assert_eq(v, p.kern_words[k], "arg 2 is the word count: %s", a2);
        }
        int L;
        if (sscanf(l, "runlist#%d.add(run#%d)", &L, &r) == 2)
            cr_assert_eq(p.list_ctx[L], p.run_ctx[r], "run %d added to a runlist of another "
                         "hw_context", r);
    }
    cr_assert_gt(runs, 0);
}

/* From log line `from`: the executes, each waited (a wait that returned) before the
 * next execute; returns the executes' sizes in order. */
static int executes_since(size_t from, int *sizes, int max)
{
    int n = 0, open_list = -1;
    for (size_t i = from; i < xrtdbl_log_lines(); i++) {
        const char *l = xrtdbl_log_line(i);
        int L, k;
        if (sscanf(l, "runlist#%d.execute(n=%d)", &L, &k) == 2) {
            cr_assert_eq(open_list, -1, "runlist %d executed before runlist %d was waited for",
                         L, open_list);
            cr_assert_lt(n, max);
            sizes[n++] = k;
            open_list = L;
        } else if (strstr(l, ".wait(") && sscanf(l, "runlist#%d.wait(", &L) == 1) {
            cr_assert_eq(L, open_list, "wait on a runlist that is not the one executing");
            open_list = -1;
        }
    }
    cr_assert_eq(open_list, -1, "a runlist was never waited for");
    return n;
}

static void decode_sequence(int k, int want_layer_lists, int want_size)
{
    xrtdbl_reset();
    eng_pack *p = open_pack("deep");
    struct eng_device *d = open_double(p, kset_dir("deep", "ok", NULL), 0, false);
    check_runs_and_contexts();
    struct step s;
    step_init(&s, d, p, k);
    struct eng_run_result res;
    for (int t = 0; t < 2; t++) {
        size_t from = xrtdbl_log_lines();
        cr_assert_eq(decode(&s, d, 5 + t, NULL, &res), 0, "%s", res.message);
        int sizes[64];
        int n = executes_since(from, sizes, 64);
        /* the layer chunks, then ln and lm: each on its own context */
        cr_assert_eq(n, want_layer_lists + 2, "K=%d: %d submissions", k, n);
        int layers = 0;
        for (int i = 0; i < want_layer_lists; i++) {
            cr_assert_eq(sizes[i], i + 1 < want_layer_lists ? want_size : sizes[i]);
            layers += sizes[i];
        }
        cr_assert_eq(layers, 42);
        cr_assert_eq(sizes[n - 2], 1);
        cr_assert_eq(sizes[n - 1], 1);
        /* runlists are kept: the second token builds none */
        if (t == 1)
            for (size_t i = from; i < xrtdbl_log_lines(); i++) {
                int L, c;
                cr_assert_neq(sscanf(xrtdbl_log_line(i), "runlist#%d(ctx#%d)", &L, &c), 2,
                              "token 2 built a runlist: %s", xrtdbl_log_line(i));
            }
        /* the attnpos patch: once per token (one sync of dx's instruction BO) */
        struct parsed pp;
        parse_log(&pp);
        char needle[64];
        snprintf(needle, sizeof needle, "bo#%d.sync(to_device", pp.instr_bo[0]);
        size_t syncs = 0;
        for (size_t i = from; i < xrtdbl_log_lines(); i++)
            syncs += strstr(xrtdbl_log_line(i), needle) != NULL;
        cr_assert_eq(syncs, 1, "K=%d: the instruction patch was synced %zu times", k, syncs);
        /* logits come back from the device */
        cr_assert_geq(count_lines("from_device"), (size_t)(t + 1));
    }
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(sequence, k_all_one_runlist_of_42)
{
    decode_sequence(ENG_PLAN_ALL, 1, 42);
}

MCD_TEST(sequence, k_21_two_runlists_waited_in_turn)
{
    decode_sequence(21, 2, 21);
}

MCD_TEST(sequence, k_1_one_runlist_per_layer)
{
    decode_sequence(1, 42, 1);
}

MCD_TEST(sequence, load_order_and_buffers)
{
    xrtdbl_reset();
    eng_pack *p = open_pack("deep");
    struct eng_device *d = open_double(p, kset_dir("deep", "ok", NULL), 0, false);
    /* device first, then per xclbin: load, register, hw_context */
    cr_assert(strstr(xrtdbl_log_line(0), "device(0)"), "%s", xrtdbl_log_line(0));
    cr_assert_eq(count_lines("register_xclbin("), 3);
    cr_assert_eq(count_lines("hw_context#"), 3);
    cr_assert_eq(count_lines("flags=cacheable"), 3, "one instruction BO per kernel");
    /* data BOs: 4 per layer + the 8 globals, each 1 MB-aligned */
    cr_assert_eq(count_lines("ext::bo#"), 42 * 4 + 8);
    for (size_t i = 0; i < xrtdbl_log_lines(); i++) {
        size_t sz;
        int b;
        if (sscanf(xrtdbl_log_line(i), "ext::bo#%d(size=%zu)", &b, &sz) == 2)
            cr_assert_eq(sz % (1u << 20), 0);
    }
    cr_assert_eq(count_lines("(kernel#"), 42 + 2, "one run per layer and per tail step");
    cr_assert_eq(eng_device_default_k(d), 21, "42 layers -> two runlists of 21");
    cr_assert_eq(eng_device_max_batch(d), 1);
    cr_assert_str_eq(eng_device_get_name(d), "xrt");
    eng_device_free(d);
    eng_pack_free(p);
}

/* ---- failures -> ERT states ------------------------------------------------------- */

static struct eng_device *failing_setup(eng_pack **p, struct step *s, int k, int timeout_ms,
                                        bool no_runlist)
{
    xrtdbl_reset();
    *p = open_pack("deep");
    struct eng_device *d = open_double(*p, kset_dir("deep", "ok", NULL), timeout_ms, no_runlist);
    step_init(s, d, *p, k);
    return d;
}

static void recover(struct eng_device *d, struct step *s)
{
    char err[256];
    struct eng_run_result res;
    /* a failed device refuses work until reset */
    cr_assert_neq(decode(s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_ERROR);
    cr_assert(strstr(res.message, "needs reset"), "%s", res.message);
    cr_assert_eq(eng_device_reset(d, err, sizeof err), 0, "%s", err);
    eng_device_seq_truncate(d, s->seq, 0);
    cr_assert_eq(decode(s, d, 3, NULL, &res), 0, "after reset: %s", res.message);
}

MCD_TEST(errors, runlist_over_the_limit_times_out_with_health_words)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, ENG_PLAN_ALL, 0, false);
    xrtdbl_set_runlist_limit(24);
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_TIMEOUT);
    cr_assert_eq(res.failed_layer, 24, "the first run over the limit");
    cr_assert(strstr(res.message, "ERT_CMD_STATE_TIMEOUT"), "%s", res.message);
    cr_assert(strstr(res.message, "txn_op_idx=0x2a ctx_pc=0x1f40"), "%s", res.message);
    xrtdbl_set_runlist_limit(0);   /* the firmware "fixed": K = all runs again */
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, k21_passes_under_the_limit_all_does_not)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, false);
    xrtdbl_set_runlist_limit(24);
    struct eng_run_result res;
    cr_assert_eq(decode(&s, d, 3, NULL, &res), 0, "%s", res.message);
    cr_assert_eq(decode(&s, d, 4, NULL, &res), 0, "%s", res.message);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, abort_at_run_i)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, false);
    xrtdbl_set_abort_at(30);   /* run 30 of the step = layer 30, in the second runlist */
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_ABORT);
    cr_assert_eq(res.failed_layer, 30);
    cr_assert(strstr(res.message, "runlist failed execution"), "%s", res.message);
    xrtdbl_set_abort_at(-1);
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, unexpected_command_state)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, false);
    xrtdbl_set_unexpected_state(1, 1 /* NEW */);   /* the second wait: runlist 2 */
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_NEW, "%s", eng_ert_name(res.state));
    cr_assert(strstr(res.message, "qds_device::wait() unexpected command state"), "%s",
              res.message);
    cr_assert_eq(s.plan.runlists[1].layer_begin, 21);
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, hang_past_the_host_timeout)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 120, false);
    xrtdbl_set_hang(true);
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_TIMEOUT);
    cr_assert(strstr(res.message, "host wait gave up after 120 ms"), "%s", res.message);
    cr_assert_geq(res.elapsed_us, 100000);
    /* reset while it still hangs: the list is abandoned, fresh runs are made */
    char err[256];
    size_t runs_before = count_lines("(kernel#");
    cr_assert_eq(eng_device_reset(d, err, sizeof err), 0, "%s", err);
    cr_assert_gt(count_lines("(kernel#"), runs_before, "the stuck list's runs were replaced");
    xrtdbl_set_hang(false);
    eng_device_seq_truncate(d, s.seq, 0);
    cr_assert_eq(decode(&s, d, 3, NULL, &res), 0, "%s", res.message);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, cancel_ends_a_hang_in_abort)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, false);
    xrtdbl_set_hang(true);
    atomic_bool cancel = true;
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, &cancel, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_ABORT);
    cr_assert(strstr(res.message, "cancelled"), "%s", res.message);
    xrtdbl_set_hang(false);
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, one_run_at_a_time_fallback)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, true);
    size_t from = xrtdbl_log_lines();
    struct eng_run_result res;
    cr_assert_eq(decode(&s, d, 3, NULL, &res), 0, "%s", res.message);
    cr_assert_eq(count_lines("runlist#"), 0, "no runlist without runlists");
    /* each run started, then waited, before the next starts */
    int open_run = -1, started = 0;
    for (size_t i = from; i < xrtdbl_log_lines(); i++) {
        int r;
        const char *l = xrtdbl_log_line(i);
        if (strstr(l, ".start()") && sscanf(l, "run#%d.start()", &r) == 1) {
            cr_assert_eq(open_run, -1);
            open_run = r;
            started++;
        } else if (strstr(l, ".wait2(") && sscanf(l, "run#%d.wait2(", &r) == 1) {
            cr_assert_eq(r, open_run);
            open_run = -1;
        }
    }
    cr_assert_eq(started, 44);
    xrtdbl_set_abort_at(44 + 7);   /* the next step's layer 7 */
    cr_assert_neq(decode(&s, d, 4, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_ABORT);
    cr_assert_eq(res.failed_layer, 7);
    cr_assert(strstr(res.message, "Command failed to complete successfully"), "%s", res.message);
    xrtdbl_set_abort_at(-1);
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, allocation_load_and_open_failures)
{
    eng_pack *p = open_pack("deep");
    const char *k = kset_dir("deep", "ok", NULL);
    struct {
        int what;
        const char *want;
    } cases[] = {{0, "buffer of"}, {1, "ln/final.xclbin"}, {2, "cannot open the NPU"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        xrtdbl_reset();
        if (cases[i].what == 0)
            xrtdbl_set_fail_alloc(20);
        else if (cases[i].what == 1)
            xrtdbl_set_fail_load("ln/final.xclbin");
        else
            xrtdbl_set_fail_device(true);
        eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = k, .accel_node = "/dev/null"});
        struct eng_device *d = NULL;
        char err[512] = "";
        cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), 0, "%s", err);
        cr_assert_neq(eng_device_load_model(d, p, err, sizeof err), 0, "case %zu loaded", i);
        cr_assert(strstr(err, cases[i].want), "case %zu: %s", i, err);
        eng_device_free(d);
    }
    /* no device node: refused before anything is opened */
    xrtdbl_reset();
    eng_xrt_configure(&(struct eng_xrt_config){.accel_node = "/nonexistent/accel0"});
    struct eng_device *d = NULL;
    char err[512];
    cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), -ENODEV);
    cr_assert(strstr(err, "no NPU: /nonexistent/accel0 does not exist"), "%s", err);
    cr_assert_eq(xrtdbl_log_lines(), 0);
    /* a mismatched kernel set: refused before the device is touched */
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kset_dir("deep", "badheads",
                                                                       "--set spec.num_heads=3"),
                                               .accel_node = "/dev/null"});
    cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), 0, "%s", err);
    cr_assert_neq(eng_device_load_model(d, p, err, sizeof err), 0);
    cr_assert(strstr(err, "num_heads is 3 in the kernel set"), "%s", err);
    cr_assert_eq(xrtdbl_log_lines(), 0, "the device was touched: %s", xrtdbl_log());
    eng_device_free(d);
    eng_pack_free(p);
}

/* ---- preflight and probe -------------------------------------------------------- */

MCD_TEST(preflight, checks_in_order)
{
    char err[700];
    const char *tiny = pack_dir("tiny");
    eng_xrt_configure(&(struct eng_xrt_config){.accel_node = "/nonexistent/accel0"});
    cr_assert_neq(eng_xrt_preflight(tiny, err, sizeof err), 0);
    cr_assert(strstr(err, "no NPU kernel set"), "%s", err);
    eng_xrt_configure(&(struct eng_xrt_config){
        .kernels_dir = kset_dir("tiny", "pf-bad", "--set spec.head_dim=32"),
        .accel_node = "/nonexistent/accel0"});
    cr_assert_neq(eng_xrt_preflight(tiny, err, sizeof err), 0);
    cr_assert(strstr(err, "head_dim is 32"), "%s", err);
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kset_dir("tiny", "pf-ok", NULL),
                                               .accel_node = "/nonexistent/accel0"});
    cr_assert_neq(eng_xrt_preflight(tiny, err, sizeof err), 0);
    if (eng_xrt_built())
        cr_assert(strstr(err, "no NPU: /nonexistent/accel0"), "%s", err);
    else
        cr_assert(strstr(err, "this build has no XRT device"), "%s", err);
    /* a context beyond the kernel set's default needs --ctx-size */
    eng_xrt_configure(&(struct eng_xrt_config){
        .kernels_dir = kset_dir("tiny", "pf-ctx", "--max-ctx 1024"),
        .accel_node = "/nonexistent/accel0"});
    cr_assert_neq(eng_xrt_preflight(tiny, err, sizeof err), 0);
    cr_assert(strstr(err, "pass --ctx-size 1024"), "%s", err);
}

MCD_TEST(probe, finds_the_ks_that_work_and_saves_the_fastest)
{
    xrtdbl_reset();
    eng_pack *p = open_pack("deep");
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kset_dir("deep", "ok", NULL),
                                               .accel_node = "/dev/null"});
    struct eng_device *d = NULL;
    char err[512], state[4096], path[4200];
    cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), 0, "%s", err);
    xrtdbl_set_runlist_limit(24);
    snprintf(state, sizeof state, "%s/probe-state-%d", work(), (int)getpid());
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    int rc = eng_xrt_probe_run(d, pack_dir("deep"), state, 3, out, err, sizeof err);
    fclose(out);
    cr_assert_eq(rc, 0, "%s\n%s", err, buf);
    cr_assert(strstr(buf, "| all (42) | 2 | ERT_CMD_STATE_TIMEOUT at runlist 0 (layer 24)"), "%s",
              buf);
    cr_assert(strstr(buf, "| 24 | 3 | COMPLETED | 3/3 |"), "%s", buf);
    cr_assert(strstr(buf, "| 1 | 43 | COMPLETED | 3/3 |"), "%s", buf);
    cr_assert(strstr(buf, "saved K = "), "%s", buf);
    int k = 0;
    cr_assert_eq(eng_kstate_path(state, path, sizeof path), 0);
    cr_assert_eq(eng_kstate_load(path, eng_pack_get_info(p)->dir, "xrt", &k, err, sizeof err), 1,
                 "%s", err);
    cr_assert(k >= 1 && k <= 24, "saved K %d", k);
    free(buf);
    eng_device_free(d);
    eng_pack_free(p);
}
