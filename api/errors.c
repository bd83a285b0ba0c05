/* Errors: the table's status, type and code, filling a struct api_err, and its
 * OpenAI rendering (api/error.h). A handler names the error and never spells a
 * status. */
#include "api/error.h"
#include "util/buf.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- filling ------------------------------------------------------------------ */

/* Cut `s` back to the end of its last whole UTF-8 character: snprintf may have
 * truncated in the middle of one, and jansson refuses invalid UTF-8. */
static void utf8_trim_tail(char *s)
{
    s[ut_utf8_whole_len(s)] = '\0';
}

int api_vrefuse(struct api_err *e, enum api_error kind, const char *param, const char *fmt,
                va_list ap)
{
    e->error = kind;
    e->has_device = false;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    utf8_trim_tail(e->param);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    utf8_trim_tail(e->message);
    for (char *c = e->message; *c; c++) /* one line, even when it quotes input */
        if ((unsigned char)*c < ' ')
            *c = ' ';
    return kind == API_ERR_INTERNAL ? -ENOMEM : -EINVAL;
}

int api_refuse(struct api_err *e, enum api_error kind, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    api_vrefuse(e, kind, param, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

void api_err_set_param(struct api_err *e, const char *param)
{
    if (!param || strcmp(param, e->param) == 0)
        return;
    char q[API_ERR_PARAM_SIZE + 2], r[API_ERR_PARAM_SIZE + 2];
    snprintf(q, sizeof q, "'%s'", e->param);
    snprintf(r, sizeof r, "'%s'", param);
    size_t nq = strlen(q), nr = strlen(r);
    char out[API_ERR_MESSAGE_SIZE];
    size_t o = 0;
    for (const char *p = e->message; *p && o + 1 < sizeof out;) {
        if (e->param[0] && strncmp(p, q, nq) == 0 && o + nr < sizeof out) {
            memcpy(out + o, r, nr);
            o += nr;
            p += nq;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    utf8_trim_tail(out);
    memcpy(e->message, out, o + 1);
    snprintf(e->param, sizeof e->param, "%s", param);
    utf8_trim_tail(e->param);
}

void api_err_rename(struct api_err *e, const struct api_param_name *names, size_t n)
{
    for (size_t i = 0; i < n && e->param[0]; i++) {
        size_t k = strlen(names[i].openai);
        const char *rest = e->param + k;
        if (strncmp(e->param, names[i].openai, k) == 0 &&
            (*rest == '\0' || *rest == '[' || *rest == '.')) {
            char p[API_ERR_PARAM_SIZE];
            snprintf(p, sizeof p, "%s%s", names[i].own, rest);
            api_err_set_param(e, p);
            return;
        }
    }
}

static void appendf(char *buf, size_t size, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t size, size_t *at, const char *fmt, ...)
{
    if (*at >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *at, size - *at, fmt, ap);
    va_end(ap);
    if (n > 0)
        *at += (size_t)n < size - *at ? (size_t)n : size - *at - 1;
}

void api_err_device(struct api_err *e, const struct api_device_error *d)
{
    memset(e, 0, sizeof *e);
    e->error = d->unrecovered ? API_ERR_DEVICE_FAULT : API_ERR_DEVICE_RESET;
    e->has_device = true;
    e->device = *d;
    e->device.device[sizeof e->device.device - 1] = '\0';
    utf8_trim_tail(e->device.device);

    /* "The xrt device failed with ERT_CMD_STATE_TIMEOUT (state 8) during decode,
     * chunk 1 of 3 (layers 0-20) at token 57 after 2003 ms; 1 attempt. …" — each
     * part only when known. */
    char *msg = e->message;
    size_t size = sizeof e->message, at = 0;
    appendf(msg, size, &at, "The %s device failed", d->device[0] ? e->device.device : "compute");
    if (d->ert_name)
        appendf(msg, size, &at, " with %s", d->ert_name);
    if (d->ert_state >= 0)
        appendf(msg, size, &at, " (state %d)", d->ert_state);
    if (d->phase)
        appendf(msg, size, &at, " during %s", d->phase);
    if (d->chunk_index >= 0) {
        appendf(msg, size, &at, ", chunk %d", d->chunk_index);
        if (d->chunk_count >= 0)
            appendf(msg, size, &at, " of %d", d->chunk_count);
    }
    if (d->head)
        appendf(msg, size, &at, " (the head runlist: final norm and lm_head)");
    else if (d->layer_first >= 0 && d->layer_last >= d->layer_first)
        appendf(msg, size, &at, " (layers %d-%d)", d->layer_first, d->layer_last);
    if (d->token_pos >= 0)
        appendf(msg, size, &at, " at token %d", d->token_pos);
    if (d->elapsed_ms >= 0)
        appendf(msg, size, &at, " after %lld ms", (long long)d->elapsed_ms);
    if (d->attempts >= 0)
        appendf(msg, size, &at, "; %d attempt%s", d->attempts, d->attempts == 1 ? "" : "s");
    appendf(msg, size, &at, d->unrecovered ? ". The request was not completed and the device "
                                             "could not be reset."
                                           : ". The request was not completed; it may be "
                                             "retried.");
}

/* ---- reading ------------------------------------------------------------------- */

int api_err_status(const struct api_err *e) { return api_error_status(e->error); }

const char *api_err_retry_after(const struct api_err *e)
{
    return api_error_retry_after(e->error);
}

const char *api_err_code(const struct api_err *e, char buf[64])
{
    if (!e->has_device)
        return api_error_code(e->error);
    /* "ERT_CMD_STATE_TIMEOUT" -> "ert_cmd_state_timeout"; anything but letters,
     * digits and '_' is dropped. */
    size_t o = 0;
    for (const char *n = e->device.ert_name; n && *n && o + 1 < 64; n++) {
        char c = *n;
        if (c >= 'A' && c <= 'Z')
            buf[o++] = (char)(c - 'A' + 'a');
        else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')
            buf[o++] = c;
    }
    buf[o] = '\0';
    return o ? buf : "device_error";
}

/* ---- OpenAI's rendering ----------------------------------------------------------- */

/* A JSON string of s, its bytes as they are when valid UTF-8, else repaired by
 * util/utf8.h's policy: a message may quote client bytes, a device name is the
 * driver's, and neither may make the whole body disappear. */
static json_t *text(const char *s)
{
    size_t n = strlen(s);
    json_t *j = json_stringn(s, n);
    if (j)
        return j;
    ut_buf b = {0};
    if (ut_utf8_repair(&b, s, n, false, NULL) == 0)
        j = json_stringn(b.p, b.n);
    ut_buf_free(&b);
    return j;
}

static json_t *text_or_null(const char *s) { return s && s[0] ? text(s) : json_null(); }

/* Sets key to `v` (stolen); a NULL `v` (out of memory) fails. */
static bool put(json_t *obj, const char *key, json_t *v)
{
    return v && json_object_set_new(obj, key, v) == 0;
}

static bool put_int(json_t *o, const char *key, long long v)
{
    return v < 0 || put(o, key, json_integer(v));
}

static bool put_device(json_t *err, const struct api_device_error *d)
{
    return put_int(err, "ert_state", d->ert_state) && (!d->phase || put(err, "phase", text(d->phase))) &&
           put_int(err, "chunk_index", d->chunk_index) &&
           put_int(err, "chunk_count", d->chunk_count) &&
           (d->head ? put(err, "runlist", json_string("head"))
                    : put_int(err, "layer_first", d->layer_first) &&
                          put_int(err, "layer_last", d->layer_last)) &&
           put_int(err, "token_pos", d->token_pos) && put_int(err, "elapsed_ms", d->elapsed_ms) &&
           (!d->device[0] || put(err, "device", text(d->device))) &&
           put_int(err, "attempts", d->attempts);
}

json_t *api_err_json(const struct api_err *e)
{
    /* OpenAI requires all four keys; param and code may be null. */
    char code[64];
    json_t *inner = json_pack("{s:o, s:s, s:o, s:o}", "message", text(e->message), "type",
                              api_error_type(e->error), "param", text_or_null(e->param), "code",
                              text_or_null(api_err_code(e, code)));
    if (!inner)
        return NULL;
    if (e->has_device && !put_device(inner, &e->device)) {
        json_decref(inner);
        return NULL;
    }
    return json_pack("{s:o}", "error", inner);
}

char *api_err_body(const struct api_err *e)
{
    json_t *o = api_err_json(e);
    if (!o)
        return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *api_error_body(enum api_error kind, const char *message, const char *param)
{
    struct api_err e = {.error = kind};
    /* Copied as given (no one-line rule): the callers' messages are their own. */
    snprintf(e.message, sizeof e.message, "%s", message ? message : "");
    utf8_trim_tail(e.message);
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    utf8_trim_tail(e.param);
    return api_err_body(&e);
}
