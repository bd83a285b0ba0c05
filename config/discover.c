/* discover — turn --model (a path or a tag) into a pack directory.
 *
 * A tag is looked up where a user is likely to already have the model: first in
 * FastFlowLM's model_list.json (people who tried FLM have MiniCPM5 there), then
 * in minicpmd's own models directories, and finally the demo pack the build made.
 * Nothing here is fatal unless the user named the model: a daemon started with
 * defaults must come up even on a machine with no model and a broken FLM install.
 * What was tried is remembered so that a failure says where we looked.
 */
#include "config/config.h"
#include "config/internal.h"
#include "minicpmd-build.h"
#include "util/fs.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#define EMBEDDED_ID "minicpm5-demo"

/* A tag split into its parts: "minicpm5:2b" and "minicpm5-2b" both give
 * family "minicpm5", size "2b". A name without a separator has no size. */
struct tag {
    char family[128];
    char size[64];
    bool has_size;
};

/* What the search found out on the way, for the final message. */
struct search {
    char flm_note[PATH_MAX + 256];      /* about FastFlowLM, or "" */
    char looked[3 * PATH_MAX + 64];     /* ", "-separated directories tried */
    bool flm_broken;                    /* model_list.json exists but is unusable */
    bool flm_missing_dir;               /* listed, but its directory does not exist */
};

__attribute__((format(printf, 3, 4)))
static void setf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    if (!buf || !len)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Fill `loc` with the canonical absolute form of `dir`. */
static int found(struct cfg_model_location *loc, enum cfg_model_source src, const char *dir,
                 const char *id)
{
    char *abs = realpath(dir, NULL);
    if (!abs)
        return -errno;
    if (!id) {
        const char *slash = strrchr(abs, '/');
        id = slash && slash[1] ? slash + 1 : abs;
    }
    loc->source = src;
    loc->path = abs;
    if (!(loc->id = strdup(id)))
        return -ENOMEM;
    return 0;
}

static bool looks_like_path(const char *s)
{
    return strchr(s, '/') || s[0] == '.' || s[0] == '~';
}

static void parse_tag(const char *s, struct tag *t)
{
    const char *sep = strchr(s, ':');
    if (!sep)
        sep = strrchr(s, '-');
    memset(t, 0, sizeof *t);
    if (!sep || sep == s || sep[1] == '\0') {
        snprintf(t->family, sizeof t->family, "%s", s);
        return;
    }
    snprintf(t->family, sizeof t->family, "%.*s", (int)(sep - s), s);
    snprintf(t->size, sizeof t->size, "%s", sep + 1);
    t->has_size = true;
}

/* models[key], exactly or else ignoring case ("MiniCPM5:2B" still finds it). */
static json_t *get_key(json_t *obj, const char *key, const char **real_key)
{
    const char *k;
    json_t *v;
    if ((v = json_object_get(obj, key))) {
        *real_key = key;
        return v;
    }
    json_object_foreach(obj, k, v) {
        if (strcasecmp(k, key) == 0) {
            *real_key = k;
            return v;
        }
    }
    return NULL;
}

/* $FLM_CONFIG_DIR, else $XDG_CONFIG_HOME/flm, else $HOME/.config/flm. */
static char *flm_dir(char *const envp[])
{
    const char *v = cfg__env_get(envp, "FLM_CONFIG_DIR");
    if (v && *v)
        return strdup(v);
    v = cfg__env_get(envp, "XDG_CONFIG_HOME");
    if (v && v[0] == '/')
        return cfg__path_join(v, "flm");
    v = cfg__env_get(envp, "HOME");
    if (v && *v)
        return cfg__path_join(v, ".config/flm");
    return NULL;
}

/* Look the tag up in FastFlowLM's list. Returns 1 found (loc filled), 0 not
 * found (s->flm_note says why when it matters), -ENOMEM out of memory. */
static int try_flm(const struct tag *t, char *const envp[], struct cfg_model_location *loc,
                   struct search *s)
{
    char *dir = NULL, *list = NULL, *models_dir = NULL, *pack = NULL, id[256];
    const char *fam_key, *size_key, *mp;
    json_t *root = NULL, *models, *fam, *entry, *name, *jmp;
    json_error_t jerr;
    int rc = -ENOMEM;

    if (!t->has_size)
        return 0;               /* FLM tags always have a size */
    if (!(dir = flm_dir(envp)))
        return 0;
    if (!(list = cfg__path_join(dir, "model_list.json")))
        goto out;
    const char *why;
    int frc;
    FILE *f = ut_fopen_regular(list, 1 << 20, &frc, &why);
    if (!f) {
        rc = 0;
        if (frc == -ENOENT)
            goto out;           /* no FLM here: not worth a word */
        s->flm_broken = true;
        setf(s->flm_note, sizeof s->flm_note, "cannot read FastFlowLM's %s (%s)", list,
             frc == -EFBIG ? "larger than 1 MiB" : why);
        goto out;
    }
    root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!root) {
        rc = 0;
        s->flm_broken = true;
        if (jerr.line > 0)
            setf(s->flm_note, sizeof s->flm_note, "FastFlowLM's %s is malformed (%d:%d: %s)",
                 list, jerr.line, jerr.column, jerr.text);
        else
            setf(s->flm_note, sizeof s->flm_note, "cannot read FastFlowLM's %s (%s)", list,
                 jerr.text);
        goto out;
    }

    rc = 0;
    const char *bad = NULL;
    models = json_object_get(root, "models");
    jmp = json_object_get(root, "model_path");
    if (!json_is_object(root))
        bad = "the top level is not an object";
    else if (!json_is_object(models))
        bad = "'models' is missing or not an object";
    else if (jmp && !json_is_string(jmp))
        bad = "'model_path' is not a string";
    if (bad)
        goto malformed;
    if (!(fam = get_key(models, t->family, &fam_key)))
        goto out;
    if (!json_is_object(fam)) {
        bad = "a model family is not an object";
        goto malformed;
    }
    if (!(entry = get_key(fam, t->size, &size_key)))
        goto out;
    name = json_object_get(entry, "name");
    if (!json_is_object(entry) || !json_is_string(name) || !*json_string_value(name) ||
        strchr(json_string_value(name), '/')) {
        bad = "the model's entry has no usable \"name\"";
        goto malformed;
    }

    /* FLM_MODEL_PATH wins, as in FLM itself; a relative model_path in the file
     * is relative to the file's directory. */
    rc = -ENOMEM;
    mp = cfg__env_get(envp, "FLM_MODEL_PATH");
    if (mp && *mp)
        models_dir = strdup(mp);
    else if ((mp = jmp ? json_string_value(jmp) : "models")[0] == '/')
        models_dir = strdup(mp);
    else
        models_dir = cfg__path_join(dir, mp);
    if (!models_dir || !(pack = cfg__path_join(models_dir, json_string_value(name))))
        goto out;
    snprintf(id, sizeof id, "%s:%s", fam_key, size_key);
    if (is_dir(pack)) {
        rc = found(loc, CFG_MODEL_FLM, pack, id);
        if (rc == 0)
            rc = 1;
        goto out;
    }
    rc = 0;
    s->flm_missing_dir = true;
    setf(s->flm_note, sizeof s->flm_note, "FastFlowLM lists it at %s, which does not exist",
         pack);
    goto out;

malformed:
    s->flm_broken = true;
    setf(s->flm_note, sizeof s->flm_note, "FastFlowLM's %s is malformed (%s)", list, bad);
out:
    json_decref(root);
    free(pack);
    free(models_dir);
    free(list);
    free(dir);
    return rc;
}

/* minicpmd's own models directories, user first. */
static int try_standard(const struct tag *t, char *const envp[], struct cfg_model_location *loc,
                        struct search *s)
{
    char name[256], *dirs[3] = { NULL, NULL, NULL }, *cand = NULL;
    const char *v;
    int rc = -ENOMEM;
    size_t n = 0;

    if (t->has_size)
        snprintf(name, sizeof name, "%s-%s", t->family, t->size);
    else
        snprintf(name, sizeof name, "%s", t->family);

    if ((v = cfg__env_get(envp, "XDG_DATA_HOME")) && v[0] == '/')
        dirs[n++] = cfg__path_join(v, "minicpmd/models");
    else if ((v = cfg__env_get(envp, "HOME")) && *v)
        dirs[n++] = cfg__path_join(v, ".local/share/minicpmd/models");
    /* Meson leaves localstatedir relative for some prefixes; then there is no
     * fixed place to look. */
    if (MINICPMD_LOCALSTATEDIR[0] == '/')
        dirs[n++] = strdup(MINICPMD_LOCALSTATEDIR "/lib/minicpmd/models");
    dirs[n++] = strdup(MINICPMD_DATADIR "/minicpmd/models");

    for (size_t i = 0; i < n && name[0]; i++) {
        size_t used = strlen(s->looked);
        if (!dirs[i] || !(cand = cfg__path_join(dirs[i], name)))
            goto out;
        if (is_dir(cand)) {
            char id[256];
            if (t->has_size)
                snprintf(id, sizeof id, "%s:%s", t->family, t->size);
            else
                snprintf(id, sizeof id, "%s", t->family);
            rc = found(loc, CFG_MODEL_STANDARD, cand, id);
            if (rc == 0)
                rc = 1;
            goto out;
        }
        snprintf(s->looked + used, sizeof s->looked - used, "%s%s", used ? ", " : "", cand);
        free(cand);
        cand = NULL;
    }
    rc = 0;
out:
    free(cand);
    for (size_t i = 0; i < n; i++)
        free(dirs[i]);
    return rc;
}

/* --model named a directory. "~/" is expanded because config files and
 * systemd units do not go through a shell. */
static int resolve_path(const char *want, char *const envp[], struct cfg_model_location *loc,
                        char *err, size_t errlen)
{
    const char *home = cfg__env_get(envp, "HOME");
    char *expanded = NULL;
    const char *path = want;
    struct stat st;
    int rc = -ENOMEM;

    if ((want[0] == '~' && (want[1] == '/' || want[1] == '\0')) && home && *home) {
        if (!(expanded = cfg__path_join(home, want[1] ? want + 2 : ".")))
            goto nomem;
        path = expanded;
    }
    if (stat(path, &st) < 0) {
        rc = -errno;
        setf(err, errlen, "--model '%s': %s", want, strerror(errno));
        goto out;
    }
    if (!S_ISDIR(st.st_mode)) {
        rc = -ENOTDIR;
        setf(err, errlen, "--model '%s': not a directory (a model is a pack directory)", want);
        goto out;
    }
    if ((rc = found(loc, CFG_MODEL_PATH, path, NULL)) < 0) {
        setf(err, errlen, "--model '%s': %s", want, strerror(-rc));
        goto out;
    }
    rc = 0;
    goto out;
nomem:
    setf(err, errlen, "--model '%s': out of memory", want);
out:
    free(expanded);
    return rc;
}

int cfg_model_resolve(const struct cfg *cfg, char *const envp[], const char *embedded_dir,
                      struct cfg_model_location *loc, char *err, size_t errlen)
{
    const char *want = cfg->model ? cfg->model : CFG_DEFAULT_MODEL_TAG;
    bool explicit = cfg->model != NULL || cfg->model_explicit;
    struct search *s = NULL;
    struct tag t;
    int rc = -ENOMEM;

    memset(loc, 0, sizeof *loc);
    if (err && errlen)
        err[0] = '\0';
    if (explicit && looks_like_path(want))
        return resolve_path(want, envp, loc, err, errlen);
    /* "none": serve the API without a model, not even the demo pack (tests; a
     * daemon whose pack is installed later and picked up by a restart). */
    if (explicit && strcmp(want, "none") == 0)
        return 0;

    /* Large buffers, and this runs once: keep them off the stack. */
    if (!(s = calloc(1, sizeof *s)))
        goto nomem;
    parse_tag(want, &t);
    int hit = try_flm(&t, envp, loc, s);
    if (hit == 0)
        hit = try_standard(&t, envp, loc, s);
    if (hit == 0 && embedded_dir && (!explicit || strcmp(want, EMBEDDED_ID) == 0) &&
        is_dir(embedded_dir))
        hit = found(loc, CFG_MODEL_EMBEDDED, embedded_dir, EMBEDDED_ID) < 0 ? -ENOMEM : 1;
    if (hit < 0)
        goto nomem;

    if (hit == 0 && explicit) {
        setf(err, errlen, "--model '%s': not found (%s%s%s)", want, s->flm_note,
             s->flm_note[0] ? "; also looked in: " : "looked in: ", s->looked);
        cfg_model_location_free(loc);
        rc = -ENOENT;
        goto out;
    }
    /* Not fatal, but a user who keeps models in FLM wants to know why it was
     * passed over. */
    if ((s->flm_broken || s->flm_missing_dir) && !(loc->warning = strdup(s->flm_note)))
        goto nomem;
    rc = 0;
    goto out;
nomem:
    setf(err, errlen, "--model '%s': out of memory", want);
    cfg_model_location_free(loc);
out:
    free(s);
    return rc;
}

void cfg_model_location_free(struct cfg_model_location *loc)
{
    if (!loc)
        return;
    free(loc->path);
    free(loc->id);
    free(loc->warning);
    memset(loc, 0, sizeof *loc);
}

const char *cfg_model_source_name(enum cfg_model_source src)
{
    switch (src) {
    case CFG_MODEL_NONE: return "none";
    case CFG_MODEL_PATH: return "path";
    case CFG_MODEL_FLM: return "fastflowlm";
    case CFG_MODEL_STANDARD: return "standard";
    case CFG_MODEL_EMBEDDED: return "embedded";
    }
    return "?";
}
