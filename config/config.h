/* config — minicpmd's settings: defaults < JSON config file < MINICPMD_* environment
 * < command-line flags, validated in one place, plus model discovery.
 *
 * Everything here runs once, at startup, on the main thread, before any other
 * thread exists. struct cfg is plain data: the daemon reads it, nobody mutates it
 * after cfg_load() returns.
 */
#ifndef MINICPMD_CONFIG_H
#define MINICPMD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Matrix-product inputs: int8 per 32 columns (fast) or float32 (exact). */
enum cfg_precision { CFG_PRECISION_INT8 = 0, CFG_PRECISION_F32 };
/* How the xrt device submits layer runs: runlists, falling back to one run per
 * dispatch when every K fails (auto), runlists only, or one run per dispatch. */
enum cfg_npu_submit { CFG_NPU_SUBMIT_AUTO = 0, CFG_NPU_SUBMIT_RUNLIST, CFG_NPU_SUBMIT_RUN };
/* Where the xrt device prefills a prompt (engine/xrt.h's enum eng_xrt_prefill). */
enum cfg_npu_prefill { CFG_NPU_PREFILL_NPU = 0, CFG_NPU_PREFILL_CPU, CFG_NPU_PREFILL_AUTO };
/* q_norm/k_norm in a pack: auto drops the all-ones shim of relabelled packs. */
enum cfg_qk_norm { CFG_QK_NORM_AUTO = 0, CFG_QK_NORM_OFF, CFG_QK_NORM_ON };
enum cfg_weights { CFG_WEIGHTS_AUTO = 0, CFG_WEIGHTS_MMAP, CFG_WEIGHTS_COPY };
/* Thinking when the client says nothing: auto = what the chat template does. */
enum cfg_thinking { CFG_THINKING_AUTO = 0, CFG_THINKING_ON, CFG_THINKING_OFF };

enum cfg_device {
    CFG_DEVICE_AUTO = 0,
    CFG_DEVICE_CPU,
    CFG_DEVICE_SIM,
    CFG_DEVICE_XRT,
};

enum cfg_log_level {
    CFG_LOG_ERROR = 0,
    CFG_LOG_WARN,
    CFG_LOG_INFO,
    CFG_LOG_DEBUG,
};

enum cfg_log_format {
    CFG_LOG_FORMAT_TEXT = 0,
    CFG_LOG_FORMAT_JSON,
};

/* --runlist-layers: CFG_RUNLIST_AUTO, CFG_RUNLIST_ALL, or a fixed K >= 1. */
#define CFG_RUNLIST_AUTO 0
#define CFG_RUNLIST_ALL  (-1)

struct cfg {
    /* network */
    char *host;                 /* "127.0.0.1" */
    int port;                   /* 8001; 0 = let the kernel pick (tests) */
    int max_connections;        /* connection cap (MHD_OPTION_CONNECTION_LIMIT) */
    int max_connections_per_ip; /* MHD_OPTION_PER_IP_CONNECTION_LIMIT; 0 = none */
    int timeout_s;              /* per-connection idle timeout, seconds */
    int request_timeout_s;      /* whole request (headers + body) must arrive by then; 0 = none */
    int shutdown_grace_s;       /* SIGTERM: how long in-flight requests may finish */
    size_t max_body_bytes;      /* request bodies above this get 413 */
    char *api_key;              /* NULL = no auth; from --api-key or --api-key-file */
    char **cors_origins;        /* NULL-terminated list; empty = CORS off */
    size_t n_cors_origins;
    char **allowed_hosts;       /* Host header values accepted besides loopback's own */
    size_t n_allowed_hosts;
    bool no_webui;              /* do not serve the page at / and /ui/ */

    /* model and engine */
    char *model;                /* as given: a path or a tag; NULL = default */
    bool model_explicit;        /* set by file/env/flag rather than by default */
    enum cfg_device device;
    int runlist_layers;         /* CFG_RUNLIST_AUTO, CFG_RUNLIST_ALL or K >= 1 */
    int threads;                /* compute threads; default = online cores */
    int ctx_size;               /* tokens; 0 = the model's own */
    int queue_size;             /* pending generation requests before 503 */
    int grammar_max_rules;      /* a request's grammar: rules compiled */
    size_t grammar_max_bytes;   /* its compiled form's size */
    int grammar_max_stacks;     /* stacks alive at one point */
    int grammar_step_work;      /* work units of one step's mask */
    int parallel;               /* sequences the worker runs at once */
    int step_prefill;           /* prompt tokens per step beside running decodes */
    char *state_dir;            /* where learned runlist K etc. are kept */
    int prefill_chunk;          /* prompt tokens per prefill step */
    bool prompt_cache;          /* reuse the KV cache of the previous request's prefix */
    int runlist_retries;        /* auto: how often one request may halve K */
    enum cfg_precision precision;
    enum cfg_qk_norm qk_norm;
    enum cfg_weights weights;   /* cpu/sim: the pack's mapping or a huge-page copy */
    enum cfg_thinking thinking; /* the default when a request does not say */
    int sim_runlist_limit;      /* sim: more layer commands than this hang; 0 = none */
    int sim_timeout_ms;         /* sim: how long a hung runlist takes to time out */
    int sim_latency_us;         /* sim: added per command */
    char *fault;                /* sim: fault-injection spec (engine/device/fault.h) */
    char *npu_kernels;          /* xrt: the open kernel set's directory; NULL = <pack>/open_kernels */

    /* logging */
    enum cfg_log_level log_level;
    enum cfg_log_format log_format;
    char *log_file;             /* NULL = stderr (journald under systemd) */

    /* modes */
    bool check;                 /* --check: validate, load the model, exit 0/1 */
    enum cfg_npu_submit npu_submit; /* --npu-submit auto|runlist|run */
    enum cfg_npu_prefill npu_prefill; /* --npu-prefill npu|cpu|auto */
    bool npu_probe;             /* --npu-probe: measure K on the NPU, save it, exit 0/1 */

    /* provenance, for messages */
    char *config_path;          /* the file that was read, or NULL */
};

/* What cfg_load() decided. */
enum cfg_result {
    CFG_RESULT_RUN = 0,         /* run the daemon (or --check) */
    CFG_RESULT_HELP,            /* --help: print cfg_print_usage() and exit 0 */
    CFG_RESULT_VERSION,         /* --version: print the version and exit 0 */
    CFG_RESULT_ERROR,           /* invalid input: `err` holds one line; exit 2 */
};

/* Called for each non-fatal finding (unknown config key, ignored variable). */
typedef void (*cfg_warn_fn)(void *ud, const char *msg);

/* Fill `cfg` from defaults, the config file (--config, else MINICPMD_CONFIG, else
 * /etc/minicpmd/config.json if it exists), the environment `envp` (NULL-terminated,
 * MINICPMD_* names) and argv, in that order of precedence (later wins).
 * On CFG_RESULT_ERROR, `err` holds a one-line message naming the flag, key or
 * variable and the accepted values, and `cfg` holds nothing that needs freeing
 * beyond what cfg_free() releases. The caller owns `cfg` and calls cfg_free(). */
enum cfg_result cfg_load(struct cfg *cfg, int argc, char *const argv[], char *const envp[],
                         cfg_warn_fn warn, void *warn_ud, char *err, size_t errlen);

/* Release everything cfg_load() allocated. Accepts a zeroed struct. */
void cfg_free(struct cfg *cfg);

/* --help text, generated from the same table as the parser. */
void cfg_print_usage(FILE *out, const char *argv0);

/* The effective settings, one "name = value" line each, in table order; the api
 * key shows as "(set)" or "(unset)". For --check and debug logs. */
void cfg_print(FILE *out, const struct cfg *cfg);

/* Names for logs and /health. */
const char *cfg_device_name(enum cfg_device d);
const char *cfg_log_level_name(enum cfg_log_level l);

/* ---- model discovery ---------------------------------------------------- */

/* Where a model was found. */
enum cfg_model_source {
    CFG_MODEL_NONE = 0,         /* nothing found; the daemon runs without a model */
    CFG_MODEL_PATH,             /* --model named a directory */
    CFG_MODEL_FLM,              /* a tag in FastFlowLM's model_list.json */
    CFG_MODEL_STANDARD,         /* a tag found under a standard models directory */
    CFG_MODEL_EMBEDDED,         /* the demo pack the build generated */
};

struct cfg_model_location {
    enum cfg_model_source source;
    char *path;                 /* pack directory (absolute), NULL for NONE */
    char *id;                   /* model id for the API: the tag, or the dir name */
    char *warning;              /* a non-fatal finding worth logging (e.g. FastFlowLM's
                                 * model_list.json is malformed and was skipped), or NULL */
};

/* The default tag, looked up when no model is configured. */
#define CFG_DEFAULT_MODEL_TAG "minicpm5:2b"

/* Resolve cfg->model (or the default tag) to a pack directory:
 *   1. a path to an existing directory;
 *   2. a tag ("family:size") in FastFlowLM's model_list.json
 *      ($FLM_CONFIG_DIR, else $XDG_CONFIG_HOME/flm, else $HOME/.config/flm);
 *   3. a directory named after the tag ("minicpm5-2b") under the standard models
 *      directories ($XDG_DATA_HOME/minicpmd/models or ~/.local/share/minicpmd/models,
 *      <localstatedir>/lib/minicpmd/models, <datadir>/minicpmd/models);
 *   4. the embedded demo pack `embedded_dir` (may be NULL while none is built).
 * `envp` is consulted for HOME and the XDG/FLM variables (NULL-terminated).
 * Returns 0 and fills `loc` (caller frees with cfg_model_location_free); a model
 * that was asked for explicitly and not found is an error: -ENOENT (also a path
 * that does not exist), -ENOTDIR (a path that is not a directory) or -ENOMEM, with
 * `err` set.
 * Without an explicit model and nothing found, returns 0 with CFG_MODEL_NONE. */
int cfg_model_resolve(const struct cfg *cfg, char *const envp[], const char *embedded_dir,
                      struct cfg_model_location *loc, char *err, size_t errlen);

void cfg_model_location_free(struct cfg_model_location *loc);

const char *cfg_model_source_name(enum cfg_model_source s);

#endif
