/* model-run — drive engine/model/model.h over a pack and write the logits as JSON, in
 * the shape tests/model/ref.py writes, so compare.py can hold the C forward pass
 * against the numpy reference (and against itself, run differently).
 *
 *   model-run PACK --tokens 1,2,3 [--steps N] [--act f32|q8] [--threads N]
 *             [--force 5,6,...] [--mode forward|chunked|tokenwise|fresh] [--chunk K]
 *             [--group G] [--no-kv-dedup] [--qk-norm auto|on|off]
 *             [--isa scalar|avx2|avx512] [--out FILE]
 *
 * Prefill the prompt, then decode `steps` tokens one at a time: the greedy token
 * (argmax, ties -> lowest id) or, with --force, the given ones. Modes:
 *   forward    eng_seq_forward on the whole prompt, then on each token;
 *   chunked    the same batches through eng_seq_embed, eng_seq_layers over
 *              [0,K) [K,2K) ... (the last chunk shorter), eng_seq_head;
 *   tokenwise  the prompt fed one token at a time (the decode path) instead of
 *              as one prefill batch;
 *   fresh      each group of --group G prompt tokens (default 1) as one batch
 *              at position 0 of an emptied sequence (eng_seq_truncate(s, 0)),
 *              logits of its last position; no decode steps.
 * JSON out: {"act", "mode", "info": {...}, "tokens", "prompt_logits": [V],
 *            "steps": [{"token", "logits": [V]}], "greedy": [...]} -- in fresh
 * mode {"act", "mode", "info", "tokens", "fresh": [{"token" (the group's
 * last), "logits"}]}.
 * Logits printed with 9 significant digits (float32 round-trips exactly).
 * --isa forces the kernels (eng_kernels_set_isa); exit 77 if the CPU lacks it. */
#include "engine/engine.h"
#include "engine/kernels/kernels.h"
#include "engine/model/model.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum mode { MODE_FORWARD, MODE_CHUNKED, MODE_TOKENWISE, MODE_FRESH };

static void usage(void)
{
    fprintf(stderr,
            "usage: model-run PACK --tokens 1,2,3 [--steps N] [--act f32|q8] [--threads N]\n"
            "       [--force 5,6,...] [--mode forward|chunked|tokenwise|fresh] [--chunk K]\n"
            "       [--group G] [--no-kv-dedup] [--qk-norm auto|on|off]\n"
            "       [--isa scalar|avx2|avx512] [--out FILE]\n");
}

/* "1,2,3" -> array; returns the count, or -1 on a malformed list. */
static int parse_ids(const char *s, int32_t **out)
{
    int cap = 16, n = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    while (*s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return -1;
        }
        if (n == cap) {
            int32_t *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
            cap *= 2;
        }
        v[n++] = (int32_t)x;
        s = *end ? end + 1 : end;
    }
    *out = v;
    return n;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])  /* strict: a tie keeps the lowest id */
            best = i;
    return best;
}

static json_t *logits_json(const float *x, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_real((double)x[i]));
    return a;
}

/* One batch through the sequence the way `mode` says. */
static int run_batch(eng_seq *s, enum mode mode, int n_layers, int chunk, const int32_t *tok,
                     int n, float *logits)
{
    int rc = 0;
    switch (mode) {
    case MODE_FORWARD:
        return eng_seq_forward(s, tok, n, logits);
    case MODE_FRESH:
    case MODE_TOKENWISE:
        for (int i = 0; i < n && rc == 0; i++)
            rc = eng_seq_forward(s, tok + i, 1, logits);
        return rc;
    case MODE_CHUNKED:
        if ((rc = eng_seq_embed(s, tok, n)))
            return rc;
        for (int l0 = 0; l0 < n_layers && rc == 0; l0 += chunk)
            rc = eng_seq_layers(s, l0, l0 + chunk < n_layers ? l0 + chunk : n_layers);
        return rc ? rc : eng_seq_head(s, logits);
    }
    return -EINVAL;
}

int main(int argc, char **argv)
{
    const char *pack_dir = NULL, *tokens_s = NULL, *force_s = NULL, *out_path = NULL;
    int steps = 20, chunk = 1, group = 1;
    enum mode mode = MODE_FORWARD;
    struct eng_model_opts o = {.n_threads = 1, .act = ENG_ACT_F32, .qk_norm = ENG_QK_NORM_AUTO};

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-') {
            if (pack_dir) {
                usage();
                return 2;
            }
            pack_dir = a;
            continue;
        }
        if (strcmp(a, "--no-kv-dedup") == 0) {
            o.no_kv_dedup = 1;
            continue;
        }
        if (!v) {
            usage();
            return 2;
        }
        i++;
        if (strcmp(a, "--tokens") == 0)
            tokens_s = v;
        else if (strcmp(a, "--force") == 0)
            force_s = v;
        else if (strcmp(a, "--out") == 0)
            out_path = v;
        else if (strcmp(a, "--steps") == 0)
            steps = atoi(v);
        else if (strcmp(a, "--threads") == 0)
            o.n_threads = atoi(v);
        else if (strcmp(a, "--chunk") == 0)
            chunk = atoi(v);
        else if (strcmp(a, "--group") == 0)
            group = atoi(v);
        else if (strcmp(a, "--isa") == 0) {
            enum eng_isa isa = ENG_ISA_SCALAR;
            if (strcmp(v, "avx2") == 0)
                isa = ENG_ISA_AVX2;
            else if (strcmp(v, "avx512") == 0)
                isa = ENG_ISA_AVX512;
            else if (strcmp(v, "scalar") != 0) {
                usage();
                return 2;
            }
            if (eng_kernels_set_isa(isa) != 0) {
                fprintf(stderr, "model-run: this CPU has no %s\n", v);
                return 77;
            }
        }
        else if (strcmp(a, "--act") == 0 && strcmp(v, "f32") == 0)
            o.act = ENG_ACT_F32;
        else if (strcmp(a, "--act") == 0 && strcmp(v, "q8") == 0)
            o.act = ENG_ACT_Q8;
        else if (strcmp(a, "--mode") == 0 && strcmp(v, "forward") == 0)
            mode = MODE_FORWARD;
        else if (strcmp(a, "--mode") == 0 && strcmp(v, "chunked") == 0)
            mode = MODE_CHUNKED;
        else if (strcmp(a, "--mode") == 0 && strcmp(v, "tokenwise") == 0)
            mode = MODE_TOKENWISE;
        else if (strcmp(a, "--mode") == 0 && strcmp(v, "fresh") == 0)
            mode = MODE_FRESH;
        else if (strcmp(a, "--qk-norm") == 0 && strcmp(v, "auto") == 0)
            o.qk_norm = ENG_QK_NORM_AUTO;
        else if (strcmp(a, "--qk-norm") == 0 && strcmp(v, "on") == 0)
            o.qk_norm = ENG_QK_NORM_ON;
        else if (strcmp(a, "--qk-norm") == 0 && strcmp(v, "off") == 0)
            o.qk_norm = ENG_QK_NORM_OFF;
        else {
            fprintf(stderr, "model-run: bad option %s %s\n", a, v);
            usage();
            return 2;
        }
    }
    int32_t *prompt = NULL, *force = NULL;
    int n_prompt = tokens_s ? parse_ids(tokens_s, &prompt) : -1;
    int n_force = force_s ? parse_ids(force_s, &force) : 0;
    if (!pack_dir || n_prompt < 1 || n_force < 0 || steps < 0 || chunk < 1 || group < 1 ||
        (force_s && n_force < steps)) {
        usage();
        return 2;
    }

    char err[512] = "";
    eng_pack *pack = NULL;
    eng_model *model = NULL;
    eng_seq *seq = NULL;
    float *logits = NULL;
    json_t *root = NULL;
    int rc, status = 1;

    if ((rc = eng_pack_open(pack_dir, &pack, err, sizeof err))) {
        fprintf(stderr, "model-run: %s\n", err);
        goto out;
    }
    if ((rc = eng_model_open(pack, &o, &model, err, sizeof err))) {
        fprintf(stderr, "model-run: %s\n", err);
        goto out;
    }
    const struct eng_model_info *mi = eng_model_get_info(model);
    int n_vocab = mi->hp.n_vocab, n_layers = mi->hp.n_layers;
    if ((rc = eng_seq_new(model, n_prompt + steps + 1, &seq, err, sizeof err))) {
        fprintf(stderr, "model-run: %s\n", err);
        goto out;
    }
    logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits)
        goto out;

    static const char *const mode_names[] = {"forward", "chunked", "tokenwise", "fresh"};
    root = json_pack("{s:s, s:s, s:i, s:{s:i, s:i, s:i, s:s, s:I, s:I, s:I, s:i}}", "act",
                     o.act == ENG_ACT_Q8 ? "q8" : "f32", "mode", mode_names[mode], "chunk",
                     chunk, "info", "n_kv_real", mi->n_kv_real, "kv_replication",
                     mi->kv_replication, "n_threads", mi->n_threads, "isa",
                     mi->isa ? mi->isa : "", "kv_bytes_per_token",
                     (json_int_t)mi->kv_bytes_per_token, "weight_bytes_per_token",
                     (json_int_t)mi->weight_bytes_per_token, "macs_per_token",
                     (json_int_t)mi->macs_per_token, "qk_norm", mi->qk_norm);
    json_t *toks = json_array(), *stepv = json_array(), *greedy = json_array();
    json_object_set_new(root, "tokens", toks);
    for (int i = 0; i < n_prompt; i++)
        json_array_append_new(toks, json_integer(prompt[i]));

    if (mode == MODE_FRESH) {
        json_t *fresh = json_array();
        json_object_set_new(root, "fresh", fresh);
        for (int i = 0; i + group <= n_prompt; i += group) {
            eng_seq_truncate(seq, 0);
            if ((rc = eng_seq_forward(seq, &prompt[i], group, logits)) ||
                eng_seq_len(seq) != group) {
                fprintf(stderr, "model-run: tokens %d..: %s (%d)\n", i, eng_seq_error(seq), rc);
                goto out;
            }
            json_array_append_new(fresh, json_pack("{s:i, s:o}", "token", prompt[i + group - 1],
                                                   "logits", logits_json(logits, n_vocab)));
        }
        goto write;
    }
    if ((rc = run_batch(seq, mode, n_layers, chunk, prompt, n_prompt, logits))) {
        fprintf(stderr, "model-run: prompt: %s (%d)\n", eng_seq_error(seq), rc);
        goto out;
    }
    json_object_set_new(root, "prompt_logits", logits_json(logits, n_vocab));
    json_object_set_new(root, "steps", stepv);
    json_object_set_new(root, "greedy", greedy);
    int next = argmax(logits, n_vocab);
    json_array_append_new(greedy, json_integer(next));
    for (int i = 0; i < steps; i++) {
        int32_t tok = force ? force[i] : next;
        if ((rc = run_batch(seq, mode, n_layers, chunk, &tok, 1, logits))) {
            fprintf(stderr, "model-run: step %d: %s (%d)\n", i, eng_seq_error(seq), rc);
            goto out;
        }
        json_array_append_new(stepv, json_pack("{s:i, s:o}", "token", tok, "logits",
                                               logits_json(logits, n_vocab)));
        next = argmax(logits, n_vocab);
        json_array_append_new(greedy, json_integer(next));
    }
    if (eng_seq_len(seq) != n_prompt + steps) {
        fprintf(stderr, "model-run: sequence length %d, expected %d\n", eng_seq_len(seq),
                n_prompt + steps);
        goto out;
    }

write:;
    size_t flags = JSON_COMPACT | JSON_REAL_PRECISION(9);
    if (out_path ? json_dump_file(root, out_path, flags) : json_dumpf(root, stdout, flags)) {
        fprintf(stderr, "model-run: cannot write %s\n", out_path ? out_path : "stdout");
        goto out;
    }
    status = 0;
out:
    json_decref(root);
    free(logits);
    if (seq)
        eng_seq_free(seq);
    if (model)
        eng_model_free(model);
    if (pack)
        eng_pack_free(pack);
    free(prompt);
    free(force);
    return status;
}
