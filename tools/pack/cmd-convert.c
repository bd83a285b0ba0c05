/* minicpmd-pack convert HF_DIR OUT_DIR [--kv-heads N]
 *
 * Turns a Hugging Face BF16 checkpoint (model.safetensors, or shards listed by
 * model.safetensors.index.json) into a Q4NX pack: model.q4nx with the embedding
 * and the norms BF16 and every matmul weight, lm_head included, Q4_1 chunks made
 * by the same quantizer as `gen` (q4nx-write.c; input dim padded to 256), plus
 * config.json, tokenizer.json, tokenizer_config.json, generation_config.json,
 * special_tokens_map.json and chat_template.jinja copied when present.
 *
 * --kv-heads N repeats each K/V head (docs/model-minicpm5.md §3.4,
 * repeat_interleave: new head j is head j / (N / kv)) and sets
 * num_key_value_heads = N in config.json.
 *
 * Streaming: the input is mapped, one 32-row block is converted at a time and
 * the pages read are dropped after each tensor, so converting the 5 GB
 * MiniCPM5-2B checkpoint needs little memory. Everything is checked before the
 * first byte is written (names, dtypes, shapes against config.json), and the
 * output files are written under temporary names and renamed only when all of
 * them are complete: a failed run leaves nothing that looks like a pack.
 *
 * The model.q4nx of `convert` on `gen --format hf` output is byte-identical to
 * the model.q4nx `gen` writes for the same preset and seed: the tensor order and
 * header are the same (layout.c) and gen quantizes exactly the BF16 values its HF
 * file holds. */
#include "tools/pack/fsutil.h"
#include "tools/pack/gguf.h"
#include "tools/pack/layout.h"
#include "tools/pack/pack.h"
#include "tools/pack/q4nx-write.h"
#include "tools/pack/st-set.h"
#include "util/clock.h"
#include "util/fs.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ME "minicpmd-pack convert"

/* Small files copied into the pack when the checkpoint has them. */
static const char *const side_files[] = {
    "tokenizer.json",         "tokenizer_config.json", "generation_config.json",
    "special_tokens_map.json", "chat_template.jinja",
};

struct job {
    struct pack_spec spec;                 /* output name, role, logical shape */
    const struct eng_st_tensor *src;       /* input tensor */
    int rep;                               /* K/V: each head repeated rep times */
};

/* Element range [i0, i0 + n) of a BF16 / F16 / F32 tensor as floats (exact). */
static void load_floats(const struct eng_st_tensor *t, int64_t i0, int64_t n, float *out)
{
    const uint8_t *p = t->data;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *e = p + (size_t)(i0 + i) * eng_st_dtype_size(t->dtype);
        if (t->dtype == ENG_ST_F32) {
            uint32_t u = (uint32_t)e[0] | (uint32_t)e[1] << 8 | (uint32_t)e[2] << 16 |
                         (uint32_t)e[3] << 24;
            memcpy(&out[i], &u, sizeof u);
        } else {
            uint16_t h = (uint16_t)(e[0] | e[1] << 8);
            out[i] = t->dtype == ENG_ST_BF16 ? q4nx_bf16_to_f32(h) : gguf_f16_to_f32(h);
        }
    }
}

/* Bytes [0, end) of a tensor are not needed again: let the kernel drop their
 * pages, so the resident size stays a few MB whatever the checkpoint's size
 * (the 535 MB embedding of MiniCPM5-2B included). */
static void drop_pages(const struct eng_st_tensor *t, uint64_t end)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || end == 0)
        return;
    /* From the page holding the first byte (the mapping is page aligned): an
     * edge page shared with a neighbour is harmless to drop, a clean page of a
     * private read-only file mapping just faults back in from the file. */
    uintptr_t b = (uintptr_t)t->data & ~(uintptr_t)(pg - 1);
    uintptr_t e = (uintptr_t)t->data + end;
    (void)madvise((void *)b, e - b, MADV_DONTNEED);
}

/* Streams one tensor into the writer. */
static int emit(struct q4nx_writer *w, const struct q4nx_tensor *t, const struct job *j,
                int head_dim, struct q4nx_progress *pr)
{
    const struct eng_st_tensor *src = j->src;
    int64_t cols = t->cols;
    int rc = -ENOMEM;
    float *rows = malloc(32 * (size_t)cols * sizeof *rows);
    size_t block = t->kind == Q4NX_Q4_1 ? (size_t)((cols + 255) / 256) * Q4NX_CHUNK_BYTES
                                        : 32 * (size_t)cols * 2;
    uint8_t *out = malloc(block);
    if (!rows || !out)
        goto out;
    int64_t nrows = t->rows ? t->rows : 1;
    uint64_t dropped = 0;
    for (int64_t r0 = 0; r0 < nrows; r0 += 32) {
        int64_t nr = nrows - r0 < 32 ? nrows - r0 : 32;
        size_t nb;
        if (t->kind == Q4NX_BF16 && src->dtype == ENG_ST_BF16 && j->rep == 1) {
            /* BF16 in, BF16 out: the bytes as they are (little-endian both). */
            nb = (size_t)nr * (size_t)cols * 2;
            memcpy(out, (const uint8_t *)src->data + (size_t)r0 * (size_t)cols * 2, nb);
        } else {
            for (int64_t r = 0; r < nr; r++) {
                int64_t R = r0 + r, s = R;
                if (j->rep > 1)  /* new head h is head h / rep of the checkpoint */
                    s = R / head_dim / j->rep * head_dim + R % head_dim;
                load_floats(src, s * cols, cols, rows + r * cols);
            }
            nb = q4nx_encode_rows(t, rows, nr, out);  /* Q4_1: nr == 32, checked */
        }
        if ((rc = q4nx_writer_append(w, out, nb)))
            goto out;
        q4nx_progress_add(pr, nb);
        /* Every 16 MB of input read in order (replicated K/V rows are read
         * again: those small tensors are dropped at the end). */
        uint64_t done = (uint64_t)(r0 + nr) * (uint64_t)cols * eng_st_dtype_size(src->dtype);
        if (j->rep == 1 && done - dropped >= (16u << 20)) {
            drop_pages(src, done);
            dropped = done;
        }
    }
    drop_pages(src, src->nbytes);
    rc = 0;
out:
    free(rows);
    free(out);
    return rc;
}

/* ---- config.json ------------------------------------------------------------- */

/* The fewest significant digits (>= need, <= 17) with which every real in `j`
 * prints back to the same double: 1e-06 stays "1e-06", not 9.9999999999999995e-07. */
static int real_digits(json_t *j, int need)
{
    if (json_is_real(j)) {
        double x = json_real_value(j);
        for (int p = need; p < 17; p++) {
            char buf[64];
            snprintf(buf, sizeof buf, "%.*g", p, x);
            if (strtod(buf, NULL) == x)
                return p;
        }
        return 17;
    }
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) need = real_digits(v, need);
    } else if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) need = real_digits(v, need);
    }
    return need;
}

/* config.json of the pack: the checkpoint's bytes, or with --kv-heads the same
 * JSON (keys in their order) with num_key_value_heads replaced. */
static int write_config(const char *src, const char *dst, int kv_heads, bool changed,
                        char *err, size_t errlen)
{
    if (!changed) {
        int rc = pack_copy_file(src, dst);
        if (rc)
            snprintf(err, errlen, "%s -> %s: %s", src, dst, strerror(-rc));
        return rc;
    }
    json_error_t jerr;
    json_t *cfg = json_load_file(src, JSON_REJECT_DUPLICATES, &jerr);
    if (!cfg) {
        snprintf(err, errlen, "%s:%d:%d: %s", src, jerr.line, jerr.column, jerr.text);
        return -EINVAL;
    }
    int rc = json_object_set_new(cfg, "num_key_value_heads", json_integer(kv_heads)) ? -ENOMEM : 0;
    /* At least 10 digits, as gen writes (5000000.0, not 5e6): a short decimal
     * prints the same with any precision up to 15. */
    if (rc == 0 &&
        json_dump_file(cfg, dst, JSON_INDENT(2) | JSON_REAL_PRECISION(real_digits(cfg, 10))) != 0)
        rc = -EIO;
    if (rc)
        snprintf(err, errlen, "%s: %s", dst, strerror(-rc));
    json_decref(cfg);
    return rc;
}

/* ---- checking the checkpoint ------------------------------------------------------ */

static bool float_dtype(enum eng_st_dtype d)
{
    return d == ENG_ST_BF16 || d == ENG_ST_F16 || d == ENG_ST_F32;
}

/* The input tensor for output `s` (shape under the checkpoint's own arch `a`). */
static int find_input(const struct st_set *in, const char *dir, const struct pack_arch *a,
                      const struct pack_spec *s, const struct eng_st_tensor **out, char *err,
                      size_t errlen)
{
    const char *name = s->name;
    size_t fi = 0;
    const struct eng_st_tensor *t = st_set_find(in, name, &fi);
    if (!t && s->role == ROLE_LM_HEAD && a->tied) {
        /* Tied embeddings: the output head is the embedding (as FLM's converter
         * builds lm_head from token_embd when the GGUF has no output.weight). */
        name = "model.embed_tokens.weight";
        t = st_set_find(in, name, &fi);
    }
    if (!t) {
        snprintf(err, errlen, "%s/%s: tensor '%s' not found", dir, in->weights_name, s->name);
        return -ENOENT;
    }
    int64_t rows, cols;
    pack_role_shape(a, s->role, &rows, &cols);
    bool shape_ok = rows ? t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols
                         : t->n_dims == 1 && t->shape[0] == cols;
    if (!float_dtype(t->dtype) || !shape_ok) {
        char got[160];
        eng_st_shape_str(t, got, sizeof got);
        if (rows)
            snprintf(err, errlen, "%s/%s: tensor '%s': expected BF16 [%" PRId64 ", %" PRId64
                     "] (from config.json), got %s %s", dir, in->names[fi], name, rows, cols,
                     eng_st_dtype_name(t->dtype), got);
        else
            snprintf(err, errlen, "%s/%s: tensor '%s': expected BF16 [%" PRId64
                     "] (from config.json), got %s %s", dir, in->names[fi], name, cols,
                     eng_st_dtype_name(t->dtype), got);
        return -EINVAL;
    }
    *out = t;
    return 0;
}

/* Every tensor of the checkpoint must be one convert writes (or knows to skip):
 * silently dropping, say, attention biases would make a pack that computes
 * something else. */
static int check_extras(const struct st_set *in, const char *dir, const struct pack_arch *a,
                        struct job *jobs, size_t *n, char *err, size_t errlen)
{
    for (size_t f = 0; f < in->n; f++) {
        for (size_t i = 0; i < eng_st_count(in->files[f]); i++) {
            const struct eng_st_tensor *t = eng_st_at(in->files[f], i);
            if (in->weight_map && !json_object_get(in->weight_map, t->name))
                continue;  /* not the shard the index names for it */
            int layer;
            enum pack_role r = pack_role_parse(t->name, &layer);
            size_t len = strlen(t->name);
            if (r == ROLE_OTHER && len >= 20 &&
                strcmp(t->name + len - 20, "rotary_emb.inv_freq") == 0)
                continue;  /* a buffer old transformers saved; recomputed from theta */
            if (r == ROLE_OTHER) {
                snprintf(err, errlen, "%s/%s: unexpected tensor '%s' (convert knows the "
                         "Llama/MiniCPM5 tensors only; biases are not supported)",
                         dir, in->names[f], t->name);
                return -EINVAL;
            }
            if (layer >= a->layers) {
                snprintf(err, errlen, "%s/%s: tensor '%s' is past num_hidden_layers %d", dir,
                         in->names[f], t->name, a->layers);
                return -EINVAL;
            }
            if (r == ROLE_Q_NORM || r == ROLE_K_NORM) {
                /* A real QK-norm (Qwen3-style): kept as BF16 vectors. */
                struct job *j = &jobs[(*n)++];
                memset(j, 0, sizeof *j);
                snprintf(j->spec.name, sizeof j->spec.name, "%s", t->name);
                j->spec.role = r;
                j->spec.layer = layer;
                pack_role_shape(a, r, &j->spec.rows, &j->spec.cols);
                j->rep = 1;
                int rc = find_input(in, dir, a, &j->spec, &j->src, err, errlen);
                if (rc)
                    return rc;
            }
        }
    }
    return 0;
}

/* ---- the command --------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: minicpmd-pack convert HF_DIR OUT_DIR [--kv-heads N]\n"
            "       minicpmd-pack convert MODEL.gguf OUT_DIR [--tokenizer tokenizer.json]\n\n"
            "Writes a Q4NX pack (model.q4nx + config and tokenizer files) in OUT_DIR from the\n"
            "Hugging Face checkpoint in HF_DIR (model.safetensors or model.safetensors.index.json\n"
            "with its shards; BF16, F16 or F32). The embedding and norms stay BF16; every matmul\n"
            "weight incl. lm_head becomes Q4_1 chunks (32 rows x 256 columns, input padded).\n"
            "--kv-heads N repeats each K/V head to N heads (a multiple of the model's, dividing\n"
            "the query heads), as NPU packs need; the model computes the same.\n"
            "A llama GGUF (v2/v3; F32, F16, BF16, Q8_0, Q4_0, Q4_1 tensors) converts the same\n"
            "way, except that its Q4_0/Q4_1 matmuls keep their codes (Q4_0 as Q4_1 with\n"
            "m = -8 d; the F16 scales become BF16), Q/K rows are put back in HF order, and\n"
            "config.json and tokenizer.json come from its metadata (--tokenizer: that file).\n");
}

static int same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int pack_cmd_convert(int argc, char **argv)
{
    const char *in_dir = NULL, *out_dir = NULL, *tok_path = NULL;
    int kv_heads = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--kv-heads") == 0) {
            char *end;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || v < 1 || v > 4096) {
                fprintf(stderr, ME ": --kv-heads needs a positive integer\n");
                return 2;
            }
            kv_heads = (int)v;
            i++;
        } else if (strcmp(a, "--tokenizer") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, ME ": --tokenizer needs a tokenizer.json\n");
                return 2;
            }
            tok_path = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, ME ": unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (!in_dir) {
            in_dir = a;
        } else if (!out_dir) {
            out_dir = a;
        } else {
            fprintf(stderr, ME ": too many arguments (see --help)\n");
            return 2;
        }
    }
    if (!in_dir || !out_dir) {
        usage(stderr);
        return 2;
    }
    if (gguf_is_gguf(in_dir)) {
        if (kv_heads) {
            fprintf(stderr, ME ": --kv-heads is for Hugging Face checkpoints, not GGUF\n");
            return 2;
        }
        return pack_convert_gguf(in_dir, out_dir, tok_path);
    }
    if (tok_path) {
        fprintf(stderr, ME ": --tokenizer is for GGUF input (an HF checkpoint brings its own)\n");
        return 2;
    }

    char err[2 * 4096 + 512], path[4096], tmp[4096];
    struct st_set in = {0};
    json_t *cfg = NULL;
    struct job *jobs = NULL;
    struct q4nx_tensor *t = NULL;
    bool made_dir = false, staged[sizeof side_files / sizeof *side_files + 2] = {0};
    int rc = 1;
    double t0 = ut_now_s();

    /* config.json: the architecture every tensor is checked against. */
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    json_error_t jerr;
    struct pack_arch a;
    if (!(cfg = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr))) {
        if (access(path, R_OK) != 0)
            fprintf(stderr, ME ": %s: %s\n", path, strerror(errno));
        else
            fprintf(stderr, ME ": %s:%d:%d: %s\n", path, jerr.line, jerr.column, jerr.text);
        goto out;
    }
    if (pack_arch_from_config(cfg, path, &a, err, sizeof err)) {
        fprintf(stderr, ME ": %s\n", err);
        goto out;
    }
    if (!kv_heads)
        kv_heads = a.kv_heads;
    if (kv_heads % a.kv_heads || a.heads % kv_heads) {
        fprintf(stderr, ME ": --kv-heads %d must be a multiple of num_key_value_heads %d "
                "dividing num_attention_heads %d\n", kv_heads, a.kv_heads, a.heads);
        rc = 2;
        goto out;
    }

    /* The weights: an HF checkpoint, never a Q4NX pack (whatever else is there). */
    enum st_set_kind kind;
    if (ut_file_size(in_dir, "model.safetensors", NULL) >= 0)
        kind = ST_SET_HF;
    else if (ut_file_size(in_dir, "model.safetensors.index.json", NULL) >= 0)
        kind = ST_SET_HF_SHARDED;
    else {
        fprintf(stderr, ME ": %s: no model.safetensors or model.safetensors.index.json%s\n",
                in_dir, ut_file_size(in_dir, "model.q4nx", NULL) >= 0
                            ? " (model.q4nx is already a Q4NX pack)" : "");
        goto out;
    }
    if (st_set_open(&in, in_dir, kind, err, sizeof err)) {
        fprintf(stderr, ME ": %s\n", err);
        goto out;
    }

    /* Every output tensor, its input, checked; then the input's extras. */
    struct pack_arch oa = a;
    oa.kv_heads = kv_heads;
    size_t cap = pack_layout_count(&a) + 2 * (size_t)a.layers, n = 0;
    jobs = calloc(cap, sizeof *jobs);
    t = calloc(cap, sizeof *t);
    struct pack_spec *specs = calloc(cap, sizeof *specs);
    if (!jobs || !t || !specs) {
        free(specs);
        fprintf(stderr, ME ": out of memory\n");
        goto out;
    }
    size_t ns = pack_layout(&oa, specs);
    for (size_t i = 0; i < ns; i++) {
        struct job *j = &jobs[n++];
        j->spec = specs[i];
        j->rep = j->spec.role == ROLE_K || j->spec.role == ROLE_V ? kv_heads / a.kv_heads : 1;
        if (find_input(&in, in_dir, &a, &j->spec, &j->src, err, sizeof err)) {
            free(specs);
            fprintf(stderr, ME ": %s\n", err);
            goto out;
        }
    }
    free(specs);
    if (check_extras(&in, in_dir, &a, jobs, &n, err, sizeof err)) {
        fprintf(stderr, ME ": %s\n", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (pack_q4nx_tensor(ME, &jobs[i].spec, &t[i]))
            goto out;

    /* The output directory: not the input (config.json would be replaced while
     * being read, and the pack would hold both formats). */
    if (same_dir(in_dir, out_dir)) {
        fprintf(stderr, ME ": OUT_DIR must not be HF_DIR (%s)\n", out_dir);
        rc = 2;
        goto out;
    }
    struct stat sb;
    made_dir = stat(out_dir, &sb) != 0;
    int e = pack_mkdir_p(out_dir);
    if (e) {
        fprintf(stderr, ME ": %s: %s\n", out_dir, strerror(-e));
        made_dir = false;
        goto out;
    }

    /* model.q4nx.tmp, streamed. */
    struct q4nx_writer w = {0};
    snprintf(tmp, sizeof tmp, "%s/model.q4nx.tmp", out_dir);
    staged[0] = true;
    if ((e = q4nx_writer_open(&w, tmp, t, n))) {
        fprintf(stderr, ME ": %s: %s\n", tmp, strerror(-e));
        goto out;
    }
    struct q4nx_progress pr;
    q4nx_progress_start(&pr, ME, t[n - 1].end);
    for (size_t i = 0; i < n && e == 0; i++)
        e = emit(&w, &t[i], &jobs[i], a.head_dim, &pr);
    int ce = q4nx_writer_close(&w);
    if ((e = e ? e : ce)) {
        fprintf(stderr, ME ": %s: %s\n", tmp, strerror(-e));
        goto out;
    }

    /* config.json and the tokenizer files, staged the same way. */
    snprintf(tmp, sizeof tmp, "%s/config.json.tmp", out_dir);
    staged[1] = true;
    if (write_config(path, tmp, kv_heads, kv_heads != a.kv_heads, err, sizeof err)) {
        fprintf(stderr, ME ": %s\n", err);
        goto out;
    }
    for (size_t i = 0; i < sizeof side_files / sizeof *side_files; i++) {
        char src[4096];
        if (ut_file_size(in_dir, side_files[i], NULL) < 0) {
            if (i == 0)
                fprintf(stderr, ME ": warning: %s has no tokenizer.json: the output is not a "
                        "loadable pack until one is added\n", in_dir);
            continue;
        }
        snprintf(src, sizeof src, "%s/%s", in_dir, side_files[i]);
        snprintf(tmp, sizeof tmp, "%s/%s.tmp", out_dir, side_files[i]);
        staged[2 + i] = true;
        if ((e = pack_copy_file(src, tmp))) {
            fprintf(stderr, ME ": %s -> %s: %s\n", src, tmp, strerror(-e));
            goto out;
        }
    }

    /* Everything is complete: give the files their names, model.q4nx last (it
     * is what makes the directory a Q4NX pack). */
    for (size_t i = sizeof staged / sizeof *staged; i-- > 0;) {
        if (!staged[i])
            continue;
        const char *name = i == 0 ? "model.q4nx" : i == 1 ? "config.json" : side_files[i - 2];
        char dst[4096];
        snprintf(tmp, sizeof tmp, "%s/%s.tmp", out_dir, name);
        snprintf(dst, sizeof dst, "%s/%s", out_dir, name);
        if (rename(tmp, dst) != 0) {
            fprintf(stderr, ME ": %s -> %s: %s\n", tmp, dst, strerror(errno));
            goto out;
        }
        staged[i] = false;
    }
    for (int k = ST_SET_HF; k <= ST_SET_HF_SHARDED; k++)
        if (ut_file_size(out_dir, k == ST_SET_HF ? "model.safetensors"
                                                   : "model.safetensors.index.json", NULL) >= 0)
            fprintf(stderr, ME ": note: %s also holds %s; model.q4nx takes precedence\n", out_dir,
                    k == ST_SET_HF ? "model.safetensors" : "model.safetensors.index.json");
    fprintf(stderr, ME ": %s -> %s/model.q4nx: %zu tensors%s, %.1f MB, %.1f s\n", in_dir, out_dir,
            n, kv_heads != a.kv_heads ? ", KV heads replicated" : "", (double)t[n - 1].end / 1e6,
            ut_now_s() - t0);
    rc = 0;
out:
    for (size_t i = 0; i < sizeof staged / sizeof *staged; i++) {
        if (!staged[i])
            continue;
        const char *name = i == 0 ? "model.q4nx" : i == 1 ? "config.json" : side_files[i - 2];
        snprintf(tmp, sizeof tmp, "%s/%s.tmp", out_dir, name);
        remove(tmp);
    }
    if (rc && made_dir)
        rmdir(out_dir);  /* only if still empty */
    st_set_close(&in);
    json_decref(cfg);
    free(jobs);
    free(t);
    return rc;
}
