/* api/chat-resp: the error bodies of POST /v1/chat/completions (context length,
 * server busy, device errors, also as the engine reports them). Bodies are
 * parsed back with jansson (tests/chat-api-fx.h), so the tests check JSON, not byte
 * strings. */
#include "api/chat-req.h"
#include "api/chat-resp.h"
#include "api/chat-run.h"
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

/* ---- errors ----------------------------------------------------------------------------------------- */

MCD_TEST(chat_errors, context_length)
{
    json_t *e = parse_str(api_context_length_body(4096, 5000, 0));
    json_t *err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "message"),
                     "This model's maximum context length is 4096 tokens. However, your "
                     "messages resulted in 5000 tokens. Please reduce the length of the "
                     "messages.");
    cr_assert_str_eq(sget(err, "type"), "invalid_request_error");
    cr_assert_str_eq(sget(err, "code"), "context_length_exceeded");
    cr_assert_str_eq(sget(err, "param"), "messages");
    json_decref(e);
    e = parse_str(api_context_length_body(4096, 4100, 200));
    cr_assert_str_eq(sget(json_object_get(e, "error"), "message"),
                     "This model's maximum context length is 4096 tokens. However, you "
                     "requested 4300 tokens (4100 in the messages, 200 in the completion). "
                     "Please reduce the length of the messages or completion.");
    json_decref(e);
    cr_assert_eq(api_error_status(API_ERR_CONTEXT_LENGTH), 400);
}

MCD_TEST(chat_errors, server_busy)
{
    json_t *e = parse_str(api_server_busy_body(8));
    json_t *err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "code"), "server_busy");
    cr_assert_str_eq(sget(err, "type"), "unavailable_error");
    cr_assert_not_null(strstr(sget(err, "message"), "8 requests"));
    cr_assert(json_is_null(json_object_get(err, "param")));
    cr_assert_eq(api_error_status(API_ERR_BUSY), 503);
    json_decref(e);
}

MCD_TEST(chat_errors, device_error)
{
    struct api_device_error de = {
        .ert_state = 8, .ert_name = "ERT_CMD_STATE_TIMEOUT", .phase = "prefill",
        .chunk_index = 3, .chunk_count = 10, .layer_first = 12, .layer_last = 15,
        .token_pos = 120, .elapsed_ms = 2000, .device = "xrt", .attempts = 2,
    };
    json_t *e = parse_str(api_device_error_body(&de));
    cr_assert_eq(json_object_size(e), 1);
    json_t *err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "type"), "device_error");
    cr_assert_str_eq(sget(err, "code"), "ert_cmd_state_timeout");
    cr_assert(json_is_null(json_object_get(err, "param")));
    cr_assert_eq(iget(err, "ert_state"), 8);
    cr_assert_str_eq(sget(err, "phase"), "prefill");
    cr_assert_eq(iget(err, "chunk_index"), 3);
    cr_assert_eq(iget(err, "chunk_count"), 10);
    cr_assert_eq(iget(err, "layer_first"), 12);
    cr_assert_eq(iget(err, "layer_last"), 15);
    cr_assert_eq(iget(err, "token_pos"), 120);
    cr_assert_eq(iget(err, "elapsed_ms"), 2000);
    cr_assert_str_eq(sget(err, "device"), "xrt");
    cr_assert_eq(iget(err, "attempts"), 2);
    cr_assert_eq(json_object_size(err), 14, "4 OpenAI keys + 10 fields");
    cr_assert_str_eq(sget(err, "message"),
                     "The xrt device failed with ERT_CMD_STATE_TIMEOUT (state 8) during "
                     "prefill, chunk 3 of 10 (layers 12-15) at token 120 after 2000 ms; 2 "
                     "attempts. The request was not completed; it may be retried.");
    json_decref(e);
    cr_assert_eq(api_error_status(API_ERR_DEVICE_FAULT), 500);
    cr_assert_str_eq(api_error_type(API_ERR_DEVICE_FAULT), "device_error");

    /* Unknown fields are left out; no name: code "device_error". As a stream event. */
    struct api_device_error few = {.ert_state = -1, .chunk_index = -1, .chunk_count = -1,
                                   .layer_first = -1, .layer_last = -1, .token_pos = -1,
                                   .elapsed_ms = -1, .attempts = 1};
    char *body = api_device_error_body(&few);
    e = parse_event(api_sse_frame(body));
    free(body);
    err = json_object_get(e, "error");
    cr_assert_str_eq(sget(err, "code"), "device_error");
    cr_assert_eq(json_object_size(err), 5, "message, type, param, code, attempts");
    cr_assert_str_eq(sget(err, "message"), "The compute device failed; 1 attempt. The request "
                                           "was not completed; it may be retried.");
    json_decref(e);

    /* A device that could not be reset: the message does not invite a retry. */
    few.unrecovered = true;
    body = api_device_error_body(&few);
    e = parse_event(api_sse_frame(body));
    free(body);
    cr_assert_str_eq(sget(json_object_get(e, "error"), "message"),
                     "The compute device failed; 1 attempt. The request was not completed and "
                     "the device could not be reset.");
    json_decref(e);
}

/* The worker's struct maps onto it as documented; the code is the state's name in
 * lower case. */
MCD_TEST(chat_errors, device_error_from_the_engine)
{
    struct eng_device_error ed;
    eng_device_error_init(&ed, ENG_ERT_ERROR, ENG_PHASE_DECODE);
    ed.chunk_index = 2;
    ed.chunk_count = 3;
    ed.layer_begin = 42; /* the head runlist: no layers */
    ed.layer_end = 42;
    ed.token_pos = 57;
    ed.n_tokens = 1;
    ed.elapsed_ms = 3.7;
    eng_device_error_set_device(&ed, "sim");
    struct api_device_error ad;
    api_chat_device_error(&ed, true, &ad);
    json_t *ours = api_device_error_json(&ad);
    cr_assert_not_null(ours);
    json_t *err = json_object_get(ours, "error");
    cr_assert_str_eq(sget(err, "code"), "ert_cmd_state_error");
    /* The head runlist was reported as layer_first 42, layer_last 41. */
    cr_assert_null(json_object_get(err, "layer_first"));
    cr_assert_null(json_object_get(err, "layer_last"));
    json_t *want = json_pack("{s:i, s:s, s:i, s:i, s:i, s:s, s:i, s:s}", "ert_state", 5, "phase",
                             "decode", "chunk_index", 2, "chunk_count", 3, "token_pos", 57,
                             "device", "sim", "attempts", 1, "runlist", "head");
    const char *key;
    json_t *v;
    json_object_foreach(want, key, v)
        cr_assert(json_equal(json_object_get(err, key), v), "field %s differs", key);
    json_decref(want);
    cr_assert_str_eq(sget(err, "message"),
                     "The sim device failed with ERT_CMD_STATE_ERROR (state 5) during decode, "
                     "chunk 2 of 3 (the head runlist: final norm and lm_head) at token 57 after "
                     "3 ms; 1 attempt. The request was not completed; it may be retried.");
    json_decref(ours);
    /* A runlist with layers keeps its inclusive range. */
    ed.layer_begin = 21;
    ed.layer_end = 42;
    api_chat_device_error(&ed, true, &ad);
    ours = api_device_error_json(&ad);
    err = json_object_get(ours, "error");
    cr_assert_eq(iget(err, "layer_first"), 21);
    cr_assert_eq(iget(err, "layer_last"), 41);
    cr_assert_null(json_object_get(err, "runlist"));
    json_decref(ours);
}
