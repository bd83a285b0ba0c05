/* api/chat-req: the sampling knobs of POST /v1/chat/completions (temperature,
 * top_p, top_k, min_p, penalties, seed, stop, logit_bias, logprobs), good and bad,
 * with the exact `param` a refusal names. Bodies are
 * parsed back with jansson (tests/chat-api-fx.h), so the tests check JSON, not byte
 * strings. */
#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "engine/ert.h"
#include "tests/utf8.h"

#include "tests/chat-api-fx.h"
#include "tests/check.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sampling knobs ----------------------------------------------------------------------- */

MCD_TEST(chat_req, temperature)
{
    struct api_chat_req *r = ok(BODY(",\"temperature\":0"));
    cr_assert_float_eq(r->sampling.temperature, 0.0f, 1e-9);
    api_chat_req_free(r);
    r = ok(BODY(",\"temperature\":2"));
    cr_assert_float_eq(r->sampling.temperature, 2.0f, 1e-6);
    api_chat_req_free(r);
    r = ok(BODY(",\"temperature\":0.25"));
    cr_assert_float_eq(r->sampling.temperature, 0.25f, 1e-6);
    api_chat_req_free(r);
    bad_as(BODY(",\"temperature\":2.01"), "temperature", "expected a number in [0, 2], but got 2.01");
    bad(BODY(",\"temperature\":-0.1"), "temperature");
    bad_as(BODY(",\"temperature\":\"1\""), "temperature",
           "Invalid type for 'temperature': expected a number, but got a string instead.");
    bad(BODY(",\"temperature\":[1]"), "temperature");
}

MCD_TEST(chat_req, top_p_top_k_min_p)
{
    struct api_chat_req *r = ok(BODY(",\"top_p\":1,\"top_k\":40,\"min_p\":0"));
    cr_assert_float_eq(r->sampling.top_p, 1.0f, 1e-6);
    cr_assert_eq(r->sampling.top_k, 40);
    cr_assert_float_eq(r->sampling.min_p, 0.0f, 1e-9);
    api_chat_req_free(r);
    r = ok(BODY(",\"top_p\":0.001,\"top_k\":0,\"min_p\":0.999"));
    cr_assert_eq(r->sampling.top_k, 0);
    api_chat_req_free(r);
    r = ok(BODY(",\"top_k\":99999999999"));
    cr_assert_eq(r->sampling.top_k, INT32_MAX);
    api_chat_req_free(r);
    /* Inside the range in double, still inside it as the sampler's float. */
    r = ok(BODY(",\"top_p\":1e-50,\"min_p\":0.99999999999,\"repetition_penalty\":1e300"));
    cr_assert(r->sampling.top_p > 0.0f);
    cr_assert(r->sampling.min_p < 1.0f);
    cr_assert(isfinite(r->sampling.repetition_penalty) && r->sampling.repetition_penalty > 1e30f);
    api_chat_req_free(r);
    r = ok(BODY(",\"repetition_penalty\":1e-300"));
    cr_assert(r->sampling.repetition_penalty > 0.0f);
    api_chat_req_free(r);
    bad_as(BODY(",\"top_p\":0"), "top_p", "(0, 1]");
    bad(BODY(",\"top_p\":1.01"), "top_p");
    bad(BODY(",\"top_p\":-1"), "top_p");
    bad(BODY(",\"top_p\":false"), "top_p");
    bad(BODY(",\"top_k\":-1"), "top_k");
    bad_as(BODY(",\"top_k\":1.5"), "top_k", "expected an integer");
    bad(BODY(",\"top_k\":\"5\""), "top_k");
    bad_as(BODY(",\"min_p\":1"), "min_p", "[0, 1)");
    bad(BODY(",\"min_p\":-0.01"), "min_p");
}

MCD_TEST(chat_req, penalties)
{
    struct api_chat_req *r =
        ok(BODY(",\"presence_penalty\":2,\"frequency_penalty\":-2,\"repetition_penalty\":1.3"));
    cr_assert_float_eq(r->sampling.presence_penalty, 2.0f, 1e-6);
    cr_assert_float_eq(r->sampling.frequency_penalty, -2.0f, 1e-6);
    cr_assert_float_eq(r->sampling.repetition_penalty, 1.3f, 1e-6);
    api_chat_req_free(r);
    r = ok(BODY(",\"repetition_penalty\":0.5"));
    api_chat_req_free(r);
    bad(BODY(",\"presence_penalty\":2.5"), "presence_penalty");
    bad(BODY(",\"presence_penalty\":-2.01"), "presence_penalty");
    bad(BODY(",\"presence_penalty\":\"0\""), "presence_penalty");
    bad(BODY(",\"frequency_penalty\":3"), "frequency_penalty");
    bad(BODY(",\"frequency_penalty\":-3"), "frequency_penalty");
    bad_as(BODY(",\"repetition_penalty\":0"), "repetition_penalty", "above 0");
    bad(BODY(",\"repetition_penalty\":-1"), "repetition_penalty");
    bad(BODY(",\"repetition_penalty\":null,\"presence_penalty\":[]"), "presence_penalty");
}

MCD_TEST(chat_req, seed)
{
    struct api_chat_req *r = ok(BODY(",\"seed\":42"));
    cr_assert(r->has_seed);
    cr_assert_eq(r->sampling.seed, 42);
    api_chat_req_free(r);
    r = ok(BODY(",\"seed\":-1"));
    cr_assert(r->has_seed);
    cr_assert_eq(r->sampling.seed, UINT64_MAX);
    api_chat_req_free(r);
    r = ok(BODY(",\"seed\":9223372036854775807"));
    cr_assert_eq(r->sampling.seed, (uint64_t)INT64_MAX);
    api_chat_req_free(r);
    /* Without a seed every request gets a fresh one. */
    struct api_chat_req *a = ok(BODY("")), *b = ok(BODY(""));
    cr_assert(!a->has_seed && !b->has_seed);
    cr_assert_neq(a->sampling.seed, b->sampling.seed);
    api_chat_req_free(a);
    api_chat_req_free(b);
    bad_as(BODY(",\"seed\":1.5"), "seed", "expected an integer");
    bad(BODY(",\"seed\":\"42\""), "seed");
}

MCD_TEST(chat_req, stop)
{
    struct api_chat_req *r = ok(BODY(",\"stop\":\"\\n\\n\""));
    cr_assert_eq(r->n_stop, 1);
    cr_assert_eq(r->stop[0].len, 2);
    api_chat_req_free(r);
    r = ok(BODY(",\"stop\":[\"a\",\"bb\",\"c\\u0000d\",\"é\"]"));
    cr_assert_eq(r->n_stop, 4);
    cr_assert_eq(r->stop[1].len, 2);
    cr_assert_eq(r->stop[2].len, 3, "a NUL inside counts");
    cr_assert_eq(r->stop[3].len, 2);
    api_chat_req_free(r);
    r = ok(BODY(",\"stop\":[]"));
    cr_assert_eq(r->n_stop, 0);
    api_chat_req_free(r);
    bad_as(BODY(",\"stop\":\"\""), "stop", "must not be empty");
    /* Up to 16 (OpenAI: 4; llama.cpp and Open WebUI send more). */
    r = ok(BODY(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\","
                "\"l\",\"m\",\"n\",\"o\",\"p\"]"));
    cr_assert_eq(r->n_stop, 16);
    cr_assert_eq(r->stop[15].len, 1);
    cr_assert_eq(r->stop[15].text[0], 'p');
    api_chat_req_free(r);
    bad_as(BODY(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\","
                "\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]"),
           "stop", "maximum length 16");
    /* Whole, however long, up to UT_MAX_STOP_BYTES in all. */
    char big[UT_MAX_STOP_BYTES + 64];
    char s300[301];
    memset(s300, 'x', 300);
    s300[300] = '\0';
    snprintf(big, sizeof big, BODY(",\"stop\":[\"%s\"]"), s300);
    r = ok(big);
    cr_assert_eq(r->stop[0].len, 300, "a 300-byte stop is kept whole");
    api_chat_req_free(r);
    char *huge = malloc(2 * UT_MAX_STOP_BYTES);
    memset(huge, 'y', UT_MAX_STOP_BYTES - 1);
    huge[UT_MAX_STOP_BYTES - 1] = '\0';
    char *body = malloc(3 * UT_MAX_STOP_BYTES);
    snprintf(body, 3 * UT_MAX_STOP_BYTES, BODY(",\"stop\":[\"%s\",\"z\"]"), huge);
    api_chat_req_free(ok(body));   /* exactly the bound */
    snprintf(body, 3 * UT_MAX_STOP_BYTES, BODY(",\"stop\":[\"%s\",\"zz\"]"), huge);
    bad_as(body, "stop[1]", "at most 8192");
    free(body);
    free(huge);
    bad(BODY(",\"stop\":[\"a\",\"\"]"), "stop[1]");
    bad_as(BODY(",\"stop\":[\"a\",3]"), "stop[1]", "expected a string");
    bad(BODY(",\"stop\":[null]"), "stop[0]");
    bad(BODY(",\"stop\":5"), "stop");
    bad(BODY(",\"stop\":{\"a\":1}"), "stop");
}

MCD_TEST(chat_req, logit_bias)
{
    struct api_chat_req *r = ok(BODY(",\"logit_bias\":{\"5\":10,\"999\":-100,\"0\":100,"
                                     "\"12\":0.5}"));
    cr_assert_eq(r->sampling.n_bias, 4);
    cr_assert_not_null(r->sampling.bias);
    bool seen5 = false, seen999 = false;
    for (int i = 0; i < r->sampling.n_bias; i++) {
        if (r->sampling.bias[i].id == 5) {
            seen5 = true;
            cr_assert_float_eq(r->sampling.bias[i].bias, 10.0f, 1e-6);
        }
        if (r->sampling.bias[i].id == 999) {
            seen999 = true;
            cr_assert_float_eq(r->sampling.bias[i].bias, -100.0f, 1e-6);
        }
    }
    cr_assert(seen5 && seen999);
    api_chat_req_free(r);
    r = ok(BODY(",\"logit_bias\":{\"7\":1,\"007\":2}"));
    cr_assert_eq(r->sampling.n_bias, 1, "one id, written twice");
    cr_assert_eq(r->sampling.bias[0].id, 7);
    cr_assert_float_eq(r->sampling.bias[0].bias, 2.0f, 1e-6, "the later one wins");
    api_chat_req_free(r);
    r = ok(BODY(",\"logit_bias\":{\"9\":1,\"3\":2,\"09\":3,\"5\":4,\"3\":5}"));
    cr_assert_eq(r->sampling.n_bias, 3);
    cr_assert_eq(r->sampling.bias[0].id, 3);
    cr_assert_eq(r->sampling.bias[1].id, 5);
    cr_assert_eq(r->sampling.bias[2].id, 9);
    cr_assert_float_eq(r->sampling.bias[2].bias, 3.0f, 1e-6);
    api_chat_req_free(r);
    r = ok(BODY(",\"logit_bias\":{}"));
    cr_assert_eq(r->sampling.n_bias, 0);
    api_chat_req_free(r);
    bad_as(BODY(",\"logit_bias\":{\"5\":101}"), "logit_bias.5", "between -100 and 100");
    bad(BODY(",\"logit_bias\":{\"5\":-100.5}"), "logit_bias.5");
    bad_as(BODY(",\"logit_bias\":{\"5\":\"x\"}"), "logit_bias.5", "expected a number");
    bad_as(BODY(",\"logit_bias\":{\"1000\":1}"), "logit_bias.1000", "0 to 999");
    bad(BODY(",\"logit_bias\":{\"abc\":1}"), "logit_bias.abc");
    bad(BODY(",\"logit_bias\":{\"-1\":1}"), "logit_bias.-1");
    bad(BODY(",\"logit_bias\":{\"\":1}"), "logit_bias.");
    bad(BODY(",\"logit_bias\":{\" 5\":1}"), "logit_bias. 5");
    bad(BODY(",\"logit_bias\":{\"99999999999999999999999\":1}"),
        "logit_bias.99999999999999999999999");
    bad(BODY(",\"logit_bias\":{\"1\":1,\"123\":200}"), "logit_bias.123");
    bad(BODY(",\"logit_bias\":[[5,1]]"), "logit_bias");
    /* A very long key: the param is cut at a character, the body stays valid. */
    char body[2048], key[900] = "";
    for (int i = 0; i < 150; i++)
        strcat(key, "ü");
    snprintf(body, sizeof body, BODY(",\"logit_bias\":{\"%s\":1}"), key);
    json_t *j = load(body);
    struct api_chat_req *out;
    struct api_err b;
    cr_assert_eq(api_chat_req_parse(j, &LIM, &out, &b), -EINVAL);
    cr_assert(mcd_utf8_valid(b.param) && mcd_utf8_valid(b.message));
    cr_assert(strncmp(b.param, "logit_bias.ü", strlen("logit_bias.ü")) == 0);
    json_t *e = parse_str(api_error_body(b.error, b.message, b.param));
    cr_assert_str_eq(sget(json_object_get(e, "error"), "param"), b.param);
    json_decref(e);
    json_decref(j);
}

MCD_TEST(chat_req, logprobs)
{
    struct api_chat_req *r = ok(BODY(",\"logprobs\":true,\"top_logprobs\":5"));
    cr_assert(r->logprobs);
    cr_assert_eq(r->top_logprobs, 5);
    api_chat_req_free(r);
    r = ok(BODY(",\"logprobs\":true"));
    cr_assert(r->logprobs);
    cr_assert_eq(r->top_logprobs, 0);
    api_chat_req_free(r);
    r = ok(BODY(",\"logprobs\":true,\"top_logprobs\":20"));
    cr_assert_eq(r->top_logprobs, 20);
    api_chat_req_free(r);
    r = ok(BODY(",\"logprobs\":false,\"top_logprobs\":null"));
    cr_assert(!r->logprobs);
    api_chat_req_free(r);
    bad(BODY(",\"logprobs\":true,\"top_logprobs\":21"), "top_logprobs");
    bad(BODY(",\"logprobs\":true,\"top_logprobs\":-1"), "top_logprobs");
    bad(BODY(",\"logprobs\":true,\"top_logprobs\":2.5"), "top_logprobs");
    bad_as(BODY(",\"top_logprobs\":3"), "top_logprobs", "requires 'logprobs'");
    bad(BODY(",\"logprobs\":false,\"top_logprobs\":0"), "top_logprobs");
    bad(BODY(",\"logprobs\":\"yes\""), "logprobs");
}
