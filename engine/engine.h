/* engine — MiniCPM5 packs: the directory opened, config.json read and checked,
 * the weight files found.
 *
 * api/ and server/ include this header and, for now, headers of the engine's rooms
 * as well (the list: docs/DESIGN.md "The engine's public surface"). The device
 * interface, engine/device/device.h, is meant for the worker and the backends.
 *
 * Threading: eng_pack_open() does file I/O and may take long on a real pack; the
 * daemon calls it off the event loop. An eng_pack is immutable once open and may be
 * read from any thread.
 */
#ifndef MINICPMD_ENGINE_H
#define MINICPMD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

typedef struct eng_pack eng_pack;

enum eng_weights_format {
    ENG_WEIGHTS_Q4NX = 0,         /* FastFlowLM model.q4nx */
    ENG_WEIGHTS_SAFETENSORS,      /* Hugging Face model.safetensors */
    ENG_WEIGHTS_SAFETENSORS_SHARDED, /* model.safetensors.index.json + shards */
};

/* Architecture from the pack's config.json, checked for consistency. */
struct eng_hparams {
    int n_layers;          /* num_hidden_layers */
    int n_embd;            /* hidden_size */
    int n_heads;           /* num_attention_heads */
    int n_kv_heads;        /* num_key_value_heads (as stored; a pack may replicate) */
    int head_dim;          /* head_dim, or n_embd / n_heads */
    int n_ff;              /* intermediate_size */
    int n_vocab;           /* vocab_size */
    int n_ctx_train;       /* max_position_embeddings */
    double rms_norm_eps;
    double rope_theta;
    int tie_embeddings;    /* tie_word_embeddings */
};

struct eng_pack_info {
    const char *dir;              /* absolute pack directory */
    const char *model_type;       /* config.json model_type, e.g. "llama" or "qwen3" */
    enum eng_weights_format format;
    int64_t weights_bytes;        /* total size of the weight files */
    struct eng_hparams hp;
};

/* Open the pack in directory `dir`: read and validate config.json, find the weights
 * and the tokenizer. Returns 0 and a pack the caller frees with eng_pack_free(), or
 * a negative errno-style value with a one-line reason in `err` (which file, which
 * field, what was expected). Never leaves a partial pack behind. */
int eng_pack_open(const char *dir, eng_pack **out, char *err, size_t errlen);
void eng_pack_free(eng_pack *p);
const struct eng_pack_info *eng_pack_get_info(const eng_pack *p);
const char *eng_weights_format_name(enum eng_weights_format f);

/* config.json as parsed at open (a jansson object, borrowed, lives as long as the
 * pack): read it here rather than from the file again. */
struct json_t;
const struct json_t *eng_pack_config(const eng_pack *p);

#endif
