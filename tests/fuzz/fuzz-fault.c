/* libFuzzer target: the --fault / MINICPMD_FAULTS spec parser on arbitrary bytes
 * (cut at the first NUL, as a C string would be). Checks, aborting on a miss: an
 * error leaves the list unchanged and its message is one non-empty line; every
 * parsed fault is sane, its canonical form parses back to the same fault, and
 * matching it against a few runlists of a 42-layer plan never fires more often
 * than `times` allows. The same bytes also go through eng_ert_parse. */
#include "engine/device/fault.h"
#include "engine/worker/plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const char *what, int ok)
{
    if (!ok) {
        fprintf(stderr, "fuzz-fault: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    enum eng_ert_state st;
    if (eng_ert_parse(s, &st) == 0)
        check("eng_ert_parse: out of range", eng_ert_valid(st));

    struct eng_fault_list l = {0};
    char err[512];
    /* one fault already there: a failed parse must keep it */
    check("seed spec", eng_fault_list_parse(&l, "state=ABORT", err, sizeof err) == 0);
    err[0] = '\0';
    int rc = eng_fault_list_parse(&l, s, err, sizeof err);
    if (rc != 0) {
        check("error kept a partial list", l.n == 1);
        check("empty message", err[0] != '\0');
        check("message not one line", strchr(err, '\n') == NULL);
    }
    check("check", eng_fault_list_check(&l, 42, err, sizeof err) <= 0);
    for (size_t i = 0; i < l.n; i++) {
        struct eng_fault *f = &l.items[i];
        check("state", eng_ert_valid(f->state) && f->state != ENG_ERT_COMPLETED);
        check("times", f->times == ENG_FAULT_EVERY || f->times >= 1);
        check("remaining", f->remaining == f->times && f->fired == 0);
        char canon[200];
        int n = eng_fault_format(f, canon, sizeof canon);
        check("canonical form too long", n > 0 && (size_t)n < sizeof canon);
        struct eng_fault_list back = {0};
        check("canonical form does not parse", eng_fault_list_parse(&back, canon, err, sizeof err) == 0);
        check("canonical form differs", back.n == 1 && memcmp(&back.items[0], f, sizeof *f) == 0);
        eng_fault_list_clear(&back);
    }

    /* Match: a decode step and two prompt chunks through a K = 11 plan. */
    struct eng_plan p;
    if (eng_plan_init(&p, 42, 11, NULL, 0) == 0) {
        for (int round = 0; round < 3; round++) {
            for (int r = 0; r < p.n_runlists; r++) {
                struct eng_fault_site site = {
                    .phase = round == 0 ? ENG_PHASE_DECODE : ENG_PHASE_PREFILL,
                    .token_begin = round == 0 ? 3 : (round - 1) * 512,
                    .token_end = round == 0 ? 4 : round * 512,
                    .chunk_index = p.runlists[r].index,
                    .layer_begin = p.runlists[r].layer_begin,
                    .layer_end = p.runlists[r].layer_end,
                    .has_head = p.runlists[r].has_head,
                };
                int which;
                enum eng_ert_state got = eng_fault_match(&l, &site, &which);
                check("match result", got == ENG_ERT_COMPLETED ? which == -1
                                                               : which >= 0 && (size_t)which < l.n &&
                                                                     l.items[which].state == got);
            }
        }
        eng_plan_deinit(&p);
    }
    for (size_t i = 0; i < l.n; i++)
        check("fired more than times", l.items[i].times == ENG_FAULT_EVERY || l.items[i].fired <= l.items[i].times);
    eng_fault_list_clear(&l);
    free(s);
    return 0;
}
