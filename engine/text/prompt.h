/* prompt — an OpenAI chat request to the token ids the model is given: the chat
 * template (engine/text/template.h) rendered and tokenized with special tokens on, no BOS
 * added (the template writes "<s>"). The one call the API makes per request. */
#ifndef MINICPMD_ENGINE_PROMPT_H
#define MINICPMD_ENGINE_PROMPT_H

#include "engine/text/template.h"
#include "engine/text/tokenizer.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct eng_prompt {
    char *text;          /* the rendered prompt */
    int32_t *ids;        /* its tokens */
    size_t n_ids;
    enum eng_thinking thinking;  /* for the output parser: ON means output starts in <think> */
};

/* Render and tokenize `request` (an OpenAI chat request object). Returns 0, or -1
 * with a one-line reason in `err` and the offending field's JSON path in `param`
 * ("" when it is not about one field). Any thread. */
int eng_prompt_build(const eng_tokenizer *tok, const json_t *request, struct eng_prompt *out,
                     char *err, size_t errlen, char *param, size_t paramlen);
void eng_prompt_free(struct eng_prompt *p);

#endif
