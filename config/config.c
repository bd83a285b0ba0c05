/* config — load the settings: defaults, then the JSON config file, then the
 * MINICPMD_* variables, then argv, each layer overwriting the one before.
 * Scalars simply take the stronger layer's value; the one list (cors-origin) is
 * replaced as a whole by a stronger layer, while repeated flags accumulate. The
 * settings themselves, their bounds and defaults are rows of cfg__table
 * (table.c); this file only walks the sources. Every invalid value stops
 * loading with one line that names where it came from.
 */
#include "config/internal.h"
#include "util/fs.h"
#include "util/msg.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

/* Variables with the MINICPMD_ prefix that other parts of the daemon read;
 * the unknown-variable warning leaves them alone. */
static const char *const env_allow[] = { "MINICPMD_CONFIG", "MINICPMD_FAULTS", NULL };

/* An api key file holds one line; anything bigger is a mistake (wrong path). */
#define KEY_FILE_MAX 4096
#define CONFIG_FILE_MAX (1 << 20)

/* ---- lists ---------------------------------------------------------------- */

static void field_free_str(struct cfg *cfg, const struct cfg__entry *e)
{
    char **p = (char **)((char *)cfg + e->off);
    free(*p);
    *p = NULL;
}

static void list_clear(struct cfg *cfg, const struct cfg__entry *e)
{
    char ***lp = (char ***)((char *)cfg + e->off);
    size_t *np = (size_t *)((char *)cfg + e->off_n);
    for (size_t i = 0; *lp && (*lp)[i]; i++)
        free((*lp)[i]);
    free(*lp);
    *lp = NULL;
    *np = 0;
}

static int list_add(struct cfg *cfg, const struct cfg__entry *e, const char *item, size_t len)
{
    char ***lp = (char ***)((char *)cfg + e->off);
    size_t *np = (size_t *)((char *)cfg + e->off_n);
    char **l = realloc(*lp, (*np + 2) * sizeof *l);
    if (!l)
        return -ENOMEM;
    *lp = l;
    if (item) {
        if (!(l[*np] = strndup(item, len)))
            return -ENOMEM;
        (*np)++;
    }
    l[*np] = NULL;
    return 0;
}

/* ---- the loader ----------------------------------------------------------- */

struct loader {
    struct cfg *cfg;
    char *const *envp;
    cfg_warn_fn warn;
    void *warn_ud;
    char *err;
    size_t errlen;
    bool seen[CFG__N_ENTRIES];       /* set in the layer being applied */
    bool seen_any[CFG__N_ENTRIES];
    char *key_file;             /* pending --api-key-file, read once all layers are in */
    char key_file_origin[256];
};

__attribute__((format(printf, 2, 3)))
static int fail(struct loader *ld, const char *fmt, ...)
{
    if (ld->err && ld->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ld->err, ld->errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

__attribute__((format(printf, 2, 3)))
static void warnf(struct loader *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ut_vmsgf(ld->warn, ld->warn_ud, fmt, ap);
    va_end(ap);
}

static int oom(struct loader *ld)
{
    fail(ld, "out of memory while reading the configuration");
    return -ENOMEM;
}

static int set_int(struct loader *ld, const struct cfg__entry *e, long long v, const char *shown,
                   const char *origin)
{
    char acc[96];
    if (v < e->min || v > e->max)
        return fail(ld, "%s: '%s' is out of range (%s)", origin, shown,
                    cfg__accepted(e, acc, sizeof acc));
    if (e->type == CFG__SIZE)
        *(size_t *)((char *)ld->cfg + e->off) = (size_t)v;
    else
        *(int *)((char *)ld->cfg + e->off) = (int)v;
    return 0;
}

static int set_string(struct loader *ld, const struct cfg__entry *e, const char *v,
                      const char *origin)
{
    char sb[80];
    const char *why = e->check ? e->check(v) : NULL;
    if (why && (e->flags & CFG__SECRET))
        return fail(ld, "%s: the value %s", origin, why);
    if (why)
        return fail(ld, "%s: '%s' %s", origin, cfg__show(v, sb, sizeof sb), why);

    char *copy = strdup(v);
    if (!copy)
        return oom(ld);
    /* The key and the key file compete for one setting: whichever a stronger
     * layer gives wins, and the file is read only if it wins. */
    if (e == &cfg__table[CFG__E_API_KEY_FILE]) {
        free(ld->key_file);
        ld->key_file = copy;
        snprintf(ld->key_file_origin, sizeof ld->key_file_origin, "%s", origin);
        field_free_str(ld->cfg, &cfg__table[CFG__E_API_KEY]);
        return 0;
    }
    if (e == &cfg__table[CFG__E_API_KEY]) {
        free(ld->key_file);
        ld->key_file = NULL;
    }
    field_free_str(ld->cfg, e);
    *(char **)((char *)ld->cfg + e->off) = copy;
    return 0;
}

/* A comma-separated list; "" empties it. The first use in a layer replaces the
 * list an earlier layer built; later uses in the same layer add to it. */
static int set_list_text(struct loader *ld, const struct cfg__entry *e, const char *v,
                         const char *origin)
{
    char sb[80];
    if (!ld->seen[e - cfg__table])
        list_clear(ld->cfg, e);
    if (list_add(ld->cfg, e, NULL, 0) < 0)
        return oom(ld);
    for (const char *p = v; *v != '\0';) {
        const char *end = p + strcspn(p, ","), *b = p, *t = end;
        char item[1024];
        while (b < t && isspace((unsigned char)*b))
            b++;
        while (t > b && isspace((unsigned char)t[-1]))
            t--;
        size_t n = (size_t)(t - b);
        if (n == 0 || n >= sizeof item)
            return fail(ld, "%s: '%s' has an empty or overlong item (a comma-separated list of "
                        "scheme://host[:port] or *)", origin, cfg__show(v, sb, sizeof sb));
        memcpy(item, b, n);
        item[n] = '\0';
        const char *why = e->check ? e->check(item) : NULL;
        if (why)
            return fail(ld, "%s: '%s' %s", origin, cfg__show(item, sb, sizeof sb), why);
        if (list_add(ld->cfg, e, item, n) < 0)
            return oom(ld);
        if (*end == '\0')
            break;
        p = end + 1;
    }
    return 0;
}

/* Text from a flag or a variable. */
static int set_text(struct loader *ld, const struct cfg__entry *e, const char *v,
                    const char *origin)
{
    char sb[80], acc[96];
    cfg__show(v, sb, sizeof sb);
    switch (e->type) {
    case CFG__INT: {
        long long x;
        for (const struct cfg__keyword *k = e->keywords; k && k->name; k++) {
            if (strcmp(v, k->name) == 0) {
                *(int *)((char *)ld->cfg + e->off) = k->value;
                return 0;
            }
        }
        int rc = cfg__parse_ll(v, &x);
        if (rc == -EINVAL && e->keywords)
            return fail(ld, "%s: '%s' is not one of %s", origin, sb,
                        cfg__accepted(e, acc, sizeof acc));
        if (rc == -EINVAL)
            return fail(ld, "%s: '%s' is not an integer (%s)", origin, sb,
                        cfg__accepted(e, acc, sizeof acc));
        if (rc == -ERANGE)
            x = e->max + 1;     /* report as out of range */
        return set_int(ld, e, x, sb, origin);
    }
    case CFG__SIZE: {
        unsigned long long x;
        int rc = cfg__parse_size(v, &x);
        if (rc == -EINVAL)
            return fail(ld, "%s: '%s' is not a size (%s bytes; suffixes K, M, G)", origin, sb,
                        cfg__accepted(e, acc, sizeof acc));
        if (rc == -ERANGE || x > (unsigned long long)LLONG_MAX)
            x = (unsigned long long)e->max + 1;
        return set_int(ld, e, (long long)x, sb, origin);
    }
    case CFG__STR:
        if (*v == '\0')
            return fail(ld, "%s: empty value", origin);
        return set_string(ld, e, v, origin);
    case CFG__ENUM:
        for (int i = 0; e->names[i]; i++) {
            if (strcmp(v, e->names[i]) == 0) {
                *(int *)((char *)ld->cfg + e->off) = i;
                return 0;
            }
        }
        return fail(ld, "%s: '%s' is not one of %s", origin, sb,
                    cfg__join_names(e->names, acc, sizeof acc));
    case CFG__BOOL: {
        bool b;
        if (cfg__parse_bool(v, &b) < 0)
            return fail(ld, "%s: '%s' is not a boolean (true|false|1|0|yes|no)", origin, sb);
        *(bool *)((char *)ld->cfg + e->off) = b;
        return 0;
    }
    case CFG__LIST:
        return set_list_text(ld, e, v, origin);
    case CFG__ACTION:
        break;
    }
    return 0;
}

static const char *json_type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* A value from the config file: the JSON type must fit, then the text rules apply. */
static int set_json(struct loader *ld, const struct cfg__entry *e, json_t *j, const char *origin)
{
    char acc[96], shown[32];
    const char *want = NULL;
    switch (e->type) {
    case CFG__INT:
    case CFG__SIZE:
        if (json_is_integer(j)) {
            long long v = json_integer_value(j);
            snprintf(shown, sizeof shown, "%lld", v);
            return set_int(ld, e, v, shown, origin);
        }
        if (json_is_string(j) && (e->keywords || e->type == CFG__SIZE))
            return set_text(ld, e, json_string_value(j), origin);
        want = e->type == CFG__SIZE ? "an integer or a size string such as \"8M\""
             : e->keywords ? "an integer or a string" : "an integer";
        return fail(ld, "%s: expected %s (%s), got %s", origin, want,
                    cfg__accepted(e, acc, sizeof acc), json_type_name(j));
    case CFG__STR:
    case CFG__ENUM:
        if (json_is_string(j))
            return set_text(ld, e, json_string_value(j), origin);
        want = "a string";
        break;
    case CFG__BOOL:
        if (json_is_boolean(j)) {
            *(bool *)((char *)ld->cfg + e->off) = json_is_true(j);
            return 0;
        }
        want = "true or false";
        break;
    case CFG__LIST: {
        if (json_is_string(j))
            return set_text(ld, e, json_string_value(j), origin);
        if (!json_is_array(j))
            return fail(ld, "%s: expected a string or an array of strings, got %s", origin,
                        json_type_name(j));
        size_t i;
        json_t *item;
        list_clear(ld->cfg, e);
        if (list_add(ld->cfg, e, NULL, 0) < 0)
            return oom(ld);
        json_array_foreach(j, i, item) {
            char sb[80];
            if (!json_is_string(item))
                return fail(ld, "%s: item %zu: expected a string, got %s", origin, i,
                            json_type_name(item));
            const char *s = json_string_value(item);
            const char *why = e->check ? e->check(s) : NULL;
            if (why)
                return fail(ld, "%s: '%s' %s", origin, cfg__show(s, sb, sizeof sb), why);
            if (list_add(ld->cfg, e, s, strlen(s)) < 0)
                return oom(ld);
        }
        return 0;
    }
    case CFG__ACTION:
        break;
    }
    return fail(ld, "%s: expected %s, got %s", origin, want ? want : "nothing", json_type_name(j));
}

/* ---- lookups -------------------------------------------------------------- */

/* The entry called name[0..len): dashes, or in JSON also underscores. */
static const struct cfg__entry *find_entry(const char *name, size_t len, bool underscores)
{
    for (const struct cfg__entry *e = cfg__table; e < cfg__table + CFG__N_ENTRIES; e++) {
        if (strlen(e->name) != len)
            continue;
        size_t i = 0;
        for (; i < len; i++)
            if (name[i] != e->name[i] && !(underscores && name[i] == '_' && e->name[i] == '-'))
                break;
        if (i == len)
            return e;
    }
    return NULL;
}

static const char *env_name(const struct cfg__entry *e, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "MINICPMD_");
    for (const char *p = e->name; *p && n + 1 < len; p++)
        buf[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[n] = '\0';
    return buf;
}

/* ---- layers --------------------------------------------------------------- */

static int apply_defaults(struct loader *ld)
{
    struct cfg *cfg = ld->cfg;
    for (const struct cfg__entry *e = cfg__table; e < cfg__table + CFG__N_ENTRIES; e++) {
        char *field = (char *)cfg + e->off;
        if (e->flags & CFG__NO_FIELD)
            continue;
        if (e->def_fn) {
            e->def_fn(cfg, ld->envp);
            continue;
        }
        switch (e->type) {
        case CFG__INT: case CFG__ENUM: *(int *)field = (int)e->def; break;
        case CFG__SIZE: *(size_t *)field = (size_t)e->def; break;
        case CFG__BOOL: *(bool *)field = e->def != 0; break;
        case CFG__STR:
            if (e->def_str && !(*(char **)field = strdup(e->def_str)))
                return oom(ld);
            break;
        case CFG__LIST:
            /* Always a valid (maybe empty) NULL-terminated array. */
            if (list_add(cfg, e, NULL, 0) < 0)
                return oom(ld);
            break;
        case CFG__ACTION: break;
        }
    }
    return cfg->state_dir ? 0 : oom(ld);
}

static void end_layer(struct loader *ld)
{
    for (int i = 0; i < CFG__N_ENTRIES; i++) {
        ld->seen_any[i] |= ld->seen[i];
        ld->seen[i] = false;
    }
}

/* The api key may come from the key itself or from a file, not both at once. */
static int check_key_conflict(struct loader *ld, const char *where)
{
    if (ld->seen[CFG__E_API_KEY] && ld->seen[CFG__E_API_KEY_FILE])
        return fail(ld, "%sapi-key and api-key-file cannot both be given (choose one)", where);
    return 0;
}

static int apply_file(struct loader *ld, const char *path, bool must_exist)
{
    json_error_t jerr;
    char origin[PATH_MAX + 128], kb[80];
    const char *key;
    json_t *root = NULL, *val;
    FILE *f = NULL;
    int rc = -EINVAL;

    const char *why;
    int frc;
    if (!(f = ut_fopen_regular(path, CONFIG_FILE_MAX, &frc, &why))) {
        if (frc == -ENOENT && !must_exist)
            return 0;
        return fail(ld, "config file %s: %s", path, frc == -EFBIG ? "larger than 1 MiB" : why);
    }
    if (!(ld->cfg->config_path = strdup(path))) {
        rc = oom(ld);
        goto out;
    }
    root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        fail(ld, "config file %s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        goto out;
    }
    if (!json_is_object(root)) {
        fail(ld, "config file %s: the top level must be an object, not %s", path,
             json_type_name(root));
        goto out;
    }

    json_object_foreach(root, key, val) {
        const struct cfg__entry *e = find_entry(key, strlen(key), true);
        cfg__show(key, kb, sizeof kb);
        if (!e || (e->flags & CFG__CLI_ONLY)) {
            warnf(ld, "config file %s: unknown key '%s' (ignored)", path, kb);
            continue;
        }
        if (ld->seen[e - cfg__table]) {
            fail(ld, "config file %s: key '%s' repeats '%s'", path, kb, e->name);
            goto out;
        }
        snprintf(origin, sizeof origin, "config file %s: key '%s'", path, kb);
        if ((rc = set_json(ld, e, val, origin)) < 0)
            goto out;
        rc = -EINVAL;
        ld->seen[e - cfg__table] = true;
    }
    snprintf(origin, sizeof origin, "config file %s: ", path);
    rc = check_key_conflict(ld, origin);
out:
    json_decref(root);
    fclose(f);
    return rc;
}

static int apply_env(struct loader *ld)
{
    char name[128];
    for (const struct cfg__entry *e = cfg__table; e < cfg__table + CFG__N_ENTRIES; e++) {
        if (e->flags & CFG__CLI_ONLY)
            continue;
        const char *v = cfg__env_get(ld->envp, env_name(e, name, sizeof name));
        if (!v)
            continue;
        int rc = set_text(ld, e, v, name);
        if (rc < 0)
            return rc;
        ld->seen[e - cfg__table] = true;
    }
    for (size_t i = 0; ld->envp && ld->envp[i]; i++) {
        const char *var = ld->envp[i];
        size_t n = strcspn(var, "=");
        const struct cfg__entry *e = NULL;
        bool allowed = false;
        if (strncmp(var, "MINICPMD_", 9) != 0)
            continue;
        for (int k = 0; env_allow[k]; k++)
            allowed |= strlen(env_allow[k]) == n && strncmp(var, env_allow[k], n) == 0;
        for (const struct cfg__entry *t = cfg__table;
             !allowed && !e && t < cfg__table + CFG__N_ENTRIES; t++)
            if (!(t->flags & CFG__CLI_ONLY) && strlen(env_name(t, name, sizeof name)) == n &&
                strncmp(var, name, n) == 0)
                e = t;
        if (!allowed && !e)
            warnf(ld, "environment: unknown variable '%.*s' (ignored)", (int)(n > 100 ? 100 : n),
                  var);
    }
    return check_key_conflict(ld, "environment: ");
}

/* ---- argv ----------------------------------------------------------------- */

enum arg_kind { ARG_FLAG, ARG_END, ARG_POSITIONAL, ARG_UNKNOWN, ARG_NO_VALUE, ARG_EXTRA_VALUE };

struct arg {
    enum arg_kind kind;
    const struct cfg__entry *e;
    const char *value;          /* ARG_FLAG with a value */
    const char *text;           /* the argument as written, for messages */
};

/* Classify argv[*i] and step past it (and past its value). */
static void next_arg(int argc, char *const argv[], int *i, struct arg *a)
{
    const char *s = argv[*i];
    *a = (struct arg){ .text = s };
    (*i)++;
    if (strcmp(s, "--") == 0) {
        a->kind = ARG_END;
        return;
    }
    if (strcmp(s, "-h") == 0) {
        a->kind = ARG_FLAG;
        a->e = &cfg__table[CFG__E_HELP];
        return;
    }
    if (s[0] != '-' || s[1] == '\0') {
        a->kind = ARG_POSITIONAL;
        return;
    }
    const char *eq = strchr(s, '=');
    size_t n = eq ? (size_t)(eq - s - 2) : strlen(s + 2);
    if (s[1] != '-' || !(a->e = find_entry(s + 2, n, false))) {
        a->kind = ARG_UNKNOWN;
        return;
    }
    a->kind = ARG_FLAG;
    if (eq) {
        a->value = eq + 1;
        if (a->e->type == CFG__ACTION)
            a->kind = ARG_EXTRA_VALUE;
        return;
    }
    if (a->e->type == CFG__ACTION)
        return;
    if (a->e->type == CFG__BOOL) {
        a->value = "true";
        return;
    }
    /* "--model --port 1" is a forgotten value, not a model called "--port". */
    if (*i >= argc || (argv[*i][0] == '-' && argv[*i][1] == '-' && argv[*i][2] != '\0')) {
        a->kind = ARG_NO_VALUE;
        return;
    }
    a->value = argv[(*i)++];
}

/* Before any layer: find --help/--version and --config, and reject malformed
 * command lines so that a typo is reported before a broken config file is. */
static enum cfg_result prescan(struct loader *ld, int argc, char *const argv[],
                               const char **config)
{
    char sb[80], acc[96];
    int error = 0;
    for (int i = 1; i < argc;) {
        struct arg a;
        next_arg(argc, argv, &i, &a);
        if (a.kind == ARG_END) {
            if (i < argc && !error)
                error = fail(ld, "unexpected argument '%s' (minicpmd takes no positional "
                             "arguments; see --help)", cfg__show(argv[i], sb, sizeof sb));
            break;
        }
        if (a.kind == ARG_FLAG && a.e == &cfg__table[CFG__E_HELP])
            return CFG_RESULT_HELP;
        if (a.kind == ARG_FLAG && a.e == &cfg__table[CFG__E_VERSION])
            return CFG_RESULT_VERSION;
        if (a.kind == ARG_FLAG && a.e == &cfg__table[CFG__E_CONFIG])
            *config = a.value;
        if (error)
            continue;
        if (a.kind == ARG_FLAG && a.e == &cfg__table[CFG__E_CONFIG] && *a.value == '\0')
            error = fail(ld, "--config: empty value");
        cfg__show(a.text, sb, sizeof sb);
        if (a.kind == ARG_POSITIONAL)
            error = fail(ld, "unexpected argument '%s' (minicpmd takes no positional arguments; "
                         "see --help)", sb);
        else if (a.kind == ARG_UNKNOWN)
            error = fail(ld, "unknown flag '%.*s' (see --help)", (int)strcspn(sb, "="), sb);
        else if (a.kind == ARG_EXTRA_VALUE)
            error = fail(ld, "--%s takes no value", a.e->name);
        else if (a.kind == ARG_NO_VALUE)
            error = fail(ld, "--%s: missing value (%s)", a.e->name,
                         a.e->type == CFG__INT || a.e->type == CFG__SIZE
                             ? cfg__accepted(a.e, acc, sizeof acc)
                         : a.e->type == CFG__ENUM ? cfg__join_names(a.e->names, acc, sizeof acc)
                         : a.e->metavar);
    }
    return error ? CFG_RESULT_ERROR : CFG_RESULT_RUN;
}

static int apply_argv(struct loader *ld, int argc, char *const argv[])
{
    for (int i = 1; i < argc;) {
        struct arg a;
        char origin[96];
        next_arg(argc, argv, &i, &a);
        if (a.kind == ARG_END)
            break;
        if (a.kind != ARG_FLAG || a.e == &cfg__table[CFG__E_CONFIG])
            continue;           /* prescan() dealt with these */
        snprintf(origin, sizeof origin, "--%s", a.e->name);
        int rc = set_text(ld, a.e, a.value, origin);
        if (rc < 0)
            return rc;
        ld->seen[a.e - cfg__table] = true;
    }
    return check_key_conflict(ld, "");
}

/* Read the api key file that won, now that no stronger layer can replace it. */
static int read_key_file(struct loader *ld)
{
    const char *path = ld->key_file, *origin = ld->key_file_origin;
    char sb[80], buf[KEY_FILE_MAX + 1];
    const char *why;
    int frc;
    FILE *f = ut_fopen_regular(path, 0, &frc, &why);
    cfg__show(path, sb, sizeof sb);
    if (!f)
        return fail(ld, "%s: cannot read '%s': %s", origin, sb, why);
    size_t n = fread(buf, 1, sizeof buf, f);
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (rerr)
        return fail(ld, "%s: cannot read '%s': %s", origin, sb, strerror(rerr));
    if (n > KEY_FILE_MAX)
        return fail(ld, "%s: '%s' is larger than %d bytes; it should hold just the key", origin,
                    sb, KEY_FILE_MAX);
    /* The line end a file ends with is not part of the key (one "\n" or "\r\n",
     * trimmed); any other blank around the key is refused like --api-key's. */
    if (n && buf[n - 1] == '\n')
        n--;
    if (n && buf[n - 1] == '\r')
        n--;
    buf[n] = '\0';
    if (n == 0)
        return fail(ld, "%s: '%s' is empty", origin, sb);
    const char *bad = strlen(buf) != n ? "contains control characters" : cfg__check_secret(buf);
    if (bad)
        return fail(ld, "%s: the key in '%s' %s; it should hold just the key", origin, sb, bad);
    if (!(ld->cfg->api_key = strdup(buf)))
        return oom(ld);
    return 0;
}

enum cfg_result cfg_load(struct cfg *cfg, int argc, char *const argv[], char *const envp[],
                         cfg_warn_fn warn, void *warn_ud, char *err, size_t errlen)
{
    struct loader ld = { .cfg = cfg, .envp = envp, .warn = warn, .warn_ud = warn_ud,
                         .err = err, .errlen = errlen };
    const char *config = NULL;
    enum cfg_result res = CFG_RESULT_ERROR;

    memset(cfg, 0, sizeof *cfg);
    if (err && errlen)
        err[0] = '\0';
    if (apply_defaults(&ld) < 0)
        goto out;
    res = prescan(&ld, argc, argv, &config);
    if (res != CFG_RESULT_RUN)
        goto out;
    res = CFG_RESULT_ERROR;

    if (config) {
        if (apply_file(&ld, config, true) < 0)
            goto out;
    } else if ((config = cfg__env_get(envp, "MINICPMD_CONFIG")) && *config) {
        if (apply_file(&ld, config, true) < 0)
            goto out;
    } else if (apply_file(&ld, CFG__DEFAULT_CONFIG_PATH, false) < 0) {
        goto out;
    }
    end_layer(&ld);
    if (apply_env(&ld) < 0)
        goto out;
    end_layer(&ld);
    if (apply_argv(&ld, argc, argv) < 0)
        goto out;
    end_layer(&ld);

    if (ld.key_file && read_key_file(&ld) < 0)
        goto out;
    cfg->model_explicit = ld.seen_any[CFG__E_MODEL];
    res = CFG_RESULT_RUN;
out:
    free(ld.key_file);
    return res;
}

void cfg_free(struct cfg *cfg)
{
    if (!cfg)
        return;
    for (const struct cfg__entry *e = cfg__table; e < cfg__table + CFG__N_ENTRIES; e++) {
        if (e->flags & CFG__NO_FIELD)
            continue;
        if (e->type == CFG__STR)
            field_free_str(cfg, e);
        else if (e->type == CFG__LIST)
            list_clear(cfg, e);
    }
    memset(cfg, 0, sizeof *cfg);
}
