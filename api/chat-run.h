/* api/chat-run — one chat completion's answer, built from the engine's events.
 *
 * The state machine of POST /v1/chat/completions after the request was accepted:
 * generated text goes through the output parser (reasoning / content / tool
 * calls, engine/outparse.h) into SSE chunks (stream) or one accumulated message
 * (non-stream), with logprobs, usage, timings and the finish reason; a failure
 * becomes a struct api_err (api/error.h) that the surface's framing renders.
 * server/ feeds it the worker's events (on the loop thread) and drains it
 * through a sink: it never builds an answer itself.
 *
 * One thread at a time (the loop thread). */
#ifndef MINICPMD_API_CHAT_RUN_H
#define MINICPMD_API_CHAT_RUN_H

#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "engine/gen.h"
#include "engine/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>

/* How a surface frames a run's output: OpenAI chat (the default), text
 * completions, Ollama, Responses. Every callback returns a malloc'd string the
 * run hands to the sink (one or more frames of a stream, or a whole body), or NULL
 * for nothing (a body: out of memory). `ctx` is the surface's per-request state. */
struct api_chat_format {
    /* A stream's first frame(s), when the engine took the request. */
    char *(*start)(void *ctx, const struct api_chat_ident *id);
    /* The frame of one delta (content, reasoning, a tool call, logprobs). */
    char *(*delta)(void *ctx, const struct api_chat_ident *id, const struct api_chat_delta *d);
    /* The last frames of a stream that ended well (finish, usage, end marker). */
    char *(*end)(void *ctx, const struct api_chat_ident *id, enum api_finish_reason fr,
                 const struct api_usage *u, const struct api_timings *t);
    /* The answer of a non-streamed request. */
    char *(*body)(void *ctx, const struct api_chat_ident *id, const struct api_chat_result *r);
    /* A failure in the surface's shape (api/error.h): with `stream`, the last
     * frame(s) of a stream that has started; without, the body of a whole answer
     * (the caller sends it with api_err_status() and api_err_retry_after()). */
    char *(*error)(void *ctx, const struct api_err *e, bool stream);
    void *ctx;
    /* (optional) Before end or body: the stop string that ended the output, as its
     * index in the request's stop list (for a surface that names it). */
    void (*stopped)(void *ctx, int stop_index);
};

/* f->error(), or OpenAI chat's rendering when `f` is NULL. NULL: out of memory. */
char *api_chat_format_error(const struct api_chat_format *f, const struct api_err *e,
                            bool stream);

/* Where the output goes. Ownership of every string passes to the sink. */
struct api_chat_sink {
    /* Streamed requests: one SSE frame to write, in order. */
    void (*frame)(void *ctx, char *frame);
    /* The answer of a non-streamed request (an error's status and retry_after from
     * api_err_status() and api_err_retry_after(): static or NULL), or of a streamed
     * one that failed before its first chunk.
     * Called at most once. `body` NULL means out of memory. */
    void (*answer)(void *ctx, int status, char *body, const char *retry_after);
    /* Optional, non-streamed requests: the result itself instead of a rendered
     * body, for a caller that renders several runs' choices as one answer (OpenAI
     * chat's n > 1). Valid until the run is freed. Failures still go to answer. */
    void (*result)(void *ctx, const struct api_chat_result *r);
    void *ctx;
    const struct api_chat_format *format;   /* NULL: OpenAI's chat.completion */
};

/* OpenAI's chat framing for one choice of a request with n > 1 (its ident's index
 * set): its stream ends with its final chunk only, and the usage it reports is
 * written to *usage; the caller sends api_chat_stream_tail after the last choice.
 * Not streamed, the choices' results go to the sink's `result`. */
struct api_chat_format api_chat_choice_format(struct api_usage *usage);

typedef struct api_chat_run api_chat_run;

/* A run for `req` (borrowed: it must outlive the run), whose prompt ends inside
 * <think> when `in_think`. `tok` names the logprobs' tokens. NULL when out of
 * memory. */
api_chat_run *api_chat_run_new(const struct api_chat_req *req, const struct api_chat_ident *id,
                               const eng_tokenizer *tok, bool in_think,
                               const struct api_chat_sink *sink);
void api_chat_run_free(api_chat_run *c);   /* accepts NULL */

/* The request was accepted by the engine: a stream sends its first chunk. */
void api_chat_run_start(api_chat_run *c);

/* One generated token; `text` is its text (token.text copied, text_len bytes). */
void api_chat_run_token(api_chat_run *c, const struct eng_token_event *t, const char *text);

/* The final events: everything left goes out, then the end of the stream or the
 * answer. `text` is done.text copied. The caller ends the stream afterwards. */
void api_chat_run_done(api_chat_run *c, const struct eng_done_event *d, const char *text);
void api_chat_run_error(api_chat_run *c, const struct eng_error_event *e);

/* The worker's device error as the API reports it: layer_first/layer_last are
 * layer_begin and layer_end - 1, except for the head runlist (no layers), which is
 * `head` with no layer range. */
void api_chat_device_error(const struct eng_device_error *d, bool retryable,
                           struct api_device_error *out);

/* The answer to a request the engine did not take: eng_engine_submit()'s -EBUSY
 * (queue_size is the limit) or -ESHUTDOWN, or a prompt that leaves no room in the
 * context (-ERANGE, with n_ctx and n_prompt). Through the sink's answer. */
void api_chat_refuse(const struct api_chat_req *req, int rc, int queue_size, int n_ctx,
                     int n_prompt, const struct api_chat_sink *sink);

#endif
