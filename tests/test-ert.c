/* ERT states (engine/ert.h): XRT's numbering and names, value for value, the API
 * codes, parsing every accepted spelling, and the structured device error as
 * JSON and as a message. */
#include "engine/ert.h"
#include "tests/check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* XRT's enum ert_cmd_state (docs/npu-xrt.md §1c: Debian 2.13 /usr/include/xrt/ert.h
 * and XRT HEAD src/runtime_src/core/include/xrt/detail/ert.h L738-766). Written out
 * here independently of ert.c. */
static const struct {
    int value;
    const char *name;
} xrt[] = {
    {1, "ERT_CMD_STATE_NEW"},       {2, "ERT_CMD_STATE_QUEUED"},   {3, "ERT_CMD_STATE_RUNNING"},
    {4, "ERT_CMD_STATE_COMPLETED"}, {5, "ERT_CMD_STATE_ERROR"},    {6, "ERT_CMD_STATE_ABORT"},
    {7, "ERT_CMD_STATE_SUBMITTED"}, {8, "ERT_CMD_STATE_TIMEOUT"},  {9, "ERT_CMD_STATE_NORESPONSE"},
    {10, "ERT_CMD_STATE_SKERROR"},  {11, "ERT_CMD_STATE_SKCRASHED"},
};
#define N_XRT (sizeof xrt / sizeof xrt[0])

MCD_TEST(ert, numbering_matches_xrt)
{
    cr_assert_eq(ENG_ERT_NEW, 1);
    cr_assert_eq(ENG_ERT_QUEUED, 2);
    cr_assert_eq(ENG_ERT_RUNNING, 3);
    cr_assert_eq(ENG_ERT_COMPLETED, 4);
    cr_assert_eq(ENG_ERT_ERROR, 5);
    cr_assert_eq(ENG_ERT_ABORT, 6);
    cr_assert_eq(ENG_ERT_SUBMITTED, 7);
    cr_assert_eq(ENG_ERT_TIMEOUT, 8);
    cr_assert_eq(ENG_ERT_NORESPONSE, 9);
    cr_assert_eq(ENG_ERT_SKERROR, 10);
    cr_assert_eq(ENG_ERT_SKCRASHED, 11);
    for (size_t i = 0; i < N_XRT; i++)
        cr_assert_str_eq(eng_ert_name(xrt[i].value), xrt[i].name);
}

MCD_TEST(ert, only_completed_is_success)
{
    for (int s = -2; s <= 14; s++)
        cr_assert_eq(eng_ert_is_success(s), s == 4, "state %d", s);
    /* Not ordered: SUBMITTED (7) and TIMEOUT (8) are above COMPLETED. */
    cr_assert(!eng_ert_is_success(ENG_ERT_SUBMITTED));
}

MCD_TEST(ert, out_of_range)
{
    int bad[] = {0, -1, 12, 100, -2147483647 - 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert(!eng_ert_valid(bad[i]));
        cr_assert_str_eq(eng_ert_name(bad[i]), "ERT_CMD_STATE_UNKNOWN");
    }
}

MCD_TEST(ert, parse_every_spelling_round_trips)
{
    for (size_t i = 0; i < N_XRT; i++) {
        const char *full = xrt[i].name;
        const char *shortname = full + strlen("ERT_CMD_STATE_");
        char lower_short[32], lower_full[64], mixed[64], num[8];
        size_t n = strlen(shortname);
        for (size_t j = 0; j <= n; j++)
            lower_short[j] = (char)(shortname[j] >= 'A' && shortname[j] <= 'Z' ? shortname[j] + 32
                                                                                : shortname[j]);
        snprintf(lower_full, sizeof lower_full, "ert_cmd_state_%s", lower_short);
        snprintf(mixed, sizeof mixed, "Ert_Cmd_State_%s", lower_short);
        snprintf(num, sizeof num, "%d", xrt[i].value);
        const char *forms[] = {full, shortname, lower_short, lower_full, mixed, num};
        for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
            enum eng_ert_state st = 0;
            cr_assert_eq(eng_ert_parse(forms[f], &st), 0, "parse \"%s\"", forms[f]);
            cr_assert_eq((int)st, xrt[i].value, "parse \"%s\"", forms[f]);
        }
        /* name -> parse -> name */
        enum eng_ert_state st;
        cr_assert_eq(eng_ert_parse(eng_ert_name(xrt[i].value), &st), 0);
        cr_assert_str_eq(eng_ert_name(st), full);
    }
}

MCD_TEST(ert, parse_rejects)
{
    const char *bad[] = {"", "0", "12", "99", "-1", "+8", " 8", "8 ", "TIMEOUT ", " TIMEOUT",
                         "TIME", "TIMEOUTS", "ERT_CMD_STATE_", "ERT_CMD_STATE", "ERT_CMD_STATE_MAX",
                         "MAX", "UNKNOWN", "ert_cmd_state_unknown", "8x", "0x8",
                         "99999999999999999999", "ERT_CMD_STATE_ERT_CMD_STATE_TIMEOUT"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        enum eng_ert_state st = ENG_ERT_NEW;
        cr_assert_eq(eng_ert_parse(bad[i], &st), -EINVAL, "\"%s\" accepted", bad[i]);
        cr_assert_eq(st, ENG_ERT_NEW, "output touched on error");
    }
    enum eng_ert_state st;
    cr_assert_eq(eng_ert_parse(NULL, &st), -EINVAL);
    cr_assert_eq(eng_ert_parse("08", &st), 0);  /* a number with a leading zero is still 8 */
    cr_assert_eq(st, ENG_ERT_TIMEOUT);
}

MCD_TEST(ert, phase_names)
{
    cr_assert_str_eq(eng_phase_name(ENG_PHASE_PREFILL), "prefill");
    cr_assert_str_eq(eng_phase_name(ENG_PHASE_DECODE), "decode");
    cr_assert_str_eq(eng_phase_name(7), "unknown");
}

static struct eng_device_error decode_timeout(void)
{
    struct eng_device_error e;
    eng_device_error_init(&e, ENG_ERT_TIMEOUT, ENG_PHASE_DECODE);
    e.chunk_index = 0;
    e.chunk_count = 2;
    e.layer_begin = 0;
    e.layer_end = 21;
    e.token_pos = 57;
    e.n_tokens = 1;
    e.elapsed_ms = 2003.5;
    e.attempts = 1;
    eng_device_error_set_device(&e, "sim");
    return e;
}

MCD_TEST(ert, device_error_init)
{
    struct eng_device_error e;
    memset(&e, 0x5a, sizeof e);
    eng_device_error_init(&e, ENG_ERT_ABORT, ENG_PHASE_PREFILL);
    cr_assert_eq(e.state, ENG_ERT_ABORT);
    cr_assert_eq(e.phase, ENG_PHASE_PREFILL);
    cr_assert_eq(e.failed_layer, -1);
    cr_assert_eq(e.prefill_chunk_index, -1);
    cr_assert_eq(e.prefill_chunk_count, 0);
    cr_assert_eq(e.attempts, 1);
    cr_assert_str_eq(e.device, "");
}

MCD_TEST(ert, device_name_is_truncated)
{
    struct eng_device_error e = decode_timeout();
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    eng_device_error_set_device(&e, longname);
    cr_assert_eq(strlen(e.device), sizeof e.device - 1);
    eng_device_error_set_device(&e, NULL);
    cr_assert_str_eq(e.device, "");
}

MCD_TEST(ert, device_error_message)
{
    struct eng_device_error e = decode_timeout();
    char buf[512];
    eng_device_error_format(&e, buf, sizeof buf);
    cr_assert_str_eq(buf, "device sim: runlist ended in ERT_CMD_STATE_TIMEOUT (decode, runlist 1 of 2, "
                          "layers 0-20, token position 57, after 2004 ms, attempt 1)");
    eng_device_error_init(&e, ENG_ERT_ABORT, ENG_PHASE_PREFILL);
    e.chunk_index = 2;
    e.chunk_count = 3;
    e.layer_begin = e.layer_end = 42;
    e.prefill_chunk_index = 1;
    e.prefill_chunk_count = 2;
    e.failed_layer = -1;
    eng_device_error_format(&e, buf, sizeof buf);
    cr_assert(strstr(buf, "ERT_CMD_STATE_ABORT (prefill, runlist 3 of 3 of prompt chunk 2 of 2, no layers"),
              "%s", buf);
    cr_assert_null(strchr(buf, '\n'));
    /* A short buffer truncates, never overflows. */
    char tiny[8];
    int n = eng_device_error_format(&e, tiny, sizeof tiny);
    cr_assert_gt(n, 8);
    cr_assert_eq(strlen(tiny), 7);
}
