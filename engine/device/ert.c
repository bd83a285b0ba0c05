#include "engine/ert.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Indexed by state; the short name is the enum name without "ERT_CMD_STATE_". */
static const struct {
    const char *name;
    const char *code;
} states[] = {
    [ENG_ERT_NEW] = {"ERT_CMD_STATE_NEW", "ert_cmd_state_new"},
    [ENG_ERT_QUEUED] = {"ERT_CMD_STATE_QUEUED", "ert_cmd_state_queued"},
    [ENG_ERT_RUNNING] = {"ERT_CMD_STATE_RUNNING", "ert_cmd_state_running"},
    [ENG_ERT_COMPLETED] = {"ERT_CMD_STATE_COMPLETED", "ert_cmd_state_completed"},
    [ENG_ERT_ERROR] = {"ERT_CMD_STATE_ERROR", "ert_cmd_state_error"},
    [ENG_ERT_ABORT] = {"ERT_CMD_STATE_ABORT", "ert_cmd_state_abort"},
    [ENG_ERT_SUBMITTED] = {"ERT_CMD_STATE_SUBMITTED", "ert_cmd_state_submitted"},
    [ENG_ERT_TIMEOUT] = {"ERT_CMD_STATE_TIMEOUT", "ert_cmd_state_timeout"},
    [ENG_ERT_NORESPONSE] = {"ERT_CMD_STATE_NORESPONSE", "ert_cmd_state_noresponse"},
    [ENG_ERT_SKERROR] = {"ERT_CMD_STATE_SKERROR", "ert_cmd_state_skerror"},
    [ENG_ERT_SKCRASHED] = {"ERT_CMD_STATE_SKCRASHED", "ert_cmd_state_skcrashed"},
};

#define PREFIX "ERT_CMD_STATE_"

bool eng_ert_valid(int state)
{
    return state >= ENG_ERT_FIRST && state <= ENG_ERT_LAST;
}

bool eng_ert_is_success(int state)
{
    return state == ENG_ERT_COMPLETED;
}

const char *eng_ert_name(int state)
{
    return eng_ert_valid(state) ? states[state].name : PREFIX "UNKNOWN";
}

const char *eng_ert_code(int state)
{
    return eng_ert_valid(state) ? states[state].code : "ert_cmd_state_unknown";
}

int eng_ert_parse(const char *s, enum eng_ert_state *out)
{
    if (!s || !*s)
        return -EINVAL;
    if (s[0] >= '0' && s[0] <= '9') {
        /* At most two digits: 1..11, leading zeros allowed ("08"). */
        int v = 0;
        size_t i = 0;
        for (; s[i] >= '0' && s[i] <= '9'; i++) {
            v = v * 10 + (s[i] - '0');
            if (v > ENG_ERT_LAST)
                return -EINVAL;
        }
        if (s[i] != '\0' || !eng_ert_valid(v))
            return -EINVAL;
        *out = (enum eng_ert_state)v;
        return 0;
    }
    size_t plen = strlen(PREFIX);
    const char *shortname = strncasecmp(s, PREFIX, plen) == 0 ? s + plen : s;
    for (int st = ENG_ERT_FIRST; st <= ENG_ERT_LAST; st++) {
        if (strcasecmp(shortname, states[st].name + plen) == 0) {
            *out = (enum eng_ert_state)st;
            return 0;
        }
    }
    return -EINVAL;
}

const char *eng_phase_name(int phase)
{
    switch (phase) {
    case ENG_PHASE_PREFILL:
        return "prefill";
    case ENG_PHASE_DECODE:
        return "decode";
    }
    return "unknown";
}

void eng_device_error_init(struct eng_device_error *e, enum eng_ert_state state,
                           enum eng_phase phase)
{
    memset(e, 0, sizeof *e);
    e->state = state;
    e->phase = phase;
    e->failed_layer = -1;
    e->prefill_chunk_index = -1;
    e->attempts = 1;
}

void eng_device_error_set_device(struct eng_device_error *e, const char *name)
{
    snprintf(e->device, sizeof e->device, "%s", name ? name : "");
}

/* json_object_set_new() steals the value even when it fails, so a chain of them
 * only needs one check at the end. */
static int set(json_t *o, const char *k, json_t *v)
{
    return v ? json_object_set_new(o, k, v) : -1;
}

json_t *eng_device_error_to_json(const struct eng_device_error *e)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int rc = 0;
    rc |= set(o, "ert_state", json_integer(e->state));
    rc |= set(o, "ert_state_name", json_string(eng_ert_name(e->state)));
    rc |= set(o, "phase", json_string(eng_phase_name(e->phase)));
    rc |= set(o, "chunk_index", json_integer(e->chunk_index));
    rc |= set(o, "chunk_count", json_integer(e->chunk_count));
    rc |= set(o, "layer_begin", json_integer(e->layer_begin));
    rc |= set(o, "layer_end", json_integer(e->layer_end));
    if (e->failed_layer >= 0)
        rc |= set(o, "failed_layer", json_integer(e->failed_layer));
    rc |= set(o, "token_pos", json_integer(e->token_pos));
    rc |= set(o, "n_tokens", json_integer(e->n_tokens));
    if (e->phase == ENG_PHASE_PREFILL) {
        rc |= set(o, "prefill_chunk_index", json_integer(e->prefill_chunk_index));
        rc |= set(o, "prefill_chunk_count", json_integer(e->prefill_chunk_count));
    }
    rc |= set(o, "elapsed_ms", json_real(e->elapsed_ms));
    /* json_string() refuses invalid UTF-8; a device name is ours, but be safe. */
    json_t *dev = json_string(e->device);
    rc |= set(o, "device", dev ? dev : json_string("?"));
    rc |= set(o, "attempts", json_integer(e->attempts));
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int eng_device_error_format(const struct eng_device_error *e, char *buf, size_t len)
{
    char layers[64];
    if (e->layer_end > e->layer_begin)
        snprintf(layers, sizeof layers, "layers %d-%d", e->layer_begin, e->layer_end - 1);
    else
        snprintf(layers, sizeof layers, "no layers");
    char chunk[64] = "";
    if (e->phase == ENG_PHASE_PREFILL && e->prefill_chunk_count > 0)
        snprintf(chunk, sizeof chunk, " of prompt chunk %d of %d", e->prefill_chunk_index + 1,
                 e->prefill_chunk_count);
    char failed[48] = "";
    if (e->failed_layer >= 0)
        snprintf(failed, sizeof failed, ", failing layer %d", e->failed_layer);
    return snprintf(buf, len,
                    "device %s: runlist ended in %s (%s, runlist %d of %d%s, %s%s, "
                    "token position %d, after %.0f ms, attempt %d)",
                    e->device[0] ? e->device : "?", eng_ert_name(e->state),
                    eng_phase_name(e->phase), e->chunk_index + 1, e->chunk_count, chunk, layers,
                    failed, e->token_pos, e->elapsed_ms, e->attempts);
}
