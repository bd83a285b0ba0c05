/* api/completions — POST /v1/completions (OpenAI's legacy text completions).
 *
 * The request becomes a raw-prompt struct api_chat_req (no chat template, no
 * output parser) that the one generation path runs (server/chat.c, api/chat-run.c);
 * this file only reads the request and frames the answer as text_completion
 * objects: `choices[0].text`, legacy `logprobs` ({tokens, token_logprobs,
 * top_logprobs, text_offset}), `echo`, SSE chunks of the same object. Anchor:
 * OpenAI's API reference "Completions" (openai-openapi CreateCompletionRequest /
 * Completion) and the openai-node SDK's types.
 *
 * Supported: prompt (a string, or token ids; either also as an array of one),
 * max_tokens (default 16, as OpenAI; -1 until the context ends), temperature,
 * top_p, stop, seed, presence/frequency_penalty, logit_bias, logprobs (0..5), echo,
 * stream, stream_options.include_usage, n and best_of (only 1), user, and the
 * extras chat takes (top_k, min_p, repetition_penalty). Refused with 400: suffix
 * (no fill-in-the-middle), more than one prompt, echo with logprobs (the prompt's
 * own logprobs are not computed).
 *
 * Pure: no sockets, no globals. Any thread; one request's format on one thread. */
#ifndef MINICPMD_API_COMPLETIONS_H
#define MINICPMD_API_COMPLETIONS_H

#include "api/chat-req.h"
#include "api/chat-run.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define API_COMPLETION_MAX_LOGPROBS 5   /* OpenAI's limit for `logprobs` */

struct api_completion {
    struct api_chat_req *req;   /* raw; owned (api_completion_free) */
    const char *text;           /* the prompt text (borrowed from the body), or NULL */
    size_t text_len;
    int32_t *ids;               /* or the prompt's token ids (owned) */
    size_t n_ids;
    bool echo;
};

/* Validate `body` into *out. 0, or -EINVAL with `bad` (400 with `param`, or 500
 * when out of memory). Token ids are checked against lim->n_vocab. */
int api_completion_parse(const json_t *body, const struct api_chat_limits *lim,
                         struct api_completion **out, struct api_err *bad);
void api_completion_free(struct api_completion *c);   /* accepts NULL */

/* The text_completion framing of one request. `echo` (copied; NULL: none) is the
 * prompt's text to put first. NULL when out of memory; free the format with
 * api_completion_format_free(format->ctx). */
struct api_chat_format *api_completion_format_new(const char *echo, size_t echo_len,
                                                  bool include_usage);
void api_completion_format_free(void *ctx);

#endif
