/* The xrt device's preflight checks in order, and --npu-probe (eng_xrt_probe_run)
 * on the XRT conformance double: the Ks that work are found and the fastest saved.
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

/* ---- preflight and probe -------------------------------------------------------- */

MCD_TEST(preflight, checks_in_order)
{
    char err[700];
    const char *tiny = pack_dir("tiny");
    eng_xrt_configure(&(struct eng_xrt_config){.accel_node = "/nonexistent/accel0"});
    cr_assert_neq(eng_xrt_preflight(tiny, err, sizeof err), 0);
    cr_assert(strstr(err, "no NPU kernel set"), "%s", err);
    eng_xrt_configure(&(struct eng_xrt_config){
        .kernels_dir = kset_dir("tiny", "pf-bad", "--set spec.head_dim=32"),
        .accel_node = "/nonexistent/accel0"});
    cr_assert_neq(eng_xrt_preflight(tiny, err, sizeof err), 0);
    cr_assert(strstr(err, "head_dim is 32"), "%s", err);
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kset_dir("tiny", "pf-ok", NULL),
                                               .accel_node = "/nonexistent/accel0"});
    bool model = strstr(eng_xrt_build_info(), "functional model") != NULL;
    /* -Dxrt_model=true: the functional model needs no device node */
    cr_assert_eq(eng_xrt_preflight(tiny, err, sizeof err) == 0, model, "%s", err);
    if (model)
        ;
    else if (eng_xrt_built())
        cr_assert(strstr(err, "no NPU: /nonexistent/accel0"), "%s", err);
    else
        cr_assert(strstr(err, "this build has no XRT device"), "%s", err);
    /* a context beyond the kernel set's default needs --ctx-size */
    eng_xrt_configure(&(struct eng_xrt_config){
        .kernels_dir = kset_dir("tiny", "pf-ctx", "--max-ctx 1024"),
        .accel_node = "/nonexistent/accel0"});
    cr_assert_neq(eng_xrt_preflight(tiny, err, sizeof err), 0);
    cr_assert(strstr(err, "pass --ctx-size 1024"), "%s", err);
}

MCD_TEST(probe, finds_the_ks_that_work_and_saves_the_fastest)
{
    xrtdbl_reset();
    eng_pack *p = open_pack("deep");
    eng_xrt_configure(&(struct eng_xrt_config){.kernels_dir = kset_dir("deep", "ok", NULL),
                                               .accel_node = "/dev/null"});
    struct eng_device *d = NULL;
    char err[512], state[4096], path[4200];
    cr_assert_eq(eng__device_xrt_double_open(NULL, &d, err, sizeof err), 0, "%s", err);
    xrtdbl_set_runlist_limit(24);
    snprintf(state, sizeof state, "%s/probe-state-%d", work(), (int)getpid());
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    int rc = eng_xrt_probe_run(d, pack_dir("deep"), state, 3, out, err, sizeof err);
    fclose(out);
    cr_assert_eq(rc, 0, "%s\n%s", err, buf);
    cr_assert(strstr(buf, "| all (42) | 2 | ERT_CMD_STATE_TIMEOUT at runlist 0 (layer 24)"), "%s",
              buf);
    cr_assert(strstr(buf, "| 24 | 3 | COMPLETED | 3/3 |"), "%s", buf);
    cr_assert(strstr(buf, "| 1 | 43 | COMPLETED | 3/3 |"), "%s", buf);
    /* then single runs, one xrt::run per dispatch: no runlist executes for them */
    cr_assert(strstr(buf, "| run | 43 | COMPLETED | 3/3 |"), "%s", buf);
    cr_assert(strstr(buf, "saved K = "), "%s", buf);
    int k = 0;
    cr_assert_eq(eng_kstate_path(state, path, sizeof path), 0);
    cr_assert_eq(eng_kstate_load(path, eng_pack_get_info(p)->dir, "xrt", &k, err, sizeof err), 1,
                 "%s", err);
    cr_assert(k >= 1 && k <= 24, "saved K %d", k);
    free(buf);
    eng_device_free(d);
    eng_pack_free(p);
}
