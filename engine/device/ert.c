#include "engine/ert.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Indexed by state; the short name is the enum name without "ERT_CMD_STATE_". */
static const char *const names[] = {
    [ENG_ERT_NEW] = "ERT_CMD_STATE_NEW",
    [ENG_ERT_QUEUED] = "ERT_CMD_STATE_QUEUED",
    [ENG_ERT_RUNNING] = "ERT_CMD_STATE_RUNNING",
    [ENG_ERT_COMPLETED] = "ERT_CMD_STATE_COMPLETED",
    [ENG_ERT_ERROR] = "ERT_CMD_STATE_ERROR",
    [ENG_ERT_ABORT] = "ERT_CMD_STATE_ABORT",
    [ENG_ERT_SUBMITTED] = "ERT_CMD_STATE_SUBMITTED",
    [ENG_ERT_TIMEOUT] = "ERT_CMD_STATE_TIMEOUT",
    [ENG_ERT_NORESPONSE] = "ERT_CMD_STATE_NORESPONSE",
    [ENG_ERT_SKERROR] = "ERT_CMD_STATE_SKERROR",
    [ENG_ERT_SKCRASHED] = "ERT_CMD_STATE_SKCRASHED",
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
    return eng_ert_valid(state) ? names[state] : PREFIX "UNKNOWN";
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
        if (strcasecmp(shortname, names[st] + plen) == 0) {
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
