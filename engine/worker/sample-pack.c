/* What a pack says about sampling: generation_config.json's defaults and the ids
 * that end generation (generation_config.json and config.json eos_token_id).
 *
 * As in pack.c, every failure is one line naming the file and the key, because the
 * user's next step is to fix that file. JSON null counts as absent (Hugging Face
 * writes nulls for unset fields); integers may be written as integral reals.
 */
#include "engine/err.h"
#include "engine/worker/sample.h"
#include "util/buf.h"
#include "util/fs.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Load dir/name into *out (a JSON object), or leave *out NULL when the file does
 * not exist. The path goes to `path` for messages. */
static int load_object(const char *dir, const char *name, json_t **out, char *path,
                       size_t pathlen, char *err, size_t errlen)
{
    *out = NULL;
    if ((size_t)snprintf(path, pathlen, "%s/%s", dir, name) >= pathlen)
        return eng__fail(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    const char *why;
    int rc;
    FILE *f = ut_fopen_regular(path, 0, &rc, &why);
    if (!f) {
        if (rc == -ENOENT)
            return 0;
        return eng__fail(err, errlen, rc, "%s: %s", path, why);
    }
    json_error_t jerr;
    json_t *j = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!j)
        return eng__fail(err, errlen, -EINVAL, "%s:%d:%d: %s", path, jerr.line, jerr.column,
                         jerr.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return eng__fail(err, errlen, -EINVAL, "%s: top level must be a JSON object", path);
    }
    *out = j;
    return 0;
}

/* An integer, also written as an integral real (2.0). */
static int as_integer(const json_t *v, long long *x)
{
    if (json_is_integer(v)) {
        *x = json_integer_value(v);
        return 1;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d >= -9.0e15 && d <= 9.0e15 && d == floor(d)) {
            *x = (long long)d;
            return 1;
        }
    }
    return 0;
}

/* ---- generation_config.json defaults ---------------------------------------- */

/* A real `key` into *out if present, within the range the caller checks with
 * `ok`; `range` describes it in the message. */
static int get_knob(json_t *cfg, const char *path, const char *key, int (*ok)(double),
                    const char *range, float *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return eng__fail(err, errlen, -EINVAL, "%s: field '%s' must be a number", path, key);
    double x = json_number_value(v);
    if (!ok(x))
        return eng__fail(err, errlen, -EINVAL, "%s: field '%s' = %g is out of range (%s)", path,
                         key, x, range);
    *out = (float)x;
    return 0;
}

static int ok_temperature(double x) { return x >= 0.0 && x <= FLT_MAX; }
static int ok_top_p(double x) { return x > 0.0 && x <= 1.0; }
static int ok_min_p(double x) { return x >= 0.0 && x < 1.0; }
static int ok_penalty(double x) { return x > 0.0 && x <= FLT_MAX; }

int eng_sampling_defaults(const eng_pack *p, struct eng_sampling *s, char *err, size_t errlen)
{
    *s = (struct eng_sampling){
        .temperature = 1.0f,
        .top_p = 1.0f,
        .top_k = 0,
        .min_p = 0.0f,
        .repetition_penalty = 1.0f,
        .penalty_last_n = 0,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .bias = NULL,
        .n_bias = 0,
        .seed = 0,
    };
    if (!p)
        return 0;

    char path[PATH_MAX];
    json_t *cfg;
    int rc = load_object(eng_pack_get_info(p)->dir, "generation_config.json", &cfg, path,
                         sizeof path, err, errlen);
    if (rc || !cfg)
        return rc;
    struct eng_sampling t = *s;
    if ((rc = get_knob(cfg, path, "temperature", ok_temperature, ">= 0", &t.temperature, err,
                       errlen)) ||
        (rc = get_knob(cfg, path, "top_p", ok_top_p, "0 < top_p <= 1", &t.top_p, err, errlen)) ||
        (rc = get_knob(cfg, path, "min_p", ok_min_p, "0 <= min_p < 1", &t.min_p, err, errlen)) ||
        (rc = get_knob(cfg, path, "repetition_penalty", ok_penalty, "> 0",
                       &t.repetition_penalty, err, errlen)))
        goto out;

    json_t *v = json_object_get(cfg, "top_k");
    if (v && !json_is_null(v)) {
        long long x;
        if (!as_integer(v, &x)) {
            rc = eng__fail(err, errlen, -EINVAL, "%s: field 'top_k' must be an integer", path);
            goto out;
        }
        if (x < 0 || x > INT_MAX) {
            rc = eng__fail(err, errlen, -EINVAL, "%s: field 'top_k' = %lld is out of range (>= 0)",
                           path, x);
            goto out;
        }
        t.top_k = (int)x;
    }
    /* Hugging Face: do_sample false is greedy decoding whatever the temperature. */
    v = json_object_get(cfg, "do_sample");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            rc = eng__fail(err, errlen, -EINVAL, "%s: field 'do_sample' must be a boolean", path);
            goto out;
        }
        if (json_is_false(v))
            t.temperature = 0.0f;
    }
    *s = t;
out:
    json_decref(cfg);
    return rc;
}

int eng_max_new_tokens(const eng_pack *p, int32_t *out, char *err, size_t errlen)
{
    *out = 0;
    if (!p)
        return 0;
    char path[PATH_MAX];
    json_t *cfg;
    int rc = load_object(eng_pack_get_info(p)->dir, "generation_config.json", &cfg, path,
                         sizeof path, err, errlen);
    if (rc || !cfg)
        return rc;
    json_t *v = json_object_get(cfg, "max_new_tokens");
    long long x;
    if (v && !json_is_null(v)) {
        if (!as_integer(v, &x))
            rc = eng__fail(err, errlen, -EINVAL, "%s: field 'max_new_tokens' must be an integer",
                           path);
        else if (x < 1 || x > INT32_MAX)
            rc = eng__fail(err, errlen, -EINVAL,
                           "%s: field 'max_new_tokens' = %lld is out of range (>= 1)", path, x);
        else
            *out = (int32_t)x;
    }
    json_decref(cfg);
    return rc;
}

/* ---- stop ids ------------------------------------------------------------------ */

static int cmp_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Append the eos_token_id of one file (number, array of numbers, or absent) to
 * ids[*n..]; `cap` bounds the total. Each id must be a token: 0 <= id < n_vocab. */
static int add_eos(const eng_pack *p, const char *name, int n_vocab, int32_t **ids, size_t *n,
                   size_t *cap, char *err, size_t errlen)
{
    char path[PATH_MAX];
    const char *dir = eng_pack_get_info(p)->dir;
    json_t *cfg;
    int rc = 0;
    if (strcmp(name, "config.json") == 0) {
        /* Parsed once by eng_pack_open: the file is not read again. */
        snprintf(path, sizeof path, "%s/%s", dir, name);
        cfg = json_incref((json_t *)eng_pack_config(p));
    } else if ((rc = load_object(dir, name, &cfg, path, sizeof path, err, errlen)) || !cfg) {
        return rc;
    }
    json_t *v = json_object_get(cfg, "eos_token_id");
    if (!v || json_is_null(v))
        goto out;
    size_t count = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < count; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        long long x;
        if (!as_integer(e, &x)) {
            rc = eng__fail(err, errlen, -EINVAL,
                           "%s: field 'eos_token_id' must be a token id or an array of them",
                           path);
            goto out;
        }
        if (x < 0 || x >= n_vocab) {
            rc = eng__fail(err, errlen, -EINVAL,
                           "%s: field 'eos_token_id' has %lld, not a token id (0..%d)", path, x,
                           n_vocab - 1);
            goto out;
        }
        if (ut_grow((void **)ids, cap, *n + 1, sizeof **ids, 8)) {
            rc = eng__fail(err, errlen, -ENOMEM, "out of memory");
            goto out;
        }
        (*ids)[(*n)++] = (int32_t)x;
    }
out:
    json_decref(cfg);
    return rc;
}

int eng_pack_stop_ids(const eng_pack *p, int32_t *out, int max, char *err, size_t errlen)
{
    const struct eng_pack_info *info = eng_pack_get_info(p);
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    int rc;
    if ((rc = add_eos(p, "generation_config.json", info->hp.n_vocab, &ids, &n, &cap, err,
                      errlen)) ||
        (rc = add_eos(p, "config.json", info->hp.n_vocab, &ids, &n, &cap, err, errlen)))
        goto out;
    if (n > 1)
        qsort(ids, n, sizeof *ids, cmp_id);
    int distinct = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || ids[i] != ids[i - 1])
            ids[distinct++] = ids[i];
    if (distinct > max) {
        rc = eng__fail(err, errlen, -EINVAL,
                       "%s: %d distinct eos_token_id values in generation_config.json and "
                       "config.json, more than the %d supported",
                       info->dir, distinct, max < 0 ? 0 : max);
        goto out;
    }
    for (int i = 0; i < distinct; i++)
        out[i] = ids[i];
    rc = distinct;
out:
    free(ids);
    return rc;
}
