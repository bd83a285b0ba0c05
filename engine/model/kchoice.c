/* The decode kernel by measurement: at load, every one-token Q4_1 x int8 kernel
 * the CPU can run (eng_decode_kernels) is timed on the model's own matrices, on
 * the model's pool, and the fastest serves decode.
 *
 * cpuid alone picks wrong: on a Zen 4 core (AVX-512 on a 256-bit datapath) the
 * VBMI kernel, the best on Zen 5, read the weights slower than the AVX2 one. The
 * kernels all give the scalar reference's bits, so the choice changes no result,
 * only speed.
 *
 * Each round times one layer's matrices per candidate (a different layer each
 * time, so the weights come from DRAM as in decode), candidates in a rotating
 * order so a change of load on a shared host hits each alike; at most
 * KC_ROUNDS rounds, stopping after KC_BUDGET_NS (200 ms with the last round);
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
#define KC_BUDGET_NS 150000000ull /* then one round more at most: ~200 ms in all */
#define KC_MAX_CAND ((int)(sizeof ((struct eng_model_info *)0)->decode_rates / \
                           sizeof ((struct eng_model_info *)0)->decode_rates[0]))

/* ---- timing ------------------------------------------------------------------ */

#define KC_MAX_THREADS 256 /* threads past this are not timed (their share still runs) */

struct kc_job {
    const char *name;
    const struct eng_mat *mats[2 + 2 * ENG_MAX_KV_HEADS + 5];
    int n_mats;
    const struct eng_q8x *xq;
    float *y;
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
        if (r1 > r0)
            eng_decode_kernel_run(j->name, w->data, w->cols, r0, r1, j->xq, j->y);
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

/* Median GB/s of each candidate into rates; 0 on success, -ENOMEM. */
static int kc_measure(eng_model *m, const char **names, int n, double *rates, int *rounds,
                      double *ms)
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
    int cols = eng_q8x_cols(in);
    float *x = malloc((size_t)in * sizeof *x), *y = malloc((size_t)rows * sizeof *y);
    struct eng_q8x xq = {malloc((size_t)cols), malloc((size_t)cols / 32 * sizeof(float)),
                         malloc((size_t)cols / 32 * sizeof(float))};
    double *t = malloc((size_t)n * KC_ROUNDS * sizeof *t);
    int rc = 0;
    if (!x || !y || !xq.q || !xq.d || !xq.sum || !t) {
        rc = -ENOMEM;
        goto out;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < in; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int)(s >> 40) % 2001 - 1000) / 1000.0f;
    }
    eng_q8x_quantize(&xq, x, in);
    uint64_t t0 = ut_now_ns();
    int r = 0, layer = 0;
    for (; r < KC_ROUNDS && (r == 0 || ut_now_ns() - t0 < KC_BUDGET_NS); r++) {
        for (int k = 0; k < n; k++) {
            int c = (k + r) % n; /* rotating order */
            struct kc_job j = {.name = names[c], .xq = &xq, .y = y};
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

/* The remembered kernel for key among names[0..n-1], with its rates: 1, or 0. */
static int kc_lookup(json_t *root, const char *key, const char **names, int n, int *pick,
                     double *rates)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(root, "entries"), i, e) {
        const char *k = json_string_value(json_object_get(e, "key"));
        const char *kern = json_string_value(json_object_get(e, "kernel"));
        json_t *jr = json_object_get(e, "rates");
        if (!k || !kern || strcmp(k, key) != 0 || !json_is_object(jr))
            continue;
        *pick = -1;
        for (int c = 0; c < n; c++) {
            json_t *v = json_object_get(jr, names[c]);
            rates[c] = json_is_number(v) && json_number_value(v) > 0 ? json_number_value(v) : 0;
            if (strcmp(names[c], kern) == 0)
                *pick = c;
        }
        return *pick >= 0;
    }
    return 0;
}

static void kc_save(const eng_model *m, json_t *root, const char *path, const char *key,
                    const char **names, int n, int pick, const double *rates)
{
    json_t *entries = json_object_get(root, "entries"), *jr = json_object();
    for (int c = 0; c < n && jr; c++)
        json_object_set_new(jr, names[c], json_real(rates[c]));
    json_t *e = json_pack("{s:s, s:s, s:o, s:I}", "key", key, "kernel", names[pick], "rates", jr,
                          "updated", (json_int_t)time(NULL));
    if (!e)
        return;
    /* the other keys' well-formed entries, then this one */
    json_t *kept = json_array();
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

static void kc_table(eng_model *m, const char **names, int n, const double *rates)
{
    m->info.n_decode_rates = n < KC_MAX_CAND ? n : KC_MAX_CAND;
    for (int c = 0; c < m->info.n_decode_rates; c++)
        m->info.decode_rates[c] = (struct eng_decode_rate){names[c], rates ? rates[c] : 0};
}

static void kc_log(const eng_model *m, const char *how, int rounds, double ms)
{
    char line[256];
    size_t o = 0;
    for (int c = 0; c < m->info.n_decode_rates && o < sizeof line; c++)
        o += (size_t)snprintf(line + o, sizeof line - o, "%s%s %.1f GB/s", c ? ", " : "",
                              m->info.decode_rates[c].name, m->info.decode_rates[c].gb_s);
    if (rounds)
        eng__model_say(m, ENG_LOG_INFO, "decode kernel: %s, %s on this model's matrices (%s; %d rounds, "
                             "%.0f ms)", m->info.decode_kernel, how, line, rounds, ms);
    else
        eng__model_say(m, ENG_LOG_INFO, "decode kernel: %s, %s (%s)", m->info.decode_kernel, how, line);
}

void eng__model_choose_kernel(eng_model *m)
{
    const char *names[KC_MAX_CAND];
    int n = eng_decode_kernels(names, KC_MAX_CAND);
    m->info.decode_kernel = eng_decode_kernel();
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
    double rates[KC_MAX_CAND] = {0};
    int pick = 0;
    int remember = m->opts.state_dir && *m->opts.state_dir &&
                   (size_t)snprintf(path, sizeof path, "%s/%s", m->opts.state_dir, KC_FILE) <
                       sizeof path;
    if (remember && (root = kc_read(m, path)) && kc_lookup(root, key, names, n, &pick, rates) &&
        eng_decode_kernel_set(names[pick]) == 0) {
        m->info.decode_kernel = names[pick];
        m->info.decode_choice = "remembered";
        kc_table(m, names, n, rates);
        kc_log(m, "remembered from " KC_FILE, 0, 0);
        json_decref(root);
        return;
    }
    int rounds = 0;
    double ms = 0;
    if (kc_measure(m, names, n, rates, &rounds, &ms) != 0) {
        eng__model_say(m, ENG_LOG_WARN, "decode kernel: out of memory for the timing: keeping %s",
            m->info.decode_kernel);
        m->info.decode_choice = "only one";
        json_decref(root);
        return;
    }
    pick = 0; /* kc_lookup may have left -1 (a remembered kernel not usable here) */
    for (int c = 1; c < n; c++)
        if (rates[c] > rates[pick])
            pick = c;
    eng_decode_kernel_set(names[pick]);
    m->info.decode_kernel = eng_decode_kernel();
    m->info.decode_choice = "measured";
    kc_table(m, names, n, rates);
    kc_log(m, "the fastest", rounds, ms);
    if (remember && root)
        kc_save(m, root, path, key, names, n, pick, rates);
    json_decref(root);
}
