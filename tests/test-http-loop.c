/* server/http under the libuv loop: while MHD reads a body (one buffer's worth per
 * connection per MHD_run(), "run again at once" until it is in), the loop must
 * still reach its poll phase between those runs, so a thread-pool completion
 * (here: a uv_async, which is how one arrives) is not held until every upload
 * has been read (a chat prompt once waited behind four 2 MB /tokenize
 * bodies).
 *
 * No threads: the client writes 2 MB into the server's receive queue and stops,
 * so MHD always has bytes to read until the 2 MB are in, and the body cannot be
 * read in one MHD_run(). The probe is sent from a uv_check as soon as MHD has read
 * part of it and must arrive while bytes are still unread (on libuv 1.44 with a
 * 0 ms timer it arrived after all 2 MB were read). */
#include "server/http.h"
#include "server/metrics.h"

#include "tests/check.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define BODY_LEN (64u << 20) /* declared; more than is sent */
#define BUFFERED (2u << 20)  /* sent: 128 of MHD's 16 KB reads */

static int answer_ok(srv_request *req, struct srv_response *resp)
{
    (void)req;
    resp->status = 200;
    resp->body = strdup("{}");
    return resp->body ? 0 : -1;
}

static const struct srv_route routes[] = {
    {"POST", "/upload", "upload", true, answer_ok, NULL},
};

struct probe {
    int client, server;        /* the upload's two ends (the server's is MHD's) */
    struct sockaddr_in client_addr;
    size_t written;            /* body bytes the kernel took */
    uv_check_t check;
    uv_async_t async;
    uv_timer_t guard;
    bool sent, arrived, gave_up;
    size_t unread_at_probe;
};

/* MHD accepted the connection in this process: find its fd by its peer. */
static int find_server_end(const struct sockaddr_in *peer)
{
    struct rlimit rl;
    int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096 ? (int)rl.rlim_cur : 4096;
    for (int fd = 3; fd < max; fd++) {
        struct sockaddr_in a;
        socklen_t len = sizeof a;
        if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET &&
            a.sin_port == peer->sin_port && a.sin_addr.s_addr == peer->sin_addr.s_addr)
            return fd;
    }
    return -1;
}

/* Bytes of the upload MHD has not read yet (all of it is in the server's receive
 * queue by then). */
static size_t unread(const struct probe *p)
{
    int in = 0;
    cr_assert_eq(ioctl(p->server, FIONREAD, &in), 0);
    return (size_t)in;
}

static void on_check(uv_check_t *c)
{
    struct probe *p = c->data;
    if (p->sent)
        return;
    if (p->server < 0)
        p->server = find_server_end(&p->client_addr);
    if (p->server < 0 || unread(p) >= p->written)
        return;
    /* MHD has begun on the body: post the "work done" now. */
    p->sent = true;
    cr_assert_eq(uv_async_send(&p->async), 0);
}

static void on_async(uv_async_t *a)
{
    struct probe *p = a->data;
    p->arrived = true;
    p->unread_at_probe = unread(p);
    uv_stop(a->loop);
}

static void on_guard(uv_timer_t *t)
{
    struct probe *p = t->data;
    p->gave_up = true;
    uv_stop(t->loop);
}

static void close_cb(uv_handle_t *h) { (void)h; }

MCD_TEST(http_loop, completion_arrives_while_a_body_is_read)
{
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t slen = sizeof sa;
    /* Accepted sockets inherit it: room for the whole upload at once. */
    int rcvbuf = 8 << 20;
    setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(lfd, 8), 0);
    cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &slen), 0);

    srv_metrics *metrics = srv_metrics_new();
    cr_assert_not_null(metrics);
    struct srv_http_config cfg = {
        .listen_fd = lfd,
        .max_connections = 8,
        .listen_host = "127.0.0.1",
        .max_body_bytes = BODY_LEN,
        .routes = routes,
        .n_routes = sizeof routes / sizeof routes[0],
        .metrics = metrics,
    };
    srv_http *h = NULL;
    char err[256];
    cr_assert_eq(srv_http_start(&loop, &cfg, &h, err, sizeof err), 0, "%s", err);

    /* The client: a big send buffer, connected (the kernel completes the handshake
     * before MHD accepts), then the headers and BUFFERED bytes of the body. */
    struct probe p = {.server = -1};
    p.client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(p.client >= 0);
    int sndbuf = 8 << 20;
    setsockopt(p.client, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    cr_assert_eq(connect(p.client, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t clen = sizeof p.client_addr;
    cr_assert_eq(getsockname(p.client, (struct sockaddr *)&p.client_addr, &clen), 0);
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "POST /upload HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                      "application/json\r\nContent-Length: %u\r\n\r\n",
                      BODY_LEN);
    cr_assert_eq(write(p.client, head, (size_t)hn), hn);
    cr_assert_eq(fcntl(p.client, F_SETFL, O_NONBLOCK), 0);
    static char chunk[64 << 10];
    memset(chunk, ' ', sizeof chunk);
    while (p.written < BUFFERED) {
        ssize_t n = write(p.client, chunk, sizeof chunk);
        if (n < 0) {
            cr_assert_eq(errno, EAGAIN);
            break;
        }
        p.written += (size_t)n;
    }
    /* Wait (a state, bounded) until it has all moved to the server's receive
     * queue: from there MHD reads on without a pause, as it did from the four
     * bodies already sent. */
    int outq = 1;
    for (int i = 0; i < 5000 && outq; i++) {
        cr_assert_eq(ioctl(p.client, SIOCOUTQ, &outq), 0);
        if (outq)
            usleep(1000);
    }
    if (p.written < BUFFERED || outq)
        cr_skip_test("the kernel took %zu bytes of the upload, %d not delivered", p.written,
                     outq);

    uv_check_init(&loop, &p.check);
    uv_async_init(&loop, &p.async, on_async);
    uv_timer_init(&loop, &p.guard);
    p.check.data = p.async.data = p.guard.data = &p;
    uv_check_start(&p.check, on_check);
    /* Only a bound for a broken build: the probe normally ends the run. */
    uv_timer_start(&p.guard, on_guard, 60000, 0);
    uv_run(&loop, UV_RUN_DEFAULT);

    cr_expect(!p.gave_up, "the probe was never sent or never arrived");
    cr_expect(p.arrived, "the probe did not arrive");
    cr_expect_gt(p.unread_at_probe, 0,
                 "the completion waited until all %zu buffered body bytes were read",
                 p.written);

    close(p.client);
    srv_http_stop(h);
    uv_close((uv_handle_t *)&p.check, close_cb);
    uv_close((uv_handle_t *)&p.async, close_cb);
    uv_close((uv_handle_t *)&p.guard, close_cb);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    srv_metrics_free(metrics);
}
