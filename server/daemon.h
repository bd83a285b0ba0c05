/* daemon — the process's life: listen, serve, load the model, tell systemd,
 * drain on SIGTERM. Everything here runs on the loop thread except the model
 * loader, which hands its result back through the mailbox. */
#ifndef MINICPMD_SERVER_DAEMON_H
#define MINICPMD_SERVER_DAEMON_H

#include "config/config.h"

/* Serve until a signal stops the daemon. Returns the process exit code:
 * 0 after a clean shutdown, 1 when the daemon could not start or the model failed
 * to load. */
int srv_daemon_run(const struct cfg *cfg, const struct cfg_model_location *model);

#endif
