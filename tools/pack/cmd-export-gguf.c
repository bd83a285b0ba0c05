/* minicpmd-pack export-gguf PACK OUT.gguf [--type q4_1|q4_0]
 *
 * A Q4NX pack as a llama-architecture GGUF v3, so that llama.cpp can run the same
 * model (tools/bench/peer.sh compares the two engines on it).
 *
 * --type q4_1 (default) is exact: each Q4_1 (group, row) of model.q4nx becomes a
 * GGUF Q4_1 block with the same 32 codes, and d and m go BF16 -> F16, which is
 * exact for every value in F16's normal range (BF16 has 8 significant bits, F16
 * 11); a value outside it is rounded and counted (the summary line says how many;
 * none in a gen pack). --type q4_0 re-quantizes the dequantized weights to Q4_0
 * (llama.cpp's fastest CPU format: the same shapes, not the same values), with the
 * reference quantizer's rule (d = the group's value of largest magnitude / -8).
 * Q and K rows get llama.cpp's interleaved-pair order (gguf-import.h); the
 * embedding stays BF16, the norms become F32, lm_head is output.weight.
 *
 * The tokenizer goes into tokenizer.ggml.* (model gpt2, tokens by id with
 * token_type normal / control (special added) / user-defined (other added), ids
 * the tokenizer lacks as unused "[PAD<id>]", merges, bos/eos from config.json) with
 * pre-tokenizer "llama-bpe": llama.cpp needs one of its own names, and Llama 3's
 * split is MiniCPM5's but for digit runs (MiniCPM5 splits them into threes first,
 * the same pieces). chat_template.jinja becomes tokenizer.chat_template. */
#include "engine/err.h"
#include "engine/model/q4nx.h"
#include "engine/model/safetensors.h"
#include "tools/pack/fsutil.h"
#include "tools/pack/gguf-import.h"
#include "tools/pack/gguf.h"
#include "tools/pack/layout.h"
#include "tools/pack/pack.h"
#include "tools/pack/q4nx-write.h"
#include "util/buf.h"
#include "util/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ME "minicpmd-pack export-gguf"
#define ALIGN 32

/* float -> F16 bits, round to nearest even; *exact = 0 when that changed it. */
static uint16_t f32_to_f16(float x, int *exact)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    float a = fabsf(x);
    uint16_t h;
    if (a != a) {
        h = 0x7E00;
    } else if (a >= 65520.0f) {
        h = 0x7C00;  /* overflow: inf */
    } else if (a < ldexpf(1.0f, -14)) {
        /* Subnormal: units of 2^-24, nearest even (rintf in the default mode). */
        h = (uint16_t)rintf(a * ldexpf(1.0f, 24));
    } else {
        int e;
        float m = frexpf(a, &e);            /* a = m 2^e, m in [0.5, 1) */
        float q = rintf(ldexpf(m, 11));     /* 11 significant bits */
        if (q >= 2048.0f) {
            q /= 2;
            e++;
        }
        h = (uint16_t)(((e + 14) << 10) | ((int)q - 1024));
        if (e + 14 >= 31)
            h = 0x7C00;
    }
    h |= sign;
    *exact = gguf_f16_to_f32(h) == x;
    return h;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* ---- the header ------------------------------------------------------------------ */

struct hdr {
    ut_buf b;
    uint64_t n_kv;
    int rc;
};

static void raw(struct hdr *h, const void *p, size_t n)
{
    if (h->rc == 0)
        h->rc = ut_buf_add(&h->b, p, n);
}

static void u32v(struct hdr *h, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    raw(h, b, 4);
}

static void u64v(struct hdr *h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    raw(h, b, 8);
}

static void strv(struct hdr *h, const char *s, size_t n)
{
    u64v(h, n);
    raw(h, s, n);
}

static void key(struct hdr *h, const char *k, enum gguf_vtype t)
{
    strv(h, k, strlen(k));
    u32v(h, t);
    h->n_kv++;
}

static void kv_u32(struct hdr *h, const char *k, uint32_t v)
{
    key(h, k, GGUF_U32);
    u32v(h, v);
}

static void kv_f32(struct hdr *h, const char *k, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    key(h, k, GGUF_F32);
    u32v(h, u);
}

static void kv_str(struct hdr *h, const char *k, const char *v, size_t n)
{
    key(h, k, GGUF_STRING);
    strv(h, v, n);
}

/* ---- the tokenizer ----------------------------------------------------------------- */

static int json_int(json_t *v, long long *out)
{
    if (json_is_array(v))
        v = json_array_get(v, 0);
    if (!json_is_integer(v))
        return -1;
    *out = json_integer_value(v);
    return 0;
}

static int tokenizer_kv(struct hdr *h, const char *dir, json_t *cfg, int vocab, char *err,
                        size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_error_t je;
    json_t *tj = json_load_file(path, 0, &je);
    const char **str = calloc((size_t)vocab, sizeof *str);
    int32_t *type = calloc((size_t)vocab, sizeof *type);
    int rc = -EINVAL;
    if (!tj || !str || !type) {
        snprintf(err, errlen, "%.1024s: %s", path, tj ? "out of memory" : je.text);
        goto out;
    }
    json_t *model = json_object_get(tj, "model"), *vocab_j = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges"), *added = json_object_get(tj, "added_tokens");
    if (!json_is_object(vocab_j) || !json_is_array(merges)) {
        snprintf(err, errlen, "%.1024s: not a BPE tokenizer.json (model.vocab, model.merges)",
                 path);
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(vocab_j, k, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= vocab) {
            snprintf(err, errlen, "%.1024s: vocab '%.40s' has an id outside 0..%d", path, k,
                     vocab - 1);
            goto out;
        }
        str[id] = k;
        type[id] = 1;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        const char *c = json_string_value(json_object_get(v, "content"));
        if (!c || id < 0 || id >= vocab) {
            snprintf(err, errlen, "%.1024s: added_tokens[%zu]: no content, or id outside 0..%d",
                     path, i, vocab - 1);
            goto out;
        }
        str[id] = c;
        type[id] = json_is_true(json_object_get(v, "special")) ? 3 : 4;
    }
    kv_str(h, "tokenizer.ggml.model", "gpt2", 4);
    kv_str(h, "tokenizer.ggml.pre", "llama-bpe", 9);
    key(h, "tokenizer.ggml.tokens", GGUF_ARRAY);
    u32v(h, GGUF_STRING);
    u64v(h, (uint64_t)vocab);
    for (int id = 0; id < vocab; id++) {
        char pad[32];
        if (!str[id]) {
            snprintf(pad, sizeof pad, "[PAD%d]", id);
            type[id] = 5;
        }
        strv(h, str[id] ? str[id] : pad, strlen(str[id] ? str[id] : pad));
    }
    key(h, "tokenizer.ggml.token_type", GGUF_ARRAY);
    u32v(h, GGUF_I32);
    u64v(h, (uint64_t)vocab);
    for (int id = 0; id < vocab; id++)
        u32v(h, (uint32_t)type[id]);
    key(h, "tokenizer.ggml.merges", GGUF_ARRAY);
    u32v(h, GGUF_STRING);
    u64v(h, json_array_size(merges));
    json_array_foreach(merges, i, v) {
        char buf[2048];
        const char *s = json_string_value(v);
        if (!s && json_is_array(v) && json_array_size(v) == 2) {
            snprintf(buf, sizeof buf, "%s %s", json_string_value(json_array_get(v, 0)) ?: "",
                     json_string_value(json_array_get(v, 1)) ?: "");
            s = buf;
        }
        if (!s) {
            snprintf(err, errlen, "%.1024s: merges[%zu] is neither \"a b\" nor [a, b]", path, i);
            goto out;
        }
        strv(h, s, strlen(s));
    }
    long long bos, eos;
    if (json_int(json_object_get(cfg, "bos_token_id"), &bos) == 0 && bos >= 0 && bos < vocab)
        kv_u32(h, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (json_int(json_object_get(cfg, "eos_token_id"), &eos) == 0 && eos >= 0 && eos < vocab)
        kv_u32(h, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    key(h, "tokenizer.ggml.add_bos_token", GGUF_BOOL);
    raw(h, "", 1);
    rc = h->rc;
out:
    json_decref(tj);
    free(str);
    free(type);
    return rc;
}

static int template_kv(struct hdr *h, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n;
    char *s = pack_read_all(f, &n);
    fclose(f);
    if (!s)
        return -ENOMEM;
    kv_str(h, "tokenizer.chat_template", s, n);
    free(s);
    return 0;
}

/* ---- the tensors ------------------------------------------------------------------- */

struct out_t {
    const struct pack_spec *s;
    char name[96];
    enum gguf_ttype type;
    uint64_t bytes, offset;
    const struct eng_st_tensor *src;
};

struct counts {
    uint64_t scales, inexact;
};

/* One row of a matmul weight as GGUF blocks. */
static void matmul_row(const struct eng_q4nx *q, int64_t r, enum gguf_ttype type, float *tmp,
                       uint8_t *out, struct counts *c)
{
    int64_t ng = q->cols / 32;
    if (type == GGUF_T_Q4_1) {
        const uint8_t *ch = NULL;
        for (int64_t g = 0; g < ng; g++) {
            if (g % 8 == 0)
                ch = eng_q4nx_chunk(q, r / 32, g / 8);
            uint8_t *b = out + g * 20;
            int e1, e2;
            put16(b, f32_to_f16(eng_q4nx_chunk_scale(ch, (int)(g % 8), (int)(r % 32)), &e1));
            put16(b + 2, f32_to_f16(eng_q4nx_chunk_min(ch, (int)(g % 8), (int)(r % 32)), &e2));
            c->scales++;
            c->inexact += !(e1 && e2);
            for (int j = 0; j < 16; j++) {
                int c0 = (int)(g % 8) * 32 + j;
                b[4 + j] = (uint8_t)(eng_q4nx_chunk_nibble(ch, (int)(r % 32), c0) |
                                     eng_q4nx_chunk_nibble(ch, (int)(r % 32), c0 + 16) << 4);
            }
        }
        return;
    }
    /* Q4_0 from the dequantized row: d = (value of largest magnitude) / -8, code
     * = min(15, trunc(x / d + 8.5)). */
    eng_q4nx_dequant_row(q, r, tmp);
    for (int64_t g = 0; g < ng; g++) {
        const float *x = tmp + g * 32;
        float amax = 0, mx = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                mx = x[j];
            }
        int ex;
        uint16_t dh = f32_to_f16(mx / -8.0f, &ex);
        float d = gguf_f16_to_f32(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t *b = out + g * 18;
        put16(b, dh);
        uint8_t qq[32];
        for (int j = 0; j < 32; j++) {
            float v = x[j] * id + 8.5f;
            int qi = (int)v;
            qq[j] = (uint8_t)(qi < 0 ? 0 : qi > 15 ? 15 : qi);
        }
        for (int j = 0; j < 16; j++)
            b[2 + j] = (uint8_t)(qq[j] | qq[j + 16] << 4);
    }
}

static int write_tensor(FILE *f, const struct out_t *o, const struct pack_arch *a, float *tmp,
                        uint8_t *row, struct counts *c, struct q4nx_progress *pr, char *err,
                        size_t errlen)
{
    const struct pack_spec *s = o->s;
    int64_t rows = s->rows ? s->rows : 1;
    uint64_t rb = o->bytes / (uint64_t)rows;
    struct eng_q4nx q;
    bool mm = pack_role_is_matmul(s->role);
    if (mm && eng_q4nx_init(&q, o->src->data, o->src->shape[0], s->rows, s->cols) != 0)
        return eng__fail(err, errlen, -EINVAL, "tensor '%s': not Q4_1 chunks of [%" PRId64
                         ", %" PRId64 "]", s->name, s->rows, s->cols);
    struct gguf_job j = {.spec = *s, .perm_heads = s->role == ROLE_Q ? a->heads
                                                  : s->role == ROLE_K ? a->kv_heads : 0};
    for (int64_t r = 0; r < rows; r++) {
        if (mm) {
            /* GGUF row r holds the pack's row whose permuted place is r. */
            int64_t src = r;
            if (j.perm_heads) {
                int64_t hd = a->head_dim, half = hd / 2, h = r / hd, i = r % hd;
                src = h * hd + (i % 2) * half + i / 2;
            }
            matmul_row(&q, src, o->type, tmp, row, c);
        } else {
            const uint8_t *p = (const uint8_t *)o->src->data + (uint64_t)r * (uint64_t)s->cols * 2;
            if (o->type == GGUF_T_BF16) {
                memcpy(row, p, rb);
            } else {
                for (int64_t i = 0; i < s->cols; i++) {
                    float x = q4nx_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
                    memcpy(row + 4 * i, &x, 4);
                }
            }
        }
        if (fwrite(row, 1, rb, f) != rb)
            return eng__fail(err, errlen, -EIO, "write failed");
        q4nx_progress_add(pr, rb);
    }
    static const uint8_t zeros[ALIGN];
    size_t pad = (size_t)((ALIGN - o->bytes % ALIGN) % ALIGN);
    if (pad && fwrite(zeros, 1, pad, f) != pad)
        return eng__fail(err, errlen, -EIO, "write failed");
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: minicpmd-pack export-gguf PACK OUT.gguf [--type q4_1|q4_0]\n\n"
               "Writes the Q4NX pack PACK as a llama GGUF v3 for llama.cpp: q4_1 (default)\n"
               "carries the pack's Q4_1 weights exactly; q4_0 re-quantizes them to Q4_0.\n"
               "Embedding BF16, norms F32, Q/K rows in llama.cpp's order, the tokenizer and\n"
               "chat template in the tokenizer.* metadata.\n");
}

int pack_cmd_export_gguf(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL;
    enum gguf_ttype type = GGUF_T_Q4_1;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
            const char *t = argv[++i];
            if (strcmp(t, "q4_1") != 0 && strcmp(t, "q4_0") != 0) {
                fprintf(stderr, ME ": --type must be q4_1 or q4_0\n");
                return 2;
            }
            type = strcmp(t, "q4_0") == 0 ? GGUF_T_Q4_0 : GGUF_T_Q4_1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, ME ": unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        } else if (!dir) {
            dir = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            fprintf(stderr, ME ": too many arguments\n");
            return 2;
        }
    }
    if (!dir || !out) {
        usage(stderr);
        return 2;
    }
    char err[4096], path[4096], tmp[4096];
    json_t *cfg = NULL;
    eng_st *st = NULL;
    struct pack_spec *specs = NULL;
    struct out_t *o = NULL;
    struct hdr h = {0};
    FILE *f = NULL;
    float *ftmp = NULL;
    uint8_t *row = NULL;
    int rc = 1;
    double t0 = ut_now_s();
    struct pack_arch a;
    json_error_t je;

    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!(cfg = json_load_file(path, 0, &je))) {
        fprintf(stderr, ME ": %s: %s\n", path, je.text);
        goto done;
    }
    if (pack_arch_from_config(cfg, path, &a, err, sizeof err)) {
        fprintf(stderr, ME ": %s\n", err);
        goto done;
    }
    snprintf(path, sizeof path, "%s/model.q4nx", dir);
    if (eng_st_open(path, &st, err, sizeof err)) {
        fprintf(stderr, ME ": %s (export-gguf needs a Q4NX pack)\n", err);
        goto done;
    }
    size_t n = pack_layout_count(&a);
    specs = calloc(n, sizeof *specs);
    o = calloc(n, sizeof *o);
    if (!specs || !o)
        goto oom;
    n = pack_layout(&a, specs);
    uint64_t off = 0, total = 0;
    int64_t maxcols = 0;
    for (size_t i = 0; i < n; i++) {
        const struct pack_spec *s = &specs[i];
        o[i].s = s;
        o[i].src = eng_st_find(st, s->name);
        if (!o[i].src && s->role == ROLE_LM_HEAD && a.tied)
            o[i].src = eng_st_find(st, "model.embed_tokens.weight");
        bool mm = pack_role_is_matmul(s->role);
        if (!o[i].src || (mm && o[i].src->dtype != ENG_ST_I8) ||
            (!mm && o[i].src->dtype != ENG_ST_BF16) || (mm && s->cols % 32)) {
            fprintf(stderr, ME ": %s: tensor '%s' missing, or not %s%s\n", path, s->name,
                    mm ? "Q4_1 chunks" : "BF16", mm ? " with a multiple of 32 columns" : "");
            goto done;
        }
        o[i].type = mm ? type : s->role == ROLE_EMBED ? GGUF_T_BF16 : GGUF_T_F32;
        int64_t rows = s->rows ? s->rows : 1;
        o[i].bytes = (uint64_t)rows * (mm ? (uint64_t)s->cols / 32 * (type == GGUF_T_Q4_1 ? 20 : 18)
                                          : (uint64_t)s->cols * (o[i].type == GGUF_T_F32 ? 4 : 2));
        o[i].offset = off;
        off += o[i].bytes + (ALIGN - o[i].bytes % ALIGN) % ALIGN;
        total += o[i].bytes;
        maxcols = s->cols > maxcols ? s->cols : maxcols;
        /* llama.cpp's names: the inverse of gguf-import.c's mapping. */
        static const char *const lname[] = {
            [ROLE_ATTN_NORM] = "attn_norm", [ROLE_Q] = "attn_q", [ROLE_K] = "attn_k",
            [ROLE_V] = "attn_v", [ROLE_O] = "attn_output", [ROLE_FFN_NORM] = "ffn_norm",
            [ROLE_GATE] = "ffn_gate", [ROLE_UP] = "ffn_up", [ROLE_DOWN] = "ffn_down"};
        if (s->role == ROLE_EMBED)
            snprintf(o[i].name, sizeof o[i].name, "token_embd.weight");
        else if (s->role == ROLE_NORM)
            snprintf(o[i].name, sizeof o[i].name, "output_norm.weight");
        else if (s->role == ROLE_LM_HEAD)
            snprintf(o[i].name, sizeof o[i].name, "output.weight");
        else
            snprintf(o[i].name, sizeof o[i].name, "blk.%d.%s.weight", s->layer, lname[s->role]);
    }

    /* Metadata. */
    double eps = 1e-6, theta = 10000.0;
    long long ctx = 4096;
    json_t *v;
    if (json_is_number(v = json_object_get(cfg, "rms_norm_eps")))
        eps = json_number_value(v);
    if (json_is_number(v = json_object_get(cfg, "rope_theta")))
        theta = json_number_value(v);
    if (json_is_integer(v = json_object_get(cfg, "max_position_embeddings")))
        ctx = json_integer_value(v);
    if ((v = json_object_get(cfg, "rope_scaling")) && !json_is_null(v)) {
        fprintf(stderr, ME ": %s/config.json: rope_scaling is not supported\n", dir);
        goto done;
    }
    kv_str(&h, "general.architecture", "llama", 5);
    kv_str(&h, "general.name", "minicpmd export", 15);
    kv_u32(&h, "general.alignment", ALIGN);
    kv_u32(&h, "general.file_type", type == GGUF_T_Q4_1 ? 3 : 2);
    kv_u32(&h, "llama.block_count", (uint32_t)a.layers);
    kv_u32(&h, "llama.context_length", (uint32_t)ctx);
    kv_u32(&h, "llama.embedding_length", (uint32_t)a.hidden);
    kv_u32(&h, "llama.feed_forward_length", (uint32_t)a.ffn);
    kv_u32(&h, "llama.attention.head_count", (uint32_t)a.heads);
    kv_u32(&h, "llama.attention.head_count_kv", (uint32_t)a.kv_heads);
    kv_u32(&h, "llama.attention.key_length", (uint32_t)a.head_dim);
    kv_u32(&h, "llama.attention.value_length", (uint32_t)a.head_dim);
    kv_u32(&h, "llama.rope.dimension_count", (uint32_t)a.head_dim);
    kv_u32(&h, "llama.vocab_size", (uint32_t)a.vocab);
    kv_f32(&h, "llama.rope.freq_base", (float)theta);
    kv_f32(&h, "llama.attention.layer_norm_rms_epsilon", (float)eps);
    if (tokenizer_kv(&h, dir, cfg, a.vocab, err, sizeof err)) {
        fprintf(stderr, ME ": %s\n", err);
        goto done;
    }
    if (template_kv(&h, dir) || h.rc)
        goto oom;

    /* File: header, tensor infos, padding, data. */
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    if (!(f = fopen(tmp, "wb"))) {
        fprintf(stderr, ME ": %s: %s\n", tmp, strerror(errno));
        goto done;
    }
    struct hdr top = {0};
    raw(&top, "GGUF", 4);
    u32v(&top, 3);
    u64v(&top, n);
    u64v(&top, h.n_kv);
    raw(&top, h.b.p, h.b.n);
    for (size_t i = 0; i < n; i++) {
        strv(&top, o[i].name, strlen(o[i].name));
        u32v(&top, o[i].s->rows ? 2 : 1);
        u64v(&top, (uint64_t)o[i].s->cols);
        if (o[i].s->rows)
            u64v(&top, (uint64_t)o[i].s->rows);
        u32v(&top, o[i].type);
        u64v(&top, o[i].offset);
    }
    while (top.rc == 0 && top.b.n % ALIGN)
        raw(&top, "", 1);
    if (top.rc || fwrite(top.b.p, 1, top.b.n, f) != top.b.n) {
        ut_buf_free(&top.b);
        fprintf(stderr, ME ": %s: write failed\n", tmp);
        goto done;
    }
    ut_buf_free(&top.b);
    ftmp = malloc((size_t)maxcols * sizeof *ftmp);
    row = malloc((size_t)maxcols * 4);
    if (!ftmp || !row)
        goto oom;
    struct counts c = {0};
    struct q4nx_progress pr;
    q4nx_progress_start(&pr, ME, total);
    for (size_t i = 0; i < n; i++)
        if (write_tensor(f, &o[i], &a, ftmp, row, &c, &pr, err, sizeof err)) {
            fprintf(stderr, ME ": %s: %s\n", tmp, err);
            goto done;
        }
    int ce = fclose(f);
    f = NULL;
    if (ce != 0 || rename(tmp, out) != 0) {
        fprintf(stderr, ME ": %s: %s\n", out, strerror(errno));
        goto done;
    }
    fprintf(stderr, ME ": %s -> %s: %zu tensors, %s, %.1f MB, %.1f s", dir, out, n,
            gguf_ttype_name(type), (double)off / 1e6, ut_now_s() - t0);
    if (type == GGUF_T_Q4_1)
        fprintf(stderr, "; %" PRIu64 " of %" PRIu64 " (d, m) pairs exact in F16", c.scales -
                c.inexact, c.scales);
    fprintf(stderr, "\n");
    rc = 0;
    goto done;
oom:
    fprintf(stderr, ME ": out of memory\n");
done:
    if (f) {
        fclose(f);
        remove(tmp);
    }
    ut_buf_free(&h.b);
    free(ftmp);
    free(row);
    free(specs);
    free(o);
    eng_st_free(st);
    json_decref(cfg);
    return rc;
}
