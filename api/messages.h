/* api/messages — Anthropic's Messages API: POST /v1/messages and
 * POST /v1/messages/count_tokens (anchor: Anthropic's API reference "Messages",
 * "Streaming Messages", "Errors", and the official TypeScript SDK's types,
 * @anthropic-ai/sdk resources/messages/messages.d.ts).
 *
 * The request is translated into an OpenAI chat request body that api/chat-req
 * then checks as it checks every chat request (one set of rules, one generation
 * path); the Anthropic fields are checked here first, so a refusal names them as
 * Anthropic does:
 *  - system (a string or text blocks) as the first system message; messages with
 *    role user or assistant (or system), content a string or blocks: text;
 *    tool_use (assistant: a tool call, `input` an object); tool_result (user: a
 *    tool message, content a string or text blocks, is_error marked in the text);
 *    thinking (assistant: its reasoning; the signature is not checked). image,
 *    document and every other block are refused: this model reads text only.
 *  - max_tokens (required, >= 1), stop_sequences, temperature (0..1), top_p, top_k,
 *    metadata.user_id, stream;
 *  - tools (custom tools: name, description, input_schema; server tools are
 *    refused), tool_choice auto / any / tool / none with disable_parallel_tool_use
 *    (any and tool are enforced by the grammar as OpenAI's "required" and a named
 *    function are; with auto, at most one tool_use block is answered);
 *  - thinking: enabled (budget_tokens >= 1024 and < max_tokens, as Anthropic
 *    checks it) turns MiniCPM5's thinking on, disabled off, adaptive leaves the
 *    daemon's default. MiniCPM5 has no thinking budget of its own: the budget is
 *    checked, and max_tokens bounds the whole answer, thinking included.
 *  - output_config.format (json_schema) as a JSON response_format.
 * Other fields (cache_control, service_tier, container, …) are accepted and have no
 * effect.
 *
 * The answer is the Message object (id "msg_…", content blocks thinking / text /
 * tool_use, stop_reason end_turn / max_tokens / stop_sequence / tool_use /
 * model_context_window_exceeded, stop_sequence, usage), or the stream of its
 * events: message_start, per block content_block_start, content_block_delta
 * (text_delta, thinking_delta, input_json_delta) and content_block_stop, then
 * message_delta and message_stop; ping while waiting; an error event when it
 * fails after it began. Errors are Anthropic's {"type":"error","error":{"type",
 * "message"}}.
 *
 * Pure: no sockets, no globals. Any thread; one request's format on one thread. */
#ifndef MINICPMD_API_MESSAGES_H
#define MINICPMD_API_MESSAGES_H

#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "api/chat-run.h"

#include <jansson.h>
#include <stdbool.h>

/* Anthropic's checks on a thinking budget. */
#define API_MESSAGES_MIN_THINKING_BUDGET 1024

/* What the framing needs from the request besides the chat request. */
struct api_messages_opts {
    bool single_tool;           /* tool_choice auto with disable_parallel_tool_use */
};

/* The chat request body an Anthropic body means (*chat, new). `count_tokens`: the
 * body of /v1/messages/count_tokens (no max_tokens, nothing generated). Returns 0,
 * or -EINVAL / -ENOMEM with `bad` (400 naming the Anthropic field; 500 out of
 * memory). */
int api_messages_translate(const json_t *body, bool count_tokens, json_t **chat,
                           struct api_messages_opts *opts, struct api_err *bad);

/* A refusal of the translated chat request (api_chat_req_parse, the grammar, the
 * template) named by the Anthropic field the chat one came from, in `param` and
 * in the message's quoted mentions: response_format.json_schema.schema ->
 * output_config.format.schema, tools[i].function.parameters -> tools.i.input_schema,
 * stop -> stop_sequences, user -> metadata.user_id. */
void api_messages_rename(struct api_err *e);

/* The Message framing of one request: `req` (borrowed: it outlives every call but
 * the free) names the stop strings and max_tokens. NULL when out of memory; free
 * with api_messages_format_free(format->ctx). */
struct api_chat_format *api_messages_format_new(const struct api_chat_req *req,
                                                const struct api_messages_opts *opts);
void api_messages_format_free(void *ctx);

/* The SSE keep-alive of a stream: Anthropic's ping event. */
#define API_MESSAGES_PING "event: ping\ndata: {\"type\":\"ping\"}\n\n"

/* /v1/messages/count_tokens' answer: {"input_tokens": n}. */
char *api_messages_count_body(int64_t input_tokens);

/* ---- errors ------------------------------------------------------------------ */

/* Errors keep api/error.h's HTTP status (a full queue: 503 with Retry-After, where
 * Anthropic's own API says 529; its SDKs treat both as a retryable server error).
 * Anthropic's type for one: invalid_request_error, authentication_error,
 * permission_error, not_found_error, request_too_large, overloaded_error (a full
 * queue, a loading model), api_error (the rest). */
const char *api_messages_error_type(enum api_error e);
/* {"type":"error","error":{"type","message"}}; a device fault keeps its fields
 * beside them (ert_state, phase, chunk_index, …, as api_err_json() has them).
 * malloc'd; NULL when out of memory. The body of every error of the Anthropic
 * routes (srv_route.error_body), whoever refused. */
char *api_messages_err_body(const struct api_err *e);
/* The same as a stream's last event ("event: error\ndata: …\n\n"). */
char *api_messages_err_event(const struct api_err *e);

#endif
