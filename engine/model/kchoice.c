/* The decode kernels by measurement: at load, every one-token Q4_1 x int8 kernel
 * the CPU can run (eng_decode_kernels) is timed on the model's own matrices, on
 * the model's pool, and the fastest serves decode; then every few-token form at
 * ENG_GEMV_MAX_TOK tokens, and the fastest serves decode batches (--parallel).
 *
 * cpuid alone picks wrong: on a Zen 4 core (AVX-512 on a 256-bit datapath) the
 * VBMI kernel, the best on Zen 5, read the weights slower than the AVX2 one, while
 * its 4-token form ran 1.7x the AVX2 one's. The kernels all give the scalar
 * reference's bits, so the choice changes no result, only speed.
 *
 * Each round times one layer's matrices per candidate (a different layer each
 * time, so the weights come from DRAM as in decode), candidates in a rotating
 * order so a change of load on a shared host hits each alike; at most
 * KC_ROUNDS rounds, stopping after KC_BUDGET_NS (one kind of kernel, then the
 * other: ~200 ms in all with their last rounds);
 * the median rate per candidate decides (bytes over the slowest thread's CPU
 * time, so time the host gave to other processes does not count). The choice, with every rate, is logged
 * and, with a state directory, remembered per CPU (cpuid family, model, brand
 * string), shapes, threads and weight placement in KC_FILE, so later loads skip
 * the timing. A kernel forced with eng_kernels_set_isa (--isa, tests) is kept. */
#include "engine/model/model-impl.h"

#include "util/clock.h"
#include "util/fs.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define KC_FILE "cpu-kernels.json"
#define KC_VERSION 1
#define KC_MAX_BYTES (64 * 1024) /* a file past this is not ours: re-measured */
#define KC_MAX_ENTRIES 32        /* the oldest go first */
#define KC_ROUNDS 7
#define KC_BUDGET_NS 75000000ull /* per kind, then one round more at most */
#define KC_MAX_CAND ((int)(sizeof ((struct eng_model_info *)0)->decode_rates / \
                           sizeof ((struct eng_model_info *)0)->decode_rates[0]))

/* ---- timing ------------------------------------------------------------------ */

#define KC_MAX_THREADS 256 /* threads past this are not timed (their share still runs) */

struct kc_job {
    const char *name;
    const struct eng_mat *mats[2 + 2 * ENG_MAX_KV_HEADS + 5];
    int n_mats;
    int n_tok; /* 1: the decode kernel; more: its few-token form */
    const struct eng_q8x *xq;
    float *y;
    int ldy;
    uint64_t cpu_ns[KC_MAX_THREADS]; /* each thread's CPU time on its share */
};

static uint64_t thread_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void kc_run(void *ctx, int ith, int nth)
{
    struct kc_job *j = ctx;
    uint64_t t0 = thread_cpu_ns();
    for (int i = 0; i < j->n_mats; i++) {
        const struct eng_mat *w = j->mats[i];
        int r0, r1;
        eng_pool_share(w->rows, ENG_Q4_1_ROWS, ith, nth, &r0, &r1);
        if (r1 > r0 && j->n_tok == 1)
            eng_decode_kernel_run(j->name, w->data, w->cols, r0, r1, j->xq, j->y);
        else if (r1 > r0)
            eng_few_kernel_run(j->name, w->data, w->cols, r0, r1, j->xq, j->n_tok, j->y, j->ldy);
    }
    if (ith < KC_MAX_THREADS)
        j->cpu_ns[ith] = thread_cpu_ns() - t0;
}

/* Layer l's Q4_1 matrices into j; their bytes. */
static int64_t kc_layer(const eng_model *m, int l, struct kc_job *j)
{
    const struct eng_layer *L = &m->layers[l];
    const struct eng_mat *all[2 + 2 * ENG_MAX_KV_HEADS + 5];
    int n = 0;
    all[n++] = &L->wq;
    for (int u = 0; u < m->info.n_kv_real; u++)
        all[n++] = &L->wk[u], all[n++] = &L->wv[u];
    all[n++] = &L->wo, all[n++] = &L->wgate, all[n++] = &L->wup, all[n++] = &L->wdown;
    int64_t bytes = 0;
    j->n_mats = 0;
    for (int i = 0; i < n; i++)
        if (all[i]->fmt == ENG_W_Q4_1 && all[i]->data) {
            j->mats[j->n_mats++] = all[i];
            bytes += (int64_t)all[i]->rows / ENG_Q4_1_ROWS *
                     ((all[i]->cols + ENG_Q4_1_COLS - 1) / ENG_Q4_1_COLS) * ENG_Q4_1_CHUNK_BYTES;
        }
    return bytes;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median GB/s of weights of each candidate at n_tok tokens into rates; 0 on
 * success, -ENOMEM. */
static int kc_measure(eng_model *m, const char **names, int n, int n_tok, double *rates,
                      int *rounds, double *ms)
{
    const struct eng_hparams *hp = &m->info.hp;
    int in = hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff;
    int rows = hp->n_embd;
    for (int l = 0; l < hp->n_layers; l++) {
        const struct eng_layer *L = &m->layers[l];
        const int r[] = {L->wq.rows, L->wo.rows, L->wgate.rows, L->wup.rows, L->wdown.rows};
        for (size_t i = 0; i < sizeof r / sizeof *r; i++)
            rows = r[i] > rows ? r[i] : rows;
        const int c[] = {L->wq.cols, L->wo.cols, L->wgate.cols, L->wdown.cols};
        for (size_t i = 0; i < sizeof c / sizeof *c; i++)
            in = c[i] > in ? c[i] : in;
    }
    /* Token t of a batch sits at t * eng_q8x_cols(cols) for each matrix's own
     * cols: all inside the rows quantized for the widest; their values only time. */
    size_t cols = (size_t)eng_q8x_cols(in), nt = (size_t)n_tok;
    float *x = malloc(nt * (size_t)in * sizeof *x), *y = malloc(nt * (size_t)rows * sizeof *y);
    struct eng_q8x xq = {malloc(nt * cols), malloc(nt * cols / 32 * sizeof(float)),
                         malloc(nt * cols / 32 * sizeof(float))};
    double *t = malloc((size_t)n * KC_ROUNDS * sizeof *t);
    int rc = 0;
    if (!x || !y || !xq.q || !xq.d || !xq.sum || !t) {
        rc = -ENOMEM;
        goto out;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < nt * (size_t)in; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int)(s >> 40) % 2001 - 1000) / 1000.0f;
    }
    eng_q8x_quantize_batch(&xq, x, in, in, n_tok);
    uint64_t t0 = ut_now_ns();
    int r = 0, layer = 0;
    for (; r < KC_ROUNDS && (r == 0 || ut_now_ns() - t0 < KC_BUDGET_NS); r++) {
        for (int k = 0; k < n; k++) {
            int c = (k + r) % n; /* rotating order */
            struct kc_job j = {.name = names[c], .n_tok = n_tok, .xq = &xq, .y = y, .ldy = rows};
            int64_t bytes = kc_layer(m, layer, &j);
            layer = (layer + 1) % hp->n_layers;
            eng_pool_run(m->pool, kc_run, &j);
            /* The slowest thread's CPU time: the rate if all ran at once. Wall
             * time would count the moments a busy host took a thread away, which
             * say nothing of the kernel (they swamped a 200 ms measurement at a
             * load average of 20 on 2 cores). */
            uint64_t ns = 1;
            for (int i = 0; i < eng_pool_size(m->pool) && i < KC_MAX_THREADS; i++)
                ns = j.cpu_ns[i] > ns ? j.cpu_ns[i] : ns;
            t[c * KC_ROUNDS + r] = (double)bytes / (double)ns;
        }
    }
    for (int c = 0; c < n; c++) {
        qsort(t + c * KC_ROUNDS, (size_t)r, sizeof *t, cmp_double);
        rates[c] = t[c * KC_ROUNDS + r / 2];
    }
    *rounds = r;
    *ms = (double)(ut_now_ns() - t0) / 1e6;
out:
    free(x), free(y), free(xq.q), free(xq.d), free(xq.sum), free(t);
    return rc;
}

/* ---- remembering ----------------------------------------------------------------- */

/* What a remembered choice is valid for. */
static void kc_key(const eng_model *m, char *key, size_t len)
{
    struct eng_cpu_ident id;
    eng_cpu_ident(&id);
    const struct eng_hparams *hp = &m->info.hp;
    snprintf(key, len,
             "cpu family %d model %d \"%s\"; isa %s; embd %d ff %d layers %d kv %d; "
             "threads %d; weights %s",
             id.family, id.model, id.name, eng_isa_name(eng_kernels_isa()), hp->n_embd, hp->n_ff,
             hp->n_layers, m->info.n_kv_real, m->info.n_threads, m->info.weights);
}

/* The file's root object, or a fresh one when it is missing or not ours (a
 * corrupt file is measured over and rewritten, never trusted). */
static json_t *kc_read(const eng_model *m, const char *path)
{
    int rc;
    const char *why;
    FILE *f = ut_fopen_regular(path, KC_MAX_BYTES, &rc, &why);
    json_t *j = NULL;
    if (f) {
        json_error_t je;
        j = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
        fclose(f);
        json_t *v = json_object_get(j, "version");
        if (!json_is_object(j) || !json_is_integer(v) || json_integer_value(v) != KC_VERSION ||
            !json_is_array(json_object_get(j, "entries"))) {
            eng__model_say(m, ENG_LOG_WARN, "%s: not a kernel choice file of version %d: measuring again",
                path, KC_VERSION);
            json_decref(j);
            j = NULL;
        }
    } else if (rc != -ENOENT) {
        eng__model_say(m, ENG_LOG_WARN, "%s: %s: measuring again", path,
            rc == -EFBIG ? "larger than 64 KiB" : why);
    }
    if (!j)
        j = json_pack("{s:i, s:[]}", "version", KC_VERSION, "entries");
    return j;
}

/* The two kinds of kernel chosen, as the file names them. */
enum { KC_ONE, KC_FEW, KC_KINDS };
static const char *const kc_kernel_field[KC_KINDS] = {"kernel", "few_kernel"};
static const char *const kc_rates_field[KC_KINDS] = {"rates", "few_rates"};

/* One kind's choice: the candidate picked and every candidate's rate. */
struct kc_pick {
    int pick;
    double rates[KC_MAX_CAND];
};

/* The remembered choices for key among names[0..n-1], with their rates: 1, or
 * 0 (none, one of a kind missing, or a kernel not usable here). */
static int kc_lookup(json_t *root, const char *key, const char **names, int n,
                     struct kc_pick *p)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(root, "entries"), i, e) {
        const char *k = json_string_value(json_object_get(e, "key"));
        if (!k || strcmp(k, key) != 0)
            continue;
        for (int kind = 0; kind < KC_KINDS; kind++) {
            const char *kern = json_string_value(json_object_get(e, kc_kernel_field[kind]));
            json_t *jr = json_object_get(e, kc_rates_field[kind]);
            if (!kern || !json_is_object(jr))
                return 0;
            p[kind].pick = -1;
            for (int c = 0; c < n; c++) {
                json_t *v = json_object_get(jr, names[c]);
                p[kind].rates[c] =
                    json_is_number(v) && json_number_value(v) > 0 ? json_number_value(v) : 0;
                if (strcmp(names[c], kern) == 0)
                    p[kind].pick = c;
            }
            if (p[kind].pick < 0)
                return 0;
        }
        return 1;
    }
    return 0;
}

static void kc_save(const eng_model *m, json_t *root, const char *path, const char *key,
                    const char **names, int n, const struct kc_pick *p)
{
    json_t *entries = json_object_get(root, "entries");
    json_t *e = json_pack("{s:s, s:I}", "key", key, "updated", (json_int_t)time(NULL));
    for (int kind = 0; kind < KC_KINDS && e; kind++) {
        json_t *jr = json_object();
        for (int c = 0; c < n && jr; c++)
            json_object_set_new(jr, names[c], json_real(p[kind].rates[c]));
        if (!jr || json_object_set_new(e, kc_kernel_field[kind], json_string(names[p[kind].pick])) ||
            json_object_set_new(e, kc_rates_field[kind], jr)) {
            json_decref(e);
            e = NULL;
        }
    }
    /* the other keys' well-formed entries, then this one */
    json_t *kept = e ? json_array() : NULL;
    size_t i;
    json_t *old;
    json_array_foreach(entries, i, old) {
        const char *k = json_string_value(json_object_get(old, "key"));
        if (kept && k && strcmp(k, key) != 0 && json_is_string(json_object_get(old, "kernel")) &&
            json_is_object(json_object_get(old, "rates")))
            json_array_append(kept, old);
    }
    while (kept && json_array_size(kept) >= KC_MAX_ENTRIES)
        json_array_remove(kept, 0);
    if (!kept)
        json_decref(e);
    if (!kept || json_array_append_new(kept, e) || json_object_set_new(root, "entries", kept)) {
        eng__model_say(m, ENG_LOG_WARN, "%s: cannot remember the decode kernel: out of memory", path);
        return;
    }
    char *text = json_dumps(root, JSON_INDENT(1));
    char err[256] = "";
    mkdir(m->opts.state_dir, 0755); /* its first use; an error shows in the write's */
    if (!text || ut_write_atomic(path, text, strlen(text), 0644, err, sizeof err) != 0)
        eng__model_say(m, ENG_LOG_WARN, "%s: cannot remember the decode kernel: %s", path,
            text ? err : "out of memory");
    free(text);
}

/* ---- the choice ----------------------------------------------------------------- */

/* The candidates and their rates (NULL: not measured) into the model's info. */
static void kc_table(eng_model *m, const char **names, int n, const struct kc_pick *p)
{
    struct eng_model_info *mi = &m->info;
    mi->n_decode_rates = n < KC_MAX_CAND ? n : KC_MAX_CAND;
    for (int c = 0; c < mi->n_decode_rates; c++) {
        mi->decode_rates[c] = (struct eng_decode_rate){names[c], p ? p[KC_ONE].rates[c] : 0};
        mi->few_rates[c] = (struct eng_decode_rate){names[c], p ? p[KC_FEW].rates[c] : 0};
    }
}

/* "name 1.0 GB/s, ..." of one kind into line. */
static void kc_rates_line(const struct eng_decode_rate *r, int n, char *line, size_t len)
{
    size_t o = 0;
    line[0] = '\0';
    for (int c = 0; c < n && o < len; c++)
        o += (size_t)snprintf(line + o, len - o, "%s%s %.1f GB/s", c ? ", " : "", r[c].name,
                              r[c].gb_s);
}

static void kc_log(const eng_model *m, const char *how, int rounds, double ms)
{
    const struct eng_model_info *mi = &m->info;
    char one[256], few[256];
    kc_rates_line(mi->decode_rates, mi->n_decode_rates, one, sizeof one);
    kc_rates_line(mi->few_rates, mi->n_decode_rates, few, sizeof few);
    if (rounds)
        eng__model_say(m, ENG_LOG_INFO, "decode kernel: %s, %s on this model's matrices (%s); "
                             "%d-token batches: %s (%s); %d rounds, %.0f ms",
            mi->decode_kernel, how, one, ENG_GEMV_MAX_TOK, mi->few_kernel, few, rounds, ms);
    else
        eng__model_say(m, ENG_LOG_INFO, "decode kernel: %s, %s (%s); %d-token batches: %s (%s)",
            mi->decode_kernel, how, one, ENG_GEMV_MAX_TOK, mi->few_kernel, few);
}

/* The fastest candidate of p. */
static int kc_fastest(const struct kc_pick *p, int n)
{
    int pick = 0;
    for (int c = 1; c < n; c++)
        if (p->rates[c] > p->rates[pick])
            pick = c;
    return pick;
}

void eng__model_choose_kernel(eng_model *m)
{
    const char *names[KC_MAX_CAND];
    int n = eng_decode_kernels(names, KC_MAX_CAND);
    m->info.decode_kernel = eng_decode_kernel();
    m->info.few_kernel = eng_few_kernel();
    kc_table(m, names, n, NULL);
    if (m->opts.act != ENG_ACT_Q8) {
        m->info.decode_choice = "f32";
        m->info.n_decode_rates = 0;
        return;
    }
    if (eng_kernels_forced()) {
        m->info.decode_choice = "forced";
        return;
    }
    if (n < 2) {
        m->info.decode_choice = "only one";
        return;
    }
    struct kc_job probe = {.name = names[0]};
    if (kc_layer(m, 0, &probe) == 0) { /* BF16 weights: no int8 kernel runs */
        m->info.decode_choice = "no Q4_1 weights";
        m->info.n_decode_rates = 0;
        return;
    }
    char key[384], path[4096];
    kc_key(m, key, sizeof key);
    json_t *root = NULL;
    struct kc_pick p[KC_KINDS] = {{0}};
    int remember = m->opts.state_dir && *m->opts.state_dir &&
                   (size_t)snprintf(path, sizeof path, "%s/%s", m->opts.state_dir, KC_FILE) <
                       sizeof path;
    if (remember && (root = kc_read(m, path)) && kc_lookup(root, key, names, n, p) &&
        eng_decode_kernel_set(names[p[KC_ONE].pick]) == 0 &&
        eng_few_kernel_set(names[p[KC_FEW].pick]) == 0) {
        m->info.decode_kernel = names[p[KC_ONE].pick];
        m->info.few_kernel = names[p[KC_FEW].pick];
        m->info.decode_choice = "remembered";
        kc_table(m, names, n, p);
        kc_log(m, "remembered from " KC_FILE, 0, 0);
        json_decref(root);
        return;
    }
    int rounds[KC_KINDS] = {0};
    double ms[KC_KINDS] = {0};
    if (kc_measure(m, names, n, 1, p[KC_ONE].rates, &rounds[KC_ONE], &ms[KC_ONE]) != 0 ||
        kc_measure(m, names, n, ENG_GEMV_MAX_TOK, p[KC_FEW].rates, &rounds[KC_FEW],
                   &ms[KC_FEW]) != 0) {
        eng__model_say(m, ENG_LOG_WARN, "decode kernel: out of memory for the timing: keeping %s",
            m->info.decode_kernel);
        eng_decode_kernel_set(m->info.decode_kernel); /* a remembered one may have been set */
        m->info.few_kernel = eng_few_kernel();
        m->info.decode_choice = "only one";
        json_decref(root);
        return;
    }
    for (int kind = 0; kind < KC_KINDS; kind++)
        p[kind].pick = kc_fastest(&p[kind], n);
    eng_decode_kernel_set(names[p[KC_ONE].pick]);
    eng_few_kernel_set(names[p[KC_FEW].pick]);
    m->info.decode_kernel = eng_decode_kernel();
    m->info.few_kernel = eng_few_kernel();
    m->info.decode_choice = "measured";
    kc_table(m, names, n, p);
    kc_log(m, "the fastest", rounds[KC_ONE] + rounds[KC_FEW], ms[KC_ONE] + ms[KC_FEW]);
    if (remember && root)
        kc_save(m, root, path, key, names, n, p);
    json_decref(root);
}
