/* The real bridge (engine/device/xrt/bridge.cpp) and backend
 * (engine/device/xrt/dev-xrt.c) on the XRT conformance double (tests/xrt/double):
 * the recorded call sequence of decode steps with K = all / 21 / 1, the load order
 * and the buffers.
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

/* ---- the bridge on the conformance double: call sequences ------------------------ */

struct parsed {
    int run_ctx[512];       /* run id -> ctx id */
    int list_ctx[512];      /* runlist id -> ctx id */
    int instr_bo[16];       /* kernel id -> its instruction BO */
    int kern_words[16];
};

static void parse_log(struct parsed *p)
{
    memset(p, -1, sizeof *p);
    int last_group_kernel = -1;
    for (size_t i = 0; i < xrtdbl_log_lines(); i++) {
        const char *l = xrtdbl_log_line(i);
        int a, b, c, g;
        size_t sz;
        if (sscanf(l, "run#%d(kernel#%d, ctx#%d)", &a, &b, &c) == 3)
            p->run_ctx[a] = c;
        else if (sscanf(l, "runlist#%d(ctx#%d)", &a, &b) == 2)
            p->list_ctx[a] = b;
        else if (sscanf(l, "kernel#%d.group_id(1) -> %d", &a, &g) == 2)
            last_group_kernel = a;
        else if (sscanf(l, "bo#%d(size=%zu, flags=cacheable, group=%d)", &a, &sz, &g) == 3) {
            cr_assert_geq(last_group_kernel, 0, "an instruction BO before any group_id(1)");
            cr_assert_eq(g, 101, "the instruction BO is not in the group of arg 1: %s", l);
            p->instr_bo[last_group_kernel] = a;
            p->kern_words[last_group_kernel] = (int)(sz / 4);
        }
    }
}

/* Args 0-2 of every run: opcode 3, its kernel's instruction BO, its word count; and
 * every runlist only holds runs of its own hw_context. */
static void check_runs_and_contexts(void)
{
    struct parsed p;
    parse_log(&p);
    int runs = 0;
    for (size_t i = 0; i < xrtdbl_log_lines(); i++) {
        const char *l = xrtdbl_log_line(i);
        int r, k, c, bo;
        long long v;
        cr_assert_null(strstr(l, "-> throw"), "unexpected failure: %s", l);
        if (sscanf(l, "run#%d(kernel#%d, ctx#%d)", &r, &k, &c) == 3) {
            runs++;
            const char *a0 = xrtdbl_log_line(i + 1), *a1 = xrtdbl_log_line(i + 2),
                       *a2 = xrtdbl_log_line(i + 3);
            cr_assert(a0 && a1 && a2);
            cr_assert_eq(sscanf(a0, "run#%*d.set_arg(0, scalar32 %lld)", &v), 1, "%s", a0);
            cr_assert_eq(v, 3, "arg 0 is the opcode 3: %s", a0);
            cr_assert_eq(sscanf(a1, "run#%*d.set_arg(1, bo#%d)", &bo), 1, "%s", a1);
            cr_assert_eq(bo, p.instr_bo[k], "arg 1 is the kernel's instruction BO: %s", a1);
            cr_assert_eq(sscanf(a2, "run#%*d.set_arg(2, scalar32 %lld)", &v), 1, "%s", a2);
            cr_assert_eq(v, p.kern_words[k], "arg 2 is the word count: %s", a2);
        }
        int L;
        if (sscanf(l, "runlist#%d.add(run#%d)", &L, &r) == 2)
            cr_assert_eq(p.list_ctx[L], p.run_ctx[r], "run %d added to a runlist of another "
                         "hw_context", r);
    }
    cr_assert_gt(runs, 0);
}

/* From log line `from`: the executes, each waited (a wait that returned) before the
 * next execute; returns the executes' sizes in order. */
static int executes_since(size_t from, int *sizes, int max)
{
    int n = 0, open_list = -1;
    for (size_t i = from; i < xrtdbl_log_lines(); i++) {
        const char *l = xrtdbl_log_line(i);
        int L, k;
        if (sscanf(l, "runlist#%d.execute(n=%d)", &L, &k) == 2) {
            cr_assert_eq(open_list, -1, "runlist %d executed before runlist %d was waited for",
                         L, open_list);
            cr_assert_lt(n, max);
            sizes[n++] = k;
            open_list = L;
        } else if (strstr(l, ".wait(") && sscanf(l, "runlist#%d.wait(", &L) == 1) {
            cr_assert_eq(L, open_list, "wait on a runlist that is not the one executing");
            open_list = -1;
        }
    }
    cr_assert_eq(open_list, -1, "a runlist was never waited for");
    return n;
}

static void decode_sequence(int k, int want_layer_lists, int want_size)
{
    xrtdbl_reset();
    eng_pack *p = open_pack("deep");
    struct eng_device *d = open_double(p, kset_dir("deep", "ok", NULL), 0, false);
    check_runs_and_contexts();
    struct step s;
    step_init(&s, d, p, k);
    struct eng_run_result res;
    for (int t = 0; t < 2; t++) {
        size_t from = xrtdbl_log_lines();
        cr_assert_eq(decode(&s, d, 5 + t, NULL, &res), 0, "%s", res.message);
        int sizes[64];
        int n = executes_since(from, sizes, 64);
        /* the layer chunks, then ln and lm: each on its own context */
        cr_assert_eq(n, want_layer_lists + 2, "K=%d: %d submissions", k, n);
        int layers = 0;
        for (int i = 0; i < want_layer_lists; i++) {
            cr_assert_eq(sizes[i], i + 1 < want_layer_lists ? want_size : sizes[i]);
            layers += sizes[i];
        }
        cr_assert_eq(layers, 42);
        cr_assert_eq(sizes[n - 2], 1);
        cr_assert_eq(sizes[n - 1], 1);
        /* runlists are kept: the second token builds none */
        if (t == 1)
            for (size_t i = from; i < xrtdbl_log_lines(); i++) {
                int L, c;
                cr_assert_neq(sscanf(xrtdbl_log_line(i), "runlist#%d(ctx#%d)", &L, &c), 2,
                              "token 2 built a runlist: %s", xrtdbl_log_line(i));
            }
        /* the attnpos patch: once per token (one sync of dx's instruction BO) */
        struct parsed pp;
        parse_log(&pp);
        char needle[64];
        snprintf(needle, sizeof needle, "bo#%d.sync(to_device", pp.instr_bo[0]);
        size_t syncs = 0;
        for (size_t i = from; i < xrtdbl_log_lines(); i++)
            syncs += strstr(xrtdbl_log_line(i), needle) != NULL;
        cr_assert_eq(syncs, 1, "K=%d: the instruction patch was synced %zu times", k, syncs);
        /* logits come back from the device */
        cr_assert_geq(count_lines("from_device"), (size_t)(t + 1));
    }
    step_deinit(&s, d);
    eng_device_free(d);
    eng_pack_free(p);
}

MCD_TEST(sequence, k_all_one_runlist_of_42)
{
    decode_sequence(ENG_PLAN_ALL, 1, 42);
}

MCD_TEST(sequence, k_21_two_runlists_waited_in_turn)
{
    decode_sequence(21, 2, 21);
}

MCD_TEST(sequence, k_1_one_runlist_per_layer)
{
    decode_sequence(1, 42, 1);
}

MCD_TEST(sequence, load_order_and_buffers)
{
    xrtdbl_reset();
    eng_pack *p = open_pack("deep");
    struct eng_device *d = open_double(p, kset_dir("deep", "ok", NULL), 0, false);
    /* device first, then per xclbin: load, register, hw_context */
    cr_assert(strstr(xrtdbl_log_line(0), "device(0)"), "%s", xrtdbl_log_line(0));
    cr_assert_eq(count_lines("register_xclbin("), 3);
    cr_assert_eq(count_lines("hw_context#"), 3);
    cr_assert_eq(count_lines("flags=cacheable"), 3, "one instruction BO per kernel");
    /* data BOs: 4 per layer + the 8 globals, each 1 MB-aligned */
    cr_assert_eq(count_lines("ext::bo#"), 42 * 4 + 8);
    for (size_t i = 0; i < xrtdbl_log_lines(); i++) {
        size_t sz;
        int b;
        if (sscanf(xrtdbl_log_line(i), "ext::bo#%d(size=%zu)", &b, &sz) == 2)
            cr_assert_eq(sz % (1u << 20), 0);
    }
    cr_assert_eq(count_lines("(kernel#"), 42 + 2, "one run per layer and per tail step");
    cr_assert_eq(eng_device_default_k(d), 21, "42 layers -> two runlists of 21");
    cr_assert_eq(eng_device_max_batch(d), 1);
    cr_assert_str_eq(eng_device_get_name(d), "xrt");
    eng_device_free(d);
    eng_pack_free(p);
}
