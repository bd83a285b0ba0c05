/* The tensors of a MiniCPM5 (Llama) checkpoint, shared by gen, convert and
 * inspect: which names exist, what each one is for (its role), its logical shape
 * W[out, in] from the architecture, and the order the packs write them in.
 *
 * The order is the one `gen` has always used (embedding; per layer the input norm,
 * q, k, v, o, the post-attention norm, gate, up, down; final norm; lm_head), so
 * `convert` of a generated HF checkpoint lays out its model.q4nx exactly as `gen`
 * does and the two files can be compared byte for byte. */
#ifndef MINICPMD_TOOLS_PACK_LAYOUT_H
#define MINICPMD_TOOLS_PACK_LAYOUT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The shape-determining fields of config.json. */
struct pack_arch {
    int hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
    int tied;  /* tie_word_embeddings: lm_head may be absent */
};

enum pack_role {
    ROLE_EMBED,       /* model.embed_tokens.weight          [vocab, hidden] */
    ROLE_ATTN_NORM,   /* model.layers.N.input_layernorm     [hidden] */
    ROLE_Q,           /* ...self_attn.q_proj                [heads*hd, hidden] */
    ROLE_K,           /* ...self_attn.k_proj                [kv*hd, hidden] */
    ROLE_V,           /* ...self_attn.v_proj                [kv*hd, hidden] */
    ROLE_O,           /* ...self_attn.o_proj                [hidden, heads*hd] */
    ROLE_FFN_NORM,    /* ...post_attention_layernorm        [hidden] */
    ROLE_GATE,        /* ...mlp.gate_proj                   [ffn, hidden] */
    ROLE_UP,          /* ...mlp.up_proj                     [ffn, hidden] */
    ROLE_DOWN,        /* ...mlp.down_proj                   [hidden, ffn] */
    ROLE_NORM,        /* model.norm.weight                  [hidden] */
    ROLE_LM_HEAD,     /* lm_head.weight                     [vocab, hidden] */
    ROLE_Q_NORM,      /* ...self_attn.q_norm (Qwen3; the FLM shim) [hd] */
    ROLE_K_NORM,      /* ...self_attn.k_norm                       [hd] */
    ROLE_OTHER,       /* not a tensor this project knows */
};

struct pack_spec {
    char name[96];
    enum pack_role role;
    int layer;          /* -1 for the global tensors */
    int64_t rows, cols; /* logical W[rows = out, cols = in]; rows 0: a vector [cols] */
};

/* Role of a tensor name (ROLE_OTHER when unknown) and its layer (-1 if none). */
enum pack_role pack_role_parse(const char *name, int *layer);
const char *pack_role_name(enum pack_role r);
/* 1 for the 2-D weights a Q4NX pack stores as Q4_1 chunks (q..down, lm_head). */
int pack_role_is_matmul(enum pack_role r);
/* Logical shape of a role under `a` (rows 0 for vectors). */
void pack_role_shape(const struct pack_arch *a, enum pack_role r, int64_t *rows, int64_t *cols);

/* Number of tensors of a full checkpoint: 3 + 9 * layers (lm_head included). */
size_t pack_layout_count(const struct pack_arch *a);
/* Fills t[0 .. pack_layout_count() - 1] in file order; returns the count. */
size_t pack_layout(const struct pack_arch *a, struct pack_spec *t);

/* Reads the architecture from a parsed config.json (`path` for messages), with
 * the defaults transformers uses (kv heads = heads, head_dim = hidden / heads,
 * untied). Returns 0, or -EINVAL with one line in err naming the field. */
int pack_arch_from_config(json_t *cfg, const char *path, struct pack_arch *a, char *err,
                          size_t errlen);

#endif
