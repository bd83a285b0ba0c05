/* api/chat-resp — what POST /v1/chat/completions answers: the chat.completion
 * object, the chat.completion.chunk events of a stream and their SSE framing, and
 * the errors only generation produces (context overflow, a busy queue, a device
 * fault).
 *
 * Shapes follow OpenAI's (openai-openapi ChatCompletion / ChatCompletionChunk),
 * plus two fields OpenAI does not have and clients of local servers read:
 * message.reasoning_content (Open WebUI, the reasoning) and a llama.cpp-style
 * `timings` object (Open WebUI's tokens/s).
 *
 * Pure: builders take plain structs, return new JSON (the caller owns the
 * reference) or malloc'd strings (the caller frees them); NULL only when out of
 * memory. Any thread.
 */
#ifndef MINICPMD_API_CHAT_RESP_H
#define MINICPMD_API_CHAT_RESP_H

#include "api/api.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- identity of one completion -------------------------------------------- */

/* The same id, created and model on the response or on every chunk of a stream. */
struct api_chat_ident {
    char id[48];                /* "chatcmpl-" + 32 random [0-9A-Za-z] */
    int64_t created;            /* unix seconds */
    const char *model;          /* borrowed: must outlive the ident */
    char fingerprint[96];       /* system_fingerprint: "minicpmd-<version>-<device>" */
    bool include_usage;         /* stream_options.include_usage: every chunk but the
                                 * usage one carries "usage": null, as OpenAI's do */
    int index;                  /* the choice's index (`n` > 1), 0 by default */
    int32_t prompt_tokens;      /* the prompt's length once it is known (a stream's
                                 * start has it), else 0 */
};

/* Fresh id, created = now. `version` e.g. MINICPMD_VERSION, `device` the serving
 * device's name ("xrt", "cpu"); either may be NULL ("unknown"). Characters other
 * than [A-Za-z0-9._+-] in them become '_'. */
void api_chat_ident_init(struct api_chat_ident *ci, const char *model, const char *version,
                         const char *device, bool include_usage);

/* n random [0-9A-Za-z] into out[0..n), NUL-terminated at out[n]: the random part of
 * every id (chat, completions "cmpl-", Responses, tool calls). */
void api_random_alnum(char *out, size_t n);

/* A tool call id: "call_" + 24 random [0-9A-Za-z], NUL-terminated in out[30]. */
#define API_TOOL_CALL_ID_SIZE 30
void api_tool_call_id(char out[API_TOOL_CALL_ID_SIZE]);

/* ---- pieces ------------------------------------------------------------------ */

enum api_finish_reason {
    API_FINISH_STOP = 0,        /* end-of-generation token or a stop string */
    API_FINISH_LENGTH,          /* max_tokens or the end of the context */
    API_FINISH_TOOL_CALLS,      /* the output held tool calls */
};
const char *api_finish_reason_name(enum api_finish_reason f);   /* "stop", … */

struct api_tool_call {
    const char *id;             /* "call_…" (api_tool_call_id); NULL: one is made */
    const char *name;
    const char *arguments;      /* a JSON object as a string, e.g. {"city":"Paris"} */
    bool cut;                   /* max_tokens (or the output's end) cut it: arguments are
                                   the JSON text so far, left open (docs/api.md) */
};

/* One generated token for `logprobs`. Token texts are the token's bytes, which
 * may be part of a UTF-8 character: "token" is them with invalid sequences as
 * U+FFFD, "bytes" is them exactly (what OpenAI's field is for). A logprob that is
 * not finite is written as -9999.0, OpenAI's "very unlikely". */
struct api_top_logprob {
    const char *token;
    size_t len;
    float logprob;
};

struct api_token_logprob {
    const char *token;
    size_t len;
    float logprob;
    const struct api_top_logprob *top;   /* the request's top_logprobs alternatives */
    int n_top;
};

struct api_usage {
    int32_t prompt_tokens;
    int32_t completion_tokens;  /* every generated token, reasoning included */
    int32_t reasoning_tokens;   /* those inside <think>…</think> */
    int32_t cached_tokens;      /* prompt tokens reused from the KV cache */
};

/* llama.cpp's `timings` (result_timings::to_json): counts and wall times; the
 * per-token and per-second figures are derived (0 when a count or time is 0). */
struct api_timings {
    int32_t cache_n;            /* prompt tokens reused, not computed */
    int32_t prompt_n;           /* prompt tokens computed */
    double prompt_ms;
    int32_t predicted_n;        /* tokens generated */
    double predicted_ms;
    /* where the prompt ran (xrt's --npu-prefill): the runlists' own time on the
     * device and on the host CPU; both 0 = not split (the keys are left out) */
    double prompt_device_ms, prompt_host_ms;
};
json_t *api_timings_json(const struct api_timings *t);

/* ---- the non-streaming answer ------------------------------------------------- */

struct api_chat_result {
    const char *content;        /* UTF-8; NULL = "" (null when there are tool calls
                                 * and no text) */
    const char *reasoning;      /* message.reasoning_content; NULL or "": omitted */
    const struct api_tool_call *tool_calls;
    size_t n_tool_calls;
    enum api_finish_reason finish;
    bool logprobs;              /* asked: choices[0].logprobs = {"content":[…]}; else null */
    const struct api_token_logprob *tokens;
    size_t n_tokens;
    struct api_usage usage;     /* with n > 1: of every choice (api_usage_add_choice) */
    const struct api_timings *timings;   /* NULL: no "timings" */
    /* OpenAI chat's n > 1: choices 1 .. n_others, after this one (choice 0); only
     * their choice fields are read. Other surfaces have one choice. */
    const struct api_chat_result *others;
    size_t n_others;
};

/* Counts one more choice of the same prompt into `sum`, as OpenAI counts n > 1:
 * the prompt once, completion and reasoning tokens summed. */
void api_usage_add_choice(struct api_usage *sum, const struct api_usage *choice);

/* The chat.completion object / its compact JSON text: every choice of `r` in index
 * order (r itself ci->index, its others the next ones), r's usage and timings. */
json_t *api_chat_completion_json(const struct api_chat_ident *ci, const struct api_chat_result *r);

/* The end of a stream of n > 1 choices, after each choice's final chunk: the usage
 * chunk (with include_usage; `u` summed as above) and [DONE]. */
char *api_chat_stream_tail(const struct api_chat_ident *ci, const struct api_usage *u);
char *api_chat_completion_body(const struct api_chat_ident *ci, const struct api_chat_result *r);

/* ---- streaming: chat.completion.chunk ----------------------------------------- *
 *
 * The order a stream follows (OpenAI's):
 *   api_chat_chunk_first()                  delta {role:"assistant", content:""}
 *   api_chat_chunk_delta() …                content / reasoning_content / tool_calls
 *   api_chat_chunk_final(finish, t)         delta {}, finish_reason
 *   api_chat_chunk_usage(u, t)              choices [], usage  (include_usage only)
 *   API_SSE_DONE
 * `timings` (NULL: none) must be on the last chunk before [DONE] (llama.cpp's
 * place, where Open WebUI picks it up): the caller gives it to the final chunk
 * and, with include_usage, to the usage chunk as well. Each builder returns a new
 * object; frame it with api_sse_event(). */

/* A tool call's part in a delta. The first delta of a call has id and name (and
 * "type":"function"); later ones only argument text to append. minicpmd's parser
 * emits whole calls, so one delta with id, name and all the arguments is normal. */
struct api_tool_call_delta {
    int index;                  /* 0, 1, … the call's position in the message */
    const char *id;             /* first delta: "call_…" (NULL: one is made); later: NULL */
    const char *name;           /* first delta; later: NULL */
    const char *arguments;      /* argument JSON text, or a piece of it; NULL = "" */
    bool cut;                   /* the call was cut (api_tool_call.cut) */
};

struct api_chat_delta {
    const char *content;        /* NULL: no "content" key */
    const char *reasoning;      /* NULL: no "reasoning_content" key */
    const struct api_tool_call_delta *tool_calls;
    size_t n_tool_calls;
    bool logprobs;              /* asked: "logprobs":{"content":[tokens]}; else null */
    const struct api_token_logprob *tokens;   /* the tokens behind this delta */
    size_t n_tokens;
};

json_t *api_chat_chunk_first(const struct api_chat_ident *ci);
json_t *api_chat_chunk_delta(const struct api_chat_ident *ci, const struct api_chat_delta *d);
json_t *api_chat_chunk_final(const struct api_chat_ident *ci, enum api_finish_reason finish,
                             const struct api_timings *timings);
json_t *api_chat_chunk_usage(const struct api_chat_ident *ci, const struct api_usage *u,
                             const struct api_timings *timings);

/* ---- SSE framing --------------------------------------------------------------- */

#define API_SSE_DONE "data: [DONE]\n\n"
#define API_SSE_PING ": ping\n\n"   /* a comment: the OpenAI SDKs and Open WebUI skip it */

/* "data: <compact JSON>\n\n". Steals `obj` (NULL in, NULL out, so builders chain:
 * api_sse_event(api_chat_chunk_first(ci))). */
char *api_sse_event(json_t *obj);
/* `data` as one event: each line prefixed "data: ", then a blank line. */
char *api_sse_frame(const char *data);
/* api_sse_frame(api_err_body(e)): OpenAI chat's and completions' failure event. An
 * error after the stream started is this and then the end of the stream, with no
 * [DONE] (llama.cpp; the OpenAI SDKs raise APIError on a data object with an
 * "error" key). */
char *api_err_sse(const struct api_err *e);

/* ---- errors generation produces ------------------------------------------------- */

/* 400 context_length_exceeded, param "messages", OpenAI's wording with the numbers:
 * "This model's maximum context length is N tokens. However, your messages
 * resulted in P tokens. Please reduce the length of the messages." or, when a
 * completion length was asked (n_completion > 0), "… However, you requested M
 * tokens (P in the messages, C in the completion). Please reduce the length of the
 * messages or completion." */
void api_context_length_err(struct api_err *e, int32_t n_ctx, int32_t n_prompt,
                            int32_t n_completion);
char *api_context_length_body(int32_t n_ctx, int32_t n_prompt, int32_t n_completion);

/* 503 server_busy: "the server is busy: N requests are already waiting; retry
 * later". Send it with Retry-After. */
void api_server_busy_err(struct api_err *e, int queue_limit);
char *api_server_busy_body(int queue_limit);

/* A device fault's OpenAI body: api_err_device() then api_err_json() / _body()
 * (api/error.h). Status: 503 + Retry-After when the device was reset and serves
 * again, 500 when it could not be reset. */
json_t *api_device_error_json(const struct api_device_error *e);
char *api_device_error_body(const struct api_device_error *e);

/* ---- pieces the other surfaces (completions, Ollama, Responses) share --------------- */

/* A JSON string of n bytes, invalid UTF-8 as U+FFFD. */
json_t *api_text_json(const char *s, size_t n);
/* OpenAI's usage object (prompt/completion/total tokens and their details). */
json_t *api_usage_json(const struct api_usage *u);
/* A logprob, -9999.0 when it is not finite. */
json_t *api_logprob_json(float lp);
/* {id, object, created, model, system_fingerprint}; `id` NULL: ci->id. */
json_t *api_head_json(const struct api_chat_ident *ci, const char *id, const char *object);
/* Compact JSON text of `o` (stolen; NULL in, NULL out), `suffix` appended (NULL: none). */
char *api_json_dump(json_t *o, const char *suffix);

#endif
