/* The real bridge and backend on the XRT conformance double: the ERT state and
 * message of every failure the double injects (runlist limit, abort, unexpected
 * state, hang past the host timeout, cancel), recovery, the one-run-at-a-time
 * fallback, and allocation, load and open failures.
 *
 * Packs come from minicpmd-pack gen (MINICPMD_PACK) and stand-in kernel sets from
 * tests/xrt/mkkset.py (MINICPMD_MKKSET), under MINICPMD_TEST_WORK (tests/xrt/xrt-fx.h). */
#include "engine/device/device.h"
#include "engine/worker/plan.h"
#include "engine/model/q4nx.h"
#include "engine/model/safetensors.h"
#include "engine/device/xrt/kset.h"
#include "engine/device/xrt/npu-layout.h"
#include "engine/device/xrt/xrt-dev.h"
#include "tests/check.h"
#include "xrt-double.h"
#include "xrt-fx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- failures -> ERT states ------------------------------------------------------- */

static struct eng_device *failing_setup(eng_pack **p, struct step *s, int k, int timeout_ms,
                                        bool no_runlist)
{
    xrtdbl_reset();
    *p = open_pack("deep");
    struct eng_device *d = open_double(*p, kset_dir("deep", "ok", NULL), timeout_ms, no_runlist);
    step_init(s, d, *p, k);
    return d;
}

static void recover(struct eng_device *d, struct step *s)
{
    char err[256];
    struct eng_run_result res;
    /* a failed device refuses work until reset */
    cr_assert_neq(decode(s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_ERROR);
    cr_assert(strstr(res.message, "needs reset"), "%s", res.message);
    cr_assert_eq(eng_device_reset(d, err, sizeof err), 0, "%s", err);
    eng_device_seq_truncate(d, s->seq, 0);
    cr_assert_eq(decode(s, d, 3, NULL, &res), 0, "after reset: %s", res.message);
}

MCD_TEST(errors, runlist_over_the_limit_times_out_with_health_words)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, ENG_PLAN_ALL, 0, false);
    xrtdbl_set_runlist_limit(24);
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_TIMEOUT);
    cr_assert_eq(res.failed_layer, 24, "the first run over the limit");
    cr_assert(strstr(res.message, "ERT_CMD_STATE_TIMEOUT"), "%s", res.message);
    cr_assert(strstr(res.message, "txn_op_idx=0x2a ctx_pc=0x1f40"), "%s", res.message);
    xrtdbl_set_runlist_limit(0);   /* the firmware "fixed": K = all runs again */
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, k21_passes_under_the_limit_all_does_not)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, false);
    xrtdbl_set_runlist_limit(24);
    struct eng_run_result res;
    cr_assert_eq(decode(&s, d, 3, NULL, &res), 0, "%s", res.message);
    cr_assert_eq(decode(&s, d, 4, NULL, &res), 0, "%s", res.message);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, abort_at_run_i)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, false);
    xrtdbl_set_abort_at(30);   /* run 30 of the step = layer 30, in the second runlist */
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_ABORT);
    cr_assert_eq(res.failed_layer, 30);
    cr_assert(strstr(res.message, "runlist failed execution"), "%s", res.message);
    xrtdbl_set_abort_at(-1);
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, unexpected_command_state)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, false);
    xrtdbl_set_unexpected_state(1, 1 /* NEW */);   /* the second wait: runlist 2 */
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_NEW, "%s", eng_ert_name(res.state));
    cr_assert(strstr(res.message, "qds_device::wait() unexpected command state"), "%s",
              res.message);
    cr_assert_eq(s.plan.runlists[1].layer_begin, 21);
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, hang_past_the_host_timeout)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 120, false);
    xrtdbl_set_hang(true);
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_TIMEOUT);
    cr_assert(strstr(res.message, "did not finish in 120 + 1000 ms"), "%s", res.message);
    cr_assert_geq(res.elapsed_us, 100000);
    /* reset while it still hangs: the list is abandoned, fresh runs are made */
    char err[256];
    size_t runs_before = count_lines("(kernel#");
    cr_assert_eq(eng_device_reset(d, err, sizeof err), 0, "%s", err);
    cr_assert_gt(count_lines("(kernel#"), runs_before, "the stuck list's runs were replaced");
    xrtdbl_set_hang(false);
    eng_device_seq_truncate(d, s.seq, 0);
    cr_assert_eq(decode(&s, d, 3, NULL, &res), 0, "%s", res.message);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

/* A command that finishes within the second wait is late, not hung: the token
 * stands and nothing is reset; one that does not is hung. Both modes. */
MCD_TEST(errors, late_is_told_from_hung)
{
    for (int single = 0; single < 2; single++) {
        eng_pack *p;
        struct step s;
        struct eng_device *d = failing_setup(&p, &s, 21, 120, single);
        xrtdbl_set_late(3);     /* the 120 ms wait sees nothing; the grace second does */
        struct eng_run_result res;
        cr_assert_eq(decode(&s, d, 3, NULL, &res), 0, "late was taken for hung: %s",
                     res.message);
        cr_assert_eq(decode(&s, d, 4, NULL, &res), 0, "%s", res.message);
        step_deinit(&s, d);
        eng_device_free(d);
        eng_pack_free(p);
    }
}

MCD_TEST(errors, cancel_ends_a_hang_in_abort)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, false);
    xrtdbl_set_hang(true);
    atomic_bool cancel = true;
    struct eng_run_result res;
    cr_assert_neq(decode(&s, d, 3, &cancel, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_ABORT);
    cr_assert(strstr(res.message, "cancelled"), "%s", res.message);
    xrtdbl_set_hang(false);
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, one_run_at_a_time_fallback)
{
    eng_pack *p;
    struct step s;
    struct eng_device *d = failing_setup(&p, &s, 21, 0, true);
    size_t from = xrtdbl_log_lines();
    struct eng_run_result res;
    cr_assert_eq(decode(&s, d, 3, NULL, &res), 0, "%s", res.message);
    cr_assert_eq(count_lines("runlist#"), 0, "no runlist without runlists");
    /* each run started, then waited, before the next starts */
    int open_run = -1, started = 0;
    for (size_t i = from; i < xrtdbl_log_lines(); i++) {
        int r;
        const char *l = xrtdbl_log_line(i);
        if (strstr(l, ".start()") && sscanf(l, "run#%d.start()", &r) == 1) {
            cr_assert_eq(open_run, -1);
            open_run = r;
            started++;
        } else if (strstr(l, ".wait2(") && sscanf(l, "run#%d.wait2(", &r) == 1) {
            cr_assert_eq(r, open_run);
            open_run = -1;
        }
    }
    cr_assert_eq(started, 44);
    xrtdbl_set_abort_at(44 + 7);   /* the next step's layer 7 */
    cr_assert_neq(decode(&s, d, 4, NULL, &res), 0);
    cr_assert_eq(res.state, ENG_ERT_ABORT);
    cr_assert_eq(res.failed_layer, 7);
    cr_assert(strstr(res.message, "Command failed to complete successfully"), "%s", res.message);
    xrtdbl_set_abort_at(-1);
    recover(d, &s);
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(errors, allocation_load_and_open_failures)
{
    eng_pack *p = open_pack("deep");
    const char *k = kset_dir("deep", "ok", NULL);
    struct {
        int what;
        const char *want;
    } cases[] = {{0, "buffer of"}, {1, "ln/final.xclbin"}, {2, "cannot open the NPU"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        xrtdbl_reset();
        if (cases[i].what == 0)
            xrtdbl_set_fail_alloc(20);
        else if (cases[i].what == 1)
            xrtdbl_set_fail_load("ln/final.xclbin");
        else
            xrtdbl_set_fail_device(true);
        eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = k, .accel_node = "/dev/null"});
        struct eng_device *d = NULL;
        char err[512] = "";
        cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), 0, "%s", err);
        cr_assert_neq(eng_device_load_model(d, p, err, sizeof err), 0, "case %zu loaded", i);
        cr_assert(strstr(err, cases[i].want), "case %zu: %s", i, err);
        eng_device_free(d);
    }
    /* no device node: refused before anything is opened */
    xrtdbl_reset();
    eng_xrt_configure(&(struct eng_xrt_config){.accel_node = "/nonexistent/accel0"});
    struct eng_device *d = NULL;
    char err[512];
    cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), -ENODEV);
    cr_assert(strstr(err, "no NPU: /nonexistent/accel0 does not exist"), "%s", err);
    cr_assert_eq(xrtdbl_log_lines(), 0);
    /* a mismatched kernel set: refused before the device is touched */
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kset_dir("deep", "badheads",
                                                                       "--set spec.num_heads=3"),
                                               .accel_node = "/dev/null"});
    cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), 0, "%s", err);
    cr_assert_neq(eng_device_load_model(d, p, err, sizeof err), 0);
    cr_assert(strstr(err, "num_heads is 3 in the kernel set"), "%s", err);
    cr_assert_eq(xrtdbl_log_lines(), 0, "the device was touched: %s", xrtdbl_log());
    eng_device_free(d);
    eng_pack_free(p);
}
