/* api/error — every failure minicpmd answers, described once (struct api_err) and
 * rendered once per surface.
 *
 * Who fills one: a request parser or check (api_refuse(), api/text.h, and the
 * checks in api/chat-req*.c, completions.c, ollama.c, responses.c), api/chat-run.c
 * from the engine's ERROR event (api_err_device() for a device fault) or when the
 * engine does not take a request (api_chat_refuse), server/ for what it refuses
 * itself (srv_response_error). Nothing crosses a module boundary as error JSON.
 *
 * Who renders it, each surface in its own file:
 *   OpenAI chat, completions, Responses (a whole answer), every server/ route:
 *       api_err_body() here: {"error":{"message","type","param","code"[, the device
 *       fields]}}, status api_err_status(), Retry-After api_err_retry_after()
 *   OpenAI chat and completions, a stream that has started:
 *       api_sse_frame(api_err_body()) (api/chat-resp.h): one data event, no [DONE]
 *   Responses, a stream: api/responses.c, an `error` event {type, code, message, param}
 *   Ollama: api_ollama_err_body() (api/ollama.h): {"error":"<message>"}, with the
 *       field names the Ollama client sent (options.num_predict, not max_tokens)
 * The framing table of a generation (struct api_chat_format, api/chat-run.h) carries
 * its surface's two renderers (a stream's last frame, a whole answer's body).
 *
 * Pure: plain structs, no globals. Any thread. */
#ifndef MINICPMD_API_ERROR_H
#define MINICPMD_API_ERROR_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every error minicpmd can send, with its HTTP status, OpenAI `type` and `code`.
 * One table, so the status and the body can never disagree. */
#define API_ERROR_MAP(XX)                                                                  \
    XX(BAD_REQUEST,        400, "invalid_request_error", NULL)                             \
    XX(INVALID_JSON,       400, "invalid_request_error", "invalid_json")                  \
    XX(CONTEXT_LENGTH,     400, "invalid_request_error", "context_length_exceeded")       \
    XX(UNAUTHORIZED,       401, "authentication_error",  "invalid_api_key")               \
    XX(FORBIDDEN,          403, "permission_error",      "origin_not_allowed")            \
    XX(HOST_NOT_ALLOWED,   403, "permission_error",      "host_not_allowed")              \
    XX(NOT_FOUND,          404, "not_found_error",       "not_found")                     \
    XX(MODEL_NOT_FOUND,    404, "invalid_request_error", "model_not_found")               \
    XX(METHOD_NOT_ALLOWED, 405, "invalid_request_error", "method_not_allowed")            \
    XX(BODY_TOO_LARGE,     413, "invalid_request_error", "request_too_large")             \
    XX(MEDIA_TYPE,         415, "invalid_request_error", "unsupported_media_type")        \
    XX(INTERNAL,           500, "server_error",          "internal_error")                \
    XX(TRANSFER_ENCODING,  501, "invalid_request_error", "unsupported_transfer_encoding") \
    XX(LOADING,            503, "unavailable_error",     "model_loading")                 \
    XX(NO_MODEL,           503, "unavailable_error",     "no_model")                      \
    XX(BUSY,               503, "unavailable_error",     "server_busy")                   \
    XX(SHUTTING_DOWN,      503, "unavailable_error",     "shutting_down")                 \
    /* A device fault from the worker; the code is the ERT state's name in lower \
     * case (struct api_err's device part): 503 with Retry-After when the device \
     * was reset and serves again, 500 when it could not be reset. */            \
    XX(DEVICE_RESET,       503, "device_error",          NULL)                             \
    XX(DEVICE_FAULT,       500, "device_error",          NULL)

enum api_error {
#define XX(name, status, type, code) API_ERR_##name,
    API_ERROR_MAP(XX)
#undef XX
    API_ERR__COUNT
};

int api_error_status(enum api_error e);
const char *api_error_type(enum api_error e);
const char *api_error_code(enum api_error e);   /* may be NULL -> JSON null */
/* The Retry-After to send with it (seconds, static), or NULL: "2" while the model
 * loads, "1" when the queue is full or the device was reset. */
const char *api_error_retry_after(enum api_error e);

/* A device fault the worker gave up on, as the API reports it. The worker's struct
 * eng_device_error (engine/ert.h) maps onto it (api_chat_device_error,
 * api/chat-run.h): ert_name = eng_ert_name(state), phase = eng_phase_name(phase),
 * layer_first/layer_last = layer_begin and layer_end - 1. A negative number, a NULL
 * or empty string means unknown and is left out. */
struct api_device_error {
    int ert_state;              /* the ERT command state number */
    const char *ert_name;       /* static, e.g. "ERT_CMD_STATE_TIMEOUT" */
    const char *phase;          /* static: "prefill", "decode", … */
    int chunk_index;            /* which runlist chunk (0-based) of chunk_count */
    int chunk_count;
    int layer_first, layer_last;   /* the layers that chunk covers, inclusive; a
                                    * last below first (a runlist without layers)
                                    * is not mentioned in the message */
    int token_pos;              /* the position being computed */
    int64_t elapsed_ms;         /* of the failed submission */
    char device[64];            /* e.g. "xrt"; "" unknown */
    int attempts;               /* submissions tried, retries included */
    bool unrecovered;           /* the device could not be reset (HTTP 500): the
                                 * message says so instead of "it may be retried" */
    bool head;                  /* the head runlist (final norm + lm_head, no layers):
                                 * "runlist":"head", no layer_first/layer_last */
};

#define API_ERR_MESSAGE_SIZE 512
#define API_ERR_PARAM_SIZE 128

/* One failure. Self-contained (no pointer but the device part's static names), so
 * it may be copied and kept. */
struct api_err {
    enum api_error error;       /* API_ERROR_MAP's row: status, type, code, Retry-After */
    char message[API_ERR_MESSAGE_SIZE];   /* one line, whole UTF-8 characters */
    char param[API_ERR_PARAM_SIZE];       /* the field at fault as a JSON path in the
                                           * OpenAI request's names ("stop[1]",
                                           * "max_tokens"); "": none */
    bool has_device;            /* error is DEVICE_RESET or DEVICE_FAULT: */
    struct api_device_error device;
};

/* Fill `e`: error `kind`, the field's JSON path `param` (NULL: none) and a message
 * from `fmt`, cut to whole UTF-8 characters on one line (it may quote input), no
 * device part. api_vrefuse returns -ENOMEM for API_ERR_INTERNAL (the only internal
 * error a parser meets is running out of memory), else -EINVAL; api_refuse returns
 * -EINVAL, so a check can end in `return api_refuse(...)`. */
int api_refuse(struct api_err *e, enum api_error kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int api_vrefuse(struct api_err *e, enum api_error kind, const char *param, const char *fmt,
                va_list ap) __attribute__((format(printf, 4, 0)));

/* A surface whose request was translated into an OpenAI body names its fields its
 * own way: `openai` (the field, or the start of a path: followed by '[' or '.')
 * is `own` there. */
struct api_param_name {
    const char *openai, *own;
};

/* e->param by the first entry of names[0 .. n) that matches, and the message's
 * quoted mentions of it ('max_tokens') likewise; nothing when none matches. */
void api_err_rename(struct api_err *e, const struct api_param_name *names, size_t n);

/* e->param set to `param`, the message's quoted mentions of the old one renamed. */
void api_err_set_param(struct api_err *e, const char *param);

/* Fill `e` with a device fault: DEVICE_FAULT when d->unrecovered, else
 * DEVICE_RESET, and the message saying what failed where ("The xrt device failed
 * with ERT_CMD_STATE_TIMEOUT (state 8) during decode, chunk 1 of 3 (layers 0-20)
 * at token 57 after 2003 ms; 1 attempt. The request was not completed; it may be
 * retried."). */
void api_err_device(struct api_err *e, const struct api_device_error *d);

int api_err_status(const struct api_err *e);
const char *api_err_retry_after(const struct api_err *e);   /* static or NULL */
/* The OpenAI `code`: a device fault's ERT state name in lower case
 * ("ert_cmd_state_timeout"; "device_error" without one), else the table's (may be
 * NULL). `buf` holds the former. */
const char *api_err_code(const struct api_err *e, char buf[64]);

/* OpenAI's error object {"error":{"message","type","param" (null when none),"code"
 * (null when none)}}; a device fault adds "ert_state", "phase", "chunk_index",
 * "chunk_count", "layer_first", "layer_last" (or "runlist":"head"), "token_pos",
 * "elapsed_ms", "device", "attempts", each when known. New reference / malloc'd
 * compact text; NULL when out of memory. */
json_t *api_err_json(const struct api_err *e);
char *api_err_body(const struct api_err *e);

/* api_err_body() of an error made on the spot (`param` NULL: none). */
char *api_error_body(enum api_error e, const char *message, const char *param);

#endif
