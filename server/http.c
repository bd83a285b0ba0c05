/* libmicrohttpd under libuv.
 *
 * MHD runs in "external polling" mode with its own epoll set: we watch that one
 * fd with a uv_poll and call MHD_run() when it is readable, then re-arm a
 * uv_timer from MHD_get_timeout() — MHD's docs say its timeouts break unless it
 * is run again within that many milliseconds, even without socket activity.
 *
 * "Run again at once" (a timeout of 0: MHD reads a body in one buffer's worth per
 * connection per MHD_run() and says 0 while bytes remain; a resumed connection)
 * goes through a uv_idle, never a 0 ms timer: libuv before 1.48 runs a timer
 * re-armed with 0 from its own callback again in the same pass (libuv issue
 * #4245, fixed by PR #4250; Debian 12 has 1.44), so while bodies were uploading
 * the loop never reached its poll phase — no thread-pool completion, no other
 * timer — and a chat request whose prompt was ready waited for every upload to
 * end. An idle handle runs once per loop iteration, after a non-blocking poll
 * (the fix's own advice: "use uv_idle_start() instead").
 *
 * A request goes through on_access() several times: once when the headers are in
 * (we route, authenticate and check the declared size, and may answer at once so
 * a rejected body is never read), once per body piece, and once at the end, when
 * the handler runs. on_completed() is MHD's promise that it is done with the
 * request: the only place a request is freed and counted.
 */
#include "server/http.h"
#include "server/http-impl.h"

#include "server/log.h"
#include "server/metrics.h"
#include "server/security.h"
#include "util/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* srv_http_stop(): how long answers ended by the stop may take to go out. */
#define STOP_FLUSH_MS 1000

static void on_timer(uv_timer_t *t);
static void run_soon(srv_http *h);
static void run_mhd(srv_http *h);
static void request_unref(srv_request *req);

/* ---- request accessors --------------------------------------------------- */

const char *srv_request_param(const srv_request *r) { return r->param; }
void *srv_request_app(const srv_request *r) { return r->http->cfg.app; }

const char *srv_request_header(const srv_request *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *srv_request_body(const srv_request *r, size_t *len)
{
    if (len)
        *len = r->body.n;
    return r->body.p ? r->body.p : "";
}

/* ---- responses ----------------------------------------------------------- */

void srv_response_header(struct srv_response *resp, const char *name, const char *value)
{
    int max = (int)(sizeof resp->headers / sizeof *resp->headers);
    if (resp->n_headers < max) {
        resp->headers[resp->n_headers].name = name;
        resp->headers[resp->n_headers].value = value;
        resp->n_headers++;
    }
}

static void response_verror(struct srv_response *resp, enum api_error e, const char *param,
                            const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));
static void response_verror(struct srv_response *resp, enum api_error e, const char *param,
                            const char *fmt, va_list ap)
{
    free(resp->body);
    resp->body = NULL;
    resp->body_len = 0;
    api_vrefuse(&resp->err, e, param, fmt, ap);
    resp->has_err = true;
    resp->status = api_err_status(&resp->err);
    resp->content_type = "application/json";
}

void srv_response_error(struct srv_response *resp, enum api_error e, const char *param,
                        const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    response_verror(resp, e, param, fmt, ap);
    va_end(ap);
}

/* The CORS headers of an actual (non-preflight) response. */
static void add_cors(srv_request *req, struct MHD_Response *r)
{
    const struct srv_http_config *c = &req->http->cfg;
    if (!c->n_cors_origins)
        return;
    MHD_add_response_header(r, "Vary", "Origin");
    const char *origin = srv_request_header(req, "Origin");
    if (srv_cors_origin_allowed(c->cors_origins, c->n_cors_origins, origin)) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(r, "Access-Control-Expose-Headers", "Retry-After");
    }
}

void srv__response_common_headers(srv_request *req, struct MHD_Response *r)
{
    add_cors(req, r);
    if (req->http->draining)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

/* Queue `resp` on the request's connection, consuming resp->body.
 *
 * An answer decided from the headers alone (an error, a preflight) is sent at once
 * only when a body is on the way: MHD then skips the body and closes the
 * connection. Without a body it waits for the end of the request, so the
 * connection stays open for the next one. */
static enum MHD_Result respond(srv_request *req, struct srv_response *resp)
{
    if (req->in_headers && !req->has_body) {
        req->early = *resp;
        *resp = (struct srv_response){0};
        return MHD_YES;
    }
    if (resp->status == 0)
        srv_response_error(resp, API_ERR_INTERNAL, NULL, "handler produced no response");
    if (resp->body && resp->status >= 400 && !resp->body[0]) {
        free(resp->body);
        resp->body = NULL;
    }
    if (!resp->body && !resp->has_err && resp->status >= 400) {
        enum api_error e = resp->status == 404 ? API_ERR_NOT_FOUND : API_ERR_INTERNAL;
        srv_response_error(resp, e, NULL, "%s", "the server could not build a response");
    }
    if (resp->has_err) {
        /* Rendered here, once: in the route's surface's shape, else OpenAI's. */
        free(resp->body);
        resp->body = req->route && req->route->error_body ? req->route->error_body(&resp->err)
                                                          : api_err_body(&resp->err);
        resp->body_len = 0;
        resp->has_err = false;
    }
    size_t len = resp->body ? (resp->body_len ? resp->body_len : strlen(resp->body)) : 0;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, resp->body ? resp->body : (void *)"", resp->body ? MHD_RESPMEM_MUST_FREE
                                                               : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(resp->body);
        resp->body = NULL;
        return MHD_NO;
    }
    resp->body = NULL; /* MHD owns it now */
    req->quiet = resp->quiet && resp->status < 400;
    if (len)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                resp->content_type ? resp->content_type : "application/json");
    if (resp->retry_after)
        MHD_add_response_header(r, "Retry-After", resp->retry_after);
    for (int i = 0; i < resp->n_headers; i++)
        MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
    if (resp->status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    srv__response_common_headers(req, r);
    enum MHD_Result ret = MHD_queue_response(req->conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        req->status = resp->status;
    return ret;
}

static enum MHD_Result respond_error(srv_request *req, enum api_error e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum MHD_Result respond_error(srv_request *req, enum api_error e, const char *fmt, ...)
{
    struct srv_response resp = {0};
    va_list ap;
    va_start(ap, fmt);
    response_verror(&resp, e, NULL, fmt, ap);
    va_end(ap);
    return respond(req, &resp);
}

/* ---- deferred answers ------------------------------------------------------ */

static void deferred_add(srv_http *h, srv_request *r)
{
    r->deferred = true;
    r->dprev = NULL;
    r->dnext = h->deferred;
    if (h->deferred)
        h->deferred->dprev = r;
    h->deferred = r;
    if (r->conn_ctx)
        r->conn_ctx->deferred = r;
}

static void deferred_remove(srv_http *h, srv_request *r);
void srv__deferred_remove(srv_http *h, srv_request *r) { deferred_remove(h, r); }
void srv__request_unref(srv_request *req) { request_unref(req); }
void srv__http_kick(srv_http *h) { run_soon(h); }

static void deferred_remove(srv_http *h, srv_request *r)
{
    if (!r->deferred)
        return;
    r->deferred = false;
    if (r->dprev)
        r->dprev->dnext = r->dnext;
    else
        h->deferred = r->dnext;
    if (r->dnext)
        r->dnext->dprev = r->dprev;
    r->dprev = r->dnext = NULL;
    if (r->conn_ctx && r->conn_ctx->deferred == r)
        r->conn_ctx->deferred = NULL;
}

static void cancel(srv_request *req);
void srv__request_cancel(srv_request *req) { cancel(req); }

static void cancel(srv_request *req)
{
    if (req->cancelled)
        return;
    req->cancelled = true;
    if (req->on_cancel)
        req->on_cancel(req->cancel_ud);
}

void srv_request_defer(srv_request *r, srv_cancel_fn on_cancel, void *ud)
{
    r->on_cancel = on_cancel;
    r->cancel_ud = ud;
    r->refs++;
    deferred_add(r->http, r);
}

void srv_request_complete(srv_request *r, struct srv_response *resp)
{
    if (r->finished || !r->deferred) {
        /* The client or the server is gone (or the handler answered anyway). */
        free(resp->body);
        resp->body = NULL;
        request_unref(r);
        return;
    }
    srv_http *h = r->http;
    deferred_remove(h, r);
    r->pending = *resp;
    if (r->pending.status == 0)
        srv_response_error(&r->pending, API_ERR_INTERNAL, NULL, "no response was produced");
    *resp = (struct srv_response){0};
    request_unref(r);            /* MHD still holds its reference */
    MHD_resume_connection(r->conn);
    run_soon(h); /* MHD must run after a resume */
}

/* ---- the request's phases ------------------------------------------------ */

/* Header names a preflight may ask for; echoed back only if they are plain tokens. */
static bool is_token_list(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == ',' || *s == ' '))
            return false;
    return true;
}

/* OPTIONS: CORS preflight, or a plain "what does this path allow". */
static enum MHD_Result preflight(srv_request *req)
{
    const struct srv_http_config *c = &req->http->cfg;
    char *allow = req->allow;
    req->route_name = "options";
    if (!srv_router_path_known(c->routes, c->n_routes, req->path, allow, sizeof req->allow))
        return respond_error(req, API_ERR_NOT_FOUND, "no route for OPTIONS %s", req->path);

    struct srv_response resp = {.status = 204};
    srv_response_header(&resp, "Allow", allow);
    const char *origin = srv_request_header(req, "Origin");
    const char *want_method = srv_request_header(req, "Access-Control-Request-Method");
    if (origin && want_method) {
        if (!srv_cors_origin_allowed(c->cors_origins, c->n_cors_origins, origin))
            return respond_error(req, API_ERR_FORBIDDEN,
                                 "origin '%s' is not allowed (configure it with --cors-origin)",
                                 origin);
        const char *want_headers = srv_request_header(req, "Access-Control-Request-Headers");
        srv_response_header(&resp, "Access-Control-Allow-Methods", allow);
        srv_response_header(&resp, "Access-Control-Allow-Headers",
                            want_headers && is_token_list(want_headers)
                                ? want_headers
                                : "Authorization, Content-Type, X-Api-Key");
        srv_response_header(&resp, "Access-Control-Max-Age", "600");
    }
    return respond(req, &resp);
}

/* First call: the headers are in, the body (if any) is not. Decide everything
 * that can be decided without the body. Returns MHD_YES to go on reading. */
static enum MHD_Result on_headers(srv_request *req)
{
    srv_http *h = req->http;
    const struct srv_http_config *c = &h->cfg;

    if (h->draining) {
        req->route_name = "other";
        struct srv_response resp = {0};
        srv_response_error(&resp, API_ERR_SHUTTING_DOWN, NULL, "the server is shutting down");
        resp.retry_after = "5";
        return respond(req, &resp);
    }
    struct srv_response bad = {0};
    if (srv__request_check(req, req->version, &bad) != 0)
        return respond(req, &bad);
    if (strcmp(req->method, "OPTIONS") == 0)
        return preflight(req);

    char *allow = req->allow;
    enum srv_match m = srv_router_match(c->routes, c->n_routes, req->method, req->path,
                                        &req->route, &req->param, allow, sizeof req->allow);
    req->route_name = m == SRV_MATCH_NOT_FOUND ? "other" : req->route->name;

    /* Authenticate before telling anything about the path, except public routes. */
    bool is_public = req->route && req->route->is_public;
    if (c->api_key && !is_public) {
        const char *key = srv_auth_presented_key(srv_request_header(req, "Authorization"),
                                                 srv_request_header(req, "X-Api-Key"));
        if (!srv_auth_key_matches(c->api_key, key))
            return respond_error(req, API_ERR_UNAUTHORIZED,
                                 key ? "invalid API key"
                                     : "missing API key (send 'Authorization: Bearer <key>' or "
                                       "'X-Api-Key: <key>')");
    }
    if (m == SRV_MATCH_NOT_FOUND)
        return respond_error(req, API_ERR_NOT_FOUND, "no route for %s %s", req->method,
                             req->path);
    if (m == SRV_MATCH_METHOD_NOT_ALLOWED) {
        struct srv_response resp = {0};
        srv_response_error(&resp, API_ERR_METHOD_NOT_ALLOWED, NULL,
                           "method %s is not allowed on %s (allowed: %s)", req->method,
                           req->path, allow);
        srv_response_header(&resp, "Allow", allow);
        return respond(req, &resp);
    }
    if (srv__request_check_body_type(req, &bad) != 0)
        return respond(req, &bad);

    /* A declared length over the limit is refused before a byte of it is read
     * (and before MHD sends "100 Continue"). */
    const char *cl = srv_request_header(req, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (!errno && end != cl && n > c->max_body_bytes)
            return respond_error(req, API_ERR_BODY_TOO_LARGE,
                                 "request body of %llu bytes is larger than the limit of %zu "
                                 "bytes (--max-body-bytes)",
                                 n, c->max_body_bytes);
    }
    return MHD_YES;
}

/* A piece of the body. Chunked uploads have no declared length, so the limit is
 * also enforced here; the excess is read and dropped so the 413 can still be
 * sent, up to a bound past which the connection is simply closed. */
static enum MHD_Result on_body(srv_request *req, const char *data, size_t size)
{
    size_t max = req->http->cfg.max_body_bytes;
    if (req->body_too_large || req->body.n + size > max) {
        req->body_too_large = true;
        req->discarded += size;
        if (req->discarded > (uint64_t)max + (64u << 20)) {
            log_warn("closing connection: request body keeps coming past %zu bytes", max);
            return MHD_NO;
        }
        return MHD_YES;
    }
    return ut_buf_add(&req->body, data, size) == 0 ? MHD_YES : MHD_NO;
}

/* The whole request is in: run the handler. */
static enum MHD_Result on_complete_request(srv_request *req)
{
    if (req->body_too_large)
        return respond_error(req, API_ERR_BODY_TOO_LARGE,
                             "request body is larger than the limit of %zu bytes "
                             "(--max-body-bytes)",
                             req->http->cfg.max_body_bytes);
    struct srv_response resp = {0};
    int rc = req->route->handler(req, &resp);
    if (rc == 0 && req->deferred && resp.status == 0) {
        MHD_suspend_connection(req->conn);
        return MHD_YES;
    }
    /* A handler must either answer or defer; both is a bug. Answer, and let the
     * later srv_request_complete() find the request already done. */
    deferred_remove(req->http, req);
    if (rc != 0 || resp.status == 0) {
        free(resp.body);
        resp = (struct srv_response){0};
        srv_response_error(&resp, API_ERR_INTERNAL, NULL, "internal error in %s",
                           req->route->name);
    }
    return respond(req, &resp);
}

static srv_request *request_new(srv_http *h, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version)
{
    srv_request *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    req->http = h;
    req->conn = conn;
    req->refs = 1;
    req->start_ns = ut_now_ns();
    req->route_name = "other";
    snprintf(req->method, sizeof req->method, "%s", method);
    snprintf(req->version, sizeof req->version, "%s", version ? version : "");
    req->http10 = strcmp(req->version, MHD_HTTP_VERSION_1_0) == 0;
    /* An absolute-form target (RFC 9112 §3.2.2) names the path after the authority. */
    if (url && (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0)) {
        const char *slash = strchr(strstr(url, "://") + 3, '/');
        url = slash ? slash : "/";
    }
    req->path = strdup(url && *url ? url : "/");
    if (!req->path) {
        free(req);
        return NULL;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    req->conn_ctx = ci ? ci->socket_context : NULL;
    return req;
}

static void request_unref(srv_request *req)
{
    if (!req || --req->refs > 0)
        return;
    if (req->pending_stream)
        MHD_destroy_response(req->pending_stream);
    free(req->pending.body);
    free(req->early.body);
    ut_buf_free(&req->body);
    free(req->path);
    free(req);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **con_cls)
{
    srv_http *h = cls;
    srv_request *req = *con_cls;
    if (!req) {
        req = request_new(h, conn, url, method, version);
        if (!req)
            return MHD_NO;
        *con_cls = req;
        h->inflight++;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        req->has_body = (cl && strcmp(cl, "0") != 0) ||
                        MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                    MHD_HTTP_HEADER_TRANSFER_ENCODING);
        req->in_headers = true;
        enum MHD_Result r = on_headers(req);
        req->in_headers = false;
        return r;
    }
    if (*upload_data_size == 0 && req->conn_ctx) /* the whole request is in */
        req->conn_ctx->reading = false;
    if (req->pending_stream)     /* resumed after srv_request_stream() */
        return srv__stream_queue(req);
    if (req->pending.status) {   /* resumed after srv_request_complete() */
        struct srv_response resp = req->pending;
        req->pending = (struct srv_response){0};
        return respond(req, &resp);
    }
    if (req->status || req->early.status) { /* answered from the headers */
        bool last = *upload_data_size == 0;
        *upload_data_size = 0;
        if (last && !req->status)
            return respond(req, &req->early);
        return MHD_YES;
    }
    if (*upload_data_size) {
        enum MHD_Result r = on_body(req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return r;
    }
    return on_complete_request(req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    srv_http *h = cls;
    srv_request *req = *con_cls;
    if (!req)
        return;
    *con_cls = NULL;
    h->inflight--;
    double secs = (double)(ut_now_ns() - req->start_ns) / 1e9;
    /* A request that died before its answer was out because the client left is
     * counted as 499 (client closed), the nginx convention, so dashboards see it
     * and 5xx alerts do not; one the deadline ended, as nginx's 408. */
    struct conn *cc = req->conn_ctx;
    bool left = (cc && cc->gone) ||
                toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ||
                toe == MHD_REQUEST_TERMINATED_READ_ERROR;
    int status = req->status;
    if (cc && cc->timed_out)
        status = 408;
    else if (!status || (left && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK))
        status = 499;
    if (req->flushing) {
        req->flushing = false;
        h->flushing--;
    }
    srv__conn_idle(h, cc);
    srv_metrics_record(h->cfg.metrics, req->route_name, status, secs);
    /* Health probes are frequent and their 503 while loading is expected; the
     * page polls /v1/status (quiet) every few seconds. */
    enum cfg_log_level lvl = (req->route && req->route->is_public) || req->quiet ? CFG_LOG_DEBUG
                             : status >= 500                                   ? CFG_LOG_WARN
                                                                               : CFG_LOG_INFO;
    if (srv_log_enabled(lvl))
        srv_log(lvl, "%s %s -> %d in %.1f ms%s", req->method, req->path, status, secs * 1e3,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
    if (req->deferred) {         /* cannot happen: stop resumes them first */
        deferred_remove(h, req);
        cancel(req);
    }
    req->finished = true;
    req->conn = NULL;
    req->http = NULL;
    if (req->pending_stream) { /* never queued: its free callback drops the stream */
        struct MHD_Response *mr = req->pending_stream;
        req->pending_stream = NULL;
        MHD_destroy_response(mr);
    }
    request_unref(req);
}

__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt,
                                                               va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    log_debug("libmicrohttpd: %s", msg);
}

/* ---- the uv side --------------------------------------------------------- */

static void on_soon(uv_idle_t *i)
{
    uv_idle_stop(i);
    run_mhd(i->data);
}

/* MHD_run() on the next loop iteration, after its poll (see the top comment). */
static void run_soon(srv_http *h)
{
    if (!h->stopping)
        uv_idle_start(&h->soon, on_soon);
}

static void arm_timer(srv_http *h)
{
    MHD_UNSIGNED_LONG_LONG ms;
    if (h->stopping)
        return;
    if (MHD_get_timeout(h->mhd, &ms) != MHD_YES) {
        uv_timer_stop(&h->timer);
    } else if (ms == 0) {
        uv_timer_stop(&h->timer);
        run_soon(h);
    } else {
        uv_timer_start(&h->timer, on_timer, ms, 0);
    }
}

static void run_mhd(srv_http *h)
{
    if (h->stopping)
        return;
    h->conn_closed = false;
    MHD_run(h->mhd);
    /* At --max-connections MHD takes its listening socket out of its epoll set and
     * puts it back only on a later run after a connection has closed; with no
     * socket activity left nothing else would run it again. */
    if (h->conn_closed) {
        run_soon(h);
        return;
    }
    arm_timer(h);
}

static void on_timer(uv_timer_t *t) { run_mhd(t->data); }
void srv__http_run(srv_http *h) { run_mhd(h); }

static void on_poll(uv_poll_t *p, int status, int events)
{
    srv_http *h = p->data;
    if (status < 0)
        log_warn("poll on the HTTP event fd failed: %s", uv_strerror(status));
    run_mhd(h);
}

static bool listens_on_loopback(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char addr[INET6_ADDRSTRLEN];
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return false;
    const void *a = ss.ss_family == AF_INET ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
                    : ss.ss_family == AF_INET6
                        ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                        : NULL;
    return a && inet_ntop(ss.ss_family, a, addr, sizeof addr) && srv_addr_is_loopback(addr);
}

int srv_http_start(uv_loop_t *loop, const struct srv_http_config *cfg, srv_http **out, char *err,
                   size_t errlen)
{
    int rc;
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    h->cfg = *cfg;
    /* SIGPIPE is ignored process-wide by main(); tell MHD so it need not. */
    h->conns.next = h->conns.prev = &h->conns;
    /* The logger goes first so that MHD's own option warnings reach our log. */
    h->loopback = listens_on_loopback(cfg->listen_fd);
    /* MHD's own cap one over ours, so that it keeps accepting and the accept
     * policy (srv__conn_accept) can close the connection over the cap at once. */
    h->mhd = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, srv__conn_accept, h,
        on_access, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_LISTEN_SOCKET,
        (MHD_socket)cfg->listen_fd, MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections + 1,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        h, MHD_OPTION_NOTIFY_CONNECTION, srv__conn_notify, h,
        MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1, MHD_OPTION_END);
    if (!h->mhd) {
        /* MHD logs its reason through on_mhd_log; it returns no code. */
        snprintf(err, errlen, "libmicrohttpd failed to start on the listening socket");
        rc = -EIO;
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info) {
        snprintf(err, errlen, "libmicrohttpd has no epoll fd");
        rc = -ENOTSUP;
        goto fail;
    }
    h->hup_fd = epoll_create1(EPOLL_CLOEXEC);
    if (h->hup_fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "epoll_create1: %s", strerror(errno));
        goto fail;
    }
    uv_poll_init(loop, &h->poll, info->epoll_fd);
    uv_timer_init(loop, &h->timer);
    uv_idle_init(loop, &h->soon);
    h->poll.data = h;
    h->timer.data = h;
    h->soon.data = h;
    h->open_handles = 6;
    srv__conn_start(h, loop);
    uv_poll_start(&h->poll, UV_READABLE, on_poll);
    arm_timer(h);
    *out = h;
    return 0;
fail:
    if (h->mhd)
        MHD_stop_daemon(h->mhd);
    free(h);
    return rc;
}

void srv_http_drain(srv_http *h)
{
    if (h->draining)
        return;
    h->draining = true;
    /* MHD hands the listening socket back; closing it refuses new connections
     * (under socket activation systemd keeps its copy and queues them for the
     * next start). */
    MHD_socket fd = MHD_quiesce_daemon(h->mhd);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    run_mhd(h);
}

size_t srv_http_inflight(const srv_http *h) { return h->inflight; }
size_t srv_http_connections(const srv_http *h) { return h->connections; }

static void on_handle_closed(uv_handle_t *handle)
{
    srv_http *h = handle->data;
    if (--h->open_handles == 0) {
        close(h->hup_fd);
        free(h);
    }
}

void srv_http_stop(srv_http *h)
{
    if (!h || h->stopping)
        return;
    /* MHD must not be stopped with suspended connections: cancel the work and
     * resume them; MHD then ends them and the work's later
     * srv_request_complete() only drops its reference. */
    while (h->deferred) {
        srv_request *req = h->deferred;
        deferred_remove(h, req);
        cancel(req);
        if (req->stream)
            srv__stream_abort(req);
        else
            srv_response_error(&req->pending, API_ERR_SHUTTING_DOWN, NULL,
                               "the server is shutting down");
        MHD_resume_connection(req->conn);
        req->flushing = true;
        h->flushing++;
    }
    /* Let those answers (a stream's error event and [DONE]) go out whole before
     * the connections close, for a bounded time. */
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    uint64_t until = uv_hrtime() + (uint64_t)STOP_FLUSH_MS * 1000000;
    MHD_run(h->mhd);
    while (h->flushing && info && uv_hrtime() < until) {
        struct pollfd pfd = {.fd = info->epoll_fd, .events = POLLIN};
        poll(&pfd, 1, 20);
        MHD_run(h->mhd);
    }
    uv_poll_stop(&h->poll);
    uv_timer_stop(&h->timer);
    uv_idle_stop(&h->soon);
    srv__conn_stop(h);
    /* Runs on_completed for what is still open; it needs h and the metrics. */
    MHD_stop_daemon(h->mhd);
    h->mhd = NULL;
    h->stopping = true;
    uv_close((uv_handle_t *)&h->poll, on_handle_closed);
    uv_close((uv_handle_t *)&h->timer, on_handle_closed);
    uv_close((uv_handle_t *)&h->soon, on_handle_closed);
    uv_close((uv_handle_t *)&h->hup, on_handle_closed);
    uv_close((uv_handle_t *)&h->reap, on_handle_closed);
    uv_close((uv_handle_t *)&h->deadline, on_handle_closed);
}
