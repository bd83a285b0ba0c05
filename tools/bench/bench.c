/* minicpmd-bench: how fast the CPU forward pass runs on a pack, and how close
 * that is to what the machine allows.
 *
 *   minicpmd-bench PACKDIR [--threads N] [--prompt N] [--gen N] [--reps N]
 *                          [--act q8|f32] [--isa scalar|avx2|avx512] [--json]
 *                          [--decode-kernel vbmi|vnni-tile|avx2] [--few-kernel K]
 *                          [--hybrid N [--npu-tps R] [--npu-kv-heads H]]
 *
 * Prefill: one eng_seq_forward() of an N-token prompt (random ids, fixed seed).
 * Decode: greedy argmax after that prompt, one token per eng_seq_forward().
 * Each is repeated --reps times on a fresh sequence; the medians are reported.
 *
 * Next to them, in the same run and with the same thread count, the machine's
 * roofs (tools/bench/roof.h): decode reads every weight once per token, so its
 * ceiling is read bandwidth / weight bytes per token; prefill is matmul-bound,
 * so its ceiling is the int8 MAC peak (f32 activations: the FMA peak, one MAC
 * per FMA lane) / MACs per prompt token (every layer's matmuls; the lm_head runs
 * once per prompt, for the last position). The ratios say how much is left on
 * the table.
 * Decode is also compared with the read roof measured right around each of its
 * reps (the "same-moment" ratio): where other tenants move the host's memory
 * bandwidth from minute to minute, that is the ratio that means something.
 * --isa limits the kernels and the roofs alike to a lesser ISA (what a CPU
 * without AVX-512 would run, measured here).
 * The decode kernel and the kernel of decode batches are the model's choice at
 * load (engine/model/kchoice.c: each candidate timed on the pack's matrices; the
 * tables are printed) unless --isa, --decode-kernel (both) or --few-kernel (the
 * batches') forces one. The report names the CPU (cpuid family, model,
 * brand string).
 *
 * --hybrid N instead reports the time to first token of an N-token prompt prefilled
 * on the CPU and decoded on the NPU against the NPU prefilling it token by token
 * (hybrid.h: what is measured and what is given).
 *
 * Exit status: 0, or 1 with one line on stderr. */
#include "engine/engine.h"
#include "engine/kernels/kernels.h"
#include "engine/model/model.h"
#include "tools/bench/hybrid.h"
#include "tools/bench/roof.h"
#include "util/clock.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_ROOF_BYTES ((size_t)1 << 30) /* far past any cache */
#define BENCH_ROOF_REPS 5
#define BENCH_ROOF_PAIRED_REPS 2 /* read roof before and after each decode rep: 2 passes each */
#define BENCH_ROOF_SECONDS 0.5
#define BENCH_SEED 0x6d696e69637075ull
#define BENCH_MAX_BATCH 16

struct bench_opts {
    const char *dir;
    int threads, prompt, gen, reps, json;
    int batch;                  /* > 1: also decode that many sequences as one batch */
    enum eng_act act;
    int isa;                    /* -1: the best this CPU has, else an enum eng_isa */
    const char *decode_kernel;  /* forced after load (eng_decode_kernel_set), or NULL */
    const char *few_kernel;     /* forced after that (eng_few_kernel_set), or NULL */
    enum eng_weights_place weights;
    struct hybrid_opts hybrid;  /* .tokens > 0: --hybrid */
};

struct bench_result {
    double prefill_tps, decode_tps;       /* medians, tokens per second */
    double batch_tps;                     /* --batch: decode tokens/s of all sequences */
    double roof_gbs, roof_int8_macs, roof_f32_flops;
    /* The read roof measured right before and right after each decode rep (the
     * better of the two), and decode's share of it, rep by rep: on a host whose
     * memory bandwidth moves from minute to minute with other tenants, the one
     * roof taken at the start can be far from what the reps had. Medians. */
    double roof_paired_gbs, decode_paired_ratio, roof_paired_min, roof_paired_max;
    double load_s;                        /* eng_model_open, the weights' copy included */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int32_t argmax(const float *v, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: minicpmd-bench PACKDIR [--threads N] [--prompt N (512)] [--gen N (64)]\n"
               "                      [--batch N (1..16: also decode N sequences as one batch)]\n"
               "                      [--reps N (3)] [--act q8|f32] [--isa scalar|avx2|avx512]\n"
               "                      [--decode-kernel vbmi|vnni-tile|avx2] [--few-kernel K]\n"
               "                      [--weights mmap|copy|auto (auto)] [--json]\n"
               "                      [--hybrid N [--npu-tps R (26)] [--npu-kv-heads H (8)]]\n"
               "Prefill and decode tokens/s of the CPU forward pass, medians over --reps,\n"
               "against the machine's read-bandwidth and int8/f32 compute roofs.\n"
               "--threads 0 (the default) uses every online CPU. --hybrid N: the first token\n"
               "of an N-token prompt prefilled on the CPU (batches of --prompt, at most 512)\n"
               "and decoded on an NPU of the given rate, against prefill on the NPU.\n");
}

static int parse_int(const char *name, const char *v, int lo, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > 1 << 24) {
        fprintf(stderr, "minicpmd-bench: --%s wants an integer >= %d, not '%s'\n", name, lo, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    static const struct option longopts[] = {
        {"threads", required_argument, NULL, 't'}, {"prompt", required_argument, NULL, 'p'},
        {"gen", required_argument, NULL, 'g'},     {"reps", required_argument, NULL, 'r'},
        {"act", required_argument, NULL, 'a'},     {"json", no_argument, NULL, 'j'},
        {"isa", required_argument, NULL, 'i'},     {"weights", required_argument, NULL, 'w'},
        {"batch", required_argument, NULL, 'b'},   {"decode-kernel", required_argument, NULL, 'k'},
        {"hybrid", required_argument, NULL, 'H'},  {"npu-tps", required_argument, NULL, 'N'},
        {"npu-kv-heads", required_argument, NULL, 'K'}, {"few-kernel", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    *o = (struct bench_opts){ .prompt = 512, .gen = 64, .reps = 3, .act = ENG_ACT_Q8, .isa = -1,
                             .weights = ENG_WEIGHTS_PLACE_AUTO,
                             .hybrid = {.npu_tps = 26.0, .npu_kv_heads = 8} };
    int c, rc = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 't':
            rc = parse_int("threads", optarg, 0, &o->threads);
            break;
        case 'p':
            rc = parse_int("prompt", optarg, 1, &o->prompt);
            break;
        case 'g':
            rc = parse_int("gen", optarg, 1, &o->gen);
            break;
        case 'r':
            rc = parse_int("reps", optarg, 1, &o->reps);
            break;
        case 'k':
            o->decode_kernel = optarg;
            break;
        case 'f':
            o->few_kernel = optarg;
            break;
        case 'H':
            rc = parse_int("hybrid", optarg, 1, &o->hybrid.tokens);
            break;
        case 'K':
            rc = parse_int("npu-kv-heads", optarg, 1, &o->hybrid.npu_kv_heads);
            break;
        case 'N': {
            char *end;
            o->hybrid.npu_tps = strtod(optarg, &end);
            if (end == optarg || *end || !(o->hybrid.npu_tps > 0 && o->hybrid.npu_tps < 1e6)) {
                fprintf(stderr, "minicpmd-bench: --npu-tps wants tokens/s > 0, not '%s'\n",
                        optarg);
                rc = -1;
            }
            break;
        }
        case 'b':
            rc = parse_int("batch", optarg, 1, &o->batch);
            if (rc == 0 && o->batch > BENCH_MAX_BATCH) {
                fprintf(stderr, "minicpmd-bench: --batch is at most %d\n", BENCH_MAX_BATCH);
                rc = -1;
            }
            break;
        case 'a':
            if (strcmp(optarg, "q8") == 0) {
                o->act = ENG_ACT_Q8;
            } else if (strcmp(optarg, "f32") == 0) {
                o->act = ENG_ACT_F32;
            } else {
                fprintf(stderr, "minicpmd-bench: --act wants q8 or f32, not '%s'\n", optarg);
                rc = -1;
            }
            break;
        case 'i': {
            enum eng_isa isa;
            o->isa = eng_isa_parse(optarg, &isa) == 0 ? (int)isa : -1;
            if (o->isa < 0) {
                fprintf(stderr, "minicpmd-bench: --isa wants scalar, avx2 or avx512, not '%s'\n",
                        optarg);
                rc = -1;
            } else if (eng_kernels_set_isa((enum eng_isa)o->isa) != 0 ||
                       roof_set_isa((enum eng_isa)o->isa) != 0) {
                fprintf(stderr, "minicpmd-bench: this CPU lacks %s\n", optarg);
                rc = -1;
            }
            break;
        }
        case 'w':
            if (strcmp(optarg, "mmap") == 0) {
                o->weights = ENG_WEIGHTS_PLACE_MMAP;
            } else if (strcmp(optarg, "copy") == 0) {
                o->weights = ENG_WEIGHTS_PLACE_COPY;
            } else if (strcmp(optarg, "auto") == 0) {
                o->weights = ENG_WEIGHTS_PLACE_AUTO;
            } else {
                fprintf(stderr, "minicpmd-bench: --weights wants mmap, copy or auto, not '%s'\n",
                        optarg);
                rc = -1;
            }
            break;
        case 'j':
            o->json = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            rc = -1;
            break;
        }
    }
    if (rc == 0 && optind != argc - 1) {
        usage(stderr);
        rc = -1;
    }
    if (rc == 0)
        o->dir = argv[optind];
    return rc;
}

/* The roofs once, before the model runs: the read roof as the best of
 * BENCH_ROOF_REPS passes, the compute peaks. */
static int measure_roofs(eng_pool *pool, struct bench_result *r)
{
    r->roof_gbs = roof_read_bandwidth(pool, BENCH_ROOF_BYTES, BENCH_ROOF_REPS);
    r->roof_int8_macs = roof_int8_macs(pool, BENCH_ROOF_SECONDS);
    r->roof_f32_flops = roof_f32_flops(pool, BENCH_ROOF_SECONDS);
    if (r->roof_gbs <= 0) {
        fprintf(stderr, "minicpmd-bench: cannot allocate %zu bytes for the bandwidth roof\n",
                BENCH_ROOF_BYTES);
        return -1;
    }
    return 0;
}

/* --reps rounds of: a fresh sequence, the prompt in one forward call, then
 * o->gen greedy tokens one call each. */
/* --batch N: N sequences holding the prompt (prefilled once, copied), decoded
 * greedily as one batch per step (eng_seqs_*, what the worker does for N streams
 * on the cpu): tokens/s of all of them together, median over the reps. */
static int bench_batch(eng_model *m, const struct bench_opts *o, const int32_t *prompt,
                       double *td, struct bench_result *r)
{
    int n_vocab = eng_model_get_info(m)->hp.n_vocab, nl = eng_model_get_info(m)->hp.n_layers;
    int nb = o->batch, rc = -1;
    eng_seq *s[BENCH_MAX_BATCH] = {0};
    float *logits[BENCH_MAX_BATCH] = {0};
    int32_t tok[BENCH_MAX_BATCH];
    const int32_t *toks[BENCH_MAX_BATCH];
    int ones[BENCH_MAX_BATCH];
    char err[256];
    for (int i = 0; i < nb; i++) {
        if (!(logits[i] = malloc((size_t)n_vocab * sizeof(float)))) {
            fprintf(stderr, "minicpmd-bench: out of memory\n");
            goto out;
        }
        toks[i] = &tok[i];
        ones[i] = 1;
    }
    for (int rep = 0; rep < o->reps; rep++) {
        for (int i = 0; i < nb; i++)
            if ((rc = eng_seq_new(m, o->prompt + o->gen, &s[i], err, sizeof err))) {
                fprintf(stderr, "minicpmd-bench: batch sequence: %s\n", err);
                goto out;
            }
        if ((rc = eng_seq_forward(s[0], prompt, o->prompt, logits[0])))
            goto fail;
        for (int i = 1; i < nb; i++) {
            if ((rc = eng_seq_copy_prefix(s[i], s[0], o->prompt)))
                goto fail;
            memcpy(logits[i], logits[0], (size_t)n_vocab * sizeof(float));
        }
        double t0 = ut_now_s();
        for (int g = 0; g < o->gen; g++) {
            for (int i = 0; i < nb; i++)
                tok[i] = argmax(logits[i], n_vocab);
            if ((rc = eng_seqs_embed(s, toks, ones, nb)) || (rc = eng_seq_layers(s[0], 0, nl)) ||
                (rc = eng_seqs_head(s[0], logits)))
                goto fail;
        }
        td[rep] = (double)o->gen * nb / (ut_now_s() - t0);
        for (int i = 0; i < nb; i++) {
            eng_seq_free(s[i]);
            s[i] = NULL;
        }
    }
    r->batch_tps = median(td, o->reps);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "minicpmd-bench: batch of %d: %s\n", nb, eng_seq_error(s[0]));
out:
    for (int i = 0; i < nb; i++) {
        eng_seq_free(s[i]);
        free(logits[i]);
    }
    return rc;
}

/* The read roof now, for one decode rep: see struct bench_result. */
static double roof_now(eng_pool *pool)
{
    return roof_read_bandwidth(pool, BENCH_ROOF_BYTES, BENCH_ROOF_PAIRED_REPS);
}

static int measure_model(eng_model *m, eng_pool *roof_pool, const struct bench_opts *o,
                         struct bench_result *r)
{
    const struct eng_model_info *info = eng_model_get_info(m);
    int n_vocab = info->hp.n_vocab, rc = -1;
    int32_t *prompt = malloc((size_t)o->prompt * sizeof *prompt);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    double *tp = malloc((size_t)o->reps * sizeof *tp), *td = malloc((size_t)o->reps * sizeof *td);
    double *rr = malloc((size_t)o->reps * sizeof *rr), *rq = malloc((size_t)o->reps * sizeof *rq);
    eng_seq *s = NULL;
    char err[256];

    if (!prompt || !logits || !tp || !td || !rr || !rq) {
        fprintf(stderr, "minicpmd-bench: out of memory\n");
        goto out;
    }
    /* splitmix64: the same prompt on every machine and every run. */
    uint64_t x = BENCH_SEED;
    for (int i = 0; i < o->prompt; i++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        prompt[i] = (int32_t)((z ^ (z >> 31)) % (uint64_t)n_vocab);
    }

    /* One untimed token first: it faults the mapped weights in (and reads them
     * from disk if they are not cached), which no rep should pay for. */
    if ((rc = eng_seq_new(m, 1, &s, err, sizeof err)) ||
        (rc = eng_seq_forward(s, prompt, 1, logits))) {
        fprintf(stderr, "minicpmd-bench: warm-up: %s\n", s ? eng_seq_error(s) : err);
        goto out;
    }
    eng_seq_free(s);
    s = NULL;

    for (int rep = 0; rep < o->reps; rep++) {
        if ((rc = eng_seq_new(m, o->prompt + o->gen, &s, err, sizeof err))) {
            fprintf(stderr, "minicpmd-bench: sequence of %d positions: %s\n", o->prompt + o->gen, err);
            goto out;
        }
        double t0 = ut_now_s();
        if ((rc = eng_seq_forward(s, prompt, o->prompt, logits))) {
            fprintf(stderr, "minicpmd-bench: prefill: %s\n", eng_seq_error(s));
            goto out;
        }
        double t1 = ut_now_s(), before = roof_now(roof_pool);
        double t1d = ut_now_s();
        for (int i = 0; i < o->gen; i++) {
            int32_t tok = argmax(logits, n_vocab);
            if ((rc = eng_seq_forward(s, &tok, 1, logits))) {
                fprintf(stderr, "minicpmd-bench: decode step %d: %s\n", i, eng_seq_error(s));
                goto out;
            }
        }
        double t2 = ut_now_s(), after = roof_now(roof_pool);
        tp[rep] = (double)o->prompt / (t1 - t0);
        td[rep] = (double)o->gen / (t2 - t1d);
        rr[rep] = before > after ? before : after;
        if (rr[rep] <= 0) {
            fprintf(stderr, "minicpmd-bench: cannot allocate %zu bytes for the bandwidth roof\n",
                    BENCH_ROOF_BYTES);
            goto out;
        }
        rq[rep] = td[rep] * (double)info->weight_bytes_per_token / 1e9 / rr[rep];
        eng_seq_free(s);
        s = NULL;
    }
    r->prefill_tps = median(tp, o->reps);
    r->decode_tps = median(td, o->reps);
    r->decode_paired_ratio = median(rq, o->reps);
    r->roof_paired_gbs = median(rr, o->reps); /* sorts rr */
    r->roof_paired_min = rr[0];
    r->roof_paired_max = rr[o->reps - 1];
    if (o->batch > 1 && (rc = bench_batch(m, o, prompt, td, r)))
        goto out;
    rc = 0;
out:
    eng_seq_free(s);
    free(rq);
    free(rr);
    free(td);
    free(tp);
    free(logits);
    free(prompt);
    return rc;
}

static void report(const struct bench_opts *o, const struct eng_pack_info *pi,
                   const struct eng_model_info *mi, const struct bench_result *r)
{
    double bytes = (double)mi->weight_bytes_per_token;
    /* A prompt's matmuls: every layer's for each token, the lm_head's once (the
     * last position's logits; eng_seq_head). */
    double macs = (double)(mi->macs_per_token - mi->head_macs) + (double)mi->head_macs / o->prompt;
    double gbs = r->decode_tps * bytes / 1e9;
    double gmacs = r->prefill_tps * macs / 1e9;
    /* The compute roof the prefill matmuls can use: int8 MACs with q8
     * activations, FMA lanes (2 FLOPs = 1 MAC) with f32 ones. */
    double roof_gmacs = (o->act == ENG_ACT_Q8 ? r->roof_int8_macs : r->roof_f32_flops / 2) / 1e9;
    const char *act = o->act == ENG_ACT_Q8 ? "q8" : "f32";
    struct eng_cpu_ident cpu;
    eng_cpu_ident(&cpu);
    const char *dk = eng_decode_kernel(), *how = o->decode_kernel ? "forced" : mi->decode_choice;
    const char *fk = eng_few_kernel();
    const char *fhow = o->few_kernel || o->decode_kernel ? "forced" : mi->decode_choice;

    if (o->json) {
        json_t *j = json_pack(
            "{s:s, s:s, s:s, s:i, s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f,"
            " s:f, s:f, s:f, s:s, s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f}",
            "pack", pi->dir, "model_type", pi->model_type, "format",
            eng_weights_format_name(pi->format), "threads", mi->n_threads, "isa", mi->isa, "act",
            act, "prompt_tokens", o->prompt, "gen_tokens", o->gen, "reps", o->reps,
            "weight_bytes_per_token", (json_int_t)mi->weight_bytes_per_token, "macs_per_token",
            (json_int_t)mi->macs_per_token, "prefill_tok_s", r->prefill_tps, "decode_tok_s",
            r->decode_tps, "decode_gb_s", gbs, "roof_read_gb_s", r->roof_gbs, "decode_bw_ratio",
            gbs / r->roof_gbs, "prefill_gmac_s", gmacs, "roof_int8_gmac_s", r->roof_int8_macs / 1e9,
            "roof_f32_gflop_s", r->roof_f32_flops / 1e9, "prefill_compute_ratio",
            gmacs / roof_gmacs, "roof_isa", roof_isa_name(), "weights", mi->weights,
            "weights_huge_bytes", (json_int_t)mi->weights_huge_bytes, "load_s", r->load_s,
            "roof_read_paired_gb_s", r->roof_paired_gbs, "roof_read_paired_min_gb_s",
            r->roof_paired_min, "roof_read_paired_max_gb_s", r->roof_paired_max,
            "decode_bw_ratio_paired", r->decode_paired_ratio, "prefill_macs_per_token", macs);
        json_t *rates = json_object(), *frates = json_object();
        for (int i = 0; rates && frates && i < mi->n_decode_rates; i++) {
            json_object_set_new(rates, mi->decode_rates[i].name, json_real(mi->decode_rates[i].gb_s));
            json_object_set_new(frates, mi->few_rates[i].name, json_real(mi->few_rates[i].gb_s));
        }
        if (j && (json_object_set_new(j, "cpu_family", json_integer(cpu.family)) ||
                  json_object_set_new(j, "cpu_model", json_integer(cpu.model)) ||
                  json_object_set_new(j, "cpu_name", json_string(cpu.name)) ||
                  json_object_set_new(j, "decode_kernel", json_string(dk)) ||
                  json_object_set_new(j, "decode_choice", json_string(how)) ||
                  json_object_set_new(j, "decode_kernel_gb_s", rates ? rates : json_null()) ||
                  json_object_set_new(j, "few_kernel", json_string(fk)) ||
                  json_object_set_new(j, "few_choice", json_string(fhow)) ||
                  json_object_set_new(j, "few_kernel_gb_s", frates ? frates : json_null()))) {
            json_decref(j);
            j = NULL;
        }
        if (j && o->batch > 1 &&
            (json_object_set_new(j, "batch", json_integer(o->batch)) ||
             json_object_set_new(j, "batch_tok_s", json_real(r->batch_tps)))) {
            json_decref(j);
            j = NULL;
        }
        if (!j) {
            fprintf(stderr, "minicpmd-bench: cannot build the JSON report\n");
            return;
        }
        json_dumpf(j, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
        putchar('\n');
        json_decref(j);
        return;
    }
    printf("pack            %s (%s, %s)\n", pi->dir, pi->model_type, eng_weights_format_name(pi->format));
    printf("cpu             family %d model %d, %s\n", cpu.family, cpu.model, cpu.name);
    printf("threads         %d, kernels %s, roofs %s\n", mi->n_threads, mi->isa, roof_isa_name());
    printf("decode kernel   %s (%s", dk, how);
    for (int i = 0; i < mi->n_decode_rates; i++)
        printf("%s %s %.1f", i ? "," : ":", mi->decode_rates[i].name, mi->decode_rates[i].gb_s);
    printf("%s)\n", mi->n_decode_rates ? " GB/s on the pack's layers at load" : "");
    printf("batch kernel    %s (%s", fk, fhow);
    for (int i = 0; i < mi->n_decode_rates; i++)
        printf("%s %s %.1f", i ? "," : ":", mi->few_rates[i].name, mi->few_rates[i].gb_s);
    if (mi->n_decode_rates)
        printf(" GB/s at %d tokens", ENG_GEMV_MAX_TOK);
    printf(")\n");
    printf("weights         %s", mi->weights);
    if (strcmp(mi->weights, "copy") == 0)
        printf(", %.0f of %.0f MiB in huge pages", mi->weights_huge_bytes / 1048576.0,
               mi->weights_bytes / 1048576.0);
    printf("; loaded in %.2f s\n", r->load_s);
    printf("per token       decode: %.1f MB weights read, %.3f G MACs; prefill: %.3f G MACs\n",
           bytes / 1e6, mi->macs_per_token / 1e9, macs / 1e9);
    printf("decode          %8.2f tok/s  %7.2f GB/s  = %5.1f%% of %.2f GB/s read roof\n",
           r->decode_tps, gbs, 100 * gbs / r->roof_gbs, r->roof_gbs);
    printf("  same moment   %5.1f%% of the read roof measured around each rep (median; roofs %.1f-%.1f GB/s)\n",
           100 * r->decode_paired_ratio, r->roof_paired_min, r->roof_paired_max);
    if (o->batch > 1)
        printf("decode batch %-2d %8.2f tok/s  = %.2fx one sequence (all %d together)\n",
               o->batch, r->batch_tps, r->batch_tps / r->decode_tps, o->batch);
    printf("prefill         %8.2f tok/s  %7.1f GMAC/s = %5.1f%% of %.1f GMAC/s %s roof\n",
           r->prefill_tps, gmacs, 100 * gmacs / roof_gmacs, roof_gmacs,
           o->act == ENG_ACT_Q8 ? "int8" : "f32 FMA");
    printf("roofs           read %.2f GB/s (best of %d), int8 %.1f GMAC/s, f32 %.1f GFLOP/s\n",
           r->roof_gbs, BENCH_ROOF_REPS, r->roof_int8_macs / 1e9, r->roof_f32_flops / 1e9);
    printf("(prompt %d tokens, %d generated; medians of %d)\n", o->prompt, o->gen, o->reps);
}

/* --OPT NAME forced with set (NULL: not given): 0, or -1 after naming the
 * kernels usable here. */
static int force_kernel(const char *opt, const char *name, int (*set)(const char *))
{
    if (!name || set(name) == 0)
        return 0;
    const char *names[8];
    int n = eng_decode_kernels(names, 8);
    fprintf(stderr, "minicpmd-bench: --%s %s: not usable here (usable:", opt, name);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %s", names[i]);
    fprintf(stderr, ")\n");
    return -1;
}

/* Warnings only: the weights' copy's progress lines would break the report. */
static void bench_log(void *ctx, enum eng_log_level level, const char *msg)
{
    (void)ctx;
    if (level <= ENG_LOG_WARN)
        fprintf(stderr, "minicpmd-bench: %s\n", msg);
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    struct bench_result r = { 0 };
    eng_pack *pack = NULL;
    eng_model *model = NULL;
    eng_pool *roof_pool = NULL;
    char err[512];
    int rc = 1;

    if (parse_args(argc, argv, &o))
        return 1;
    if (eng_pack_open(o.dir, &pack, err, sizeof err)) {
        fprintf(stderr, "minicpmd-bench: %s\n", err);
        goto out;
    }
    const struct eng_pack_info *pi = eng_pack_get_info(pack);
    if (o.prompt + o.gen > pi->hp.n_ctx_train) {
        fprintf(stderr, "minicpmd-bench: --prompt + --gen = %d exceeds the model's context of %d\n",
                o.prompt + o.gen, pi->hp.n_ctx_train);
        goto out;
    }
    struct eng_model_opts mo = { .n_threads = o.threads, .act = o.act, .weights = o.weights,
                                 .log = bench_log };
    double t0 = ut_now_s();
    if (eng_model_open(pack, &mo, &model, err, sizeof err)) {
        fprintf(stderr, "minicpmd-bench: %s\n", err);
        goto out;
    }
    r.load_s = ut_now_s() - t0;
    const struct eng_model_info *mi = eng_model_get_info(model);
    if (force_kernel("decode-kernel", o.decode_kernel, eng_decode_kernel_set) ||
        force_kernel("few-kernel", o.few_kernel, eng_few_kernel_set))
        goto out;
    /* The roofs' own pool, of the model's size. The model's pool is idle (its
     * workers asleep) while a roof runs, and the other way round, so the two
     * never compete. */
    int prc = eng_pool_new(mi->n_threads, &roof_pool);
    if (prc) {
        fprintf(stderr, "minicpmd-bench: cannot start %d threads: %s\n", mi->n_threads, strerror(-prc));
        goto out;
    }
    if (o.hybrid.tokens > 0) {
        o.hybrid.chunk = o.prompt < 512 ? o.prompt : 512;
        o.hybrid.reps = o.reps;
        o.hybrid.json = o.json;
        rc = bench_hybrid(model, &o.hybrid) ? 1 : 0;
        goto out;
    }
    if (measure_roofs(roof_pool, &r) || measure_model(model, roof_pool, &o, &r))
        goto out;
    report(&o, pi, mi, &r);
    rc = 0;
out:
    eng_pool_free(roof_pool);
    eng_model_free(model);
    eng_pack_free(pack);
    return rc;
}
