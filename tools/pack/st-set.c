/* A set of safetensors weight files (st-set.h). */
#include "tools/pack/st-set.h"

#include "tools/pack/fsutil.h"
#include "util/fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const weight_files[] = {
    [ST_SET_Q4NX] = "model.q4nx",
    [ST_SET_HF] = "model.safetensors",
    [ST_SET_HF_SHARDED] = "model.safetensors.index.json",
};

const char *st_set_kind_name(enum st_set_kind kind)
{
    switch (kind) {
    case ST_SET_Q4NX: return "q4nx";
    case ST_SET_HF: return "safetensors";
    case ST_SET_HF_SHARDED: return "safetensors-sharded";
    }
    return "?";
}

int st_set_detect(const char *dir, enum st_set_kind *kind, char *err, size_t errlen)
{
    for (int k = ST_SET_Q4NX; k <= ST_SET_HF_SHARDED; k++) {
        const char *why;
        int64_t sz = ut_file_size(dir, weight_files[k], &why);
        if (sz == -ENOENT)
            continue;
        if (sz < 0) {
            snprintf(err, errlen, "%s/%s: %s", dir, weight_files[k], why);
            return (int)sz;
        }
        *kind = (enum st_set_kind)k;
        return 0;
    }
    snprintf(err, errlen,
             "%s: no weights (expected model.q4nx, model.safetensors or "
             "model.safetensors.index.json)", dir);
    return -ENOENT;
}

static int add_file(struct st_set *s, const char *dir, const char *name, char *err, size_t errlen)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0)
            return 0;
    char **names = realloc(s->names, (s->n + 1) * sizeof *names);
    if (names)
        s->names = names;
    eng_st **files = realloc(s->files, (s->n + 1) * sizeof *files);
    if (files)
        s->files = files;
    if (!names || !files || !(s->names[s->n] = strdup(name))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        free(s->names[s->n]);
        snprintf(err, errlen, "%s/%s: path too long", dir, name);
        return -ENAMETOOLONG;
    }
    int rc = eng_st_open(path, &s->files[s->n], err, errlen);
    if (rc) {
        free(s->names[s->n]);
        return rc;
    }
    s->n++;
    return 0;
}

static int open_sharded(struct st_set *s, const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, weight_files[ST_SET_HF_SHARDED]);
    json_error_t jerr;
    json_t *idx = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!idx) {
        snprintf(err, errlen, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        return -EINVAL;
    }
    json_t *map = json_object_get(idx, "weight_map");
    int rc = 0;
    if (!json_is_object(map) || json_object_size(map) == 0) {
        snprintf(err, errlen, "%s: missing or empty object 'weight_map'", path);
        rc = -EINVAL;
        goto out;
    }
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v) {
        const char *f = json_string_value(v);
        /* A shard is a file next to the index: no paths, no "..". */
        if (!f || !*f || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0) {
            snprintf(err, errlen, "%s: weight_map['%s'] must be a file name in the directory",
                     path, name);
            rc = -EINVAL;
            goto out;
        }
        if ((rc = add_file(s, dir, f, err, errlen)))
            goto out;
    }
    json_object_foreach(map, name, v) {
        size_t i = 0;
        while (strcmp(s->names[i], json_string_value(v)) != 0)
            i++;
        if (!eng_st_find(s->files[i], name)) {
            snprintf(err, errlen, "%s: tensor '%s' is mapped to %s, which does not hold it", path,
                     name, s->names[i]);
            rc = -EINVAL;
            goto out;
        }
    }
    s->weight_map = json_incref(map);
out:
    json_decref(idx);
    return rc;
}

int st_set_open(struct st_set *s, const char *dir, enum st_set_kind kind, char *err,
                size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->weights_name = weight_files[kind];
    int rc = kind == ST_SET_HF_SHARDED ? open_sharded(s, dir, err, errlen)
                                       : add_file(s, dir, weight_files[kind], err, errlen);
    if (rc)
        st_set_close(s);
    return rc;
}

void st_set_close(struct st_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        eng_st_free(s->files[i]);
        free(s->names[i]);
    }
    free(s->files);
    free(s->names);
    json_decref(s->weight_map);
    s->files = NULL;
    s->names = NULL;
    s->weight_map = NULL;
    s->n = 0;
}

const struct eng_st_tensor *st_set_find(const struct st_set *s, const char *name, size_t *file)
{
    size_t i = 0;
    if (s->weight_map) {
        const char *f = json_string_value(json_object_get(s->weight_map, name));
        if (!f)
            return NULL;
        while (i < s->n && strcmp(s->names[i], f) != 0)
            i++;
        if (i == s->n)
            return NULL;
    }
    for (; i < s->n; i++) {
        const struct eng_st_tensor *t = eng_st_find(s->files[i], name);
        if (t) {
            if (file)
                *file = i;
            return t;
        }
        if (s->weight_map)
            break;
    }
    return NULL;
}
