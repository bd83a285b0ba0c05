/* npu-layout — weight pools, position records, embedding rows and the attnpos
 * instruction patch (the laws are stated in npu-layout.h). */
#include "engine/device/xrt/npu-layout.h"
#include "engine/err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

uint64_t eng_npu_std_perm_src(uint64_t c, uint64_t in_dim)
{
    uint64_t per_band = in_dim / 128, ncol = in_dim / 256;
    uint64_t rb = 2 * (c / per_band) + c % 2, kt = (c % per_band) / 2;
    return rb * ncol + kt;
}

static void tensor_name(char *out, size_t len, const char *pattern, int layer)
{
    const char *l = strstr(pattern, "{l}");
    if (!l) {
        snprintf(out, len, "%s", pattern);
        return;
    }
    snprintf(out, len, "%.*s%d%s", (int)(l - pattern), pattern, layer, l + 3);
}

int eng_npu_pack(const eng_st *st, const struct eng_kset_op *ops, int n_ops, int layer,
                 uint8_t *dst, size_t dst_len, char *err, size_t errlen)
{
    for (int i = 0; i < n_ops; i++) {
        const struct eng_kset_op *op = &ops[i];
        char name[160];
        tensor_name(name, sizeof name, op->tensor, layer);
        const struct eng_st_tensor *t = eng_st_find(st, name);
        if (!t)
            return eng__fail(err, errlen, -ENOENT, "%s: no tensor '%s' (packing plan op %d)",
                             eng_st_path(st), name, i);
        if (op->kind == ENG_KSET_OP_PUT) {
            if (t->nbytes > op->cap || op->dst + t->nbytes > dst_len)
                return eng__fail(err, errlen, -EINVAL,
                                 "%s: '%s' is %llu bytes; its slot holds %llu at %llu of %zu",
                                 eng_st_path(st), name, (unsigned long long)t->nbytes,
                                 (unsigned long long)op->cap, (unsigned long long)op->dst,
                                 dst_len);
            memcpy(dst + op->dst, t->data, t->nbytes);
            continue;
        }
        /* std_perm: a Q4NX tensor is I8 [num_chunks, 5120] (engine/model/q4nx.h). */
        if (t->dtype != ENG_ST_I8 || t->n_dims != 2 || t->shape[1] != ENG_NPU_CHUNK)
            return eng__fail(err, errlen, -EINVAL,
                             "%s: '%s' is not a Q4_1 chunk tensor (I8 [n, 5120]); the kernel "
                             "set streams it as q4_1", eng_st_path(st), name);
        uint64_t have = (uint64_t)t->shape[0];
        if (op->chunk0 + op->nch > have)
            return eng__fail(err, errlen, -EINVAL,
                             "%s: '%s' has %llu chunks; the packing plan reads %llu from %llu",
                             eng_st_path(st), name, (unsigned long long)have,
                             (unsigned long long)op->nch, (unsigned long long)op->chunk0);
        if (op->dst + op->nch * ENG_NPU_CHUNK > dst_len)
            return eng__fail(err, errlen, -EINVAL, "packing '%s': %llu chunks at %llu overflow "
                             "a %zu-byte pool", name, (unsigned long long)op->nch,
                             (unsigned long long)op->dst, dst_len);
        /* The file raster must hold whole bands of the plan's K. */
        uint64_t ncol = op->in_dim / 256;
        if (op->nch % (op->in_dim / 128) || (op->nch / ncol) * ncol != op->nch)
            return eng__fail(err, errlen, -EINVAL, "packing '%s': %llu chunks is not a whole "
                             "number of 64-row bands of K = %llu", name,
                             (unsigned long long)op->nch, (unsigned long long)op->in_dim);
        const uint8_t *src = (const uint8_t *)t->data + op->chunk0 * ENG_NPU_CHUNK;
        for (uint64_t c = 0; c < op->nch; c++) {
            uint64_t f = eng_npu_std_perm_src(c, op->in_dim);
            memcpy(dst + op->dst + c * ENG_NPU_CHUNK, src + f * ENG_NPU_CHUNK, ENG_NPU_CHUNK);
        }
    }
    return 0;
}

void eng_npu_attn_window(uint64_t pos, uint64_t window, uint64_t *start, uint64_t *nf)
{
    uint64_t s = (window && pos + 1 > window) ? pos + 1 - window : 0;
    uint64_t valid = pos - s;
    *start = s;
    *nf = valid ? valid : 1;
}

void eng_npu_ptab(uint8_t *dst, int rows, uint64_t per_row, const double *inv_freq,
                  int n_inv_freq, uint64_t window)
{
    for (int p = 0; p < rows; p++) {
        uint8_t *row = dst + (uint64_t)p * per_row;
        memset(row, 0, per_row);
        uint64_t s, nf;
        eng_npu_attn_window((uint64_t)p, window, &s, &nf);
        int32_t head[2] = {(int32_t)((uint64_t)p - s), (int32_t)nf};
        memcpy(row, head, sizeof head);
        for (int i = 0; i < n_inv_freq; i++) {
            double a = (double)p * inv_freq[i];
            float c = (float)cos(a), sn = (float)sin(a);
            memcpy(row + 512 + 4 * (size_t)i, &c, 4);
            memcpy(row + 512 + 4 * (size_t)(n_inv_freq + i), &sn, 4);
        }
    }
}

/* Word length of the op starting with word w. */
static size_t op_len(uint32_t w)
{
    switch (w) {
    case 0: return 6;
    case 1: return 12;
    case 3: return 7;
    case 0x80: return 4;
    case 0x81: return 12;
    default: return 1;
    }
}

int eng_npu_attn_table(const uint32_t *w, size_t n, uint64_t kv_row, struct eng_npu_patch out[4],
                       char *err, size_t errlen)
{
    int found[4] = {0};
    size_t bd = 0;
    int have_bd = 0;
    for (size_t i = 4; i < n; i += op_len(w[i])) {
        if (w[i] == 1) {
            bd = i;
            have_bd = 1;
        }
        if (w[i] != 0x81 || i + 11 >= n)
            continue;
        uint32_t reg = w[i + 6], arg = w[i + 8];
        uint64_t off = w[i + 10] & 0x7fffffffu;
        uint32_t flags = w[i + 10] & 0x80000000u;
        if (arg == 3 && off == 0) {
            if (!have_bd || bd + 4 >= n || w[bd + 2] + 4 != reg)
                return eng__fail(err, errlen, -EINVAL, "attnpos: no BD write before the KV "
                                 "window fill (word %zu)", i);
            out[0] = (struct eng_npu_patch){bd + 4, 0, 0};
            out[3] = (struct eng_npu_patch){i + 10, 3, flags};
            found[0]++;
            found[3]++;
        } else if (arg == 3 && off == kv_row) {
            out[1] = (struct eng_npu_patch){i + 10, 1, flags};
            found[1]++;
        } else if (arg == 3) {
            return eng__fail(err, errlen, -EINVAL, "attnpos: unexpected KV transfer at offset "
                             "%llu (word %zu)", (unsigned long long)off, i);
        } else if (arg == 5) {
            out[2] = (struct eng_npu_patch){i + 10, 2, flags};
            found[2]++;
        }
    }
    static const char *const what[4] = {"window length", "row drain", "record fill",
                                        "window offset"};
    for (int k = 0; k < 4; k++)
        if (found[k] != 1)
            return eng__fail(err, errlen, -EINVAL, "attnpos: %d %s sites in the instruction "
                             "stream, expected 1 (was it built for this kernel set's KV row "
                             "of %llu bytes?)", found[k], what[k], (unsigned long long)kv_row);
    return 0;
}

void eng_npu_attn_apply(uint32_t *w, const struct eng_npu_patch t[4], uint64_t pos,
                        uint64_t kv_row, uint64_t ptab_row, uint64_t window, uint64_t rb)
{
    uint64_t start, nf;
    eng_npu_attn_window(pos, window, &start, &nf);
    if (rb > 1) {
        /* Blocked walk: whole blocks holding the valid rows and the new one. */
        uint64_t valid = pos - start;
        nf = rb * (valid / rb + 1) - 1;
    }
    for (int i = 0; i < 4; i++) {
        uint64_t v = t[i].kind == 0   ? nf * kv_row / 4
                     : t[i].kind == 1 ? pos * kv_row
                     : t[i].kind == 2 ? pos * ptab_row
                                      : start * kv_row;
        w[t[i].word] = (uint32_t)v | t[i].flags;
    }
}

int eng_npu_embed_row(const eng_st *st, const char *tensor, int token, int hidden, float *out,
                      char *err, size_t errlen)
{
    const struct eng_st_tensor *t = eng_st_find(st, tensor);
    if (!t || t->dtype != ENG_ST_BF16 || t->n_dims != 2 || t->shape[1] != hidden)
        return eng__fail(err, errlen, -EINVAL, "%s: '%s' is not a BF16 [vocab, %d] embedding",
                         eng_st_path(st), tensor, hidden);
    if (token < 0 || token >= t->shape[0])
        return eng__fail(err, errlen, -EINVAL, "token id %d outside the vocabulary of %lld",
                         token, (long long)t->shape[0]);
    const uint8_t *row = (const uint8_t *)t->data + (size_t)token * (size_t)hidden * 2;
    for (int i = 0; i < hidden; i++) {
        uint16_t h;
        memcpy(&h, row + 2 * (size_t)i, 2);
        uint32_t u = (uint32_t)h << 16;
        memcpy(&out[i], &u, 4);
    }
    return 0;
}
