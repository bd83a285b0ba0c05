/* libFuzzer target: arbitrary bytes as a GGUF file through gguf_parse (every
 * length, count, type, shape and offset check of tools/pack/gguf.c), then what
 * `minicpmd-pack convert` does with a parsed file short of writing it: the llama
 * architecture from the metadata, the tensor mapping, every mapped tensor's first
 * and last row decoded (with the Q/K row permutation undone), and config.json /
 * tokenizer.json built from tokenizer.ggml.*. A validation gap shows up as a read
 * outside the buffer (ASan: the input is copied into an exact-size heap block) or
 * a UBSan report. */
#include "tools/pack/gguf-import.h"
#include "tools/pack/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_rows(const struct gguf_job *j, int head_dim)
{
    const struct gguf_tensor *t = j->src;
    int64_t n = t->ne[0], rows = j->spec.rows ? j->spec.rows : 1;
    float *f = malloc((size_t)n * sizeof *f), *d = malloc((size_t)(n / 32 + 1) * sizeof *d),
          *m = malloc((size_t)(n / 32 + 1) * sizeof *m);
    uint8_t *q = malloc((size_t)n);
    if (f && d && m && q) {
        int64_t ends[2] = {0, rows - 1};
        for (int k = 0; k < 2; k++) {
            int64_t r = gguf_job_src_row(j, head_dim, ends[k]);
            if (r < 0 || r >= t->rows)
                abort();  /* the permutation must stay inside the tensor */
            gguf_row_f32(t, r, f);
            if (t->type == GGUF_T_Q4_0 || t->type == GGUF_T_Q4_1)
                gguf_row_q4(t, r, q, d, m);
        }
    }
    free(f);
    free(d);
    free(m);
    free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    struct gguf g;
    struct gguf_model mdl;
    char err[512];
    if (gguf_parse(&g, buf, size, err, sizeof err) != 0) {
        if (!memchr(err, '\0', sizeof err))
            abort();
        free(buf);
        return 0;
    }
    if (gguf_model_read(&g, &mdl, err, sizeof err) == 0 &&
        (uint64_t)mdl.a.layers * (uint64_t)mdl.a.hidden < (1u << 24)) {
        struct gguf_job *jobs = calloc(pack_layout_count(&mdl.a), sizeof *jobs);
        int n = jobs ? gguf_model_jobs(&g, &mdl, jobs, err, sizeof err) : -1;
        for (int i = 0; i < n; i++)
            touch_rows(&jobs[i], mdl.a.head_dim);
        json_t *tok, *tok_cfg, *cfg;
        char *tmpl;
        if (gguf_model_json(&g, &mdl, 1, &tok, &tok_cfg, &cfg, &tmpl, err, sizeof err) == 0) {
            json_decref(tok);
            json_decref(tok_cfg);
            json_decref(cfg);
            free(tmpl);
        }
        free(jobs);
    }
    gguf_close(&g);
    free(buf);
    return 0;
}
