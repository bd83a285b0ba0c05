/* minicpmd-pack convert MODEL.gguf OUT_DIR [--tokenizer tokenizer.json]
 *
 * A llama-architecture GGUF (v2/v3) to a Q4NX pack. The matmul weights of type
 * Q4_0 and Q4_1 are carried over as they are: a Q4_0 block is a Q4_1 block with
 * m = -8 d, the codes are copied and only d and m change format, F16 -> BF16
 * (exact whenever the value has BF16's 8-bit precision, as every scale of a GGUF
 * exported from a pack does; otherwise rounded to nearest even, 2^-8 relative at
 * most, and counted in the summary line). Q8_0, F16, BF16 and F32 matmuls are
 * quantized to Q4_1 as `convert` quantizes an HF checkpoint; the embedding and the
 * norms become BF16. Q and K rows are put back in Hugging Face order
 * (gguf-import.h). The pack's config.json, tokenizer_config.json, tokenizer.json
 * (from tokenizer.ggml.*, or the file given) and chat_template.jinja (from
 * tokenizer.chat_template) are written under temporary names and renamed only
 * when all are complete, model.q4nx last. */
#include "tools/pack/fsutil.h"
#include "tools/pack/gguf-import.h"
#include "tools/pack/gguf.h"
#include "tools/pack/pack.h"
#include "tools/pack/q4nx-write.h"
#include "util/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ME "minicpmd-pack convert"

enum { F_Q4NX, F_CONFIG, F_TOKENIZER, F_TOKCFG, F_TEMPLATE, F_COUNT };
static const char *const out_names[F_COUNT] = {"model.q4nx", "config.json", "tokenizer.json",
                                               "tokenizer_config.json", "chat_template.jinja"};

struct stats {
    uint64_t kept, rounded;  /* Q4 scales carried exactly / rounded to BF16 */
};

/* Streams one tensor of the pack into the writer. */
static int emit(struct q4nx_writer *w, const struct q4nx_tensor *t, const struct gguf_job *j,
                int head_dim, struct q4nx_progress *pr, struct stats *st)
{
    const struct gguf_tensor *src = j->src;
    int64_t cols = t->cols, ng = cols / 32, nrows = t->rows ? t->rows : 1;
    bool codes = t->kind == Q4NX_Q4_1 &&
                 (src->type == GGUF_T_Q4_0 || src->type == GGUF_T_Q4_1);
    size_t block = t->kind == Q4NX_Q4_1 ? (size_t)((cols + 255) / 256) * Q4NX_CHUNK_BYTES
                                        : 32 * (size_t)cols * 2;
    float *rows = malloc(32 * (size_t)cols * sizeof *rows);
    uint8_t *out = malloc(block), *q = malloc(32 * (size_t)cols);
    size_t groups = 32 * (size_t)(ng + 1);
    float *df = malloc(groups * sizeof *df), *mf = malloc(groups * sizeof *mf);
    uint16_t *db = malloc(groups * 2), *mb = malloc(groups * 2);
    int rc = -ENOMEM;
    if (!rows || !out || !q || !df || !mf || !db || !mb)
        goto out;
    for (int64_t r0 = 0; r0 < nrows; r0 += 32) {
        int64_t nr = nrows - r0 < 32 ? nrows - r0 : 32;
        size_t nb;
        if (codes) {
            for (int64_t r = 0; r < 32; r++)
                gguf_row_q4(src, gguf_job_src_row(j, head_dim, r0 + r), q + r * cols,
                            df + r * ng, mf + r * ng);
            for (int64_t k = 0; k < 32 * ng; k++) {
                db[k] = q4nx_f32_to_bf16(df[k]);
                mb[k] = q4nx_f32_to_bf16(mf[k]);
                bool exact = q4nx_bf16_to_f32(db[k]) == df[k] && q4nx_bf16_to_f32(mb[k]) == mf[k];
                st->kept += exact;
                st->rounded += !exact;
            }
            q4nx_pack_rowblock_codes(q, db, mb, cols, out);
            nb = block;
        } else {
            for (int64_t r = 0; r < nr; r++)
                gguf_row_f32(src, gguf_job_src_row(j, head_dim, r0 + r), rows + r * cols);
            nb = q4nx_encode_rows(t, rows, nr, out);  /* Q4_1: nr == 32, checked */
        }
        if ((rc = q4nx_writer_append(w, out, nb)))
            goto out;
        q4nx_progress_add(pr, nb);
    }
    rc = 0;
out:
    free(rows);
    free(out);
    free(q);
    free(df);
    free(mf);
    free(db);
    free(mb);
    return rc;
}

static int dump_json(json_t *j, const char *path)
{
    /* Ten digits: 1e-06 prints as written (as gen writes config.json). */
    return json_dump_file(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) ? -EIO : 0;
}

static int write_text(const char *s, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -errno;
    size_t n = strlen(s);
    int rc = fwrite(s, 1, n, f) == n ? 0 : -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = -EIO;
    return rc;
}

int pack_convert_gguf(const char *in_path, const char *out_dir, const char *tok_path)
{
    char err[4096], tmp[4096], dst[4096];
    struct gguf g;
    struct gguf_model m;
    struct gguf_job *jobs = NULL;
    struct q4nx_tensor *t = NULL;
    json_t *tok = NULL, *tok_cfg = NULL, *cfg = NULL;
    char *tmpl = NULL;
    bool staged[F_COUNT] = {0}, made_dir = false, opened = false;
    struct stats st = {0};
    int rc = 1, e, n = 0;
    double t0 = ut_now_s();

    if (gguf_open(&g, in_path, err, sizeof err)) {
        fprintf(stderr, ME ": %s\n", err);
        return 1;
    }
    opened = true;
    if (gguf_model_read(&g, &m, err, sizeof err)) {
        fprintf(stderr, ME ": %s: %s\n", in_path, err);
        goto out;
    }
    jobs = calloc(pack_layout_count(&m.a), sizeof *jobs);
    t = calloc(pack_layout_count(&m.a), sizeof *t);
    if (!jobs || !t) {
        fprintf(stderr, ME ": out of memory\n");
        goto out;
    }
    if ((n = gguf_model_jobs(&g, &m, jobs, err, sizeof err)) < 0 ||
        gguf_model_json(&g, &m, tok_path == NULL, &tok, &tok_cfg, &cfg, &tmpl, err,
                        sizeof err)) {
        fprintf(stderr, ME ": %s: %s\n", in_path, err);
        goto out;
    }
    for (int i = 0; i < n; i++)
        if (pack_q4nx_tensor(ME, &jobs[i].spec, &t[i]))
            goto out;
    struct stat sb;
    made_dir = stat(out_dir, &sb) != 0;
    if ((e = pack_mkdir_p(out_dir))) {
        fprintf(stderr, ME ": %s: %s\n", out_dir, strerror(-e));
        made_dir = false;
        goto out;
    }
    struct q4nx_writer w = {0};
    snprintf(tmp, sizeof tmp, "%s/model.q4nx.tmp", out_dir);
    staged[F_Q4NX] = true;
    if ((e = q4nx_writer_open(&w, tmp, t, (size_t)n))) {
        fprintf(stderr, ME ": %s: %s\n", tmp, strerror(-e));
        goto out;
    }
    struct q4nx_progress pr;
    q4nx_progress_start(&pr, ME, t[n - 1].end);
    for (int i = 0; i < n && e == 0; i++)
        e = emit(&w, &t[i], &jobs[i], m.a.head_dim, &pr, &st);
    int ce = q4nx_writer_close(&w);
    if ((e = e ? e : ce)) {
        fprintf(stderr, ME ": %s: %s\n", tmp, strerror(-e));
        goto out;
    }
    for (int f = F_CONFIG; f < F_COUNT; f++) {
        if ((f == F_TEMPLATE && !tmpl))
            continue;
        snprintf(tmp, sizeof tmp, "%s/%s.tmp", out_dir, out_names[f]);
        staged[f] = true;
        e = f == F_CONFIG ? dump_json(cfg, tmp)
            : f == F_TOKCFG ? dump_json(tok_cfg, tmp)
            : f == F_TEMPLATE ? write_text(tmpl, tmp)
            : tok_path ? pack_copy_file(tok_path, tmp) : dump_json(tok, tmp);
        if (e) {
            fprintf(stderr, ME ": %s: %s\n", tmp, strerror(-e));
            goto out;
        }
    }
    for (int f = F_COUNT; f-- > 0;) {
        if (!staged[f])
            continue;
        snprintf(tmp, sizeof tmp, "%s/%s.tmp", out_dir, out_names[f]);
        snprintf(dst, sizeof dst, "%s/%s", out_dir, out_names[f]);
        if (rename(tmp, dst) != 0) {
            fprintf(stderr, ME ": %s -> %s: %s\n", tmp, dst, strerror(errno));
            goto out;
        }
        staged[f] = false;
    }
    fprintf(stderr, ME ": %s -> %s/model.q4nx: %d tensors, %.1f MB, %.1f s; Q4_0/Q4_1 scales: "
            "%" PRIu64 " kept exactly, %" PRIu64 " rounded to BF16\n", in_path, out_dir, n,
            (double)t[n - 1].end / 1e6, ut_now_s() - t0, st.kept, st.rounded);
    rc = 0;
out:
    for (int f = 0; f < F_COUNT; f++)
        if (staged[f]) {
            snprintf(tmp, sizeof tmp, "%s/%s.tmp", out_dir, out_names[f]);
            remove(tmp);
        }
    if (rc && made_dir)
        rmdir(out_dir);
    if (opened)
        gguf_close(&g);
    json_decref(tok);
    json_decref(tok_cfg);
    json_decref(cfg);
    free(tmpl);
    free(jobs);
    free(t);
    return rc;
}
