/* server/status: the rings behind GET /v1/status and its JSON. */
#include "server/status.h"

#include "engine/ert.h"

#include "tests/check.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static json_t *render(const srv_status *s, const struct eng_worker_stats *w)
{
    struct srv_status_view v = {.version = "0", .state = "ready", .model_id = "m",
                                .device = "sim", .device_description = "sim: …",
                                .n_ctx = 4096, .worker = w};
    char *txt = srv_status_render(s, &v);
    cr_assert_not_null(txt);
    json_error_t e;
    json_t *j = json_loads(txt, 0, &e);
    cr_assert_not_null(j, "not JSON: %s (%s)", txt, e.text);
    free(txt);
    return j;
}

static void done(srv_status *s, int k, int gen)
{
    struct eng_done_event d = {.finish = ENG_FINISH_LENGTH, .prompt_tokens = 5,
                               .completion_tokens = gen,
                               .timings = {.k = k, .attempts = 1, .decode_tps = 10.5}};
    srv_status_done(s, &d);
}

MCD_TEST(status, recent_and_k_changes_are_bounded_rings)
{
    srv_status *s = srv_status_new();
    cr_assert_not_null(s);
    /* 40 requests; K changes at each 2 of them: 20 changes, then 20 more. */
    for (int i = 0; i < 80; i++)
        done(s, 1 + (i / 2) % 7, i);
    json_t *j = render(s, NULL);
    json_t *recent = json_object_get(j, "recent");
    cr_assert_eq(json_array_size(recent), 16);
    /* oldest first: the last 16 of 80 */
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(recent, 0),
                                                    "completion_tokens")), 64);
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(recent, 15),
                                                    "completion_tokens")), 79);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(recent, 15), "outcome")),
                     "length");
    json_t *hist = json_object_get(json_object_get(j, "k"), "history");
    cr_assert_eq(json_array_size(hist), 32);
    /* only changes: no two neighbours alike, and the last is the last K */
    for (size_t i = 1; i < json_array_size(hist); i++)
        cr_assert_neq(json_integer_value(json_object_get(json_array_get(hist, i), "k")),
                      json_integer_value(json_object_get(json_array_get(hist, i - 1), "k")));
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(hist, 31), "k")),
                 1 + (79 / 2) % 7);
    /* no worker yet: no slots, the K fields null */
    cr_assert_null(json_object_get(j, "slots"));
    cr_assert(json_is_null(json_object_get(json_object_get(j, "k"), "current")));
    cr_assert(json_is_null(json_object_get(j, "last_device_error")));
    json_decref(j);
    srv_status_free(s);
    srv_status_free(NULL);
}

MCD_TEST(status, the_last_device_error_and_the_worker_counters)
{
    srv_status *s = srv_status_new();
    struct eng_error_event e = {.code = -5, .retryable = true, .has_device_error = true,
                                .completion_tokens = 2, .timings = {.k = 21, .attempts = 2}};
    eng_device_error_init(&e.device, ENG_ERT_TIMEOUT, ENG_PHASE_DECODE);
    eng_device_error_set_device(&e.device, "sim");
    e.device.layer_begin = 21;
    e.device.layer_end = 42;
    e.device.chunk_index = 1;
    e.device.chunk_count = 2;
    e.device.attempts = 2;
    srv_status_error(s, &e);
    /* an error that is not the device's leaves the last device error alone */
    struct eng_error_event bad = {.code = -22, .timings = {.decode_tps = INFINITY}};
    srv_status_error(s, &bad);
    struct eng_worker_stats w = {.current_k = 21, .n_layers = 42, .active = 1, .parallel = 4,
                                 .queue_depth = 3, .queue_size = 16, .k_halvings = 1};
    w.runlists_by_state[ENG_ERT_TIMEOUT] = 1;
    w.runlists_by_state[ENG_ERT_COMPLETED] = 99;
    json_t *j = render(s, &w);
    json_t *err = json_object_get(j, "last_device_error");
    cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "ert_cmd_state_timeout");
    cr_assert_eq(json_integer_value(json_object_get(err, "ert_state")), 8);
    cr_assert_eq(json_integer_value(json_object_get(err, "layer_first")), 21);
    cr_assert_eq(json_integer_value(json_object_get(err, "layer_last")), 41);
    cr_assert_str_eq(json_string_value(json_object_get(err, "device")), "sim");
    cr_assert_gt(json_integer_value(json_object_get(err, "t_ms")), 0);
    json_t *recent = json_object_get(j, "recent");
    cr_assert_eq(json_array_size(recent), 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(recent, 0), "outcome")),
                     "error");
    /* a rate over no time is 0, not a number JSON cannot hold */
    cr_assert_eq(json_real_value(json_object_get(json_array_get(recent, 1), "decode_tps")), 0.0);
    json_t *runlists = json_object_get(j, "runlists");
    cr_assert_eq(json_object_size(runlists), ENG_ERT_LAST);
    cr_assert_eq(json_integer_value(json_object_get(runlists, "ERT_CMD_STATE_TIMEOUT")), 1);
    cr_assert_eq(json_integer_value(json_object_get(runlists, "ERT_CMD_STATE_COMPLETED")), 99);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "slots"), "in_use")), 1);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "queue"), "depth")), 3);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "k"), "current")), 21);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "k"), "halvings")), 1);
    json_decref(j);
    srv_status_free(s);
}
