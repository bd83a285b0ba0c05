/* chat — the MiniCPM5 chat template, rendered in C byte-for-byte as the official
 * chat_template.jinja renders under Jinja2 (transformers' settings: trim_blocks,
 * lstrip_blocks, tojson = json.dumps(ensure_ascii=False)).
 *
 * Input is the OpenAI request's own JSON (messages, tools), already validated for
 * shape by api/; what the template would reject (e.g. no user message) is
 * decided here and documented in docs/usage.md.
 */
#ifndef MINICPMD_ENGINE_CHAT_H
#define MINICPMD_ENGINE_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

enum eng_thinking {
    ENG_THINKING_UNSET = 0,     /* enable_thinking not given: "<|im_start|>assistant\n" */
    ENG_THINKING_ON,            /* "...assistant\n<think>\n" */
    ENG_THINKING_OFF,           /* "...assistant\n<think>\n\n</think>\n\n" */
};

struct eng_chat_params {
    const json_t *messages;     /* array of OpenAI message objects */
    const json_t *tools;        /* array of OpenAI tool objects, or NULL */
    bool add_generation_prompt;
    /* continue_final_message (transformers, vLLM): render with the final message
     * (an assistant's) open: as with add_generation_prompt false, then cut right
     * after that message's content with Python's strip() applied, as transformers'
     * apply_chat_template does. add_generation_prompt is then ignored. Refused (as
     * transformers raises) when the last message is not an assistant's or its
     * stripped content is not in the render. eng_chat_continues() says the default. */
    bool continue_final;
    enum eng_thinking thinking;
    const char *bos_token;      /* "<s>" for MiniCPM5 */
    const char *eos_token;      /* "</s>" */
};

/* Render. Returns a malloc'd NUL-terminated prompt (the caller frees it), or NULL
 * with a one-line reason in `err` (and, when it is about one field, its JSON path in
 * `param`, e.g. "messages[2].tool_calls[0].function.arguments"; "" otherwise).
 * `param` may be NULL. Reads the JSON only, so any thread may call it.
 *
 * Before the template sees them, OpenAI's shapes are mapped (docs/usage.md,
 * its text section): role "developer" is "system"; content given as an array of
 * {"type":"text"} parts is their texts concatenated with nothing between (other
 * part types are refused); a tool call's `arguments` JSON string is parsed (empty
 * means none; invalid JSON is refused). Then every byte is what Jinja2 renders from
 * the official template, and the request is refused exactly where Jinja2 raises
 * (no messages, a first system message whose content is not a string, a tool
 * message without content, arguments that are neither an object nor empty). Unknown
 * roles, non-object messages, non-array tool_calls or tools, and strings holding
 * NUL are refused too. Returns the prompt (caller frees), or NULL with errno set:
 * ENOMEM (out of memory) or EINVAL (the request is refused), the reason in `err`. */
char *eng_chat_render(const struct eng_chat_params *p, char *err, size_t errlen, char *param,
                      size_t paramlen);

/* minicpmd's default for continue_final when the client does not say: an
 * assistant message last in `messages` is a prefill to continue (llama.cpp does the
 * same) when add_generation_prompt is true and the message has non-blank content,
 * no tool_calls and no "</think>" in its content (the template moves what precedes
 * "</think>" out of the content, so transformers could not find it and refuses). Any
 * other conversation renders as before: closed, a new turn opened. */
bool eng_chat_continues(const json_t *messages, bool add_generation_prompt);

/* Fill `p` from an OpenAI chat request object: messages, tools,
 * chat_template_kwargs.enable_thinking (true/false; absent or any other value is
 * UNSET, as the template treats it), add_generation_prompt (a boolean, default
 * true) and continue_final_message (a boolean; default eng_chat_continues()), for minicpmd-pack template and the tests (the daemon reads these once, in
 * api_chat_req_parse). `p` borrows from `request`. Returns 0, or -EINVAL with
 * `err`/`param` as above. */
int eng_chat_params_from_request(const json_t *request, struct eng_chat_params *p, char *err,
                                 size_t errlen, char *param, size_t paramlen);

/* True when `text` is byte for byte the official MiniCPM5-2B chat_template.jinja
 * (9,060 bytes, SHA-256 cc945752…fcf1c), the one eng_chat_render() implements. */
bool eng_chat_template_is_official(const void *text, size_t len);

#endif
