/* Internals of server/http.c shared with server/stream.c (streamed responses).
 * Nothing outside those two files includes this. */
#ifndef MINICPMD_SERVER_HTTP_IMPL_H
#define MINICPMD_SERVER_HTTP_IMPL_H

#include "server/http.h"
#include "util/buf.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct srv_stream;

/* One open TCP connection (MHD's socket_context), for the hang-up watch and the
 * request deadline (server/http-conn.c). */
struct conn {
    struct conn *prev, *next;
    int fd;
    uint64_t id;                 /* its key in the hang-up epoll set */
    bool hup;                    /* the peer shut its side at hup_at (loop ms): */
    uint64_t hup_at;             /* shut down HUP_GRACE_MS later */
    bool half_closed;            /* ... but still reads: its answer goes on */
    bool gone;                   /* the peer left (or was made to): 499 */
    bool reading;                /* a request is arriving since req_start (loop ms) */
    uint64_t req_start;
    bool timed_out;              /* closed by --request-timeout: 408 */
    bool has_peer;               /* peer: the client's address, if not loopback */
    unsigned char peer[17];
    srv_request *deferred;       /* the request waiting on this connection, if any */
};

struct srv_http {
    struct srv_http_config cfg;
    struct MHD_Daemon *mhd;
    uv_poll_t poll;
    uv_timer_t timer;
    uv_idle_t soon;              /* MHD_run() on the next loop iteration */
    int hup_fd;                  /* epoll set of connections, EPOLLRDHUP only (see on_hup) */
    uv_poll_t hup;
    uv_timer_t reap;             /* shuts down connections whose peer hung up */
    uint64_t next_conn_id;
    struct conn conns;           /* list head of open connections */
    srv_request *deferred;       /* list of requests suspended until srv_request_complete */
    int open_handles;            /* uv handles not yet closed */
    uv_timer_t deadline;         /* enforces --request-timeout */
    size_t inflight;
    size_t connections;
    size_t flushing;             /* answers ended by srv_http_stop, not yet sent */
    bool loopback;               /* the listening socket is on loopback: check Host */
    bool conn_closed;            /* a connection closed during this MHD_run() */
    bool draining;
    bool stopping;
};

struct srv_request {
    srv_http *http;
    struct MHD_Connection *conn;
    char method[16];
    char version[16];            /* "HTTP/1.1" */
    char *path;
    const struct srv_route *route;
    const char *param;           /* into path */
    const char *route_name;      /* metrics label */
    ut_buf body;                 /* what came so far, NUL-terminated */
    uint64_t discarded;          /* body bytes dropped after the limit */
    uint64_t start_ns;
    int status;                  /* what we answered; 0 = nothing yet */
    bool body_too_large;
    bool has_body;               /* Content-Length > 0 or chunked */
    bool http10;                 /* an HTTP/1.0 request: no 1xx may be sent */
    bool flushing;               /* counted in srv_http.flushing */
    bool in_headers;             /* inside on_headers() */
    bool quiet;                  /* its answer asked to be logged at debug */
    struct srv_response early;   /* decided from the headers alone, not yet sent */
    char allow[128];             /* Allow header value; lives as long as `early` */

    /* Deferred answers. A deferred request has two owners, MHD (until
     * on_completed) and the work (until srv_request_complete); whoever is last
     * frees it. */
    int refs;
    bool deferred;               /* suspended, waiting for srv_request_complete */
    bool finished;               /* on_completed ran: conn and http are gone */
    bool cancelled;
    srv_cancel_fn on_cancel;
    void *cancel_ud;
    struct conn *conn_ctx;       /* for the hang-up watch */
    srv_request *dprev, *dnext;  /* in srv_http.deferred while deferred */
    struct srv_response pending; /* the answer, until MHD asks for it */
    struct srv_stream *stream;   /* a streamed answer (server/stream.c), or NULL */
    struct MHD_Response *pending_stream; /* its MHD response, until queued */
};

void srv__http_kick(srv_http *h);     /* run MHD soon (after a resume) */
void srv__http_run(srv_http *h);      /* run MHD now */
void srv__request_cancel(srv_request *req);  /* tell the work its answer is not wanted */
/* http-check.c: the header block's framing, Host and Origin; then, for a routed
 * request, its Content-Type. 0, or -EINVAL with the error answer in `resp`. */
int srv__request_check(srv_request *req, const char *version, struct srv_response *resp);
int srv__request_check_body_type(srv_request *req, struct srv_response *resp);
/* http-conn.c: the connection watch (hang-ups, half-closes, the request deadline).
 * MHD's connection notification; start and stop of its handles. */
void srv__conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode toe);
enum MHD_Result srv__conn_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
void srv__conn_start(srv_http *h, uv_loop_t *loop);
void srv__conn_stop(srv_http *h);
/* A request's answer was sent (on_completed): the connection waits for the next. */
void srv__conn_idle(srv_http *h, struct conn *c);
void srv__deferred_remove(srv_http *h, srv_request *r);
void srv__request_unref(srv_request *req);
/* The headers every response gets: CORS, and Connection: close while draining. */
void srv__response_common_headers(srv_request *req, struct MHD_Response *r);
/* stream.c: queue a stream's pending response after the resume (on_access). */
enum MHD_Result srv__stream_queue(srv_request *req);
/* stream.c: a peer that half-closed mid-stream: an SSE comment that makes a peer
 * that closed altogether answer with a reset. 0 or -errno. */
int srv__stream_probe(srv_request *req);
/* stream.c: the server is stopping; end the stream with an error event and
 * [DONE] after what is buffered, so MHD can finish it. */
void srv__stream_abort(srv_request *req);

#endif
