// bridge.cpp — the one C++17 translation unit that calls XRT (see bridge.h).
//
// Modelled on the public headers of XRT 2.18 (202420.2.18.*; runlist in
// <experimental/xrt_kernel.h>) and XRT HEAD 963c58ee22 (runlist in
// <xrt/experimental/xrt_kernel.h>, moved by 07f11f25af): xrt::device(unsigned),
// device::register_xclbin(const xrt::xclbin&) -> xrt::uuid, xrt::xclbin(const
// std::string&), xrt::hw_context(const xrt::device&, const xrt::uuid&),
// xrt::kernel(const xrt::hw_context&, const std::string&), kernel::group_id(int),
// xrt::bo(const xrt::device&, size_t, xrt::bo::flags, xrt::memory_group),
// xrt::ext::bo(const xrt::device&, size_t), bo::map/sync/size, xrt::run(const
// xrt::kernel&), run::set_arg/start/wait2(ms), xrt::runlist(const
// xrt::hw_context&), runlist::add/execute/wait(ms)/state/reset, and the exceptions
// xrt::runlist::command_error / aie_error, xrt::run::command_error (/ aie_error
// where the headers have it). Facts: docs/npu-xrt.md §1, docs/npu-kernels.md §3, §6.
//
// Every entry point catches everything: no exception crosses into C.

#include "engine/device/xrt/bridge.h"

#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>
#if __has_include(<xrt/xrt_hw_context.h>)
#include <xrt/xrt_hw_context.h>
#else
#include <xrt/experimental/xrt_hw_context.h>
#endif
#if __has_include(<xrt/experimental/xrt_kernel.h>)   // XRT >= 2.20 layout
#include <xrt/experimental/xrt_kernel.h>
#include <xrt/experimental/xrt_ext.h>
#include <xrt/experimental/xrt_xclbin.h>
#else                                                 // XRT 2.17 .. 2.19 layout
#include <experimental/xrt_ext.h>
#include <experimental/xrt_kernel.h>
#include <experimental/xrt_xclbin.h>
#endif

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

// meson defines these from compile checks against the XRT it found; the double
// has all of them.
#ifndef XRTB_HAVE_RUNLIST
#define XRTB_HAVE_RUNLIST 1
#endif
#ifndef XRTB_HAVE_RUNLIST_AIE_ERROR
#define XRTB_HAVE_RUNLIST_AIE_ERROR 1
#endif
#ifndef XRTB_HAVE_RUN_AIE_ERROR
#define XRTB_HAVE_RUN_AIE_ERROR 0
#endif
#ifndef XRTB_VERSION_TEXT
#define XRTB_VERSION_TEXT "XRT"
#endif

// engine/ert.h's numbering is XRT's, value for value (docs/npu-xrt.md §1c).
static_assert(ERT_CMD_STATE_NEW == 1 && ERT_CMD_STATE_QUEUED == 2 && ERT_CMD_STATE_RUNNING == 3 &&
                  ERT_CMD_STATE_COMPLETED == 4 && ERT_CMD_STATE_ERROR == 5 &&
                  ERT_CMD_STATE_ABORT == 6 && ERT_CMD_STATE_SUBMITTED == 7 &&
                  ERT_CMD_STATE_TIMEOUT == 8 && ERT_CMD_STATE_NORESPONSE == 9 &&
                  ERT_CMD_STATE_SKERROR == 10 && ERT_CMD_STATE_SKCRASHED == 11,
              "ert_cmd_state differs from engine/ert.h");

namespace {

using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// The one kernel name of an mlir-aie xclbin (docs/npu-kernels.md §3.2, §10).
const char *const kKernelName = "MLIR_AIE";

struct context {
    xrt::hw_context ctx;
};

struct kernel {
    int ctx;
    xrt::kernel k;
    xrt::bo instr;
    size_t n_words;
};

struct run_rec {
    int kernel;
    std::vector<int> bos;
    xrt::run run;
    int list = -1;          // index of the runlist holding it, -1 = none
    bool in_flight = false; // started alone and not known to be finished
};

#if XRTB_HAVE_RUNLIST
struct list_rec {
    std::vector<int> runs;            // empty = free slot
    std::unique_ptr<xrt::runlist> rl;
    bool executing = false;           // execute()d, final state not yet seen
};
#endif

void say(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void say(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// XRT's cmd_state_to_string, for messages of XRT < 2.21.68 that lack it.
const char *state_name(int s)
{
    static const char *const names[] = {
        "ERT_CMD_STATE_UNKNOWN",  "ERT_CMD_STATE_NEW",      "ERT_CMD_STATE_QUEUED",
        "ERT_CMD_STATE_RUNNING",  "ERT_CMD_STATE_COMPLETED", "ERT_CMD_STATE_ERROR",
        "ERT_CMD_STATE_ABORT",    "ERT_CMD_STATE_SUBMITTED", "ERT_CMD_STATE_TIMEOUT",
        "ERT_CMD_STATE_NORESPONSE", "ERT_CMD_STATE_SKERROR", "ERT_CMD_STATE_SKCRASHED",
    };
    return s >= 1 && s <= 11 ? names[s] : names[0];
}

// The first line of an exception's text, cut to fit a message.
std::string first_line(const char *what)
{
    std::string s = what ? what : "";
    size_t nl = s.find('\n');
    if (nl != std::string::npos)
        s.resize(nl);
    if (s.size() > 100)
        s.resize(100);
    return s;
}

// "name = 0x1f" in the context-health lines XRT appends to a TIMEOUT message
// (docs/npu-xrt.md §1a, aie_error_message_v1).
bool health_word(const char *what, const char *name, uint32_t *out)
{
    const char *p = what ? std::strstr(what, name) : nullptr;
    if (!p)
        return false;
    p += std::strlen(name);
    while (*p == ' ' || *p == '=' || *p == ':')
        p++;
    char *end = nullptr;
    unsigned long v = std::strtoul(p, &end, 0);
    if (end == p)
        return false;
    *out = static_cast<uint32_t>(v);
    return true;
}

void set_health(xrtb_status *st, const char *what, size_t n_words)
{
    st->n_health = static_cast<int>(n_words);
    bool a = health_word(what, "txn_op_idx", &st->txn_op_idx);
    bool b = health_word(what, "ctx_pc", &st->ctx_pc);
    health_word(what, "fatal_error_type", &st->fatal_error_type);
    st->has_health = a || b;
}

} // namespace

struct xrtb_dev {
    xrtb_opts opts{};
    xrt::device device;
    std::deque<context> contexts;
    std::deque<kernel> kernels;
    std::deque<xrt::bo> bos;
    std::deque<run_rec> runs;         // stable addresses: runs outlive any runlist
    std::vector<xrt::run> graveyard;  // runs abandoned by xrtb_reset while in flight
#if XRTB_HAVE_RUNLIST
    std::vector<list_rec> lists;
    std::vector<std::unique_ptr<xrt::runlist>> list_graveyard;
#endif
    bool use_runlist = false;
};

namespace {

void finish_status(xrtb_status *st, int state, int failed, const std::string &msg)
{
    st->state = state;
    st->failed = failed;
    std::snprintf(st->message, sizeof st->message, "%s", msg.c_str());
}

// Index in `group` of the run XRT names, -1 when it is none of them.
int find_run(xrtb_dev *d, const std::vector<int> &group, const xrt::run &r)
{
    for (size_t i = 0; i < group.size(); i++)
        if (d->runs[group[i]].run.get_handle() == r.get_handle())
            return static_cast<int>(i);
    return -1;
}

struct canceller {
    bool (*stop)(const void *);
    const void *arg;
};

// Wait in slices so that the cancel flag is seen; `wait` returns true when the
// awaited object completed (throws on failure, as XRT does). A wait that ends
// otherwise says why in st (host_timeout or cancelled).
template <typename Wait>
int wait_sliced(Wait wait, int timeout_ms, const canceller &cancel, xrtb_status *st)
{
    auto t0 = steady::now();
    for (;;) {
        long left = 50;
        if (timeout_ms > 0) {
            long spent =
                static_cast<long>(std::chrono::duration_cast<ms>(steady::now() - t0).count());
            if (spent >= timeout_ms) {
                // Late or hung? One more wait before anyone resets anything.
                if (wait(ms(XRTB_LATE_MS))) {   // a failure throws, as above
                    st->late = true;
                    return ERT_CMD_STATE_COMPLETED;
                }
                st->host_timeout = true;
                return ERT_CMD_STATE_TIMEOUT;
            }
            left = std::min<long>(left, timeout_ms - spent);
        }
        if (wait(ms(left)))
            return ERT_CMD_STATE_COMPLETED;
        if (cancel.stop && cancel.stop(cancel.arg)) {
            st->cancelled = true;
            return ERT_CMD_STATE_ABORT;
        }
    }
}

#if XRTB_HAVE_RUNLIST
void drop_list(xrtb_dev *d, int li)
{
    list_rec &l = d->lists[li];
    for (int r : l.runs)
        d->runs[r].list = -1;
    if (l.executing)        // never destroy a list the device may still walk
        d->list_graveyard.push_back(std::move(l.rl));
    l.rl.reset();
    l.runs.clear();
    l.executing = false;
}

// The runlist holding exactly `group` (one hw_context), built if needed.
list_rec &list_for(xrtb_dev *d, const std::vector<int> &group)
{
    int have = d->runs[group[0]].list;
    if (have >= 0 && d->lists[have].runs == group)
        return d->lists[have];
    for (int r : group)
        if (d->runs[r].list >= 0)
            drop_list(d, d->runs[r].list);
    size_t li = 0;
    while (li < d->lists.size() && !d->lists[li].runs.empty())
        li++;
    if (li == d->lists.size())
        d->lists.emplace_back();
    list_rec &l = d->lists[li];
    const kernel &k = d->kernels[d->runs[group[0]].kernel];
    l.rl = std::make_unique<xrt::runlist>(d->contexts[k.ctx].ctx);
    for (int r : group) {
        l.rl->add(d->runs[r].run);
        d->runs[r].list = static_cast<int>(li);
    }
    l.runs = group;
    return l;
}

// A fresh xrt::run for rr: its kernel, the arguments every kernel of the set takes
// (opcode, instruction BO, word count), then rr's BOs. Throws as XRT does.
xrt::run new_run(xrtb_dev *d, const run_rec &rr)
{
    kernel &kk = d->kernels[rr.kernel];
    xrt::run run(kk.k);
    run.set_arg(0, static_cast<int>(XRTB_OPCODE));
    run.set_arg(1, kk.instr);
    run.set_arg(2, static_cast<int>(kk.n_words));
    for (size_t i = 0; i < rr.bos.size(); i++)
        run.set_arg(3 + static_cast<int>(i), d->bos[rr.bos[i]]);
    return run;
}

// A run the device may still be walking goes to the graveyard (never destroyed
// under the device) and rr gets a fresh one. 0 or -EIO.
int replace_stuck_run(xrtb_dev *d, run_rec &rr, char *err, size_t errlen)
{
    d->graveyard.push_back(rr.run);
    try {
        rr.run = new_run(d, rr);
    } catch (const std::exception &e) {
        say(err, errlen, "reset: cannot recreate a run: %s", first_line(e.what()).c_str());
        return -EIO;
    }
    return 0;
}

// One runlist: execute, wait. Returns the state; fills st on failure.
int submit_list(xrtb_dev *d, const std::vector<int> &group, int timeout_ms,
                const canceller &cancel, xrtb_status *st)
{
    list_rec *lp = nullptr;
    try {
        list_rec &l = list_for(d, group);
        lp = &l;
        l.rl->execute();
        l.executing = true;
        st->n_submissions++;
        xrt::runlist *rl = l.rl.get();
        int s = wait_sliced([rl](ms t) { return rl->wait(t) == std::cv_status::no_timeout; },
                            timeout_ms, cancel, st);
        if (s == ERT_CMD_STATE_COMPLETED) {
            l.executing = false;
            return s;
        }
        char msg[160];
        if (st->host_timeout)
            std::snprintf(msg, sizeof msg,
                          "hung: a runlist of %zu runs did not finish in %d + %d ms (still "
                          "running)", group.size(), timeout_ms, XRTB_LATE_MS);
        else
            std::snprintf(msg, sizeof msg, "wait on a runlist of %zu runs cancelled",
                          group.size());
        finish_status(st, s, -1, msg);
        return s;
    }
#if XRTB_HAVE_RUNLIST_AIE_ERROR
    catch (const xrt::runlist::aie_error &e) {
        if (lp)
            lp->executing = false;     // XRT sets the list idle before it throws
        int s = static_cast<int>(e.get_command_state());
        int at = find_run(d, group, e.get_run());
        auto words = e.data();
        set_health(st, e.what(), words.size());
        char msg[160];
        std::snprintf(msg, sizeof msg, "%s [%s, run %d of %zu]", first_line(e.what()).c_str(),
                      state_name(s), at, group.size());
        finish_status(st, s, at, msg);
        return s;
    }
#endif
    catch (const xrt::runlist::command_error &e) {
        if (lp)
            lp->executing = false;
        int s = static_cast<int>(e.get_command_state());
        int at = find_run(d, group, e.get_run());
        set_health(st, e.what(), 0);
        char msg[160];
        std::snprintf(msg, sizeof msg, "%s [%s, run %d of %zu]", first_line(e.what()).c_str(),
                      state_name(s), at, group.size());
        finish_status(st, s, at, msg);
        return s;
    }
    catch (const std::bad_alloc &) {
        finish_status(st, ERT_CMD_STATE_ERROR, -1, "out of memory building a runlist");
        return ERT_CMD_STATE_ERROR;
    }
    catch (const std::runtime_error &e) {
        // "qds_device::wait() unexpected command state" (docs/npu-xrt.md §1a): the
        // shim finished the command while its packet says NEW/QUEUED/RUNNING. Ask
        // the list which state it is in; it answers without throwing.
        int s = ERT_CMD_STATE_ERROR;
        bool unexpected = std::strstr(e.what(), "unexpected command state") != nullptr;
        if (unexpected) {
            s = ERT_CMD_STATE_RUNNING;
            if (lp && lp->rl) {
                try {
                    int q = static_cast<int>(lp->rl->state());
                    if (q == ERT_CMD_STATE_NEW || q == ERT_CMD_STATE_QUEUED ||
                        q == ERT_CMD_STATE_RUNNING || q == ERT_CMD_STATE_SUBMITTED)
                        s = q;
                } catch (...) {
                }
            }
        }
        char msg[160];
        std::snprintf(msg, sizeof msg, "%s [%s, runlist of %zu runs]",
                      first_line(e.what()).c_str(), state_name(s), group.size());
        finish_status(st, s, -1, msg);
        return s;
    }
    catch (const std::exception &e) {
        finish_status(st, ERT_CMD_STATE_ERROR, -1, std::string("runlist: ") + first_line(e.what()));
        return ERT_CMD_STATE_ERROR;
    }
    catch (...) {
        finish_status(st, ERT_CMD_STATE_ERROR, -1, "runlist: unknown exception");
        return ERT_CMD_STATE_ERROR;
    }
}
#endif

// One run alone: start, wait2 (throws xrt::run::command_error on a bad state).
int submit_one(xrtb_dev *d, int r, int index, int timeout_ms, const canceller &cancel,
               xrtb_status *st)
{
    run_rec &rr = d->runs[r];
    try {
        rr.run.start();
        rr.in_flight = true;
        st->n_submissions++;
        xrt::run *run = &rr.run;
        int s = wait_sliced([run](ms t) { return run->wait2(t) == std::cv_status::no_timeout; },
                            timeout_ms, cancel, st);
        if (s == ERT_CMD_STATE_COMPLETED) {
            rr.in_flight = false;
            return s;
        }
        char msg[160];
        bool to = st->host_timeout;
        if (to)
            std::snprintf(msg, sizeof msg, "hung: run %d did not finish in %d + %d ms (still "
                          "running)", index, timeout_ms, XRTB_LATE_MS);
        else
            std::snprintf(msg, sizeof msg, "wait on run %d cancelled", index);
        finish_status(st, s, index, msg);
        return s;
    }
#if XRTB_HAVE_RUN_AIE_ERROR
    catch (const xrt::run::aie_error &e) {
        rr.in_flight = false;
        int s = static_cast<int>(e.get_command_state());
        set_health(st, e.what(), e.data().size());
        finish_status(st, s, index, first_line(e.what()) + " [" + state_name(s) + "]");
        return s;
    }
#endif
    catch (const xrt::run::command_error &e) {
        rr.in_flight = false;
        int s = static_cast<int>(e.get_command_state());
        set_health(st, e.what(), 0);
        finish_status(st, s, index, first_line(e.what()) + " [" + state_name(s) + "]");
        return s;
    }
    catch (const std::runtime_error &e) {
        bool unexpected = std::strstr(e.what(), "unexpected command state") != nullptr;
        int s = ERT_CMD_STATE_ERROR;
        if (unexpected) {
            s = ERT_CMD_STATE_RUNNING;
            try {
                int q = static_cast<int>(rr.run.state());
                if (q == ERT_CMD_STATE_NEW || q == ERT_CMD_STATE_QUEUED ||
                    q == ERT_CMD_STATE_RUNNING || q == ERT_CMD_STATE_SUBMITTED)
                    s = q;
            } catch (...) {
            }
        }
        finish_status(st, s, index, first_line(e.what()) + " [" + state_name(s) + "]");
        return s;
    }
    catch (const std::exception &e) {
        finish_status(st, ERT_CMD_STATE_ERROR, index, std::string("run: ") + first_line(e.what()));
        return ERT_CMD_STATE_ERROR;
    }
    catch (...) {
        finish_status(st, ERT_CMD_STATE_ERROR, index, "run: unknown exception");
        return ERT_CMD_STATE_ERROR;
    }
}

// Setup calls share one catch-all: exceptions become -errno + a line.
template <typename F>
int guarded(char *err, size_t errlen, const char *what, F f)
{
    try {
        return f();
    } catch (const std::bad_alloc &) {
        say(err, errlen, "%s: out of memory", what);
        return -ENOMEM;
    } catch (const std::system_error &e) {
        say(err, errlen, "%s: %s", what, first_line(e.what()).c_str());
        int c = e.code().value();
        return c > 0 ? -c : -EIO;
    } catch (const std::exception &e) {
        say(err, errlen, "%s: %s", what, first_line(e.what()).c_str());
        return -EIO;
    } catch (...) {
        say(err, errlen, "%s: unknown exception", what);
        return -EIO;
    }
}

} // namespace

extern "C" {

const char *xrtb_version(void)
{
    return XRTB_VERSION_TEXT;
}

int xrtb_open(const struct xrtb_opts *o, xrtb_dev **out, char *err, size_t errlen)
{
    *out = nullptr;
    return guarded(err, errlen, "xrt::device", [&]() {
        auto d = std::make_unique<xrtb_dev>();
        if (o)
            d->opts = *o;
        d->device = xrt::device(d->opts.device_index);
        d->use_runlist = XRTB_HAVE_RUNLIST && !d->opts.no_runlist;
        *out = d.release();
        return 0;
    });
}

void xrtb_close(xrtb_dev *d)
{
    if (!d)
        return;
    char err[8];
    xrtb_reset(d, 2000, err, sizeof err);
    try {
        delete d;
    } catch (...) {
    }
}

int xrtb_context(xrtb_dev *d, const char *xclbin_path, int *out, char *err, size_t errlen)
{
    std::string what = std::string("xclbin ") + xclbin_path;
    return guarded(err, errlen, what.c_str(), [&]() {
        xrt::xclbin xcl(std::string{xclbin_path});
        xrt::uuid uuid = d->device.register_xclbin(xcl);
        d->contexts.push_back(context{xrt::hw_context(d->device, uuid)});
        *out = static_cast<int>(d->contexts.size() - 1);
        return 0;
    });
}

int xrtb_kernel(xrtb_dev *d, int ctx, const uint32_t *words, size_t n_words, int *out, char *err,
                size_t errlen)
{
    if (ctx < 0 || static_cast<size_t>(ctx) >= d->contexts.size() || !n_words) {
        say(err, errlen, "kernel: bad context %d or empty instruction stream", ctx);
        return -EINVAL;
    }
    return guarded(err, errlen, "kernel MLIR_AIE", [&]() {
        xrt::kernel k(d->contexts[ctx].ctx, std::string{kKernelName});
        // The instruction BO: cacheable, in the memory group of arg 1
        // (docs/npu-kernels.md §3.2, §10).
        xrt::bo instr(d->device, n_words * sizeof(uint32_t), xrt::bo::flags::cacheable,
                      static_cast<xrt::memory_group>(k.group_id(1)));
        std::memcpy(instr.map<uint32_t *>(), words, n_words * sizeof(uint32_t));
        instr.sync(XCL_BO_SYNC_BO_TO_DEVICE);
        d->kernels.push_back(kernel{ctx, k, instr, n_words});
        *out = static_cast<int>(d->kernels.size() - 1);
        return 0;
    });
}

uint32_t *xrtb_kernel_insts(xrtb_dev *d, int k, size_t *n_words)
{
    if (k < 0 || static_cast<size_t>(k) >= d->kernels.size())
        return nullptr;
    try {
        *n_words = d->kernels[k].n_words;
        return d->kernels[k].instr.map<uint32_t *>();
    } catch (...) {
        return nullptr;
    }
}

int xrtb_kernel_sync(xrtb_dev *d, int k, char *err, size_t errlen)
{
    if (k < 0 || static_cast<size_t>(k) >= d->kernels.size())
        return -EINVAL;
    return guarded(err, errlen, "instruction BO sync", [&]() {
        d->kernels[k].instr.sync(XCL_BO_SYNC_BO_TO_DEVICE);
        return 0;
    });
}

int xrtb_bo(xrtb_dev *d, size_t bytes, int *out, char *err, size_t errlen)
{
    size_t size = (bytes + XRTB_BO_ALIGN - 1) / XRTB_BO_ALIGN * XRTB_BO_ALIGN;
    if (!size)
        size = XRTB_BO_ALIGN;
    char what[64];
    std::snprintf(what, sizeof what, "buffer of %zu bytes", size);
    return guarded(err, errlen, what, [&]() {
        // xrt::ext::bo is assigned to an xrt::bo before use (xrt_ext.h).
        xrt::bo bo = xrt::ext::bo(d->device, size);
        std::memset(bo.map(), 0, size);
        d->bos.push_back(bo);
        *out = static_cast<int>(d->bos.size() - 1);
        return 0;
    });
}

void *xrtb_bo_map(xrtb_dev *d, int bo)
{
    if (bo < 0 || static_cast<size_t>(bo) >= d->bos.size())
        return nullptr;
    try {
        return d->bos[bo].map();
    } catch (...) {
        return nullptr;
    }
}

size_t xrtb_bo_size(xrtb_dev *d, int bo)
{
    if (bo < 0 || static_cast<size_t>(bo) >= d->bos.size())
        return 0;
    try {
        return d->bos[bo].size();
    } catch (...) {
        return 0;
    }
}

int xrtb_bo_sync(xrtb_dev *d, int bo, bool to_device, size_t size, size_t offset, char *err,
                 size_t errlen)
{
    if (bo < 0 || static_cast<size_t>(bo) >= d->bos.size())
        return -EINVAL;
    return guarded(err, errlen, "buffer sync", [&]() {
        xrt::bo &b = d->bos[bo];
        b.sync(to_device ? XCL_BO_SYNC_BO_TO_DEVICE : XCL_BO_SYNC_BO_FROM_DEVICE,
               size ? size : b.size(), offset);
        return 0;
    });
}

int xrtb_run(xrtb_dev *d, int k, const int *bos, int n_bos, int *out, char *err, size_t errlen)
{
    if (k < 0 || static_cast<size_t>(k) >= d->kernels.size() || n_bos < 0 ||
        n_bos > XRTB_MAX_BUFS) {
        say(err, errlen, "run: bad kernel %d or %d buffer arguments (at most %d)", k, n_bos,
            XRTB_MAX_BUFS);
        return -EINVAL;
    }
    for (int i = 0; i < n_bos; i++)
        if (bos[i] < 0 || static_cast<size_t>(bos[i]) >= d->bos.size()) {
            say(err, errlen, "run: bad buffer %d", bos[i]);
            return -EINVAL;
        }
    return guarded(err, errlen, "run", [&]() {
        run_rec rr;
        rr.kernel = k;
        rr.bos.assign(bos, bos + n_bos);
        rr.run = new_run(d, rr);
        d->runs.push_back(std::move(rr));
        *out = static_cast<int>(d->runs.size() - 1);
        return 0;
    });
}

void xrtb_submit(xrtb_dev *d, const int *runs, int n, int timeout_ms,
                 bool (*stop)(const void *stop_arg), const void *stop_arg,
                 struct xrtb_status *st)
{
    const canceller cancel{stop, stop_arg};
    *st = xrtb_status{};
    st->state = ERT_CMD_STATE_COMPLETED;
    st->failed = -1;
    for (int i = 0; i < n; i++)
        if (runs[i] < 0 || static_cast<size_t>(runs[i]) >= d->runs.size()) {
            finish_status(st, ERT_CMD_STATE_ERROR, i, "submit: unknown run");
            return;
        }
    int base = 0;
    while (base < n) {
        // The next group: consecutive runs of one hw_context.
        int ctx = d->kernels[d->runs[runs[base]].kernel].ctx;
        int end = base + 1;
        while (end < n && d->kernels[d->runs[runs[end]].kernel].ctx == ctx)
            end++;
        std::vector<int> group(runs + base, runs + end);
        int s;
#if XRTB_HAVE_RUNLIST
        if (d->use_runlist) {
            s = submit_list(d, group, timeout_ms, cancel, st);
            if (s != ERT_CMD_STATE_COMPLETED) {
                if (st->failed >= 0)
                    st->failed += base;
                return;
            }
            base = end;
            continue;
        }
#endif
        for (int i = base; i < end; i++) {
            s = submit_one(d, runs[i], i, timeout_ms, cancel, st);
            if (s != ERT_CMD_STATE_COMPLETED)
                return;
        }
        base = end;
    }
}

void xrtb_set_runlist(xrtb_dev *d, bool on)
{
#if XRTB_HAVE_RUNLIST
    // A run that sits in a runlist cannot be started alone: release the idle
    // lists' runs (a list still executing stays, and xrtb_reset deals with it).
    if (!on && d->use_runlist)
        for (size_t li = 0; li < d->lists.size(); li++) {
            list_rec &l = d->lists[li];
            if (l.runs.empty() || l.executing)
                continue;
            try {
                l.rl->reset();
            } catch (...) {
            }
            drop_list(d, static_cast<int>(li));
        }
#endif
    d->use_runlist = XRTB_HAVE_RUNLIST && on;
}

bool xrtb_uses_runlist(const xrtb_dev *d)
{
    return d->use_runlist;
}

int xrtb_reset(xrtb_dev *d, int wait_ms, char *err, size_t errlen)
{
    int stuck = 0;
#if XRTB_HAVE_RUNLIST
    for (size_t li = 0; li < d->lists.size(); li++) {
        list_rec &l = d->lists[li];
        if (l.runs.empty())
            continue;
        if (l.executing) {
            // A host timeout or a cancel left it running: wait it out (XRT resets
            // a list to idle only once its last chain ends, docs/npu-xrt.md §1a).
            try {
                if (l.rl->wait(ms(wait_ms > 0 ? wait_ms : 1)) == std::cv_status::no_timeout)
                    l.executing = false;
            } catch (...) {
                l.executing = false;   // it ended, in a failure: idle again
            }
        }
        if (l.executing) {
            // Still walking: leave list and runs to the graveyard and give the
            // layers fresh run objects.
            stuck++;
            for (int r : l.runs)
                if (replace_stuck_run(d, d->runs[r], err, errlen) != 0)
                    return -EIO;
            drop_list(d, static_cast<int>(li));
            continue;
        }
        try {
            l.rl->reset();
        } catch (...) {
        }
        drop_list(d, static_cast<int>(li));
    }
#endif
    for (run_rec &rr : d->runs) {
        if (!rr.in_flight)
            continue;
        try {
            if (rr.run.wait2(ms(wait_ms > 0 ? wait_ms : 1)) == std::cv_status::no_timeout)
                rr.in_flight = false;
        } catch (...) {
            rr.in_flight = false;
        }
        if (rr.in_flight) {
            stuck++;
            if (replace_stuck_run(d, rr, err, errlen) != 0)
                return -EIO;
            rr.in_flight = false;
        }
    }
    if (stuck)
        say(err, errlen, "%d submission(s) still running after %d ms; abandoned", stuck, wait_ms);
    return 0;
}

} // extern "C"
