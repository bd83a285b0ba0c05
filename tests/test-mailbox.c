/* server/mailbox: posts from many threads all arrive, in order per thread, on
 * the loop thread; close() runs what is pending and refuses more. */
#include "server/mailbox.h"

#include "tests/check.h"
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

enum { THREADS = 4, PER_THREAD = 5000 };

struct ctx {
    uv_loop_t loop;
    srv_mailbox *mb;
    uv_thread_t loop_thread_id;
    int last[THREADS];
    int received;
    bool wrong_thread, out_of_order;
    uv_timer_t done_check;
};

struct item {
    struct ctx *c;
    int thread, seq;
};

static uv_thread_t loop_tid;

static void on_mail(void *data)
{
    struct item *it = data;
    struct ctx *c = it->c;
    uv_thread_t self = uv_thread_self();
    if (!uv_thread_equal(&self, &loop_tid))
        c->wrong_thread = true;
    if (it->seq != c->last[it->thread] + 1)
        c->out_of_order = true;
    c->last[it->thread] = it->seq;
    c->received++;
    free(it);
    if (c->received == THREADS * PER_THREAD)
        srv_mailbox_close(c->mb);
}

struct producer {
    struct ctx *c;
    int id;
};

static void produce(void *arg)
{
    struct producer *p = arg;
    for (int i = 1; i <= PER_THREAD; i++) {
        struct item *it = malloc(sizeof *it);
        *it = (struct item){p->c, p->id, i};
        cr_assert_eq(srv_mailbox_post(p->c->mb, on_mail, it), 0);
    }
}

MCD_TEST(mailbox, many_producers)
{
    struct ctx c = {0};
    cr_assert_eq(uv_loop_init(&c.loop), 0);
    loop_tid = uv_thread_self();
    c.mb = srv_mailbox_new(&c.loop);
    cr_assert_not_null(c.mb);
    uv_thread_t t[THREADS];
    struct producer p[THREADS];
    for (int i = 0; i < THREADS; i++) {
        p[i] = (struct producer){&c, i};
        cr_assert_eq(uv_thread_create(&t[i], produce, &p[i]), 0);
    }
    uv_run(&c.loop, UV_RUN_DEFAULT); /* returns once close() has run */
    for (int i = 0; i < THREADS; i++)
        uv_thread_join(&t[i]);
    cr_assert_eq(c.received, THREADS * PER_THREAD);
    cr_assert_not(c.wrong_thread);
    cr_assert_not(c.out_of_order);
    cr_assert_eq(uv_loop_close(&c.loop), 0, "nothing left open");
}

static int ran;
static void count(void *data) { ran++; }

MCD_TEST(mailbox, close_runs_pending_and_refuses_more)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    loop_tid = uv_thread_self();
    srv_mailbox *mb = srv_mailbox_new(&loop);
    ran = 0;
    cr_assert_eq(srv_mailbox_post(mb, count, NULL), 0);
    cr_assert_eq(srv_mailbox_post(mb, count, NULL), 0);
    srv_mailbox_close(mb);
    cr_assert_eq(ran, 2, "pending mail runs on close");
    cr_assert_eq(srv_mailbox_post(mb, count, NULL), -ESHUTDOWN);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
}
