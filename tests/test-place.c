/* --weights (engine/model/place.c): the matmul weights read from the pack's file
 * mapping or from a copy in 2 MB-page anonymous memory give bit-identical logits
 * in all three modes; the copy is in huge pages where the kernel has transparent
 * huge pages; short memory (MINICPMD_TEST_MEMAVAILABLE_MB stands in for
 * MemAvailable) falls back to the mapping with a warning naming it.
 *
 * Packs are generated once per run with minicpmd-pack gen (MINICPMD_PACK) into
 * MINICPMD_TEST_WORK; meson test sets both. */
#include "engine/model/model.h"
#include "tests/check.h"
#include "tests/packs.h"

#include <stdlib.h>
#include <string.h>

enum { N_PROMPT = 5, N_NEXT = 3 };
static const int32_t prompt[N_PROMPT] = {1, 17, 300, 2047, 9};
static const int32_t next[N_NEXT] = {11, 222, 33};

static char warned[1024];

static void on_warn(void *ctx, enum eng_log_level level, const char *msg)
{
    (void)ctx;
    if (level <= ENG_LOG_WARN)
        snprintf(warned, sizeof warned, "%s", msg);
}

static eng_model *open_model(const eng_pack *p, enum eng_weights_place w)
{
    eng_model *m = NULL;
    char err[512] = "";
    struct eng_model_opts o = {.n_threads = 2, .act = ENG_ACT_Q8, .weights = w,
                               .log = on_warn};
    cr_assert_eq(eng_model_open(p, &o, &m, err, sizeof err), 0, "%s", err);
    return m;
}

/* Logits of the prompt and of three decode steps after it. */
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

/* Rss of this process's mappings of files whose path ends with `suffix`. */
static long long mapped_rss_kb(const char *suffix)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    cr_assert_not_null(f);
    char line[4096], perms[8];
    unsigned long long lo, hi;
    long long kb = 0;
    bool in = false;
    size_t sl = strlen(suffix);
    while (fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\n");
        line[n] = '\0';
        if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) == 3)   /* a mapping's header */
            in = n >= sl && strcmp(line + n - sl, suffix) == 0;
        else if (in && strncmp(line, "Rss:", 4) == 0)
            kb += strtoll(line + 4, NULL, 10);
    }
    fclose(f);
    return kb;
}

static bool thp_enabled(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
    char buf[128] = "";
    bool ok = f && fgets(buf, sizeof buf, f) && !strstr(buf, "[never]");
    if (f)
        fclose(f);
    return ok;
}

MCD_TEST(place, three_modes_bit_identical)
{
    unsetenv("MINICPMD_TEST_MEMAVAILABLE_MB");
    eng_pack *p = NULL;
    char err[512] = "";
    cr_assert_eq(eng_pack_open(pack_dir("demo"), &p, err, sizeof err), 0, "%s", err);
    int nv = eng_pack_get_info(p)->hp.n_vocab;
    size_t bytes = (N_NEXT + 1) * (size_t)nv * sizeof(float);

    eng_model *mm = open_model(p, ENG_WEIGHTS_PLACE_MMAP);
    cr_assert_str_eq(eng_model_get_info(mm)->weights, "mmap");
    float *ref = run(mm, nv);
    eng_model_free(mm);

    eng_model *mc = open_model(p, ENG_WEIGHTS_PLACE_COPY);
    const struct eng_model_info *ic = eng_model_get_info(mc);
    cr_assert_str_eq(ic->weights, "copy", "copy fell back: %s", warned);
    cr_assert_gt(ic->weights_bytes, 0);
    float *got = run(mc, nv);
    cr_assert_eq(memcmp(ref, got, bytes), 0, "--weights copy: logits differ from mmap");
    /* The forward pass read the copy: of the pack's mapping only the embedding's
     * rows it used are resident (the copied part was dropped). */
    long long rss = mapped_rss_kb("/demo/model.q4nx");
    cr_assert_lt(rss * 1024, ic->weights_bytes / 4,
                 "%lld kB of the file mapping resident after a forward pass on the copy", rss);
    free(got);
    eng_model_free(mc);

    /* auto: a copy here (plenty of memory) where the kernel has huge pages. */
    eng_model *ma = open_model(p, ENG_WEIGHTS_PLACE_AUTO);
    cr_assert_str_eq(eng_model_get_info(ma)->weights, thp_enabled() ? "copy" : "mmap");
    got = run(ma, nv);
    cr_assert_eq(memcmp(ref, got, bytes), 0, "--weights auto: logits differ from mmap");
    free(got);
    eng_model_free(ma);
    free(ref);
    eng_pack_free(p);
}

MCD_TEST(place, copy_is_in_huge_pages)
{
    if (!thp_enabled())
        cr_skip_test("transparent huge pages are off on this kernel "
                     "(/sys/kernel/mm/transparent_hugepage/enabled says never)");
    unsetenv("MINICPMD_TEST_MEMAVAILABLE_MB");
    eng_pack *p = NULL;
    char err[512] = "";
    cr_assert_eq(eng_pack_open(pack_dir("demo"), &p, err, sizeof err), 0, "%s", err);
    eng_model *m = open_model(p, ENG_WEIGHTS_PLACE_COPY);
    const struct eng_model_info *mi = eng_model_get_info(m);
    cr_assert_str_eq(mi->weights, "copy", "copy fell back: %s", warned);
    /* The demo pack's 16 MB are 8 huge pages; the kernel may still give a few
     * 4 KB pages where it found no free 2 MB (fragmentation), not none at all. */
    cr_assert_gt(mi->weights_huge_bytes, 0, "smaps AnonHugePages of the copy is %lld",
                 (long long)mi->weights_huge_bytes);
    eng_model_free(m);
    eng_pack_free(p);
}

MCD_TEST(place, short_memory_falls_back_to_the_mapping)
{
    setenv("MINICPMD_TEST_MEMAVAILABLE_MB", "100", 1);
    eng_pack *p = NULL;
    char err[512] = "";
    cr_assert_eq(eng_pack_open(pack_dir("demo"), &p, err, sizeof err), 0, "%s", err);
    for (int w = ENG_WEIGHTS_PLACE_COPY; w <= ENG_WEIGHTS_PLACE_AUTO; w++) {
        warned[0] = '\0';
        eng_model *m = open_model(p, (enum eng_weights_place)w);
        cr_assert_str_eq(eng_model_get_info(m)->weights, "mmap");
        cr_assert(strstr(warned, "MemAvailable") && strstr(warned, "file mapping"),
                  "warning: '%s'", warned);
        eng_model_free(m);
    }
    unsetenv("MINICPMD_TEST_MEMAVAILABLE_MB");
    eng_pack_free(p);
}
