/* POST /v1/chat/completions (server/chat.c). Internal to server/. */
#ifndef MINICPMD_SERVER_CHAT_H
#define MINICPMD_SERVER_CHAT_H

#include "engine/gen.h"
#include "server/http.h"

#include "api/chat-req.h"
#include "api/chat-run.h"

struct srv_app;

int srv_h_chat_completions(srv_request *req, struct srv_response *resp);

/* What a surface other than chat completions (/v1/completions, Ollama, Responses)
 * gives the one generation path: its framing, and for a raw prompt the text or
 * token ids (req->raw). Copied; the surface's `format.ctx` is freed with
 * free_ctx(ctx) when the request is done. Every failure, refusals before
 * generation included, is answered through format->error in the surface's shape. */
struct srv_chat_surface {
    const struct api_chat_format *format;  /* NULL: OpenAI's chat.completion */
    const char *content_type;   /* of a stream; NULL: text/event-stream */
    const char *ping;           /* keep-alive frame; NULL: none (NDJSON has no comments) */
    const char *text;           /* raw prompt text (tokenized with specials, the
                                   tokenizer's add_special too), borrowed from creq's
                                   body; or */
    const int32_t *ids;         /* raw prompt ids (copied) */
    size_t text_len, n_ids;
    void (*free_ctx)(void *ctx);
    /* Several raw prompts (a completions list; not streamed): choice i answers
     * more[i - 1] (text borrowed as `text` is, ids copied) framed by formats[i]
     * (formats[0] is `format`; each freed with free_ctx), and `merge` renders the
     * choices' results as one answer. n_prompts 0 or 1: the one prompt above. */
    int n_prompts;
    const struct srv_raw_prompt *more;
    const struct api_chat_format *const *formats;
    char *(*merge)(const struct api_chat_format *const *formats,
                   const struct api_chat_ident *ci,
                   const struct api_chat_result *const *results, int n);
};

struct srv_raw_prompt {
    const char *text;
    size_t text_len;
    const int32_t *ids;
    size_t n_ids;
};

/* Start one generation for a parsed request (owned from now on, also on failure)
 * on behalf of `req`; `surf` NULL is OpenAI chat. Always answers (now in `resp`,
 * or later); returns 0. The handler checked the model already. */
int srv_chat_begin(srv_request *req, struct srv_response *resp, struct api_chat_req *creq,
                   const struct srv_chat_surface *surf);

/* The worker's emit callback (ctx = the srv_app): copies the event to the loop
 * thread through the app's mailbox. Worker thread. */
void srv_chat_emit(void *ctx, const struct eng_event *e);

/* SSE comment pings for streams that wrote nothing for a while. Loop thread,
 * from a periodic timer. */
void srv_chat_ping(struct srv_app *app);

#endif
