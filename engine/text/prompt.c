#include "engine/prompt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether a continued assistant message is inside <think>: its last "<think>" is
 * not closed after it. The output parser then starts in reasoning. */
static enum eng_thinking continued_thinking(const char *text)
{
    const char *turn = NULL, *open = NULL, *close = NULL;
    for (const char *q = text; (q = strstr(q, "<|im_start|>assistant\n")); q++)
        turn = q;
    for (const char *q = turn ? turn : text; (q = strstr(q, "<think>")); q++)
        open = q;
    for (const char *q = turn ? turn : text; (q = strstr(q, "</think>")); q++)
        close = q;
    return open && (!close || close < open) ? ENG_THINKING_ON : ENG_THINKING_OFF;
}

int eng_prompt_build(const eng_tokenizer *tok, const struct eng_chat_params *params,
                     struct eng_prompt *out, char *err, size_t errlen, char *param,
                     size_t paramlen)
{
    struct eng_chat_params p = *params;
    *out = (struct eng_prompt){0};
    if (param && paramlen)
        param[0] = '\0';
    if (!p.bos_token)
        p.bos_token = "<s>";
    if (!p.eos_token)
        p.eos_token = "</s>";
    out->text = eng_chat_render(&p, err, errlen, param, paramlen);
    if (!out->text)
        return errno == ENOMEM ? -ENOMEM : -EINVAL;
    out->thinking = p.thinking;
    if (p.continue_final)
        out->thinking = continued_thinking(out->text);
    if (!tok)
        return 0;
    int n = eng_tokenizer_encode(tok, out->text, strlen(out->text), true, &out->ids);
    if (n < 0) {
        snprintf(err, errlen, "tokenizing the prompt failed: %s", strerror(-n));
        eng_prompt_free(out);
        return n;
    }
    out->n_ids = (size_t)n;
    return 0;
}

void eng_prompt_free(struct eng_prompt *p)
{
    free(p->text);
    free(p->ids);
    *p = (struct eng_prompt){0};
}
