/* Unit tests for config/: model discovery. A path, a tag through FastFlowLM's
 * model list, the XDG and standard places, the embedded fallback, their order,
 * and what a failure says.
 *
 * Every test passes its own envp and writes its files into a fresh temporary
 * directory, so nothing depends on the environment of the machine running it.
 * The one thing that cannot be redirected is /etc/minicpmd/config.json; tests
 * that would read it are skipped where it exists. */
#include "config/config.h"
#include "minicpmd-build.h"
#include "tests/check.h"
#include "tests/config-fx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(discover, .init = setup, .fini = teardown);

/* ---- model discovery ------------------------------------------------------ */

/* The system-wide models directories cannot be redirected; where the default
 * model is installed there, tests that expect it to be missing are skipped. */
static void skip_if_installed(void)
{
    const char *dirs[] = { MINICPMD_LOCALSTATEDIR "/lib/minicpmd/models/minicpm5-2b",
                           MINICPMD_DATADIR "/minicpmd/models/minicpm5-2b" };
    struct stat st;
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        if (dirs[i][0] == '/' && stat(dirs[i], &st) == 0)
            SKIP("%s exists on this machine", dirs[i]);
}

static int resolve(const char *model, char *const envp[], const char *embedded)
{
    struct cfg c = { .model = (char *)model, .model_explicit = model != NULL };
    return cfg_model_resolve(&c, envp, embedded, &loc, err, sizeof err);
}

#define FLM_LIST(model_path) \
    "{\"model_path\": \"" model_path "\", \"models\": {\"minicpm5\": {\"2b\": " \
    "{\"name\": \"MiniCPM5-2B-NPU2\", \"files\": [\"config.json\"]}}, " \
    "\"qwen3\": {\"1.7b\": {\"name\": \"Qwen3-1.7B-NPU2\"}}, " \
    "\"testfam\": {\"1b\": {\"name\": \"TestFam-1B-NPU2\"}}}}"

MCD_TEST(discover, path_to_directory)
{
    char *dir = mkdirs("packs/my-pack");
    cr_assert_eq(resolve(dir, ENV(), NULL), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_PATH);
    cr_assert_str_eq(loc.id, "my-pack");
    char *real = realpath(dir, NULL);
    cr_assert_str_eq(loc.path, real);
    free(real);
    cfg_model_location_free(&loc);

    /* Relative paths come back absolute. */
    cr_assert_eq(chdir(tmp), 0);
    cr_assert_eq(resolve("./packs/my-pack/", ENV(), NULL), 0, "%s", err);
    cr_assert_eq(loc.path[0], '/');
    cr_assert_str_eq(loc.id, "my-pack");
    cfg_model_location_free(&loc);

    cr_assert_eq(resolve("~/my-pack", ENV(S("HOME=%s/packs", tmp),), NULL), 0, "%s", err);
    cr_assert_str_eq(loc.id, "my-pack");
}

MCD_TEST(discover, path_not_a_directory)
{
    char *file = put("pack.bin", "x");
    cr_assert_eq(resolve(file, ENV(), NULL), -ENOTDIR);
    cr_assert(strstr(err, S("--model '%s': not a directory", file)), "%s", err);
    cr_assert_null(loc.path);
    cr_assert_eq(resolve("/nonexistent/pack", ENV(), NULL), -ENOENT);
    cr_assert(strstr(err, "--model '/nonexistent/pack': No such file or directory"), "%s", err);
}

MCD_TEST(discover, tag_through_fastflowlm)
{
    put("flm/model_list.json", FLM_LIST("models"));
    char *pack = mkdirs("flm/models/MiniCPM5-2B-NPU2");
    cr_assert_eq(resolve("minicpm5:2b", ENV(S("FLM_CONFIG_DIR=%s/flm", tmp),), NULL), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_FLM);
    cr_assert_str_eq(loc.id, "minicpm5:2b");
    char *real = realpath(pack, NULL);
    cr_assert_str_eq(loc.path, real);
    free(real);
    cr_assert_null(loc.warning);
}

MCD_TEST(discover, default_tag_through_xdg_config_home)
{
    put("xdg/flm/model_list.json", FLM_LIST("models"));
    mkdirs("xdg/flm/models/MiniCPM5-2B-NPU2");
    cr_assert_eq(resolve(NULL, ENV(S("XDG_CONFIG_HOME=%s/xdg", tmp),), NULL), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_FLM);
    cr_assert_str_eq(loc.id, CFG_DEFAULT_MODEL_TAG);
}

MCD_TEST(discover, fastflowlm_under_home_and_tag_spellings)
{
    put("home/.config/flm/model_list.json", FLM_LIST("models"));
    mkdirs("home/.config/flm/models/MiniCPM5-2B-NPU2");
    char *const *env = ENV(S("HOME=%s/home", tmp),);
    cr_assert_eq(resolve("minicpm5-2b", env, NULL), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_FLM);
    cr_assert_str_eq(loc.id, "minicpm5:2b");
    cfg_model_location_free(&loc);
    cr_assert_eq(resolve("MiniCPM5:2B", env, NULL), 0, "%s", err);
    cr_assert_str_eq(loc.id, "minicpm5:2b");
}

MCD_TEST(discover, absolute_model_path_and_override)
{
    put("flm/model_list.json", S(FLM_LIST("%s/elsewhere"), tmp));
    mkdirs("elsewhere/MiniCPM5-2B-NPU2");
    mkdirs("override/MiniCPM5-2B-NPU2");
    cr_assert_eq(resolve("minicpm5:2b", ENV(S("FLM_CONFIG_DIR=%s/flm", tmp),), NULL), 0, "%s", err);
    cr_assert(strstr(loc.path, "/elsewhere/MiniCPM5-2B-NPU2"), "%s", loc.path);
    cfg_model_location_free(&loc);
    cr_assert_eq(resolve("minicpm5:2b", ENV(S("FLM_CONFIG_DIR=%s/flm", tmp),
                                            S("FLM_MODEL_PATH=%s/override", tmp),), NULL), 0,
                 "%s", err);
    cr_assert(strstr(loc.path, "/override/MiniCPM5-2B-NPU2"), "%s", loc.path);
}

MCD_TEST(discover, standard_place_via_xdg_data_home)
{
    char *pack = mkdirs("data/minicpmd/models/minicpm5-2b");
    cr_assert_eq(resolve("minicpm5:2b", ENV(S("XDG_DATA_HOME=%s/data", tmp),), NULL), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_STANDARD);
    cr_assert_str_eq(loc.id, "minicpm5:2b");
    char *real = realpath(pack, NULL);
    cr_assert_str_eq(loc.path, real);
    free(real);
    cfg_model_location_free(&loc);

    mkdirs("home/.local/share/minicpmd/models/qwen3-1.7b");
    cr_assert_eq(resolve("qwen3:1.7b", ENV(S("HOME=%s/home", tmp),), NULL), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_STANDARD);
    cr_assert_str_eq(loc.id, "qwen3:1.7b");
}

MCD_TEST(discover, listed_but_missing_falls_through)
{
    put("flm/model_list.json", FLM_LIST("models"));
    mkdirs("data/minicpmd/models/minicpm5-2b");
    cr_assert_eq(resolve("minicpm5:2b", ENV(S("FLM_CONFIG_DIR=%s/flm", tmp),
                                            S("XDG_DATA_HOME=%s/data", tmp),), NULL), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_STANDARD);
    cr_assert_not_null(loc.warning);
    cr_assert(strstr(loc.warning, "FastFlowLM lists it at"), "%s", loc.warning);
}

MCD_TEST(discover, explicit_not_found_says_where_it_looked)
{
    put("flm/model_list.json", FLM_LIST("models"));
    cr_assert_eq(resolve("testfam:1b", ENV(S("FLM_CONFIG_DIR=%s/flm", tmp),
                                           S("XDG_DATA_HOME=%s/data", tmp),), NULL), -ENOENT);
    cr_assert(strstr(err, S("--model 'testfam:1b': not found (FastFlowLM lists it at "
                            "%s/flm/models/TestFam-1B-NPU2, which does not exist; also looked "
                            "in: %s/data/minicpmd/models/testfam-1b", tmp, tmp)), "%s", err);
    cr_assert_null(strchr(err, '\n'));
    cr_assert_null(loc.path);
    cr_assert_null(loc.id);

    cr_assert_eq(resolve("nosuch:9b", ENV(S("XDG_DATA_HOME=%s/data", tmp),), NULL), -ENOENT);
    cr_assert(strstr(err, "--model 'nosuch:9b': not found (looked in: "), "%s", err);
    cr_assert(strstr(err, "/data/minicpmd/models/nosuch-9b"), "%s", err);
}

MCD_TEST(discover, default_not_found_is_none)
{
    skip_if_installed();
    cr_assert_eq(resolve(NULL, ENV(S("HOME=%s", tmp),), NULL), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_NONE);
    cr_assert_null(loc.path);
    cr_assert_null(loc.id);
    cr_assert_null(loc.warning);
}

MCD_TEST(discover, malformed_model_list)
{
    skip_if_installed();
    put("flm/model_list.json", "{\"models\": {\"minicpm5\": \n  [}");
    char *const *env = ENV(S("FLM_CONFIG_DIR=%s/flm", tmp), S("HOME=%s", tmp),);
    cr_assert_eq(resolve("testfam:1b", env, NULL), -ENOENT);
    cr_assert(strstr(err, S("not found (FastFlowLM's %s/flm/model_list.json is malformed (2:",
                            tmp)), "%s", err);
    cr_assert_null(strchr(err, '\n'));

    /* Without an explicit model it is skipped, with a warning to log. */
    cr_assert_eq(resolve(NULL, env, NULL), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_NONE);
    cr_assert_not_null(loc.warning);
    cr_assert(strstr(loc.warning, "malformed"), "%s", loc.warning);
}

MCD_TEST(discover, wrongly_shaped_model_list)
{
    char *bad[] = {
        "[]", "{\"models\": []}", "{\"model_path\": 3, \"models\": {}}",
        "{\"models\": {\"testfam\": 1}}", "{\"models\": {\"testfam\": {\"1b\": 1}}}",
        "{\"models\": {\"testfam\": {\"1b\": {\"name\": 1}}}}",
        "{\"models\": {\"testfam\": {\"1b\": {\"name\": \"../x\"}}}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        put("flm/model_list.json", bad[i]);
        cr_assert_eq(resolve("testfam:1b", ENV(S("FLM_CONFIG_DIR=%s/flm", tmp),), NULL), -ENOENT,
                     "%s", bad[i]);
        cr_assert(strstr(err, "is malformed ("), "%s -> %s", bad[i], err);
    }
}

MCD_TEST(discover, embedded_fallback)
{
    skip_if_installed();
    char *demo = mkdirs("build/demo-pack");
    char *const *env = ENV(S("HOME=%s", tmp),);
    cr_assert_eq(resolve(NULL, env, demo), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_EMBEDDED);
    cr_assert_str_eq(loc.id, "minicpm5-demo");
    cfg_model_location_free(&loc);

    /* An explicit model is never silently replaced by the demo... */
    cr_assert_eq(resolve("testfam:1b", env, demo), -ENOENT);
    cr_assert(strstr(err, "not found"), "%s", err);
    /* ...unless it asks for the demo by name. */
    cr_assert_eq(resolve("minicpm5-demo", env, demo), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_EMBEDDED);
    cfg_model_location_free(&loc);

    /* A missing embedded dir is not an error without an explicit model. */
    cr_assert_eq(resolve(NULL, env, "/nonexistent/demo"), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_NONE);
}

MCD_TEST(discover, flm_beats_standard_beats_embedded)
{
    put("flm/model_list.json", FLM_LIST("models"));
    mkdirs("flm/models/MiniCPM5-2B-NPU2");
    mkdirs("data/minicpmd/models/minicpm5-2b");
    char *demo = mkdirs("demo");
    char *const *env = ENV(S("FLM_CONFIG_DIR=%s/flm", tmp), S("XDG_DATA_HOME=%s/data", tmp),);
    cr_assert_eq(resolve(NULL, env, demo), 0, "%s", err);
    cr_assert_eq(loc.source, CFG_MODEL_FLM);
    cfg_model_location_free(&loc);
    cfg_model_location_free(&loc);
}
