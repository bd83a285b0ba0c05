/* Unit tests for config/: layering, validation messages and model discovery.
 *
 * Every test passes its own envp and writes its files into a fresh temporary
 * directory, so nothing depends on the environment of the machine running it.
 * The one thing that cannot be redirected is /etc/minicpmd/config.json; tests
 * that would read it are skipped where it exists.
 */
#include "config/config.h"
#include "minicpmd-build.h"

#include "tests/check.h"
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ETC_CONFIG "/etc/minicpmd/config.json"

static struct cfg cfg;
static struct cfg_model_location loc;
static char err[1024];
static char warnings[4096];
static int n_warnings;
static char tmp[PATH_MAX];
static char *pool[64];
static int n_pool;

/* ---- fixture -------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    chmod(path, 0700);
    return remove(path);
}

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/test-config.XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
}

static void teardown(void)
{
    cfg_free(&cfg);
    cfg_model_location_free(&loc);
    for (int i = 0; i < n_pool; i++)
        free(pool[i]);
    n_pool = 0;
    nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Criterion does not run .fini for a skipped test, so clean up first. */
#define SKIP(...) do { teardown(); cr_skip_test(__VA_ARGS__); } while (0)

TestSuite(config, .init = setup, .fini = teardown);
TestSuite(discover, .init = setup, .fini = teardown);

/* ---- helpers -------------------------------------------------------------- */

/* A formatted string that lives until the end of the test. */
__attribute__((format(printf, 1, 2)))
static char *S(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    cr_assert_geq(vasprintf(&s, fmt, ap), 0);
    va_end(ap);
    cr_assert_lt(n_pool, 64);
    return pool[n_pool++] = s;
}

/* Write `content` to a new file (mkstemp) under the test directory. */
static char *tmp_file(const char *content)
{
    char *path = S("%s/cfg.XXXXXX", tmp);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    size_t n = strlen(content);
    cr_assert_eq(write(fd, content, n), (ssize_t)n);
    close(fd);
    return path;
}

/* Write `content` to tmp/rel, creating parent directories. */
static char *put(const char *rel, const char *content)
{
    char *path = S("%s/%s", tmp, rel);
    for (char *p = path + strlen(tmp) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fputs(content, f);
    fclose(f);
    return path;
}

static char *mkdirs(const char *rel)
{
    char *path = put(S("%s/.keep", rel), "");
    *strrchr(path, '/') = '\0';
    return path;
}

static void collect(void *ud, const char *msg)
{
    (void)ud;
    size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", msg);
    n_warnings++;
}

static bool names_config(char *const argv[], char *const envp[])
{
    for (int i = 0; argv[i]; i++)
        if (strncmp(argv[i], "--config", 8) == 0)
            return true;
    for (int i = 0; envp[i]; i++)
        if (strncmp(envp[i], "MINICPMD_CONFIG=", 16) == 0)
            return true;
    return false;
}

static enum cfg_result load(char *const argv[], char *const envp[])
{
    int argc = 0;
    while (argv[argc])
        argc++;
    if (!names_config(argv, envp) && access(ETC_CONFIG, F_OK) == 0)
        SKIP(ETC_CONFIG " exists on this machine");
    return cfg_load(&cfg, argc, argv, envp, collect, NULL, err, sizeof err);
}

#define ARGV(...) ((char *const[]){ "minicpmd", __VA_ARGS__ NULL })
#define ENV(...) ((char *const[]){ __VA_ARGS__ NULL })

/* Load and expect success. */
#define OK(argv, envp) \
    cr_assert_eq(load(argv, envp), CFG_RESULT_RUN, "unexpected error: %s", err)

/* Load, expect an error whose message contains each given string. */
#define FAILS(argv, envp, ...) do { \
        cr_assert_eq(load(argv, envp), CFG_RESULT_ERROR, "expected an error"); \
        const char *want_[] = { __VA_ARGS__ }; \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_; i_++) \
            cr_assert(strstr(err, want_[i_]), "'%s' not in '%s'", want_[i_], err); \
        cr_assert_null(strchr(err, '\n'), "message is not one line: %s", err); \
    } while (0)

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

/* ---- integers ------------------------------------------------------------- */

MCD_TEST(config, port_out_of_range)
{
    FAILS(ARGV("--port", "70000",), ENV(), "--port: '70000' is out of range (0..65535)");
    cfg_free(&cfg);
    FAILS(ARGV("--port=-1",), ENV(), "'-1' is out of range (0..65535)");
}

MCD_TEST(config, port_not_an_integer)
{
    FAILS(ARGV(), ENV("MINICPMD_PORT=abc",), "MINICPMD_PORT: 'abc' is not an integer (0..65535)");
}

MCD_TEST(config, integer_overflow)
{
    FAILS(ARGV("--port", "99999999999999999999",), ENV(),
          "--port: '99999999999999999999' is out of range (0..65535)");
    cfg_free(&cfg);
    FAILS(ARGV("--threads", "-99999999999999999999",), ENV(), "is out of range (1..256)");
}

MCD_TEST(config, integer_empty)
{
    FAILS(ARGV("--port=",), ENV(), "--port: '' is not an integer (0..65535)");
    cfg_free(&cfg);
    FAILS(ARGV(), ENV("MINICPMD_QUEUE_SIZE=",), "MINICPMD_QUEUE_SIZE: '' is not an integer");
}

MCD_TEST(config, integer_trailing_garbage)
{
    char *bad[] = { "80x", "8 0", " 80", "80 ", "0x50", "8.0", "+", "-" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FAILS(ARGV("--port", bad[i],), ENV(), "is not an integer (0..65535)");
        cfg_free(&cfg);
    }
}

MCD_TEST(config, integer_bounds_each)
{
    FAILS(ARGV("--threads", "0",), ENV(), "--threads: '0' is out of range (1..256)");
    cfg_free(&cfg);
    FAILS(ARGV("--queue-size", "4097",), ENV(), "(1..4096)");
    cfg_free(&cfg);
    FAILS(ARGV("--max-connections", "10001",), ENV(), "(1..10000)");
    cfg_free(&cfg);
    FAILS(ARGV("--timeout", "86401",), ENV(), "(0..86400)");
    cfg_free(&cfg);
    FAILS(ARGV("--shutdown-timeout", "3601",), ENV(), "(0..3600)");
    cfg_free(&cfg);
    FAILS(ARGV("--ctx-size", "1048577",), ENV(), "(0..1048576)");
    cfg_free(&cfg);
    OK(ARGV("--port", "0", "--timeout", "0", "--ctx-size", "1048576",), ENV());
    cr_assert_eq(cfg.port, 0);
}

MCD_TEST(config, runlist_layers)
{
    OK(ARGV("--runlist-layers", "all",), ENV());
    cr_assert_eq(cfg.runlist_layers, CFG_RUNLIST_ALL);
    cfg_free(&cfg);
    OK(ARGV(), ENV("MINICPMD_RUNLIST_LAYERS=6",));
    cr_assert_eq(cfg.runlist_layers, 6);
    cfg_free(&cfg);
    OK(ARGV("--runlist-layers=auto",), ENV("MINICPMD_RUNLIST_LAYERS=6",));
    cr_assert_eq(cfg.runlist_layers, CFG_RUNLIST_AUTO);
    cfg_free(&cfg);
    OK(ARGV("--config", tmp_file("{\"runlist_layers\": 1024}"),), ENV());
    cr_assert_eq(cfg.runlist_layers, 1024);
    cfg_free(&cfg);
    FAILS(ARGV("--runlist-layers", "0",), ENV(), "'0' is out of range (auto|all|1..1024)");
    cfg_free(&cfg);
    FAILS(ARGV("--runlist-layers", "1025",), ENV(), "out of range");
    cfg_free(&cfg);
    FAILS(ARGV("--runlist-layers", "some",), ENV(),
          "--runlist-layers: 'some' is not one of auto|all|1..1024");
}

/* ---- sizes ---------------------------------------------------------------- */

MCD_TEST(config, size_suffixes)
{
    static const struct { char *in; size_t out; } ok[] = {
        { "1024", 1024 }, { "16K", 16 << 10 }, { "4k", 4 << 10 }, { "2M", 2 << 20 },
        { "1G", 1 << 30 }, { "1MiB", 1 << 20 }, { "3m", 3 << 20 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        OK(ARGV("--max-body-bytes", ok[i].in,), ENV());
        cr_assert_eq(cfg.max_body_bytes, ok[i].out, "%s", ok[i].in);
        cfg_free(&cfg);
    }
    OK(ARGV("--config", tmp_file("{\"max-body-bytes\": 4096}"),), ENV());
    cr_assert_eq(cfg.max_body_bytes, 4096);
}

MCD_TEST(config, bad_sizes)
{
    char *bad[] = { "8X", "8MB", "K", "-1", "1.5M", "", "8 M" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FAILS(ARGV("--max-body-bytes", bad[i],), ENV(), "--max-body-bytes: '",
              "is not a size (1024..1073741824 bytes; suffixes K, M, G)");
        cfg_free(&cfg);
    }
    FAILS(ARGV("--max-body-bytes", "2G",), ENV(), "'2G' is out of range (1024..1073741824)");
    cfg_free(&cfg);
    FAILS(ARGV("--max-body-bytes", "1023",), ENV(), "out of range");
    cfg_free(&cfg);
    FAILS(ARGV("--max-body-bytes", "99999999999999999999G",), ENV(), "out of range");
    cfg_free(&cfg);
    FAILS(ARGV("--max-body-bytes", "17179869184G",), ENV(), "out of range");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"max-body-bytes\": 1.5}"),), ENV(),
          "key 'max-body-bytes': expected an integer or a size string", "got a real number");
}

/* ---- enums, bools, strings ------------------------------------------------ */

MCD_TEST(config, bad_enum)
{
    FAILS(ARGV("--device", "gpu",), ENV(), "--device: 'gpu' is not one of auto|cpu|sim|xrt");
    cfg_free(&cfg);
    char *f = tmp_file("{\"device\": \"gpu\"}");
    FAILS(ARGV("--config", f,), ENV(),
          S("config file %s: key 'device': 'gpu' is not one of auto|cpu|sim|xrt", f));
    cfg_free(&cfg);
    FAILS(ARGV(), ENV("MINICPMD_LOG_LEVEL=trace",),
          "MINICPMD_LOG_LEVEL: 'trace' is not one of error|warn|info|debug");
    cfg_free(&cfg);
    FAILS(ARGV("--log-format", "xml",), ENV(), "is not one of text|json");
}

MCD_TEST(config, bad_bool)
{
    FAILS(ARGV(), ENV("MINICPMD_CHECK=maybe",),
          "MINICPMD_CHECK: 'maybe' is not a boolean (true|false|1|0|yes|no)");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"check\": \"yes\"}"),), ENV(),
          "key 'check': expected true or false, got a string");
}

MCD_TEST(config, hosts)
{
    char *good[] = { "::", "::1", "0.0.0.0", "localhost", "192.168.1.20",
                           "fe80::1", "my-host.example.com" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        OK(ARGV("--host", good[i],), ENV());
        cr_assert_str_eq(cfg.host, good[i]);
        cfg_free(&cfg);
    }
    FAILS(ARGV("--host", "999.1.1.1",), ENV(), "--host: '999.1.1.1' is not a valid IPv4 address");
    cfg_free(&cfg);
    FAILS(ARGV("--host", "[::1]",), ENV(), "is not a valid IPv6 address");
    cfg_free(&cfg);
    FAILS(ARGV("--host", "bad host",), ENV(), "'bad host' is not an IP address or a host name");
    cfg_free(&cfg);
    FAILS(ARGV("--host", "-bad.example",), ENV(), "is not an IP address or a host name");
    cfg_free(&cfg);
    FAILS(ARGV("--host=",), ENV(), "--host: empty value");
}

MCD_TEST(config, empty_strings_rejected)
{
    FAILS(ARGV(), ENV("MINICPMD_MODEL=",), "MINICPMD_MODEL: empty value");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"log-file\": \"\"}"),), ENV(),
          "key 'log-file': empty value");
}

MCD_TEST(config, message_is_one_line_even_with_control_bytes)
{
    FAILS(ARGV("--device", "gp\nu",), ENV(), "'gp?u' is not one of");
}

/* ---- cors ----------------------------------------------------------------- */

MCD_TEST(config, cors_flags_accumulate)
{
    OK(ARGV("--cors-origin", "http://localhost:3000", "--cors-origin=https://a.example",),
       ENV("MINICPMD_CORS_ORIGIN=http://env.example",));
    cr_assert_eq(cfg.n_cors_origins, 2);
    cr_assert_str_eq(cfg.cors_origins[0], "http://localhost:3000");
    cr_assert_str_eq(cfg.cors_origins[1], "https://a.example");
    cr_assert_null(cfg.cors_origins[2]);
}

MCD_TEST(config, cors_later_source_replaces)
{
    char *f = tmp_file("{\"cors-origin\": [\"http://a.example\", \"http://b.example:8080\"]}");
    OK(ARGV("--config", f,), ENV());
    cr_assert_eq(cfg.n_cors_origins, 2);
    cr_assert_str_eq(cfg.cors_origins[1], "http://b.example:8080");
    cfg_free(&cfg);

    OK(ARGV("--config", f,), ENV("MINICPMD_CORS_ORIGIN=http://c.example, http://[::1]:9",));
    cr_assert_eq(cfg.n_cors_origins, 2);
    cr_assert_str_eq(cfg.cors_origins[0], "http://c.example");
    cr_assert_str_eq(cfg.cors_origins[1], "http://[::1]:9");
    cfg_free(&cfg);

    OK(ARGV("--config", f, "--cors-origin", "*",), ENV("MINICPMD_CORS_ORIGIN=http://c.example",));
    cr_assert_eq(cfg.n_cors_origins, 1);
    cr_assert_str_eq(cfg.cors_origins[0], "*");
    cfg_free(&cfg);

    /* An empty value turns CORS off again. */
    OK(ARGV("--config", f,), ENV("MINICPMD_CORS_ORIGIN=",));
    cr_assert_eq(cfg.n_cors_origins, 0);
    cr_assert_null(cfg.cors_origins[0]);
    cfg_free(&cfg);

    OK(ARGV("--config", tmp_file("{\"cors_origin\": \"https://x.example\"}"),), ENV());
    cr_assert_eq(cfg.n_cors_origins, 1);
    cr_assert_str_eq(cfg.cors_origins[0], "https://x.example");
}

MCD_TEST(config, bad_cors_origin)
{
    char *bad[] = { "example.com", "http://x.example/", "http://x.example:99999",
                          "http//x", "http://", "http://x.example:", "://x", "http://[zz]" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FAILS(ARGV("--cors-origin", bad[i],), ENV(), "--cors-origin: '",
              "is not an origin (scheme://host[:port] or *)");
        cfg_free(&cfg);
    }
    FAILS(ARGV(), ENV("MINICPMD_CORS_ORIGIN=http://a,,http://b",),
          "MINICPMD_CORS_ORIGIN: 'http://a,,http://b' has an empty or overlong item");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"cors-origin\": [\"http://a\", 3]}"),), ENV(),
          "key 'cors-origin': item 1: expected a string, got an integer");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"cors-origin\": {}}"),), ENV(),
          "expected a string or an array of strings, got an object");
}

/* ---- api key -------------------------------------------------------------- */

MCD_TEST(config, api_key_file_is_read_and_trimmed)
{
    char *k = tmp_file("s3cret\n");
    OK(ARGV("--api-key-file", k,), ENV());
    cr_assert_str_eq(cfg.api_key, "s3cret");
    cfg_free(&cfg);
    k = tmp_file("s3cret \r\n");
    OK(ARGV(), ENV(S("MINICPMD_API_KEY_FILE=%s", k),));
    cr_assert_str_eq(cfg.api_key, "s3cret");
}

MCD_TEST(config, api_key_and_file_conflict)
{
    char *k = tmp_file("s3cret\n");
    FAILS(ARGV("--api-key", "x", "--api-key-file", k,), ENV(),
          "api-key and api-key-file cannot both be given");
    cfg_free(&cfg);
    char *f = tmp_file(S("{\"api-key\": \"a\", \"api-key-file\": \"%s\"}", k));
    FAILS(ARGV("--config", f,), ENV(), S("config file %s: api-key and api-key-file", f));
    cfg_free(&cfg);
    FAILS(ARGV(), ENV("MINICPMD_API_KEY=a", S("MINICPMD_API_KEY_FILE=%s", k),),
          "environment: api-key and api-key-file");
}

MCD_TEST(config, api_key_stronger_layer_wins)
{
    char *k = tmp_file("fromfile\n");
    OK(ARGV("--api-key-file", k,), ENV("MINICPMD_API_KEY=fromenv",));
    cr_assert_str_eq(cfg.api_key, "fromfile");
    cfg_free(&cfg);
    /* The losing file is never read, so it may be missing. */
    OK(ARGV("--api-key", "fromflag",), ENV("MINICPMD_API_KEY_FILE=/nonexistent/key",));
    cr_assert_str_eq(cfg.api_key, "fromflag");
}

MCD_TEST(config, api_key_file_unreadable)
{
    FAILS(ARGV("--api-key-file", "/nonexistent/key",), ENV(),
          "--api-key-file: cannot read '/nonexistent/key': No such file or directory");
    cfg_free(&cfg);
    FAILS(ARGV("--api-key-file", tmp,), ENV(), "--api-key-file: cannot read", "Is a directory");
    cfg_free(&cfg);
    if (geteuid() != 0) {
        char *k = tmp_file("x\n");
        chmod(k, 0);
        FAILS(ARGV("--api-key-file", k,), ENV(), "cannot read", "Permission denied");
    }
}

MCD_TEST(config, api_key_file_empty)
{
    char *k = tmp_file("\n");
    FAILS(ARGV("--api-key-file", k,), ENV(), S("--api-key-file: '%s' is empty", k));
    cfg_free(&cfg);
    k = tmp_file("a\nb\n");
    FAILS(ARGV("--api-key-file", k,), ENV(), "holds control characters");
}

MCD_TEST(config, api_key_never_echoed)
{
    FAILS(ARGV("--api-key", "sec\tret",), ENV(), "--api-key: the value contains control");
    cr_assert_null(strstr(err, "sec"));
}

/* ---- the config file ------------------------------------------------------ */

MCD_TEST(config, explicit_missing_file)
{
    FAILS(ARGV("--config", "/nonexistent/c.json",), ENV(),
          "config file /nonexistent/c.json: No such file or directory");
    cfg_free(&cfg);
    FAILS(ARGV(), ENV("MINICPMD_CONFIG=/nonexistent/d.json",), "config file /nonexistent/d.json");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp,), ENV(), "is a directory");
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
    cr_assert_eq(resolve(file, ENV(), NULL), -1);
    cr_assert(strstr(err, S("--model '%s': not a directory", file)), "%s", err);
    cr_assert_null(loc.path);
    cr_assert_eq(resolve("/nonexistent/pack", ENV(), NULL), -1);
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
                                           S("XDG_DATA_HOME=%s/data", tmp),), NULL), -1);
    cr_assert(strstr(err, S("--model 'testfam:1b': not found (FastFlowLM lists it at "
                            "%s/flm/models/TestFam-1B-NPU2, which does not exist; also looked "
                            "in: %s/data/minicpmd/models/testfam-1b", tmp, tmp)), "%s", err);
    cr_assert_null(strchr(err, '\n'));
    cr_assert_null(loc.path);
    cr_assert_null(loc.id);

    cr_assert_eq(resolve("nosuch:9b", ENV(S("XDG_DATA_HOME=%s/data", tmp),), NULL), -1);
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
    cr_assert_eq(resolve("testfam:1b", env, NULL), -1);
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
        cr_assert_eq(resolve("testfam:1b", ENV(S("FLM_CONFIG_DIR=%s/flm", tmp),), NULL), -1,
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
    cr_assert_eq(resolve("testfam:1b", env, demo), -1);
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
