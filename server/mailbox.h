/* mailbox — how other threads hand work back to the loop thread.
 *
 * A mutex-protected FIFO of (function, data) items with a uv_async doorbell.
 * uv_async_send() coalesces wake-ups, so the loop side drains the whole queue on
 * every wake. The engine worker posts token events and final statuses here; the
 * model loader posts its result.
 */
#ifndef MINICPMD_SERVER_MAILBOX_H
#define MINICPMD_SERVER_MAILBOX_H

#include <uv.h>

typedef struct srv_mailbox srv_mailbox;
typedef void (*srv_mail_fn)(void *data);

/* Loop thread. Returns NULL on failure. */
srv_mailbox *srv_mailbox_new(uv_loop_t *loop);

/* Any thread. `fn(data)` runs later on the loop thread, in posting order.
 * Returns 0, or -ENOMEM (fn is then never called) or -ESHUTDOWN after close. */
int srv_mailbox_post(srv_mailbox *mb, srv_mail_fn fn, void *data);

/* Loop thread. Runs what is still queued, refuses further posts, and frees the
 * mailbox once libuv has closed its handle. */
void srv_mailbox_close(srv_mailbox *mb);

#endif
