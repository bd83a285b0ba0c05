/* What a llama-architecture GGUF means as a MiniCPM5 (Llama) pack: its
 * architecture from the llama.* metadata, its tensors under Hugging Face names
 * (with llama.cpp's Q/K row permutation undone), and its tokenizer.json built
 * from the tokenizer.ggml.* metadata. Pure functions over a parsed struct gguf
 * (no files), so the fuzz target runs them on arbitrary input; the command that
 * writes a pack is cmd-convert-gguf.c.
 *
 * Anchors: llama.cpp's gguf-py constants (the llama.* and tokenizer.ggml.* key
 * names, the tensor names blk.N.attn_q.weight ..., token types) and its
 * convert_hf_to_gguf.py LlamaModel, which permutes the rows of q_proj and k_proj
 * within each head from the halves layout (NeoX rotate_half, what HF and this
 * engine use) to interleaved pairs (what llama.cpp's rope for llama expects):
 * GGUF row 2a + b of a head holds HF row b * head_dim/2 + a. */
#ifndef MINICPMD_TOOLS_PACK_GGUF_IMPORT_H
#define MINICPMD_TOOLS_PACK_GGUF_IMPORT_H

#include <jansson.h>
#include <stddef.h>

#include "tools/pack/gguf.h"
#include "tools/pack/layout.h"

struct gguf_model {
    struct pack_arch a;
    double rope_theta, rms_eps;
    int ctx;              /* llama.context_length (4096 when absent) */
    int tied;             /* no output.weight: lm_head is token_embd */
};

/* The architecture from the metadata, checked against token_embd.weight. Returns
 * 0 or -EINVAL with one line in err naming the key. */
int gguf_model_read(const struct gguf *g, struct gguf_model *m, char *err, size_t errlen);

/* One output tensor of the pack and where it comes from. */
struct gguf_job {
    struct pack_spec spec;           /* HF name, role, logical shape W[rows, cols] */
    const struct gguf_tensor *src;
    int perm_heads;                  /* > 0: undo the Q/K permutation, this many heads */
};

/* The pack's tensors (layout.c order) mapped to the GGUF's, shapes and types
 * checked; every GGUF tensor must be one of them. jobs holds
 * pack_layout_count(&m->a) entries. Returns the count, or -EINVAL with err. */
int gguf_model_jobs(const struct gguf *g, const struct gguf_model *m, struct gguf_job *jobs,
                    char *err, size_t errlen);

/* Source row (in the GGUF tensor) of output row R of a job. */
int64_t gguf_job_src_row(const struct gguf_job *j, int head_dim, int64_t R);

/* tokenizer.json, tokenizer_config.json and config.json of the pack from the
 * metadata (tokenizer.ggml.model "gpt2" only: a byte-level BPE). *tok is NULL
 * when want_tok is 0 (a tokenizer.json is given). *tmpl gets
 * tokenizer.chat_template as a malloc'd string, or NULL. Returns 0 or -EINVAL /
 * -ENOMEM with err. */
int gguf_model_json(const struct gguf *g, const struct gguf_model *m, int want_tok, json_t **tok,
                    json_t **tok_cfg, json_t **cfg, char **tmpl, char *err, size_t errlen);

#endif
