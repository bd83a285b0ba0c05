/* Unit tests for config/: where settings come from and which wins. The defaults,
 * the state directory, precedence of file, environment and command line, the
 * command line's forms, the config file itself (missing, unreadable, malformed,
 * unknown keys), and cfg_free / usage / print.
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

TestSuite(config, .init = setup, .fini = teardown);

/* ---- defaults ------------------------------------------------------------- */

MCD_TEST(config, defaults)
{
    OK(ARGV(), ENV("HOME=/home/u",));
    cr_assert_str_eq(cfg.host, "127.0.0.1");
    cr_assert_eq(cfg.port, 8001);
    cr_assert_eq(cfg.max_connections, 256);
    cr_assert_eq(cfg.timeout_s, 600);
    cr_assert_eq(cfg.shutdown_grace_s, 30);
    cr_assert_eq(cfg.max_body_bytes, (size_t)8 << 20);
    cr_assert_null(cfg.api_key);
    cr_assert_not_null(cfg.cors_origins);
    cr_assert_null(cfg.cors_origins[0]);
    cr_assert_eq(cfg.n_cors_origins, 0);
    cr_assert_null(cfg.model);
    cr_assert_not(cfg.model_explicit);
    cr_assert_eq(cfg.device, CFG_DEVICE_AUTO);
    cr_assert_eq(cfg.runlist_layers, CFG_RUNLIST_AUTO);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_eq(cfg.threads, n < 1 ? 1 : n > 256 ? 256 : n);
    cr_assert_eq(cfg.ctx_size, 0);
    cr_assert_eq(cfg.queue_size, 16);
    cr_assert_str_eq(cfg.state_dir, "/home/u/.local/state/minicpmd");
    cr_assert_eq(cfg.log_level, CFG_LOG_INFO);
    cr_assert_eq(cfg.log_format, CFG_LOG_FORMAT_TEXT);
    cr_assert_null(cfg.log_file);
    cr_assert_not(cfg.check);
    cr_assert_null(cfg.config_path);
    cr_assert_eq(n_warnings, 0);
}

MCD_TEST(config, state_dir_from_systemd)
{
    OK(ARGV(), ENV("HOME=/home/u", "XDG_STATE_HOME=/x", "STATE_DIRECTORY=/var/lib/minicpmd",));
    cr_assert_str_eq(cfg.state_dir, "/var/lib/minicpmd");
    cfg_free(&cfg);
    OK(ARGV(), ENV("STATE_DIRECTORY=/var/lib/a:/var/lib/b",));
    cr_assert_str_eq(cfg.state_dir, "/var/lib/a");
}

MCD_TEST(config, state_dir_fallbacks)
{
    OK(ARGV(), ENV("HOME=/home/u", "XDG_STATE_HOME=/xdg/state",));
    cr_assert_str_eq(cfg.state_dir, "/xdg/state/minicpmd");
    cfg_free(&cfg);
    OK(ARGV(), ENV("HOME=/home/u", "XDG_STATE_HOME=relative",));
    cr_assert_str_eq(cfg.state_dir, "/home/u/.local/state/minicpmd");
    cfg_free(&cfg);
    OK(ARGV(), ENV());
    cr_assert_str_eq(cfg.state_dir, "/var/lib/minicpmd");
    cfg_free(&cfg);
    OK(ARGV("--state-dir", "/srv/st",), ENV("STATE_DIRECTORY=/var/lib/minicpmd",));
    cr_assert_str_eq(cfg.state_dir, "/srv/st");
}

/* ---- precedence ----------------------------------------------------------- */

MCD_TEST(config, file_overrides_defaults)
{
    char *f = tmp_file("{\"port\": 9000, \"device\": \"cpu\", \"model\": \"m:1b\"}");
    OK(ARGV("--config", f,), ENV());
    cr_assert_eq(cfg.port, 9000);
    cr_assert_eq(cfg.device, CFG_DEVICE_CPU);
    cr_assert_str_eq(cfg.model, "m:1b");
    cr_assert(cfg.model_explicit);
    cr_assert_str_eq(cfg.config_path, f);
    cr_assert_eq(cfg.queue_size, 16);
}

MCD_TEST(config, env_overrides_file)
{
    char *f = tmp_file("{\"port\": 9000, \"queue-size\": 5}");
    OK(ARGV("--config", f,), ENV("MINICPMD_PORT=9100",));
    cr_assert_eq(cfg.port, 9100);
    cr_assert_eq(cfg.queue_size, 5);
}

MCD_TEST(config, cli_overrides_env_and_file)
{
    char *f = tmp_file("{\"port\": 9000, \"log-level\": \"debug\"}");
    OK(ARGV("--port", "9200", "--config", f,), ENV("MINICPMD_PORT=9100", "MINICPMD_THREADS=3",));
    cr_assert_eq(cfg.port, 9200);
    cr_assert_eq(cfg.threads, 3);
    cr_assert_eq(cfg.log_level, CFG_LOG_DEBUG);
}

MCD_TEST(config, env_names_the_file)
{
    char *f = tmp_file("{\"timeout\": 5}");
    OK(ARGV(), ENV(S("MINICPMD_CONFIG=%s", f),));
    cr_assert_eq(cfg.timeout_s, 5);
    cr_assert_str_eq(cfg.config_path, f);
}

MCD_TEST(config, flag_beats_env_for_the_file)
{
    char *a = tmp_file("{\"timeout\": 5}"), *b = tmp_file("{\"timeout\": 7}");
    OK(ARGV(S("--config=%s", b),), ENV(S("MINICPMD_CONFIG=%s", a),));
    cr_assert_eq(cfg.timeout_s, 7);
}

MCD_TEST(config, model_explicit_from_each_source)
{
    OK(ARGV(), ENV("MINICPMD_MODEL=/m",));
    cr_assert(cfg.model_explicit);
    cfg_free(&cfg);
    OK(ARGV("--model", "x:1b",), ENV());
    cr_assert(cfg.model_explicit);
    cr_assert_str_eq(cfg.model, "x:1b");
}

MCD_TEST(config, every_key_from_each_source)
{
    char *f = tmp_file("{\"host\":\"::1\",\"port\":1,\"max_connections\":2,\"timeout\":3,"
                       "\"shutdown-timeout\":4,\"max-body-bytes\":\"2K\",\"api-key\":\"k\","
                       "\"cors-origin\":\"*\",\"model\":\"m\",\"device\":\"sim\","
                       "\"runlist-layers\":\"all\",\"threads\":5,\"ctx-size\":6,"
                       "\"queue-size\":7,\"state-dir\":\"/s\",\"log-level\":\"warn\","
                       "\"log-format\":\"json\",\"log-file\":\"/l\",\"check\":true}");
    OK(ARGV("--config", f,), ENV());
    cr_assert_str_eq(cfg.host, "::1");
    cr_assert_eq(cfg.port, 1);
    cr_assert_eq(cfg.max_connections, 2);
    cr_assert_eq(cfg.timeout_s, 3);
    cr_assert_eq(cfg.shutdown_grace_s, 4);
    cr_assert_eq(cfg.max_body_bytes, 2048);
    cr_assert_str_eq(cfg.api_key, "k");
    cr_assert_str_eq(cfg.cors_origins[0], "*");
    cr_assert_str_eq(cfg.model, "m");
    cr_assert_eq(cfg.device, CFG_DEVICE_SIM);
    cr_assert_eq(cfg.runlist_layers, CFG_RUNLIST_ALL);
    cr_assert_eq(cfg.threads, 5);
    cr_assert_eq(cfg.ctx_size, 6);
    cr_assert_eq(cfg.queue_size, 7);
    cr_assert_str_eq(cfg.state_dir, "/s");
    cr_assert_eq(cfg.log_level, CFG_LOG_WARN);
    cr_assert_eq(cfg.log_format, CFG_LOG_FORMAT_JSON);
    cr_assert_str_eq(cfg.log_file, "/l");
    cr_assert(cfg.check);
    cr_assert_eq(n_warnings, 0, "%s", warnings);
    cfg_free(&cfg);

    OK(ARGV(), ENV("MINICPMD_HOST=localhost", "MINICPMD_MAX_CONNECTIONS=9",
                   "MINICPMD_SHUTDOWN_TIMEOUT=0", "MINICPMD_MAX_BODY_BYTES=1M",
                   "MINICPMD_DEVICE=xrt", "MINICPMD_LOG_FORMAT=json", "MINICPMD_CHECK=yes",
                   "MINICPMD_LOG_FILE=/var/log/m.log", "MINICPMD_CTX_SIZE=4096",));
    cr_assert_str_eq(cfg.host, "localhost");
    cr_assert_eq(cfg.max_connections, 9);
    cr_assert_eq(cfg.shutdown_grace_s, 0);
    cr_assert_eq(cfg.max_body_bytes, 1 << 20);
    cr_assert_eq(cfg.device, CFG_DEVICE_XRT);
    cr_assert_eq(cfg.log_format, CFG_LOG_FORMAT_JSON);
    cr_assert(cfg.check);
    cr_assert_str_eq(cfg.log_file, "/var/log/m.log");
    cr_assert_eq(cfg.ctx_size, 4096);
    cr_assert_eq(n_warnings, 0, "%s", warnings);
}

/* ---- command line forms --------------------------------------------------- */

MCD_TEST(config, flag_equals_form)
{
    OK(ARGV("--port=1234", "--host=0.0.0.0", "--device=cpu", "--check",), ENV());
    cr_assert_eq(cfg.port, 1234);
    cr_assert_str_eq(cfg.host, "0.0.0.0");
    cr_assert_eq(cfg.device, CFG_DEVICE_CPU);
    cr_assert(cfg.check);
}

MCD_TEST(config, bool_flag_values)
{
    OK(ARGV("--check=false",), ENV("MINICPMD_CHECK=1",));
    cr_assert_not(cfg.check);
    cfg_free(&cfg);
    FAILS(ARGV("--check=maybe",), ENV(), "--check: 'maybe' is not a boolean");
}

MCD_TEST(config, double_dash_ends_options)
{
    OK(ARGV("--port", "1", "--",), ENV());
    cr_assert_eq(cfg.port, 1);
    cfg_free(&cfg);
    FAILS(ARGV("--", "--port",), ENV(), "unexpected argument '--port'");
}

MCD_TEST(config, help_and_version)
{
    cr_assert_eq(load(ARGV("--help",), ENV()), CFG_RESULT_HELP);
    cfg_free(&cfg);
    cr_assert_eq(load(ARGV("-h",), ENV()), CFG_RESULT_HELP);
    cfg_free(&cfg);
    cr_assert_eq(load(ARGV("--version",), ENV()), CFG_RESULT_VERSION);
    cfg_free(&cfg);
    /* Help must work even when the rest of the command line or the file is broken. */
    cr_assert_eq(load(ARGV("--bogus", "--config", "/nonexistent.json", "--help",), ENV()),
                 CFG_RESULT_HELP);
    cfg_free(&cfg);
    FAILS(ARGV("--help=yes",), ENV(), "--help takes no value");
}

MCD_TEST(config, unknown_flag)
{
    FAILS(ARGV("--foo",), ENV(), "unknown flag '--foo' (see --help)");
    cfg_free(&cfg);
    FAILS(ARGV("--foo=bar",), ENV(), "unknown flag '--foo' (");
    cfg_free(&cfg);
    FAILS(ARGV("-p", "80",), ENV(), "unknown flag '-p'");
    cfg_free(&cfg);
    /* JSON spellings are not flags. */
    FAILS(ARGV("--max_body_bytes=1M",), ENV(), "unknown flag '--max_body_bytes'");
}

MCD_TEST(config, positional_argument)
{
    FAILS(ARGV("serve",), ENV(), "unexpected argument 'serve'", "no positional");
}

MCD_TEST(config, missing_flag_value)
{
    FAILS(ARGV("--port",), ENV(), "--port: missing value (0..65535)");
    cfg_free(&cfg);
    FAILS(ARGV("--model", "--port", "1",), ENV(), "--model: missing value");
    cfg_free(&cfg);
    FAILS(ARGV("--config",), ENV(), "--config: missing value");
    cfg_free(&cfg);
    FAILS(ARGV("--config=",), ENV(), "--config: empty value");
}

MCD_TEST(config, syntax_errors_come_before_file_errors)
{
    FAILS(ARGV("--config", "/nonexistent/c.json", "--nope",), ENV(), "unknown flag '--nope'");
}

/* ---- the config file ------------------------------------------------------ */

MCD_TEST(config, explicit_missing_file)
{
    FAILS(ARGV("--config", "/nonexistent/c.json",), ENV(),
          "config file /nonexistent/c.json: No such file or directory");
    cfg_free(&cfg);
    FAILS(ARGV(), ENV("MINICPMD_CONFIG=/nonexistent/d.json",), "config file /nonexistent/d.json");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp,), ENV(), "a directory, not a regular file");
    cfg_free(&cfg);
    /* A FIFO config file is refused at once, never read. */
    char *fifo = S("%s/c.fifo", tmp);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    FAILS(ARGV("--config", fifo,), ENV(), S("config file %s: a FIFO, not a regular file", fifo));
}

MCD_TEST(config, unreadable_file)
{
    if (geteuid() == 0)
        SKIP("root reads any file");
    char *f = tmp_file("{}");
    chmod(f, 0);
    FAILS(ARGV("--config", f,), ENV(), S("config file %s: Permission denied", f));
}

MCD_TEST(config, malformed_json_has_line_and_column)
{
    char *f = tmp_file("{\n  \"port\": 1,\n  \"host\" \"x\"\n}\n");
    FAILS(ARGV("--config", f,), ENV(), S("config file %s:3:", f));
}

MCD_TEST(config, top_level_not_object)
{
    FAILS(ARGV("--config", tmp_file("[1, 2]"),), ENV(),
          "top level must be an object, not an array");
}

MCD_TEST(config, wrong_json_type)
{
    char *f = tmp_file("{\"port\": \"8001\"}");
    FAILS(ARGV("--config", f,), ENV(),
          S("config file %s: key 'port': expected an integer (0..65535), got a string", f));
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"host\": 1}"),), ENV(),
          "key 'host': expected a string, got an integer");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"port\": 70000}"),), ENV(),
          "key 'port': '70000' is out of range (0..65535)");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"model\": null}"),), ENV(), "got null");
}

MCD_TEST(config, duplicate_json_key)
{
    FAILS(ARGV("--config", tmp_file("{\"port\": 1,\n\"port\": 2}"),), ENV(), ":2:", "duplicate");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"max-body-bytes\": 2048, \"max_body_bytes\": 4096}"),),
          ENV(), "key 'max_body_bytes' repeats 'max-body-bytes'");
}

MCD_TEST(config, unknown_json_key_warns)
{
    char *f = tmp_file("{\"prot\": 1, \"port\": 2, \"config\": \"x\"}");
    OK(ARGV("--config", f,), ENV());
    cr_assert_eq(cfg.port, 2);
    cr_assert_eq(n_warnings, 2);
    cr_assert(strstr(warnings, S("config file %s: unknown key 'prot' (ignored)", f)), "%s",
              warnings);
    cr_assert(strstr(warnings, "unknown key 'config'"), "%s", warnings);
}

MCD_TEST(config, unknown_env_var_warns)
{
    OK(ARGV(), ENV("MINICPMD_PROT=1", "MINICPMD_FAULTS=x", "MINICPMD_CONFIG=",
                   "MINICPMD_PORT=2", "OTHER=1", "MINICPMD_HELP=1",));
    cr_assert_eq(cfg.port, 2);
    cr_assert_eq(n_warnings, 2, "%s", warnings);
    cr_assert(strstr(warnings, "environment: unknown variable 'MINICPMD_PROT' (ignored)"));
    cr_assert(strstr(warnings, "'MINICPMD_HELP'"));
}

MCD_TEST(config, first_env_entry_wins)
{
    OK(ARGV(), ENV("MINICPMD_PORT=1", "MINICPMD_PORT=2",));
    cr_assert_eq(cfg.port, 1);
}

/* ---- lifetime and output -------------------------------------------------- */

MCD_TEST(config, free_is_safe_everywhere)
{
    struct cfg z = { 0 };
    cfg_free(&z);
    cfg_free(NULL);
    FAILS(ARGV("--cors-origin", "http://a", "--cors-origin", "bad",), ENV(), "bad");
    cfg_free(&cfg);
    cfg_free(&cfg);
    cr_assert_null(cfg.host);
}

MCD_TEST(config, usage_lists_every_flag)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cfg_print_usage(f, "minicpmd");
    fclose(f);
    const char *want[] = { "Usage: minicpmd", "--host ADDR", "--port N", "--model PATH|TAG",
                           "--device auto|cpu|sim|xrt", "--runlist-layers auto|all|N",
                           "--threads", "--ctx-size", "--queue-size", "--api-key KEY",
                           "--api-key-file FILE", "--cors-origin ORIGIN", "--max-body-bytes SIZE",
                           "--max-connections", "--timeout SECONDS", "--shutdown-timeout",
                           "--state-dir DIR", "--log-level error|warn|info|debug",
                           "--log-format text|json", "--log-file PATH", "--check",
                           "--config FILE", "--version", "-h, --help", "(default: 8001)",
                           "[0..65535]", "MINICPMD_" };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert(strstr(buf, want[i]), "'%s' missing from usage:\n%s", want[i], buf);
    free(buf);
}

MCD_TEST(config, print_masks_the_key)
{
    char *buf = NULL;
    size_t len = 0;
    OK(ARGV("--api-key", "topsecret", "--cors-origin", "http://a", "--cors-origin", "http://b",),
       ENV());
    FILE *f = open_memstream(&buf, &len);
    cfg_print(f, &cfg);
    fclose(f);
    cr_assert(strstr(buf, "port = 8001\n"));
    cr_assert(strstr(buf, "api-key = (set)\n"));
    cr_assert(strstr(buf, "runlist-layers = auto\n"));
    cr_assert(strstr(buf, "cors-origin = http://a,http://b\n"));
    cr_assert_null(strstr(buf, "topsecret"));
    free(buf);
}

MCD_TEST(config, names)
{
    cr_assert_str_eq(cfg_device_name(CFG_DEVICE_XRT), "xrt");
    cr_assert_str_eq(cfg_device_name((enum cfg_device)42), "?");
    cr_assert_str_eq(cfg_log_level_name(CFG_LOG_DEBUG), "debug");
    cr_assert_str_eq(cfg_model_source_name(CFG_MODEL_FLM), "fastflowlm");
    cr_assert_str_eq(cfg_model_source_name(CFG_MODEL_EMBEDDED), "embedded");
}
