// The conformance double: exactly the XRT C++ surface engine/device/xrt/bridge.cpp uses,
// with the names and signatures of XRT's public headers, so CI compiles the real
// bridge source against it and runs it without XRT or an NPU.
//
// Signatures follow XRT 2.18 (202420.2.18.*) and HEAD 963c58ee22:
//   xrt/xrt_uuid.h                  class uuid
//   xrt/xrt_device.h                device(unsigned int), register_xclbin(const xclbin&) -> uuid
//   xrt/experimental/xrt_xclbin.h   xclbin(const std::string&), get_uuid()
//   xrt/xrt_hw_context.h            hw_context(const device&, const uuid&)
//   xrt/xrt_bo.h                    memory_group, bo::flags, bo(const device&, size_t, flags,
//                                   memory_group), map(), map<T>(), sync(dir, sz, off),
//                                   sync(dir), size(); enum xclBOSyncDirection (xrt_mem.h)
//   xrt/experimental/xrt_ext.h      ext::bo(const device&, size_t)
//   xrt/xrt_kernel.h                kernel(const hw_context&, const std::string&),
//                                   group_id(int); run(const kernel&), set_arg (template ->
//                                   set_arg_at_index), start(), wait2(ms) -> cv_status,
//                                   state(), get_handle(); run::command_error(state, what)
//   xrt/experimental/xrt_kernel.h   runlist(const hw_context&), add(const run&), add(run&&),
//                                   execute(), wait(ms) -> cv_status, state(), reset();
//                                   runlist::command_error(run, state, what) with get_run(),
//                                   get_command_state(), what(); runlist::aie_error::data()
//                                   -> span<const uint32_t>
//   xrt/detail/ert.h                enum ert_cmd_state (1..11, MAX 12)
// The behaviour follows docs/npu-xrt.md §1a: a runlist is bound to one hw_context
// (add throws otherwise), a run joins one list, wait throws on the first failing
// run and leaves the list idle, a host timeout leaves it executing (reset throws).
//
// Nothing here does any math: runs complete instantly unless a fault says
// otherwise. The control API is tests/xrt/double/xrt-double.h.
#ifndef MINICPMD_XRT_DOUBLE_H
#define MINICPMD_XRT_DOUBLE_H

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

enum ert_cmd_state {
    ERT_CMD_STATE_NEW = 1,
    ERT_CMD_STATE_QUEUED = 2,
    ERT_CMD_STATE_RUNNING = 3,
    ERT_CMD_STATE_COMPLETED = 4,
    ERT_CMD_STATE_ERROR = 5,
    ERT_CMD_STATE_ABORT = 6,
    ERT_CMD_STATE_SUBMITTED = 7,
    ERT_CMD_STATE_TIMEOUT = 8,
    ERT_CMD_STATE_NORESPONSE = 9,
    ERT_CMD_STATE_SKERROR = 10,
    ERT_CMD_STATE_SKCRASHED = 11,
    ERT_CMD_STATE_MAX = 12,
};

enum xclBOSyncDirection {
    XCL_BO_SYNC_BO_TO_DEVICE = 0,
    XCL_BO_SYNC_BO_FROM_DEVICE,
    XCL_BO_SYNC_BO_GMIO_TO_AIE,
    XCL_BO_SYNC_BO_AIE_TO_GMIO,
};

#define XRT_BO_FLAGS_CACHEABLE (1U << 24)
#define XRT_BO_FLAGS_HOST_ONLY (1U << 29)

namespace xrt {

namespace detail {
template <typename T>
class span {
public:
    span(T *p, size_t n) : m_p(p), m_n(n) {}
    T *data() const { return m_p; }
    size_t size() const { return m_n; }
    T &operator[](size_t i) const { return m_p[i]; }
    T *begin() const { return m_p; }
    T *end() const { return m_p + m_n; }

private:
    T *m_p;
    size_t m_n;
};
} // namespace detail

using memory_group = uint32_t;

class uuid {
public:
    uuid() = default;
    explicit uuid(unsigned v) : m_v(v) {}
    unsigned value() const { return m_v; }   // double only
private:
    unsigned m_v = 0;
};

class xclbin_impl;
class xclbin {
public:
    xclbin() = default;
    explicit xclbin(const std::string &filename);
    uuid get_uuid() const;
    const std::shared_ptr<xclbin_impl> &get_handle() const { return handle; }

private:
    std::shared_ptr<xclbin_impl> handle;
};

class device_impl;
class device {
public:
    device() = default;
    explicit device(unsigned int didx);
    uuid register_xclbin(const xrt::xclbin &xclbin);

private:
    std::shared_ptr<device_impl> handle;
};

class hw_context_impl;
class hw_context {
public:
    hw_context() = default;
    hw_context(const xrt::device &device, const xrt::uuid &xclbin_id);
    const std::shared_ptr<hw_context_impl> &get_handle() const { return handle; }

private:
    std::shared_ptr<hw_context_impl> handle;
};

class bo_impl;
class bo {
public:
    enum class flags : uint32_t {
        normal = 0,
        cacheable = XRT_BO_FLAGS_CACHEABLE,
        host_only = XRT_BO_FLAGS_HOST_ONLY,
    };
    bo() = default;
    bo(const xrt::device &device, size_t sz, bo::flags flags, memory_group grp);
    size_t size() const;
    void sync(xclBOSyncDirection dir, size_t sz, size_t offset);
    void sync(xclBOSyncDirection dir) { sync(dir, size(), 0); }
    void *map();
    template <typename MapType>
    MapType map()
    {
        return reinterpret_cast<MapType>(map());
    }
    const std::shared_ptr<bo_impl> &get_handle() const { return handle; }
    explicit bo(std::shared_ptr<bo_impl> impl) : handle(std::move(impl)) {}

private:
    std::shared_ptr<bo_impl> handle;
};

namespace ext {
class bo : public xrt::bo {
public:
    bo(const xrt::device &device, size_t sz);
};
} // namespace ext

class kernel_impl;
class kernel {
public:
    kernel() = default;
    kernel(const xrt::hw_context &ctx, const std::string &name);
    int group_id(int argno) const;
    const std::shared_ptr<kernel_impl> &get_handle() const { return handle; }

private:
    std::shared_ptr<kernel_impl> handle;
};

class run_impl;
class run {
public:
    class command_error : public std::exception {
    public:
        command_error(ert_cmd_state state, const std::string &what);
        ert_cmd_state get_command_state() const { return m_state; }
        const char *what() const noexcept override { return m_what.c_str(); }

    private:
        ert_cmd_state m_state;
        std::string m_what;
    };

    run() = default;
    explicit run(const kernel &krnl);
    void start();
    std::cv_status wait2(const std::chrono::milliseconds &timeout) const;
    ert_cmd_state state() const;

    template <typename ArgType>
    void set_arg(int index, ArgType &&arg)
    {
        set_arg_at_index(index, &arg, sizeof(arg));
    }
    void set_arg(int index, xrt::bo &boh) { set_arg_at_index(index, boh); }
    void set_arg(int index, const xrt::bo &boh) { set_arg_at_index(index, boh); }
    void set_arg(int index, xrt::bo &&boh) { set_arg_at_index(index, boh); }

    const std::shared_ptr<run_impl> &get_handle() const { return handle; }
    explicit operator bool() const { return handle != nullptr; }

private:
    std::shared_ptr<run_impl> handle;
    void set_arg_at_index(int index, const void *value, size_t bytes);
    void set_arg_at_index(int index, const xrt::bo &);
};

class runlist_impl;
class runlist {
public:
    class command_error : public std::exception {
    public:
        command_error(const xrt::run &run, ert_cmd_state state, const std::string &what);
        xrt::run get_run() const { return m_run; }
        ert_cmd_state get_command_state() const { return m_state; }
        const char *what() const noexcept override { return m_what.c_str(); }

    private:
        xrt::run m_run;
        ert_cmd_state m_state;
        std::string m_what;
    };

    class aie_error : public command_error {
        using command_error::command_error;
        template <typename T>
        using span = xrt::detail::span<T>;

    public:
        span<const uint32_t> data() const;
        std::vector<uint32_t> m_words;   // double only: the health words
    };

    runlist() = default;
    explicit runlist(const xrt::hw_context &hwctx);
    ~runlist();
    runlist(const runlist &) = delete;
    runlist &operator=(const runlist &) = delete;
    void add(const xrt::run &run);
    void add(xrt::run &&run);
    void execute();
    std::cv_status wait(const std::chrono::milliseconds &timeout) const;
    void wait() const { wait(std::chrono::milliseconds(0)); }
    ert_cmd_state state() const;
    void reset();

private:
    std::shared_ptr<runlist_impl> handle;
};

} // namespace xrt

#endif
