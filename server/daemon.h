/* daemon — the process's life: listen, serve, load the model, tell systemd,
 * drain on SIGTERM. Everything here runs on the loop thread except the model
 * loader, which hands its result back through the mailbox. */
#ifndef MINICPMD_SERVER_DAEMON_H
#define MINICPMD_SERVER_DAEMON_H

#include "config/config.h"
#include "engine/engine.h"

/* The engine options `cfg` asks for, on `device` (eng_engine_choose_device). */
void srv_engine_opts(const struct cfg *cfg, const char *device, struct eng_engine_opts *o);

/* Serve until a signal stops the daemon, on `device` (eng_engine_choose_device).
 * Returns the process exit code: 0 after a clean shutdown, 1 when the daemon could
 * not start or the model failed to load. */
int srv_daemon_run(const struct cfg *cfg, const struct cfg_model_location *model,
                   const char *device);

#endif
