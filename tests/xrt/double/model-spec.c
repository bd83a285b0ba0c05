/* The functional model's view of a kernel set: the spec the designs were
 * specialised for (spec, layout) and where the packing plan put each projection
 * and norm, read from the set's manifest.json. Which kernel an xclbin is comes
 * from the manifest too: the context of the layer program's kernel is dx, the
 * tail's are ln and lm. */
#include "model-impl.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define XM_SPECS 4

static struct xm_spec specs[XM_SPECS];
static int n_specs;

void xmodel_reset(void)
{
    n_specs = 0;
}

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

static int iget(json_t *o, const char *k, int dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

static uint64_t uget(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int read_ops(json_t *ops, struct xm_spec *sp, bool lm)
{
    static const char *const names[XM_NPROJ] = {"q_proj.weight", "k_proj.weight",
                                                "v_proj.weight", "o_proj.weight",
                                                "up_proj.weight", "gate_proj.weight",
                                                "down_proj.weight"};
    size_t i;
    json_t *op;
    json_array_foreach(ops, i, op) {
        const char *t = json_string_value(json_object_get(op, "tensor"));
        const char *kind = json_string_value(json_object_get(op, "op"));
        if (!t || !kind)
            return -EINVAL;
        if (strcmp(kind, "std_perm") == 0) {
            struct xm_proj p = {uget(op, "dst"), uget(op, "nch"), uget(op, "in_dim"), 0};
            if (!p.in_dim || p.in_dim % 256 || !p.nch)
                return -EINVAL;
            p.rows = (int)(p.nch / (p.in_dim / 256) * 32);
            if (lm) {
                sp->lm = p;
                continue;
            }
            for (int k = 0; k < XM_NPROJ; k++)
                if (ends_with(t, names[k]))
                    sp->proj[k] = p;
        } else if (strcmp(kind, "put") == 0) {
            if (ends_with(t, "input_layernorm.weight"))
                sp->lnw = uget(op, "dst");
            else if (ends_with(t, "post_attention_layernorm.weight"))
                sp->postln = uget(op, "dst");
        }
    }
    return 0;
}

static int load(const char *dir, struct xm_spec *sp, char *err, size_t errlen)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_error_t je;
    json_t *m = json_load_file(path, 0, &je);
    if (!m)
        return fail(err, errlen, -EINVAL, "model: %s: %s", path, je.text);
    memset(sp, 0, sizeof *sp);
    snprintf(sp->dir, sizeof sp->dir, "%s", dir);
    json_t *spec = json_object_get(m, "spec"), *lay = json_object_get(m, "layout");
    sp->hidden = iget(spec, "hidden", 0);
    sp->n_heads = iget(spec, "num_heads", 0);
    sp->n_kv = iget(spec, "num_kv_heads", 0);
    sp->head_dim = iget(spec, "head_dim", 0);
    sp->rot = iget(spec, "rotary_dim", sp->head_dim);
    sp->ff = iget(spec, "intermediate", 0);
    json_t *eps = json_object_get(spec, "norm_eps");
    sp->eps = json_is_number(eps) ? (float)json_number_value(eps) : 1e-6f;
    sp->kv_row = uget(lay, "kv_row");
    sp->ptab_row = uget(lay, "ptab_row");
    int rc = 0;
    const char *type = json_string_value(json_array_get(json_object_get(m, "layers"), 0));
    json_t *lt = type ? json_object_get(json_object_get(m, "layer_types"), type) : NULL;
    json_t *pack = json_object_get(lt, "pack");
    if (read_ops(json_object_get(pack, "pool"), sp, false) ||
        read_ops(json_object_get(pack, "consts"), sp, false) ||
        read_ops(json_object_get(json_object_get(json_object_get(m, "pack"), "lm_head"), "ops"),
                 sp, true))
        rc = -EINVAL;
    /* Which context each role runs on. */
    json_t *kernels = json_object_get(m, "kernels"), *ctxs = json_object_get(m, "contexts");
    const char *kname[3] = {
        json_string_value(json_object_get(json_array_get(json_object_get(lt, "program"), 0),
                                          "kernel")),
        json_string_value(json_object_get(json_array_get(json_object_get(m, "tail"), 0),
                                          "kernel")),
        json_string_value(json_object_get(json_array_get(json_object_get(m, "tail"), 1),
                                          "kernel"))};
    for (int r = 0; r < 3 && !rc; r++) {
        const char *ctx = kname[r] ? json_string_value(json_object_get(
                                         json_object_get(kernels, kname[r]), "context"))
                                   : NULL;
        const char *x = ctx ? json_string_value(json_object_get(ctxs, ctx)) : NULL;
        if (!x)
            rc = -EINVAL;
        else
            snprintf(sp->ctx_xclbin[r], sizeof sp->ctx_xclbin[r], "%s", x);
    }
    json_decref(m);
    if (rc || !sp->hidden || !sp->n_heads || !sp->n_kv || !sp->head_dim || !sp->ff ||
        !sp->kv_row || !sp->ptab_row || sp->n_heads % sp->n_kv || !sp->lm.nch ||
        sp->rot > sp->head_dim || sp->rot % 2)
        return fail(err, errlen, -EINVAL, "model: %s: %s", path,
                    "a spec, layout, packing plan or program the dense designs do not have");
    for (int k = 0; k < XM_NPROJ; k++)
        if (!sp->proj[k].nch)
            return fail(err, errlen, -EINVAL, "model: %s: the pool plan lacks projection %s",
                        path, k == XM_Q ? "q" : k == XM_K ? "k" : k == XM_V ? "v"
                                     : k == XM_O ? "o" : k == XM_UP ? "up"
                                     : k == XM_GATE ? "gate" : "down");
    return 0;
}

int xm_spec_for(const char *xclbin_path, const struct xm_spec **out, enum xm_role *role,
                char *err, size_t errlen)
{
    /* The set's directory: the nearest parent holding manifest.json. */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", xclbin_path);
    bool found = false;
    for (int up = 0; up < 4 && !found; up++) {
        char *slash = strrchr(dir, '/');
        if (!slash)
            break;
        *slash = '\0';
        char m[1100];
        snprintf(m, sizeof m, "%s/manifest.json", dir);
        found = access(m, R_OK) == 0;
    }
    if (!found)
        return fail(err, errlen, -ENOENT, "model: no manifest.json above %s", xclbin_path);
    struct xm_spec *sp = NULL;
    for (int i = 0; i < n_specs; i++)
        if (strcmp(specs[i].dir, dir) == 0)
            sp = &specs[i];
    if (!sp) {
        sp = &specs[n_specs < XM_SPECS ? n_specs++ : XM_SPECS - 1];
        int rc = load(dir, sp, err, errlen);
        if (rc) {
            sp->dir[0] = '\0';
            return rc;
        }
    }
    const char *rel = xclbin_path + strlen(dir) + 1;
    for (int r = 0; r < 3; r++)
        if (strcmp(sp->ctx_xclbin[r], rel) == 0) {
            *role = (enum xm_role)r;
            *out = sp;
            return 0;
        }
    return fail(err, errlen, -EINVAL, "model: %s is none of the kernel set's dx, ln, lm (%s)",
                rel, dir);
}
