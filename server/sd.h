/* sd — the systemd protocols, without libsystemd: readiness notification
 * (sd_notify(3)), the watchdog, and socket activation (sd_listen_fds(3)).
 * Both protocols are documented as stable; see docs/openai-api.md §4.
 */
#ifndef MINICPMD_SERVER_SD_H
#define MINICPMD_SERVER_SD_H

#include <stdint.h>

/* Send `state` (newline-separated KEY=VALUE lines) to $NOTIFY_SOCKET. Returns 1 if
 * sent, 0 if there is no $NOTIFY_SOCKET, -errno on failure. Any thread. */
int srv_sd_notify(const char *state);
int srv_sd_notifyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog interval in microseconds from $WATCHDOG_USEC (when $WATCHDOG_PID is
 * unset or ours), 0 when the watchdog is off, -EINVAL when the variables are bad. */
int64_t srv_sd_watchdog_usec(void);

/* Socket activation: the number of fds systemd passed (starting at fd 3), 0 if
 * none, -EINVAL on malformed variables. Validates $LISTEN_PID, marks the fds
 * close-on-exec, and unsets LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES. */
int srv_sd_listen_fds(void);

#define SRV_SD_LISTEN_FDS_START 3

#endif
