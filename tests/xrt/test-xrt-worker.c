/* The worker on the xrt device (the functional model of the kernel set) with
 * --npu-prefill cpu and two KV slots: a second request's prompt is computed on the
 * CPU in the background while the first decodes on the "NPU", and both get the
 * tokens each gets alone. Each run of the model also takes 2 ms of wall time, the
 * host waiting as it does for an NPU, so the first request's decode steps run
 * while the CPU computes; the worker's log line for the hand-off counts them. */
#include "engine/device/device.h"
#include "engine/tokenizer.h"
#include "engine/worker/worker.h"
#include "tests/check.h"
#include "xrt-fx.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XW_MAX 64

struct wrec {
    int32_t ids[XW_MAX];
    int n;
    bool final;
    enum eng_event_kind kind;
    char error[256];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int pieces_beside = -1;   /* the most any hand-off line counted */
static int handoffs;

static void on_event(void *ctx, const struct eng_event *ev)
{
    (void)ctx;
    struct wrec *r = ev->user;
    pthread_mutex_lock(&mu);
    if (ev->kind == ENG_EVENT_TOKEN) {
        if (r->n < XW_MAX)
            r->ids[r->n++] = ev->token.id;
    } else {
        r->final = true;
        r->kind = ev->kind;
        if (ev->kind == ENG_EVENT_ERROR)
            snprintf(r->error, sizeof r->error, "%s", ev->error.message);
    }
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_log(void *ctx, enum eng_log_level level, const char *msg)
{
    (void)ctx;
    (void)level;
    const char *p = strstr(msg, "handed to the device");
    int n;
    if (p && (p = strstr(p, "; ")) && sscanf(p, "; %d piece", &n) == 1) {
        pthread_mutex_lock(&mu);
        handoffs++;
        pieces_beside = n > pieces_beside ? n : pieces_beside;
        pthread_mutex_unlock(&mu);
    }
}

static void wait_tokens(struct wrec *r, int n)
{
    pthread_mutex_lock(&mu);
    while (!r->final && r->n < n)
        pthread_cond_wait(&cv, &mu);   /* the test's own timeout bounds it */
    pthread_mutex_unlock(&mu);
}

struct wfx {
    eng_pack *pack;
    eng_tokenizer *tok;
    struct eng_device *dev;
    eng_worker *w;
    int32_t stop_ids[8];
    int n_stop;
};

static void wfx_open(struct wfx *f, const char *kdir)
{
    char err[512], path[2200];
    memset(f, 0, sizeof *f);
    cr_assert_eq(eng_pack_open(pack_dir("tiny"), &f->pack, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/tokenizer.json", pack_dir("tiny"));
    cr_assert_eq(eng_tokenizer_load(path, &f->tok, err, sizeof err), 0, "%s", err);
    f->n_stop = eng_pack_stop_ids(f->pack, f->stop_ids, 8, err, sizeof err);
    cr_assert_gt(f->n_stop, 0, "%s", err);
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kdir, .accel_node = "/dev/null",
                                               .ctx_size = 512,
                                               .prefill = ENG_XRT_PREFILL_CPU, .slots = 2});
    struct eng_device_opts o = {.n_threads = 1, .act = ENG_ACT_F32};
    cr_assert_eq(eng__device_xrt_double_open(&o, &f->dev, err, sizeof err), 0, "%s", err);
    struct eng_worker_opts wo = {.queue_size = 4, .n_ctx = 512, .parallel = 2,
                                 .prompt_cache = true, .kmode = ENG_KMODE_FIXED,
                                 .fixed_k = 2, .max_retries = -1, .model_id = "tiny",
                                 .log = on_log};
    cr_assert_eq(eng_worker_new(f->dev, f->pack, f->tok, &wo, on_event, NULL, &f->w, err,
                                sizeof err), 0, "%s", err);
}

static void wfx_close(struct wfx *f)
{
    eng_worker_free(f->w);
    eng_device_free(f->dev);
    eng_tokenizer_free(f->tok);
    eng_pack_free(f->pack);
}

static void submit(struct wfx *f, struct wrec *r, const int32_t *prompt, int n, int max_tokens)
{
    struct eng_gen_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = max_tokens,
                               .stop_ids = f->stop_ids, .n_stop_ids = 0, .user = r};
    eng_sampling_defaults(NULL, &p.sampling, NULL, 0);
    p.sampling.temperature = 0.0f;   /* greedy; no stop ids: always max_tokens */
    eng_gen_req *q = NULL;
    char err[256];
    cr_assert_eq(eng_gen_req_new(&p, &q, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_worker_submit(f->w, q), 0);
    eng_gen_req_free(q);
}

MCD_TEST(xrt_worker, second_prompt_on_the_cpu_while_the_first_decodes, .timeout = 600)
{
    const char *kdir = kset_dir("tiny", "worker", "--designs --max-ctx 1200");
    xrtdbl_reset();
    xrtdbl_set_model(true);
    xrtdbl_set_run_us(2000);
    int32_t pa[24], pb[300];
    struct wfx f;
    wfx_open(&f, kdir);
    int V = eng_pack_get_info(f.pack)->hp.n_vocab;
    random_ids(pa, 24, 3, V, 3);
    random_ids(pb, 300, 3, V, 4);

    /* one after the other */
    struct wrec *ra = calloc(1, sizeof *ra), *rb = calloc(1, sizeof *rb);
    cr_assert(ra && rb);
    submit(&f, ra, pa, 24, 24);
    wait_tokens(ra, XW_MAX);
    submit(&f, rb, pb, 300, 8);
    wait_tokens(rb, XW_MAX);
    cr_assert_eq(ra->kind, ENG_EVENT_DONE, "%s", ra->error);
    cr_assert_eq(rb->kind, ENG_EVENT_DONE, "%s", rb->error);
    cr_assert_eq(ra->n, 24);
    cr_assert_eq(rb->n, 8);
    wfx_close(&f);

    /* B sent once A streams: B's prompt (300 tokens, chunks of 128 beside A's
     * decode) runs on the CPU while A decodes */
    handoffs = 0;
    pieces_beside = -1;
    wfx_open(&f, kdir);
    struct wrec *a2 = calloc(1, sizeof *a2), *b2 = calloc(1, sizeof *b2);
    cr_assert(a2 && b2);
    submit(&f, a2, pa, 24, 24);
    wait_tokens(a2, 2);
    submit(&f, b2, pb, 300, 8);
    wait_tokens(a2, XW_MAX);
    wait_tokens(b2, XW_MAX);
    cr_assert_eq(a2->kind, ENG_EVENT_DONE, "%s", a2->error);
    cr_assert_eq(b2->kind, ENG_EVENT_DONE, "%s", b2->error);
    cr_assert_eq(memcmp(a2->ids, ra->ids, sizeof ra->ids), 0, "A's tokens beside B's prefill");
    cr_assert_eq(memcmp(b2->ids, rb->ids, sizeof rb->ids), 0, "B's tokens after a background "
                 "prefill");
    wfx_close(&f);
    printf("B's prompt: %d chunks handed over from the background, at most %d pieces of A "
           "decoded beside one\n", handoffs, pieces_beside);
    cr_assert_geq(handoffs, 2, "B's 300 prompt tokens went to the background in chunks");
    cr_assert_geq(pieces_beside, 1, "A decoded while the CPU computed B's prompt");
    xrtdbl_set_run_us(0);
    free(ra);
    free(rb);
    free(a2);
    free(b2);
}
