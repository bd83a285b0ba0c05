/* kset — finding, reading and checking an open NPU kernel set (see kset.h).
 *
 * The manifest's shape is recipes/manifest.py + recipes/dense.py of
 * Atomic-Germ/OpenFlowLM-Next (docs/npu-kernels.md §1.3, §2): top-level
 * manifest_version, family, spec, spec_hash, max_ctx_default, hf_config_check,
 * hf_config_defaults, layout {hidden, vocab, real_vocab, chunk_bytes, pool_bytes,
 * lmhead_pool_bytes, kv_row, ptab_row, rotary_dim, …}, layers [type per layer],
 * contexts {name: xclbin}, kernels {name: {context, insts, patch, window}},
 * layer_types {type: {buffers {consts, act, state {kind, row}}, program [run],
 * pack {pool [ops], consts [ops]}}}, tail [run ln, run lm], globals {name: bytes |
 * {per_row, inv_freq, window}}, pack {pool_bytes, chunk_bytes, lm_head {pool_bytes,
 * ops}, embed {tensor, dim}, norm {tensor, bytes}}. */
#include "engine/device/xrt/kset.h"
#include "engine/err.h"
#include "util/fs.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The families whose decoder layer the dense recipe's dx design computes and
 * that MiniCPM5's packs are relabelled as (docs/npu-kernels.md §1.2). */
static const char *const dense_families[] = {"llama3", "qwen3", NULL};

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int eng_kset_locate(const char *explicit_dir, const char *pack_dir, char *out, size_t outlen,
                    char *err, size_t errlen)
{
    char m[4096];
    if (explicit_dir && *explicit_dir) {
        snprintf(out, outlen, "%s", explicit_dir);
        snprintf(m, sizeof m, "%s/%s", explicit_dir, ENG_KSET_MANIFEST);
        if (access(m, R_OK) != 0)
            return eng__fail(err, errlen, -ENOENT,
                             "--npu-kernels %s: %s", explicit_dir,
                             is_dir(explicit_dir) ? "no manifest.json in it (not an open kernel "
                                                    "set export)"
                                                  : "no such directory");
        return 0;
    }
    snprintf(out, outlen, "%s/%s", pack_dir, ENG_KSET_SUBDIR);
    snprintf(m, sizeof m, "%s/%s", out, ENG_KSET_MANIFEST);
    if (access(m, R_OK) != 0)
        return eng__fail(err, errlen, -ENOENT,
                         "no NPU kernel set for this model: %s does not exist (build one, see "
                         "the README's NPU section, or pass --npu-kernels DIR)", m);
    return 0;
}

/* ---- reading ------------------------------------------------------------------ */

struct rd {
    const char *file;
    char *err;
    size_t errlen;
};

static int bad(struct rd *r, const char *key, const char *what)
{
    return eng__fail(r->err, r->errlen, -EINVAL, "%s: %s %s", r->file, key, what);
}

/* Refuse a key the driver does not implement rather than ignore it: a newer export
 * that adds one (a RoPE `scale`, `long_inv_freq`, a `switch_row`) means bytes this
 * driver would build wrong. */
static int only_keys(struct rd *r, json_t *o, const char *where, const char *const *known)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++)
            ok = strcmp(key, known[i]) == 0;
        if (!ok) {
            char k[160];
            snprintf(k, sizeof k, "%.60s.%.60s", where, key);
            return bad(r, k, "is a key minicpmd does not implement (refused, not ignored: a "
                             "newer kernel set?)");
        }
    }
    return 0;
}

static int get_u64(struct rd *r, json_t *o, const char *obj, const char *key, uint64_t *out,
                   bool required)
{
    json_t *v = json_object_get(o, key);
    if (!v) {
        *out = 0;
        if (!required)
            return 0;
        char k[96];
        snprintf(k, sizeof k, "%s.%s", obj, key);
        return bad(r, k, "is missing");
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        char k[96];
        snprintf(k, sizeof k, "%s.%s", obj, key);
        return bad(r, k, "is not a non-negative integer");
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int get_int(struct rd *r, json_t *o, const char *obj, const char *key, int *out)
{
    uint64_t v;
    int rc = get_u64(r, o, obj, key, &v, true);
    if (rc)
        return rc;
    if (v > 1u << 30) {
        char k[96];
        snprintf(k, sizeof k, "%s.%s", obj, key);
        return bad(r, k, "is out of range");
    }
    *out = (int)v;
    return 0;
}

static int get_str(struct rd *r, json_t *o, const char *obj, const char *key, char *out,
                   size_t len)
{
    json_t *v = json_object_get(o, key);
    char k[96];
    snprintf(k, sizeof k, "%s.%s", obj, key);
    if (!json_is_string(v))
        return bad(r, k, v ? "is not a string" : "is missing");
    if (strlen(json_string_value(v)) >= len)
        return bad(r, k, "is too long");
    snprintf(out, len, "%s", json_string_value(v));
    return 0;
}

static int dup_str(struct rd *r, json_t *o, const char *obj, const char *key, char **out)
{
    char buf[1024];
    int rc = get_str(r, o, obj, key, buf, sizeof buf);
    if (rc)
        return rc;
    if (strstr(buf, "..") || buf[0] == '/')
        return bad(r, key, "must be a path inside the kernel set");
    if (!(*out = strdup(buf)))
        return eng__fail(r->err, r->errlen, -ENOMEM, "out of memory");
    return 0;
}

static int read_ops(struct rd *r, json_t *arr, const char *where, struct eng_kset_op **out,
                    int *n)
{
    *out = NULL;
    *n = 0;
    if (!arr)
        return 0;
    if (!json_is_array(arr))
        return bad(r, where, "is not an array");
    size_t cnt = json_array_size(arr);
    if (!cnt)
        return 0;
    if (!(*out = calloc(cnt, sizeof **out)))
        return eng__fail(r->err, r->errlen, -ENOMEM, "out of memory");
    for (size_t i = 0; i < cnt; i++) {
        json_t *o = json_array_get(arr, i);
        struct eng_kset_op *op = &(*out)[i];
        char w[96], kind[32];
        int rc;
        snprintf(w, sizeof w, "%s[%zu]", where, i);
        static const char *const op_keys[] = {"op", "tensor", "dst", "nch", "in_dim",
                                              "chunk0", "cap", "split", NULL};
        if (!json_is_object(o))
            return bad(r, w, "is not an object");
        if ((rc = only_keys(r, o, w, op_keys)))
            return rc;
        if ((rc = get_str(r, o, w, "op", kind, sizeof kind)) ||
            (rc = get_str(r, o, w, "tensor", op->tensor, sizeof op->tensor)) ||
            (rc = get_u64(r, o, w, "dst", &op->dst, true)))
            return rc;
        if (strcmp(kind, "std_perm") == 0) {
            op->kind = ENG_KSET_OP_STD_PERM;
            if ((rc = get_u64(r, o, w, "nch", &op->nch, true)) ||
                (rc = get_u64(r, o, w, "in_dim", &op->in_dim, true)) ||
                (rc = get_u64(r, o, w, "chunk0", &op->chunk0, false)))
                return rc;
            if (json_object_get(o, "split"))
                return bad(r, w, "uses a q8 split, which minicpmd does not pack");
            if (!op->nch || !op->in_dim || op->in_dim % 256)
                return bad(r, w, "needs nch > 0 and in_dim a multiple of 256");
        } else if (strcmp(kind, "put") == 0) {
            op->kind = ENG_KSET_OP_PUT;
            if ((rc = get_u64(r, o, w, "cap", &op->cap, true)))
                return rc;
        } else {
            char m[128];
            snprintf(m, sizeof m, "is a '%s' op; minicpmd packs std_perm and put only (dense "
                                  "kernel sets)", kind);
            return bad(r, w, m);
        }
        (*n)++;
    }
    return 0;
}

static int read_step(struct rd *r, const struct eng_kset *ks, json_t *o, const char *where,
                     struct eng_kset_step *st)
{
    char op[16], kn[ENG_KSET_NAME];
    int rc;
    static const char *const step_keys[] = {"op", "kernel", "args", NULL};
    if (!json_is_object(o))
        return bad(r, where, "is not an object");
    if ((rc = only_keys(r, o, where, step_keys)) ||
        (rc = get_str(r, o, where, "op", op, sizeof op)))
        return rc;
    if (strcmp(op, "run") != 0)
        return bad(r, where, "is not a 'run' step (minicpmd drives dense kernel sets)");
    if ((rc = get_str(r, o, where, "kernel", kn, sizeof kn)))
        return rc;
    if ((st->kernel = eng_kset_kernel_index(ks, kn)) < 0)
        return bad(r, where, "names a kernel the manifest does not define");
    json_t *args = json_object_get(o, "args");
    if (!json_is_array(args))
        return bad(r, where, "has no args array");
    if (json_array_size(args) > ENG_KSET_MAX_ARGS)
        return bad(r, where, "has more than 8 buffer arguments (the firmware aborts such runs)");
    st->n_args = (int)json_array_size(args);
    for (int i = 0; i < st->n_args; i++) {
        json_t *a = json_array_get(args, (size_t)i);
        if (!json_is_string(a) || strlen(json_string_value(a)) >= ENG_KSET_NAME)
            return bad(r, where, "has an argument that is not a buffer name");
        snprintf(st->args[i], ENG_KSET_NAME, "%s", json_string_value(a));
    }
    return 0;
}

static int read_spec(struct rd *r, json_t *root, struct eng_kset *ks)
{
    json_t *spec = json_object_get(root, "spec");
    int rc;
    if (!json_is_object(spec))
        return bad(r, "spec", "is missing");
    if ((rc = get_int(r, spec, "spec", "num_layers", &ks->n_layers)) ||
        (rc = get_int(r, spec, "spec", "num_heads", &ks->n_heads)) ||
        (rc = get_int(r, spec, "spec", "num_kv_heads", &ks->n_kv_heads)) ||
        (rc = get_int(r, spec, "spec", "head_dim", &ks->head_dim)) ||
        (rc = get_int(r, spec, "spec", "hidden", &ks->hidden)) ||
        (rc = get_int(r, spec, "spec", "intermediate", &ks->intermediate)) ||
        (rc = get_int(r, spec, "spec", "vocab", &ks->vocab)) ||
        (rc = get_str(r, spec, "spec", "quant", ks->quant, sizeof ks->quant)))
        return rc;
    /* What the dense dx design can be specialised for but minicpmd does not drive. */
    static const char *const off[] = {"qk_norm", "attn_gate", "rope_scaling", "sandwich", NULL};
    for (int i = 0; off[i]; i++) {
        json_t *v = json_object_get(spec, off[i]);
        if (v && !json_is_null(v) && !json_is_false(v)) {
            char k[64];
            snprintf(k, sizeof k, "spec.%s", off[i]);
            return bad(r, k, "is set; minicpmd implements the plain llama layer only");
        }
    }
    return 0;
}

static int read_layout(struct rd *r, json_t *root, struct eng_kset *ks)
{
    json_t *l = json_object_get(root, "layout");
    int rc;
    if (!json_is_object(l))
        return bad(r, "layout", "is missing");
    if ((rc = get_u64(r, l, "layout", "vocab", &ks->layout_vocab, true)) ||
        (rc = get_u64(r, l, "layout", "real_vocab", &ks->real_vocab, true)) ||
        (rc = get_u64(r, l, "layout", "chunk_bytes", &ks->chunk_bytes, true)) ||
        (rc = get_u64(r, l, "layout", "pool_bytes", &ks->pool_bytes, true)) ||
        (rc = get_u64(r, l, "layout", "lmhead_pool_bytes", &ks->lmhead_pool_bytes, true)) ||
        (rc = get_u64(r, l, "layout", "kv_row", &ks->kv_row, true)) ||
        (rc = get_u64(r, l, "layout", "ptab_row", &ks->ptab_row, true)) ||
        (rc = get_u64(r, l, "layout", "rotary_dim", &ks->rotary_dim, true)))
        return rc;
    if (ks->chunk_bytes != 5120)
        return bad(r, "layout.chunk_bytes", "is not 5120 (a q4_1 chunk)");
    if (!ks->kv_row || !ks->ptab_row || ks->ptab_row < 512 + 8 * (ks->rotary_dim / 2))
        return bad(r, "layout", "has a KV row or position record that cannot hold a position");
    return 0;
}

static int read_contexts_kernels(struct rd *r, json_t *root, struct eng_kset *ks)
{
    json_t *ctxs = json_object_get(root, "contexts"), *kerns = json_object_get(root, "kernels");
    const char *key;
    json_t *v;
    int rc;
    if (!json_is_object(ctxs) || !json_object_size(ctxs))
        return bad(r, "contexts", "is missing or empty");
    if (!json_is_object(kerns) || !json_object_size(kerns))
        return bad(r, "kernels", "is missing or empty");
    ks->contexts = calloc(json_object_size(ctxs), sizeof *ks->contexts);
    ks->kernels = calloc(json_object_size(kerns), sizeof *ks->kernels);
    if (!ks->contexts || !ks->kernels)
        return eng__fail(r->err, r->errlen, -ENOMEM, "out of memory");
    json_object_foreach(ctxs, key, v) {
        struct eng_kset_context *c = &ks->contexts[ks->n_contexts];
        if (!json_is_string(v) || strlen(key) >= ENG_KSET_NAME)
            return bad(r, "contexts", "maps a name to something that is not an xclbin path");
        snprintf(c->name, sizeof c->name, "%s", key);
        ks->n_contexts++;       /* counted first: eng_kset_free frees what it holds */
        json_t *wrap = json_pack("{s:O}", "x", v);
        rc = wrap ? dup_str(r, wrap, "contexts", "x", &c->xclbin) : -ENOMEM;
        json_decref(wrap);
        if (rc)
            return rc;
    }
    json_object_foreach(kerns, key, v) {
        struct eng_kset_kernel *k = &ks->kernels[ks->n_kernels];
        char w[96], ctx[ENG_KSET_NAME], patch[32] = "";
        snprintf(w, sizeof w, "kernels.%s", key);
        if (!json_is_object(v) || strlen(key) >= ENG_KSET_NAME)
            return bad(r, w, "is not an object");
        snprintf(k->name, sizeof k->name, "%s", key);
        ks->n_kernels++;
        static const char *const kernel_keys[] = {"context", "insts", "patch", "window", "rb",
                                                  "build", NULL};
        if ((rc = only_keys(r, v, w, kernel_keys)))
            return rc;
        if ((rc = get_str(r, v, w, "context", ctx, sizeof ctx)) ||
            (rc = dup_str(r, v, w, "insts", &k->insts)))
            return rc;
        k->context = -1;
        for (int i = 0; i < ks->n_contexts; i++)
            if (strcmp(ks->contexts[i].name, ctx) == 0)
                k->context = i;
        if (k->context < 0)
            return bad(r, w, "names a context the manifest does not define");
        if (json_object_get(v, "patch") && !json_is_null(json_object_get(v, "patch")) &&
            (rc = get_str(r, v, w, "patch", patch, sizeof patch)))
            return rc;
        if (patch[0] && strcmp(patch, "attnpos") != 0)
            return bad(r, w, "has a patch other than attnpos (a MoE kernel set?)");
        k->attnpos = patch[0] != '\0';
        if ((rc = get_u64(r, v, w, "window", &k->window, false)) ||
            (rc = get_u64(r, v, w, "rb", &k->rb, false)))
            return rc;
        if (!k->rb)
            k->rb = 1;
    }
    return 0;
}

static int read_globals(struct rd *r, json_t *root, struct eng_kset *ks)
{
    json_t *g = json_object_get(root, "globals");
    const char *key;
    json_t *v;
    int rc;
    if (!json_is_object(g))
        return bad(r, "globals", "is missing");
    if (!(ks->globals = calloc(json_object_size(g) + 1, sizeof *ks->globals)))
        return eng__fail(r->err, r->errlen, -ENOMEM, "out of memory");
    json_object_foreach(g, key, v) {
        struct eng_kset_global *gl = &ks->globals[ks->n_globals];
        char w[96];
        snprintf(w, sizeof w, "globals.%s", key);
        if (strlen(key) >= ENG_KSET_NAME)
            return bad(r, w, "has too long a name");
        snprintf(gl->name, sizeof gl->name, "%s", key);
        ks->n_globals++;
        if (json_is_integer(v) && json_integer_value(v) > 0) {
            gl->bytes = (uint64_t)json_integer_value(v);
        } else if (json_is_object(v)) {
            static const char *const row_keys[] = {"per_row", "inv_freq", "window", NULL};
            if ((rc = only_keys(r, v, w, row_keys)))
                return rc;
            if ((rc = get_u64(r, v, w, "per_row", &gl->per_row, true)) ||
                (rc = get_u64(r, v, w, "window", &gl->window, false)))
                return rc;
            json_t *f = json_object_get(v, "inv_freq");
            if (!json_is_array(f) || !json_array_size(f))
                return bad(r, w, "has no inv_freq");
            gl->n_inv_freq = (int)json_array_size(f);
            if (!(gl->inv_freq = calloc((size_t)gl->n_inv_freq, sizeof *gl->inv_freq)))
                return eng__fail(r->err, r->errlen, -ENOMEM, "out of memory");
            for (int i = 0; i < gl->n_inv_freq; i++) {
                json_t *x = json_array_get(f, (size_t)i);
                if (!json_is_number(x))
                    return bad(r, w, "has a non-numeric inv_freq");
                gl->inv_freq[i] = json_number_value(x);
            }
        } else {
            return bad(r, w, "is neither a byte count nor a per-row table");
        }
    }
    return 0;
}

static int read_layers(struct rd *r, json_t *root, struct eng_kset *ks)
{
    json_t *layers = json_object_get(root, "layers"), *types = json_object_get(root, "layer_types");
    int rc;
    if (!json_is_array(layers) || json_array_size(layers) != (size_t)ks->n_layers)
        return bad(r, "layers", "is not an array of spec.num_layers layer types");
    for (size_t i = 0; i < json_array_size(layers); i++) {
        const char *t = json_string_value(json_array_get(layers, i));
        if (!t)
            return bad(r, "layers", "holds something that is not a layer type");
        if (i == 0)
            snprintf(ks->layer_type, sizeof ks->layer_type, "%s", t);
        else if (strcmp(t, ks->layer_type) != 0)
            return bad(r, "layers", "mixes layer types (minicpmd drives one dense layer type)");
    }
    json_t *lt = json_object_get(types, ks->layer_type);
    char w[96];
    snprintf(w, sizeof w, "layer_types.%s", ks->layer_type);
    if (!json_is_object(lt))
        return bad(r, w, "is missing");
    json_t *buf = json_object_get(lt, "buffers");
    if (!json_is_object(buf))
        return bad(r, w, "has no buffers");
    json_t *state = json_object_get(buf, "state");
    char kind[16];
    if ((rc = get_u64(r, buf, w, "consts", &ks->consts_bytes, true)) ||
        (rc = get_u64(r, buf, w, "act", &ks->act_bytes, true)))
        return rc;
    static const char *const state_keys[] = {"kind", "row", NULL};
    if (!json_is_object(state))
        return bad(r, w, "has no state buffer");
    if ((rc = only_keys(r, state, w, state_keys)))
        return rc;
    if ((rc = get_str(r, state, w, "kind", kind, sizeof kind)) ||
        (rc = get_u64(r, state, w, "row", &ks->state_row, true)))
        return rc;
    if (strcmp(kind, "kv") != 0)
        return bad(r, w, "has a state that is not a KV cache");
    json_t *prog = json_object_get(lt, "program");
    if (!json_is_array(prog) || json_array_size(prog) != 1)
        return bad(r, w, "does not have exactly one run per layer (a dense dx program)");
    if ((rc = read_step(r, ks, json_array_get(prog, 0), w, &ks->layer_step)))
        return rc;
    json_t *pack = json_object_get(lt, "pack");
    if (!json_is_object(pack))
        return bad(r, w, "has no packing plan");
    if ((rc = read_ops(r, json_object_get(pack, "pool"), "pack.pool", &ks->pool_ops,
                       &ks->n_pool_ops)) ||
        (rc = read_ops(r, json_object_get(pack, "consts"), "pack.consts", &ks->consts_ops,
                       &ks->n_consts_ops)))
        return rc;
    return 0;
}

static int read_pack(struct rd *r, json_t *root, struct eng_kset *ks)
{
    json_t *p = json_object_get(root, "pack");
    int rc;
    if (!json_is_object(p))
        return bad(r, "pack", "is missing");
    json_t *lm = json_object_get(p, "lm_head"), *emb = json_object_get(p, "embed"),
           *norm = json_object_get(p, "norm");
    if (!json_is_object(lm) || !json_is_object(emb) || !json_is_object(norm))
        return bad(r, "pack", "needs lm_head, embed and norm");
    if ((rc = read_ops(r, json_object_get(lm, "ops"), "pack.lm_head.ops", &ks->lm_ops,
                       &ks->n_lm_ops)) ||
        (rc = get_str(r, emb, "pack.embed", "tensor", ks->embed_tensor,
                      sizeof ks->embed_tensor)) ||
        (rc = get_str(r, norm, "pack.norm", "tensor", ks->norm_tensor, sizeof ks->norm_tensor)) ||
        (rc = get_u64(r, norm, "pack.norm", "bytes", &ks->norm_bytes, true)))
        return rc;
    return 0;
}

int eng_kset_load(const char *dir, struct eng_kset *ks, char *err, size_t errlen)
{
    char path[4096];
    json_error_t je;
    int rc;
    *ks = (struct eng_kset){0};
    snprintf(path, sizeof path, "%s/%s", dir, ENG_KSET_MANIFEST);
    struct rd r = {.file = path, .err = err, .errlen = errlen};
    const char *why;
    FILE *f = ut_fopen_regular(path, 0, &rc, &why);
    if (!f)
        return eng__fail(err, errlen, rc == -ENOENT ? -ENOENT : -EINVAL, "%s: %s", path, why);
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    if (!root)
        return eng__fail(err, errlen, -EINVAL, "%s: %s (line %d)", path, je.text, je.line);
    ks->dir = strdup(dir);
    ks->manifest_path = strdup(path);
    if (!ks->dir || !ks->manifest_path) {
        rc = eng__fail(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    r.file = ks->manifest_path;
    if (!json_is_object(root)) {
        rc = bad(&r, "the top level", "is not an object");
        goto out;
    }
    if ((rc = get_int(&r, root, "manifest", "manifest_version", &ks->version)))
        goto out;
    if (ks->version != 1) {
        rc = bad(&r, "manifest_version", "is not 1 (a newer export? minicpmd reads version 1)");
        goto out;
    }
    if ((rc = get_str(&r, root, "manifest", "family", ks->family, sizeof ks->family)))
        goto out;
    bool dense = false;
    for (int i = 0; dense_families[i]; i++)
        dense = dense || strcmp(ks->family, dense_families[i]) == 0;
    if (!dense) {
        rc = eng__fail(err, errlen, -EINVAL, "%s: family '%s' is not a dense family minicpmd "
                       "drives (llama3, qwen3)", path, ks->family);
        goto out;
    }
    if (json_is_string(json_object_get(root, "spec_hash")))
        snprintf(ks->spec_hash, sizeof ks->spec_hash, "%s",
                 json_string_value(json_object_get(root, "spec_hash")));
    uint64_t mc;
    if ((rc = get_u64(&r, root, "manifest", "max_ctx_default", &mc, false)))
        goto out;
    ks->max_ctx_default = mc && mc < (1u << 24) ? (int)mc : 4096;
    json_t *chk = json_object_get(root, "hf_config_check");
    if (!json_is_object(chk)) {
        rc = bad(&r, "hf_config_check", "is missing");
        goto out;
    }
    ks->hf_config_check = json_incref(chk);
    json_t *defs = json_object_get(root, "hf_config_defaults");
    if (json_is_object(defs))
        ks->hf_config_defaults = json_incref(defs);
    if ((rc = read_spec(&r, root, ks)) || (rc = read_layout(&r, root, ks)) ||
        (rc = read_contexts_kernels(&r, root, ks)) || (rc = read_globals(&r, root, ks)) ||
        (rc = read_layers(&r, root, ks)) || (rc = read_pack(&r, root, ks)))
        goto out;
    json_t *tail = json_object_get(root, "tail");
    if (!json_is_array(tail) || json_array_size(tail) != 2) {
        rc = bad(&r, "tail", "is not the two runs ln, lm");
        goto out;
    }
    for (int i = 0; i < 2; i++)
        if ((rc = read_step(&r, ks, json_array_get(tail, (size_t)i), "tail", &ks->tail[i])))
            goto out;
    ks->n_tail = 2;
    rc = 0;
out:
    json_decref(root);
    if (rc)
        eng_kset_free(ks);
    return rc;
}

void eng_kset_free(struct eng_kset *ks)
{
    if (!ks)
        return;
    free(ks->dir);
    free(ks->manifest_path);
    free(ks->pool_ops);
    free(ks->consts_ops);
    free(ks->lm_ops);
    for (int i = 0; i < ks->n_contexts; i++)
        free(ks->contexts[i].xclbin);
    free(ks->contexts);
    for (int i = 0; i < ks->n_kernels; i++)
        free(ks->kernels[i].insts);
    free(ks->kernels);
    for (int i = 0; i < ks->n_globals; i++)
        free(ks->globals[i].inv_freq);
    free(ks->globals);
    json_decref(ks->hf_config_check);
    json_decref(ks->hf_config_defaults);
    *ks = (struct eng_kset){0};
}

int eng_kset_kernel_index(const struct eng_kset *ks, const char *name)
{
    for (int i = 0; i < ks->n_kernels; i++)
        if (strcmp(ks->kernels[i].name, name) == 0)
            return i;
    return -1;
}

const struct eng_kset_global *eng_kset_global(const struct eng_kset *ks, const char *name)
{
    for (int i = 0; i < ks->n_globals; i++)
        if (strcmp(ks->globals[i].name, name) == 0)
            return &ks->globals[i];
    return NULL;
}

/* ---- checks ------------------------------------------------------------------- */

static int mismatch(const struct eng_kset *ks, const char *what, long long set, long long model,
                    char *err, size_t errlen)
{
    return eng__fail(err, errlen, -EINVAL,
                     "kernel set %s does not match the model: %s is %lld in the kernel set, "
                     "%lld in the model", ks->dir, what, set, model);
}

/* json values equal for the purpose of a config check: numbers by value. */
static bool same(json_t *a, json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    return json_equal(a, b);
}

int eng_kset_check_model(const struct eng_kset *ks, const eng_pack *pack, char *err,
                         size_t errlen)
{
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    const struct eng_hparams *hp = &pi->hp;
    if (ks->n_layers != hp->n_layers)
        return mismatch(ks, "num_layers", ks->n_layers, hp->n_layers, err, errlen);
    if (ks->n_heads != hp->n_heads)
        return mismatch(ks, "num_heads", ks->n_heads, hp->n_heads, err, errlen);
    if (ks->head_dim != hp->head_dim)
        return mismatch(ks, "head_dim", ks->head_dim, hp->head_dim, err, errlen);
    if (ks->n_kv_heads != hp->n_kv_heads)
        return mismatch(ks, "num_kv_heads", ks->n_kv_heads, hp->n_kv_heads, err, errlen);
    if (ks->hidden != hp->n_embd)
        return mismatch(ks, "hidden", ks->hidden, hp->n_embd, err, errlen);
    if (ks->intermediate != hp->n_ff)
        return mismatch(ks, "intermediate", ks->intermediate, hp->n_ff, err, errlen);
    if (ks->vocab != hp->n_vocab)
        return mismatch(ks, "vocab", ks->vocab, hp->n_vocab, err, errlen);
    if (strcmp(ks->quant, "q4_1") != 0)
        return eng__fail(err, errlen, -EINVAL,
                         "kernel set %s does not match the model: quant is '%s' in the kernel "
                         "set; minicpmd packs q4_1 weights", ks->dir, ks->quant);
    if (pi->format != ENG_WEIGHTS_Q4NX)
        return eng__fail(err, errlen, -EINVAL,
                         "kernel set %s does not match the model: quant is q4_1 in the kernel "
                         "set, but the model's weights are %s, not model.q4nx", ks->dir,
                         eng_weights_format_name(pi->format));
    json_t *cfg = (json_t *)eng_pack_config(pack);
    const char *key;
    json_t *want;
    json_object_foreach((json_t *)ks->hf_config_check, key, want) {
        json_t *have = json_object_get(cfg, key);
        if (!have && ks->hf_config_defaults)
            have = json_object_get(ks->hf_config_defaults, key);
        if (strcmp(key, "model_type") == 0 && json_is_array(want)) {
            bool ok = false;
            size_t i;
            json_t *t;
            json_array_foreach(want, i, t) ok = ok || (have && json_equal(t, have));
            if (!ok)
                return eng__fail(err, errlen, -EINVAL,
                                 "kernel set %s does not match the model: hf_config_check "
                                 "model_type does not list config.json's '%s'", ks->dir,
                                 json_is_string(have) ? json_string_value(have) : "(none)");
            continue;
        }
        if (!have)
            return eng__fail(err, errlen, -EINVAL,
                             "kernel set %s does not match the model: config.json has no '%s' "
                             "(hf_config_check wants it)", ks->dir, key);
        if (!same(want, have)) {
            char *a = json_dumps(want, JSON_ENCODE_ANY | JSON_COMPACT);
            char *b = json_dumps(have, JSON_ENCODE_ANY | JSON_COMPACT);
            int rc = eng__fail(err, errlen, -EINVAL,
                               "kernel set %s does not match the model: %s is %.40s in the "
                               "kernel set (hf_config_check), %.40s in config.json", ks->dir,
                               key, a ? a : "?", b ? b : "?");
            free(a);
            free(b);
            return rc;
        }
    }
    return 0;
}

static int check_file(const struct eng_kset *ks, const char *rel, bool words, char *err,
                      size_t errlen)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", ks->dir, rel);
    if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
        return eng__fail(err, errlen, -ENOENT,
                         "kernel set %s is incomplete: %s (named in manifest.json) does not "
                         "exist", ks->dir, rel);
    if (st.st_size == 0 || (words && st.st_size % 4))
        return eng__fail(err, errlen, -EINVAL, "kernel set %s: %s is %s", ks->dir, rel,
                         st.st_size == 0 ? "empty" : "not a whole number of 32-bit words");
    return 0;
}

int eng_kset_check_files(const struct eng_kset *ks, char *err, size_t errlen)
{
    int rc;
    for (int i = 0; i < ks->n_contexts; i++)
        if ((rc = check_file(ks, ks->contexts[i].xclbin, false, err, errlen)))
            return rc;
    for (int i = 0; i < ks->n_kernels; i++)
        if ((rc = check_file(ks, ks->kernels[i].insts, true, err, errlen)))
            return rc;
    return 0;
}
