/* log — one line per event, text or JSON, to stderr or a file.
 *
 * Thread-safe: any thread may log (a line is written with one write(2)). The
 * level and format are set once at startup; srv_log_reopen() (SIGHUP) swaps the
 * file under a lock so logrotate can move it away.
 */
#ifndef MINICPMD_SERVER_LOG_H
#define MINICPMD_SERVER_LOG_H

#include "config/config.h"

#include <stdbool.h>
#include <stdio.h>

/* Start logging. `path` NULL = stderr. Returns 0 or -errno (file not openable). */
int srv_log_init(enum cfg_log_level level, enum cfg_log_format format, const char *path);
/* Reopen the log file (no-op on stderr). Returns 0 or -errno; on failure the old
 * file stays in use. */
int srv_log_reopen(void);
void srv_log_close(void);

/* Copy `in` to `out` (cap bytes, NUL-terminated) with control characters as \xNN,
 * so an operator's or a client's string (a --model path, a request path) can neither
 * start a new line nor drive a terminal. Returns the length written. */
size_t srv_log_escape(const char *in, char *out, size_t cap);

/* One line to `f` (stdout for --check's result, stderr before logging is up),
 * escaped like srv_log_escape(); the newline is added. */
void srv_say(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool srv_log_enabled(enum cfg_log_level level);

/* printf-style message. */
void srv_log(enum cfg_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) srv_log(CFG_LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  srv_log(CFG_LOG_WARN, __VA_ARGS__)
#define log_info(...)  srv_log(CFG_LOG_INFO, __VA_ARGS__)
#define log_debug(...) srv_log(CFG_LOG_DEBUG, __VA_ARGS__)

#endif
