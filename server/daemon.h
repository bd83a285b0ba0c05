/* daemon — the process's life: listen, serve, load the model, tell systemd,
 * drain on SIGTERM. Everything here runs on the loop thread except the model
 * loader, which hands its result back through the mailbox. */
#ifndef MINICPMD_SERVER_DAEMON_H
#define MINICPMD_SERVER_DAEMON_H

#include "config/config.h"
#include "engine/engine.h"
#include "engine/worker/sample.h"
#include "engine/text/tokenizer.h"
#include "engine/worker/worker.h"

/* What serving a model needs from its pack: the validated pack and its tokenizer. */
struct srv_model {
    eng_pack *pack;
    eng_tokenizer *tok;
    struct eng_device *dev;    /* the device the model runs on */
    eng_worker *worker;        /* owns dev while it runs */
    int n_ctx;
    int32_t stop_ids[16];
    int n_stop_ids;
    struct eng_sampling sampling;
    char warning[512];     /* non-fatal finding, e.g. an unofficial chat template; "" */
};

/* Open the pack at `dir` and everything in it the daemon uses: the pack, its
 * tokenizer, the device chosen by `cfg` with the model loaded, and the worker that
 * owns it (emitting to emit(emit_ctx, ...)). Slow (file I/O, weight checks):
 * never on the loop thread. Returns 0, or -1 with a one-line reason in `err`. */
int srv_model_load(const char *dir, const struct cfg *cfg, eng_worker_emit_fn emit,
                   void *emit_ctx, struct srv_model *m, char *err, size_t errlen);
void srv_model_free(struct srv_model *m);

/* Serve until a signal stops the daemon. Returns the process exit code:
 * 0 after a clean shutdown, 1 when the daemon could not start or the model failed
 * to load. */
int srv_daemon_run(const struct cfg *cfg, const struct cfg_model_location *model);

#endif
