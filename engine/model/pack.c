/* Pack discovery and config.json validation.
 *
 * A pack is a directory: config.json, weights (model.q4nx, model.safetensors, or a
 * sharded safetensors index), tokenizer.json and tokenizer_config.json. This file
 * decides whether a directory is a usable pack and what shape of model it holds;
 * reading tensors is the weights loader's job. Every check fails with one line that
 * names the file and the field, because the user's next step is to fix that file.
 */
#include "engine/err.h"
#include "engine/types.h"
#include "util/fs.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* config.json is a few hundred bytes; a bound keeps a wrong file from being read whole. */
#define ENG_PACK_CONFIG_MAX (1 << 20)

struct eng_pack {
    struct eng_pack_info info;
    char *dir;
    char *model_type;
    json_t *config;  /* config.json as read at open: never read twice (it may be a
                        FIFO, or change under a running daemon) */
};

const char *eng_weights_format_name(enum eng_weights_format f)
{
    switch (f) {
    case ENG_WEIGHTS_Q4NX: return "q4nx";
    case ENG_WEIGHTS_SAFETENSORS: return "safetensors";
    case ENG_WEIGHTS_SAFETENSORS_SHARDED: return "safetensors-sharded";
    }
    return "unknown";
}

/* An integer field of config.json within [lo, hi]; `def` (>= 0) when absent. */
static int get_int(json_t *cfg, const char *path, const char *key, long long lo, long long hi,
                   long long def, int *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (def >= 0) {
            *out = (int)def;
            return 0;
        }
        return eng__fail(err, errlen, -EINVAL, "%s: missing integer field '%s'", path, key);
    }
    /* Some exporters write 2048.0; accept integral reals, nothing else. */
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && fabs(json_real_value(v)) < 9.0e18 &&
               json_real_value(v) == (double)(long long)json_real_value(v)) {
        /* The range check first: casting a double outside long long's range is
         * undefined (the fuzzer found 1.1e73). */
        x = (long long)json_real_value(v);
    } else {
        return eng__fail(err, errlen, -EINVAL, "%s: field '%s' must be an integer", path, key);
    }
    if (x < lo || x > hi)
        return eng__fail(err, errlen, -EINVAL, "%s: field '%s' = %lld is out of range (%lld..%lld)",
                    path, key, x, lo, hi);
    *out = (int)x;
    return 0;
}

static int get_real(json_t *cfg, const char *path, const char *key, double lo, double hi,
                    double def, double *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return eng__fail(err, errlen, -EINVAL, "%s: field '%s' must be a number", path, key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return eng__fail(err, errlen, -EINVAL, "%s: field '%s' = %g is out of range (%g..%g)", path,
                    key, x, lo, hi);
    *out = x;
    return 0;
}

static int read_hparams(json_t *cfg, const char *path, struct eng_hparams *hp, char *err,
                        size_t errlen)
{
    int rc;
    if ((rc = get_int(cfg, path, "num_hidden_layers", 1, 1024, -1, &hp->n_layers, err, errlen)) ||
        (rc = get_int(cfg, path, "hidden_size", 64, 65536, -1, &hp->n_embd, err, errlen)) ||
        (rc = get_int(cfg, path, "num_attention_heads", 1, 1024, -1, &hp->n_heads, err, errlen)) ||
        (rc = get_int(cfg, path, "num_key_value_heads", 1, 1024, hp->n_heads, &hp->n_kv_heads,
                      err, errlen)) ||
        (rc = get_int(cfg, path, "intermediate_size", 1, 1 << 20, -1, &hp->n_ff, err, errlen)) ||
        (rc = get_int(cfg, path, "vocab_size", 2, 1 << 24, -1, &hp->n_vocab, err, errlen)) ||
        (rc = get_int(cfg, path, "max_position_embeddings", 1, 1 << 24, 4096, &hp->n_ctx_train,
                      err, errlen)))
        return rc;
    if (hp->n_embd % hp->n_heads != 0 && !json_object_get(cfg, "head_dim"))
        return eng__fail(err, errlen, -EINVAL,
                    "%s: hidden_size %d is not a multiple of num_attention_heads %d and no "
                    "head_dim is given",
                    path, hp->n_embd, hp->n_heads);
    if ((rc = get_int(cfg, path, "head_dim", 8, 1024, hp->n_embd / hp->n_heads, &hp->head_dim,
                      err, errlen)))
        return rc;
    if (hp->head_dim % 2 != 0)
        return eng__fail(err, errlen, -EINVAL, "%s: head_dim %d must be even (RoPE rotates pairs)",
                    path, hp->head_dim);
    if (hp->n_heads % hp->n_kv_heads != 0)
        return eng__fail(err, errlen, -EINVAL,
                    "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                    path, hp->n_heads, hp->n_kv_heads);
    if ((rc = get_real(cfg, path, "rms_norm_eps", 1e-12, 1e-1, 1e-6, &hp->rms_norm_eps, err,
                       errlen)) ||
        (rc = get_real(cfg, path, "rope_theta", 1.0, 1e12, 10000.0, &hp->rope_theta, err, errlen)))
        return rc;
    json_t *tie = json_object_get(cfg, "tie_word_embeddings");
    if (tie && !json_is_boolean(tie) && !json_is_null(tie))
        return eng__fail(err, errlen, -EINVAL, "%s: field 'tie_word_embeddings' must be a boolean",
                    path);
    hp->tie_embeddings = json_is_true(tie);
    return 0;
}

/* The most bytes the weights of this shape can take: every tensor in f32 (a pack
 * may replicate the KV heads, so counted as n_heads), plus 10% and 64 MiB for
 * headers, alignment and extra tensors. A file above it is not this model's
 * weights: a sparse or corrupt file would otherwise be mapped and "loaded" as
 * "weights 1048576.0 MiB". */
static double max_weights_bytes(const struct eng_hparams *hp)
{
    double e = hp->n_embd, q = (double)hp->n_heads * hp->head_dim;
    double per_layer = e * q * 4 + 3 * e * hp->n_ff + 2 * e + 2.0 * hp->head_dim;
    double params = (double)hp->n_vocab * e * 2 + hp->n_layers * per_layer + e;
    return params * 4 * 1.1 + 64.0 * 1024 * 1024;
}

/* The weights: a Q4NX file first (the NPU pack), else the HF checkpoint. */
static int find_weights(const char *dir, struct eng_pack_info *info, char *err, size_t errlen)
{
    static const struct {
        const char *name;
        enum eng_weights_format format;
    } candidates[] = {
        {"model.q4nx", ENG_WEIGHTS_Q4NX},
        {"model.safetensors", ENG_WEIGHTS_SAFETENSORS},
        {"model.safetensors.index.json", ENG_WEIGHTS_SAFETENSORS_SHARDED},
    };
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
        const char *why;
        int64_t sz = ut_file_size(dir, candidates[i].name, &why);
        if (sz == -ENOENT)
            continue;
        if (sz < 0)
            return eng__fail(err, errlen, (int)sz, "%s/%s: %s", dir, candidates[i].name, why);
        if (sz == 0)
            return eng__fail(err, errlen, -EINVAL, "%s/%s: file is empty", dir, candidates[i].name);
        if (candidates[i].format != ENG_WEIGHTS_SAFETENSORS_SHARDED &&
            (double)sz > max_weights_bytes(&info->hp))
            return eng__fail(err, errlen, -EINVAL,
                             "%s/%s: %.1f MiB is more than a model of this shape can hold "
                             "(%.1f MiB even in f32): not this model's weights (a sparse or "
                             "corrupt file?)",
                             dir, candidates[i].name, (double)sz / (1024.0 * 1024.0),
                             max_weights_bytes(&info->hp) / (1024.0 * 1024.0));
        info->format = candidates[i].format;
        info->weights_bytes = sz;
        return 0;
    }
    return eng__fail(err, errlen, -ENOENT,
                "%s: no weights (expected model.q4nx, model.safetensors or "
                "model.safetensors.index.json)",
                dir);
}

int eng_pack_open(const char *dir, eng_pack **out, char *err, size_t errlen)
{
    char path[PATH_MAX];
    json_t *cfg = NULL;
    eng_pack *p = NULL;
    int rc;

    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0)
        return eng__fail(err, errlen, -errno, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return eng__fail(err, errlen, -ENOTDIR, "%s: not a directory (a pack is a directory)", dir);

    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
        return eng__fail(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    json_error_t jerr;
    const char *why;
    FILE *f = ut_fopen_regular(path, ENG_PACK_CONFIG_MAX, &rc, &why);
    if (!f)
        return eng__fail(err, errlen, rc, "%s: %s", path, why);
    cfg = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!cfg)
        return eng__fail(err, errlen, -EINVAL, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    if (!json_is_object(cfg)) {
        rc = eng__fail(err, errlen, -EINVAL, "%s: top level must be a JSON object", path);
        goto out;
    }

    p = calloc(1, sizeof *p);
    if (!p) {
        rc = eng__fail(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    json_t *mt = json_object_get(cfg, "model_type");
    if (!json_is_string(mt)) {
        rc = eng__fail(err, errlen, -EINVAL, "%s: missing string field 'model_type'", path);
        goto out;
    }
    p->model_type = strdup(json_string_value(mt));
    p->dir = realpath(dir, NULL); /* absolute, as eng_pack_info promises */
    if (!p->model_type || !p->dir) {
        rc = eng__fail(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = read_hparams(cfg, path, &p->info.hp, err, errlen)))
        goto out;
    if ((rc = find_weights(dir, &p->info, err, errlen)))
        goto out;
    int64_t tok = ut_file_size(dir, "tokenizer.json", &why);
    if (tok <= 0) {
        rc = eng__fail(err, errlen, tok < 0 ? (int)tok : -EINVAL, "%s/tokenizer.json: %s", dir,
                  tok < 0 ? why : "file is empty");
        goto out;
    }
    p->info.dir = p->dir;
    p->info.model_type = p->model_type;
    p->config = json_incref(cfg);
    *out = p;
    p = NULL;
    rc = 0;
out:
    eng_pack_free(p);
    json_decref(cfg);
    return rc;
}

void eng_pack_free(eng_pack *p)
{
    if (!p)
        return;
    free(p->dir);
    free(p->model_type);
    json_decref(p->config);
    free(p);
}

const struct json_t *eng_pack_config(const eng_pack *p) { return p->config; }

const struct eng_pack_info *eng_pack_get_info(const eng_pack *p) { return &p->info; }
