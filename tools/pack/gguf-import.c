/* A llama GGUF as a MiniCPM5 pack: architecture, tensors, tokenizer (gguf-import.h). */
#include "tools/pack/gguf-import.h"

#include "engine/err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- architecture -------------------------------------------------------------- */

static int need_int(const struct gguf *g, const char *key, int64_t lo, int64_t hi, int64_t def,
                    int *out, char *err, size_t errlen)
{
    int64_t v;
    int rc = gguf_get_int(g, key, &v, err, errlen);
    if (rc == -ENOENT) {
        if (def < 0)
            return eng__fail(err, errlen, -EINVAL, "metadata '%s' is missing", key);
        v = def;
    } else if (rc) {
        return rc;
    }
    if (v < lo || v > hi)
        return eng__fail(err, errlen, -EINVAL, "metadata '%s' = %" PRId64 " is out of range "
                         "(%" PRId64 "..%" PRId64 ")", key, v, lo, hi);
    *out = (int)v;
    return 0;
}

static int need_real(const struct gguf *g, const char *key, double lo, double hi, double def,
                     double *out, char *err, size_t errlen)
{
    int rc = gguf_get_real(g, key, out, err, errlen);
    if (rc == -ENOENT) {
        if (def < 0)
            return eng__fail(err, errlen, -EINVAL, "metadata '%s' is missing", key);
        *out = def;
    } else if (rc) {
        return rc;
    }
    if (!(*out >= lo && *out <= hi))
        return eng__fail(err, errlen, -EINVAL, "metadata '%s' = %g is out of range (%g..%g)", key,
                         *out, lo, hi);
    return 0;
}

int gguf_model_read(const struct gguf *g, struct gguf_model *m, char *err, size_t errlen)
{
    const char *s;
    size_t n;
    int rc;
    memset(m, 0, sizeof *m);
    rc = gguf_get_str(g, "general.architecture", &s, &n, err, errlen);
    if (rc == -ENOENT)
        return eng__fail(err, errlen, -EINVAL, "metadata 'general.architecture' is missing");
    if (rc)
        return rc;
    if (n != 5 || memcmp(s, "llama", 5) != 0)
        return eng__fail(err, errlen, -EINVAL, "general.architecture is '%.*s': only 'llama' "
                         "(MiniCPM5 is a plain Llama) is supported", (int)(n < 64 ? n : 64), s);
    struct pack_arch *a = &m->a;
    if ((rc = need_int(g, "llama.block_count", 1, 4096, -1, &a->layers, err, errlen)) ||
        (rc = need_int(g, "llama.embedding_length", 1, 1 << 20, -1, &a->hidden, err, errlen)) ||
        (rc = need_int(g, "llama.feed_forward_length", 1, 1 << 22, -1, &a->ffn, err, errlen)) ||
        (rc = need_int(g, "llama.attention.head_count", 1, 4096, -1, &a->heads, err, errlen)) ||
        (rc = need_int(g, "llama.attention.head_count_kv", 1, 4096, a->heads, &a->kv_heads, err,
                       errlen)) ||
        (rc = need_int(g, "llama.context_length", 1, 1 << 24, 4096, &m->ctx, err, errlen)) ||
        (rc = need_real(g, "llama.rope.freq_base", 1.0, 1e12, 10000.0, &m->rope_theta, err,
                        errlen)) ||
        (rc = need_real(g, "llama.attention.layer_norm_rms_epsilon", 1e-12, 0.1, -1, &m->rms_eps,
                        err, errlen)))
        return rc;
    if (a->heads % a->kv_heads)
        return eng__fail(err, errlen, -EINVAL, "head_count %d is not a multiple of head_count_kv "
                         "%d", a->heads, a->kv_heads);
    if (!gguf_kv(g, "llama.attention.key_length") && a->hidden % a->heads)
        return eng__fail(err, errlen, -EINVAL, "embedding_length %d is not a multiple of "
                         "head_count %d and no llama.attention.key_length", a->hidden, a->heads);
    int vlen, rdim;
    if ((rc = need_int(g, "llama.attention.key_length", 2, 1 << 12, a->hidden / a->heads,
                       &a->head_dim, err, errlen)) ||
        (rc = need_int(g, "llama.attention.value_length", 2, 1 << 12, a->head_dim, &vlen, err,
                       errlen)) ||
        (rc = need_int(g, "llama.rope.dimension_count", 2, 1 << 12, a->head_dim, &rdim, err,
                       errlen)))
        return rc;
    if (vlen != a->head_dim || rdim != a->head_dim || a->head_dim % 2)
        return eng__fail(err, errlen, -EINVAL, "key_length %d, value_length %d and "
                         "rope.dimension_count %d must be one even head_dim", a->head_dim, vlen,
                         rdim);
    /* RoPE scaling would compute something else: refused, not dropped. */
    static const char *const scaling[] = {"llama.rope.scaling.type", "llama.rope.scaling.factor",
                                          "llama.rope.scale_linear"};
    for (size_t i = 0; i < sizeof scaling / sizeof *scaling; i++) {
        const struct gguf_kv *kv = gguf_kv(g, scaling[i]);
        if (kv && !(kv->type == GGUF_STRING && kv->n == 4 && memcmp(kv->p, "none", 4) == 0))
            return eng__fail(err, errlen, -EINVAL, "metadata '%s': RoPE scaling is not "
                             "supported", scaling[i]);
    }
    const struct gguf_tensor *e = gguf_tensor(g, "token_embd.weight");
    if (!e || e->n_dims != 2 || e->ne[0] != a->hidden || e->ne[1] < 2 || e->ne[1] > (1 << 24))
        return eng__fail(err, errlen, -EINVAL, "token_embd.weight must be [embedding_length %d, "
                         "vocab] (missing or another shape)", a->hidden);
    a->vocab = (int)e->ne[1];
    int v;
    if ((rc = need_int(g, "llama.vocab_size", a->vocab, a->vocab, a->vocab, &v, err, errlen)))
        return rc;
    m->tied = a->tied = !gguf_tensor(g, "output.weight");
    return 0;
}

/* ---- tensors ------------------------------------------------------------------ */

static const struct {
    const char *gguf;  /* after "blk.N." */
    enum pack_role role;
} layer_names[] = {
    {"attn_norm.weight", ROLE_ATTN_NORM}, {"attn_q.weight", ROLE_Q},
    {"attn_k.weight", ROLE_K},            {"attn_v.weight", ROLE_V},
    {"attn_output.weight", ROLE_O},       {"ffn_norm.weight", ROLE_FFN_NORM},
    {"ffn_gate.weight", ROLE_GATE},       {"ffn_up.weight", ROLE_UP},
    {"ffn_down.weight", ROLE_DOWN},
};

/* The GGUF name of a pack tensor. */
static void gguf_name(const struct pack_spec *s, char *out, size_t len)
{
    switch (s->role) {
    case ROLE_EMBED: snprintf(out, len, "token_embd.weight"); return;
    case ROLE_NORM: snprintf(out, len, "output_norm.weight"); return;
    case ROLE_LM_HEAD: snprintf(out, len, "output.weight"); return;
    default:
        for (size_t i = 0; i < sizeof layer_names / sizeof *layer_names; i++)
            if (layer_names[i].role == s->role) {
                snprintf(out, len, "blk.%d.%s", s->layer, layer_names[i].gguf);
                return;
            }
    }
    snprintf(out, len, "?");
}

int gguf_model_jobs(const struct gguf *g, const struct gguf_model *m, struct gguf_job *jobs,
                    char *err, size_t errlen)
{
    size_t cap = pack_layout_count(&m->a);
    struct pack_spec *specs = calloc(cap, sizeof *specs);
    char *used = calloc(g->n_tensors + 1, 1);
    int rc = -ENOMEM;
    if (!specs || !used) {
        eng__fail(err, errlen, rc, "out of memory");
        goto out;
    }
    size_t n = pack_layout(&m->a, specs);
    for (size_t i = 0; i < n; i++) {
        struct gguf_job *j = &jobs[i];
        char name[96];
        memset(j, 0, sizeof *j);
        j->spec = specs[i];
        gguf_name(&j->spec, name, sizeof name);
        if (j->spec.role == ROLE_LM_HEAD && m->tied)
            snprintf(name, sizeof name, "token_embd.weight");
        const struct gguf_tensor *t = gguf_tensor(g, name);
        int64_t rows = j->spec.rows, cols = j->spec.cols;
        if (!t) {
            rc = eng__fail(err, errlen, -EINVAL, "tensor '%s' is missing", name);
            goto out;
        }
        bool ok = rows ? t->n_dims == 2 && t->ne[1] == rows && t->ne[0] == cols
                       : t->n_dims == 1 && t->ne[0] == cols;
        if (!ok) {
            rc = eng__fail(err, errlen, -EINVAL, "tensor '%s': expected [%" PRId64 "%s%.0" PRId64
                           "] (from the llama.* metadata), got [%" PRId64 ", %" PRId64
                           "] in %d dimension(s)", name, cols, rows ? ", " : "", rows,
                           t->ne[0], t->ne[1], t->n_dims);
            goto out;
        }
        if (!rows && (t->type == GGUF_T_Q4_0 || t->type == GGUF_T_Q4_1 ||
                      t->type == GGUF_T_Q8_0)) {
            rc = eng__fail(err, errlen, -EINVAL, "tensor '%s': a quantized (%s) norm vector",
                           name, gguf_ttype_name(t->type));
            goto out;
        }
        j->src = t;
        if (j->spec.role == ROLE_Q)
            j->perm_heads = m->a.heads;
        else if (j->spec.role == ROLE_K)
            j->perm_heads = m->a.kv_heads;
        used[t - g->t] = 1;
    }
    for (size_t i = 0; i < g->n_tensors; i++)
        if (!used[i]) {
            const char *nm = g->t[i].name;
            rc = eng__fail(err, errlen, -EINVAL, "unexpected tensor '%s' (the llama tensors of "
                           "MiniCPM5 only: %s)", nm,
                           strstr(nm, "rope_freqs") ? "RoPE frequency factors are not supported"
                           : strstr(nm, "bias") ? "biases are not supported"
                                                : "not one of them");
            goto out;
        }
    rc = (int)n;
out:
    free(specs);
    free(used);
    return rc;
}

int64_t gguf_job_src_row(const struct gguf_job *j, int head_dim, int64_t R)
{
    if (j->perm_heads <= 0)
        return R;
    int64_t half = head_dim / 2, h = R / head_dim, r = R % head_dim;
    return h * head_dim + 2 * (r % half) + r / half;
}

/* ---- tokenizer ---------------------------------------------------------------- */

/* tokenizer.ggml.pre names (llama.cpp's) whose split this project can write as
 * tokenizer.json pre-tokenizers; regexes as in the models' own tokenizer.json. */
static const struct {
    const char *name;
    const char *regex;  /* NULL: ByteLevel's own GPT-2 split */
    int ignore_merges;
} pre_names[] = {
    {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
                  "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 1},
    {"llama3", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
               "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 1},
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?"
              "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 0},
    {"default", NULL, 0},
    {"gpt-2", NULL, 0},
};

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

struct tokwalk {
    const struct gguf_kv *types;
    json_t *vocab, *added, *merges;
    char **strs;       /* token strings by id (NUL-terminated copies) */
    char *err;
    size_t errlen;
};

static json_t *str_json(const char *s, size_t len)
{
    return json_stringn(s, len);  /* NULL for invalid UTF-8 (or out of memory) */
}

static int add_token(uint64_t i, const char *s, size_t len, void *arg)
{
    struct tokwalk *w = arg;
    int type = w->types ? (int)gguf_int_at(w->types, i) : TT_NORMAL;
    json_t *js = memchr(s, 0, len) ? NULL : str_json(s, len);
    if (!js)
        return eng__fail(w->err, w->errlen, -EINVAL, "tokenizer.ggml.tokens[%" PRIu64 "] is not "
                         "UTF-8 text without NUL", i);
    if (!(w->strs[i] = strndup(s, len))) {
        json_decref(js);
        return eng__fail(w->err, w->errlen, -ENOMEM, "out of memory");
    }
    if (type == TT_NORMAL || type == TT_BYTE) {
        if (json_object_get(w->vocab, w->strs[i])) {
            json_decref(js);
            return eng__fail(w->err, w->errlen, -EINVAL, "tokenizer.ggml.tokens[%" PRIu64 "] "
                             "'%.40s' appears twice", i, w->strs[i]);
        }
        json_decref(js);
        return json_object_set_new(w->vocab, w->strs[i], json_integer((json_int_t)i)) ? -ENOMEM
                                                                                     : 0;
    }
    json_t *t = json_pack("{s:I, s:o, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i, "content",
                          js, "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized",
                          type == TT_USER, "special", type != TT_USER);
    return t && json_array_append_new(w->added, t) == 0 ? 0 : -ENOMEM;
}

static int add_merge(uint64_t i, const char *s, size_t len, void *arg)
{
    struct tokwalk *w = arg;
    const char *sp = memchr(s, ' ', len);
    json_t *js = str_json(s, len);
    size_t rest = sp ? len - (size_t)(sp + 1 - s) : 0;
    if (!js || !sp || sp == s || rest == 0 || memchr(sp + 1, ' ', rest)) {
        json_decref(js);
        return eng__fail(w->err, w->errlen, -EINVAL, "tokenizer.ggml.merges[%" PRIu64 "] is not "
                         "'left right' in UTF-8", i);
    }
    return json_array_append_new(w->merges, js) ? -ENOMEM : 0;
}

/* A token id from the metadata, as its string (for tokenizer_config.json). */
static int special_id(const struct gguf *g, const char *key, uint64_t n_tok, int64_t *id,
                      char *err, size_t errlen)
{
    int rc = gguf_get_int(g, key, id, err, errlen);
    if (rc == -ENOENT) {
        *id = -1;
        return 0;
    }
    if (rc == 0 && (*id < 0 || (uint64_t)*id >= n_tok))
        return eng__fail(err, errlen, -EINVAL, "metadata '%s' = %" PRId64 " is not a token id "
                         "(%" PRIu64 " tokens)", key, *id, n_tok);
    return rc;
}

static json_t *pre_tokenizer(const char *regex)
{
    json_t *bl = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                           "trim_offsets", 1, "use_regex", regex == NULL);
    if (!regex)
        return bl;
    return json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}", "type", "Sequence",
                     "pretokenizers", "type", "Split", "pattern", "Regex", regex, "behavior",
                     "Isolated", "invert", 0, bl);
}

static int build_tokenizer(const struct gguf *g, json_t **out, char **strs,
                           char *err, size_t errlen)
{
    const char *s;
    size_t n;
    int rc = gguf_get_str(g, "tokenizer.ggml.model", &s, &n, err, errlen);
    if (rc == -ENOENT)
        return eng__fail(err, errlen, -EINVAL, "no tokenizer.ggml.model: give --tokenizer "
                         "tokenizer.json");
    if (rc)
        return rc;
    if (n != 4 || memcmp(s, "gpt2", 4) != 0)
        return eng__fail(err, errlen, -EINVAL, "tokenizer.ggml.model '%.*s' is not supported "
                         "(only 'gpt2', a byte-level BPE): give --tokenizer tokenizer.json",
                         (int)(n < 40 ? n : 40), s);
    const char *pre = "default";
    size_t pl = 7;
    if ((rc = gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pl, err, errlen)) && rc != -ENOENT)
        return rc;
    if (rc == -ENOENT) {
        pre = "default";
        pl = 7;
    }
    int pi = -1;
    for (size_t i = 0; i < sizeof pre_names / sizeof *pre_names; i++)
        if (strlen(pre_names[i].name) == pl && memcmp(pre_names[i].name, pre, pl) == 0)
            pi = (int)i;
    if (pi < 0)
        return eng__fail(err, errlen, -EINVAL, "tokenizer.ggml.pre '%.*s' is not known here "
                         "(llama-bpe, llama3, qwen2, default, gpt-2 are): give --tokenizer "
                         "tokenizer.json", (int)(pl < 40 ? pl : 40), pre);
    const struct gguf_kv *toks = gguf_kv(g, "tokenizer.ggml.tokens");
    const struct gguf_kv *types = gguf_kv(g, "tokenizer.ggml.token_type");
    const struct gguf_kv *merges = gguf_kv(g, "tokenizer.ggml.merges");
    if (merges && (merges->type != GGUF_ARRAY || merges->atype != GGUF_STRING))
        return eng__fail(err, errlen, -EINVAL, "tokenizer.ggml.merges must be an array of "
                         "strings");
    if (types && (types->type != GGUF_ARRAY || types->n != toks->n ||
                  !(types->atype <= GGUF_I32 || types->atype == GGUF_I64 ||
                    types->atype == GGUF_U64)))
        return eng__fail(err, errlen, -EINVAL, "tokenizer.ggml.token_type must be an integer "
                         "array as long as tokenizer.ggml.tokens");
    struct tokwalk w = {.types = types, .vocab = json_object(), .added = json_array(),
                        .merges = json_array(), .strs = strs, .err = err, .errlen = errlen};
    json_t *root = NULL;
    rc = -ENOMEM;
    if (!w.vocab || !w.added || !w.merges)
        goto out;
    if ((rc = gguf_str_array(toks, add_token, &w)) ||
        (merges && (rc = gguf_str_array(merges, add_merge, &w))))
        goto out;
    json_t *model = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:O, s:O}", "type",
                              "BPE", "dropout", "unk_token", "continuing_subword_prefix",
                              "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                              "ignore_merges", pre_names[pi].ignore_merges, "vocab", w.vocab,
                              "merges", w.merges);
    root = json_pack("{s:s, s:n, s:n, s:O, s:n, s:o, s:n, s:{s:s, s:b, s:b, s:b}, s:o}",
                     "version", "1.0", "truncation", "padding", "added_tokens", w.added,
                     "normalizer", "pre_tokenizer", pre_tokenizer(pre_names[pi].regex),
                     "post_processor", "decoder", "type", "ByteLevel", "add_prefix_space", 0,
                     "trim_offsets", 1, "use_regex", 1, "model", model);
    rc = root ? 0 : eng__fail(err, errlen, -ENOMEM, "out of memory");
out:
    json_decref(w.vocab);
    json_decref(w.added);
    json_decref(w.merges);
    *out = root;
    return rc;
}

/* A float32 metadata value as the shortest decimal that reads back as the same
 * float32 (1e-06, not 9.99999997e-07): config.json says what the model was given. */
static double short_f32(double x)
{
    char buf[40];
    for (int p = 1; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, x);
        if ((float)strtod(buf, NULL) == (float)x)
            return strtod(buf, NULL);
    }
    return x;
}

int gguf_model_json(const struct gguf *g, const struct gguf_model *m, int want_tok, json_t **tok,
                    json_t **tok_cfg, json_t **cfg, char **tmpl, char *err, size_t errlen)
{
    *tok = *tok_cfg = *cfg = NULL;
    *tmpl = NULL;
    const struct gguf_kv *toks = gguf_kv(g, "tokenizer.ggml.tokens");
    uint64_t n_tok = 0;
    char **strs = NULL;
    int rc = 0;
    if (toks && (toks->type != GGUF_ARRAY || toks->atype != GGUF_STRING))
        return eng__fail(err, errlen, -EINVAL, "tokenizer.ggml.tokens must be an array of "
                         "strings");
    if (toks) {
        n_tok = toks->n;
        if (n_tok > (uint64_t)m->a.vocab)
            return eng__fail(err, errlen, -EINVAL, "%" PRIu64 " tokens in tokenizer.ggml.tokens "
                             "but token_embd.weight has %d rows", n_tok, m->a.vocab);
    } else if (want_tok) {
        return eng__fail(err, errlen, -EINVAL, "no tokenizer.ggml.tokens: give --tokenizer "
                         "tokenizer.json");
    }
    if (n_tok && !(strs = calloc(n_tok, sizeof *strs)))
        return eng__fail(err, errlen, -ENOMEM, "out of memory");
    int64_t bos, eos, pad;
    if ((rc = special_id(g, "tokenizer.ggml.bos_token_id", n_tok, &bos, err, errlen)) ||
        (rc = special_id(g, "tokenizer.ggml.eos_token_id", n_tok, &eos, err, errlen)) ||
        (rc = special_id(g, "tokenizer.ggml.padding_token_id", n_tok, &pad, err, errlen)))
        goto out;
    if (want_tok) {
        if ((rc = build_tokenizer(g, tok, strs, err, errlen)))
            goto out;
    }
    int add_bos = 0;
    if ((rc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, err, errlen)) &&
        rc != -ENOENT)
        goto out;
    *tok_cfg = json_pack("{s:b, s:b, s:b, s:i, s:s}", "add_bos_token", add_bos, "add_eos_token",
                         0, "clean_up_tokenization_spaces", 0, "model_max_length", m->ctx,
                         "tokenizer_class", "PreTrainedTokenizerFast");
    if (*tok_cfg && bos >= 0 && strs && strs[bos])
        json_object_set_new(*tok_cfg, "bos_token", json_string(strs[bos]));
    if (*tok_cfg && eos >= 0 && strs && strs[eos])
        json_object_set_new(*tok_cfg, "eos_token", json_string(strs[eos]));
    *cfg = json_pack("{s:[s], s:b, s:i, s:s, s:i, s:i, s:i, s:b, s:s, s:i, s:i, s:i, s:f, s:n, "
                     "s:f, s:b, s:s, s:i, s:s}",
                     "architectures", "LlamaForCausalLM", "attention_bias", 0, "head_dim",
                     m->a.head_dim, "hidden_act", "silu", "hidden_size", m->a.hidden,
                     "intermediate_size", m->a.ffn, "max_position_embeddings", m->ctx, "mlp_bias",
                     0, "model_type", "llama", "num_attention_heads", m->a.heads,
                     "num_hidden_layers", m->a.layers, "num_key_value_heads", m->a.kv_heads,
                     "rms_norm_eps", short_f32(m->rms_eps), "rope_scaling", "rope_theta",
                     short_f32(m->rope_theta),
                     "tie_word_embeddings", 0, "torch_dtype", "bfloat16", "vocab_size",
                     m->a.vocab, "minicpmd_converted_from", "gguf");
    if (*cfg && bos >= 0)
        json_object_set_new(*cfg, "bos_token_id", json_integer(bos));
    if (*cfg && eos >= 0)
        json_object_set_new(*cfg, "eos_token_id", json_integer(eos));
    if (*cfg && pad >= 0)
        json_object_set_new(*cfg, "pad_token_id", json_integer(pad));
    if (!*tok_cfg || !*cfg) {
        rc = eng__fail(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    const char *t;
    size_t tl;
    rc = gguf_get_str(g, "tokenizer.chat_template", &t, &tl, err, errlen);
    if (rc == 0 && !(*tmpl = strndup(t, tl)))
        rc = eng__fail(err, errlen, -ENOMEM, "out of memory");
    else if (rc == -ENOENT)
        rc = 0;
out:
    for (uint64_t i = 0; strs && i < n_tok; i++)
        free(strs[i]);
    free(strs);
    if (rc) {
        json_decref(*tok);
        json_decref(*tok_cfg);
        json_decref(*cfg);
        free(*tmpl);
        *tok = *tok_cfg = *cfg = NULL;
        *tmpl = NULL;
    }
    return rc;
}
