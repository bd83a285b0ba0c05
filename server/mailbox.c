#include "server/mailbox.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

struct mail {
    struct mail *next;
    srv_mail_fn fn;
    void *data;
};

struct srv_mailbox {
    uv_async_t async;
    uv_mutex_t lock;
    struct mail *head, *tail;
    bool closed;
};

static void drain(srv_mailbox *mb)
{
    for (;;) {
        uv_mutex_lock(&mb->lock);
        struct mail *m = mb->head;
        mb->head = mb->tail = NULL;
        uv_mutex_unlock(&mb->lock);
        if (!m)
            return;
        while (m) {
            struct mail *next = m->next;
            m->fn(m->data);
            free(m);
            m = next;
        }
    }
}

static void on_async(uv_async_t *a) { drain(a->data); }

srv_mailbox *srv_mailbox_new(uv_loop_t *loop)
{
    srv_mailbox *mb = calloc(1, sizeof *mb);
    if (!mb)
        return NULL;
    if (uv_mutex_init(&mb->lock) != 0) {
        free(mb);
        return NULL;
    }
    if (uv_async_init(loop, &mb->async, on_async) != 0) {
        uv_mutex_destroy(&mb->lock);
        free(mb);
        return NULL;
    }
    mb->async.data = mb;
    return mb;
}

int srv_mailbox_post(srv_mailbox *mb, srv_mail_fn fn, void *data)
{
    struct mail *m = malloc(sizeof *m);
    if (!m)
        return -ENOMEM;
    *m = (struct mail){NULL, fn, data};
    uv_mutex_lock(&mb->lock);
    if (mb->closed) {
        uv_mutex_unlock(&mb->lock);
        free(m);
        return -ESHUTDOWN;
    }
    if (mb->tail)
        mb->tail->next = m;
    else
        mb->head = m;
    mb->tail = m;
    /* Under the lock, so close() cannot free the handle between the enqueue and
     * the doorbell. */
    uv_async_send(&mb->async);
    uv_mutex_unlock(&mb->lock);
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    srv_mailbox *mb = h->data;
    uv_mutex_destroy(&mb->lock);
    free(mb);
}

void srv_mailbox_close(srv_mailbox *mb)
{
    if (!mb)
        return;
    uv_mutex_lock(&mb->lock);
    mb->closed = true;
    uv_mutex_unlock(&mb->lock);
    drain(mb);
    uv_close((uv_handle_t *)&mb->async, on_closed);
}
