/* prompt — a chat request's template parameters to the token ids the model is
 * given: the chat template (engine/template.h) rendered and tokenized with special
 * tokens on, no BOS added (the template writes "<s>"). The one call the API makes
 * per request; /apply-template shows its `text`. */
#ifndef MINICPMD_ENGINE_PROMPT_H
#define MINICPMD_ENGINE_PROMPT_H

#include "engine/template.h"
#include "engine/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

struct eng_prompt {
    char *text;          /* the rendered prompt */
    int32_t *ids;        /* its tokens */
    size_t n_ids;
    enum eng_thinking thinking;  /* for the output parser: ON means output starts in <think>
                                    (continue_final: the continued message's <think> is
                                    still open) */
};

/* Render `p` (bos/eos default to MiniCPM5's "<s>" / "</s>" when NULL) and, with a
 * tokenizer, tokenize it (`tok` NULL: text only, ids NULL). Returns 0, or a
 * negative errno (-EINVAL: the template refuses the request; -ENOMEM) with a
 * one-line reason in `err` and the offending field's JSON path in `param` ("" when
 * it is not about one field). Any thread. */
int eng_prompt_build(const eng_tokenizer *tok, const struct eng_chat_params *p,
                     struct eng_prompt *out, char *err, size_t errlen, char *param,
                     size_t paramlen);
void eng_prompt_free(struct eng_prompt *p);

#endif
