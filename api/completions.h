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
 * Supported: prompt (a string or token ids, or a list of up to
 * API_COMPLETION_MAX_PROMPTS of either: one choice per prompt, `index` its place,
 * not streamed), max_tokens (default 16, as OpenAI; -1 until the context ends; 0
 * with echo: the prompt alone), temperature, top_p, stop, seed,
 * presence/frequency_penalty, logit_bias, logprobs (0..5), echo (with logprobs the
 * prompt's tokens and their logprobs come first, the first token's null: the
 * prompt scored, engine/gen.h prompt_logprobs), stream,
 * stream_options.include_usage, n and best_of (only 1), user, the extras chat
 * takes (top_k, min_p, repetition_penalty) and chat's structured outputs
 * (response_format, grammar, llama.cpp's json_schema). Refused with 400: suffix (no
 * fill-in-the-middle), several prompts streamed, max_tokens 0 without echo.
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

#define API_COMPLETION_MAX_PROMPTS 8  /* prompts in one request (UT_MAX_CHOICES) */

struct api_completion_prompt {
    const char *text;           /* the prompt text (borrowed from the body), or NULL */
    size_t text_len;
    int32_t *ids;               /* or its token ids (owned) */
    size_t n_ids;
};

struct api_completion {
    struct api_chat_req *req;   /* raw; owned (api_completion_free) */
    /* `prompt`: one, or a list answered one choice each, in order */
    struct api_completion_prompt prompts[API_COMPLETION_MAX_PROMPTS];
    size_t n_prompts;
    /* the first prompt's text or ids again (borrowed from prompts[0]) */
    const char *text;
    size_t text_len;
    const int32_t *ids;
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
                                                  bool include_usage, int index,
                                                  bool echo_logprobs);

/* The answer to a list of n prompts: one text_completion whose choices are each
 * prompt's result r[i] framed by fmts[i] (its echo and index), in order, with ci's
 * head (fmts[0]'s id) and the usages summed; no timings. NULL: out of memory. */
char *api_completion_body_multi(const struct api_chat_format *const *fmts,
                                const struct api_chat_ident *ci,
                                const struct api_chat_result *const *r, int n);
void api_completion_format_free(void *ctx);

#endif
