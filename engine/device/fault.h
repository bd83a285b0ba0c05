/* fault — injected device faults for the `sim` device (--fault SPEC,
 * MINICPMD_FAULTS), so every ERT state can be produced at a chosen phase, token,
 * layer and runlist on a machine without an NPU.
 *
 * ---- Grammar ------------------------------------------------------------------
 *
 *   faults := spec { ";" spec }          empty specs (";;", a trailing ";") are skipped
 *   spec   := item { "," item }
 *   item   := "state=" STATE            required: the state the runlist ends in
 *           | "phase=" ( "prefill" | "decode" | "any" )       default any
 *           | "token=" N                default any
 *           | "layer=" ( N | "head" )   default any
 *           | "chunk=" N                default any
 *           | "once" | "every" | "times=" N                   default once
 *           | "reset=" ( "ok" | "fail" | N )              default ok
 *   STATE  := a name as eng_ert_parse takes it: TIMEOUT, timeout,
 *             ERT_CMD_STATE_TIMEOUT, ert_cmd_state_timeout, or 1..11 — anything
 *             but COMPLETED (4)
 *   N      := decimal digits, 0 .. 2147483647
 *
 * Keys and words are case-insensitive; blanks around items, keys and values are
 * ignored. Each key at most once per spec.
 *
 * Meaning: a spec describes runlists; each given key must match, a missing one
 * matches anything.
 *   phase   the runlist's phase.
 *   token   prefill: the index of a prompt token (0-based); the fault hits the
 *           prompt chunk that contains it. decode: the index of the decode step,
 *           0 = the first one (it feeds the first generated token).
 *   layer   N: the runlist whose layer range contains layer N (with K = 21 on 42
 *           layers, layer=30 hits runlist 1, layers 21..41). head: the head
 *           runlist (final norm + lm_head).
 *   chunk   the runlist's index within its step (eng_runlist.index), the same
 *           number as the error's chunk_index.
 *   once    fires the first time it matches, then never again (the default).
 *   times=N fires the first N times it matches (N >= 1).
 *   every   fires every time it matches.
 *   reset   what the device reset after a firing does (the sim's reset step):
 *           ok, it succeeds (the default, = 0); fail, the first reset after the
 *           firing fails and the next one succeeds (= 1); N, the first N resets
 *           fail. A device whose reset failed stays failed and runs nothing.
 * A fired fault makes the runlist end in `state`. When several specs match a
 * runlist the first one in spec order fires and only it is used up. A fault list
 * lives as long as the device: `once` means once per daemon run, not per request.
 *
 * Examples:
 *   phase=decode,token=3,layer=30,state=ABORT        4th decode step, once
 *   phase=decode,state=TIMEOUT,every                 every decode runlist
 *   phase=prefill,layer=0,state=NEW;layer=head,state=ERROR,times=2
 *   phase=prefill,state=TIMEOUT,reset=fail           ... and the reset fails once
 *
 * Threading: a fault list belongs to one thread (the worker): matching mutates it.
 */
#ifndef MINICPMD_ENGINE_FAULT_H
#define MINICPMD_ENGINE_FAULT_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/ert.h"

/* One line, for error messages and --help. */
#define ENG_FAULT_GRAMMAR                                                                   \
    "state=NAME|1..11[,phase=prefill|decode|any][,token=N][,layer=N|head][,chunk=N]"        \
    "[,once|,every|,times=N][,reset=ok|fail|N], specs separated by ';'"

#define ENG_FAULT_ANY (-1)         /* phase/token/layer/chunk: not given, matches anything */
#define ENG_FAULT_LAYER_HEAD (-2)  /* layer=head */
#define ENG_FAULT_EVERY (-1)       /* remaining: fires forever */

struct eng_fault {
    int phase;                   /* ENG_PHASE_PREFILL, ENG_PHASE_DECODE or ENG_FAULT_ANY */
    int token;                   /* >= 0 or ENG_FAULT_ANY */
    int layer;                   /* >= 0, ENG_FAULT_LAYER_HEAD or ENG_FAULT_ANY */
    int chunk;                   /* >= 0 or ENG_FAULT_ANY */
    enum eng_ert_state state;    /* never COMPLETED */
    int times;                   /* as written: 1 for once, N for times=N, ENG_FAULT_EVERY */
    int reset_fails;             /* resets that fail after each firing: 0 (reset=ok),
                                    1 (reset=fail) or N (reset=N) */
    /* updated by eng_fault_match */
    int remaining;               /* firings left: 0 = spent; ENG_FAULT_EVERY = forever */
    int fired;                   /* how many times it fired */
};

/* Caller storage, zero-initialized ({0}) is an empty list. */
struct eng_fault_list {
    struct eng_fault *items;
    size_t n, cap;
};

/* Parse `spec` (grammar above) and append its faults to the list. All or
 * nothing: on error the list is unchanged. Returns 0, -EINVAL with a one-line
 * message in err that quotes the bad part and gives ENG_FAULT_GRAMMAR, or
 * -ENOMEM. A spec with no faults at all ("", ";") is -EINVAL. */
int eng_fault_list_parse(struct eng_fault_list *l, const char *spec, char *err, size_t errlen);

/* Check the list against a model of n_layers: a layer=N with N >= n_layers could
 * never fire. Returns 0 or -EINVAL (message names the spec). */
int eng_fault_list_check(const struct eng_fault_list *l, int n_layers, char *err, size_t errlen);

/* Free the items; the list is empty and reusable. NULL is fine. */
void eng_fault_list_clear(struct eng_fault_list *l);

/* What a runlist is, for matching. Built by the worker (or the sim device) from
 * the plan: phase, the tokens of its batch, and the runlist itself. */
struct eng_fault_site {
    enum eng_phase phase;
    int token_begin;             /* prefill: first prompt-token index of the chunk; */
    int token_end;               /*   decode: step, step + 1 (half-open range) */
    int chunk_index;             /* eng_runlist.index */
    int layer_begin, layer_end;  /* eng_runlist's layer range [begin, end) */
    bool has_head;               /* eng_runlist.has_head */
};

/* The state this runlist should end in: the first live fault that matches
 * fires (its `remaining` drops unless it is `every`, `fired` grows) and its state
 * is returned; ENG_ERT_COMPLETED when none matches (run it normally). If `which`
 * is not NULL it gets the index of the fault that fired, or -1. */
enum eng_ert_state eng_fault_match(struct eng_fault_list *l, const struct eng_fault_site *site,
                                   int *which);

/* A fault in canonical spec form, e.g. "phase=decode,token=3,layer=30,state=ABORT,once"
 * (",reset=fail" / ",reset=N" appended when its resets fail; parses back to the
 * same fault). Returns what snprintf returns. */
int eng_fault_format(const struct eng_fault *f, char *buf, size_t len);

#endif
