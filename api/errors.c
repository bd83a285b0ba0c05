/* OpenAI error objects. The status, type and code of every error come from
 * API_ERROR_MAP, so a handler names the error and never spells a status. */
#include "api/api.h"

#include <jansson.h>

static const struct {
    int status;
    const char *type;
    const char *code;
} error_table[API_ERR__COUNT] = {
#define XX(name, status, type, code) [API_ERR_##name] = {status, type, code},
    API_ERROR_MAP(XX)
#undef XX
};

static int valid(enum api_error e) { return (int)e >= 0 && e < API_ERR__COUNT; }

int api_error_status(enum api_error e) { return valid(e) ? error_table[e].status : 500; }

const char *api_error_retry_after(enum api_error e)
{
    switch (e) {
    case API_ERR_LOADING: return "2";
    case API_ERR_BUSY:
    case API_ERR_DEVICE_RESET: return "1";
    default: return NULL;
    }
}

const char *api_error_type(enum api_error e)
{
    return valid(e) ? error_table[e].type : "server_error";
}

const char *api_error_code(enum api_error e) { return valid(e) ? error_table[e].code : NULL; }

static json_t *string_or_null(const char *s) { return s ? json_string(s) : json_null(); }

char *api_error_body(enum api_error e, const char *message, const char *param)
{
    /* OpenAI requires all four keys; param and code may be null. json_string()
     * rejects invalid UTF-8, so a message that quotes client bytes must not
     * make the whole body disappear: fall back to a lossless-enough text. */
    json_t *msg = json_string(message ? message : "");
    if (!msg)
        msg = json_string("(message contained invalid UTF-8)");
    json_t *inner = json_pack("{s:o, s:s, s:o, s:o}", "message", msg, "type", api_error_type(e),
                              "param", string_or_null(param), "code",
                              string_or_null(api_error_code(e)));
    if (!inner)
        return NULL;
    json_t *root = json_pack("{s:o}", "error", inner);
    if (!root)
        return NULL;
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return out;
}
