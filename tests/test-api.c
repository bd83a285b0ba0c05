/* api/: OpenAI error objects, /health and /v1/models bodies, parsed back with
 * jansson so the tests check JSON, not byte strings. */
#include "api/api.h"
#include "api/text.h"

#include "tests/check.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *parse(char *s)
{
    cr_assert_not_null(s);
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    cr_assert_not_null(j, "not JSON (%s): %s", e.text, s);
    free(s);
    return j;
}

MCD_TEST(api_error, has_all_four_keys)
{
    json_t *j = parse(api_error_body(API_ERR_NOT_FOUND, "no route for GET /x", NULL));
    json_t *e = json_object_get(j, "error");
    cr_assert(json_is_object(e));
    cr_assert_eq(json_object_size(e), 4);
    cr_assert_str_eq(json_string_value(json_object_get(e, "message")), "no route for GET /x");
    cr_assert_str_eq(json_string_value(json_object_get(e, "type")), "not_found_error");
    cr_assert(json_is_null(json_object_get(e, "param")));
    cr_assert_str_eq(json_string_value(json_object_get(e, "code")), "not_found");
    json_decref(j);
}

MCD_TEST(api_error, param_and_null_code)
{
    json_t *j = parse(api_error_body(API_ERR_BAD_REQUEST, "bad", "temperature"));
    json_t *e = json_object_get(j, "error");
    cr_assert_str_eq(json_string_value(json_object_get(e, "param")), "temperature");
    cr_assert(json_is_null(json_object_get(e, "code")));
    cr_assert_str_eq(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    json_decref(j);
}

MCD_TEST(api_error, status_table)
{
    cr_assert_eq(api_error_status(API_ERR_BAD_REQUEST), 400);
    cr_assert_eq(api_error_status(API_ERR_UNAUTHORIZED), 401);
    cr_assert_eq(api_error_status(API_ERR_FORBIDDEN), 403);
    cr_assert_eq(api_error_status(API_ERR_NOT_FOUND), 404);
    cr_assert_eq(api_error_status(API_ERR_MODEL_NOT_FOUND), 404);
    cr_assert_eq(api_error_status(API_ERR_METHOD_NOT_ALLOWED), 405);
    cr_assert_eq(api_error_status(API_ERR_BODY_TOO_LARGE), 413);
    cr_assert_eq(api_error_status(API_ERR_INTERNAL), 500);
    cr_assert_eq(api_error_status(API_ERR_BUSY), 503);
    cr_assert_str_eq(api_error_type(API_ERR_UNAUTHORIZED), "authentication_error");
    cr_assert_str_eq(api_error_code(API_ERR_MODEL_NOT_FOUND), "model_not_found");
    /* Out-of-range values must not read outside the table. */
    cr_assert_eq(api_error_status((enum api_error)9999), 500);
    cr_assert_str_eq(api_error_type((enum api_error)-1), "server_error");
}

MCD_TEST(api_error, every_error_renders)
{
    for (int e = 0; e < API_ERR__COUNT; e++) {
        json_t *j = parse(api_error_body((enum api_error)e, "m", NULL));
        json_t *err = json_object_get(j, "error");
        cr_assert(json_is_string(json_object_get(err, "type")), "error %d", e);
        int st = api_error_status((enum api_error)e);
        cr_assert(st >= 400 && st < 600, "error %d status %d", e, st);
        json_decref(j);
    }
}

MCD_TEST(api_error, quotes_and_control_bytes_are_escaped)
{
    json_t *j = parse(api_error_body(API_ERR_BAD_REQUEST, "say \"hi\"\n\\ \x01", NULL));
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                     "say \"hi\"\n\\ \x01");
    json_decref(j);
}

MCD_TEST(api_error, invalid_utf8_message_still_gives_a_body)
{
    json_t *j = parse(api_error_body(API_ERR_NOT_FOUND, "no route for /\xff\xfe", NULL));
    const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    cr_assert_not_null(m);
    json_decref(j);
}

MCD_TEST(api_health, states)
{
    struct api_health h = {.state = API_HEALTH_OK, .model = "minicpm5:2b", .device = "cpu"};
    cr_assert_eq(api_health_status(API_HEALTH_OK), 200);
    cr_assert_eq(api_health_status(API_HEALTH_LOADING), 503);
    cr_assert_eq(api_health_status(API_HEALTH_NO_MODEL), 503);
    json_t *j = parse(api_health_body(&h));
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "ok");
    cr_assert_str_eq(json_string_value(json_object_get(j, "model")), "minicpm5:2b");
    cr_assert_null(json_object_get(j, "detail"));
    json_decref(j);

    h = (struct api_health){.state = API_HEALTH_LOADING};
    j = parse(api_health_body(&h));
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "loading");
    cr_assert_null(json_object_get(j, "model"));
    json_decref(j);
}

MCD_TEST(api_models, list_shape)
{
    struct api_model_meta meta = {.n_layers = 42, .n_vocab = 130560, .size_bytes = 123};
    struct api_model m[2] = {
        {.id = "minicpm5:2b", .created = 1700000000, .meta = &meta, .status = "ready"},
        {.id = "other", .created = 5, .owned_by = "me", .status = "loading"},
    };
    json_t *j = parse(api_models_body(m, 2));
    cr_assert_str_eq(json_string_value(json_object_get(j, "object")), "list");
    json_t *data = json_object_get(j, "data");
    cr_assert_eq(json_array_size(data), 2);
    json_t *a = json_array_get(data, 0);
    cr_assert_str_eq(json_string_value(json_object_get(a, "id")), "minicpm5:2b");
    cr_assert_str_eq(json_string_value(json_object_get(a, "object")), "model");
    cr_assert_eq(json_integer_value(json_object_get(a, "created")), 1700000000);
    cr_assert_str_eq(json_string_value(json_object_get(a, "owned_by")), "minicpmd");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(a, "meta"), "n_layers")), 42);
    json_t *b = json_array_get(data, 1);
    cr_assert(json_is_null(json_object_get(b, "meta")));
    cr_assert_str_eq(json_string_value(json_object_get(b, "owned_by")), "me");
    json_decref(j);
}

MCD_TEST(api_models, empty_list)
{
    json_t *j = parse(api_models_body(NULL, 0));
    cr_assert_eq(json_array_size(json_object_get(j, "data")), 0);
    json_decref(j);
}

/* An integer beyond int64 is valid JSON with a value out of
 * range; the 400 names the field instead of saying "not valid JSON". */
MCD_TEST(api_body, huge_integer_names_the_field)
{
    struct api_err bad;
    const char *b = "{\"model\":\"m\",\"max_tokens\":99999999999999999999}";
    cr_assert_null(api_parse_object(b, strlen(b), &bad));
    cr_assert_eq(bad.error, API_ERR_BAD_REQUEST);
    cr_assert_str_eq(bad.param, "max_tokens");
    cr_assert(strstr(bad.message, "'max_tokens' is out of range"), "%s", bad.message);
    cr_assert_null(strstr(bad.message, "not valid JSON"), "%s", bad.message);

    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"x\":[1,-99999999999999999999]}]}";
    cr_assert_null(api_parse_object(b, strlen(b), &bad));
    cr_assert_str_eq(bad.param, "messages[1].x[1]");

    /* Still within int64: parsed. */
    b = "{\"seed\":9223372036854775807}";
    json_t *root = api_parse_object(b, strlen(b), &bad);
    cr_assert_not_null(root);
    json_decref(root);
    /* Broken JSON stays "not valid JSON". */
    b = "{\"seed\":}";
    cr_assert_null(api_parse_object(b, strlen(b), &bad));
    cr_assert(strstr(bad.message, "not valid JSON"), "%s", bad.message);
}

/* ---- /tokenize's answer ----------------------------------- */

/* The answer written straight into a buffer equals the one built with a jansson
 * object per token (what it replaces, ~400 bytes a token), for every id of the
 * fixture: valid UTF-8 pieces as strings, the others as byte arrays. */
MCD_TEST(api_body, tokenize_answer_equals_the_jansson_one)
{
    const char *file = __FILE__, *slash = strrchr(file, '/');
    char path[4096], err[512] = "";
    snprintf(path, sizeof path, "%.*s/data/tiny-tokenizer.json", (int)(slash - file), file);
    eng_tokenizer *t;
    cr_assert_eq(eng_tokenizer_load(path, &t, err, sizeof err), 0, "%s", err);
    int32_t n = eng_tokenizer_n_vocab(t);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int32_t i = 0; i < n; i++)
        ids[i] = n - 1 - i;
    json_t *want_pieces = json_array(), *want_ids = json_array();
    for (int32_t i = 0; i < n; i++) {
        const char *b;
        size_t len = eng_tokenizer_token_bytes(t, ids[i], false, &b);
        json_t *piece = json_stringn(b, len);
        if (!piece) {
            piece = json_array();
            for (size_t k = 0; k < len; k++)
                json_array_append_new(piece, json_integer((unsigned char)b[k]));
        }
        json_array_append_new(want_pieces, json_pack("{s:i, s:o}", "id", ids[i], "piece", piece));
        json_array_append_new(want_ids, json_integer(ids[i]));
    }
    char *got = NULL;
    cr_assert_eq(api_tokenize_body(ids, (size_t)n, t, 1 << 20, &got), 0);
    json_t *g = json_loads(got, JSON_ALLOW_NUL, NULL);
    cr_assert_not_null(g, "not JSON: %.200s", got);
    cr_assert(json_equal(json_object_get(g, "tokens"), want_pieces));
    json_decref(g);
    free(got);
    cr_assert_eq(api_tokenize_body(ids, (size_t)n, NULL, 1 << 20, &got), 0);
    g = json_loads(got, 0, NULL);
    cr_assert(json_equal(json_object_get(g, "tokens"), want_ids));
    json_decref(g);
    free(got);
    /* Over the bound: nothing, -EFBIG. */
    cr_assert_eq(api_tokenize_body(ids, (size_t)n, t, 100, &got), -EFBIG);
    cr_assert_null(got);
    cr_assert_eq(api_tokenize_body(ids, 0, t, 100, &got), 0);
    cr_assert_str_eq(got, "{\"tokens\":[]}");
    free(got);
    json_decref(want_pieces);
    json_decref(want_ids);
    free(ids);
    eng_tokenizer_free(t);
}
