/* json-util — api/'s shared JSON helpers, internal to api/: refusing a field with
 * OpenAI's wording and its JSON path, reading one field of a request body, building
 * the bodies the other surfaces translate to, and the checks api_chat_req_parse()
 * calls in turn (implemented in chat-req*.c). The request parsers of every surface
 * (chat-req*.c, completions.c, ollama.c, responses.c) include it; nothing outside
 * api/ does. */
#ifndef MINICPMD_API_JSON_UTIL_H
#define MINICPMD_API_JSON_UTIL_H

#include "api/chat-req.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* ---- refusing (chat-req.c) ------------------------------------------------- */

/* OpenAI's refusal of an array `param` longer than `max`; 0 when it is not. */
int api__check_max_items(const json_t *arr, const char *param, size_t max,
                         struct api_err *bad);

/* `bad` = 400 invalid_request_error for `param` (NULL: none), the message printed
 * from `fmt` and cut to whole UTF-8 characters on one line. Returns -EINVAL, so checks
 * end in `return api__refuse(...)`. */
int api__refuse(struct api_err *bad, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* api__refuse() with OpenAI's "Invalid type for '<param>': expected <expected>,
 * but got <the JSON type of v> instead." */
int api__wrong_type(struct api_err *bad, const char *param, const char *expected,
                    const json_t *v);

/* Print a JSON path ("messages[2].content") into p[size] for `param`. */
void api__path(char *p, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A client string quoted in a message: at most ~40 bytes, cut at a character. */
struct quote {
    char s[64];
};

struct quote api__quoted(const char *s);

/* ---- reading one field (chat-req.c) ------------------------------------------ */

/* The field, or NULL when absent or null. */
const json_t *api__opt(const json_t *obj, const char *key);

/* obj[key] into *out when given (absent or null leaves *out alone); refused as
 * `param` when it has another type. */
int api__get_bool(const json_t *obj, const char *key, const char *param, bool *out,
                  struct api_err *bad);
int api__get_string(const json_t *obj, const char *key, const char *param, const char **out,
                    struct api_err *bad);

/* A token budget (max_tokens and its kin): >= 1, or -1 meaning until the context
 * ends, given back as 0; 0 is refused. *present says whether it was given. */
int api__get_max_tokens(const json_t *obj, const char *key, long long *out, bool *present,
                        struct api_err *bad);

/* reasoning_effort's value `v` (NULL or null: absent) into *out: "none"/"minimal"
 * OFF, "low"/"medium"/"high" ON; anything else refused as `param`. */
int api__reasoning_effort(const json_t *v, const char *param, enum eng_thinking *out,
                          struct api_err *bad);

/* Whether v is a string of exactly the bytes of s (no NUL inside). */
bool api__str_is(const json_t *v, const char *s);

/* get_integer for the other surfaces: an integer in [lo, hi] (5.0 counts as 5). */
int api__get_int(const json_t *obj, const char *key, long long lo, long long hi, long long *out,
                 bool *present, struct api_err *bad);

/* ---- for the other surfaces (api/completions.c, api/ollama.c, api/responses.c) -- */

/* Building the translated bodies: `bad` = 500 out of memory and -ENOMEM when a
 * value could not be made or stored (v NULL included); 0 otherwise. set and append
 * steal v; copy stores a deep copy of v, and nothing when v is NULL. */
int api__oom(struct api_err *bad);
int api__set(json_t *o, const char *key, json_t *v, struct api_err *bad);
int api__copy(json_t *o, const char *key, const json_t *v, struct api_err *bad);
int api__append(json_t *a, json_t *v, struct api_err *bad);

/* A request on `body` (referenced) with the pack's sampling defaults and the
 * daemon's thinking default; NULL (bad = out of memory) when out of memory. Free it
 * with api_chat_req_free(). */
struct api_chat_req *api__req_new(const json_t *body, const struct api_chat_limits *lim,
                                  struct api_err *bad);

/* The fields every OpenAI-shaped surface shares with chat, checked as chat checks
 * them: stream and stream_options, the sampling knobs and seed, stop, logit_bias,
 * user. */
int api__check_generation(const json_t *body, const struct api_chat_limits *lim,
                          struct api_chat_req *r, struct api_err *bad);

/* ---- the checks, in api_chat_req_parse()'s order ----------------------------- */

/* chat-req-msgs.c: "messages", required, a non-empty array of valid messages. */
int api__check_messages(const json_t *body, struct api_err *bad);

/* chat-req-tools.c: `tools`, the body's "tools" given and not null. */
int api__check_tools(const json_t *tools, struct api_err *bad);

/* chat-req-tools.c: "tool_choice" against the already checked tools; sets
 * r->tool_choice (and its name), and *named to the named function's index. */
int api__check_tool_choice(const json_t *body, const json_t *tools, struct api_chat_req *r,
                           size_t *named, struct api_err *bad);

/* chat-req-format.c: response_format, parallel_tool_calls and grammar, after
 * tool_choice: sets r->grammar (required / named tool_choice, a JSON response_format
 * or a GBNF grammar) and r->response_format. */
int api__check_format(const json_t *body, const json_t *tools, struct api_chat_req *r,
                      const struct api_chat_limits *lim,
                      struct api_err *bad);

#endif
