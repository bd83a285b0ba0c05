/* The Q4NX (safetensors) writer and the Q4_1 chunk packer. See q4nx-write.h for
 * the contract and docs/model-minicpm5.md §3.9 for the layout this must match byte for
 * byte: the packer is the one place where a mistake would silently produce a pack
 * that loads but computes nonsense, so the layout comments below restate it. */
#include "tools/pack/q4nx-write.h"
#include "tools/pack/layout.h"
#include "util/buf.h"
#include "util/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

uint16_t q4nx_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40);  /* NaN: keep it NaN, make it quiet */
    u += 0x7FFFu + ((u >> 16) & 1);           /* round half to even */
    return (uint16_t)(u >> 16);
}

float q4nx_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

int64_t q4nx_num_chunks(int64_t rows, int64_t cols)
{
    return rows / Q4NX_CHUNK_ROWS * ((cols + Q4NX_CHUNK_COLS - 1) / Q4NX_CHUNK_COLS);
}

uint64_t q4nx_tensor_bytes(const struct q4nx_tensor *t)
{
    if (t->kind == Q4NX_BF16)
        return (uint64_t)(t->rows ? t->rows : 1) * (uint64_t)t->cols * 2;
    if (t->rows <= 0 || t->cols <= 0 || t->rows % Q4NX_CHUNK_ROWS != 0)
        return 0;
    return (uint64_t)q4nx_num_chunks(t->rows, t->cols) * Q4NX_CHUNK_BYTES;
}

static void put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* One chunk: rows 0..31 of `w` (stride `stride`), columns c0 .. c0+255, of which
 * the first `ncols` are real and the rest zero padding. */
static void pack_chunk(const float *w, int64_t stride, int64_t c0, int64_t ncols, uint8_t *out)
{
    uint8_t *dq = out, *mq = out + 512, *nib = out + 1024;
    memset(nib, 0, 4096);
    for (int g = 0; g < 8; g++) {
        for (int r = 0; r < 32; r++) {
            const float *row = w + (int64_t)r * stride + c0;
            float v[32];
            for (int i = 0; i < 32; i++) {
                int64_t c = g * 32 + i;
                v[i] = c < ncols ? row[c] : 0.0f;
            }
            float mn = v[0], mx = v[0];
            for (int i = 1; i < 32; i++) {
                mn = v[i] < mn ? v[i] : mn;
                mx = v[i] > mx ? v[i] : mx;
            }
            /* gguf-py's Q4_1: the nibbles come from the unrounded d and m, which
             * are only then narrowed (there to F16, the converter then to BF16). */
            float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            put_le16(dq + 2 * (g * 32 + r), q4nx_f32_to_bf16(d));
            put_le16(mq + 2 * (g * 32 + r), q4nx_f32_to_bf16(mn));
            for (int i = 0; i < 32; i++) {
                float qf = floorf((v[i] - mn) * id + 0.5f);
                int q = qf < 0.0f ? 0 : qf > 15.0f ? 15 : (int)qf;
                int c = g * 32 + i;
                /* Rows pair up in a byte (even row low nibble, odd row high); the
                 * 16-row halves of the chunk are 2,048 bytes apart. */
                size_t b = (size_t)(r / 16) * 2048 + (size_t)c * 8 + (size_t)(r % 16) / 2;
                nib[b] |= (uint8_t)(r % 2 == 0 ? q : q << 4);
            }
        }
    }
}

void q4nx_pack_rowblock(const float *w, int64_t cols, uint8_t *out)
{
    int64_t ncol = (cols + Q4NX_CHUNK_COLS - 1) / Q4NX_CHUNK_COLS;
    for (int64_t j = 0; j < ncol; j++) {
        int64_t c0 = j * Q4NX_CHUNK_COLS;
        int64_t n = cols - c0 < Q4NX_CHUNK_COLS ? cols - c0 : Q4NX_CHUNK_COLS;
        pack_chunk(w, cols, c0, n, out + j * Q4NX_CHUNK_BYTES);
    }
}

int pack_q4nx_tensor(const char *who, const struct pack_spec *s, struct q4nx_tensor *t)
{
    int mm = pack_role_is_matmul(s->role);
    if (mm && s->rows % Q4NX_CHUNK_ROWS != 0) {
        fprintf(stderr, "%s: tensor '%s' has %" PRId64 " rows: Q4NX needs a multiple of %d\n", who,
                s->name, s->rows, Q4NX_CHUNK_ROWS);
        return -EINVAL;
    }
    *t = (struct q4nx_tensor){.kind = mm ? Q4NX_Q4_1 : Q4NX_BF16, .rows = s->rows, .cols = s->cols};
    snprintf(t->name, sizeof t->name, "%s", s->name);
    return 0;
}

void q4nx_put_bf16(const float *x, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++)
        put_le16(out + 2 * i, q4nx_f32_to_bf16(x[i]));  /* little-endian on any host */
}

size_t q4nx_encode_rows(const struct q4nx_tensor *t, const float *rows, int64_t nr,
                        uint8_t *out)
{
    if (t->kind == Q4NX_Q4_1) {
        q4nx_pack_rowblock(rows, t->cols, out);
        return (size_t)((t->cols + Q4NX_CHUNK_COLS - 1) / Q4NX_CHUNK_COLS) * Q4NX_CHUNK_BYTES;
    }
    q4nx_put_bf16(rows, (size_t)nr * (size_t)t->cols, out);
    return (size_t)nr * (size_t)t->cols * 2;
}

void q4nx_pack_rowblock_codes(const uint8_t *q, const uint16_t *d, const uint16_t *m,
                              int64_t cols, uint8_t *out)
{
    int64_t ng = cols / 32, ncol = (cols + Q4NX_CHUNK_COLS - 1) / Q4NX_CHUNK_COLS;
    for (int64_t j = 0; j < ncol; j++) {
        uint8_t *dq = out + j * Q4NX_CHUNK_BYTES, *mq = dq + 512, *nib = dq + 1024;
        memset(dq, 0, Q4NX_CHUNK_BYTES);  /* padding groups: d = m = 0, codes 0 */
        for (int g = 0; g < 8 && j * 8 + g < ng; g++) {
            int64_t gi = j * 8 + g;
            for (int r = 0; r < 32; r++) {
                put_le16(dq + 2 * (g * 32 + r), d[r * ng + gi]);
                put_le16(mq + 2 * (g * 32 + r), m[r * ng + gi]);
                for (int i = 0; i < 32; i++) {
                    int c = g * 32 + i;
                    uint8_t v = q[(int64_t)r * cols + gi * 32 + i] & 15;
                    /* The nibble placement of pack_chunk. */
                    size_t b = (size_t)(r / 16) * 2048 + (size_t)c * 8 + (size_t)(r % 16) / 2;
                    nib[b] |= (uint8_t)(r % 2 == 0 ? v : v << 4);
                }
            }
        }
    }
}

/* ---- the container -------------------------------------------------------- */

/* The JSON header, keys in data order, padded with spaces so the data starts at
 * an 8-byte boundary, as safetensors' own serializer does. */
static int build_header(const struct q4nx_tensor *t, size_t n, char **out, size_t *outlen)
{
    ut_buf b = {0};
    int rc = ut_buf_printf(&b, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (t[i].kind == Q4NX_BF16 && t[i].rows == 0)
            rc = ut_buf_printf(&b, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%" PRId64 "]",
                               t[i].name, t[i].cols);
        else if (t[i].kind == Q4NX_BF16)
            rc = ut_buf_printf(&b,
                               ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%" PRId64 ",%" PRId64 "]",
                               t[i].name, t[i].rows, t[i].cols);
        else
            rc = ut_buf_printf(&b, ",\"%s\":{\"dtype\":\"I8\",\"shape\":[%" PRId64 ",%d]",
                               t[i].name, q4nx_num_chunks(t[i].rows, t[i].cols),
                               Q4NX_CHUNK_BYTES);
        if (rc == 0)
            rc = ut_buf_printf(&b, ",\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                               t[i].begin, t[i].end);
    }
    if (rc == 0)
        rc = ut_buf_printf(&b, "}");
    while (rc == 0 && b.n % 8 != 0)
        rc = ut_buf_printf(&b, " ");
    if (rc) {
        ut_buf_free(&b);
        return rc;
    }
    *out = b.p;
    *outlen = b.n;
    return 0;
}

int q4nx_writer_open(struct q4nx_writer *w, const char *path, struct q4nx_tensor *t, size_t n)
{
    char *hdr = NULL;
    size_t hlen = 0;
    uint64_t off = 0;
    int rc;

    memset(w, 0, sizeof *w);
    for (size_t i = 0; i < n; i++) {
        uint64_t sz = q4nx_tensor_bytes(&t[i]);
        if (sz == 0)
            return -EINVAL;
        t[i].begin = off;
        t[i].end = off + sz;
        off += sz;
    }
    if ((rc = build_header(t, n, &hdr, &hlen)))
        return rc;
    w->f = fopen(path, "wb");
    if (!w->f) {
        rc = -errno;
        goto out;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    if (fwrite(len8, 1, 8, w->f) != 8 || fwrite(hdr, 1, hlen, w->f) != hlen) {
        rc = -EIO;
        fclose(w->f);
        w->f = NULL;
        goto out;
    }
    w->t = t;
    w->n = n;
    rc = 0;
out:
    free(hdr);
    return rc;
}

int q4nx_writer_append(struct q4nx_writer *w, const void *data, size_t len)
{
    if (!w->f)
        return -EBADF;
    if (w->cur >= w->n || w->pos + len > w->t[w->n - 1].end)
        return -EOVERFLOW;
    if (len && fwrite(data, 1, len, w->f) != len)
        return -EIO;
    w->pos += len;
    while (w->cur < w->n && w->pos >= w->t[w->cur].end)
        w->cur++;
    return 0;
}

int q4nx_writer_close(struct q4nx_writer *w)
{
    if (!w->f)
        return 0;
    int rc = w->n && w->pos != w->t[w->n - 1].end ? -EPROTO : 0;
    if (fclose(w->f) != 0 && rc == 0)
        rc = -EIO;
    w->f = NULL;
    return rc;
}

void q4nx_progress_start(struct q4nx_progress *pr, const char *who, uint64_t total)
{
    *pr = (struct q4nx_progress){.who = who, .total = total, .next = total / 20,
                                 .t0 = ut_now_s()};
}

void q4nx_progress_add(struct q4nx_progress *pr, uint64_t n)
{
    pr->done += n;
    if (pr->total < (64u << 20) || pr->done < pr->next)
        return;
    pr->next += pr->total / 20;
    fprintf(stderr, "%s: %3d%% (%" PRIu64 " of %" PRIu64 " MB) %.1f s\n", pr->who,
            (int)(100 * pr->done / pr->total), pr->done >> 20, pr->total >> 20,
            ut_now_s() - pr->t0);
}
