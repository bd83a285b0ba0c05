/* Opening a model: map the pack's weights, bind every tensor the forward pass
 * needs after checking its dtype and shape against config.json, and work out the
 * two things a pack may carry that the model does not have:
 *
 *   - replicated KV heads (the XDNA packs repeat MiniCPM5's 2 KV heads to 8 for
 *     the NPU kernels): found by comparing the stored rows of every k_proj and
 *     v_proj head; each distinct head is computed and cached once;
 *   - the all-ones q_norm/k_norm "shim" of the relabelled qwen3 packs: RMSNorm
 *     with unit weights is not an identity (it rescales q and k to unit RMS), so
 *     on MiniCPM5 it changes the output; ignored with a warning unless forced.
 *
 * Tensors point into the read-only mappings, or (--weights copy) into the copy
 * that place.c makes of them after binding. */
#include "engine/model/model-impl.h"

#include "engine/err.h"
#include "util/fs.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct eng_mat eng__mat_rows(const struct eng_mat *m, int row0, int n)
{
    struct eng_mat v = *m;
    v.rows = n;
    if (m->fmt == ENG_W_Q4_1) {
        size_t ncol = (size_t)(m->cols + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS;
        v.data = m->data + (size_t)(row0 / ENG_Q4_1_ROWS) * ncol * ENG_Q4_1_CHUNK_BYTES;
    } else {
        v.data = m->data + (size_t)row0 * (size_t)m->cols * 2;
    }
    return v;
}

static size_t mat_bytes(const struct eng_mat *m)
{
    if (m->fmt == ENG_W_Q4_1)
        return (size_t)(m->rows / ENG_Q4_1_ROWS) *
               (size_t)((m->cols + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS) * ENG_Q4_1_CHUNK_BYTES;
    return (size_t)m->rows * (size_t)m->cols * 2;
}

void eng__model_say(const eng_model *m, enum eng_log_level lv, const char *fmt, ...)
{
    if (!m->opts.log)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    m->opts.log(m->opts.log_ctx, lv, msg);
}

/* ---- the weight files ------------------------------------------------------- */

static int open_one(eng_model *m, const char *path, char *err, size_t errlen)
{
    if (m->n_st == ENG_MAX_SHARDS)
        return eng__fail(err, errlen, -EINVAL, "%s: more than %d weight shards", path,
                         ENG_MAX_SHARDS);
    return eng_st_open(path, &m->st[m->n_st++], err, errlen);
}

/* model.safetensors.index.json: {"weight_map": {tensor: shard file}}; every shard
 * it names is opened once. */
static int open_sharded(eng_model *m, const char *dir, char *err, size_t errlen)
{
    char path[PATH_MAX];
    json_error_t je;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    const char *why;
    int frc;
    FILE *fp = ut_fopen_regular(path, 0, &frc, &why);
    if (!fp)
        return eng__fail(err, errlen, frc, "%s: %s", path, why);
    json_t *idx = json_loadf(fp, 0, &je);
    fclose(fp);
    if (!idx)
        return eng__fail(err, errlen, -EINVAL, "%s: line %d: %s", path, je.line, je.text);
    json_t *map = json_object_get(idx, "weight_map");
    int rc = 0;
    if (!json_is_object(map)) {
        rc = eng__fail(err, errlen, -EINVAL, "%s: no \"weight_map\" object", path);
        goto out;
    }
    const char *shards[ENG_MAX_SHARDS];
    int n = 0;
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v) {
        const char *f = json_string_value(v);
        if (!f || strchr(f, '/') || f[0] == '.') {
            rc = eng__fail(err, errlen, -EINVAL, "%s: weight_map[\"%s\"] is not a file name",
                           path, name);
            goto out;
        }
        int seen = 0;
        for (int i = 0; i < n && !seen; i++)
            seen = strcmp(shards[i], f) == 0;
        if (seen)
            continue;
        if (n == ENG_MAX_SHARDS) {
            rc = eng__fail(err, errlen, -EINVAL, "%s: more than %d shards", path, ENG_MAX_SHARDS);
            goto out;
        }
        shards[n++] = f;
        char sp[PATH_MAX];
        snprintf(sp, sizeof sp, "%s/%s", dir, f);
        if ((rc = open_one(m, sp, err, errlen)))
            goto out;
    }
out:
    json_decref(idx);
    return rc;
}

static const struct eng_st_tensor *find(const eng_model *m, const char *name)
{
    for (int i = 0; i < m->n_st; i++) {
        const struct eng_st_tensor *t = eng_st_find(m->st[i], name);
        if (t)
            return t;
    }
    return NULL;
}

static const char *file_of(const eng_model *m, const struct eng_st_tensor *t)
{
    for (int i = 0; i < m->n_st; i++)
        if (eng_st_find(m->st[i], t->name) == t)
            return eng_st_path(m->st[i]);
    return "weights";
}

/* A BF16 vector [n] or matrix [rows, cols] (rows == 0: a vector). */
static int bind_bf16(const eng_model *m, const char *name, int64_t rows, int64_t cols,
                     const uint16_t **out, char *err, size_t errlen)
{
    const struct eng_st_tensor *t = find(m, name);
    if (!t)
        return eng__fail(err, errlen, -ENOENT, "%s: missing tensor '%s'",
                         eng_st_path(m->st[0]), name);
    int64_t shape[2] = {rows, cols};
    int nd = rows ? 2 : 1;
    const struct eng_st_tensor *got;
    for (int i = 0; i < m->n_st; i++) {
        if (eng_st_find(m->st[i], name) != t)
            continue;
        int rc = eng_st_get(m->st[i], name, ENG_ST_BF16, nd, rows ? shape : shape + 1, &got,
                            err, errlen);
        if (rc)
            return rc;
    }
    if ((uintptr_t)t->data % 2)
        return eng__fail(err, errlen, -EINVAL, "%s: tensor '%s' is not 2-byte aligned",
                         file_of(m, t), name);
    *out = t->data;
    return 0;
}

/* A matmul weight [rows, cols]: Q4_1 chunks in a Q4NX pack, BF16 otherwise. */
static int bind_mat(const eng_model *m, const char *name, int rows, int cols,
                    struct eng_mat *out, char *err, size_t errlen)
{
    const struct eng_st_tensor *t = find(m, name);
    if (!t)
        return eng__fail(err, errlen, -ENOENT, "%s: missing tensor '%s'",
                         eng_st_path(m->st[0]), name);
    if (t->dtype == ENG_ST_I8) {
        if (rows % ENG_Q4_1_ROWS)
            return eng__fail(err, errlen, -EINVAL,
                             "%s: tensor '%s': %d rows is not a multiple of 32 (Q4_1 chunks)",
                             file_of(m, t), name, rows);
        int64_t chunks = (int64_t)(rows / ENG_Q4_1_ROWS) * ((cols + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS);
        if (t->n_dims != 2 || t->shape[0] != chunks || t->shape[1] != ENG_Q4_1_CHUNK_BYTES) {
            char sh[64];
            return eng__fail(err, errlen, -EINVAL,
                             "%s: tensor '%s': expected I8 [%lld, 5120] (Q4_1 chunks of [%d, %d]), got %s",
                             file_of(m, t), name, (long long)chunks, rows, cols,
                             eng_st_shape_str(t, sh, sizeof sh));
        }
        *out = (struct eng_mat){ENG_W_Q4_1, t->data, rows, cols};
        return 0;
    }
    const uint16_t *w;
    int rc = bind_bf16(m, name, rows, cols, &w, err, errlen);
    if (rc)
        return rc;
    *out = (struct eng_mat){ENG_W_BF16, (const uint8_t *)w, rows, cols};
    return 0;
}

/* ---- pack quirks -------------------------------------------------------------- */

static int all_ones(const uint16_t *w, int n)
{
    for (int i = 0; i < n; i++)
        if (w[i] != 0x3F80) /* 1.0 in BF16 */
            return 0;
    return 1;
}

/* q_norm/k_norm: present in every layer or in none; the all-ones shim is dropped
 * unless forced. */
static int bind_qk_norm(eng_model *m, char *err, size_t errlen)
{
    const struct eng_hparams *hp = &m->info.hp;
    int present = 0, ones = 1;
    for (int l = 0; l < hp->n_layers; l++) {
        char nq[96], nk[96];
        snprintf(nq, sizeof nq, "model.layers.%d.self_attn.q_norm.weight", l);
        snprintf(nk, sizeof nk, "model.layers.%d.self_attn.k_norm.weight", l);
        int has = find(m, nq) != NULL || find(m, nk) != NULL;
        if (l > 0 && has != present)
            return eng__fail(err, errlen, -EINVAL,
                             "%s: q_norm/k_norm in some layers but not in layer %d",
                             eng_st_path(m->st[0]), l);
        present = has;
        if (!has)
            continue;
        struct eng_layer *L = &m->layers[l];
        int rc;
        if ((rc = bind_bf16(m, nq, 0, hp->head_dim, &L->q_norm, err, errlen)) ||
            (rc = bind_bf16(m, nk, 0, hp->head_dim, &L->k_norm, err, errlen)))
            return rc;
        ones = ones && all_ones(L->q_norm, hp->head_dim) && all_ones(L->k_norm, hp->head_dim);
    }
    int use = present && m->opts.qk_norm != ENG_QK_NORM_OFF;
    if (present && ones && m->opts.qk_norm == ENG_QK_NORM_AUTO) {
        eng__model_say(m, ENG_LOG_WARN, "%s: q_norm/k_norm are all ones in every layer: the synthetic shim of a "
                 "relabelled pack, not part of the model; ignored (set qk-norm=on to apply them)",
              eng_st_path(m->st[0]));
        use = 0;
    }
    if (!use)
        for (int l = 0; l < hp->n_layers; l++)
            m->layers[l].q_norm = m->layers[l].k_norm = NULL;
    m->info.qk_norm = use;
    return 0;
}

static int heads_equal(const struct eng_mat *w, int hd, int a, int b)
{
    struct eng_mat x = eng__mat_rows(w, a * hd, hd), y = eng__mat_rows(w, b * hd, hd);
    return memcmp(x.data, y.data, mat_bytes(&x)) == 0;
}

/* The largest r such that in every layer, stored KV head j of k_proj and v_proj
 * equals head j - j % r (HF repeat_interleave, docs/model-minicpm5.md §3.4) and the
 * Q heads still split evenly over the n_kv / r distinct heads. */
static int kv_replication(const eng_model *m, const struct eng_mat *wk, const struct eng_mat *wv)
{
    const struct eng_hparams *hp = &m->info.hp;
    int n = hp->n_kv_heads, hd = hp->head_dim;
    if (m->opts.no_kv_dedup || n < 2 || (wk[0].fmt == ENG_W_Q4_1 && hd % ENG_Q4_1_ROWS))
        return 1;
    for (int r = n; r > 1; r--) {
        if (n % r || hp->n_heads % (n / r))
            continue;
        int ok = 1;
        for (int l = 0; l < hp->n_layers && ok; l++)
            for (int j = 0; j < n && ok; j++)
                if (j % r)
                    ok = heads_equal(&wk[l], hd, j, j - j % r) &&
                         heads_equal(&wv[l], hd, j, j - j % r);
        if (ok)
            return r;
    }
    return 1;
}

/* ---- open --------------------------------------------------------------------- */

static int bind_all(eng_model *m, char *err, size_t errlen)
{
    const struct eng_hparams *hp = &m->info.hp;
    int E = hp->n_embd, HD = hp->head_dim, Q = hp->n_heads * HD, KV = hp->n_kv_heads * HD;
    int rc;
    struct eng_mat *wk = calloc((size_t)hp->n_layers, sizeof *wk);
    struct eng_mat *wv = calloc((size_t)hp->n_layers, sizeof *wv);
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!wk || !wv || !m->layers) {
        rc = eng__fail(err, errlen, -ENOMEM, "out of memory binding %d layers", hp->n_layers);
        goto out;
    }
    if (hp->head_dim > 512 || hp->head_dim % 16) {
        rc = eng__fail(err, errlen, -EINVAL, "config.json: head_dim %d unsupported (a multiple "
                       "of 16 up to 512)", hp->head_dim);
        goto out;
    }
    if (hp->n_kv_heads > ENG_MAX_KV_HEADS || hp->n_heads % hp->n_kv_heads) {
        rc = eng__fail(err, errlen, -EINVAL, "config.json: %d KV heads for %d heads unsupported",
                       hp->n_kv_heads, hp->n_heads);
        goto out;
    }
    if ((rc = bind_bf16(m, "model.embed_tokens.weight", hp->n_vocab, E, &m->embed, err, errlen)) ||
        (rc = bind_bf16(m, "model.norm.weight", 0, E, &m->out_norm, err, errlen)))
        goto out;
    if (find(m, "lm_head.weight")) {
        if ((rc = bind_mat(m, "lm_head.weight", hp->n_vocab, E, &m->lm_head, err, errlen)))
            goto out;
    } else if (hp->tie_embeddings) {
        m->lm_head = (struct eng_mat){ENG_W_BF16, (const uint8_t *)m->embed, hp->n_vocab, E};
    } else {
        rc = eng__fail(err, errlen, -ENOENT,
                       "%s: missing tensor 'lm_head.weight' (tie_word_embeddings is false)",
                       eng_st_path(m->st[0]));
        goto out;
    }
    for (int l = 0; l < hp->n_layers; l++) {
        struct eng_layer *L = &m->layers[l];
        char nm[128];
#define NAME(s) (snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, (s)), nm)
        if ((rc = bind_bf16(m, NAME("input_layernorm"), 0, E, &L->attn_norm, err, errlen)) ||
            (rc = bind_bf16(m, NAME("post_attention_layernorm"), 0, E, &L->ffn_norm, err, errlen)) ||
            (rc = bind_mat(m, NAME("self_attn.q_proj"), Q, E, &L->wq, err, errlen)) ||
            (rc = bind_mat(m, NAME("self_attn.k_proj"), KV, E, &wk[l], err, errlen)) ||
            (rc = bind_mat(m, NAME("self_attn.v_proj"), KV, E, &wv[l], err, errlen)) ||
            (rc = bind_mat(m, NAME("self_attn.o_proj"), E, Q, &L->wo, err, errlen)) ||
            (rc = bind_mat(m, NAME("mlp.gate_proj"), hp->n_ff, E, &L->wgate, err, errlen)) ||
            (rc = bind_mat(m, NAME("mlp.up_proj"), hp->n_ff, E, &L->wup, err, errlen)) ||
            (rc = bind_mat(m, NAME("mlp.down_proj"), E, hp->n_ff, &L->wdown, err, errlen)))
            goto out;
#undef NAME
    }
    if ((rc = bind_qk_norm(m, err, errlen)))
        goto out;

    int r = kv_replication(m, wk, wv);
    m->info.kv_replication = r;
    m->info.n_kv_real = hp->n_kv_heads / r;
    if (r > 1)
        eng__model_say(m, ENG_LOG_WARN, "KV heads replicated %dx in the pack: computing and caching %d distinct heads",
              r, m->info.n_kv_real);
    for (int l = 0; l < hp->n_layers; l++)
        for (int u = 0; u < m->info.n_kv_real; u++) {
            m->layers[l].wk[u] = eng__mat_rows(&wk[l], u * r * HD, HD);
            m->layers[l].wv[u] = eng__mat_rows(&wv[l], u * r * HD, HD);
        }
    rc = 0;
out:
    free(wk);
    free(wv);
    return rc;
}

/* What one decode step reads and multiplies: every matmul weight of the real
 * heads, the norms, one embedding row and the lm_head. */
static void fill_costs(eng_model *m)
{
    struct eng_model_info *in = &m->info;
    const struct eng_hparams *hp = &in->hp;
    int64_t bytes = (int64_t)hp->n_embd * 2 * (1 + 1) + (int64_t)mat_bytes(&m->lm_head);
    int64_t macs = (int64_t)m->lm_head.rows * m->lm_head.cols;
    for (int l = 0; l < hp->n_layers; l++) {
        const struct eng_layer *L = &m->layers[l];
        const struct eng_mat *mats[] = {&L->wq, &L->wo, &L->wgate, &L->wup, &L->wdown};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
            bytes += (int64_t)mat_bytes(mats[i]);
            macs += (int64_t)mats[i]->rows * mats[i]->cols;
        }
        for (int u = 0; u < in->n_kv_real; u++) {
            bytes += 2 * (int64_t)mat_bytes(&L->wk[u]);
            macs += 2 * (int64_t)L->wk[u].rows * L->wk[u].cols;
        }
        bytes += (int64_t)hp->n_embd * 2 * 2;
    }
    in->weight_bytes_per_token = bytes;
    in->macs_per_token = macs;
    in->head_macs = (int64_t)m->lm_head.rows * m->lm_head.cols;
    in->kv_bytes_per_token = (int64_t)hp->n_layers * 2 * in->n_kv_real * hp->head_dim * 2;
}

int eng_model_open(const eng_pack *pack, const struct eng_model_opts *o, eng_model **out,
                   char *err, size_t errlen)
{
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    eng_model *m = calloc(1, sizeof *m);
    int rc;
    *out = NULL;
    if (!m)
        return eng__fail(err, errlen, -ENOMEM, "out of memory");
    m->pack = pack;
    if (o)
        m->opts = *o;
    m->info.hp = pi->hp;

    char path[PATH_MAX];
    switch (pi->format) {
    case ENG_WEIGHTS_Q4NX:
        snprintf(path, sizeof path, "%s/model.q4nx", pi->dir);
        rc = open_one(m, path, err, errlen);
        break;
    case ENG_WEIGHTS_SAFETENSORS:
        snprintf(path, sizeof path, "%s/model.safetensors", pi->dir);
        rc = open_one(m, path, err, errlen);
        break;
    default:
        rc = open_sharded(m, pi->dir, err, errlen);
        break;
    }
    if (rc || (rc = bind_all(m, err, errlen)))
        goto fail;
    if ((rc = eng_pool_new(m->opts.n_threads, &m->pool))) {
        eng__fail(err, errlen, rc, "cannot start %d compute threads: %s", m->opts.n_threads,
                  strerror(-rc));
        goto fail;
    }
    m->info.n_threads = eng_pool_size(m->pool);
    fill_costs(m);
    m->info.weights_huge_bytes = -1;
    eng__model_place_weights(m);
    int q8 = m->opts.act == ENG_ACT_Q8;
    enum eng_isa isa = eng_kernels_isa();
    int vnni = q8 && isa == ENG_ISA_AVX512 && eng_isa_has_vnni();
    snprintf(m->isa, sizeof m->isa, "%s%s%s", eng_isa_name(isa),
             vnni && eng_isa_has_vbmi() ? "-vnni-vbmi" : vnni ? "-vnni" : "",
             q8 ? " int8-act" : " f32-act");
    m->info.isa = m->isa;
    eng__model_choose_kernel(m);
    *out = m;
    return 0;
fail:
    eng_model_free(m);
    return rc;
}

void eng_model_free(eng_model *m)
{
    if (!m)
        return;
    eng_pool_free(m->pool);
    eng__model_unplace_weights(m);
    for (int i = 0; i < m->n_st; i++)
        eng_st_free(m->st[i]);
    free(m->layers);
    free(m);
}

const struct eng_model_info *eng_model_get_info(const eng_model *m) { return &m->info; }
