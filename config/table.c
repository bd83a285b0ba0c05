/* table — every setting of minicpmd, one row each. A new setting is one row
 * here plus its field in struct cfg; the loader, the checks, --help and the
 * effective-config dump all follow from the row.
 */
#include "config/internal.h"
#include "util/defaults.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(enum cfg_device) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum cfg_precision) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum cfg_npu_submit) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum cfg_npu_prefill) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum cfg_qk_norm) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum cfg_weights) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum cfg_log_level) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum cfg_thinking) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum cfg_log_format) == sizeof(int), "enums are stored as int");

static const char *const device_names[] = { "auto", "cpu", "sim", "xrt", NULL };
static const char *const precision_names[] = { "int8", "f32", NULL };
static const char *const npu_submit_names[] = { "auto", "runlist", "run", NULL };
static const char *const npu_prefill_names[] = { "npu", "cpu", "auto", NULL };
static const char *const qk_norm_names[] = { "auto", "off", "on", NULL };
static const char *const weights_names[] = { "auto", "mmap", "copy", NULL };
static const char *const thinking_names[] = { "auto", "on", "off", NULL };
static const char *const log_level_names[] = { "error", "warn", "info", "debug", NULL };
static const char *const log_format_names[] = { "text", "json", NULL };
static const struct cfg__keyword runlist_words[] = {
    { "auto", CFG_RUNLIST_AUTO }, { "all", CFG_RUNLIST_ALL }, { NULL, 0 },
};

static void default_threads(struct cfg *cfg, char *const envp[]);
static void default_state_dir(struct cfg *cfg, char *const envp[]);

/* One macro per type keeps each row to the facts that differ; designated
 * fields after the type's own carry the rest. */
#define ROW(id) [CFG__E_##id]
#define OFF(f) offsetof(struct cfg, f)
#define INT(n, f, lo, hi, d, ...) \
    { .name = n, .type = CFG__INT, .off = OFF(f), .min = lo, .max = hi, .def = d, __VA_ARGS__ }
#define SIZE(n, f, lo, hi, d, ...) \
    { .name = n, .type = CFG__SIZE, .off = OFF(f), .min = lo, .max = hi, .def = d, __VA_ARGS__ }
#define STR(n, f, d, ...) \
    { .name = n, .type = CFG__STR, .off = OFF(f), .def_str = d, __VA_ARGS__ }
#define ENUM(n, f, nm, d, ...) \
    { .name = n, .type = CFG__ENUM, .off = OFF(f), .names = nm, .def = d, __VA_ARGS__ }
#define BOOL(n, f, d, ...) \
    { .name = n, .type = CFG__BOOL, .off = OFF(f), .def = d, __VA_ARGS__ }
#define LIST(n, f, fn, ...) \
    { .name = n, .type = CFG__LIST, .off = OFF(f), .off_n = OFF(fn), __VA_ARGS__ }
#define ACTION(n, ...) \
    { .name = n, .type = CFG__ACTION, .flags = CFG__CLI_ONLY | CFG__NO_FIELD, __VA_ARGS__ }

const struct cfg__entry cfg__table[CFG__N_ENTRIES] = {
    ROW(HOST) = STR("host", host, "127.0.0.1", .check = cfg__check_host, .metavar = "ADDR",
                    .help = "address to listen on (IPv4, IPv6 or host name)"),
    ROW(PORT) = INT("port", port, 0, 65535, 8001, .metavar = "N",
                    .help = "TCP port; 0 lets the kernel choose"),
    ROW(MAX_CONNECTIONS) = INT("max-connections", max_connections, 1, 10000, 256,
                               .metavar = "N",
                               .help = "most client connections open at once; more are "
                                       "closed at once"),
    ROW(MAX_CONNECTIONS_PER_IP) = INT("max-connections-per-ip", max_connections_per_ip, 0,
                                      10000, UT_MAX_CONNECTIONS_PER_IP_DEFAULT, .metavar = "N",
                                      .help = "most connections open at once from one client "
                                              "address; 0 = no limit of its own"),
    ROW(TIMEOUT) = INT("timeout", timeout_s, 0, 86400, 600, .metavar = "SECONDS",
                       .help = "close a connection idle this long; 0 = never"),
    ROW(REQUEST_TIMEOUT) = INT("request-timeout", request_timeout_s, 0, 86400,
                               UT_REQUEST_TIMEOUT_DEFAULT, .metavar = "SECONDS",
                               .help = "close a connection whose request (headers and body) "
                                       "has not fully arrived this long after it began; "
                                       "0 = never"),
    ROW(SHUTDOWN_TIMEOUT) = INT("shutdown-timeout", shutdown_grace_s, 0, 3600, 30,
                                .metavar = "SECONDS",
                                .help = "on SIGTERM, how long running requests may finish"),
    ROW(MAX_BODY_BYTES) = SIZE("max-body-bytes", max_body_bytes, 1024, 1LL << 30, 8LL << 20,
                               .metavar = "SIZE", .def_help = "8M",
                               .help = "largest request body, 1K..1G "
                                       "(suffixes K, M, G: KiB, MiB, GiB)"),
    ROW(API_KEY) = STR("api-key", api_key, NULL, .flags = CFG__SECRET,
                       .check = cfg__check_secret, .metavar = "KEY",
                       .help = "require 'Authorization: Bearer KEY'"),
    /* No field: the loader reads the file into api_key once no stronger layer
     * can replace it (config.c, read_key_file). */
    ROW(API_KEY_FILE) = { .name = "api-key-file", .type = CFG__STR, .flags = CFG__NO_FIELD,
                          .metavar = "FILE", .help = "read the api key from FILE (one line)" },
    ROW(CORS_ORIGIN) = LIST("cors-origin", cors_origins, n_cors_origins,
                            .check = cfg__check_origin, .metavar = "ORIGIN",
                            .help = "allow browser requests from ORIGIN "
                                    "(scheme://host[:port] or *); repeatable"),
    ROW(ALLOWED_HOST) = LIST("allowed-host", allowed_hosts, n_allowed_hosts,
                             .check = cfg__check_host, .metavar = "HOST",
                             .help = "listening on loopback: accept this Host header too "
                                     "(besides localhost, 127.0.0.1, [::1] and --host); "
                                     "repeatable"),
    ROW(NO_WEBUI) = BOOL("no-webui", no_webui, false, .help = "do not serve the page at / and /ui/"),
    ROW(MODEL) = STR("model", model, NULL, .metavar = "PATH|TAG",
                     .help = "pack directory, a tag such as " CFG_DEFAULT_MODEL_TAG ", or none",
                     .def_help = CFG_DEFAULT_MODEL_TAG " if found, else the demo pack"),
    ROW(DEVICE) = ENUM("device", device, device_names, CFG_DEVICE_AUTO,
                       .help = "where to run the model"),
    ROW(RUNLIST_LAYERS) = INT("runlist-layers", runlist_layers, 1, 1024, CFG_RUNLIST_AUTO,
                              .keywords = runlist_words, .metavar = "auto|all|N",
                              .help = "decoder layers per NPU runlist: auto (adapt), all, "
                                      "or 1..1024",
                              .def_help = "auto"),
    ROW(THREADS) = INT("threads", threads, 1, 256, 1, .def_fn = default_threads,
                       .metavar = "N", .help = "compute threads", .def_help = "online CPUs"),
    ROW(CTX_SIZE) = INT("ctx-size", ctx_size, 0, 1048576, 0, .metavar = "N",
                        .help = "context length in tokens; 0 = the model's own"),
    ROW(QUEUE_SIZE) = INT("queue-size", queue_size, 1, 4096, 16, .metavar = "N",
                          .help = "requests that may wait for the engine before 503"),
    ROW(GRAMMAR_MAX_RULES) = INT("grammar-max-rules", grammar_max_rules, 16, 1 << 24,
                                 UT_GRAM_MAX_RULES, .metavar = "N",
                                 .help = "rules one request's grammar may compile to"),
    ROW(GRAMMAR_MAX_BYTES) = SIZE("grammar-max-bytes", grammar_max_bytes, 4096, 1 << 30,
                                  UT_GRAM_MAX_BYTES, .metavar = "SIZE",
                                  .help = "bytes one request's compiled grammar may take"),
    ROW(GRAMMAR_MAX_STACKS) = INT("grammar-max-stacks", grammar_max_stacks, 16, 1 << 20,
                                  UT_GRAM_MAX_STACKS, .metavar = "N",
                                  .help = "grammar stacks alive at one point of the output"),
    ROW(GRAMMAR_STEP_WORK) = INT("grammar-step-work", grammar_step_work, 1000, 1 << 30,
                                 UT_GRAM_STEP_WORK, .metavar = "N",
                                 .help = "work units one token's grammar mask may take "
                                         "(~7 ns each)"),
    ROW(PARALLEL) = INT("parallel", parallel, 1, 4, UT_PARALLEL_DEFAULT, .metavar = "N",
                        .help = "requests generated at once (cpu: one batch per step; "
                                "sim/NPU: interleaved token by token); at most the "
                                "device's KV slots"),
    ROW(STEP_PREFILL) = INT("step-prefill", step_prefill, 1, UT_MAX_BATCH,
                            UT_STEP_PREFILL_DEFAULT, .metavar = "N",
                            .help = "prompt tokens one step may prefill beside running "
                                    "decodes (a long prompt joins in such chunks)"),
    ROW(STATE_DIR) = STR("state-dir", state_dir, NULL, .def_fn = default_state_dir,
                         .metavar = "DIR", .help = "where learned settings are kept",
                         .def_help = "$STATE_DIRECTORY, $XDG_STATE_HOME/minicpmd, "
                                     "~/.local/state/minicpmd or /var/lib/minicpmd"),
    ROW(PREFILL_CHUNK) = INT("prefill-chunk", prefill_chunk, 1, UT_MAX_BATCH,
                             UT_PREFILL_CHUNK_DEFAULT, .metavar = "N",
                             .help = "prompt tokens per prefill step (one batch)"),
    ROW(PROMPT_CACHE) = BOOL("prompt-cache", prompt_cache, true,
                             .help = "reuse the KV cache of the longest prefix a prompt shares "
                                     "with the previous request's tokens"),
    ROW(RUNLIST_RETRIES) = INT("runlist-retries", runlist_retries, 0, 16,
                               UT_RUNLIST_RETRIES_DEFAULT, .metavar = "N",
                               .help = "runlist-layers auto: times one request may halve "
                                       "the layers per runlist after a device hang"),
    ROW(PRECISION) = ENUM("precision", precision, precision_names, CFG_PRECISION_INT8,
                          .help = "CPU matrix inputs: int8 (fast) or f32 (exact)"),
    ROW(QK_NORM) = ENUM("qk-norm", qk_norm, qk_norm_names, CFG_QK_NORM_AUTO,
                        .help = "a pack's q_norm/k_norm: auto ignores the all-ones shim"),
    ROW(WEIGHTS) = ENUM("weights", weights, weights_names, CFG_WEIGHTS_AUTO,
                        .help = "cpu/sim: read the weights from the pack's mapping (mmap) or "
                                "a copy in huge pages (copy); auto copies when it fits in "
                                "MemAvailable"),
    ROW(THINKING) = ENUM("thinking", thinking, thinking_names, CFG_THINKING_AUTO,
                         .help = "thinking when a request does not say (enable_thinking, "
                                 "reasoning_effort, think): on, off, or auto (the template's)"),
    ROW(SIM_RUNLIST_LIMIT) = INT("sim-runlist-limit", sim_runlist_limit, 0, 4096, 0,
                                 .metavar = "N",
                                 .help = "sim device: a runlist of more layers hangs; 0 = none"),
    ROW(SIM_TIMEOUT_MS) = INT("sim-timeout-ms", sim_timeout_ms, 0, 600000, 2000,
                              .metavar = "MS", .help = "sim device: when a hung runlist times out"),
    ROW(SIM_LATENCY_US) = INT("sim-latency-us", sim_latency_us, 0, 1000000, 0, .metavar = "US",
                              .help = "sim device: added latency per command"),
    ROW(FAULT) = STR("fault", fault, NULL, .metavar = "SPEC",
                     .help = "sim device: inject ERT states, e.g. "
                             "phase=decode,token=3,layer=30,state=ABORT",
                     .def_help = "$MINICPMD_FAULTS"),
    ROW(NPU_KERNELS) = STR("npu-kernels", npu_kernels, NULL, .metavar = "DIR",
                           .help = "xrt device: the open NPU kernel set (manifest.json) to use",
                           .def_help = "<pack>/open_kernels"),
    ROW(NPU_SUBMIT) = ENUM("npu-submit", npu_submit, npu_submit_names, CFG_NPU_SUBMIT_AUTO,
                           .help = "xrt device: layer runs as runlists, one run per dispatch "
                                   "(run), or runlists falling back to single runs (auto)"),
    ROW(NPU_PREFILL) = ENUM("npu-prefill", npu_prefill, npu_prefill_names, CFG_NPU_PREFILL_NPU,
                            .help = "xrt device: prefill token by token on the NPU, in batches "
                                    "on the CPU (its KV then handed to the NPU), or by "
                                    "prompt length from rates measured at load (auto)"),
    ROW(NPU_PROBE) = BOOL("npu-probe", npu_probe, false, .flags = CFG__CLI_ONLY,
                          .help = "decode on the NPU with K = all, 24, 21 .. 1, report, save "
                                  "the best K, exit 0 or 1"),
    ROW(LOG_LEVEL) = ENUM("log-level", log_level, log_level_names, CFG_LOG_INFO,
                          .help = "least severe message to log"),
    ROW(LOG_FORMAT) = ENUM("log-format", log_format, log_format_names, CFG_LOG_FORMAT_TEXT,
                           .help = "log line format"),
    ROW(LOG_FILE) = STR("log-file", log_file, NULL, .metavar = "PATH",
                        .help = "append logs to PATH", .def_help = "stderr"),
    ROW(CHECK) = BOOL("check", check, false,
                      .help = "check the settings and load the model, then exit 0 or 1"),
    /* Flag only: MINICPMD_CONFIG is read by cfg_load() itself, and a config
     * file cannot name another. */
    ROW(CONFIG) = STR("config", config_path, NULL, .flags = CFG__CLI_ONLY, .metavar = "FILE",
                      .help = "JSON config file",
                      .def_help = "$MINICPMD_CONFIG, else " CFG__DEFAULT_CONFIG_PATH
                                  " if it exists"),
    ROW(VERSION) = ACTION("version", .help = "print the version and exit"),
    ROW(HELP) = ACTION("help", .help = "print this help and exit"),
};

/* ---- computed defaults ---------------------------------------------------- */

static void default_threads(struct cfg *cfg, char *const envp[])
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    (void)envp;
    cfg->threads = n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

/* systemd's StateDirectory= first, then the XDG base directory rules. */
static void default_state_dir(struct cfg *cfg, char *const envp[])
{
    const char *v = cfg__env_get(envp, "STATE_DIRECTORY");
    if (v && *v) {
        /* Several StateDirectory= entries arrive colon-separated; the first is ours. */
        cfg->state_dir = strndup(v, strcspn(v, ":"));
        return;
    }
    v = cfg__env_get(envp, "XDG_STATE_HOME");
    if (v && v[0] == '/') {     /* the spec says relative values are to be ignored */
        cfg->state_dir = cfg__path_join(v, "minicpmd");
        return;
    }
    v = cfg__env_get(envp, "HOME");
    if (v && *v) {
        cfg->state_dir = cfg__path_join(v, ".local/state/minicpmd");
        return;
    }
    cfg->state_dir = strdup("/var/lib/minicpmd");
}

/* ---- output --------------------------------------------------------------- */

static const char *metavar(const struct cfg__entry *e, char *buf, size_t len)
{
    if (e->type == CFG__ENUM)
        return cfg__join_names(e->names, buf, len);
    return e->metavar ? e->metavar : "";
}

static const char *default_text(const struct cfg__entry *e, char *buf, size_t len)
{
    if (e->def_help)
        return e->def_help;
    switch (e->type) {
    case CFG__INT: case CFG__SIZE: snprintf(buf, len, "%lld", e->def); return buf;
    case CFG__ENUM: return e->names[e->def];
    case CFG__STR: return e->def_str;
    default: return NULL;
    }
}

/* Words of `text` from column `col`, wrapped before column 80. */
static void print_wrapped(FILE *out, const char *text, int col)
{
    int pos = col;
    for (const char *p = text; *p;) {
        int w = (int)strcspn(p, " ");
        if (pos > col && pos + 1 + w > 79) {
            fprintf(out, "\n%*s", col, "");
            pos = col;
        } else if (pos > col) {
            fputc(' ', out);
            pos++;
        }
        fprintf(out, "%.*s", w, p);
        pos += w;
        p += w;
        p += strspn(p, " ");
    }
    fputc('\n', out);
}

void cfg_print_usage(FILE *out, const char *argv0)
{
    enum { COL = 30 };
    char mv[96], db[64], acc[96];
    fprintf(out,
            "Usage: %s [OPTION]...\n"
            "Serve MiniCPM5 models through an OpenAI-compatible HTTP API.\n\n"
            "Settings come from, weakest first: defaults, the JSON config file, MINICPMD_*\n"
            "environment variables, and these flags. Each --some-flag is also the config key\n"
            "\"some-flag\" (or \"some_flag\") and the variable MINICPMD_SOME_FLAG.\n\n",
            argv0 ? argv0 : "minicpmd");
    for (const struct cfg__entry *e = cfg__table; e < cfg__table + CFG__N_ENTRIES; e++) {
        char left[128], text[512];
        const char *m = metavar(e, mv, sizeof mv), *d = default_text(e, db, sizeof db);
        size_t n;
        snprintf(left, sizeof left, "  %s--%s%s%s", e == &cfg__table[CFG__E_HELP] ? "-h, " : "",
                 e->name, *m ? " " : "", m);
        if (strlen(left) + 2 <= COL)
            fprintf(out, "%-*s", COL, left);
        else
            fprintf(out, "%s\n%*s", left, COL, "");
        n = (size_t)snprintf(text, sizeof text, "%s", e->help);
        if (e->type == CFG__INT && !e->keywords && n < sizeof text)
            n += (size_t)snprintf(text + n, sizeof text - n, " [%s]",
                                  cfg__accepted(e, acc, sizeof acc));
        if (d && n < sizeof text)
            snprintf(text + n, sizeof text - n, " (default: %s)", d);
        print_wrapped(out, text, COL);
    }
}

void cfg_print(FILE *out, const struct cfg *cfg)
{
    for (const struct cfg__entry *e = cfg__table; e < cfg__table + CFG__N_ENTRIES; e++) {
        const char *field = (const char *)cfg + e->off;
        if (e->flags & CFG__NO_FIELD)
            continue;
        fprintf(out, "%s = ", e->name);
        switch (e->type) {
        case CFG__INT: {
            int v = *(const int *)field;
            const struct cfg__keyword *k = e->keywords;
            while (k && k->name && k->value != v)
                k++;
            if (k && k->name)
                fprintf(out, "%s\n", k->name);
            else
                fprintf(out, "%d\n", v);
            break;
        }
        case CFG__SIZE: fprintf(out, "%zu\n", *(const size_t *)field); break;
        case CFG__ENUM: fprintf(out, "%s\n", e->names[*(const int *)field]); break;
        case CFG__BOOL: fprintf(out, "%s\n", *(const bool *)field ? "true" : "false"); break;
        case CFG__STR: {
            const char *s = *(char *const *)field;
            fprintf(out, "%s\n", !s ? "(unset)" : (e->flags & CFG__SECRET) ? "(set)" : s);
            break;
        }
        case CFG__LIST: {
            char *const *l = *(char **const *)field;
            for (size_t i = 0; l && l[i]; i++)
                fprintf(out, "%s%s", i ? "," : "", l[i]);
            fputc('\n', out);
            break;
        }
        case CFG__ACTION: break;
        }
    }
}

const char *cfg_device_name(enum cfg_device d)
{
    return (unsigned)d < 4 ? device_names[d] : "?";
}

const char *cfg_log_level_name(enum cfg_log_level l)
{
    return (unsigned)l < 4 ? log_level_names[l] : "?";
}
