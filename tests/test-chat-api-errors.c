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

/* ---- one struct api_err, rendered per surface ------------------------------------------------ */

#include "api/completions.h"
#include "api/ollama.h"
#include "api/responses.h"

/* A parser's refusal renders as the OpenAI error object with its param; the device
 * part only when there is one. */
MCD_TEST(api_err, openai_rendering)
{
    struct api_err e;
    cr_assert_eq(api_refuse(&e, API_ERR_BAD_REQUEST, "stop[1]", "Invalid 'stop[1]': no\n"),
                 -EINVAL);
    cr_assert_eq(api_err_status(&e), 400);
    cr_assert_null(api_err_retry_after(&e));
    json_t *o = parse_str(api_err_body(&e));
    json_t *err = json_object_get(o, "error");
    cr_assert_str_eq(sget(err, "message"), "Invalid 'stop[1]': no ", "one line");
    cr_assert_str_eq(sget(err, "param"), "stop[1]");
    cr_assert_str_eq(sget(err, "type"), "invalid_request_error");
    cr_assert(json_is_null(json_object_get(err, "code")));
    cr_assert_eq(json_object_size(err), 4);
    json_decref(o);

    api_refuse(&e, API_ERR_BUSY, NULL, "busy");
    cr_assert_str_eq(api_err_retry_after(&e), "1");
    o = parse_str(api_err_body(&e));
    cr_assert(json_is_null(json_object_get(json_object_get(o, "error"), "param")));
    cr_assert_str_eq(sget(json_object_get(o, "error"), "code"), "server_busy");
    json_decref(o);

    struct api_device_error d = {.ert_state = 8, .ert_name = "ERT_CMD_STATE_TIMEOUT",
                                 .chunk_index = -1, .chunk_count = -1, .layer_first = -1,
                                 .layer_last = -1, .token_pos = -1, .elapsed_ms = -1,
                                 .device = "sim", .attempts = 1};
    api_err_device(&e, &d);
    cr_assert_eq(e.error, API_ERR_DEVICE_RESET);
    cr_assert_eq(api_err_status(&e), 503);
    cr_assert_str_eq(api_err_retry_after(&e), "1");
    d.unrecovered = true;
    api_err_device(&e, &d);
    cr_assert_eq(api_err_status(&e), 500);
    o = parse_str(api_err_body(&e));
    err = json_object_get(o, "error");
    cr_assert_str_eq(sget(err, "code"), "ert_cmd_state_timeout");
    cr_assert_str_eq(sget(err, "device"), "sim");
    cr_assert_eq(iget(err, "ert_state"), 8);
    json_decref(o);
}

/* An Ollama client reads its own field names: the translated body's max_tokens was
 * its options.num_predict. */
MCD_TEST(api_err, ollama_names_the_clients_fields)
{
    static const char *const pairs[][2] = {
        {"max_tokens", "options.num_predict"},
        {"repetition_penalty", "options.repeat_penalty"},
        {"temperature", "options.temperature"},
        {"stop[1]", "options.stop[1]"},
        {"response_format.json_schema.schema", "format.json_schema.schema"},
        {"reasoning_effort", "think"},
        {"messages[2].reasoning_content", "messages[2].thinking"},
        {"messages[0].name", "messages[0].tool_name"},
        {"messages[1].content", "messages[1].content"},
        {"max_tokens_x", "max_tokens_x"},
        {"prompt", "prompt"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        char out[128];
        api_ollama_param(pairs[i][0], out, sizeof out);
        cr_assert_str_eq(out, pairs[i][1], "%s", pairs[i][0]);
    }
    struct api_err e;
    api_refuse(&e, API_ERR_BAD_REQUEST, "repetition_penalty",
               "Invalid 'repetition_penalty': expected a number above 0, but got -1 instead.");
    json_t *o = parse_str(api_ollama_err_body(&e));
    cr_assert_eq(json_object_size(o), 1);
    cr_assert_str_eq(sget(o, "error"), "Invalid 'options.repeat_penalty': expected a number "
                                       "above 0, but got -1 instead.");
    json_decref(o);
    api_refuse(&e, API_ERR_BAD_REQUEST, "max_tokens",
               "Invalid type for 'max_tokens': expected an integer, but got a string instead.");
    o = parse_str(api_ollama_err_body(&e));
    cr_assert_str_eq(sget(o, "error"), "Invalid type for 'options.num_predict': expected an "
                                       "integer, but got a string instead.");
    json_decref(o);
}

/* Each surface's framing renders the same struct: a stream's last frame, or a body. */
MCD_TEST(api_err, each_surface_frames_it)
{
    struct api_err e;
    api_refuse(&e, API_ERR_BAD_REQUEST, "max_tokens", "Invalid 'max_tokens': too many.");

    /* OpenAI chat (the default framing) and completions: data: {"error":…} / the object */
    struct api_chat_format *cf = api_completion_format_new(NULL, 0, false, 0, false);
    const struct api_chat_format *fmts[] = {NULL, cf};
    for (int i = 0; i < 2; i++) {
        json_t *o = parse_event(api_chat_format_error(fmts[i], &e, true));
        cr_assert_str_eq(sget(json_object_get(o, "error"), "param"), "max_tokens");
        json_decref(o);
        o = parse_str(api_chat_format_error(fmts[i], &e, false));
        cr_assert_str_eq(sget(json_object_get(o, "error"), "message"),
                         "Invalid 'max_tokens': too many.");
        json_decref(o);
    }
    api_completion_format_free(cf->ctx);

    /* Responses: the documented `error` event; a body is the OpenAI object */
    struct api_chat_format *rf = api_responses_format_new(NULL);
    char *ev = api_chat_format_error(rf, &e, true);
    cr_assert_not_null(ev);
    cr_assert_eq(strncmp(ev, "event: error\ndata: ", 19), 0, "%s", ev);
    json_t *o = parse_str(strndup(ev + 19, strlen(ev + 19)));
    cr_assert_str_eq(sget(o, "type"), "error");
    cr_assert_str_eq(sget(o, "param"), "max_tokens");
    cr_assert_str_eq(sget(o, "message"), "Invalid 'max_tokens': too many.");
    cr_assert(json_is_null(json_object_get(o, "code")));
    json_decref(o);
    free(ev);
    o = parse_str(api_chat_format_error(rf, &e, false));
    cr_assert_str_eq(sget(json_object_get(o, "error"), "param"), "max_tokens");
    json_decref(o);
    /* … by the Responses request's names (max_output_tokens became this) */
    struct api_err m;
    api_refuse(&m, API_ERR_BAD_REQUEST, "max_completion_tokens",
               "Invalid 'max_completion_tokens': integer below minimum value.");
    o = parse_str(api_chat_format_error(rf, &m, false));
    cr_assert_str_eq(sget(json_object_get(o, "error"), "param"), "max_output_tokens");
    cr_assert_str_eq(sget(json_object_get(o, "error"), "message"),
                     "Invalid 'max_output_tokens': integer below minimum value.");
    json_decref(o);
    api_responses_format_free(rf->ctx);

    /* Ollama: {"error":…}, one NDJSON line in a stream, its own field names */
    struct api_chat_format *of = api_ollama_format_new(false, "m");
    char *line = api_chat_format_error(of, &e, true);
    cr_assert_not_null(line);
    cr_assert_eq(line[strlen(line) - 1], '\n');
    o = parse_str(line);
    cr_assert_str_eq(sget(o, "error"), "Invalid 'options.num_predict': too many.");
    json_decref(o);
    o = parse_str(api_chat_format_error(of, &e, false));
    cr_assert_str_eq(sget(o, "error"), "Invalid 'options.num_predict': too many.");
    json_decref(o);
    api_ollama_format_free(of->ctx);
}

/* The completions id is its own ("cmpl-" + 32 random), not the chat id renamed. */
MCD_TEST(api_err, completions_id_is_its_own)
{
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", "1", "cpu", false);
    struct api_chat_format *cf = api_completion_format_new(NULL, 0, false, 0, false);
    struct api_chat_result r = {.content = "x"};
    json_t *o = parse_str(cf->body(cf->ctx, &ci, &r));
    const char *id = sget(o, "id");
    cr_assert_eq(strlen(id), 5 + 32);
    cr_assert_eq(strncmp(id, "cmpl-", 5), 0);
    cr_assert_str_neq(id + 5, ci.id + 9);
    /* the same id on every frame of the request */
    json_t *o2 = parse_str(cf->body(cf->ctx, &ci, &r));
    cr_assert_str_eq(sget(o2, "id"), id);
    json_decref(o2);
    json_decref(o);
    api_completion_format_free(cf->ctx);
}
