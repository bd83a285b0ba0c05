/* Tensor names, roles, shapes and order of a MiniCPM5 checkpoint (layout.h). */
#include "tools/pack/layout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *suffix;  /* after "model.layers.N." */
    enum pack_role role;
} layer_tensors[] = {
    /* File order of one layer. */
    {"input_layernorm.weight", ROLE_ATTN_NORM},
    {"self_attn.q_proj.weight", ROLE_Q},
    {"self_attn.k_proj.weight", ROLE_K},
    {"self_attn.v_proj.weight", ROLE_V},
    {"self_attn.o_proj.weight", ROLE_O},
    {"post_attention_layernorm.weight", ROLE_FFN_NORM},
    {"mlp.gate_proj.weight", ROLE_GATE},
    {"mlp.up_proj.weight", ROLE_UP},
    {"mlp.down_proj.weight", ROLE_DOWN},
    /* Not part of MiniCPM5; known so that inspect can name them. */
    {"self_attn.q_norm.weight", ROLE_Q_NORM},
    {"self_attn.k_norm.weight", ROLE_K_NORM},
};
#define LAYER_TENSORS 9  /* the first nine: a MiniCPM5 layer */

enum pack_role pack_role_parse(const char *name, int *layer)
{
    *layer = -1;
    if (strcmp(name, "model.embed_tokens.weight") == 0)
        return ROLE_EMBED;
    if (strcmp(name, "model.norm.weight") == 0)
        return ROLE_NORM;
    if (strcmp(name, "lm_head.weight") == 0)
        return ROLE_LM_HEAD;
    static const char prefix[] = "model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0)
        return ROLE_OTHER;
    const char *s = name + sizeof prefix - 1;
    /* A plain decimal: no sign, no leading zero (layers.01 is not layer 1). */
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
        return ROLE_OTHER;
    long n = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if ((n = n * 10 + (*s - '0')) > 1000000)
            return ROLE_OTHER;
    if (*s++ != '.')
        return ROLE_OTHER;
    for (size_t i = 0; i < sizeof layer_tensors / sizeof *layer_tensors; i++)
        if (strcmp(s, layer_tensors[i].suffix) == 0) {
            *layer = (int)n;
            return layer_tensors[i].role;
        }
    return ROLE_OTHER;
}

const char *pack_role_name(enum pack_role r)
{
    static const char *const names[] = {
        [ROLE_EMBED] = "embed",       [ROLE_ATTN_NORM] = "attn_norm", [ROLE_Q] = "q_proj",
        [ROLE_K] = "k_proj",          [ROLE_V] = "v_proj",            [ROLE_O] = "o_proj",
        [ROLE_FFN_NORM] = "ffn_norm", [ROLE_GATE] = "gate_proj",      [ROLE_UP] = "up_proj",
        [ROLE_DOWN] = "down_proj",    [ROLE_NORM] = "norm",           [ROLE_LM_HEAD] = "lm_head",
        [ROLE_Q_NORM] = "q_norm",     [ROLE_K_NORM] = "k_norm",       [ROLE_OTHER] = "other",
    };
    return (unsigned)r <= ROLE_OTHER ? names[r] : "other";
}

int pack_role_is_matmul(enum pack_role r)
{
    switch (r) {
    case ROLE_Q: case ROLE_K: case ROLE_V: case ROLE_O:
    case ROLE_GATE: case ROLE_UP: case ROLE_DOWN: case ROLE_LM_HEAD:
        return 1;
    default:
        return 0;
    }
}

void pack_role_shape(const struct pack_arch *a, enum pack_role r, int64_t *rows, int64_t *cols)
{
    int64_t h = a->hidden, q = (int64_t)a->heads * a->head_dim;
    int64_t kv = (int64_t)a->kv_heads * a->head_dim;
    *rows = 0;
    *cols = 0;
    switch (r) {
    case ROLE_EMBED: case ROLE_LM_HEAD: *rows = a->vocab; *cols = h; break;
    case ROLE_ATTN_NORM: case ROLE_FFN_NORM: case ROLE_NORM: *cols = h; break;
    case ROLE_Q: *rows = q; *cols = h; break;
    case ROLE_K: case ROLE_V: *rows = kv; *cols = h; break;
    case ROLE_O: *rows = h; *cols = q; break;
    case ROLE_GATE: case ROLE_UP: *rows = a->ffn; *cols = h; break;
    case ROLE_DOWN: *rows = h; *cols = a->ffn; break;
    case ROLE_Q_NORM: case ROLE_K_NORM: *cols = a->head_dim; break;
    case ROLE_OTHER: break;
    }
}

size_t pack_layout_count(const struct pack_arch *a)
{
    return 3 + LAYER_TENSORS * (size_t)a->layers;
}

static void add(const struct pack_arch *a, struct pack_spec *t, size_t *n, const char *name,
                enum pack_role role, int layer)
{
    struct pack_spec *s = &t[(*n)++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->role = role;
    s->layer = layer;
    pack_role_shape(a, role, &s->rows, &s->cols);
}

size_t pack_layout(const struct pack_arch *a, struct pack_spec *t)
{
    size_t n = 0;
    add(a, t, &n, "model.embed_tokens.weight", ROLE_EMBED, -1);
    for (int l = 0; l < a->layers; l++)
        for (size_t k = 0; k < LAYER_TENSORS; k++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, layer_tensors[k].suffix);
            add(a, t, &n, name, layer_tensors[k].role, l);
        }
    add(a, t, &n, "model.norm.weight", ROLE_NORM, -1);
    add(a, t, &n, "lm_head.weight", ROLE_LM_HEAD, -1);
    return n;
}

/* An integer field (integral reals accepted, as some exporters write 2048.0). */
static int get_int(json_t *cfg, const char *path, const char *key, long long lo, long long hi,
                   long long def, int *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(cfg, key);
    long long x;
    if (!v || json_is_null(v)) {
        if (def < 0) {
            snprintf(err, errlen, "%s: missing integer field '%s'", path, key);
            return -EINVAL;
        }
        *out = (int)def;
        return 0;
    }
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) >= -1e18 && json_real_value(v) <= 1e18 &&
               json_real_value(v) == (double)(long long)json_real_value(v)) {
        x = (long long)json_real_value(v);
    } else {
        snprintf(err, errlen, "%s: field '%s' must be an integer", path, key);
        return -EINVAL;
    }
    if (x < lo || x > hi) {
        snprintf(err, errlen, "%s: field '%s' = %lld is out of range (%lld..%lld)", path, key, x,
                 lo, hi);
        return -EINVAL;
    }
    *out = (int)x;
    return 0;
}

int pack_arch_from_config(json_t *cfg, const char *path, struct pack_arch *a, char *err,
                          size_t errlen)
{
    int rc;
    memset(a, 0, sizeof *a);
    if (!json_is_object(cfg)) {
        snprintf(err, errlen, "%s: top level must be a JSON object", path);
        return -EINVAL;
    }
    if ((rc = get_int(cfg, path, "hidden_size", 1, 1 << 20, -1, &a->hidden, err, errlen)) ||
        (rc = get_int(cfg, path, "num_hidden_layers", 1, 4096, -1, &a->layers, err, errlen)) ||
        (rc = get_int(cfg, path, "num_attention_heads", 1, 4096, -1, &a->heads, err, errlen)) ||
        (rc = get_int(cfg, path, "num_key_value_heads", 1, 4096, a->heads, &a->kv_heads, err,
                      errlen)) ||
        (rc = get_int(cfg, path, "intermediate_size", 1, 1 << 22, -1, &a->ffn, err, errlen)) ||
        (rc = get_int(cfg, path, "vocab_size", 1, 1 << 26, -1, &a->vocab, err, errlen)))
        return rc;
    json_t *hd = json_object_get(cfg, "head_dim");
    if ((!hd || json_is_null(hd)) && a->hidden % a->heads != 0) {
        snprintf(err, errlen,
                 "%s: hidden_size %d is not a multiple of num_attention_heads %d and no head_dim",
                 path, a->hidden, a->heads);
        return -EINVAL;
    }
    if ((rc = get_int(cfg, path, "head_dim", 1, 1 << 16, a->hidden / a->heads, &a->head_dim, err,
                      errlen)))
        return rc;
    if (a->heads % a->kv_heads != 0) {
        snprintf(err, errlen, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                 path, a->heads, a->kv_heads);
        return -EINVAL;
    }
    json_t *tie = json_object_get(cfg, "tie_word_embeddings");
    if (tie && !json_is_boolean(tie) && !json_is_null(tie)) {
        snprintf(err, errlen, "%s: field 'tie_word_embeddings' must be a boolean", path);
        return -EINVAL;
    }
    a->tied = json_is_true(tie);
    return 0;
}
