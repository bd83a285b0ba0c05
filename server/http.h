/* http — libmicrohttpd driven by the libuv loop thread.
 *
 * No MHD thread: MHD's epoll fd sits under a uv_poll and a uv_timer follows
 * MHD_get_timeout(), so every request callback runs on the loop thread. This layer
 * owns what every route shares: routing, the API key, CORS, the body limit, error
 * bodies, per-request accounting and draining. Handlers see a srv_request and fill
 * a srv_response.
 */
#ifndef MINICPMD_SERVER_HTTP_H
#define MINICPMD_SERVER_HTTP_H

#include "api/api.h"
#include "server/router.h"

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

struct srv_metrics;

struct srv_http_config {
    int listen_fd;                  /* bound and listening; MHD takes ownership */
    unsigned max_connections;       /* more are closed at once */
    unsigned max_connections_per_ip;/* 0 = no limit of its own */
    unsigned timeout_s;             /* idle timeout per connection, 0 = none */
    unsigned request_timeout_s;     /* a request must be in this long after it began; 0 = none */
    const char *listen_host;        /* --host: a Host value a loopback listener accepts */
    char *const *allowed_hosts;     /* --allowed-host */
    size_t n_allowed_hosts;
    size_t max_body_bytes;
    const char *api_key;            /* NULL = no auth */
    char *const *cors_origins;
    size_t n_cors_origins;
    const struct srv_route *routes;
    size_t n_routes;
    void *app;                      /* handed to handlers via srv_request_app() */
    struct srv_metrics *metrics;    /* requests are counted here */
};

typedef struct srv_http srv_http;
typedef struct srv_request srv_request;

/* Start serving on `loop`. Returns 0, or a negative errno (-ENOMEM; -EIO when
 * libmicrohttpd does not start) with a one-line reason in `err`. */
int srv_http_start(uv_loop_t *loop, const struct srv_http_config *cfg, srv_http **out, char *err,
                   size_t errlen);

/* Stop accepting new connections and answer requests that arrive on open
 * connections with 503 shutting_down; requests already in flight go on. */
void srv_http_drain(srv_http *h);

/* Requests that have reached a handler (or are being read) and not completed. */
size_t srv_http_inflight(const srv_http *h);
/* Open TCP connections. */
size_t srv_http_connections(const srv_http *h);

/* Close every connection, stop MHD and close the uv handles. Requests still
 * waiting are cancelled and answered 503 shutting_down; open streams end with a
 * shutting_down error event and [DONE]; those last answers get up to a second to
 * go out (the loop is blocked meanwhile). `h` is freed once the loop has run the
 * close callbacks. */
void srv_http_stop(srv_http *h);

/* ---- what handlers see -------------------------------------------------- */

struct srv_response {
    int status;                 /* HTTP status */
    char *body;                 /* malloc'd; the server frees it. NULL = empty */
    size_t body_len;            /* 0 = strlen(body) */
    const char *content_type;   /* NULL = "application/json" */
    const char *retry_after;    /* Retry-After value, or NULL */
    struct {                    /* further headers: static strings, or strings that */
        const char *name;       /* live as long as the request (never the stack)    */
        const char *value;
    } headers[4];
    int n_headers;
    bool quiet;                 /* a polled route's success: logged at debug, not info */
    /* An error not rendered yet (srv_response_error, srv_response_err): the body is
     * written when the answer goes out, in the route's shape (srv_route.error_body)
     * or OpenAI's, so one route's errors all look alike whoever refused. */
    bool has_err;
    struct api_err err;
};

/* Add a header to `resp` (silently ignored past the fixed limit: a programming
 * error caught by the unit tests). */
void srv_response_header(struct srv_response *resp, const char *name, const char *value);

/* ---- answering later ------------------------------------------------------
 *
 * A handler whose answer needs work off the loop thread (tokenizing, the engine)
 * calls srv_request_defer() and returns 0 without filling `resp`. The connection
 * is suspended; whoever owns the work later calls srv_request_complete() on the
 * loop thread exactly once, with the response (or any response, if cancelled).
 * Until then the request stays valid even if the client or the server goes away.
 *
 * `on_cancel(ud)` (optional) runs on the loop thread at most once when the answer
 * is no longer wanted: the client hung up, or the server is stopping. The owner
 * should stop its work early; it must still call srv_request_complete(). */
typedef void (*srv_cancel_fn)(void *ud);
void srv_request_defer(srv_request *r, srv_cancel_fn on_cancel, void *ud);
void srv_request_complete(srv_request *r, struct srv_response *resp);

/* ---- streamed answers ---------------------------------------------------------
 *
 * A deferred request may answer with a body that is written as it is produced
 * (Server-Sent Events): srv_request_stream() sends the status and headers, then
 * srv_stream_write() appends pieces and srv_stream_end() finishes. Between writes
 * the connection is suspended, so an idle stream costs nothing. Loop thread only.
 *
 * The stream buffers what the client has not read yet, up to `limit` bytes: a
 * write past it fails with -ENOBUFS (the client reads too slowly; the caller ends
 * the request), a write after the client left fails with -EPIPE. srv_stream_end()
 * is called exactly once, also after a failed write, and replaces
 * srv_request_complete() for the request. */
typedef struct srv_stream srv_stream;

srv_stream *srv_request_stream(srv_request *r, int status, const char *content_type,
                               size_t limit);
int srv_stream_write(srv_stream *s, const char *data, size_t len);
void srv_stream_end(srv_stream *s);

/* Fill `resp` with error `e` (rendered when it is sent: srv_response.has_err); the
 * message is printf-style. */
void srv_response_error(struct srv_response *resp, enum api_error e, const char *param,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));

const char *srv_request_param(const srv_request *r);    /* the route's {id}, or NULL */
const char *srv_request_header(const srv_request *r, const char *name);
const char *srv_request_body(const srv_request *r, size_t *len);
void *srv_request_app(const srv_request *r);

#endif
