/* api — the JSON shapes of minicpmd's OpenAI-compatible API.
 *
 * Pure functions from plain structs to response bodies: no sockets, no threads,
 * no devices. Every body is returned as a malloc'd NUL-terminated string the
 * caller frees; NULL only on allocation failure.
 */
#ifndef MINICPMD_API_H
#define MINICPMD_API_H

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
     * case, set per error by api_device_error_body() (api/chat-resp.h): 503   \
     * with Retry-After when the device was reset and serves again, 500 when   \
     * it could not be reset. */                                                \
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

/* {"error":{"message":…,"type":…,"param":…|null,"code":…|null}}. `param` may be NULL. */
char *api_error_body(enum api_error e, const char *message, const char *param);

/* ---- /health ------------------------------------------------------------ */

enum api_health_state {
    API_HEALTH_LOADING = 0,     /* 503 {"status":"loading"} */
    API_HEALTH_OK,              /* 200 {"status":"ok"} */
    API_HEALTH_NO_MODEL,        /* 503 {"status":"no_model"} */
    API_HEALTH_FAILED,          /* 503 {"status":"error"} the model failed to load */
    API_HEALTH_STOPPING,        /* 503 {"status":"stopping"} */
};

struct api_health {
    enum api_health_state state;
    const char *model;          /* model id or NULL */
    const char *device;         /* serving device name or NULL */
    const char *device_description; /* its one line (e.g. "xrt: functional model, not an
                                       NPU …"), or NULL */
    const char *detail;         /* e.g. the load error, or NULL */
    bool device_down;           /* "device_state":"down": the last device reset failed
                                 * (still 200: each request tries a reset first) */
    bool has_slots;             /* "slots": {"in_use", "total"} (a running worker) */
    int slots_in_use, slots_total; /* sequences generating / --parallel (llama.cpp's
                                      /health slots_idle, slots_processing) */
};

int api_health_status(enum api_health_state s);
char *api_health_body(const struct api_health *h);

/* ---- /v1/models --------------------------------------------------------- */

struct api_model_meta {         /* what /v1/models says about a loaded model */
    int64_t n_layers, n_embd, n_heads, n_kv_heads, n_vocab, n_ctx_train;
    int64_t size_bytes;         /* weights on disk */
};

struct api_model {
    const char *id;             /* e.g. "minicpm5:2b" */
    int64_t created;            /* unix seconds */
    const char *owned_by;       /* "minicpmd" */
    const struct api_model_meta *meta;  /* NULL while loading */
    const char *status;         /* "loading", "ready", "failed" */
    bool demo;                  /* the built-in demo pack (random weights) */
};

/* {"object":"list","data":[model, …]} */
char *api_models_body(const struct api_model *models, size_t n);
/* one Model object */
char *api_model_body(const struct api_model *m);

#endif
