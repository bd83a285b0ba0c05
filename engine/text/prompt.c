#include "engine/text/prompt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int eng_prompt_build(const eng_tokenizer *tok, const json_t *request, struct eng_prompt *out,
                     char *err, size_t errlen, char *param, size_t paramlen)
{
    struct eng_chat_params p;
    *out = (struct eng_prompt){0};
    if (param && paramlen)
        param[0] = '\0';
    if (eng_chat_params_from_request(request, &p, err, errlen, param, paramlen) != 0)
        return -1;
    p.bos_token = "<s>";
    p.eos_token = "</s>";
    out->text = eng_chat_render(&p, err, errlen, param, paramlen);
    if (!out->text)
        return -1;
    int n = eng_tokenizer_encode(tok, out->text, strlen(out->text), true, &out->ids);
    if (n < 0) {
        snprintf(err, errlen, "tokenizing the prompt failed: %s", strerror(-n));
        eng_prompt_free(out);
        return -1;
    }
    out->n_ids = (size_t)n;
    out->thinking = p.thinking;
    return 0;
}

void eng_prompt_free(struct eng_prompt *p)
{
    free(p->text);
    free(p->ids);
    *p = (struct eng_prompt){0};
}
