/* config/ internals shared by its files; nothing outside config/ includes this.
 *
 *   table.c     the settings table, and everything printed from it
 *   values.c    parsing and checking single values
 *   config.c    applying defaults, file, environment and argv (cfg_load)
 *   discover.c  finding the model (cfg_model_resolve)
 */
#ifndef MINICPMD_CONFIG_INTERNAL_H
#define MINICPMD_CONFIG_INTERNAL_H

#include "config/config.h"

#include <stdbool.h>
#include <stddef.h>

/* Read only when neither --config nor MINICPMD_CONFIG names a file, and only if
 * it exists. Fixed rather than <sysconfdir>: packages and the unit files put it
 * here whatever the build prefix was. */
#define CFG__DEFAULT_CONFIG_PATH "/etc/minicpmd/config.json"

/* ---- the table (table.c) ------------------------------------------------ */

enum cfg__type {
    CFG__INT,       /* int in min..max, plus optional keywords */
    CFG__SIZE,      /* size_t in min..max bytes; K, M, G suffixes (KiB, MiB, GiB) */
    CFG__STR,       /* char *, never empty, optional validator */
    CFG__ENUM,      /* an enum stored as int; the value is the index into names[] */
    CFG__BOOL,
    CFG__LIST,      /* NULL-terminated char ** plus a size_t count at off_n */
    CFG__ACTION,    /* --help, --version: flags without a value or a field */
};

enum {
    CFG__CLI_ONLY = 1 << 0,     /* no config key, no variable */
    CFG__SECRET   = 1 << 1,     /* never echoed in messages or the dump */
    CFG__NO_FIELD = 1 << 2,     /* kept by the loader, not in struct cfg */
};

struct cfg__keyword {
    const char *name;
    int value;
};

/* Returns NULL when `s` is acceptable, else why not ("is not a ..."). */
typedef const char *(*cfg__check_fn)(const char *s);

struct cfg__entry {
    const char *name;           /* --name, "name" (also "na_me"), MINICPMD_NAME */
    enum cfg__type type;
    unsigned flags;
    size_t off, off_n;
    long long min, max, def;
    const char *def_str;
    const char *const *names;               /* CFG__ENUM */
    const struct cfg__keyword *keywords;    /* CFG__INT: words accepted besides numbers */
    cfg__check_fn check;                    /* CFG__STR, and each item of a CFG__LIST */
    void (*def_fn)(struct cfg *cfg, char *const envp[]);   /* computed default */
    const char *metavar;
    const char *help;
    const char *def_help;                   /* --help text of a computed default */
};

/* Rows of cfg__table, in --help order. */
enum cfg__id {
    CFG__E_HOST, CFG__E_PORT, CFG__E_MAX_CONNECTIONS, CFG__E_MAX_CONNECTIONS_PER_IP,
    CFG__E_TIMEOUT, CFG__E_REQUEST_TIMEOUT, CFG__E_SHUTDOWN_TIMEOUT,
    CFG__E_MAX_BODY_BYTES, CFG__E_API_KEY, CFG__E_API_KEY_FILE, CFG__E_CORS_ORIGIN,
    CFG__E_ALLOWED_HOST, CFG__E_NO_WEBUI,
    CFG__E_MODEL, CFG__E_DEVICE, CFG__E_RUNLIST_LAYERS, CFG__E_THREADS, CFG__E_CTX_SIZE,
    CFG__E_QUEUE_SIZE, CFG__E_GRAMMAR_MAX_RULES, CFG__E_GRAMMAR_MAX_BYTES,
    CFG__E_GRAMMAR_MAX_STACKS, CFG__E_GRAMMAR_STEP_WORK, CFG__E_PARALLEL, CFG__E_STEP_PREFILL, CFG__E_STATE_DIR, CFG__E_PREFILL_CHUNK, CFG__E_PROMPT_CACHE, CFG__E_RUNLIST_RETRIES,
    CFG__E_PRECISION, CFG__E_QK_NORM, CFG__E_WEIGHTS, CFG__E_THINKING, CFG__E_SIM_RUNLIST_LIMIT, CFG__E_SIM_TIMEOUT_MS,
    CFG__E_SIM_LATENCY_US, CFG__E_FAULT, CFG__E_NPU_KERNELS, CFG__E_NPU_SUBMIT, CFG__E_NPU_PREFILL, CFG__E_NPU_PROBE,
    CFG__E_LOG_LEVEL, CFG__E_LOG_FORMAT, CFG__E_LOG_FILE,
    CFG__E_CHECK, CFG__E_CONFIG, CFG__E_VERSION, CFG__E_HELP,
    CFG__N_ENTRIES
};

/* Every setting, one row each: the parser, the bounds, the defaults, --help and
 * cfg_print() are all driven by it. Indexed by enum cfg__id. */
extern const struct cfg__entry cfg__table[CFG__N_ENTRIES];

/* ---- values (values.c) --------------------------------------------------- */

/* The value of `name` in the NULL-terminated `envp`, or NULL. The first match
 * wins, as with getenv(). `envp` may be NULL. */
const char *cfg__env_get(char *const envp[], const char *name);

/* "<a>/<b>" in a new string (one slash between them), or NULL when out of memory. */
char *cfg__path_join(const char *a, const char *b);

/* `v` made fit to quote in a one-line message (into `buf`, returned). */
const char *cfg__show(const char *v, char *buf, size_t len);

/* Checks for CFG__STR and CFG__LIST values: NULL if fine, else why not. */
const char *cfg__check_host(const char *s);
const char *cfg__check_origin(const char *s);
const char *cfg__check_secret(const char *s);

/* Strict parsers: 0 ok, -EINVAL malformed, -ERANGE overflow. */
int cfg__parse_ll(const char *s, long long *out);
int cfg__parse_size(const char *s, unsigned long long *out);   /* K, M, G suffixes */
int cfg__parse_bool(const char *s, bool *out);

/* "auto|cpu|sim|xrt" from a NULL-terminated list, into `buf`. */
const char *cfg__join_names(const char *const *names, char *buf, size_t len);

/* What an int or size entry accepts, e.g. "0..65535" or "auto|all|1..1024". */
const char *cfg__accepted(const struct cfg__entry *e, char *buf, size_t len);

#endif
