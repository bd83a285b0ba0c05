/* api — the JSON shapes of minicpmd's OpenAI-compatible API.
 *
 * Pure functions from plain structs to response bodies: no sockets, no threads,
 * no devices. Every body is returned as a malloc'd NUL-terminated string the
 * caller frees; NULL only on allocation failure.
 */
#ifndef MINICPMD_API_H
#define MINICPMD_API_H

#include "api/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The errors (API_ERROR_MAP, enum api_error, struct api_err) and their OpenAI
 * rendering: api/error.h. */

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
