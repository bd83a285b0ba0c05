/* The decode kernels chosen by measurement at load (engine/model/kchoice.c): the
 * mechanism, never which kernel is faster (that is the host's business). Every
 * usable kernel is in the tables (one token, and decode batches: the 4-token
 * prompt here runs on the batches' kernel) and the chosen ones among them; with a state
 * directory the choice is written to cpu-kernels.json under this CPU's key and a
 * second load takes it from there; a remembered kernel is used whatever it is
 * (and gives the same logits: every kernel has the reference's bits); a corrupt,
 * oversized or foreign file, or a kernel this CPU cannot run, is measured over
 * (the file rewritten); a forced ISA is kept and nothing is written; f32
 * activations have no choice.
 *
 * Packs are generated once per run with minicpmd-pack gen (MINICPMD_PACK) into
 * MINICPMD_TEST_WORK; meson test sets both. */
#include "engine/kernels/kernels.h"
#include "engine/model/model.h"
#include "tests/check.h"
#include "tests/packs.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_PROMPT = 4, N_NEXT = 3 };
static const int32_t prompt[N_PROMPT] = {1, 17, 300, 9};
static const int32_t next[N_NEXT] = {11, 222, 33};

static char warned[1024];

static void on_log(void *ctx, enum eng_log_level level, const char *msg)
{
    (void)ctx;
    if (level <= ENG_LOG_WARN)
        snprintf(warned, sizeof warned, "%s", msg);
}

static eng_model *open_model(const eng_pack *p, const char *state_dir, enum eng_act act)
{
    eng_model *m = NULL;
    char err[512] = "";
    struct eng_model_opts o = {.n_threads = 2, .act = act, .state_dir = state_dir, .log = on_log};
    cr_assert_eq(eng_model_open(p, &o, &m, err, sizeof err), 0, "%s", err);
    return m;
}

static float *run(eng_model *m, int nv)
{
    eng_seq *s = NULL;
    char err[256] = "";
    float *out = malloc((N_NEXT + 1) * (size_t)nv * sizeof *out);
    cr_assert_not_null(out);
    cr_assert_eq(eng_seq_new(m, 64, &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_seq_forward(s, prompt, N_PROMPT, out), 0, "%s", eng_seq_error(s));
    for (int i = 0; i < N_NEXT; i++)
        cr_assert_eq(eng_seq_forward(s, &next[i], 1, out + (size_t)(i + 1) * nv), 0, "%s",
                     eng_seq_error(s));
    eng_seq_free(s);
    return out;
}

static char state[256], file[320];

static void fresh_state(void)
{
    snprintf(state, sizeof state, "%s/kchoice-XXXXXX", getenv("MINICPMD_TEST_WORK"));
    pack_dir("deep"); /* makes the work directory too */
    cr_assert_not_null(mkdtemp(state));
    snprintf(file, sizeof file, "%s/cpu-kernels.json", state);
}

static void drop_state(void)
{
    unlink(file);
    rmdir(state);
}

static void write_file(const char *text)
{
    FILE *f = fopen(file, "we");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* The file's one entry; checks its shape against the model's info. */
static json_t *read_entry(const struct eng_model_info *mi)
{
    json_error_t je;
    json_t *root = json_load_file(file, 0, &je);
    cr_assert_not_null(root, "%s: %s", file, je.text);
    cr_assert_eq(json_integer_value(json_object_get(root, "version")), 1);
    json_t *entries = json_object_get(root, "entries");
    cr_assert_eq(json_array_size(entries), 1);
    json_t *e = json_incref(json_array_get(entries, 0));
    json_decref(root);
    struct eng_cpu_ident id;
    eng_cpu_ident(&id);
    char want[128];
    snprintf(want, sizeof want, "cpu family %d model %d \"%s\"", id.family, id.model, id.name);
    const char *key = json_string_value(json_object_get(e, "key"));
    cr_assert(key && strstr(key, want), "key '%s' lacks '%s'", key ? key : "(none)", want);
    cr_assert_str_eq(json_string_value(json_object_get(e, "kernel")), mi->decode_kernel);
    cr_assert_str_eq(json_string_value(json_object_get(e, "few_kernel")), mi->few_kernel);
    json_t *rates = json_object_get(e, "rates"), *few = json_object_get(e, "few_rates");
    cr_assert_eq(json_object_size(rates), (size_t)mi->n_decode_rates);
    cr_assert_eq(json_object_size(few), (size_t)mi->n_decode_rates);
    for (int i = 0; i < mi->n_decode_rates; i++) {
        cr_assert(json_is_number(json_object_get(rates, mi->decode_rates[i].name)), "%s",
                  mi->decode_rates[i].name);
        cr_assert(json_is_number(json_object_get(few, mi->few_rates[i].name)), "%s",
                  mi->few_rates[i].name);
    }
    return e;
}

/* The file as one entry, e. */
static void write_entry(json_t *e)
{
    json_t *root = json_pack("{s:i, s:[O]}", "version", 1, "entries", e);
    cr_assert_eq(json_dump_file(root, file, 0), 0);
    json_decref(root);
}

/* A load that finds no usable choice in the file measures again and rewrites it. */
static void expect_measured_again(const eng_pack *p)
{
    eng_model *m = open_model(p, state, ENG_ACT_Q8);
    const struct eng_model_info *mi = eng_model_get_info(m);
    cr_assert_str_eq(mi->decode_choice, "measured");
    json_decref(read_entry(mi));
    eng_model_free(m);
}

/* The table: every usable kernel once, in eng_decode_kernels' order, the chosen one
 * among them; rates positive when measured or remembered. */
static void check_table(const struct eng_model_info *mi)
{
    const char *names[8];
    int n = eng_decode_kernels(names, 8), found = 0, found_few = 0;
    cr_assert_eq(mi->n_decode_rates, n);
    for (int i = 0; i < n; i++) {
        cr_assert_str_eq(mi->decode_rates[i].name, names[i]);
        cr_assert_str_eq(mi->few_rates[i].name, names[i]);
        cr_assert_gt(mi->decode_rates[i].gb_s, 0.0, "%s", names[i]);
        cr_assert_gt(mi->few_rates[i].gb_s, 0.0, "%s", names[i]);
        found += strcmp(names[i], mi->decode_kernel) == 0;
        found_few += strcmp(names[i], mi->few_kernel) == 0;
    }
    cr_assert_eq(found, 1, "chosen '%s' not in the table", mi->decode_kernel);
    cr_assert_eq(found_few, 1, "chosen '%s' not in the table", mi->few_kernel);
    cr_assert_str_eq(eng_decode_kernel(), mi->decode_kernel);
    cr_assert_str_eq(eng_few_kernel(), mi->few_kernel);
}

MCD_TEST(kchoice, measured_then_remembered_then_any_remembered_kernel)
{
    const char *names[8];
    int n = eng_decode_kernels(names, 8);
    if (n < 2) {
        cr_log_info("one decode kernel on this CPU: nothing to choose");
        return;
    }
    fresh_state();
    eng_pack *p = NULL;
    char err[512] = "";
    cr_assert_eq(eng_pack_open(pack_dir("deep"), &p, err, sizeof err), 0, "%s", err);
    int nv = eng_pack_get_info(p)->hp.n_vocab;
    size_t bytes = (N_NEXT + 1) * (size_t)nv * sizeof(float);

    eng_model *m = open_model(p, state, ENG_ACT_Q8);
    const struct eng_model_info *mi = eng_model_get_info(m);
    cr_assert_str_eq(mi->decode_choice, "measured");
    check_table(mi);
    json_t *e = read_entry(mi);
    float *ref = run(m, nv);
    char first[32];
    snprintf(first, sizeof first, "%s", mi->decode_kernel);
    eng_model_free(m);

    m = open_model(p, state, ENG_ACT_Q8);
    mi = eng_model_get_info(m);
    cr_assert_str_eq(mi->decode_choice, "remembered");
    cr_assert_str_eq(mi->decode_kernel, first);
    check_table(mi);
    eng_model_free(m);

    /* Any remembered pair of kernels is taken as it is, and gives the same logits. */
    for (int i = 0; i < n * n; i++) {
        json_object_set_new(e, "kernel", json_string(names[i % n]));
        json_object_set_new(e, "few_kernel", json_string(names[i / n]));
        write_entry(e);
        m = open_model(p, state, ENG_ACT_Q8);
        mi = eng_model_get_info(m);
        cr_assert_str_eq(mi->decode_choice, "remembered");
        cr_assert_str_eq(mi->decode_kernel, names[i % n]);
        cr_assert_str_eq(mi->few_kernel, names[i / n]);
        cr_assert_str_eq(eng_few_kernel(), names[i / n]);
        float *got = run(m, nv);
        cr_assert_eq(memcmp(ref, got, bytes), 0, "kernels %s, %s: other logits", names[i % n],
                     names[i / n]);
        free(got);
        eng_model_free(m);
    }
    /* One this CPU cannot run: measured again, and the file rewritten. */
    json_object_set_new(e, "kernel", json_string("no-such-kernel"));
    write_entry(e);
    expect_measured_again(p);
    /* An entry with no batches' kernel (written before there was a choice of
     * it): measured again. */
    json_object_set_new(e, "kernel", json_string(names[0]));
    json_object_del(e, "few_kernel");
    write_entry(e);
    expect_measured_again(p);

    json_decref(e);
    free(ref);
    eng_pack_free(p);
    drop_state();
}

MCD_TEST(kchoice, bad_files_are_measured_over)
{
    const char *names[8];
    if (eng_decode_kernels(names, 8) < 2) {
        cr_log_info("one decode kernel on this CPU: nothing to choose");
        return;
    }
    fresh_state();
    eng_pack *p = NULL;
    char err[512] = "";
    cr_assert_eq(eng_pack_open(pack_dir("deep"), &p, err, sizeof err), 0, "%s", err);
    static const char *const bad[] = {
        "not json at all",
        "{\"version\": 2, \"entries\": []}",
        "{\"version\": 1, \"entries\": {}}",
        "[1, 2, 3]",
        "{\"version\": 1, \"entries\": [{\"key\": 5, \"kernel\": [], \"rates\": \"x\"}, 7]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad + 1; i++) {
        if (i < sizeof bad / sizeof *bad) {
            write_file(bad[i]);
        } else { /* past the size bound */
            FILE *f = fopen(file, "we");
            cr_assert_not_null(f);
            for (int k = 0; k < 100000; k++)
                fputc(' ', f);
            fclose(f);
        }
        warned[0] = '\0';
        eng_model *m = open_model(p, state, ENG_ACT_Q8);
        const struct eng_model_info *mi = eng_model_get_info(m);
        cr_assert_str_eq(mi->decode_choice, "measured", "file %zu", i);
        if (i != 4) /* well-formed, only its entry useless: no warning */
            cr_assert(strstr(warned, "cpu-kernels.json"), "file %zu: no warning naming the file", i);
        json_decref(read_entry(mi));
        eng_model_free(m);
    }
    /* No state directory: measured, nothing written anywhere. */
    unlink(file);
    eng_model *m = open_model(p, NULL, ENG_ACT_Q8);
    cr_assert_str_eq(eng_model_get_info(m)->decode_choice, "measured");
    cr_assert_neq(access(file, F_OK), 0);
    eng_model_free(m);
    eng_pack_free(p);
    drop_state();
}

MCD_TEST(kchoice, forced_isa_and_f32_keep_their_kernel)
{
    fresh_state();
    eng_pack *p = NULL;
    char err[512] = "";
    cr_assert_eq(eng_pack_open(pack_dir("deep"), &p, err, sizeof err), 0, "%s", err);
    eng_model *m = open_model(p, state, ENG_ACT_F32);
    cr_assert_str_eq(eng_model_get_info(m)->decode_choice, "f32");
    cr_assert_eq(eng_model_get_info(m)->n_decode_rates, 0);
    eng_model_free(m);

    cr_assert_eq(eng_kernels_set_isa(eng_isa_detect()), 0);
    const char *dflt = eng_decode_kernel();
    m = open_model(p, state, ENG_ACT_Q8);
    const struct eng_model_info *mi = eng_model_get_info(m);
    cr_assert_str_eq(mi->decode_choice, "forced");
    cr_assert_str_eq(mi->decode_kernel, dflt);
    cr_assert_str_eq(mi->few_kernel, dflt);
    cr_assert_str_eq(eng_few_kernel(), dflt);
    cr_assert_neq(access(file, F_OK), 0, "a forced load wrote %s", file);
    eng_model_free(m);
    eng_pack_free(p);
    drop_state();
}
