/* safetensors container reader.
 *
 * The file is untrusted input (a download, a hand-made pack, a fuzzer), so the
 * order is: map, check the header length against the file size, parse the JSON,
 * check every field of every tensor, then sort and check overlaps. Only a handle
 * that passed everything is returned; any failure unwinds through one cleanup path.
 */
#include "engine/err.h"
#include "engine/model/safetensors.h"
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct st_meta {
    char *key;
    char *value;
};

struct eng_st {
    char *path;
    const uint8_t *map;
    uint64_t size;
    struct eng_st_tensor *tensors;  /* sorted by name */
    size_t count;
    struct st_meta *meta;
    size_t n_meta;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[ENG_ST_DTYPE_COUNT] = {
    [ENG_ST_BOOL] = { "BOOL", 1 }, [ENG_ST_U8] = { "U8", 1 },   [ENG_ST_I8] = { "I8", 1 },
    [ENG_ST_I16] = { "I16", 2 },   [ENG_ST_U16] = { "U16", 2 }, [ENG_ST_F16] = { "F16", 2 },
    [ENG_ST_BF16] = { "BF16", 2 }, [ENG_ST_I32] = { "I32", 4 }, [ENG_ST_U32] = { "U32", 4 },
    [ENG_ST_F32] = { "F32", 4 },   [ENG_ST_I64] = { "I64", 8 }, [ENG_ST_U64] = { "U64", 8 },
    [ENG_ST_F64] = { "F64", 8 },
};

/* A tensor name as it may appear in a one-line message: control characters (a
 * JSON key may hold "\n") become '?', and very long names are cut. */
static const char *printable(const char *s, char *buf, size_t len)
{
    size_t i = 0;
    for (; s[i] && i + 4 < len; i++)
        buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    if (s[i]) {
        memcpy(buf + i, "...", 3);
        i += 3;
    }
    buf[i] = '\0';
    return buf;
}

const char *eng_st_dtype_name(enum eng_st_dtype dt)
{
    return (unsigned)dt < ENG_ST_DTYPE_COUNT ? dtypes[dt].name : "?";
}

size_t eng_st_dtype_size(enum eng_st_dtype dt)
{
    return (unsigned)dt < ENG_ST_DTYPE_COUNT ? dtypes[dt].size : 0;
}

int eng_st_dtype_parse(const char *s)
{
    for (int i = 0; i < ENG_ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0)
            return i;
    return -1;
}

char *eng_st_shape_str(const struct eng_st_tensor *t, char *buf, size_t len)
{
    size_t n = 0;
    if (!len)
        return buf;
    buf[0] = '\0';
    n += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->n_dims && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

/* A non-negative JSON integer, or -1. */
static int64_t json_uint(const json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    return (int64_t)json_integer_value(v);
}

/* Fill *t (except data) from one header entry, checking it against the data
 * region of `data_size` bytes. */
static int parse_tensor(const char *path, const char *name, json_t *v, uint64_t data_size,
                        struct eng_st_tensor *t, char *err, size_t errlen)
{
    char nb[96];
    const char *pn = printable(name, nb, sizeof nb);
    if (!json_is_object(v))
        return eng__fail(err, errlen, -EINVAL, "%s: tensor '%s': expected an object", path, pn);

    json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return eng__fail(err, errlen, -EINVAL, "%s: tensor '%s': missing \"dtype\" string", path, pn);
    int dt = eng_st_dtype_parse(json_string_value(jd));
    if (dt < 0) {
        char db[32];
        return eng__fail(err, errlen, -EINVAL,
                    "%s: tensor '%s': unsupported dtype '%s' (expected one of BOOL, U8, I8, "
                    "I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64)",
                    path, pn, printable(json_string_value(jd), db, sizeof db));
    }
    t->dtype = (enum eng_st_dtype)dt;

    json_t *js = json_object_get(v, "shape");
    if (!json_is_array(js))
        return eng__fail(err, errlen, -EINVAL, "%s: tensor '%s': missing \"shape\" array", path, pn);
    if (json_array_size(js) > ENG_ST_MAX_DIMS)
        return eng__fail(err, errlen, -EINVAL, "%s: tensor '%s': %zu dimensions, at most %d supported",
                    path, pn, json_array_size(js), ENG_ST_MAX_DIMS);
    t->n_dims = (int)json_array_size(js);
    int64_t numel = 1;
    for (int i = 0; i < t->n_dims; i++) {
        int64_t d = json_uint(json_array_get(js, (size_t)i));
        if (d < 0)
            return eng__fail(err, errlen, -EINVAL,
                        "%s: tensor '%s': shape[%d] is not a non-negative integer", path, pn, i);
        t->shape[i] = d;
        if (__builtin_mul_overflow(numel, d, &numel))
            return eng__fail(err, errlen, -EINVAL, "%s: tensor '%s': shape product overflows", path,
                        pn);
    }
    t->numel = numel;
    uint64_t nbytes;
    if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)dtypes[dt].size, &nbytes))
        return eng__fail(err, errlen, -EINVAL, "%s: tensor '%s': byte size overflows", path, pn);
    t->nbytes = nbytes;

    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return eng__fail(err, errlen, -EINVAL,
                    "%s: tensor '%s': expected \"data_offsets\": [begin, end]", path, pn);
    int64_t begin = json_uint(json_array_get(jo, 0));
    int64_t end = json_uint(json_array_get(jo, 1));
    if (begin < 0 || end < 0)
        return eng__fail(err, errlen, -EINVAL,
                    "%s: tensor '%s': data_offsets must be non-negative integers", path, pn);
    if (begin > end || (uint64_t)end > data_size)
        return eng__fail(err, errlen, -EINVAL,
                    "%s: tensor '%s': data_offsets [%lld, %lld] outside the data region of "
                    "%llu bytes",
                    path, pn, (long long)begin, (long long)end, (unsigned long long)data_size);
    if ((uint64_t)(end - begin) != nbytes) {
        char sb[160];
        return eng__fail(err, errlen, -EINVAL,
                    "%s: tensor '%s': data_offsets span %lld bytes, expected %llu for %s %s", path,
                    pn, (long long)(end - begin), (unsigned long long)nbytes, dtypes[dt].name,
                    eng_st_shape_str(t, sb, sizeof sb));
    }
    t->offset = (uint64_t)begin;
    return 0;
}

static int parse_metadata(const char *path, json_t *v, eng_st *st, char *err, size_t errlen)
{
    if (!json_is_object(v))
        return eng__fail(err, errlen, -EINVAL, "%s: __metadata__ is not an object", path);
    st->meta = calloc(json_object_size(v) + 1, sizeof *st->meta);
    if (!st->meta)
        return eng__fail(err, errlen, -ENOMEM, "%s: out of memory", path);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char kb[96];
        if (!json_is_string(val))
            return eng__fail(err, errlen, -EINVAL, "%s: __metadata__ '%s' is not a string", path,
                        printable(key, kb, sizeof kb));
        struct st_meta *m = &st->meta[st->n_meta];
        m->key = strdup(key);
        m->value = strdup(json_string_value(val));
        if (m->key || m->value)
            st->n_meta++;   /* so eng_st_free() frees whichever strdup succeeded */
        if (!m->key || !m->value)
            return eng__fail(err, errlen, -ENOMEM, "%s: out of memory", path);
    }
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct eng_st_tensor *)a)->name, ((const struct eng_st_tensor *)b)->name);
}

static int cmp_offset(const void *a, const void *b)
{
    const struct eng_st_tensor *x = *(const struct eng_st_tensor *const *)a;
    const struct eng_st_tensor *y = *(const struct eng_st_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Two tensors may not share bytes: a writer bug that would make one weight
 * silently alias another. Empty tensors occupy no bytes and never overlap. */
static int check_overlaps(const eng_st *st, char *err, size_t errlen)
{
    int rc = 0;
    const struct eng_st_tensor **by_off = malloc((st->count + 1) * sizeof *by_off);
    if (!by_off)
        return eng__fail(err, errlen, -ENOMEM, "%s: out of memory", st->path);
    for (size_t i = 0; i < st->count; i++)
        by_off[i] = &st->tensors[i];
    qsort(by_off, st->count, sizeof *by_off, cmp_offset);
    const struct eng_st_tensor *prev = NULL;
    for (size_t i = 0; i < st->count; i++) {
        const struct eng_st_tensor *t = by_off[i];
        if (!t->nbytes)
            continue;
        if (prev && prev->offset + prev->nbytes > t->offset) {
            char a[96], b[96];
            rc = eng__fail(err, errlen, -EINVAL,
                      "%s: tensor '%s' (bytes %llu..%llu) overlaps tensor '%s' (bytes %llu..%llu)",
                      st->path, printable(t->name, a, sizeof a), (unsigned long long)t->offset,
                      (unsigned long long)(t->offset + t->nbytes),
                      printable(prev->name, b, sizeof b), (unsigned long long)prev->offset,
                      (unsigned long long)(prev->offset + prev->nbytes));
            break;
        }
        prev = t;
    }
    free(by_off);
    return rc;
}

/* Everything after the mapping: header length, JSON, tensors, overlaps. */
static int parse_header(eng_st *st, char *err, size_t errlen)
{
    const char *path = st->path;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | st->map[i];
    if (n > ENG_ST_MAX_HEADER)
        return eng__fail(err, errlen, -EINVAL,
                    "%s: header length %llu is absurd (at most %u bytes expected)", path,
                    (unsigned long long)n, ENG_ST_MAX_HEADER);
    if (n > st->size - 8)
        return eng__fail(err, errlen, -EINVAL,
                    "%s: header length %llu runs past the end of the file (%llu bytes): "
                    "truncated or not a safetensors file",
                    path, (unsigned long long)n, (unsigned long long)st->size);
    uint64_t data_size = st->size - 8 - n;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)st->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        /* jansson quotes the offending input ("near '...'"), which may hold a
         * newline: keep the message one line. */
        char tb[sizeof jerr.text];
        return eng__fail(err, errlen, -EINVAL, "%s: header is not valid JSON: %s (at byte %d)", path,
                    printable(jerr.text, tb, sizeof tb), jerr.position);
    }
    int rc = 0;
    if (!json_is_object(root)) {
        rc = eng__fail(err, errlen, -EINVAL, "%s: header is not a JSON object", path);
        goto out;
    }
    size_t cap = json_object_size(root);
    st->tensors = calloc(cap + 1, sizeof *st->tensors);
    if (!st->tensors) {
        rc = eng__fail(err, errlen, -ENOMEM, "%s: out of memory", path);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if ((rc = parse_metadata(path, v, st, err, errlen)) < 0)
                goto out;
            continue;
        }
        struct eng_st_tensor *t = &st->tensors[st->count];
        if ((rc = parse_tensor(path, key, v, data_size, t, err, errlen)) < 0)
            goto out;
        if (!(t->name = strdup(key))) {
            rc = eng__fail(err, errlen, -ENOMEM, "%s: out of memory", path);
            goto out;
        }
        t->data = st->map + 8 + n + t->offset;
        st->count++;
    }
    qsort(st->tensors, st->count, sizeof *st->tensors, cmp_name);
    rc = check_overlaps(st, err, errlen);
out:
    json_decref(root);
    return rc;
}

int eng_st_open(const char *path, eng_st **out, char *err, size_t errlen)
{
    int rc = 0, fd = -1;
    *out = NULL;
    eng_st *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        rc = eng__fail(err, errlen, -ENOMEM, "%s: out of memory", path);
        goto err;
    }
    const char *why;
    fd = ut_open_regular(path, 0, &why);
    if (fd < 0) {
        rc = fd;
        eng__fail(err, errlen, rc, "%s: cannot open: %s", path, why);
        goto err;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        rc = -errno;
        eng__fail(err, errlen, rc, "%s: cannot stat: %s", path, strerror(-rc));
        goto err;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = eng__fail(err, errlen, -EINVAL, "%s: not a regular file", path);
        goto err;
    }
    if (sb.st_size < 8) {
        rc = eng__fail(err, errlen, -EINVAL,
                  "%s: file is %lld bytes, too short for the 8-byte header length", path,
                  (long long)sb.st_size);
        goto err;
    }
    st->size = (uint64_t)sb.st_size;
    void *m = mmap(NULL, (size_t)st->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        rc = -errno;
        eng__fail(err, errlen, rc, "%s: cannot map %llu bytes: %s", path,
             (unsigned long long)st->size, strerror(-rc));
        goto err;
    }
    st->map = m;
    close(fd);
    fd = -1;
    if ((rc = parse_header(st, err, errlen)) < 0)
        goto err;
    *out = st;
    return 0;
err:
    if (fd >= 0)
        close(fd);
    eng_st_free(st);
    return rc;
}

void eng_st_free(eng_st *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->count; i++)
        free((char *)st->tensors[i].name);
    free(st->tensors);
    for (size_t i = 0; i < st->n_meta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->meta);
    if (st->map)
        munmap((void *)st->map, (size_t)st->size);
    free(st->path);
    free(st);
}

const char *eng_st_path(const eng_st *st) { return st->path; }
uint64_t eng_st_file_size(const eng_st *st) { return st->size; }
const void *eng_st_map(const eng_st *st) { return st->map; }
size_t eng_st_count(const eng_st *st) { return st->count; }

const struct eng_st_tensor *eng_st_at(const eng_st *st, size_t i)
{
    return i < st->count ? &st->tensors[i] : NULL;
}

const struct eng_st_tensor *eng_st_find(const eng_st *st, const char *name)
{
    struct eng_st_tensor key = { .name = name };
    return bsearch(&key, st->tensors, st->count, sizeof key, cmp_name);
}

const char *eng_st_metadata(const eng_st *st, const char *key)
{
    for (size_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[i].key, key) == 0)
            return st->meta[i].value;
    return NULL;
}

int eng_st_get(const eng_st *st, const char *name, enum eng_st_dtype dtype, int n_dims,
               const int64_t *shape, const struct eng_st_tensor **out, char *err,
               size_t errlen)
{
    char nb[96];
    *out = NULL;
    const struct eng_st_tensor *t = eng_st_find(st, name);
    if (!t)
        return eng__fail(err, errlen, -ENOENT, "%s: tensor '%s' not found", st->path,
                    printable(name, nb, sizeof nb));
    int ok = t->dtype == dtype && t->n_dims == n_dims;
    for (int i = 0; ok && i < n_dims; i++)
        ok = shape[i] < 0 || shape[i] == t->shape[i];
    if (!ok) {
        struct eng_st_tensor want = { .n_dims = n_dims };
        for (int i = 0; i < n_dims && i < ENG_ST_MAX_DIMS; i++)
            want.shape[i] = shape[i];
        char wb[160], gb[160];
        return eng__fail(err, errlen, -EINVAL, "%s: tensor '%s': expected %s %s, got %s %s", st->path,
                    printable(name, nb, sizeof nb), eng_st_dtype_name(dtype),
                    eng_st_shape_str(&want, wb, sizeof wb), eng_st_dtype_name(t->dtype),
                    eng_st_shape_str(t, gb, sizeof gb));
    }
    *out = t;
    return 0;
}
