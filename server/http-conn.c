/* The connection watch: what libmicrohttpd 0.9.75 does not do for us.
 *
 * Hang-ups. MHD misses a peer's FIN in several states: after a short read (its
 * edge-triggered epoll stops reading), while a connection is suspended, and while
 * it only writes (docs/openai-api.md §5.4, §5.8). Such a connection would hold a
 * slot and an in-flight request until --timeout. So every connection is also in
 * an epoll set of our own that waits for EPOLLRDHUP (never EPOLLIN while a
 * request is under way, which a pipelined request also raises).
 *
 * Half-closes. A peer that shut its side may still read (HTTP allows it; curl
 * --no-buffer, nc -N and raw-socket clients do it right after the request), or
 * may have closed altogether: the FIN looks the same. A request waiting on such a
 * connection gets a probe that is harmless to a reader: an unsolicited
 * "100 Continue" before the answer (RFC 9110 §15.2: clients must accept 1xx they
 * did not ask for; not for HTTP/1.0) or an SSE comment inside a stream. A peer
 * that closed answers the probe with a reset (EPOLLERR/EPOLLHUP in our set): its
 * request is cancelled, else it goes on and the connection closes after the
 * answer. A connection with nothing waiting gets HUP_GRACE_MS for the answer of a
 * request still in MHD's hands, then is shut down.
 *
 * The request deadline (--request-timeout). --timeout is an idle timeout, which a
 * client that sends a byte now and then never reaches ("slowloris"). Like nginx's
 * client_header_timeout/client_body_timeout (as one total), a request must be in
 * whole within the deadline after its first byte, or after the connection was
 * accepted; between requests the connection waits for EPOLLIN to start the clock.
 *
 * The connection cap. At MHD's own limit it stops accepting and the kernel queues
 * new clients in the backlog, where a trickle of slow clients keeps them waiting.
 * MHD's limit is set one higher and the accept policy closes a connection over
 * --max-connections at once, and one over --max-connections-per-ip from the same
 * non-loopback address (MHD_OPTION_PER_IP_CONNECTION_LIMIT would count loopback
 * clients too, all one address). */
#include "server/http-impl.h"

#include "server/log.h"
#include "server/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HUP_GRACE_MS 100
#define DEADLINE_TICK_MS 250

static void watch(srv_http *h, struct conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events | EPOLLONESHOT, .data.u64 = c->id};
    if (epoll_ctl(h->hup_fd, EPOLL_CTL_MOD, c->fd, &ev) != 0 && errno != ENOENT &&
        errno != EBADF)
        log_warn("connection watch: epoll_ctl: %s", strerror(errno));
}

static void hang_up(struct conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
    c->gone = true;
    c->hup = false;
    /* MHD cannot see it while the request is suspended: tell the work. */
    if (c->deferred)
        srv__request_cancel(c->deferred);
}

/* The peer shut its side while a request waits on the connection. */
static void probe(srv_http *h, struct conn *c)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    srv_request *r = c->deferred;
    int rc;
    if (r->stream)
        rc = srv__stream_probe(r);
    else if (r->http10)
        rc = -EPROTO;
    else
        rc = send(c->fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) ==
                     (ssize_t)(sizeof cont - 1)
                 ? 0
                 : -errno;
    if (rc != 0) {
        hang_up(c);
        return;
    }
    c->half_closed = true;
    c->hup = false;
    watch(h, c, 0); /* EPOLLERR and EPOLLHUP are always reported */
}

static void on_reap(uv_timer_t *t)
{
    srv_http *h = t->data;
    uint64_t now = uv_now(t->loop), next = 0;
    bool any = false;
    for (struct conn *c = h->conns.next; c != &h->conns; c = c->next) {
        if (!c->hup)
            continue;
        if (now - c->hup_at >= HUP_GRACE_MS) {
            if (c->deferred && !c->half_closed)
                probe(h, c);
            else
                hang_up(c);
            any = true;
        } else if (!next || c->hup_at + HUP_GRACE_MS - now < next) {
            next = c->hup_at + HUP_GRACE_MS - now;
        }
    }
    if (next)
        uv_timer_start(&h->reap, on_reap, next, 0);
    if (any)
        srv__http_run(h);
}

static void on_hup(uv_poll_t *p, int status, int events)
{
    (void)events;
    srv_http *h = p->data;
    struct epoll_event ev[64];
    bool run = false, wait = false;
    int n;
    if (status < 0) {
        log_warn("poll on the hang-up epoll fd failed: %s", uv_strerror(status));
        return;
    }
    do {
        n = epoll_wait(h->hup_fd, ev, 64, 0);
        for (int i = 0; i < n; i++) {
            struct conn *c = h->conns.next;
            while (c != &h->conns && c->id != ev[i].data.u64)
                c = c->next;
            if (c == &h->conns)
                continue; /* closed since */
            uint32_t e = ev[i].events;
            if (e & (EPOLLERR | EPOLLHUP)) {        /* reset: the peer is gone */
                hang_up(c);
                run = true;
            } else if (e & EPOLLRDHUP) {
                if (c->deferred && !c->half_closed) {
                    probe(h, c);
                    run = true;
                } else {
                    c->hup = true;
                    c->hup_at = uv_now(p->loop);
                    wait = true;
                }
            } else if (e & EPOLLIN) {               /* the next request begins */
                c->reading = true;
                c->req_start = uv_now(p->loop);
                watch(h, c, EPOLLRDHUP);
            }
        }
    } while (n == 64);
    if (wait && !uv_is_active((uv_handle_t *)&h->reap))
        uv_timer_start(&h->reap, on_reap, HUP_GRACE_MS, 0);
    if (run)
        srv__http_run(h);
}

void srv__conn_idle(srv_http *h, struct conn *c)
{
    if (!c || c->gone)
        return;
    c->reading = false;
    if (c->half_closed) { /* answered: the peer sends nothing more */
        c->hup = true;
        c->hup_at = uv_now(h->hup.loop);
        if (!uv_is_active((uv_handle_t *)&h->reap))
            uv_timer_start(&h->reap, on_reap, HUP_GRACE_MS, 0);
        return;
    }
    watch(h, c, EPOLLIN | EPOLLRDHUP);
}

static void on_deadline(uv_timer_t *t)
{
    srv_http *h = t->data;
    uint64_t now = uv_now(t->loop), limit = (uint64_t)h->cfg.request_timeout_s * 1000;
    bool any = false;
    for (struct conn *c = h->conns.next; c != &h->conns; c = c->next) {
        if (!c->reading || c->gone || now - c->req_start < limit)
            continue;
        log_info("closing a connection: its request did not arrive within %u s "
                 "(--request-timeout)", h->cfg.request_timeout_s);
        srv_metrics_conn_closed(h->cfg.metrics, SRV_CLOSE_REQUEST_TIMEOUT);
        c->timed_out = true;
        c->reading = false;
        hang_up(c);
        any = true;
    }
    if (any)
        srv__http_run(h);
}

/* The client's address as a key (the port left out); loopback peers get none:
 * every local client shares 127.0.0.1, where a limit per address would only be a
 * lower --max-connections. */
static bool peer_key(const struct sockaddr *a, unsigned char key[17])
{
    memset(key, 0, 17);
    if (a && a->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)a;
        if ((ntohl(in->sin_addr.s_addr) >> 24) == 127)
            return false;
        key[0] = 4;
        memcpy(key + 1, &in->sin_addr, 4);
        return true;
    }
    if (a && a->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)a;
        const struct in6_addr *x = &in6->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(x) || (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127))
            return false;
        key[0] = 6;
        memcpy(key + 1, x, 16);
        return true;
    }
    return false;
}

enum MHD_Result srv__conn_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    srv_http *h = cls;
    if (h->connections >= h->cfg.max_connections) {
        log_debug("refusing a connection: --max-connections %u reached",
                  h->cfg.max_connections);
        srv_metrics_conn_closed(h->cfg.metrics, SRV_CLOSE_MAX_CONNECTIONS);
        return MHD_NO;
    }
    unsigned char key[17];
    unsigned limit = h->cfg.max_connections_per_ip, n = 0;
    if (!limit || !peer_key(addr, key))
        return MHD_YES;
    for (struct conn *c = h->conns.next; c != &h->conns; c = c->next)
        if (c->has_peer && memcmp(c->peer, key, sizeof key) == 0 && ++n >= limit) {
            log_debug("refusing a connection: --max-connections-per-ip %u reached", limit);
            srv_metrics_conn_closed(h->cfg.metrics, SRV_CLOSE_PER_IP);
            return MHD_NO;
        }
    return MHD_YES;
}

void srv__conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode toe)
{
    srv_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        h->connections++;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn *c = ci ? calloc(1, sizeof *c) : NULL;
        if (c) { /* without it the connection is only not watched */
            c->fd = ci->connect_fd;
            c->id = ++h->next_conn_id;
            const union MHD_ConnectionInfo *ai =
                MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
            c->has_peer = ai && peer_key(ai->client_addr, c->peer);
            c->reading = true; /* the first request's clock starts at accept */
            c->req_start = uv_now(h->hup.loop);
            /* Keyed by id, not pointer: an event may name a connection that has
             * closed since (its fd's entry leaves the set when MHD closes it). */
            struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT, .data.u64 = c->id};
            if (epoll_ctl(h->hup_fd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
                log_warn("connection not watched for hang-ups: epoll_ctl: %s", strerror(errno));
            c->next = h->conns.next;
            c->prev = &h->conns;
            h->conns.next->prev = c;
            h->conns.next = c;
        }
        *socket_context = c;
        return;
    }
    if (h->connections)
        h->connections--;
    struct conn *c = *socket_context;
    if (c) {
        c->prev->next = c->next;
        c->next->prev = c->prev;
        free(c);
        *socket_context = NULL;
    }
    h->conn_closed = true;
}

void srv__conn_start(srv_http *h, uv_loop_t *loop)
{
    uv_poll_init(loop, &h->hup, h->hup_fd);
    uv_timer_init(loop, &h->reap);
    uv_timer_init(loop, &h->deadline);
    h->hup.data = h;
    h->reap.data = h;
    h->deadline.data = h;
    uv_poll_start(&h->hup, UV_READABLE, on_hup);
    if (h->cfg.request_timeout_s)
        uv_timer_start(&h->deadline, on_deadline, DEADLINE_TICK_MS, DEADLINE_TICK_MS);
}

void srv__conn_stop(srv_http *h)
{
    uv_poll_stop(&h->hup);
    uv_timer_stop(&h->reap);
    uv_timer_stop(&h->deadline);
}
