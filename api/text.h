/* api/text — request and response bodies of the llama.cpp-compatible prompt
 * inspection endpoints: POST /tokenize, /detokenize and /apply-template. */
#ifndef MINICPMD_API_TEXT_H
#define MINICPMD_API_TEXT_H

#include "api/api.h"
#include "api/error.h"
#include "engine/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Parse a JSON object body. Returns the object (caller decrefs) or NULL with `bad`
 * filled (invalid JSON, or not an object). */
json_t *api_parse_object(const char *body, size_t len, struct api_err *bad);

/* POST /tokenize {"content": string, "add_special": bool, "parse_special": bool,
 * "with_pieces": bool}. `content` borrows from `root`. */
struct api_tokenize_req {
    const char *content;
    size_t content_len;
    bool add_special;           /* default false; true: the post_processor's special
                                   tokens too ("<s>" first for MiniCPM5) */
    bool parse_special;         /* default true: "<|im_end|>" in content is that token */
    bool with_pieces;           /* default false */
};
int api_tokenize_parse(const json_t *root, struct api_tokenize_req *req,
                       struct api_err *bad);

/* {"tokens":[ids]} or, with pieces (`tok` not NULL), {"tokens":[{"id":n,"piece":
 * "text"|[bytes]}]}: a piece that is not valid UTF-8 on its own is given as its
 * byte values, as llama.cpp does. Written straight into one growing buffer, never
 * as a JSON object per token (that cost ~400 bytes a token: 3 GB for an 8 MB body).
 * 0 with *out set; -EFBIG when the answer would pass `max_bytes` (nothing kept);
 * -ENOMEM. */
int api_tokenize_body(const int32_t *ids, size_t n, const eng_tokenizer *tok, size_t max_bytes,
                      char **out);

/* POST /detokenize {"tokens": [ids]}: ids must be integers in [0, n_vocab). The
 * caller frees *ids. */
int api_detokenize_parse(const json_t *root, int32_t n_vocab, int32_t **ids, size_t *n,
                         struct api_err *bad);
/* {"content": text}; `text` is `len` bytes of UTF-8 and may hold U+0000. */
char *api_detokenize_body(const char *text, size_t len);

/* POST /apply-template answers {"prompt": text}. */
char *api_apply_template_body(const char *prompt);

#endif
