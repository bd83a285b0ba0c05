/* minicpmd-pack inspect DIR [--json] [--strict]
 *
 * What a pack holds and what is wrong with it: the architecture from config.json,
 * the files, the weights format, every tensor (name, dtype, shape, bytes, and for
 * a Q4NX chunk tensor the logical W[out, in] it decodes to), totals, and the
 * problems, each one line naming the file and tensor (§ sections are
 * docs/model-minicpm5.md's):
 *
 *   error    the engine would refuse or compute something else: unreadable or
 *            corrupt file (engine/model/safetensors.c validates every header, dtype,
 *            shape and offset), missing tensor, dtype or shape not matching
 *            config.json, QK-norm in some layers only, a required file missing
 *   warning  loads, but deserves a look: the all-ones q_norm/k_norm shim (§3.5,
 *            not an identity; the engine ignores it on a llama model), unknown
 *            tensors, weight files of another format that are ignored, leftovers
 *   note     facts: replicated KV heads (found by comparing the row groups of
 *            every k_proj/v_proj, §3.4), tied embeddings
 *
 * Exit 0 without errors (with --strict: without errors or warnings), 1 otherwise,
 * 2 for a usage error. --json prints one JSON object with the same content. */
#include "engine/engine.h"
#include "engine/model/safetensors.h"
#include "tools/pack/fsutil.h"
#include "tools/pack/layout.h"
#include "tools/pack/pack.h"
#include "tools/pack/q4nx-write.h"
#include "tools/pack/st-set.h"
#include "util/fs.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct tinfo {
    const struct eng_st_tensor *t;
    size_t file;
    enum pack_role role;
    int layer;
    int64_t rows, cols;  /* logical shape when the role and config tell it */
    bool q4;             /* a Q4_1 chunk tensor */
    bool ok;             /* dtype and shape as config.json expects */
};

struct report {
    json_t *root, *problems, *notes;
    int errors, warnings;
    int suppressed;  /* errors past MAX_LISTED, counted but not listed */
};

#define MAX_LISTED 30

static void add(struct report *r, const char *severity, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add(struct report *r, const char *severity, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (strcmp(severity, "note") == 0) {
        json_array_append_new(r->notes, json_string(msg));
        return;
    }
    if (strcmp(severity, "error") == 0 && r->errors++ >= MAX_LISTED) {
        r->suppressed++;  /* a config off by one field can mismatch 100s of tensors */
        return;
    }
    if (strcmp(severity, "error") != 0)
        r->warnings++;
    json_array_append_new(r->problems, json_pack("{s:s, s:s}", "severity", severity, "message", msg));
}

static json_t *shape_json(const struct eng_st_tensor *t)
{
    json_t *a = json_array();
    for (int i = 0; i < t->n_dims; i++)
        json_array_append_new(a, json_integer(t->shape[i]));
    return a;
}

/* ---- files ---------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void scan_files(struct report *r, const char *dir)
{
    json_t *files = json_array();
    json_object_set_new(r->root, "files", files);
    DIR *d = opendir(dir);
    if (!d) {
        add(r, "error", "%s: %s", dir, strerror(errno));
        return;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char **nn = realloc(names, (n + 1) * sizeof *names);
        if (!nn)
            break;
        names = nn;
        if (!(names[n] = strdup(e->d_name)))
            break;
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        int64_t sz = ut_file_size(dir, names[i], NULL);
        if (sz >= 0)
            json_array_append_new(files, json_pack("{s:s, s:I}", "name", names[i], "bytes",
                                                   (json_int_t)sz));
        size_t len = strlen(names[i]);
        if (sz >= 0 && len > 4 && strcmp(names[i] + len - 4, ".tmp") == 0)
            add(r, "warning", "%s/%s: a leftover temporary file (an interrupted gen or convert?)",
                dir, names[i]);
        free(names[i]);
    }
    free(names);

    static const struct {
        const char *name;
        const char *severity;
    } wanted[] = {
        {"config.json", "error"},
        {"tokenizer.json", "error"},
        {"tokenizer_config.json", "warning"},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof *wanted; i++) {
        const char *why;
        int64_t sz = ut_file_size(dir, wanted[i].name, &why);
        if (sz < 0 || sz == 0)
            add(r, wanted[i].severity, "%s/%s: %s", dir, wanted[i].name,
                sz == 0 ? "file is empty" : sz == -ENOENT ? "missing" : why);
    }
}

/* ---- config.json ---------------------------------------------------------------------- */

static bool read_config(struct report *r, const char *dir, struct pack_arch *a)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ut_file_size(dir, "config.json", NULL) < 0)
        return false;  /* reported with the files */
    json_error_t jerr;
    json_t *cfg = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!cfg) {
        add(r, "error", "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        return false;
    }
    json_object_set(r->root, "config", cfg);
    bool ok = pack_arch_from_config(cfg, path, a, err, sizeof err) == 0;
    if (!ok)
        add(r, "error", "%s", err);
    if (!json_is_string(json_object_get(cfg, "model_type")))
        add(r, "error", "%s: missing string field 'model_type'", path);
    if (ok) {
        json_object_set_new(r->root, "architecture",
                            json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b}", "hidden_size",
                                      a->hidden, "num_hidden_layers", a->layers,
                                      "num_attention_heads", a->heads, "num_key_value_heads",
                                      a->kv_heads, "head_dim", a->head_dim, "intermediate_size",
                                      a->ffn, "vocab_size", a->vocab, "tie_word_embeddings",
                                      a->tied));
        if (a->tied)
            add(r, "note", "tie_word_embeddings: lm_head is the embedding");
    }
    json_decref(cfg);
    return ok;
}

/* ---- tensors ----------------------------------------------------------------------------- */

static void check_tensor(struct report *r, const struct st_set *s, const struct pack_arch *a,
                         bool have_arch, struct tinfo *ti)
{
    const struct eng_st_tensor *t = ti->t;
    const char *file = s->names[ti->file];
    char got[160];
    eng_st_shape_str(t, got, sizeof got);
    ti->role = pack_role_parse(t->name, &ti->layer);
    size_t len = strlen(t->name);
    if (ti->role == ROLE_OTHER && len > 5 && strcmp(t->name + len - 5, ".bias") == 0) {
        add(r, "error", "%s: tensor '%s': biases are not supported (MiniCPM5 has none; the "
            "engine would compute without it)", file, t->name);
        return;
    }
    if (ti->role == ROLE_OTHER) {
        add(r, "warning", "%s: unexpected tensor '%s' (not a MiniCPM5/Llama tensor; not loaded)",
            file, t->name);
        return;
    }
    ti->q4 = s->kind == ST_SET_Q4NX && pack_role_is_matmul(ti->role) && t->dtype == ENG_ST_I8 &&
             t->n_dims == 2 && t->shape[1] == Q4NX_CHUNK_BYTES;
    if (!have_arch)
        return;
    if (ti->layer >= a->layers) {
        add(r, "error", "%s: tensor '%s' is past num_hidden_layers %d", file, t->name, a->layers);
        return;
    }
    pack_role_shape(a, ti->role, &ti->rows, &ti->cols);
    if (s->kind == ST_SET_Q4NX && pack_role_is_matmul(ti->role)) {
        int64_t chunks = q4nx_num_chunks(ti->rows, ti->cols);
        if (ti->rows % Q4NX_CHUNK_ROWS != 0) {
            add(r, "error", "%s: tensor '%s': config.json gives it %" PRId64
                " rows, not a multiple of 32 as Q4_1 chunks need", file, t->name, ti->rows);
        } else if (!ti->q4 || t->shape[0] != chunks) {
            add(r, "error", "%s: tensor '%s': expected I8 [%" PRId64 ", 5120] (Q4_1 chunks of "
                "[%" PRId64 ", %" PRId64 "] from config.json), got %s %s", file, t->name, chunks,
                ti->rows, ti->cols, eng_st_dtype_name(t->dtype), got);
        } else {
            ti->ok = true;
        }
        return;
    }
    bool shape_ok = ti->rows ? t->n_dims == 2 && t->shape[0] == ti->rows &&
                                   t->shape[1] == ti->cols
                             : t->n_dims == 1 && t->shape[0] == ti->cols;
    if (t->dtype != ENG_ST_BF16 || !shape_ok) {
        if (ti->rows)
            add(r, "error", "%s: tensor '%s': expected BF16 [%" PRId64 ", %" PRId64
                "] (from config.json), got %s %s", file, t->name, ti->rows, ti->cols,
                eng_st_dtype_name(t->dtype), got);
        else
            add(r, "error", "%s: tensor '%s': expected BF16 [%" PRId64 "] (from config.json), "
                "got %s %s", file, t->name, ti->cols, eng_st_dtype_name(t->dtype), got);
        return;
    }
    ti->ok = true;
}

static int cmp_tinfo(const void *pa, const void *pb)
{
    const struct tinfo *a = pa, *b = pb;
    if (a->file != b->file)
        return a->file < b->file ? -1 : 1;
    return a->t->offset < b->t->offset ? -1 : a->t->offset > b->t->offset;
}

static bool all_ones_bf16(const struct eng_st_tensor *t)
{
    const uint8_t *p = t->data;
    for (int64_t i = 0; i < t->numel; i++)
        if (p[2 * i] != 0x80 || p[2 * i + 1] != 0x3F)  /* 1.0 = 0x3F80 */
            return false;
    return true;
}

/* q_norm/k_norm: none (MiniCPM5), a real QK-norm, or FLM's all-ones shim. */
static void check_qk_norm(struct report *r, const struct pack_arch *a, const struct tinfo *ti,
                          size_t n, const char *model_type)
{
    int present[2] = {0, 0}, ones = 0, ok = 0;
    for (size_t i = 0; i < n; i++) {
        if ((ti[i].role != ROLE_Q_NORM && ti[i].role != ROLE_K_NORM) || ti[i].layer >= a->layers)
            continue;
        present[ti[i].role == ROLE_K_NORM]++;
        if (ti[i].ok) {
            ok++;
            ones += all_ones_bf16(ti[i].t);
        }
    }
    const char *state = "absent";
    if (present[0] || present[1]) {
        if (present[0] != a->layers || present[1] != a->layers)
            add(r, "error", "q_norm in %d and k_norm in %d of %d layers: QK-norm must be in every "
                "layer or none", present[0], present[1], a->layers);
        if (ok && ones == ok) {
            state = "all-ones shim";
            add(r, "warning", "all-ones q_norm/k_norm in %d layers: the FastFlowLM loader shim "
                "(not an identity, §3.5)%s", present[0],
                model_type && strcmp(model_type, "llama") == 0
                    ? "; the engine ignores it on this llama model"
                    : "; it changes the attention scores of a model trained without QK-norm");
        } else {
            state = "present";
            add(r, "note", "QK-norm tensors present (not all ones): applied as a real QK-norm");
        }
    }
    json_object_set_new(r->root, "qk_norm", json_string(state));
}

static int64_t gcd64(int64_t x, int64_t y)
{
    while (y) {
        int64_t t = x % y;
        x = y;
        y = t;
    }
    return x;
}

/* Largest f dividing `heads` such that heads j .. j+f-1 are byte-identical for
 * every j multiple of f (replication by repeat_interleave, §3.4). A head is a
 * contiguous byte range in both formats: head_dim rows of BF16, or, in Q4NX with
 * head_dim a multiple of 32, head_dim / 32 row blocks of chunks. */
static int replication(const struct tinfo *ti, int heads)
{
    size_t hb = (size_t)(ti->t->nbytes / (uint64_t)heads);
    const uint8_t *p = ti->t->data;
    for (int f = heads; f > 1; f--) {
        if (heads % f)
            continue;
        bool same = true;
        for (int h = 0; h < heads && same; h++)
            same = h % f == 0 || memcmp(p + (size_t)h * hb, p + (size_t)(h - h % f) * hb, hb) == 0;
        if (same)
            return f;
    }
    return 1;
}

static void check_kv(struct report *r, const struct pack_arch *a, const struct st_set *s,
                     const struct tinfo *ti, size_t n)
{
    if (s->kind == ST_SET_Q4NX && a->head_dim % Q4NX_CHUNK_ROWS != 0)
        return;  /* heads do not align with row blocks: not compared */
    int64_t f = 0;
    int tensors = 0, want = 2 * a->layers;
    for (size_t i = 0; i < n; i++) {
        if ((ti[i].role != ROLE_K && ti[i].role != ROLE_V) || !ti[i].ok)
            continue;
        f = gcd64(f, replication(&ti[i], a->kv_heads));
        tensors++;
    }
    if (tensors == 0 || tensors != want)
        return;
    json_object_set_new(r->root, "kv_heads",
                        json_pack("{s:i, s:I, s:I}", "stored", a->kv_heads, "distinct",
                                  (json_int_t)(a->kv_heads / f), "replication", (json_int_t)f));
    if (f > 1)
        add(r, "note", "replicated KV heads: %d stored = %" PRId64 " distinct x %" PRId64
            " (identical row groups in k_proj and v_proj of all %d layers); the engine computes "
            "and caches %" PRId64, a->kv_heads, a->kv_heads / f, f, a->layers, a->kv_heads / f);
}

static void check_weights(struct report *r, const char *dir, const struct pack_arch *a,
                          bool have_arch, const char *model_type)
{
    char err[1024];
    enum st_set_kind kind;
    if (st_set_detect(dir, &kind, err, sizeof err)) {
        add(r, "error", "%s", err);
        return;
    }
    json_t *w = json_pack("{s:s}", "format", st_set_kind_name(kind));
    json_object_set_new(r->root, "weights", w);
    static const char *const names[] = {"model.q4nx", "model.safetensors",
                                        "model.safetensors.index.json"};
    for (int k = kind + 1; k <= ST_SET_HF_SHARDED; k++)
        if (ut_file_size(dir, names[k], NULL) >= 0 &&
            !(kind == ST_SET_HF && k == ST_SET_HF_SHARDED))
            add(r, "warning", "%s/%s is ignored: %s takes precedence", dir, names[k],
                names[kind]);

    struct st_set s;
    if (st_set_open(&s, dir, kind, err, sizeof err)) {
        add(r, "error", "%s", err);
        return;
    }
    json_t *wf = json_array();
    uint64_t file_bytes = 0;
    size_t n = 0;
    for (size_t f = 0; f < s.n; f++) {
        json_array_append_new(wf, json_string(s.names[f]));
        file_bytes += eng_st_file_size(s.files[f]);
        n += eng_st_count(s.files[f]);
    }
    json_object_set_new(w, "files", wf);
    json_object_set_new(w, "bytes", json_integer((json_int_t)file_bytes));

    struct tinfo *ti = calloc(n ? n : 1, sizeof *ti);
    if (!ti) {
        add(r, "error", "out of memory");
        st_set_close(&s);
        return;
    }
    size_t k = 0;
    for (size_t f = 0; f < s.n; f++)
        for (size_t i = 0; i < eng_st_count(s.files[f]); i++) {
            const struct eng_st_tensor *t = eng_st_at(s.files[f], i);
            if (s.weight_map) {
                const char *mf = json_string_value(json_object_get(s.weight_map, t->name));
                if (!mf || strcmp(mf, s.names[f]) != 0) {
                    add(r, "warning", "%s: tensor '%s' is not in %s's weight_map for this "
                        "shard (ignored)", s.names[f], t->name, s.weights_name);
                    continue;
                }
            }
            ti[k].t = t;
            ti[k].file = f;
            k++;
        }
    n = k;
    qsort(ti, n, sizeof *ti, cmp_tinfo);

    json_t *list = json_array(), *by = json_object();
    uint64_t bytes = 0, params = 0;
    for (size_t i = 0; i < n; i++) {
        check_tensor(r, &s, a, have_arch, &ti[i]);
        const struct eng_st_tensor *t = ti[i].t;
        json_t *e = json_pack("{s:s, s:s, s:s, s:o, s:I, s:s}", "name", t->name, "file",
                              s.names[ti[i].file], "dtype", eng_st_dtype_name(t->dtype), "shape",
                              shape_json(t), "bytes", (json_int_t)t->nbytes, "role",
                              pack_role_name(ti[i].role));
        const char *kind_name = eng_st_dtype_name(t->dtype);
        if (ti[i].q4) {
            kind_name = "Q4_1";
            json_object_set_new(e, "quant", json_string("Q4_1"));
            if (ti[i].ok)
                json_object_set_new(e, "logical", json_pack("[I, I]", (json_int_t)ti[i].rows,
                                                            (json_int_t)ti[i].cols));
        }
        params += ti[i].q4 && ti[i].ok ? (uint64_t)(ti[i].rows * ti[i].cols) : (uint64_t)t->numel;
        bytes += t->nbytes;
        json_t *b = json_object_get(by, kind_name);
        if (!b) {
            b = json_pack("{s:I, s:I}", "tensors", (json_int_t)0, "bytes", (json_int_t)0);
            json_object_set_new(by, kind_name, b);
        }
        json_object_set_new(b, "tensors",
                            json_integer(json_integer_value(json_object_get(b, "tensors")) + 1));
        json_object_set_new(b, "bytes", json_integer(json_integer_value(json_object_get(b, "bytes")) +
                                                     (json_int_t)t->nbytes));
        json_array_append_new(list, e);
    }
    json_object_set_new(r->root, "tensors", list);
    json_t *totals = json_pack("{s:I, s:I, s:I, s:o}", "tensors", (json_int_t)n, "bytes",
                               (json_int_t)bytes, "parameters", (json_int_t)params, "by_dtype",
                               by);
    json_object_set_new(r->root, "totals", totals);

    if (have_arch) {
        size_t ne = pack_layout_count(a);
        struct pack_spec *sp = calloc(ne, sizeof *sp);
        if (sp) {
            pack_layout(a, sp);
            int missing = 0;
            for (size_t i = 0; i < ne; i++) {
                if (st_set_find(&s, sp[i].name, NULL))
                    continue;
                if (sp[i].role == ROLE_LM_HEAD && a->tied) {
                    ne--;
                    continue;
                }
                if (++missing <= 20)
                    add(r, "error", "%s: missing tensor '%s'", s.weights_name, sp[i].name);
            }
            if (missing > 20)
                add(r, "error", "%s: %d more tensors missing", s.weights_name, missing - 20);
            free(sp);
        }
        json_object_set_new(totals, "expected", json_integer((json_int_t)ne));
        check_qk_norm(r, a, ti, n, model_type);
        check_kv(r, a, &s, ti, n);
    }
    free(ti);
    st_set_close(&s);
}

/* ---- output -------------------------------------------------------------------------------- */

static const char *jstr(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "?";
}

static json_int_t jint(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void print_text(struct report *r, const char *dir)
{
    json_t *root = r->root, *cfg = json_object_get(root, "config");
    json_t *arch = json_object_get(root, "architecture"), *v;
    size_t i;
    printf("pack %s\n", dir);
    if (cfg) {
        json_t *archs = json_object_get(cfg, "architectures");
        printf("  %s, model_type %s", json_string_value(json_array_get(archs, 0))
                                          ? json_string_value(json_array_get(archs, 0)) : "?",
               jstr(cfg, "model_type"));
        json_t *g = json_object_get(cfg, "minicpmd_generated");
        if (g)
            printf(" (minicpmd-pack gen %s, seed %" JSON_INTEGER_FORMAT ")", jstr(g, "preset"),
                   jint(g, "seed"));
        printf("\n");
    }
    if (arch) {
        printf("  hidden %" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT " layers, %"
               JSON_INTEGER_FORMAT " heads x %" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT
               " KV heads, ffn %" JSON_INTEGER_FORMAT ", vocab %" JSON_INTEGER_FORMAT,
               jint(arch, "hidden_size"), jint(arch, "num_hidden_layers"),
               jint(arch, "num_attention_heads"), jint(arch, "head_dim"),
               jint(arch, "num_key_value_heads"), jint(arch, "intermediate_size"),
               jint(arch, "vocab_size"));
        if ((v = json_object_get(cfg, "max_position_embeddings")) && json_is_number(v))
            printf(", context %g", json_number_value(v));
        printf("\n ");
        if ((v = json_object_get(cfg, "rms_norm_eps")) && json_is_number(v))
            printf(" rms_norm_eps %g,", json_number_value(v));
        if ((v = json_object_get(cfg, "rope_theta")) && json_is_number(v))
            printf(" rope_theta %g,", json_number_value(v));
        printf(" %s\n", json_is_true(json_object_get(arch, "tie_word_embeddings"))
                            ? "tied embeddings" : "separate lm_head");
    }
    if (json_array_size(json_object_get(root, "files")))
        printf("files\n");
    json_array_foreach(json_object_get(root, "files"), i, v)
        printf("  %-36s %12" JSON_INTEGER_FORMAT "\n", jstr(v, "name"), jint(v, "bytes"));
    json_t *w = json_object_get(root, "weights");
    if (w) {
        printf("weights: %s (", jstr(w, "format"));
        json_t *f;
        json_array_foreach(json_object_get(w, "files"), i, f)
            printf("%s%s", i ? ", " : "", json_string_value(f));
        printf("; %" JSON_INTEGER_FORMAT " bytes)\n", jint(w, "bytes"));
    }
    json_t *tensors = json_object_get(root, "tensors");
    if (tensors && json_array_size(tensors)) {
        bool sharded = w && json_array_size(json_object_get(w, "files")) > 1;
        printf("tensors\n  %-50s %-5s %-14s %12s  %s\n", "name", "dtype", "shape", "bytes",
               "decodes to");
        json_array_foreach(tensors, i, v) {
            char shape[64] = "[";
            json_t *d;
            size_t k;
            json_array_foreach(json_object_get(v, "shape"), k, d) {
                size_t len = strlen(shape);
                snprintf(shape + len, sizeof shape - len, "%s%" JSON_INTEGER_FORMAT,
                         k ? ", " : "", json_integer_value(d));
            }
            strncat(shape, "]", sizeof shape - strlen(shape) - 1);
            printf("  %-50s %-5s %-14s %12" JSON_INTEGER_FORMAT, jstr(v, "name"), jstr(v, "dtype"),
                   shape, jint(v, "bytes"));
            json_t *lg = json_object_get(v, "logical");
            if (lg)
                printf("  Q4_1 [%" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT "]",
                       json_integer_value(json_array_get(lg, 0)),
                       json_integer_value(json_array_get(lg, 1)));
            else if (json_object_get(v, "quant"))
                printf("  Q4_1 chunks");
            if (sharded)
                printf("  (%s)", jstr(v, "file"));
            printf("\n");
        }
    }
    json_t *t = json_object_get(root, "totals");
    if (t) {
        printf("totals: %" JSON_INTEGER_FORMAT " tensors", jint(t, "tensors"));
        if (json_object_get(t, "expected"))
            printf(" (%" JSON_INTEGER_FORMAT " expected)", jint(t, "expected"));
        printf(", %" JSON_INTEGER_FORMAT " bytes of tensor data, %.2f M parameters\n  ",
               jint(t, "bytes"), (double)jint(t, "parameters") / 1e6);
        const char *k;
        json_t *b;
        bool first = true;
        json_object_foreach(json_object_get(t, "by_dtype"), k, b) {
            printf("%s%s: %" JSON_INTEGER_FORMAT " tensors, %" JSON_INTEGER_FORMAT " bytes",
                   first ? "" : "; ", k, jint(b, "tensors"), jint(b, "bytes"));
            first = false;
        }
        printf("\n");
    }
    json_t *kv = json_object_get(root, "kv_heads");
    if (kv)
        printf("kv heads: %" JSON_INTEGER_FORMAT " stored, %" JSON_INTEGER_FORMAT " distinct%s\n",
               jint(kv, "stored"), jint(kv, "distinct"),
               jint(kv, "replication") > 1 ? " (replicated)" : "");
    if (json_object_get(root, "qk_norm"))
        printf("qk norm: %s\n", jstr(root, "qk_norm"));
    json_array_foreach(r->notes, i, v)
        printf("note: %s\n", json_string_value(v));
    json_array_foreach(r->problems, i, v)
        printf("%s: %s\n", jstr(v, "severity"), jstr(v, "message"));
    printf("%s: %d error(s), %d warning(s)\n", r->errors ? "PROBLEMS" : "ok", r->errors,
           r->warnings);
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: minicpmd-pack inspect DIR [--json] [--strict]\n\n"
               "Prints the pack's architecture (config.json), files, weights format, every tensor\n"
               "(name, dtype, shape, bytes; for Q4_1 chunk tensors the [out, in] they decode to),\n"
               "totals, and any problem. Exit 0 when no error was found (--strict: no error and\n"
               "no warning), 1 otherwise, 2 for a usage error. --json: one JSON object.\n");
}

int pack_cmd_inspect(int argc, char **argv)
{
    const char *dir = NULL;
    bool as_json = false, strict = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--json") == 0) {
            as_json = true;
        } else if (strcmp(argv[i], "--strict") == 0) {
            strict = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "minicpmd-pack inspect: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        } else if (!dir) {
            dir = argv[i];
        } else {
            fprintf(stderr, "minicpmd-pack inspect: one DIR only (see --help)\n");
            return 2;
        }
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }

    struct report r = {.root = json_object(), .problems = json_array(), .notes = json_array()};
    json_object_set_new(r.root, "dir", json_string(dir));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        add(&r, "error", "%s: %s", dir,
            stat(dir, &sb) != 0 ? strerror(errno) : "not a directory (a pack is a directory)");
    } else {
        scan_files(&r, dir);
        struct pack_arch a = {0};
        bool have_arch = read_config(&r, dir, &a);
        const char *mt = json_string_value(
            json_object_get(json_object_get(r.root, "config"), "model_type"));
        check_weights(&r, dir, &a, have_arch, mt);
        /* The engine's own opening of the pack: whatever it refuses is an error,
         * even if a check above missed it. */
        if (r.errors == 0) {
            eng_pack *p = NULL;
            char err[1024];
            if (eng_pack_open(dir, &p, err, sizeof err) != 0)
                add(&r, "error", "engine: %s", err);
            eng_pack_free(p);
        }
    }
    if (r.suppressed) {
        char msg[128];
        snprintf(msg, sizeof msg, "... and %d more errors", r.suppressed);
        json_array_append_new(r.problems, json_pack("{s:s, s:s}", "severity", "error", "message",
                                                    msg));
    }
    json_object_set(r.root, "problems", r.problems);
    json_object_set(r.root, "notes", r.notes);
    int rc = r.errors || (strict && r.warnings) ? 1 : 0;
    json_object_set_new(r.root, "errors", json_integer(r.errors));
    json_object_set_new(r.root, "warnings", json_integer(r.warnings));
    json_object_set_new(r.root, "ok", json_boolean(rc == 0));
    if (as_json) {
        char *s = json_dumps(r.root, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        if (s)
            printf("%s\n", s);
        free(s);
    } else {
        print_text(&r, dir);
    }
    json_decref(r.problems);
    json_decref(r.notes);
    json_decref(r.root);
    return rc;
}
