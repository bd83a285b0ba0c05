// The conformance double's behaviour: records every call in order and plays the
// failures a test injects (xrt-double.h). Not thread-safe: the bridge is driven
// by one thread, as the worker drives it.
#include "xrt/detail/double.h"
#include "model.h"
#include "xrt-double.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace {

struct dstate {
    std::vector<std::string> log;
    std::string joined;
    int next_id[8] = {0};
    int runlist_limit = 0;
    bool runlists_fail = false;   // every runlist times out at its first run
    int abort_at = -1;
    int hang_at = -1;      // the run executed as this number hangs: the driver's TIMEOUT
    int new_after = -1;    // the first wait once this run number was handed out: NEW
    int unexpected_in = -1, unexpected_state = ERT_CMD_STATE_NEW;
    bool hang = false;
    int late_waits = 0;    // waits that time out before the device finishes
    int fail_alloc = -1;
    std::string fail_load;
    bool fail_device = false;
    int executed = 0;      // runs handed to the "device" since the reset
    int completed = 0;
    bool model = false;    // runs compute (the functional model, model.h)
    int run_us = 0;        // each completing run also takes this long (an NPU's time)
    std::vector<std::string> xclbins;   // by xclbin id
    std::string model_error;            // the last run the model refused
};

dstate &S()
{
    static dstate s;
    return s;
}

enum { ID_XCLBIN, ID_CTX, ID_BO, ID_KERNEL, ID_RUN, ID_LIST, ID_DEV };

int new_id(int kind)
{
    return S().next_id[kind]++;
}

void rec(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void rec(const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    // A daemon on the functional model runs for ever: keep the log bounded (no
    // test reads past the first lines of a short run).
    if (S().log.size() >= 200000)
        S().log.clear();
    S().log.emplace_back(buf);
}

// Counts down a wait-based fault; true when this wait is the one.
bool unexpected_now()
{
    dstate &s = S();
    if (s.new_after >= 0 && s.executed > s.new_after) {
        s.new_after = -1;
        s.unexpected_state = ERT_CMD_STATE_NEW;
        return true;
    }
    if (s.unexpected_in < 0)
        return false;
    if (s.unexpected_in-- == 0)
        return true;
    return false;
}

void hang_for(const std::chrono::milliseconds &t)
{
    auto d = t.count() <= 0 || t.count() > 200 ? std::chrono::milliseconds(200) : t;
    std::this_thread::sleep_for(d);
}

} // namespace

namespace xrt {
class run_impl;
}

namespace {
// What the run computed: COMPLETED, TIMEOUT (the model says it would hang) or
// ERROR (a transfer outside its buffer, a stream the model cannot read).
ert_cmd_state compute(xrt::run_impl &r);
} // namespace

namespace xrt {

class xclbin_impl {
public:
    int id;
    std::string path;
};

class device_impl {
public:
    int id;
};

class hw_context_impl {
public:
    int id;
    std::string xclbin;
};

class bo_impl {
public:
    int id;
    std::vector<unsigned char> mem;
};

class kernel_impl {
public:
    int id;
    std::shared_ptr<hw_context_impl> ctx;
};

class run_impl {
public:
    int id;
    std::shared_ptr<kernel_impl> k;
    std::shared_ptr<bo_impl> bos[16];
    long long scalars[16] = {0};
    runlist_impl *list = nullptr;
    bool started = false;
    ert_cmd_state st = ERT_CMD_STATE_NEW;
};

class runlist_impl {
public:
    int id;
    std::shared_ptr<hw_context_impl> ctx;
    std::vector<std::shared_ptr<run_impl>> runs;
    std::vector<xrt::run> run_objs;
    bool executing = false;
    ert_cmd_state st = ERT_CMD_STATE_COMPLETED;
    // The failure this execution ends in, decided at execute().
    int fail_at = -1;
    ert_cmd_state fail_state = ERT_CMD_STATE_COMPLETED;
};

} // namespace xrt

namespace {
ert_cmd_state compute(xrt::run_impl &r)
{
    dstate &s = S();
    if (s.run_us > 0)   // the host waits while the device works: it sleeps
        std::this_thread::sleep_for(std::chrono::microseconds(s.run_us));
    if (!s.model)
        return ERT_CMD_STATE_COMPLETED;
    const xrt::bo_impl *instr = r.bos[1].get();
    size_t n_words = static_cast<size_t>(r.scalars[2]);
    if (!instr || n_words * 4 > instr->mem.size()) {
        s.model_error = "model: run without its instruction buffer";
        rec("model run#%d -> %s", r.id, s.model_error.c_str());
        return ERT_CMD_STATE_ERROR;
    }
    xm_buf bufs[13];
    int n = 0;
    for (int i = 3; i < 16 && r.bos[i]; i++, n++)
        bufs[n] = xm_buf{r.bos[i]->mem.data(), r.bos[i]->mem.size()};
    std::vector<uint32_t> words(n_words);
    std::memcpy(words.data(), instr->mem.data(), n_words * 4);
    char err[256] = "";
    int rc = xmodel_run(r.k->ctx->xclbin.c_str(), words.data(), n_words, bufs, n, err,
                        sizeof err);
    if (rc == 0)
        return ERT_CMD_STATE_COMPLETED;
    s.model_error = err;
    rec("model run#%d -> %s", r.id, err);
    return rc == -ETIMEDOUT ? ERT_CMD_STATE_TIMEOUT : ERT_CMD_STATE_ERROR;
}
} // namespace

namespace xrt {

// ---- xclbin, device, hw_context ------------------------------------------------

xclbin::xclbin(const std::string &filename)
{
    dstate &s = S();
    if (!s.fail_load.empty() && filename.find(s.fail_load) != std::string::npos) {
        rec("xclbin(%s) -> throw", filename.c_str());
        throw std::runtime_error("Failed to load xclbin '" + filename + "': bad magic");
    }
    handle = std::make_shared<xclbin_impl>();
    handle->id = new_id(ID_XCLBIN);
    handle->path = filename;
    s.xclbins.push_back(filename);
    rec("xclbin#%d(%s)", handle->id, filename.c_str());
}

uuid xclbin::get_uuid() const
{
    return uuid(static_cast<unsigned>(1000 + handle->id));
}

device::device(unsigned int didx)
{
    if (S().fail_device) {
        rec("device(%u) -> throw", didx);
        throw std::runtime_error("No devices found");
    }
    handle = std::make_shared<device_impl>();
    handle->id = new_id(ID_DEV);
    rec("device(%u)", didx);
}

uuid device::register_xclbin(const xrt::xclbin &x)
{
    rec("register_xclbin(xclbin#%d) -> uuid %u", x.get_handle()->id, x.get_uuid().value());
    return x.get_uuid();
}

hw_context::hw_context(const xrt::device &, const xrt::uuid &xclbin_id)
{
    handle = std::make_shared<hw_context_impl>();
    handle->id = new_id(ID_CTX);
    unsigned x = xclbin_id.value() - 1000;
    if (x < S().xclbins.size())
        handle->xclbin = S().xclbins[x];
    rec("hw_context#%d(uuid %u)", handle->id, xclbin_id.value());
}

// ---- buffers ---------------------------------------------------------------------

static std::shared_ptr<bo_impl> alloc(size_t sz)
{
    dstate &s = S();
    if (s.fail_alloc >= 0 && s.fail_alloc-- == 0) {
        rec("bo(size=%zu) -> throw", sz);
        throw std::system_error(ENOMEM, std::generic_category(),
                                "DRM_IOCTL_AMDXDNA_CREATE_BO failed");
    }
    auto b = std::make_shared<bo_impl>();
    b->id = new_id(ID_BO);
    b->mem.assign(sz, 0xa5);   // XRT's memory is not zeroed: the bridge must zero it
    return b;
}

bo::bo(const xrt::device &, size_t sz, bo::flags f, memory_group grp)
{
    handle = alloc(sz);
    rec("bo#%d(size=%zu, flags=%s, group=%u)", handle->id, sz,
        f == flags::cacheable ? "cacheable" : f == flags::host_only ? "host_only" : "normal", grp);
}

ext::bo::bo(const xrt::device &, size_t sz) : xrt::bo(alloc(sz))
{
    rec("ext::bo#%d(size=%zu)", get_handle()->id, sz);
}

size_t bo::size() const
{
    return handle->mem.size();
}

void bo::sync(xclBOSyncDirection dir, size_t sz, size_t offset)
{
    if (offset + sz > handle->mem.size())
        throw std::runtime_error("bo::sync: out of range");
    rec("bo#%d.sync(%s, %zu, %zu)", handle->id,
        dir == XCL_BO_SYNC_BO_TO_DEVICE ? "to_device" : "from_device", sz, offset);
}

void *bo::map()
{
    return handle->mem.data();
}

// ---- kernel and run ----------------------------------------------------------------

kernel::kernel(const xrt::hw_context &ctx, const std::string &name)
{
    handle = std::make_shared<kernel_impl>();
    handle->id = new_id(ID_KERNEL);
    handle->ctx = ctx.get_handle();
    rec("kernel#%d(ctx#%d, %s)", handle->id, ctx.get_handle()->id, name.c_str());
}

int kernel::group_id(int argno) const
{
    int g = 100 + argno;   // distinct from any index, so the test can tell
    rec("kernel#%d.group_id(%d) -> %d", handle->id, argno, g);
    return g;
}

run::command_error::command_error(ert_cmd_state s, const std::string &what)
    : m_state(s), m_what(what)
{
}

run::run(const kernel &krnl)
{
    handle = std::make_shared<run_impl>();
    handle->id = new_id(ID_RUN);
    handle->k = krnl.get_handle();
    rec("run#%d(kernel#%d, ctx#%d)", handle->id, krnl.get_handle()->id,
        krnl.get_handle()->ctx->id);
}

void run::set_arg_at_index(int index, const void *value, size_t bytes)
{
    long long v = 0;
    if (bytes == 4) {
        int32_t i;
        std::memcpy(&i, value, 4);
        v = i;
    } else if (bytes == 8) {
        int64_t i;
        std::memcpy(&i, value, 8);
        v = i;
    }
    if (index >= 0 && index < 16)
        handle->scalars[index] = v;
    rec("run#%d.set_arg(%d, scalar%zu %lld)", handle->id, index, bytes * 8, v);
}

void run::set_arg_at_index(int index, const xrt::bo &b)
{
    if (index >= 0 && index < 16)
        handle->bos[index] = b.get_handle();
    rec("run#%d.set_arg(%d, bo#%d)", handle->id, index, b.get_handle()->id);
}

void run::start()
{
    if (handle->list)
        throw std::runtime_error("run is part of a runlist: start() is unsupported");
    rec("run#%d.start()", handle->id);
    handle->started = true;
    dstate &s = S();
    int i = s.executed++;
    handle->st = s.abort_at == i  ? ERT_CMD_STATE_ABORT
                 : s.hang_at == i ? ERT_CMD_STATE_TIMEOUT
                                  : ERT_CMD_STATE_COMPLETED;
}

std::cv_status run::wait2(const std::chrono::milliseconds &timeout) const
{
    rec("run#%d.wait2(%lld ms)", handle->id, static_cast<long long>(timeout.count()));
    if (unexpected_now()) {
        handle->st = static_cast<ert_cmd_state>(S().unexpected_state);
        throw std::runtime_error("qds_device::wait() unexpected command state");
    }
    if (S().hang || (S().late_waits > 0 && S().late_waits--)) {
        hang_for(timeout);
        return std::cv_status::timeout;
    }
    if (!handle->started)
        return std::cv_status::no_timeout;
    handle->started = false;
    if (handle->st == ERT_CMD_STATE_COMPLETED)
        handle->st = compute(*handle);
    if (handle->st != ERT_CMD_STATE_COMPLETED) {
        char msg[96];
        std::snprintf(msg, sizeof msg, "Command failed to complete successfully (%s)",
                      handle->st == ERT_CMD_STATE_ABORT     ? "ERT_CMD_STATE_ABORT"
                      : handle->st == ERT_CMD_STATE_TIMEOUT ? "ERT_CMD_STATE_TIMEOUT"
                                                            : "ERT_CMD_STATE_ERROR");
        throw command_error(handle->st, msg);
    }
    S().completed++;
    return std::cv_status::no_timeout;
}

ert_cmd_state run::state() const
{
    return handle->st;
}

// ---- runlist -------------------------------------------------------------------------

runlist::command_error::command_error(const xrt::run &r, ert_cmd_state s, const std::string &what)
    : m_run(r), m_state(s), m_what(what)
{
}

xrt::detail::span<const uint32_t> runlist::aie_error::data() const
{
    return xrt::detail::span<const uint32_t>(m_words.data(), m_words.size());
}

runlist::runlist(const xrt::hw_context &hwctx)
{
    handle = std::make_shared<runlist_impl>();
    handle->id = new_id(ID_LIST);
    handle->ctx = hwctx.get_handle();
    rec("runlist#%d(ctx#%d)", handle->id, hwctx.get_handle()->id);
}

runlist::~runlist()
{
    if (!handle)
        return;
    rec("runlist#%d.~runlist()%s", handle->id, handle->executing ? " while executing" : "");
    for (auto &r : handle->runs)
        r->list = nullptr;
}

void runlist::add(const xrt::run &r)
{
    auto ri = r.get_handle();
    if (ri->k->ctx != handle->ctx) {
        rec("runlist#%d.add(run#%d) -> throw (other hw_context)", handle->id, ri->id);
        throw std::runtime_error("runlist: run object's kernel is from another hw_context");
    }
    if (ri->list) {
        rec("runlist#%d.add(run#%d) -> throw (already in a runlist)", handle->id, ri->id);
        throw std::runtime_error("runlist: run object is already part of a runlist");
    }
    if (handle->executing)
        throw std::runtime_error("runlist must be idle before adding run objects, current "
                                 "state: running");
    ri->list = handle.get();
    handle->runs.push_back(ri);
    handle->run_objs.push_back(r);
    rec("runlist#%d.add(run#%d)", handle->id, ri->id);
}

void runlist::add(xrt::run &&r)
{
    add(static_cast<const xrt::run &>(r));
}

void runlist::execute()
{
    if (handle->executing)
        throw std::runtime_error("runlist is already executing");
    rec("runlist#%d.execute(n=%zu)", handle->id, handle->runs.size());
    dstate &s = S();
    handle->executing = !handle->runs.empty();
    handle->fail_at = -1;
    handle->fail_state = ERT_CMD_STATE_COMPLETED;
    int n = static_cast<int>(handle->runs.size());
    int first = s.executed;
    s.executed += n;
    if (s.runlists_fail && n > 0) {
        handle->fail_at = 0;
        handle->fail_state = ERT_CMD_STATE_TIMEOUT;
    } else if (s.runlist_limit > 0 && n > s.runlist_limit) {
        handle->fail_at = s.runlist_limit;
        handle->fail_state = ERT_CMD_STATE_TIMEOUT;
    } else if (s.hang_at >= first && s.hang_at < first + n) {
        handle->fail_at = s.hang_at - first;
        handle->fail_state = ERT_CMD_STATE_TIMEOUT;
    } else if (s.abort_at >= first && s.abort_at < first + n) {
        handle->fail_at = s.abort_at - first;
        handle->fail_state = ERT_CMD_STATE_ABORT;
    }
}

std::cv_status runlist::wait(const std::chrono::milliseconds &timeout) const
{
    rec("runlist#%d.wait(%lld ms)", handle->id, static_cast<long long>(timeout.count()));
    if (!handle->executing)
        return std::cv_status::no_timeout;
    if (unexpected_now()) {
        handle->executing = false;
        handle->st = static_cast<ert_cmd_state>(S().unexpected_state);
        throw std::runtime_error("qds_device::wait() unexpected command state");
    }
    if (S().hang || (S().late_waits > 0 && S().late_waits--)) {
        hang_for(timeout);
        return std::cv_status::timeout;
    }
    handle->executing = false;          // XRT sets the list idle before throwing
    // The device walks the list in order up to the failing run; the model's own
    // refusal (a run that would hang) ends it there too.
    int upto = handle->fail_at < 0 ? static_cast<int>(handle->runs.size()) : handle->fail_at;
    for (int i = 0; i < upto; i++) {
        ert_cmd_state r = compute(*handle->runs[i]);
        if (r != ERT_CMD_STATE_COMPLETED) {
            handle->fail_at = i;
            handle->fail_state = r;
            break;
        }
    }
    if (handle->fail_at < 0) {
        handle->st = ERT_CMD_STATE_COMPLETED;
        S().completed += static_cast<int>(handle->runs.size());
        return std::cv_status::no_timeout;
    }
    S().completed += handle->fail_at;
    handle->st = handle->fail_state;
    const xrt::run &bad = handle->run_objs[handle->fail_at];
    if (handle->fail_state == ERT_CMD_STATE_TIMEOUT) {
        // XRT >= 2.21.68 text plus amend_aie_error_message's health lines.
        aie_error e(bad, ERT_CMD_STATE_TIMEOUT,
                    "runlist failed execution (ERT_CMD_STATE_TIMEOUT)\n"
                    "Kernel Instance: MLIR_AIE\nELF File: \nELF UUID: \n"
                    "txn_op_idx = 0x2a\nctx_pc = 0x1f40\nfatal_error_type = 0x0\n"
                    "fatal_error_exception_type = 0x0\nfatal_error_exception_pc = 0x0\n"
                    "fatal_error_app_module = 0x0\n");
        e.m_words = {0x2a, 0x1f40, 0, 0, 0, 0};
        throw e;
    }
    throw command_error(bad, handle->fail_state,
                        handle->fail_state == ERT_CMD_STATE_ABORT
                            ? "runlist failed execution (ERT_CMD_STATE_ABORT)"
                            : "runlist failed execution (ERT_CMD_STATE_ERROR)");
}

ert_cmd_state runlist::state() const
{
    if (handle->executing)
        return ERT_CMD_STATE_RUNNING;
    return handle->st;
}

void runlist::reset()
{
    if (handle->executing) {
        rec("runlist#%d.reset() -> throw (executing)", handle->id);
        throw std::runtime_error("The runlist is submitted for execution and cannot be reset. "
                                 "Please use wait() to ensure that all commands have completed "
                                 "before calling reset()");
    }
    rec("runlist#%d.reset()", handle->id);
    for (auto &r : handle->runs)
        r->list = nullptr;
    handle->runs.clear();
    handle->run_objs.clear();
}

} // namespace xrt

// ---- control ---------------------------------------------------------------------------

extern "C" {

void xrtdbl_reset(void)
{
    bool model = S().model;
    int run_us = S().run_us;
    S() = dstate{};
    S().model = model;
    S().run_us = run_us;
}

void xrtdbl_set_run_us(int us)
{
    S().run_us = us;
}

void xrtdbl_set_model(bool on)
{
    S().model = on;
}

const char *xrtdbl_model_error(void)
{
    return S().model_error.c_str();
}

const char *xrtdbl_log(void)
{
    dstate &s = S();
    s.joined.clear();
    for (auto &l : s.log) {
        s.joined += l;
        s.joined += '\n';
    }
    return s.joined.c_str();
}

size_t xrtdbl_log_lines(void)
{
    return S().log.size();
}

const char *xrtdbl_log_line(size_t i)
{
    return i < S().log.size() ? S().log[i].c_str() : nullptr;
}

void xrtdbl_set_runlist_limit(int n)
{
    S().runlist_limit = n;
}

void xrtdbl_set_hang_at(int i)
{
    S().hang_at = i;
}

void xrtdbl_set_new_after(int i)
{
    S().new_after = i;
}

void xrtdbl_set_runlists_fail(bool on)
{
    S().runlists_fail = on;
}

void xrtdbl_set_abort_at(int i)
{
    S().abort_at = i;
}

void xrtdbl_set_unexpected_state(int n, int st)
{
    S().unexpected_in = n;
    S().unexpected_state = st;
}

void xrtdbl_set_late(int n)
{
    S().late_waits = n;
}

void xrtdbl_set_hang(bool on)
{
    S().hang = on;
}

void xrtdbl_set_fail_alloc(int n)
{
    S().fail_alloc = n;
}

void xrtdbl_set_fail_load(const char *substr)
{
    S().fail_load = substr ? substr : "";
}

void xrtdbl_set_fail_device(bool on)
{
    S().fail_device = on;
}

int xrtdbl_runs_completed(void)
{
    return S().completed;
}

} // extern "C"
