/* minicpmd-pack gen --preset P --seed S --out DIR [--kv-heads N] [--format q4nx|hf]
 *
 * Writes a complete pack with random weights: config.json, model.q4nx (or, with
 * --format hf, the same weights as a BF16 model.safetensors), tokenizer.json,
 * tokenizer_config.json, generation_config.json and chat_template.jinja. The packs
 * exist so that the engine, the numpy reference and the NPU path can be tested and
 * benchmarked on MiniCPM5's exact file formats and shapes without downloading 5 GB;
 * the weights mean nothing.
 *
 * Deterministic: one preset and seed give byte-identical files. Each tensor draws
 * from its own splitmix64 stream seeded by (seed, tensor index), so the output does
 * not depend on the order or the batching in which tensors are produced. */
#include "tools/pack/fsutil.h"
#include "tools/pack/gen.h"
#include "tools/pack/layout.h"
#include "tools/pack/pack.h"
#include "tools/pack/q4nx-write.h"
#include "pack-chat-template.h"
#include "util/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct gen_preset presets[] = {
    {"tiny", 256, 4, 4, 2, 64, 768, 1024, 1022, 4096, "a few MB, for unit tests"},
    {"deep", 128, 42, 2, 1, 64, 256, 1024, 1022, 4096, "42 narrow layers, for layer chunking"},
    {"demo", 512, 8, 8, 2, 64, 1536, 4096, 4094, 8192, "served when no model is found"},
    {"2b", 2048, 42, 16, 2, 128, 6144, 130560, 130072, 131072, "MiniCPM5-2B's exact shapes"},
    {"wide", 2048, 4, 16, 2, 128, 6144, 4096, 4094, 8192,
     "2B's widths in 4 layers, for numerics against float64"},
};

/* ---- the files around the weights ------------------------------------------ */

static int write_json(const char *dir, const char *name, json_t *j)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = j ? 0 : -ENOMEM;
    /* Ten digits: 1e-06 and 0.95 print as written, not as 9.9999999999999995e-07. */
    if (rc == 0 && json_dump_file(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) != 0)
        rc = -EIO;
    json_decref(j);
    if (rc)
        fprintf(stderr, "minicpmd-pack gen: %s: %s\n", path, strerror(-rc));
    return rc;
}

static json_t *config_json(const struct gen_preset *p, int kv_heads, uint64_t seed)
{
    return json_pack(
        "{s:[s], s:b, s:f, s:i, s:[i, i], s:i, s:s, s:i, s:f, s:i, s:i, s:b, s:s, s:i, s:i, "
        "s:i, s:i, s:i, s:f, s:n, s:f, s:b, s:s, s:b, s:i, s:{s:s, s:I, s:s}}",
        "architectures", "LlamaForCausalLM", "attention_bias", 0, "attention_dropout", 0.0,
        "bos_token_id", 0, "eos_token_id", 1, p->im_start + 1, "head_dim", p->head_dim,
        "hidden_act", "silu", "hidden_size", p->hidden, "initializer_range", 0.02,
        "intermediate_size", p->ffn, "max_position_embeddings", p->max_pos, "mlp_bias", 0,
        "model_type", "llama", "num_attention_heads", p->heads, "num_hidden_layers", p->layers,
        "num_key_value_heads", kv_heads, "pad_token_id", 1, "pretraining_tp", 1, "rms_norm_eps",
        1e-6, "rope_scaling", "rope_theta", 5e6, "tie_word_embeddings", 0, "torch_dtype",
        "bfloat16", "use_cache", 1, "vocab_size", p->vocab, "minicpmd_generated", "preset",
        p->name, "seed", (json_int_t)seed, "note", "random weights from minicpmd-pack gen");
}

static json_t *tokenizer_config_json(const struct gen_preset *p)
{
    return json_pack("{s:b, s:b, s:s, s:b, s:s, s:i, s:s, s:s}", "add_bos_token", 0,
                     "add_eos_token", 0, "bos_token", "<s>", "clean_up_tokenization_spaces", 0,
                     "eos_token", "</s>", "model_max_length", p->max_pos, "pad_token", "</s>",
                     "tokenizer_class", "PreTrainedTokenizerFast");
}

static json_t *generation_config_json(const struct gen_preset *p)
{
    return json_pack("{s:b, s:f, s:f, s:[i, i], s:i, s:i}", "do_sample", 1, "temperature", 1.0,
                     "top_p", 0.95, "eos_token_id", 1, p->im_start + 1, "bos_token_id", 0,
                     "pad_token_id", 1);
}

static int write_template(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "wb");
    int rc = f ? 0 : -errno;
    if (f && fwrite(gen_chat_template, 1, gen_chat_template_len, f) != gen_chat_template_len)
        rc = -EIO;
    if (f && fclose(f) != 0 && rc == 0)
        rc = -EIO;
    if (rc)
        fprintf(stderr, "minicpmd-pack gen: %s: %s\n", path, strerror(-rc));
    return rc;
}

/* ---- the weights ------------------------------------------------------------ */

enum init { INIT_EMBED, INIT_NORM, INIT_MATMUL };

struct gen_tensor {
    enum init init;
    float scale;   /* standard deviation (matmul, embedding) or noise (norm) */
    int rep_head;  /* > 1: K/V rows replicated, each head this many times */
    int head_dim;  /* with rep_head: rows per head */
};

/* Roughly normal, mean 0, std 1: the sum of four uniform 16-bit draws (Irwin-Hall),
 * one PRNG call per value. Tails end at +-3.5 sigma, which suits Q4_1 well. */
static inline float normalish(uint64_t *s)
{
    uint64_t r = gen_rand(s);
    uint32_t sum = (uint32_t)(r & 0xFFFF) + (uint32_t)(r >> 16 & 0xFFFF) +
                   (uint32_t)(r >> 32 & 0xFFFF) + (uint32_t)(r >> 48);
    return ((float)sum - 131070.0f) * (1.0f / 37837.6f);
}

/* Values as a BF16 checkpoint would hold them: the Q4_1 of this pack is what a
 * converter makes from a BF16 original with the same numbers. */
static void fill_rows(uint64_t *rng, float *out, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        out[i] = q4nx_bf16_to_f32(q4nx_f32_to_bf16(normalish(rng) * scale));
}

/* Produces one tensor's bytes and streams them to the writer. */
static int emit(struct q4nx_writer *w, const struct q4nx_tensor *t, const struct gen_tensor *g,
                uint64_t seed, size_t index, struct q4nx_progress *pr)
{
    uint64_t rng = seed ^ (0xA24BAED4963EE407ull * (index + 1));
    float *rows = NULL, *base = NULL;
    uint8_t *out = NULL;
    int rc = -ENOMEM;

    if (g->init != INIT_MATMUL) {
        /* Embedding rows or a norm vector, one row at a time. */
        int64_t nrows = t->rows ? t->rows : 1;
        out = malloc((size_t)t->cols * 2);
        if (!out)
            goto out;
        for (int64_t r = 0; r < nrows; r++) {
            for (int64_t c = 0; c < t->cols; c++) {
                float x = normalish(&rng) * g->scale;
                uint16_t v = q4nx_f32_to_bf16(g->init == INIT_NORM ? 1.0f + x : x);
                out[2 * c] = (uint8_t)v;  /* little-endian on any host */
                out[2 * c + 1] = (uint8_t)(v >> 8);
            }
            if ((rc = q4nx_writer_append(w, out, (size_t)t->cols * 2)))
                goto out;
            q4nx_progress_add(pr, (uint64_t)t->cols * 2);
        }
        rc = 0;
        goto out;
    }

    /* A matmul weight, 32 rows at a time: one row of Q4_1 chunks (Q4NX), or the
     * same 32 rows as BF16 (HF). The rows drawn are already BF16 values, so the
     * HF file holds exactly what the quantizer of the Q4NX file was given, and
     * `convert` of the HF file reproduces the Q4NX file. */
    size_t cols = (size_t)t->cols;
    bool q4 = t->kind == Q4NX_Q4_1;
    size_t block_bytes = q4 ? (size_t)((t->cols + 255) / 256) * Q4NX_CHUNK_BYTES : 32 * cols * 2;
    float scale = g->scale;
    rows = malloc(32 * cols * sizeof *rows);
    out = malloc(block_bytes);
    if (!rows || !out)
        goto out;
    if (g->rep_head > 1) {
        /* KV replication (docs/model-minicpm5.md §3.4): draw the model's real K/V
         * rows exactly as an unreplicated pack would, then repeat each head: new
         * head j is original head j / rep_head. */
        int64_t base_rows = t->rows / g->rep_head;
        base = malloc((size_t)base_rows * cols * sizeof *base);
        if (!base)
            goto out;
        fill_rows(&rng, base, (size_t)base_rows * cols, scale);
    }
    for (int64_t r0 = 0; r0 < t->rows; r0 += 32) {
        /* Q4_1 shapes have rows % 32 == 0 (q4nx_writer_open checked). */
        int64_t nr = t->rows - r0 < 32 ? t->rows - r0 : 32;
        if (base) {
            for (int64_t r = 0; r < nr; r++) {
                int64_t R = r0 + r, head = R / g->head_dim / g->rep_head;
                int64_t src = head * g->head_dim + R % g->head_dim;
                memcpy(rows + r * (int64_t)cols, base + (size_t)src * cols, cols * sizeof *rows);
            }
        } else {
            fill_rows(&rng, rows, (size_t)nr * cols, scale);
        }
        size_t nb = block_bytes;
        if (q4) {
            q4nx_pack_rowblock(rows, t->cols, out);
        } else {
            nb = (size_t)nr * cols * 2;
            q4nx_put_bf16(rows, (size_t)nr * cols, out);
        }
        if ((rc = q4nx_writer_append(w, out, nb)))
            goto out;
        q4nx_progress_add(pr, nb);
    }
    rc = 0;
out:
    free(base);
    free(rows);
    free(out);
    return rc;
}

/* ---- the pack --------------------------------------------------------------- */

enum gen_format { GEN_Q4NX, GEN_HF };

/* The tensor list in file order (layout.c), with how each is drawn. Matmuls get
 * std 1/sqrt(in) so activations keep about unit scale through every layer; norms
 * are 1 +- 2 % so they matter but do not blow anything up. The Q4NX and the HF
 * pack of one preset and seed draw the same numbers: only the storage differs. */
static size_t layout(const struct gen_preset *p, int kv_heads, enum gen_format fmt,
                     struct q4nx_tensor *t, struct gen_tensor *g)
{
    struct pack_arch a = {.hidden = p->hidden, .layers = p->layers, .heads = p->heads,
                          .kv_heads = kv_heads, .head_dim = p->head_dim, .ffn = p->ffn,
                          .vocab = p->vocab};
    struct pack_spec *s = calloc(pack_layout_count(&a), sizeof *s);
    if (!s)
        return 0;
    size_t n = pack_layout(&a, s);
    for (size_t i = 0; i < n; i++) {
        bool mm = pack_role_is_matmul(s[i].role);
        t[i] = (struct q4nx_tensor){.kind = mm && fmt == GEN_Q4NX ? Q4NX_Q4_1 : Q4NX_BF16,
                                    .rows = s[i].rows, .cols = s[i].cols};
        snprintf(t[i].name, sizeof t[i].name, "%s", s[i].name);
        if (s[i].role == ROLE_EMBED)
            g[i] = (struct gen_tensor){INIT_EMBED, 1.0f, 1, p->head_dim};
        else if (!mm)
            g[i] = (struct gen_tensor){INIT_NORM, 0.02f, 1, p->head_dim};
        else
            g[i] = (struct gen_tensor){INIT_MATMUL, 1.0f / sqrtf((float)s[i].cols),
                                       s[i].role == ROLE_K || s[i].role == ROLE_V
                                           ? kv_heads / p->kv_heads : 1,
                                       p->head_dim};
    }
    free(s);
    return n;
}

static const char *weights_file(enum gen_format fmt)
{
    return fmt == GEN_HF ? "model.safetensors" : "model.q4nx";
}

static int write_weights(const char *dir, const struct gen_preset *p, int kv_heads,
                         enum gen_format fmt, uint64_t seed, uint64_t *bytes)
{
    size_t cap = 3 + 9 * (size_t)p->layers;
    struct q4nx_tensor *t = calloc(cap, sizeof *t);
    struct gen_tensor *g = calloc(cap, sizeof *g);
    struct q4nx_writer w = {0};
    char tmp[4096 + 8], path[4096];
    int rc = -ENOMEM;

    snprintf(path, sizeof path, "%s/%s", dir, weights_file(fmt));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!t || !g)
        goto out;
    size_t n = layout(p, kv_heads, fmt, t, g);
    if (n == 0)
        goto out;
    /* An HF checkpoint is the same safetensors container with every tensor
     * BF16 [out, in] (vectors [n]): the Q4NX writer with no Q4_1 tensors. */
    if ((rc = q4nx_writer_open(&w, tmp, t, n)))
        goto out;
    struct q4nx_progress pr;
    q4nx_progress_start(&pr, "minicpmd-pack gen", t[n - 1].end);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = emit(&w, &t[i], &g[i], seed, i, &pr);
    int crc = q4nx_writer_close(&w);
    rc = rc ? rc : crc;
    /* Only a complete file gets the real name: an interrupted `2b` run leaves
     * nothing that looks like a pack. */
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc)
        remove(tmp);
    else
        *bytes = t[n - 1].end;
out:
    if (rc)
        fprintf(stderr, "minicpmd-pack gen: %s: %s\n", path, strerror(-rc));
    free(t);
    free(g);
    return rc;
}

/* Weights of the other format left by an earlier run into the same directory
 * would be loaded instead of (model.q4nx) or along with the new ones: remove. */
static void remove_stale_weights(const char *dir, enum gen_format fmt)
{
    static const char *const names[] = {"model.q4nx", "model.safetensors",
                                        "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[4096];
        if (strcmp(names[i], weights_file(fmt)) == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (remove(path) == 0)
            fprintf(stderr, "minicpmd-pack gen: removed %s (weights of another format)\n", path);
    }
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: minicpmd-pack gen --preset P --seed S --out DIR [--kv-heads N]\n"
               "                          [--format q4nx|hf] [--no-weights]\n\n"
               "Presets:\n");
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        const struct gen_preset *p = &presets[i];
        fprintf(f, "  %-5s hidden %d, %d layers, %d/%d heads x %d, ffn %d, vocab %d: %s\n",
                p->name, p->hidden, p->layers, p->heads, p->kv_heads, p->head_dim, p->ffn,
                p->vocab, p->about);
    }
    fprintf(f, "--format q4nx (default) writes model.q4nx: BF16 embedding and norms, Q4_1\n"
               "chunks for every matmul weight. --format hf writes the same random weights\n"
               "(the numbers the Q4_1 was made from) as a Hugging Face BF16 model.safetensors;\n"
               "`convert` of that gives back the same model.q4nx byte for byte.\n");
    fprintf(f, "--no-weights writes everything but the weights (e.g. the 2b tokenizer alone).\n");
    fprintf(f, "--kv-heads N replicates the K/V heads to N (a multiple of the preset's,\n"
               "dividing the query heads), as NPU packs do; the model computes the same.\n");
}

int pack_cmd_gen(int argc, char **argv)
{
    const struct gen_preset *p = NULL;
    const char *dir = NULL, *seed_s = NULL;
    int kv_heads = 0;
    enum gen_format fmt = GEN_Q4NX;
    bool weights = true;
    char err[512];
    int rc;

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--no-weights") == 0) {
            weights = false;
            continue;
        }
        if (!v) {
            fprintf(stderr, "minicpmd-pack gen: '%s' needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--preset") == 0) {
            for (size_t k = 0; k < sizeof presets / sizeof *presets; k++)
                if (strcmp(v, presets[k].name) == 0)
                    p = &presets[k];
            if (!p) {
                fprintf(stderr, "minicpmd-pack gen: unknown preset '%s' (see --help)\n", v);
                return 2;
            }
        } else if (strcmp(a, "--seed") == 0) {
            seed_s = v;
        } else if (strcmp(a, "--out") == 0) {
            dir = v;
        } else if (strcmp(a, "--kv-heads") == 0) {
            kv_heads = atoi(v);
        } else if (strcmp(a, "--format") == 0) {
            if (strcmp(v, "q4nx") == 0) {
                fmt = GEN_Q4NX;
            } else if (strcmp(v, "hf") == 0) {
                fmt = GEN_HF;
            } else {
                fprintf(stderr, "minicpmd-pack gen: --format must be q4nx or hf\n");
                return 2;
            }
        } else {
            fprintf(stderr, "minicpmd-pack gen: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!p || !dir || !seed_s) {
        usage(stderr);
        return 2;
    }
    char *end;
    errno = 0;
    unsigned long long seed = strtoull(seed_s, &end, 0);
    if (errno || *end || !*seed_s || *seed_s == '-' || seed > INT64_MAX) {
        fprintf(stderr, "minicpmd-pack gen: --seed must be an integer 0..2^63-1\n");
        return 2;
    }
    if (!kv_heads)
        kv_heads = p->kv_heads;
    if (kv_heads < p->kv_heads || kv_heads % p->kv_heads || p->heads % kv_heads) {
        fprintf(stderr, "minicpmd-pack gen: --kv-heads %d must be a multiple of %d dividing %d\n",
                kv_heads, p->kv_heads, p->heads);
        return 2;
    }
    if ((rc = pack_mkdir_p(dir))) {
        fprintf(stderr, "minicpmd-pack gen: %s: %s\n", dir, strerror(-rc));
        return 1;
    }

    double t0 = ut_now_s();
    uint64_t bytes = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    rc = gen_tokenizer_write(path, p, err, sizeof err);
    if (rc)
        fprintf(stderr, "minicpmd-pack gen: %s: %s\n", path, err);
    if (rc || (rc = write_json(dir, "config.json", config_json(p, kv_heads, seed))) ||
        (rc = write_json(dir, "tokenizer_config.json", tokenizer_config_json(p))) ||
        (rc = write_json(dir, "generation_config.json", generation_config_json(p))) ||
        (rc = write_template(dir)) ||
        (weights && (rc = write_weights(dir, p, kv_heads, fmt, seed, &bytes))))
        return 1;
    if (weights)
        remove_stale_weights(dir, fmt);
    if (weights)
        fprintf(stderr, "minicpmd-pack gen: %s pack (seed %llu%s) in %s: %s %.1f MB, %.1f s\n",
                p->name, seed, kv_heads != p->kv_heads ? ", replicated KV heads" : "", dir,
                weights_file(fmt), (double)bytes / 1e6, ut_now_s() - t0);
    else
        fprintf(stderr, "minicpmd-pack gen: %s pack without weights in %s, %.1f s\n", p->name, dir,
                ut_now_s() - t0);
    return 0;
}
