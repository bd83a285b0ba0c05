/* /health and /v1/models bodies. */
#include "api/api.h"

#include <jansson.h>

static const char *const health_names[] = {
    [API_HEALTH_LOADING] = "loading",   [API_HEALTH_OK] = "ok",
    [API_HEALTH_NO_MODEL] = "no_model", [API_HEALTH_FAILED] = "error",
    [API_HEALTH_STOPPING] = "stopping",
};

int api_health_status(enum api_health_state s) { return s == API_HEALTH_OK ? 200 : 503; }

static char *dump(json_t *root)
{
    if (!root)
        return NULL;
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return out;
}

/* json_object_set_new() with a NULL value would drop it silently; keep keys
 * present only when there is something to say. */
static void set_opt_string(json_t *o, const char *key, const char *v)
{
    if (v)
        json_object_set_new(o, key, json_string(v));
}

char *api_health_body(const struct api_health *h)
{
    unsigned s = (unsigned)h->state;
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "status", json_string(s < sizeof health_names / sizeof *health_names
                                                     ? health_names[s]
                                                     : "error"));
    set_opt_string(o, "model", h->model);
    set_opt_string(o, "device", h->device);
    set_opt_string(o, "device_description", h->device_description);
    set_opt_string(o, "detail", h->detail);
    if (h->device_down)
        json_object_set_new(o, "device_state", json_string("down"));
    if (h->has_slots)
        json_object_set_new(o, "slots", json_pack("{s:i, s:i}", "in_use", h->slots_in_use,
                                                  "total", h->slots_total));
    return dump(o);
}

static json_t *model_json(const struct api_model *m)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", m->id, "object", "model", "created",
                          (json_int_t)m->created, "owned_by",
                          m->owned_by ? m->owned_by : "minicpmd");
    if (!o)
        return NULL;
    set_opt_string(o, "status", m->status);
    if (m->demo)
        json_object_set_new(o, "demo", json_true());
    if (m->meta) {
        const struct api_model_meta *x = m->meta;
        json_object_set_new(o, "meta",
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "n_layers",
                                      (json_int_t)x->n_layers, "n_embd", (json_int_t)x->n_embd,
                                      "n_heads", (json_int_t)x->n_heads, "n_kv_heads",
                                      (json_int_t)x->n_kv_heads, "n_vocab",
                                      (json_int_t)x->n_vocab, "n_ctx_train",
                                      (json_int_t)x->n_ctx_train, "size",
                                      (json_int_t)x->size_bytes));
    } else {
        json_object_set_new(o, "meta", json_null());
    }
    return o;
}

char *api_models_body(const struct api_model *models, size_t n)
{
    json_t *data = json_array();
    if (!data)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *m = model_json(&models[i]);
        if (!m || json_array_append_new(data, m) != 0) {
            json_decref(data);
            return NULL;
        }
    }
    return dump(json_pack("{s:s, s:o}", "object", "list", "data", data));
}

char *api_model_body(const struct api_model *m) { return dump(model_json(m)); }
