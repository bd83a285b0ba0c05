/* ert — how a device run ends: XRT's command states, the phase of work, and the
 * structured error a failed request carries.
 *
 * The numbering is XRT's `enum ert_cmd_state`, value for value. It is the same in
 * Debian 12's XRT 2.13 (/usr/include/xrt/ert.h) and in XRT HEAD 963c58ee22
 * (src/runtime_src/core/include/xrt/detail/ert.h, lines 738-766); see
 * docs/npu-xrt.md §1c. amdxdna's own copy (amd/xdna-driver
 * src/driver/amdxdna/amdxdna_ctx.h) stops at NORESPONSE = 9. XRT's
 * ERT_CMD_STATE_MAX (12) is a sentinel, not a state, and is not listed here.
 *
 * The enum is NOT ordered by progress: SUBMITTED (7) comes after the terminal
 * states. Only COMPLETED is success; test `== ENG_ERT_COMPLETED` (or
 * eng_ert_is_success), never `>=`.
 *
 * The names use our own ENG_ERT_ prefix so this header can sit next to XRT's
 * ert.h in the xrt bridge; the bridge should static_assert that each value equals
 * its ERT_CMD_STATE_ twin.
 *
 * Everything here is pure and thread-safe. */
#ifndef MINICPMD_ENGINE_ERT_H
#define MINICPMD_ENGINE_ERT_H

#include <stdbool.h>
#include <stddef.h>

/* XRT's ert_cmd_state (doc comments from XRT's ert.h). */
enum eng_ert_state {
    ENG_ERT_NEW = 1,         /* set by host before submitting */
    ENG_ERT_QUEUED = 2,      /* internal scheduler state */
    ENG_ERT_RUNNING = 3,     /* internal scheduler state */
    ENG_ERT_COMPLETED = 4,   /* set by scheduler when command completes */
    ENG_ERT_ERROR = 5,       /* set by scheduler if command failed */
    ENG_ERT_ABORT = 6,       /* set by scheduler if command abort */
    ENG_ERT_SUBMITTED = 7,   /* internal scheduler state */
    ENG_ERT_TIMEOUT = 8,     /* set by scheduler if command timeout and reset */
    ENG_ERT_NORESPONSE = 9,  /* set by scheduler if command timeout and fail to reset */
    ENG_ERT_SKERROR = 10,    /* soft kernel error return code */
    ENG_ERT_SKCRASHED = 11,  /* soft kernel crashed */
};

#define ENG_ERT_FIRST ENG_ERT_NEW
#define ENG_ERT_LAST  ENG_ERT_SKCRASHED

/* True for 1..11. */
bool eng_ert_valid(int state);

/* state == ENG_ERT_COMPLETED. */
bool eng_ert_is_success(int state);

/* XRT's enum name, e.g. "ERT_CMD_STATE_TIMEOUT" — what XRT >= 2.21.68 prints in
 * "runlist failed execution (…)". "ERT_CMD_STATE_UNKNOWN" for a value outside
 * 1..11 (XRT itself prints "out of range"). Never NULL; static storage. */
const char *eng_ert_name(int state);

/* Parse a state written as its short name ("TIMEOUT"), the full enum name
 * ("ERT_CMD_STATE_TIMEOUT") or the API code ("ert_cmd_state_timeout"), in any
 * letter case, or as its decimal number ("8"). Surrounding whitespace is not
 * accepted. Returns 0 and sets *out, or -EINVAL (*out untouched). */
int eng_ert_parse(const char *s, enum eng_ert_state *out);

/* ---- phase ---------------------------------------------------------------- */

/* Which kind of work a runlist belongs to. */
enum eng_phase {
    ENG_PHASE_PREFILL = 0,   /* a chunk of the prompt */
    ENG_PHASE_DECODE = 1,    /* one generated token */
};

/* "prefill" / "decode"; "unknown" otherwise. Static storage. */
const char *eng_phase_name(int phase);

/* ---- structured device error ----------------------------------------------- */

/* Why a request failed on the device: the last runlist that did not complete.
 * Filled by the worker, a plain value (no pointers: it may be copied to the loop
 * thread as is). Ranges are half-open, like eng_seq_layers(): a runlist with
 * layers 21..41 has layer_begin 21, layer_end 42. Indices are 0-based. */
struct eng_device_error {
    enum eng_ert_state state;   /* anything but COMPLETED */
    enum eng_phase phase;
    int chunk_index;            /* the failing runlist within its step, 0 .. chunk_count-1 */
    int chunk_count;            /* runlists in that step (decode step or prompt chunk) */
    int layer_begin;            /* its LAYER commands [layer_begin, layer_end); */
    int layer_end;              /*   equal when it has none (the head runlist) */
    int failed_layer;           /* the layer the device named as failing; -1 = unknown or none */
    int token_pos;              /* sequence position of the batch's first token */
    int n_tokens;               /* positions in the batch: 1 in decode */
    int prefill_chunk_index;    /* prefill: which prompt chunk, 0-based; -1 in decode */
    int prefill_chunk_count;    /* prefill: prompt chunks in all; 0 in decode */
    double elapsed_ms;          /* from submitting the failing runlist to its final state */
    char device[64];            /* the device's name, e.g. "sim" or "xrt:0000:c6:00.1";
                                   "xrt (host cpu)" when xrt's prompt on the CPU failed */
    int attempts;               /* tries of the request, the failing one included (>= 1) */
};

/* Fill the fields that have a neutral value: failed_layer -1,
 * prefill_chunk_index -1, prefill_chunk_count 0, attempts 1, the rest 0/empty.
 * `state` and `phase` are set as given. */
void eng_device_error_init(struct eng_device_error *e, enum eng_ert_state state,
                           enum eng_phase phase);

/* Copy `name` into e->device (truncated to fit, always terminated). */
void eng_device_error_set_device(struct eng_device_error *e, const char *name);

/* One line for humans, e.g. "device sim: runlist ended in ERT_CMD_STATE_TIMEOUT
 * (decode, runlist 1 of 2, layers 0-20, token position 57, after 2003 ms,
 * attempt 1)". Returns what snprintf returns. */
int eng_device_error_format(const struct eng_device_error *e, char *buf, size_t len);

#endif
