/* POST /v1/chat/completions (server/chat.c). Internal to server/. */
#ifndef MINICPMD_SERVER_CHAT_H
#define MINICPMD_SERVER_CHAT_H

#include "engine/gen.h"
#include "server/http.h"

struct srv_app;

int srv_h_chat_completions(srv_request *req, struct srv_response *resp);

/* The worker's emit callback (ctx = the srv_app): copies the event to the loop
 * thread through the app's mailbox. Worker thread. */
void srv_chat_emit(void *ctx, const struct eng_event *e);

/* SSE comment pings for streams that wrote nothing for a while. Loop thread,
 * from a periodic timer. */
void srv_chat_ping(struct srv_app *app);

#endif
