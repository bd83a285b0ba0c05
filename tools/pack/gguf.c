/* The GGUF reader (gguf.h). Every read goes through struct cur, which knows how
 * many bytes are left: a length or count from the file is compared with that
 * before anything is taken on trust. */
#include "tools/pack/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct cur {
    const uint8_t *p;
    size_t len, off;
    char *err;
    size_t errlen;
};

static int fail(struct cur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct cur *c, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(c->err, c->errlen, "at byte %zu: ", c->off);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < c->errlen)
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int take(struct cur *c, size_t n, const uint8_t **out, const char *what)
{
    if (n > c->len - c->off)
        return fail(c, "%s: %zu bytes needed, %zu left (truncated file?)", what, n,
                    c->len - c->off);
    *out = c->p + c->off;
    c->off += n;
    return 0;
}

static int u32(struct cur *c, uint32_t *v, const char *what)
{
    const uint8_t *p = NULL;
    int rc = take(c, 4, &p, what);
    if (rc == 0)
        *v = (uint32_t)le(p, 4);
    return rc;
}

static int u64(struct cur *c, uint64_t *v, const char *what)
{
    const uint8_t *p = NULL;
    int rc = take(c, 8, &p, what);
    if (rc == 0)
        *v = le(p, 8);
    return rc;
}

/* A string: its bytes in place, length in *n. */
static int str(struct cur *c, const uint8_t **s, uint64_t *n, const char *what)
{
    int rc = u64(c, n, what);
    if (rc == 0 && *n > c->len - c->off)
        return fail(c, "%s: string of %" PRIu64 " bytes, %zu left", what, *n, c->len - c->off);
    return rc ? rc : take(c, (size_t)*n, s, what);
}

/* A NUL-terminated copy of a key or name (no NUL inside, at most 64 KB). */
static int name_copy(struct cur *c, char **out, const char *what)
{
    const uint8_t *s;
    uint64_t n;
    int rc = str(c, &s, &n, what);
    if (rc)
        return rc;
    if (n == 0 || n > 65535 || memchr(s, 0, (size_t)n))
        return fail(c, "%s: empty, longer than 64 KB or holding a NUL byte", what);
    if (!(*out = malloc((size_t)n + 1))) {
        snprintf(c->err, c->errlen, "out of memory");
        return -ENOMEM;
    }
    memcpy(*out, s, (size_t)n);
    (*out)[n] = '\0';
    return 0;
}

static size_t scalar_size(uint32_t t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

const char *gguf_vtype_name(enum gguf_vtype t)
{
    static const char *const n[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                    "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < sizeof n / sizeof *n ? n[t] : "?";
}

const char *gguf_ttype_name(enum gguf_ttype t)
{
    switch (t) {
    case GGUF_T_F32: return "F32";
    case GGUF_T_F16: return "F16";
    case GGUF_T_Q4_0: return "Q4_0";
    case GGUF_T_Q4_1: return "Q4_1";
    case GGUF_T_Q8_0: return "Q8_0";
    case GGUF_T_BF16: return "BF16";
    }
    return "?";
}

/* Elements per block and bytes per block of a tensor type; 0 if not accepted. */
static int ttype_block(uint32_t t, unsigned *elems, unsigned *bytes)
{
    switch (t) {
    case GGUF_T_F32: *elems = 1; *bytes = 4; return 1;
    case GGUF_T_F16: case GGUF_T_BF16: *elems = 1; *bytes = 2; return 1;
    case GGUF_T_Q4_0: *elems = 32; *bytes = 18; return 1;
    case GGUF_T_Q4_1: *elems = 32; *bytes = 20; return 1;
    case GGUF_T_Q8_0: *elems = 32; *bytes = 34; return 1;
    default: return 0;
    }
}

static int parse_kv(struct cur *c, struct gguf_kv *kv)
{
    uint32_t t;
    int rc;
    if ((rc = name_copy(c, &kv->key, "metadata key")) || (rc = u32(c, &t, "metadata type")))
        return rc;
    kv->type = (enum gguf_vtype)t;
    if (t == GGUF_STRING) {
        return str(c, &kv->p, &kv->n, kv->key);
    } else if (t == GGUF_ARRAY) {
        uint32_t at;
        if ((rc = u32(c, &at, kv->key)) || (rc = u64(c, &kv->n, kv->key)))
            return rc;
        kv->atype = (enum gguf_vtype)at;
        if (kv->n > GGUF_MAX_ARRAY)
            return fail(c, "'%s': array of %" PRIu64 " elements (limit %u)", kv->key, kv->n,
                        GGUF_MAX_ARRAY);
        kv->p = c->p + c->off;
        if (at == GGUF_STRING) {
            for (uint64_t i = 0; i < kv->n; i++) {
                const uint8_t *s;
                uint64_t n;
                if ((rc = str(c, &s, &n, kv->key)))
                    return rc;
            }
            return 0;
        }
        size_t es = scalar_size(at);
        if (!es)
            return fail(c, "'%s': array of type %u (nested arrays and unknown types are not "
                        "supported)", kv->key, at);
        const uint8_t *p;
        return take(c, (size_t)kv->n * es, &p, kv->key);
    }
    size_t sz = scalar_size(t);
    if (!sz)
        return fail(c, "'%s': unknown value type %u", kv->key, t);
    kv->n = 1;
    return take(c, sz, &kv->p, kv->key);
}

static int parse_tensor(struct cur *c, struct gguf_tensor *t)
{
    uint32_t nd, type;
    int rc;
    if ((rc = name_copy(c, &t->name, "tensor name")) || (rc = u32(c, &nd, t->name)))
        return rc;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return fail(c, "tensor '%s': %u dimensions (1..%d)", t->name, nd, GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t numel = 1;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        uint64_t d = 1;
        if (i < (int)nd && (rc = u64(c, &d, t->name)))
            return rc;
        if (d < 1 || d > (1ull << 40) || numel > (1ull << 46) / d)
            return fail(c, "tensor '%s': dimension %d = %" PRIu64 " is zero or too large",
                        t->name, i, d);
        t->ne[i] = (int64_t)d;
        numel *= d;
    }
    if ((rc = u32(c, &type, t->name)) || (rc = u64(c, &t->offset, t->name)))
        return rc;
    unsigned be, bb;
    if (!ttype_block(type, &be, &bb))
        return fail(c, "tensor '%s': ggml type %u is not supported (F32, F16, BF16, Q4_0, "
                    "Q4_1, Q8_0 are)", t->name, type);
    t->type = (enum gguf_ttype)type;
    if (t->ne[0] % be != 0)
        return fail(c, "tensor '%s': rows of %" PRId64 " are not whole %s blocks of %u",
                    t->name, t->ne[0], gguf_ttype_name(t->type), be);
    t->rows = (int64_t)(numel / (uint64_t)t->ne[0]);
    t->row_bytes = (uint64_t)t->ne[0] / be * bb;
    t->nbytes = t->row_bytes * (uint64_t)t->rows;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names (keys) must be unique: sorted copies of the pointers, neighbours compared. */
static int unique(struct cur *c, const char **names, size_t n, const char *what)
{
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            return fail(c, "duplicate %s '%s'", what, names[i]);
    return 0;
}

int gguf_parse(struct gguf *g, const void *buf, size_t len, char *err, size_t errlen)
{
    struct cur c = {.p = buf, .len = len, .err = err, .errlen = errlen};
    const char **names = NULL;
    const struct gguf_tensor **order = NULL;
    uint32_t magic;
    uint64_t nt, nkv;
    int rc;

    memset(g, 0, sizeof *g);
    g->alignment = 32;
    if ((rc = u32(&c, &magic, "magic")))
        return rc;
    if (magic != 0x46554747u)  /* "GGUF" */
        return fail(&c, "not a GGUF file (no 'GGUF' magic)");
    if ((rc = u32(&c, &g->version, "version")))
        return rc;
    if (g->version != 2 && g->version != 3) {
        if (g->version >= 0x01000000u)
            return fail(&c, "big-endian GGUF is not supported");
        return fail(&c, "GGUF version %u is not supported (2 and 3 are)", g->version);
    }
    if ((rc = u64(&c, &nt, "tensor count")) || (rc = u64(&c, &nkv, "metadata count")))
        return rc;
    if (nt > GGUF_MAX_TENSORS || nkv > GGUF_MAX_KV)
        return fail(&c, "%" PRIu64 " tensors and %" PRIu64 " metadata entries (limits %u, %u)",
                    nt, nkv, GGUF_MAX_TENSORS, GGUF_MAX_KV);
    g->kv = calloc(nkv ? nkv : 1, sizeof *g->kv);
    g->t = calloc(nt ? nt : 1, sizeof *g->t);
    names = calloc((nkv > nt ? nkv : nt) + 1, sizeof *names);
    order = calloc(nt + 1, sizeof *order);
    if (!g->kv || !g->t || !names || !order) {
        snprintf(err, errlen, "out of memory");
        rc = -ENOMEM;
        goto out;
    }
    for (; g->n_kv < nkv; g->n_kv++)
        if ((rc = parse_kv(&c, &g->kv[g->n_kv]))) {
            g->n_kv++;  /* its key may be allocated */
            goto out;
        }
    for (size_t i = 0; i < g->n_kv; i++)
        names[i] = g->kv[i].key;
    if ((rc = unique(&c, names, g->n_kv, "metadata key")))
        goto out;
    const struct gguf_kv *al = gguf_kv(g, "general.alignment");
    if (al) {
        uint32_t a = al->type == GGUF_U32 ? (uint32_t)le(al->p, 4) : 0;
        if (a == 0 || (a & (a - 1)) || a > (1u << 20)) {
            rc = fail(&c, "general.alignment must be a u32 power of two up to 1 MB");
            goto out;
        }
        g->alignment = a;
    }
    for (; g->n_tensors < nt; g->n_tensors++)
        if ((rc = parse_tensor(&c, &g->t[g->n_tensors]))) {
            g->n_tensors++;
            goto out;
        }
    for (size_t i = 0; i < g->n_tensors; i++)
        names[i] = g->t[i].name;
    if ((rc = unique(&c, names, g->n_tensors, "tensor name")))
        goto out;
    /* The data region starts at the next multiple of the alignment. */
    size_t start = c.off + (g->alignment - c.off % g->alignment) % g->alignment;
    if (start > len) {
        rc = fail(&c, "the data region starts past the end of the file");
        goto out;
    }
    size_t data_len = len - start;
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->t[i];
        if (t->offset % g->alignment || t->offset > data_len || t->nbytes > data_len - t->offset) {
            rc = fail(&c, "tensor '%s': data [%" PRIu64 ", +%" PRIu64 ") is unaligned or past "
                      "the end of the file (%zu data bytes)", t->name, t->offset, t->nbytes,
                      data_len);
            goto out;
        }
        t->data = c.p + start + t->offset;
        order[i] = t;
    }
    qsort(order, g->n_tensors, sizeof *order, by_offset);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset) {
            rc = fail(&c, "tensors '%s' and '%s' overlap", order[i - 1]->name, order[i]->name);
            goto out;
        }
    rc = 0;
out:
    free(names);
    free(order);
    if (rc)
        gguf_close(g);
    return rc;
}

int gguf_open(struct gguf *g, const char *path, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    int e = fd < 0 ? errno : fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (e) {
        snprintf(err, errlen, "%s: %s", path, e == EINVAL ? "not a regular file" : strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && map == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        return -EIO;
    }
    char e2[1024];
    int rc = gguf_parse(g, map ? map : "", len, e2, sizeof e2);
    if (rc) {
        snprintf(err, errlen, "%s: %s", path, e2);
        if (map)
            munmap(map, len);
        return rc;
    }
    g->map = map;
    g->map_len = len;
    return 0;
}

void gguf_close(struct gguf *g)
{
    for (size_t i = 0; g->kv && i < g->n_kv; i++)
        free(g->kv[i].key);
    for (size_t i = 0; g->t && i < g->n_tensors; i++)
        free(g->t[i].name);
    free(g->kv);
    free(g->t);
    if (g->map)
        munmap(g->map, g->map_len);
    memset(g, 0, sizeof *g);
}

int gguf_is_gguf(const char *path)
{
    unsigned char m[4];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read(fd, m, 4) == 4 &&
             memcmp(m, "GGUF", 4) == 0;
    close(fd);
    return ok;
}

const struct gguf_kv *gguf_kv(const struct gguf *g, const char *key)
{
    for (size_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0)
            return &g->kv[i];
    return NULL;
}

const struct gguf_tensor *gguf_tensor(const struct gguf *g, const char *name)
{
    for (size_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->t[i].name, name) == 0)
            return &g->t[i];
    return NULL;
}

/* ---- typed metadata ----------------------------------------------------------- */

static int wrong(const struct gguf_kv *kv, const char *want, char *err, size_t errlen)
{
    snprintf(err, errlen, "metadata '%s' is %s%s%s, expected %s", kv->key,
             gguf_vtype_name(kv->type), kv->type == GGUF_ARRAY ? " of " : "",
             kv->type == GGUF_ARRAY ? gguf_vtype_name(kv->atype) : "", want);
    return -EINVAL;
}

static bool int_type(enum gguf_vtype t)
{
    return t <= GGUF_I32 || t == GGUF_U64 || t == GGUF_I64;
}

static int64_t int_value(enum gguf_vtype t, const uint8_t *p, bool *range_ok)
{
    uint64_t u = le(p, (int)scalar_size(t));
    *range_ok = true;
    switch (t) {
    case GGUF_I8: return (int8_t)u;
    case GGUF_I16: return (int16_t)u;
    case GGUF_I32: return (int32_t)u;
    case GGUF_I64: return (int64_t)u;
    case GGUF_U64:
        *range_ok = u <= INT64_MAX;
        return (int64_t)(u & INT64_MAX);
    default: return (int64_t)u;
    }
}

int gguf_get_int(const struct gguf *g, const char *key, int64_t *out, char *err, size_t errlen)
{
    const struct gguf_kv *kv = gguf_kv(g, key);
    bool ok;
    if (!kv)
        return -ENOENT;
    if (!int_type(kv->type))
        return wrong(kv, "an integer", err, errlen);
    *out = int_value(kv->type, kv->p, &ok);
    if (!ok) {
        snprintf(err, errlen, "metadata '%s' is out of range", key);
        return -EINVAL;
    }
    return 0;
}

int gguf_get_real(const struct gguf *g, const char *key, double *out, char *err, size_t errlen)
{
    const struct gguf_kv *kv = gguf_kv(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type == GGUF_F32) {
        uint32_t u = (uint32_t)le(kv->p, 4);
        float f;
        memcpy(&f, &u, sizeof f);
        *out = f;
    } else if (kv->type == GGUF_F64) {
        uint64_t u = le(kv->p, 8);
        memcpy(out, &u, sizeof *out);
    } else {
        return wrong(kv, "f32 or f64", err, errlen);
    }
    if (!isfinite(*out)) {
        snprintf(err, errlen, "metadata '%s' is not finite", key);
        return -EINVAL;
    }
    return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, int *out, char *err, size_t errlen)
{
    const struct gguf_kv *kv = gguf_kv(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != GGUF_BOOL)
        return wrong(kv, "bool", err, errlen);
    *out = kv->p[0] != 0;
    return 0;
}

int gguf_get_str(const struct gguf *g, const char *key, const char **s, size_t *len, char *err,
                 size_t errlen)
{
    const struct gguf_kv *kv = gguf_kv(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != GGUF_STRING)
        return wrong(kv, "string", err, errlen);
    *s = (const char *)kv->p;
    *len = (size_t)kv->n;
    return 0;
}

int gguf_str_array(const struct gguf_kv *kv, int (*fn)(uint64_t i, const char *s, size_t len,
                                                       void *arg), void *arg)
{
    const uint8_t *p = kv->p;
    for (uint64_t i = 0; i < kv->n; i++) {
        uint64_t n = le(p, 8);  /* validated by gguf_parse */
        int rc = fn(i, (const char *)p + 8, (size_t)n, arg);
        if (rc)
            return rc;
        p += 8 + n;
    }
    return 0;
}

int64_t gguf_int_at(const struct gguf_kv *kv, uint64_t i)
{
    bool ok;
    size_t es = scalar_size(kv->atype);
    return int_value(kv->atype, kv->p + i * es, &ok);
}

/* ---- tensor rows -------------------------------------------------------------- */

float gguf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023;
    float f;
    if (exp == 0) {
        f = ldexpf((float)man, -24);  /* zero or subnormal: exact */
        return sign ? -f : f;
    }
    uint32_t u = exp == 31 ? sign | 0x7F800000u | man << 13 : sign | (exp + 112) << 23 | man << 13;
    memcpy(&f, &u, sizeof f);
    return f;
}

void gguf_row_q4(const struct gguf_tensor *t, int64_t r, uint8_t *q, float *d, float *m)
{
    unsigned bytes = t->type == GGUF_T_Q4_0 ? 18 : 20;
    const uint8_t *b = t->data + (uint64_t)r * t->row_bytes;
    for (int64_t k = 0; k < t->ne[0] / 32; k++, b += bytes) {
        d[k] = gguf_f16_to_f32((uint16_t)le(b, 2));
        m[k] = t->type == GGUF_T_Q4_0 ? -8.0f * d[k] : gguf_f16_to_f32((uint16_t)le(b + 2, 2));
        const uint8_t *qs = b + bytes - 16;
        /* Byte j holds element j (low nibble) and element j + 16 (high). */
        for (int j = 0; j < 16; j++) {
            q[k * 32 + j] = qs[j] & 15;
            q[k * 32 + j + 16] = qs[j] >> 4;
        }
    }
}

void gguf_row_f32(const struct gguf_tensor *t, int64_t r, float *out)
{
    const uint8_t *p = t->data + (uint64_t)r * t->row_bytes;
    int64_t n = t->ne[0];
    switch (t->type) {
    case GGUF_T_F32:
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)le(p + 4 * i, 4);
            memcpy(&out[i], &u, sizeof u);
        }
        break;
    case GGUF_T_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = gguf_f16_to_f32((uint16_t)le(p + 2 * i, 2));
        break;
    case GGUF_T_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)le(p + 2 * i, 2) << 16;
            memcpy(&out[i], &u, sizeof u);
        }
        break;
    case GGUF_T_Q8_0:
        for (int64_t k = 0; k < n / 32; k++, p += 34) {
            float d = gguf_f16_to_f32((uint16_t)le(p, 2));
            for (int j = 0; j < 32; j++)
                out[k * 32 + j] = (float)(int8_t)p[2 + j] * d;
        }
        break;
    case GGUF_T_Q4_0:
    case GGUF_T_Q4_1: {
        float d[1], m[1];
        uint8_t q[32];
        struct gguf_tensor one = *t;
        for (int64_t k = 0; k < n / 32; k++) {
            /* One block at a time through gguf_row_q4: a 32-wide view of the row. */
            one.ne[0] = 32;
            one.row_bytes = t->type == GGUF_T_Q4_0 ? 18 : 20;
            one.data = p + (uint64_t)k * one.row_bytes;
            gguf_row_q4(&one, 0, q, d, m);
            for (int j = 0; j < 32; j++)
                out[k * 32 + j] = (float)q[j] * d[0] + m[0];
        }
        break;
    }
    }
}
