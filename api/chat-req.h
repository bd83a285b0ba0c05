/* api/chat-req — POST /v1/chat/completions: the request body, validated.
 *
 * api_chat_req_parse() checks every field minicpmd acts on against OpenAI's
 * contract and turns them into what the worker needs: the sampler knobs (struct
 * eng_sampling, on top of the pack's defaults), the generation budget, the stop
 * strings, and what the chat template and the output parser must see. A field of
 * the wrong type or out of range is refused with 400 invalid_request_error and
 * `param` naming it exactly as OpenAI does ("temperature", "stop[1]",
 * "logit_bias.123", "messages[2].content[0].type"). Unknown fields are ignored. An
 * optional field given as null is the same as absent (the SDKs send null for
 * Optional[…] = None; OpenAI accepts it).
 *
 * Pure: no sockets, no devices, no globals. Any thread.
 */
#ifndef MINICPMD_API_CHAT_REQ_H
#define MINICPMD_API_CHAT_REQ_H

#include "api/api.h"
#include "api/text.h"            /* struct api_err */
#include "engine/template.h"
#include "engine/gen.h"
#include "util/defaults.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define API_CHAT_MAX_TOOLS 128       /* OpenAI: up to 128 functions */

/* What the request is checked against. */
struct api_chat_limits {
    int32_t n_vocab;                        /* logit_bias ids must be < n_vocab (> 0) */
    const struct eng_sampling *defaults;    /* the pack's (eng_sampling_defaults), or NULL
                                             * for neutral knobs; copied, not kept */
    int32_t max_tokens;                     /* the pack's default answer length
                                             * (eng_max_new_tokens); 0: none */
    bool template_only;                     /* /apply-template: `model` may be absent */
    enum eng_thinking thinking;             /* the daemon's default (--thinking): UNSET is
                                             * auto, the template's own */
    const struct eng_gram_limits *grammar;  /* what a grammar may cost; NULL: the
                                             * defaults. Copied */
    bool defer_grammar;                     /* leave compiling the grammar to
                                             * api_chat_req_grammar() (off the loop) */
};

/* Where a request's grammar comes from (api/chat-req-format.c). */
enum api_gram_kind {
    API_GRAM_NONE = 0,
    API_GRAM_SCHEMA,    /* a JSON Schema (json: the schema, NULL: any JSON object) */
    API_GRAM_TOOLS,     /* the tools' calls (json: the tools) */
    API_GRAM_GBNF,      /* json: the GBNF string */
};

struct api_gram_src {
    enum api_gram_kind kind;
    const json_t *json;         /* borrowed from the body */
    const char *param;          /* the field a refusal names */
    int max_calls;              /* TOOLS: eng_gram_from_tools' */
    struct eng_gram_limits lim;
};

enum api_tool_choice {
    API_TOOL_CHOICE_NONE = 0,   /* "none", or no tools: tool-call markup is content */
    API_TOOL_CHOICE_AUTO,       /* "auto" (the default with tools) */
    API_TOOL_CHOICE_REQUIRED,   /* "required": the model should call one or more tools */
    API_TOOL_CHOICE_FUNCTION,   /* {"type":"function","function":{"name":…}} */
};

enum api_response_format {
    API_FORMAT_TEXT = 0,        /* absent, or {"type":"text"} */
    API_FORMAT_JSON_OBJECT,
    API_FORMAT_JSON_SCHEMA,
};

struct api_chat_stop {
    const char *text;           /* borrowed from the body; may hold NUL bytes, matched
                                   as bytes (kept whole, by length) */
    size_t len;                 /* >= 1; all of a request's <= UT_MAX_STOP_BYTES */
};

/* A parsed request. Created by api_chat_req_parse(), freed by api_chat_req_free().
 * Everything is read-only for the caller; strings and JSON borrow from the body,
 * which the request holds a reference to, so they live as long as the request. */
struct api_chat_req {
    const char *model;          /* as given (NULL only with template_only); see
                                   api_chat_req_check_model() */
    bool stream;
    bool include_usage;         /* stream_options.include_usage */
    bool raw;                   /* a raw prompt (/v1/completions, Ollama raw): no chat
                                   template, no output parser, all text is content */

    /* max_completion_tokens, else max_tokens (>= 1), else the pack's default
     * (api_chat_limits.max_tokens); 0 when that is 0 or the request gave -1 (generate
     * until a stop or the end of the context). Not clamped: see api_chat_req_budget(). */
    int32_t max_tokens;

    /* The pack's defaults with the request's temperature, top_p, top_k, min_p,
     * repetition_penalty, presence/frequency_penalty, logit_bias and seed on top.
     * `sampling.bias` points into this request (n_bias entries, ascending ids, each
     * once: of "7" and "007" the later one counts). */
    struct eng_sampling sampling;
    bool has_seed;              /* false: sampling.seed is a fresh random number */
    int n;                      /* choices, 1 .. UT_MAX_CHOICES; choice i samples with
                                   sampling.seed + i */

    struct api_chat_stop stop[UT_MAX_STOP];
    int n_stop;

    bool logprobs;
    int top_logprobs;           /* 0..20; 0 unless logprobs */
    bool prompt_logprobs;       /* completions' echo with logprobs: the prompt scored */
    bool prompt_only;           /* completions' echo with max_tokens 0: no generation */

    enum api_tool_choice tool_choice;
    const char *tool_choice_name;   /* API_TOOL_CHOICE_FUNCTION: the function's name */
    /* The tools the output parser recognises (eng_outparse_new's `tools`): the
     * request's tools; only the named one for a named tool_choice; NULL with no
     * tools or tool_choice "none". */
    const json_t *parser_tools;

    const char *user;           /* or NULL */

    /* Structured outputs (chat-req-format.c): what every token must keep the output
     * in — the tool calls of a "required" or named tool_choice, else a JSON
     * response_format, else the `grammar` field — or NULL. Owned by the request;
     * eng_gen_params.grammar takes its own reference. With thinking on it applies
     * after "</think>". */
    eng_grammar *grammar;
    enum api_response_format response_format;
    bool parallel_tool_calls;   /* default true */

    /* What the chat template is given (messages, the tools parser_tools names,
     * add_generation_prompt, enable_thinking), read once: eng_prompt_build() and
     * /apply-template render exactly this. Borrows from the body. */
    struct eng_chat_params chat;

    /* private */
    struct api_gram_src gsrc_;  /* the grammar still to compile */
    json_t *body_;
    json_t *parser_tools_;
    struct eng_logit_bias *bias_;
};

/* Validate `body` (a JSON object: api_parse_object()) and build the request.
 * Returns 0 and *out (the caller frees it with api_chat_req_free()), or -EINVAL with
 * `bad` filled: API_ERR_BAD_REQUEST with the param and a one-line message, or
 * API_ERR_INTERNAL (-ENOMEM) when out of memory. `body` is referenced, not copied. The
 * model is only checked to be a string here: api_chat_req_check_model() decides
 * whether it is served. */
int api_chat_req_parse(const json_t *body, const struct api_chat_limits *lim,
                       struct api_chat_req **out, struct api_err *bad);
void api_chat_req_free(struct api_chat_req *r);   /* accepts NULL */

/* Compile the grammar the parse left to compile (api_chat_limits.defer_grammar):
 * the schema or tools to GBNF, the GBNF under the limits, and with `v` (may be
 * NULL) its first step checked against them, so a grammar over a limit is refused
 * before it is queued. Returns 0 (r->grammar set, or none was asked), or -EINVAL
 * with `bad`: a 400 naming the field and the limit or the keyword, or
 * API_ERR_INTERNAL when out of memory. Any thread, once; the server calls it on
 * the thread pool, so a large grammar never holds the event loop. */
int api_chat_req_grammar(struct api_chat_req *r, const eng_gram_vocab *v,
                         struct api_err *bad);
/* Whether a grammar waits for api_chat_req_grammar(). */
bool api_chat_req_grammar_pending(const struct api_chat_req *r);
/* The field the request's grammar came from ("grammar", "tools",
 * "response_format.json_schema.schema"...), or NULL when it has none. */
const char *api_chat_req_grammar_param(const struct api_chat_req *r);

/* Whether `model` names the served model: its id or one of `n_aliases` aliases,
 * compared exactly. Returns 0, or -ENOENT with `bad` = API_ERR_MODEL_NOT_FOUND (404,
 * param "model"). Never falls back to the served model. */
int api_chat_req_check_model(const char *model, const char *served_id,
                             const char *const *aliases, size_t n_aliases,
                             struct api_err *bad);

/* The number of tokens to generate once the prompt is known: the request's
 * max_tokens clamped to what is left of the context (n_ctx - n_prompt), or all of
 * it when none was asked. Returns that (>= 1), or -ERANGE when the prompt leaves no room
 * for a single token: answer api_context_length_body(n_ctx, n_prompt,
 * r->max_tokens) with status 400, in both modes (api_chat_refuse). */
int32_t api_chat_req_budget(const struct api_chat_req *r, int32_t n_prompt, int32_t n_ctx);

#endif
