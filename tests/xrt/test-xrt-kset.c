/* The xrt device without an NPU, host side: the kernel-set reader (a set that
 * matches the pack, mismatches named, missing files, what it cannot drive) and the
 * layouts the kernels stream (weight pools on the tiny pack by the band law,
 * position records, the attnpos instruction patch).
 *
 * Packs come from minicpmd-pack gen (MINICPMD_PACK) and stand-in kernel sets from
 * tests/xrt/mkkset.py (MINICPMD_MKKSET), under MINICPMD_TEST_WORK (tests/xrt/xrt-fx.h). */
#include "engine/device/device.h"
#include "engine/worker/plan.h"
#include "engine/model/q4nx.h"
#include "engine/model/safetensors.h"
#include "engine/device/xrt/kset.h"
#include "engine/device/xrt/npu-layout.h"
#include "engine/device/xrt/xrt-dev.h"
#include "tests/check.h"
#include "xrt-double.h"
#include "xrt-fx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
        {"--set globals.ptab.scale=1.0",
         "globals.ptab.scale is a key minicpmd does not implement"},
        {"--set globals.ptab.long_inv_freq='[1.0]'",
         "globals.ptab.long_inv_freq is a key minicpmd does not implement"},
        {"--set globals.ptab.switch_row=4096",
         "globals.ptab.switch_row is a key minicpmd does not implement"},
        {"--set kernels.dx.prefetch=1", "kernels.dx.prefetch is a key minicpmd does not"},
        {"--set spec.qk_norm=true", "spec.qk_norm is set"},
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
