/* Control of the XRT conformance double (tests/xrt/double/xrt/detail/double.h)
 * from C tests: read the recorded call sequence and inject the failures the bridge
 * must map. Everything is process-global; xrtdbl_reset() before each test. */
#ifndef MINICPMD_TESTS_XRT_DOUBLE_CONTROL_H
#define MINICPMD_TESTS_XRT_DOUBLE_CONTROL_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Clear the log, the counters and every injected failure. */
void xrtdbl_reset(void);

/* The call log, one call per line ("runlist#0.execute(n=21)"), and its length. */
const char *xrtdbl_log(void);
size_t xrtdbl_log_lines(void);
/* Line i (0-based), or NULL past the end. Valid until the next call into the double. */
const char *xrtdbl_log_line(size_t i);

/* A runlist of more than n runs never progresses: its wait throws
 * xrt::runlist::aie_error TIMEOUT naming run n (0-based), with health words, as
 * amdxdna's TDR reports it. 0 = no limit. */
void xrtdbl_set_runlist_limit(int n);
/* The run executed as number i (counted as abort_at) hangs: amdxdna's hang
 * detection ends it in TIMEOUT (runlist::aie_error naming it, or run::command_error
 * alone); it computes nothing. -1 = off. */
void xrtdbl_set_hang_at(int i);
/* The first wait after the run numbered i was handed out throws "qds_device::wait()
 * unexpected command state" with the object left in NEW; nothing it waited for
 * computed. -1 = off. */
void xrtdbl_set_new_after(int i);
/* Every runlist, of any length, times out at its first run (as the limit above);
 * runs started alone still complete. */
void xrtdbl_set_runlists_fail(bool on);
/* The run executed as number i (0-based, counted over every submission since the
 * reset) ends in ABORT: runlist::command_error, or run::command_error alone. -1 = off. */
void xrtdbl_set_abort_at(int i);
/* The n-th wait from now (0 = the next) throws the plain std::runtime_error
 * "qds_device::wait() unexpected command state"; the object then reports `state`. */
void xrtdbl_set_unexpected_state(int n, int state);
/* While set, every wait blocks for its whole timeout (up to 200 ms, so tests stay
 * quick) and returns std::cv_status::timeout: a hang past the host timeout. */
void xrtdbl_set_hang(bool on);
/* The next n waits (on whatever is executing) time out, each after its whole
 * timeout (up to 200 ms); then the submission finishes normally: a late command. */
void xrtdbl_set_late(int n);
/* The n-th buffer allocation from now throws std::system_error(ENOMEM). -1 = off. */
void xrtdbl_set_fail_alloc(int n);
/* Loading an xclbin whose path contains `substr` throws std::runtime_error; NULL = off. */
void xrtdbl_set_fail_load(const char *substr);
/* Opening the device throws (no NPU). */
void xrtdbl_set_fail_device(bool on);

/* While set (kept across xrtdbl_reset), every run that completes first computes
 * what its kernel computes, through the functional model (model.h); a run the
 * model refuses ends in TIMEOUT (it would hang) or ERROR. */
void xrtdbl_set_model(bool on);
/* Every run that completes also takes `us` microseconds of wall time, the host's
 * thread sleeping meanwhile as it waits for a real NPU (kept across xrtdbl_reset;
 * 0 = none): what lets host work beside NPU runs show in wall time. */
void xrtdbl_set_run_us(int us);
/* The model's last refusal, "" when none. */
const char *xrtdbl_model_error(void);

/* Runs that completed since the reset. */
int xrtdbl_runs_completed(void);

#ifdef __cplusplus
}
#endif

#endif
