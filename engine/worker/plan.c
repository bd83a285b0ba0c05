#include "engine/worker/plan.h"
#include "engine/err.h"
#include "util/defaults.h"
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the plan of one step ---------------------------------------------------- */

int eng_plan_init(struct eng_plan *p, int n_layers, int k, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    if (n_layers < 1 || n_layers > ENG_PLAN_MAX_LAYERS)
        return eng__fail(err, errlen, -EINVAL, "plan: n_layers %d is not in 1..%d", n_layers,
                         ENG_PLAN_MAX_LAYERS);
    if (k == ENG_PLAN_ALL || k > n_layers)
        k = n_layers;
    if (k < 1)
        return eng__fail(err, errlen, -EINVAL, "plan: layers per runlist %d is not >= 1 or all", k);

    int n_layer_lists = (n_layers + k - 1) / k;
    struct eng_cmd *cmds = calloc((size_t)n_layers + 2, sizeof *cmds);
    struct eng_runlist *rls = calloc((size_t)n_layer_lists + 1, sizeof *rls);
    if (!cmds || !rls) {
        free(cmds);
        free(rls);
        return eng__fail(err, errlen, -ENOMEM, "plan: out of memory");
    }

    /* cmds: EMBED, LAYER 0 .. n-1, HEAD. Runlist i > 0 starts at its first layer;
     * runlist 0 also takes the EMBED before it. */
    cmds[0] = (struct eng_cmd){ENG_CMD_EMBED, -1};
    for (int l = 0; l < n_layers; l++)
        cmds[1 + l] = (struct eng_cmd){ENG_CMD_LAYER, l};
    cmds[n_layers + 1] = (struct eng_cmd){ENG_CMD_HEAD, -1};

    for (int i = 0; i < n_layer_lists; i++) {
        struct eng_runlist *r = &rls[i];
        r->index = i;
        r->layer_begin = i * k;
        r->layer_end = r->layer_begin + k < n_layers ? r->layer_begin + k : n_layers;
        r->has_embed = i == 0;
        r->cmds = &cmds[1 + r->layer_begin - (r->has_embed ? 1 : 0)];
        r->n_cmds = r->layer_end - r->layer_begin + (r->has_embed ? 1 : 0);
    }
    struct eng_runlist *h = &rls[n_layer_lists];
    h->index = n_layer_lists;
    h->layer_begin = h->layer_end = n_layers;
    h->has_head = true;
    h->cmds = &cmds[n_layers + 1];
    h->n_cmds = 1;

    p->n_layers = n_layers;
    p->k = k;
    p->n_runlists = n_layer_lists + 1;
    p->runlists = rls;
    p->n_cmds = n_layers + 2;
    p->cmds = cmds;
    return 0;
}

void eng_plan_deinit(struct eng_plan *p)
{
    if (!p)
        return;
    free(p->runlists);
    free(p->cmds);
    memset(p, 0, sizeof *p);
}

/* ---- prefill chunks ---------------------------------------------------------- */

int eng_plan_prefill_count(int n_prompt, int chunk_tokens)
{
    if (n_prompt <= 0)
        return 0;
    if (chunk_tokens <= 0 || chunk_tokens >= n_prompt)
        return 1;
    return n_prompt / chunk_tokens + (n_prompt % chunk_tokens != 0);
}

int eng_plan_prefill_chunk(int n_prompt, int chunk_tokens, int index, struct eng_prefill_chunk *out)
{
    int count = eng_plan_prefill_count(n_prompt, chunk_tokens);
    if (index < 0 || index >= count)
        return -EINVAL;
    int c = chunk_tokens <= 0 || chunk_tokens > n_prompt ? n_prompt : chunk_tokens;
    out->index = index;
    out->count = count;
    out->token_begin = index * c;
    out->n_tokens = n_prompt - out->token_begin < c ? n_prompt - out->token_begin : c;
    out->last = index == count - 1;
    return 0;
}

/* ---- adaptive K ---------------------------------------------------------------- */

static int clamp_k(int k, int n)
{
    return k == ENG_PLAN_ALL || k <= 0 || k > n ? n : k;
}

int eng_kpolicy_init(struct eng_kpolicy *p, const struct eng_kpolicy_opts *o, char *err,
                     size_t errlen)
{
    memset(p, 0, sizeof *p);
    if (o->n_layers < 1 || o->n_layers > ENG_PLAN_MAX_LAYERS)
        return eng__fail(err, errlen, -EINVAL, "runlist policy: n_layers %d is not in 1..%d",
                         o->n_layers, ENG_PLAN_MAX_LAYERS);
    p->mode = o->mode;
    p->n_layers = o->n_layers;
    switch (o->mode) {
    case ENG_KMODE_ALL:
        p->k = o->n_layers;
        break;
    case ENG_KMODE_FIXED:
        if (o->fixed_k < 1)
            return eng__fail(err, errlen, -EINVAL,
                             "runlist policy: fixed layers per runlist %d is not >= 1", o->fixed_k);
        p->k = clamp_k(o->fixed_k, o->n_layers);
        break;
    case ENG_KMODE_AUTO:
        if (o->remembered_k >= 1) {
            p->k = clamp_k(o->remembered_k, o->n_layers);
            p->remembered_k = p->k;
        } else {
            p->k = clamp_k(o->device_default_k, o->n_layers);
        }
        p->max_retries = o->max_retries < 0 ? UT_RUNLIST_RETRIES_DEFAULT : o->max_retries;
        p->k_top = clamp_k(o->device_default_k, o->n_layers);
        if (p->k > p->k_top)
            p->k = p->k_top;
        p->probe_base = o->probe_tokens > 0 ? o->probe_tokens : UT_RUNLIST_PROBE_TOKENS;
        p->probe_after = p->probe_base;
        break;
    default:
        return eng__fail(err, errlen, -EINVAL, "runlist policy: unknown mode %d", (int)o->mode);
    }
    p->attempts = 0;
    return 0;
}

int eng_kpolicy_k(const struct eng_kpolicy *p)
{
    return p->k;
}

void eng_kpolicy_begin(struct eng_kpolicy *p)
{
    p->attempts = 1;
}

bool eng_kpolicy_adapts(int state)
{
    switch (state) {
    case ENG_ERT_NEW:
    case ENG_ERT_QUEUED:
    case ENG_ERT_RUNNING:
    case ENG_ERT_SUBMITTED:
    case ENG_ERT_ABORT:
    case ENG_ERT_TIMEOUT:
    case ENG_ERT_NORESPONSE:
        return true;
    }
    return false;
}

enum eng_kverdict eng_kpolicy_failed(struct eng_kpolicy *p, int state)
{
    if (p->attempts < 1)
        p->attempts = 1;  /* a caller that forgot eng_kpolicy_begin */
    bool changed = p->device_changed;
    p->device_changed = false;
    if (p->mode == ENG_KMODE_AUTO && eng_kpolicy_adapts(state) && p->k <= 1 && changed &&
        p->attempts - 1 < p->max_retries) {
        p->attempts++;          /* the ladder's last rung: the device's own fallback */
        return ENG_KVERDICT_RETRY;
    }
    if (p->mode != ENG_KMODE_AUTO || !eng_kpolicy_adapts(state) || p->k <= 1)
        return ENG_KVERDICT_GIVE_UP;
    p->run = 0;
    if (p->probing) {           /* the larger K hangs still: try it less often */
        p->probing = false;
        p->probe_after = p->probe_after > UT_RUNLIST_PROBE_TOKENS_MAX / 2
                             ? UT_RUNLIST_PROBE_TOKENS_MAX
                             : p->probe_after * 2;
    }
    p->k = (p->k + 1) / 2;
    if (p->attempts - 1 >= p->max_retries)
        return ENG_KVERDICT_GIVE_UP;
    p->attempts++;
    return ENG_KVERDICT_RETRY;
}

bool eng_kpolicy_succeeded(struct eng_kpolicy *p)
{
    if (p->mode != ENG_KMODE_AUTO || p->k == p->remembered_k)
        return false;
    p->remembered_k = p->k;
    return true;
}

int eng_kpolicy_grow(struct eng_kpolicy *p, int n_tokens)
{
    if (p->mode != ENG_KMODE_AUTO)
        return 0;
    if (p->probing) {           /* the probe's request completed: K holds */
        p->probing = false;
        p->probe_after = p->probe_base;
    }
    p->run += n_tokens > 0 ? n_tokens : 0;
    if (p->k >= p->k_top || p->max_retries < 1 || p->run < p->probe_after)
        return 0;
    p->k = p->k > p->k_top / 2 ? p->k_top : p->k * 2;
    p->run = 0;
    p->probing = true;
    return p->k;
}

/* ---- remembered K ---------------------------------------------------------------- */

#define KSTATE_VERSION 1
#define KSTATE_MAX_BYTES (1 << 20)

int eng_kstate_path(const char *state_dir, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s", state_dir, ENG_KSTATE_FILE);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Read and parse the file. Returns 0 with *root set, 0 with *root NULL when the
 * file does not exist, or negative with the reason in err. The checks keep a
 * FIFO, a directory or a huge file at `path` from hanging or eating the worker. */
static int read_state(const char *path, json_t **root, char *err, size_t errlen)
{
    *root = NULL;
    const char *why;
    int rc;
    FILE *f = ut_fopen_regular(path, KSTATE_MAX_BYTES, &rc, &why);
    if (!f) {
        if (rc == -ENOENT)
            return 0;
        return eng__fail(err, errlen, rc == -EFBIG ? -EINVAL : rc, "%s: %s", path,
                         rc == -EFBIG ? "larger than 1 MiB" : why);
    }
    json_error_t je;
    json_t *j = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!j)
        return eng__fail(err, errlen, -EINVAL, "%s:%d: corrupt: %s", path, je.line, je.text);
    json_t *version = json_object_get(j, "version");
    if (!json_is_object(j) || !json_is_integer(version) ||
        json_integer_value(version) != KSTATE_VERSION ||
        !json_is_object(json_object_get(j, "entries"))) {
        json_decref(j);
        return eng__fail(err, errlen, -EINVAL,
                         "%s: corrupt: not {\"version\": %d, \"entries\": {…}}", path,
                         KSTATE_VERSION);
    }
    *root = j;
    return 0;
}

static int check_ids(const char *model_id, const char *device_id, char *err, size_t errlen)
{
    if (!model_id || !*model_id || !device_id || !*device_id)
        return eng__fail(err, errlen, -EINVAL, "runlist state: empty model or device id");
    return 0;
}

static int lookup(const char *path, const char *model_id, const char *device_id, int *k,
                  long long *updated, char *err, size_t errlen);

int eng_kstate_load(const char *path, const char *model_id, const char *device_id, int *k,
                    char *err, size_t errlen)
{
    return lookup(path, model_id, device_id, k, NULL, err, errlen);
}

int eng_kstate_load_fresh(const char *path, const char *model_id, const char *device_id,
                          long long max_age_s, long long now, int *k, char *err, size_t errlen)
{
    long long updated = -1;
    int rc = lookup(path, model_id, device_id, k, &updated, err, errlen);
    if (rc != 1)
        return rc;
    if (updated < 0 || now - updated > max_age_s) {
        eng__fail(err, errlen, 2,
                  "%s: K %d for model \"%s\" on device \"%s\" is %s (kept %lld s at most)",
                  path, *k, model_id, device_id,
                  updated < 0 ? "undated" : "out of date", max_age_s);
        return 2;
    }
    return 1;
}

/* "updated" as written by eng_kstate_save, in seconds since the epoch; -1 when
 * missing or not in that form. */
static long long parse_stamp(const json_t *v)
{
    const char *s = json_string_value(v);
    struct tm tm = {0};
    if (!s)
        return -1;
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (!end || *end)
        return -1;
    return (long long)timegm(&tm);
}

static int lookup(const char *path, const char *model_id, const char *device_id, int *k,
                  long long *updated, char *err, size_t errlen)
{
    int rc = check_ids(model_id, device_id, err, errlen);
    if (rc)
        return rc;
    json_t *root;
    if ((rc = read_state(path, &root, err, errlen)) != 0 || !root)
        return rc;
    json_t *entries = json_object_get(root, "entries");
    json_t *dev = json_object_get(json_object_get(entries, model_id), device_id);
    if (!dev) {
        json_decref(root);
        return 0;
    }
    json_t *jk = json_object_get(dev, "k");
    json_int_t v = json_integer_value(jk);
    if (!json_is_integer(jk) || v < 1 || v > ENG_PLAN_MAX_LAYERS) {
        json_decref(root);
        return eng__fail(err, errlen, -EINVAL,
                         "%s: entry for model \"%s\" on device \"%s\" has no valid \"k\"", path,
                         model_id, device_id);
    }
    *k = (int)v;
    if (updated)
        *updated = parse_stamp(json_object_get(dev, "updated"));
    json_decref(root);
    return 1;
}

/* mkdir -p of the directory part of `path`. */
static int make_parent(const char *path, char *err, size_t errlen)
{
    char *dir = strdup(path);
    if (!dir)
        return eng__fail(err, errlen, -ENOMEM, "out of memory");
    char *slash = strrchr(dir, '/');
    int rc = 0;
    if (slash && slash != dir) {
        *slash = '\0';
        for (char *p = dir + 1; ; p++) {
            if (*p == '/' || *p == '\0') {
                char c = *p;
                *p = '\0';
                if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
                    int e = errno;
                    rc = eng__fail(err, errlen, -e, "%s: %s", dir, strerror(e));
                    break;
                }
                *p = c;
                if (c == '\0')
                    break;
            }
        }
    }
    free(dir);
    return rc;
}

/* Write `root` to path atomically (util/fs.h): a reader never sees half a file,
 * and a crash leaves the old state or the new one. */
static int write_atomic(const char *path, const json_t *root, char *err, size_t errlen)
{
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text)
        return eng__fail(err, errlen, -ENOMEM, "out of memory");
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);   /* the file ends in a newline */
    if (!line) {
        free(text);
        return eng__fail(err, errlen, -ENOMEM, "out of memory");
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    int rc = ut_write_atomic(path, line, n + 1, 0644, err, errlen);
    free(line);
    return rc;
}

static json_t *new_state(void)
{
    return json_pack("{s:i, s:{}}", "version", KSTATE_VERSION, "entries");
}

int eng_kstate_save(const char *path, const char *model_id, const char *device_id, int k,
                    int n_layers, char *err, size_t errlen)
{
    int rc = check_ids(model_id, device_id, err, errlen);
    if (rc)
        return rc;
    if (k < 1 || k > ENG_PLAN_MAX_LAYERS)
        return eng__fail(err, errlen, -EINVAL, "runlist state: K %d is not in 1..%d", k,
                         ENG_PLAN_MAX_LAYERS);
    if ((rc = make_parent(path, err, errlen)) != 0)
        return rc;

    /* A corrupt or unreadable old file is replaced, and said so (return 1). */
    char old_err[512] = "";
    json_t *root;
    int replaced = read_state(path, &root, old_err, sizeof old_err) != 0;
    if (!root && !(root = new_state()))
        return eng__fail(err, errlen, -ENOMEM, "out of memory");

    char stamp[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);

    json_t *entries = json_object_get(root, "entries");
    json_t *model = json_object_get(entries, model_id);
    if (!json_is_object(model)) {
        model = json_object();
        if (!model || json_object_set_new(entries, model_id, model) != 0) {
            json_decref(root);
            return eng__fail(err, errlen, -EINVAL, "runlist state: cannot store model id \"%s\"",
                             model_id);
        }
    }
    json_t *entry = json_pack("{s:i, s:s}", "k", k, "updated", stamp);
    if (entry && n_layers > 0)
        json_object_set_new(entry, "n_layers", json_integer(n_layers));
    if (!entry || json_object_set_new(model, device_id, entry) != 0) {
        json_decref(root);
        return eng__fail(err, errlen, -EINVAL, "runlist state: cannot store device id \"%s\"",
                         device_id);
    }
    rc = write_atomic(path, root, err, errlen);
    json_decref(root);
    if (rc)
        return rc;
    if (replaced) {
        eng__fail(err, errlen, 1, "replaced unreadable runlist state: %s", old_err);
        return 1;
    }
    return 0;
}
