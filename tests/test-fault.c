/* Fault injection specs (engine/device/fault.h): the grammar, good and bad, with the
 * error message; matching against the planner's runlists (a layer hits the
 * runlist that contains it), once / times / every, first match wins; the
 * canonical form parses back to the same fault. */
#include "engine/device/fault.h"
#include "engine/worker/plan.h"
#include "tests/check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static struct eng_fault one(const char *spec)
{
    struct eng_fault_list l = {0};
    char err[512] = "";
    cr_assert_eq(eng_fault_list_parse(&l, spec, err, sizeof err), 0, "\"%s\": %s", spec, err);
    cr_assert_eq(l.n, 1, "\"%s\"", spec);
    struct eng_fault f = l.items[0];
    eng_fault_list_clear(&l);
    return f;
}

MCD_TEST(fault, parse_example)
{
    struct eng_fault f = one("phase=decode,token=3,layer=30,state=ABORT");
    cr_assert_eq(f.phase, ENG_PHASE_DECODE);
    cr_assert_eq(f.token, 3);
    cr_assert_eq(f.layer, 30);
    cr_assert_eq(f.chunk, ENG_FAULT_ANY);
    cr_assert_eq(f.state, ENG_ERT_ABORT);
    cr_assert_eq(f.times, 1, "once is the default");
    cr_assert_eq(f.reset_fails, 0, "reset=ok is the default");
    cr_assert_eq(f.remaining, 1);
    cr_assert_eq(f.fired, 0);
}

MCD_TEST(fault, parse_forms)
{
    struct eng_fault f = one("state=TIMEOUT");
    cr_assert_eq(f.phase, ENG_FAULT_ANY);
    cr_assert_eq(f.token, ENG_FAULT_ANY);
    cr_assert_eq(f.layer, ENG_FAULT_ANY);
    cr_assert_eq(f.state, ENG_ERT_TIMEOUT);

    f = one("  Phase = PREFILL ,\tSTATE = timeout , EVERY  ");
    cr_assert_eq(f.phase, ENG_PHASE_PREFILL);
    cr_assert_eq(f.state, ENG_ERT_TIMEOUT);
    cr_assert_eq(f.times, ENG_FAULT_EVERY);
    cr_assert_eq(f.remaining, ENG_FAULT_EVERY);

    f = one("phase=any,layer=head,chunk=2,state=8,times=3");
    cr_assert_eq(f.phase, ENG_FAULT_ANY);
    cr_assert_eq(f.layer, ENG_FAULT_LAYER_HEAD);
    cr_assert_eq(f.chunk, 2);
    cr_assert_eq(f.state, ENG_ERT_TIMEOUT);
    cr_assert_eq(f.times, 3);

    /* the reset step */
    cr_assert_eq(one("state=TIMEOUT,reset=fail").reset_fails, 1);
    cr_assert_eq(one("state=TIMEOUT, Reset = FAIL ").reset_fails, 1);
    cr_assert_eq(one("state=TIMEOUT,reset=ok").reset_fails, 0);
    cr_assert_eq(one("reset=0,state=TIMEOUT").reset_fails, 0);
    f = one("phase=prefill,state=ERROR,reset=3,every");
    cr_assert_eq(f.reset_fails, 3);
    cr_assert_eq(f.times, ENG_FAULT_EVERY, "reset= is not once/every/times");

    cr_assert_eq(one("state=ERT_CMD_STATE_NORESPONSE").state, ENG_ERT_NORESPONSE);
    cr_assert_eq(one("state=ert_cmd_state_error").state, ENG_ERT_ERROR);
    cr_assert_eq(one("state=new,once").state, ENG_ERT_NEW);
    cr_assert_eq(one("token=0,layer=0,chunk=0,state=11").token, 0);
    cr_assert_eq(one("token=2147483647,state=1").token, 2147483647);
    /* each non-COMPLETED state, by number */
    for (int s = 1; s <= 11; s++) {
        if (s == ENG_ERT_COMPLETED)
            continue;
        char spec[32];
        snprintf(spec, sizeof spec, "state=%d", s);
        cr_assert_eq((int)one(spec).state, s);
    }
}

MCD_TEST(fault, parse_several)
{
    struct eng_fault_list l = {0};
    char err[512];
    cr_assert_eq(eng_fault_list_parse(&l, "phase=prefill,layer=0,state=NEW; layer=head,state=ERROR,times=2;",
                                      err, sizeof err), 0, "%s", err);
    cr_assert_eq(l.n, 2);
    cr_assert_eq(l.items[0].phase, ENG_PHASE_PREFILL);
    cr_assert_eq(l.items[0].state, ENG_ERT_NEW);
    cr_assert_eq(l.items[1].layer, ENG_FAULT_LAYER_HEAD);
    cr_assert_eq(l.items[1].times, 2);
    /* appends: --fault given twice, or --fault plus MINICPMD_FAULTS */
    cr_assert_eq(eng_fault_list_parse(&l, ";;state=SKCRASHED;;", err, sizeof err), 0);
    cr_assert_eq(l.n, 3);
    cr_assert_eq(l.items[2].state, ENG_ERT_SKCRASHED);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(eng_fault_list_parse(&l, "state=ABORT;state=ERROR", err, sizeof err), 0);
    cr_assert_eq(l.n, 43);
    eng_fault_list_clear(&l);
    cr_assert_eq(l.n, 0);
    cr_assert_null(l.items);
    eng_fault_list_clear(NULL);
}

/* Each bad spec, and a piece the message must quote. */
static const struct {
    const char *spec;
    const char *quoted;
} bad_specs[] = {
    {"", "\"\""},
    {";", "\";\""},
    {" ; ;", "\" ; ;\""},
    {"phase=decode,token=3", "no state="},
    {"state=COMPLETED", "\"state=COMPLETED\": COMPLETED is not a fault"},
    {"state=4", "\"state=4\""},
    {"state=FOO", "\"state=FOO\": unknown state"},
    {"state=", "\"state=\""},
    {"state=0", "\"state=0\""},
    {"state=12", "\"state=12\""},
    {"phase=decdoe,state=ABORT", "\"phase=decdoe\": phase is prefill, decode or any"},
    {"phase=,state=ABORT", "\"phase=\""},
    {"token=-1,state=ABORT", "\"token=-1\""},
    {"token=+1,state=ABORT", "\"token=+1\""},
    {"token=abc,state=ABORT", "\"token=abc\""},
    {"token=1 2,state=ABORT", "\"token=1 2\""},
    {"token=2147483648,state=ABORT", "\"token=2147483648\""},
    {"token=99999999999999999999,state=ABORT", "\"token=99999999999999999999\""},
    {"layer=x,state=ABORT", "\"layer=x\": layer is a number"},
    {"layer=-1,state=ABORT", "\"layer=-1\""},
    {"chunk=,state=ABORT", "\"chunk=\""},
    {"times=0,state=ABORT", "\"times=0\""},
    {"times=-1,state=ABORT", "\"times=-1\""},
    {"once,every,state=ABORT", "\"every\": once/every/times given twice"},
    {"state=ABORT,times=2,once", "\"once\": once/every/times given twice"},
    {"state=ABORT,state=ERROR", "\"state=ERROR\": key given twice"},
    {"layer=1,layer=2,state=ERROR", "\"layer=2\": key given twice"},
    {"foo=1,state=ABORT", "\"foo=1\": unknown key"},
    {"state=ABORT,reset=maybe", "\"reset=maybe\": reset is ok, fail or a number"},
    {"state=ABORT,reset=-1", "\"reset=-1\""},
    {"state=ABORT,reset=", "\"reset=\""},
    {"state=ABORT,reset=fail,reset=ok", "\"reset=ok\": key given twice"},
    {"reset=fail", "no state="},
    {"state=ABORT,,once", "empty item"},
    {"state=ABORT,", "empty item"},
    {",state=ABORT", "empty item"},
    {"bogus", "\"bogus\": unknown item"},
    {"=ABORT", "\"=ABORT\": unknown key"},
    {"state==ABORT", "\"state==ABORT\""},
    {"state=ABORT;phase=decode", "\"phase=decode\": no state="},
    {"state=ABORT\nlayer=3", "\"state=ABORT?layer=3\""},
};

MCD_TEST(fault, parse_rejects_with_message)
{
    for (size_t i = 0; i < sizeof bad_specs / sizeof bad_specs[0]; i++) {
        struct eng_fault_list l = {0};
        char err[512] = "";
        cr_assert_eq(eng_fault_list_parse(&l, bad_specs[i].spec, err, sizeof err), -EINVAL,
                     "accepted \"%s\"", bad_specs[i].spec);
        cr_assert_eq(l.n, 0);
        cr_assert(strstr(err, bad_specs[i].quoted), "\"%s\": message \"%s\" lacks %s", bad_specs[i].spec,
                  err, bad_specs[i].quoted);
        cr_assert(strstr(err, ENG_FAULT_GRAMMAR), "message gives the grammar: %s", err);
        cr_assert_null(strchr(err, '\n'), "one line: %s", err);
        cr_assert(strncmp(err, "bad fault spec \"", 16) == 0, "%s", err);
        eng_fault_list_clear(&l);
    }
}

MCD_TEST(fault, parse_is_all_or_nothing)
{
    struct eng_fault_list l = {0};
    char err[512];
    cr_assert_eq(eng_fault_list_parse(&l, "state=ABORT", err, sizeof err), 0);
    cr_assert_eq(eng_fault_list_parse(&l, "state=TIMEOUT;state=ERROR;phase=bad,state=NEW", err, sizeof err),
                 -EINVAL);
    cr_assert_eq(l.n, 1, "nothing of a bad spec is kept");
    cr_assert_eq(l.items[0].state, ENG_ERT_ABORT);
    eng_fault_list_clear(&l);
    cr_assert_eq(eng_fault_list_parse(&l, NULL, err, sizeof err), -EINVAL);
    /* a very long bad part is cut in the message */
    char longspec[400];
    memset(longspec, 'x', sizeof longspec - 1);
    longspec[sizeof longspec - 1] = '\0';
    cr_assert_eq(eng_fault_list_parse(&l, longspec, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "...\""), "%s", err);
    cr_assert_lt(strlen(err), 300);
    /* a short err buffer is fine, NULL too */
    char tiny[10];
    cr_assert_eq(eng_fault_list_parse(&l, "nope", tiny, sizeof tiny), -EINVAL);
    cr_assert_eq(strlen(tiny), 9);
    cr_assert_eq(eng_fault_list_parse(&l, "nope", NULL, 0), -EINVAL);
}

MCD_TEST(fault, check_against_model)
{
    struct eng_fault_list l = {0};
    char err[512];
    cr_assert_eq(eng_fault_list_parse(&l, "layer=41,state=ABORT;layer=head,state=ERROR", err, sizeof err), 0);
    cr_assert_eq(eng_fault_list_check(&l, 42, err, sizeof err), 0);
    cr_assert_eq(eng_fault_list_parse(&l, "layer=42,state=TIMEOUT", err, sizeof err), 0);
    cr_assert_eq(eng_fault_list_check(&l, 42, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "layer=42,state=TIMEOUT,once"), "%s", err);
    cr_assert(strstr(err, "42 layers"), "%s", err);
    eng_fault_list_clear(&l);
}

/* ---- matching ------------------------------------------------------------------- */

static struct eng_fault_site site(enum eng_phase ph, int tok_begin, int tok_end, const struct eng_runlist *r)
{
    return (struct eng_fault_site){.phase = ph, .token_begin = tok_begin, .token_end = tok_end,
                                   .chunk_index = r->index, .layer_begin = r->layer_begin,
                                   .layer_end = r->layer_end, .has_head = r->has_head};
}

/* Which runlists of a decode step with K fire for `spec`: a bit mask. */
static unsigned fired_runlists(const char *spec, int n_layers, int k, int step)
{
    struct eng_fault_list l = {0};
    char err[512];
    cr_assert_eq(eng_fault_list_parse(&l, spec, err, sizeof err), 0, "%s", err);
    struct eng_plan p;
    cr_assert_eq(eng_plan_init(&p, n_layers, k, NULL, 0), 0);
    unsigned mask = 0;
    for (int r = 0; r < p.n_runlists; r++) {
        struct eng_fault_site s = site(ENG_PHASE_DECODE, step, step + 1, &p.runlists[r]);
        if (eng_fault_match(&l, &s, NULL) != ENG_ERT_COMPLETED)
            mask |= 1u << r;
    }
    eng_plan_deinit(&p);
    eng_fault_list_clear(&l);
    return mask;
}

MCD_TEST(fault, layer_hits_the_runlist_that_contains_it)
{
    cr_assert_eq(fired_runlists("layer=30,state=ABORT", 42, 21, 0), 1u << 1);
    cr_assert_eq(fired_runlists("layer=30,state=ABORT", 42, ENG_PLAN_ALL, 0), 1u << 0);
    cr_assert_eq(fired_runlists("layer=20,state=ABORT", 42, 21, 0), 1u << 0);
    cr_assert_eq(fired_runlists("layer=21,state=ABORT", 42, 21, 0), 1u << 1);
    cr_assert_eq(fired_runlists("layer=0,state=ABORT", 42, 11, 0), 1u << 0);
    cr_assert_eq(fired_runlists("layer=41,state=ABORT", 42, 11, 0), 1u << 3);
    cr_assert_eq(fired_runlists("layer=head,state=ABORT", 42, 11, 0), 1u << 4);
    cr_assert_eq(fired_runlists("chunk=2,state=ABORT", 42, 11, 0), 1u << 2);
    cr_assert_eq(fired_runlists("layer=3,state=ABORT", 4, 1, 0), 1u << 3);
    cr_assert_eq(fired_runlists("layer=0,state=ABORT", 1, 1, 0), 1u << 0);
    /* layer and chunk both given: both must hold */
    cr_assert_eq(fired_runlists("layer=30,chunk=0,state=ABORT", 42, 21, 0), 0);
    /* once: only the first matching runlist of the step */
    cr_assert_eq(fired_runlists("state=ABORT", 42, 21, 0), 1u << 0);
    cr_assert_eq(fired_runlists("state=ABORT,every", 42, 21, 0), 0x7u);
    cr_assert_eq(fired_runlists("state=ABORT,times=2", 42, 21, 0), 0x3u);
    /* token */
    cr_assert_eq(fired_runlists("token=3,state=ABORT,every", 42, 21, 2), 0);
    cr_assert_eq(fired_runlists("token=3,state=ABORT,every", 42, 21, 3), 0x7u);
}

MCD_TEST(fault, once_every_times_across_steps)
{
    struct eng_fault_list l = {0};
    char err[512];
    cr_assert_eq(eng_fault_list_parse(&l, "phase=decode,token=3,layer=30,state=ABORT", err, sizeof err), 0);
    struct eng_runlist r1 = {.index = 1, .layer_begin = 21, .layer_end = 42};
    struct eng_fault_site s = site(ENG_PHASE_DECODE, 3, 4, &r1);
    int which = 7;
    cr_assert_eq(eng_fault_match(&l, &s, &which), ENG_ERT_ABORT);
    cr_assert_eq(which, 0);
    cr_assert_eq(l.items[0].remaining, 0);
    cr_assert_eq(l.items[0].fired, 1);
    /* the replay of the same request reaches the same runlist: spent */
    cr_assert_eq(eng_fault_match(&l, &s, &which), ENG_ERT_COMPLETED);
    cr_assert_eq(which, -1);
    eng_fault_list_clear(&l);

    cr_assert_eq(eng_fault_list_parse(&l, "phase=decode,token=3,layer=30,state=ABORT,every", err, sizeof err), 0);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(eng_fault_match(&l, &s, NULL), ENG_ERT_ABORT);
    cr_assert_eq(l.items[0].fired, 100);
    cr_assert_eq(l.items[0].remaining, ENG_FAULT_EVERY);
    /* wrong phase, token or layer: nothing */
    struct eng_fault_site p = site(ENG_PHASE_PREFILL, 3, 4, &r1);
    cr_assert_eq(eng_fault_match(&l, &p, NULL), ENG_ERT_COMPLETED);
    struct eng_fault_site t = site(ENG_PHASE_DECODE, 4, 5, &r1);
    cr_assert_eq(eng_fault_match(&l, &t, NULL), ENG_ERT_COMPLETED);
    struct eng_runlist r0 = {.index = 0, .layer_begin = 0, .layer_end = 21, .has_embed = true};
    struct eng_fault_site z = site(ENG_PHASE_DECODE, 3, 4, &r0);
    cr_assert_eq(eng_fault_match(&l, &z, NULL), ENG_ERT_COMPLETED);
    eng_fault_list_clear(&l);

    cr_assert_eq(eng_fault_list_parse(&l, "state=TIMEOUT,times=3", err, sizeof err), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(eng_fault_match(&l, &s, NULL), ENG_ERT_TIMEOUT);
    cr_assert_eq(eng_fault_match(&l, &s, NULL), ENG_ERT_COMPLETED);
    eng_fault_list_clear(&l);

    /* an empty list never fires */
    cr_assert_eq(eng_fault_match(&l, &s, NULL), ENG_ERT_COMPLETED);
    cr_assert_eq(eng_fault_match(NULL, &s, NULL), ENG_ERT_COMPLETED);
}

MCD_TEST(fault, prefill_token_hits_its_chunk)
{
    struct eng_fault_list l = {0};
    char err[512];
    cr_assert_eq(eng_fault_list_parse(&l, "phase=prefill,token=700,state=NORESPONSE,every", err, sizeof err), 0);
    struct eng_runlist r = {.index = 0, .layer_begin = 0, .layer_end = 42, .has_embed = true};
    int hits = 0;
    int count = eng_plan_prefill_count(2000, 512);
    for (int c = 0; c < count; c++) {
        struct eng_prefill_chunk ch;
        cr_assert_eq(eng_plan_prefill_chunk(2000, 512, c, &ch), 0);
        struct eng_fault_site s = site(ENG_PHASE_PREFILL, ch.token_begin, ch.token_begin + ch.n_tokens, &r);
        if (eng_fault_match(&l, &s, NULL) == ENG_ERT_NORESPONSE) {
            cr_assert_eq(c, 1, "token 700 is in chunk 1 (512..1023)");
            hits++;
        }
    }
    cr_assert_eq(hits, 1);
    eng_fault_list_clear(&l);
}

MCD_TEST(fault, first_match_wins_and_only_it_is_used)
{
    struct eng_fault_list l = {0};
    char err[512];
    cr_assert_eq(eng_fault_list_parse(&l, "layer=5,state=ERROR;state=TIMEOUT,every", err, sizeof err), 0);
    struct eng_runlist r = {.index = 0, .layer_begin = 0, .layer_end = 10};
    struct eng_fault_site s = site(ENG_PHASE_DECODE, 0, 1, &r);
    int which;
    cr_assert_eq(eng_fault_match(&l, &s, &which), ENG_ERT_ERROR);
    cr_assert_eq(which, 0);
    cr_assert_eq(l.items[1].fired, 0);
    cr_assert_eq(eng_fault_match(&l, &s, &which), ENG_ERT_TIMEOUT);
    cr_assert_eq(which, 1);
    eng_fault_list_clear(&l);
}

MCD_TEST(fault, head_runlist_and_any_layer)
{
    struct eng_fault_list l = {0};
    char err[512];
    cr_assert_eq(eng_fault_list_parse(&l, "layer=head,state=SKERROR,every", err, sizeof err), 0);
    struct eng_runlist layers = {.index = 0, .layer_begin = 0, .layer_end = 42, .has_embed = true};
    struct eng_runlist head = {.index = 1, .layer_begin = 42, .layer_end = 42, .has_head = true};
    struct eng_fault_site a = site(ENG_PHASE_DECODE, 0, 1, &layers), b = site(ENG_PHASE_DECODE, 0, 1, &head);
    cr_assert_eq(eng_fault_match(&l, &a, NULL), ENG_ERT_COMPLETED);
    cr_assert_eq(eng_fault_match(&l, &b, NULL), ENG_ERT_SKERROR);
    eng_fault_list_clear(&l);
    /* a spec without layer= hits the head runlist too */
    cr_assert_eq(eng_fault_list_parse(&l, "phase=decode,chunk=1,state=ERROR", err, sizeof err), 0);
    cr_assert_eq(eng_fault_match(&l, &b, NULL), ENG_ERT_ERROR);
    eng_fault_list_clear(&l);
}

MCD_TEST(fault, canonical_form_round_trips)
{
    const char *specs[] = {
        "phase=decode,token=3,layer=30,state=ABORT",
        "state=TIMEOUT",
        " phase = PREFILL , layer = head , state = ert_cmd_state_noresponse , every ",
        "chunk=7,state=1,times=12",
        "token=0,layer=0,chunk=0,phase=any,state=SKCRASHED,once",
        "reset=fail,phase=prefill,state=TIMEOUT",
        "state=ERROR,reset=7,every",
        "state=ABORT,reset=ok",
        "state=ABORT,reset=1",
    };
    const char *canon[] = {
        "phase=decode,token=3,layer=30,state=ABORT,once",
        "state=TIMEOUT,once",
        "phase=prefill,layer=head,state=NORESPONSE,every",
        "chunk=7,state=NEW,times=12",
        "token=0,layer=0,chunk=0,state=SKCRASHED,once",
        "phase=prefill,state=TIMEOUT,once,reset=fail",
        "state=ERROR,every,reset=7",
        "state=ABORT,once",
        "state=ABORT,once,reset=fail",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        struct eng_fault f = one(specs[i]);
        char buf[160];
        eng_fault_format(&f, buf, sizeof buf);
        cr_assert_str_eq(buf, canon[i]);
        struct eng_fault g = one(buf);
        cr_assert_eq(memcmp(&f, &g, sizeof f), 0, "\"%s\" does not parse back", buf);
    }
}
