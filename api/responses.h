/* api/responses — POST /v1/responses, stateless (anchor: OpenAI's API reference
 * "Responses" and "Streaming responses", and the openai-node SDK's types in
 * resources/responses/responses.d.ts).
 *
 * The request is translated into an OpenAI chat request body that api/chat-req
 * then checks as it checks every chat request (one set of rules, one generation
 * path): `input` (a string, or a list of messages — content a string or
 * input_text/output_text parts —, function_call and function_call_output items;
 * reasoning items are accepted and dropped), `instructions` (a system message
 * first), max_output_tokens, temperature, top_p, tools (type "function"),
 * tool_choice, text.format (text, json_object, json_schema: into response_format),
 * reasoning.effort (as reasoning_effort), stream, user, metadata, store (nothing is
 * stored: the response says store false), parallel_tool_calls, truncation.
 * Refused with 400: previous_response_id and conversation (nothing is stored:
 * send the whole conversation in `input`), background, images and files, tools of
 * other types.
 *
 * The answer is the Response object (output items: reasoning, message, function_call;
 * usage), or a stream of its documented events: response.created,
 * response.in_progress, then per item response.output_item.added,
 * (response.content_part.added, response.output_text.delta …, .done,
 * response.content_part.done | response.reasoning_text.delta …, .done |
 * response.function_call_arguments.delta, .done), response.output_item.done, and
 * last response.completed (or response.incomplete when max_output_tokens cut it).
 *
 * Pure: no sockets, no globals. Any thread; one request's format on one thread. */
#ifndef MINICPMD_API_RESPONSES_H
#define MINICPMD_API_RESPONSES_H

#include "api/chat-req.h"
#include "api/chat-run.h"

#include <jansson.h>

/* The chat request body `body` means (*chat, new), and the request's fields the
 * Response object repeats (*echo, new: instructions, max_output_tokens, model,
 * temperature, top_p, tools, tool_choice, text, reasoning, parallel_tool_calls,
 * metadata, user). 0, or -EINVAL with `bad` (400 naming the Responses field). */
int api_responses_translate(const json_t *body, json_t **chat, json_t **echo,
                            struct api_err *bad);

/* `e` (a refusal of the translated chat body) by the Responses request's names:
 * max_completion_tokens is max_output_tokens, response_format text.format,
 * reasoning_effort reasoning.effort, in `param` and quoted in the message. The
 * framing's errors are renamed so already. */
void api_responses_err_names(struct api_err *e);

/* The Response framing of one request; `echo` is referenced. NULL when out of
 * memory; free with api_responses_format_free(format->ctx). */
struct api_chat_format *api_responses_format_new(json_t *echo);
void api_responses_format_free(void *ctx);

#endif
