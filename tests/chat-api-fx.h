/* Shared by the api/chat-req and api/chat-resp tests (test-chat-api-*.c): the pack
 * defaults and limits a request is parsed against, request bodies (BODY, MSGS,
 * TOOLS), parsing that must succeed (ok) or refuse naming a `param` (bad, bad_as),
 * and the JSON and SSE events the responses are parsed back from. */
#ifndef MINICPMD_TESTS_CHAT_API_FX_H
#define MINICPMD_TESTS_CHAT_API_FX_H

#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "tests/utf8.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const struct eng_sampling PACK = {
    .temperature = 0.7f,
    .top_p = 0.95f,
    .top_k = 20,
    .min_p = 0.05f,
    .repetition_penalty = 1.05f,
    .penalty_last_n = 64,
    .seed = 1,
};
static const struct api_chat_limits LIM = {.n_vocab = 1000, .defaults = &PACK};

/* A request with one user message, plus `extra` (",\"key\":value…"). */
#define BODY(extra) "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" extra "}"
/* A request with the given messages array. */
#define MSGS(arr) "{\"model\":\"m\",\"messages\":" arr "}"

static const char TOOLS[] =
    ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
    "\"Weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":\"b\"}}]";

static inline json_t *load(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, JSON_ALLOW_NUL, &e);
    cr_assert_not_null(j, "test JSON does not parse (%s): %s", e.text, s);
    return j;
}

static inline struct api_chat_req *ok(const char *body)
{
    json_t *j = load(body);
    struct api_chat_req *r = NULL;
    struct api_err bad = {0};
    int rc = api_chat_req_parse(j, &LIM, &r, &bad);
    json_decref(j); /* the request holds its own reference */
    cr_assert_eq(rc, 0, "refused (%s: %s): %s", bad.param, bad.message, body);
    cr_assert_not_null(r);
    return r;
}

static inline void bad_as(const char *body, const char *param, const char *needle)
{
    json_t *j = load(body);
    struct api_chat_req *r = (struct api_chat_req *)1;
    struct api_err bad = {0};
    int rc = api_chat_req_parse(j, &LIM, &r, &bad);
    json_decref(j);
    cr_assert_eq(rc, -EINVAL, "accepted: %s", body);
    cr_assert_null(r);
    cr_assert_eq(bad.error, API_ERR_BAD_REQUEST, "error %d for %s", bad.error, body);
    cr_assert_str_eq(bad.param, param, "param '%s' (%s) for %s", bad.param, bad.message, body);
    cr_assert(bad.message[0] != '\0');
    cr_assert(mcd_utf8_valid(bad.message) && mcd_utf8_valid(bad.param));
    cr_assert_null(strchr(bad.message, '\n'));
    if (needle)
        cr_assert_not_null(strstr(bad.message, needle), "message '%s' lacks '%s'", bad.message,
                           needle);
}

static inline void bad(const char *body, const char *param) { bad_as(body, param, NULL); }

static inline json_t *parse_str(char *s)
{
    cr_assert_not_null(s);
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    cr_assert_not_null(j, "not JSON (%s): %s", e.text, s);
    free(s);
    return j;
}

/* An SSE event "data: {json}\n\n", parsed. */
static inline json_t *parse_event(char *ev)
{
    cr_assert_not_null(ev);
    size_t n = strlen(ev);
    cr_assert(n > 8 && strncmp(ev, "data: ", 6) == 0, "not an event: %s", ev);
    cr_assert(ev[n - 1] == '\n' && ev[n - 2] == '\n' && ev[n - 3] != '\n');
    cr_assert_null(memchr(ev + 6, '\n', n - 8), "one line of data");
    ev[n - 2] = '\0';
    json_t *j = load(ev + 6);
    free(ev);
    return j;
}

static inline const char *sget(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static inline json_int_t iget(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static inline double rget(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

#endif
