/* libFuzzer target: arbitrary bytes as an OpenAI chat request through the chat
 * template renderer (request mapping, tool-call argument parsing, Python value
 * printing). Any crash, leak or sanitizer report is a bug; a refusal is fine, but
 * it must come with a one-line reason, and a rendered prompt must start with BOS.
 * The input is parsed with JSON_ALLOW_NUL so strings holding NUL reach the renderer
 * too. */
#include "engine/template.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *req = json_loadb((const char *)data, size, JSON_ALLOW_NUL, &je);
    if (!req)
        return 0;
    char err[256], param[128];
    struct eng_chat_params p;
    if (eng_chat_params_from_request(req, &p, err, sizeof err, param, sizeof param) == 0) {
        char *prompt = eng_chat_render(&p, err, sizeof err, param, sizeof param);
        if (prompt && strncmp(prompt, "<s>", 3) != 0)
            abort();
        if (!prompt && (err[0] == '\0' || strchr(err, '\n')))
            abort();
        free(prompt);
        /* The other thinking and generation-prompt settings take other paths. */
        p.thinking = (enum eng_thinking)((p.thinking + 1) % 3);
        p.add_generation_prompt = !p.add_generation_prompt;
        p.bos_token = NULL;
        free(eng_chat_render(&p, NULL, 0, NULL, 0));
    }
    json_decref(req);
    return 0;
}
