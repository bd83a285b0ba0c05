/* api/ollama — the Ollama API on minicpmd's port (anchor: Ollama's API reference, ollama/ollama's
 * api docs, and the `ollama` npm client's types, ollama-js src/interfaces.ts).
 *
 * POST /api/chat and /api/generate are translated into OpenAI request bodies
 * (chat, or for `raw` generate a text completion) that api/chat-req and
 * api/completions then check as they check every request, so there is one set of
 * rules and one generation path; this file only maps names and frames the answer
 * as Ollama does: NDJSON lines by default, one object with stream:false, durations
 * in nanoseconds, errors as {"error":"…"} that name fields by Ollama's names.
 * GET /api/version, /api/tags, /api/ps and POST /api/show describe the one served
 * model.
 *
 * Mapped: messages (role, content, thinking -> reasoning_content, tool_calls with
 * object arguments; `images` refused: this model reads text), tools, format ("json"
 * -> response_format json_object, a JSON schema -> json_schema named "ollama"),
 * options (temperature, top_p, top_k, min_p, seed, num_predict (-1 and -2: to the
 * end of the context), stop, repeat_penalty, presence_penalty, frequency_penalty;
 * the rest, e.g. num_ctx or num_gpu, accepted and ignored as runtime settings), think
 * (true/false, or "low"/"medium"/"high": as reasoning_effort), keep_alive (accepted:
 * the model stays loaded), stream (default true). generate: prompt, system, raw;
 * an empty prompt only answers done_reason "load" (clients preload so); suffix,
 * images, context and template are refused with 400.
 *
 * Pure: no sockets, no globals. Any thread. */
#ifndef MINICPMD_API_OLLAMA_H
#define MINICPMD_API_OLLAMA_H

#include "api/chat-req.h"
#include "api/chat-run.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The Ollama API version /api/version reports: the release whose request fields
 * (think, tools, format schemas) minicpmd implements. */
#define API_OLLAMA_VERSION "0.9.0"

enum api_ollama_kind {
    API_OLLAMA_CHAT = 0,        /* /api/chat: messages through the chat template */
    API_OLLAMA_GENERATE,        /* /api/generate: prompt (+ system) through the template */
    API_OLLAMA_GENERATE_RAW,    /* /api/generate raw: the prompt as it is */
    API_OLLAMA_LOAD,            /* /api/generate with an empty prompt: nothing to run */
};

/* An Ollama /api/chat or /api/generate body as the OpenAI body it means: a chat
 * completion request (kind CHAT, GENERATE) or a text completion (GENERATE_RAW), or
 * nothing to generate (LOAD: *out is NULL). Returns 0, or -EINVAL with `bad` (400,
 * `param` in Ollama's names). */
int api_ollama_translate(const json_t *body, bool generate, enum api_ollama_kind *kind,
                         json_t **out, struct api_err *bad);

/* Ollama's error body {"error":"<message>"} for `e` (api/error.h), its field named
 * as the Ollama client sent it: the message's quoted 'max_tokens' reads
 * 'options.num_predict'. malloc'd; NULL when out of memory. The status is
 * api_err_status(e). */
char *api_ollama_err_body(const struct api_err *e);
/* A field of the translated OpenAI body (`param`, api_err's) by the name the Ollama
 * body gave it: "max_tokens" -> "options.num_predict", "stop[1]" ->
 * "options.stop[1]", "messages[2].reasoning_content" -> "messages[2].thinking";
 * others as they are. Into out[size]. */
void api_ollama_param(const char *param, char *out, size_t size);

/* The framing of one /api/chat (generate false) or /api/generate answer for
 * `model` (copied): NDJSON lines or one object. NULL when out of memory; free with
 * api_ollama_format_free(format->ctx). */
struct api_chat_format *api_ollama_format_new(bool generate, const char *model);
void api_ollama_format_free(void *ctx);

/* /api/generate's answer to an empty prompt: {"model","created_at","response":"",
 * "done":true,"done_reason":"load"}. */
char *api_ollama_load_body(const char *model);

/* ---- describing the served model -------------------------------------------------- */

struct api_ollama_model {
    const char *name;           /* the model id; Ollama names get ":latest" too */
    int64_t modified;           /* unix seconds (the pack's load time) */
    int64_t size;               /* weights on disk, bytes */
    const char *digest;         /* 64 hex digits */
    int64_t n_params;           /* estimated from the shape; 0 unknown */
    int64_t n_ctx;              /* the served context */
    int64_t n_ctx_train, n_embd, n_layers, n_heads, n_kv_heads, n_vocab;
    const char *quantization;   /* e.g. "Q4_1" */
    const char *template_text;  /* the chat template's source, or NULL */
};

char *api_ollama_version_body(void);
/* {"models":[…]} for /api/tags (ps false) or /api/ps (ps true); n is 0 or 1. */
char *api_ollama_models_body(const struct api_ollama_model *m, size_t n, bool ps);
/* /api/show: modelfile, parameters, template, details, model_info, capabilities. */
char *api_ollama_show_body(const struct api_ollama_model *m);

/* Whether `name` (Ollama's "model" or older "name") names the served model `id`:
 * "id" or "id:latest". */
bool api_ollama_name_is(const char *name, const char *id);

#endif
