#include "server/status.h"

#include "api/chat-resp.h"
#include "api/chat-run.h"
#include "engine/ert.h"
#include "minicpmd-build.h"
#include "server/app.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Enough for a speed trend and a K story at a glance; older ones are in the log. */
#define N_RECENT 16
#define N_K_CHANGES 32

struct recent {
    int64_t t_ms;
    const char *outcome;        /* "stop", "length", "cancelled", "error" */
    int prompt_tokens, cached_tokens, completion_tokens;
    double prompt_tps, decode_tps;
    int k, attempts;
};

struct k_change {
    int64_t t_ms;
    int k;
};

struct srv_status {
    struct recent recent[N_RECENT];
    size_t n_recent;            /* all ever recorded; the ring holds the last N_RECENT */
    struct k_change k[N_K_CHANGES];
    size_t n_k;
    bool has_error;
    struct eng_device_error error;
    bool error_retryable;
    int64_t error_t_ms;
};

srv_status *srv_status_new(void)
{
    return calloc(1, sizeof(srv_status));
}

void srv_status_free(srv_status *s)
{
    free(s);
}

static void note_k(srv_status *s, int k, int64_t now_ms)
{
    if (k <= 0)
        return;
    if (s->n_k && s->k[(s->n_k - 1) % N_K_CHANGES].k == k)
        return;
    s->k[s->n_k % N_K_CHANGES] = (struct k_change){now_ms, k};
    s->n_k++;
}

/* JSON has no NaN or infinity (a rate over no time): jansson refuses them. */
static double finite_or_0(double x) { return isfinite(x) ? x : 0.0; }

static void note(srv_status *s, const char *outcome, int p, int c, int gen,
                 const struct eng_gen_timings *t, int64_t now_ms)
{
    s->recent[s->n_recent % N_RECENT] = (struct recent){
        .t_ms = now_ms, .outcome = outcome, .prompt_tokens = p, .cached_tokens = c,
        .completion_tokens = gen, .prompt_tps = finite_or_0(t->prompt_tps),
        .decode_tps = finite_or_0(t->decode_tps),
        .k = t->k, .attempts = t->attempts,
    };
    s->n_recent++;
    note_k(s, t->k, now_ms);
}

static int64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void srv_status_done(srv_status *s, const struct eng_done_event *d)
{
    if (!s)
        return;
    int64_t now_ms = unix_ms();
    static const char *const names[] = {"stop", "length", "cancelled"};
    const char *o = (unsigned)d->finish < 3 ? names[d->finish] : "stop";
    note(s, o, d->prompt_tokens, d->cached_tokens, d->completion_tokens, &d->timings, now_ms);
}

void srv_status_error(srv_status *s, const struct eng_error_event *e)
{
    if (!s)
        return;
    int64_t now_ms = unix_ms();
    note(s, "error", e->prompt_tokens, e->cached_tokens, e->completion_tokens, &e->timings,
         now_ms);
    if (e->has_device_error) {
        s->has_error = true;
        s->error = e->device;
        s->error_retryable = e->retryable;
        s->error_t_ms = now_ms;
    }
}

/* jansson's json_object_set_new ignores a NULL value, which leaves the key out:
 * an object short of memory is caught once, at the dump. */
static json_t *str_or_null(const char *v) { return v ? json_string(v) : json_null(); }

static json_t *k_json(const srv_status *s, const struct srv_status_view *v)
{
    const struct eng_worker_stats *w = v->worker;
    json_t *hist = json_array();
    size_t first = s->n_k > N_K_CHANGES ? s->n_k - N_K_CHANGES : 0;
    for (size_t i = first; i < s->n_k; i++) {
        const struct k_change *c = &s->k[i % N_K_CHANGES];
        json_array_append_new(hist, json_pack("{sIsi}", "t_ms", (json_int_t)c->t_ms, "k", c->k));
    }
    const char *mode = v->runlist_layers == 0 ? "auto" : v->runlist_layers < 0 ? "all" : "fixed";
    return json_pack("{ssso*so*so*so*so}", "mode", mode,
                     "current", w ? json_integer(w->current_k) : json_null(),
                     "n_layers", w ? json_integer(w->n_layers) : json_null(),
                     "halvings", w ? json_integer((json_int_t)w->k_halvings) : json_null(),
                     "probes", w ? json_integer((json_int_t)w->k_probes) : json_null(),
                     "history", hist);
}

static json_t *recent_json(const srv_status *s)
{
    json_t *a = json_array();
    size_t first = s->n_recent > N_RECENT ? s->n_recent - N_RECENT : 0;
    for (size_t i = first; i < s->n_recent; i++) {
        const struct recent *r = &s->recent[i % N_RECENT];
        json_array_append_new(
            a, json_pack("{sIsssisisisfsfsisi}", "t_ms", (json_int_t)r->t_ms, "outcome",
                         r->outcome, "prompt_tokens", r->prompt_tokens, "cached_tokens",
                         r->cached_tokens, "completion_tokens", r->completion_tokens,
                         "prompt_tps", r->prompt_tps, "decode_tps", r->decode_tps, "k", r->k,
                         "attempts", r->attempts));
    }
    return a;
}

static json_t *error_json(const srv_status *s)
{
    if (!s->has_error)
        return json_null();
    struct api_device_error ae;
    api_chat_device_error(&s->error, s->error_retryable, &ae);
    json_t *body = api_device_error_json(&ae);
    json_t *err = body ? json_incref(json_object_get(body, "error")) : NULL;
    json_decref(body);
    if (err)
        json_object_set_new(err, "t_ms", json_integer((json_int_t)s->error_t_ms));
    return err;
}

static json_t *worker_json(const struct eng_worker_stats *w)
{
    json_t *ert = json_object();
    for (int st = ENG_ERT_FIRST; st <= ENG_ERT_LAST; st++)
        json_object_set_new(ert, eng_ert_name(st),
                            json_integer((json_int_t)w->runlists_by_state[st]));
    return json_pack(
        "{s{sisi}s{sisisb}s{sIsIsIsIsI}s{sIsIsI}sosIsb}",
        "slots", "in_use", w->active, "total", w->parallel,
        "queue", "depth", w->queue_depth, "size", w->queue_size, "busy", w->busy,
        "requests", "stop", (json_int_t)w->finished_stop, "length",
        (json_int_t)w->finished_length, "cancelled", (json_int_t)w->cancelled, "failed",
        (json_int_t)w->failed, "rejected", (json_int_t)w->rejected,
        "tokens", "prompt", (json_int_t)w->tokens_in, "cached", (json_int_t)w->tokens_cached,
        "generated", (json_int_t)w->tokens_out,
        "runlists", ert,
        "device_resets", (json_int_t)w->device_resets,
        "device_down", w->device_down);
}

char *srv_status_render(const srv_status *s, const struct srv_status_view *v)
{
    json_t *root = json_pack(
        "{sos{so*sbsi}s{so*so*}so*so*so*so*}",
        "version", str_or_null(v->version),
        "model", "id", str_or_null(v->model_id), "demo", v->demo, "n_ctx", v->n_ctx,
        "device", "name", str_or_null(v->device), "description",
        str_or_null(v->device_description),
        "state", str_or_null(v->state),
        "k", k_json(s, v),
        "last_device_error", error_json(s),
        "recent", recent_json(s));
    if (!root)
        return NULL;
    if (v->worker) {
        json_t *w = worker_json(v->worker);
        if (!w || json_object_update(root, w) != 0) {
            json_decref(w);
            json_decref(root);
            return NULL;
        }
        json_decref(w);
    }
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return out;
}

/* ---- GET /v1/status ------------------------------------------------------------------ */

int srv_h_status(srv_request *req, struct srv_response *resp)
{
    struct srv_app *app = srv_request_app(req);
    static const char *const states[] = {
        [API_HEALTH_LOADING] = "loading", [API_HEALTH_OK] = "ready",
        [API_HEALTH_NO_MODEL] = "no_model", [API_HEALTH_FAILED] = "failed",
        [API_HEALTH_STOPPING] = "stopping",
    };
    bool ready = app->state == API_HEALTH_OK && app->eng;
    struct eng_worker_stats ws;
    if (ready)
        eng_engine_get_stats(app->eng, &ws);
    bool has_model = app->model && app->model->source != CFG_MODEL_NONE;
    struct srv_status_view v = {
        .version = MINICPMD_VERSION,
        .state = (unsigned)app->state < sizeof states / sizeof *states ? states[app->state]
                                                                       : "unknown",
        .model_id = has_model ? app->model->id : NULL,
        .demo = has_model && app->model->source == CFG_MODEL_EMBEDDED,
        .n_ctx = ready ? eng_engine_n_ctx(app->eng) : 0,
        .device = app->device,
        .device_description = ready ? eng_engine_device_description(app->eng) : NULL,
        .runlist_layers = app->cfg->runlist_layers,
        .worker = ready ? &ws : NULL,
    };
    resp->status = 200;
    resp->body = srv_status_render(app->status, &v);
    srv_response_header(resp, "Cache-Control", "no-store");
    resp->quiet = true;
    return resp->body ? 0 : -ENOMEM;
}
