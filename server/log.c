/* Logging. Under systemd stderr goes to the journal, which stamps time itself;
 * we stamp anyway so a --log-file and a terminal read the same. */
#include "server/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    enum cfg_log_level level;
    enum cfg_log_format format;
    char *path;
    int fd;
    pthread_mutex_t lock;
} L = {CFG_LOG_INFO, CFG_LOG_FORMAT_TEXT, NULL, STDERR_FILENO, PTHREAD_MUTEX_INITIALIZER};

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static int open_log(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    return fd < 0 ? -errno : fd;
}

int srv_log_init(enum cfg_log_level level, enum cfg_log_format format, const char *path)
{
    L.level = level;
    L.format = format;
    if (!path)
        return 0;
    int fd = open_log(path);
    if (fd < 0)
        return fd;
    L.path = strdup(path);
    if (!L.path) {
        close(fd);
        return -ENOMEM;
    }
    L.fd = fd;
    return 0;
}

int srv_log_reopen(void)
{
    if (!L.path)
        return 0;
    int fd = open_log(L.path);
    if (fd < 0)
        return fd;
    pthread_mutex_lock(&L.lock);
    int old = L.fd;
    L.fd = fd;
    pthread_mutex_unlock(&L.lock);
    close(old);
    return 0;
}

void srv_log_close(void)
{
    if (L.path) {
        close(L.fd);
        free(L.path);
        L.path = NULL;
        L.fd = STDERR_FILENO;
    }
}

bool srv_log_enabled(enum cfg_log_level level) { return level <= L.level; }

void srv_log(enum cfg_log_level level, const char *fmt, ...)
{
    if (!srv_log_enabled(level))
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    struct timespec ts;
    struct tm tm;
    char stamp[40];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + n, sizeof stamp - n, ".%03ldZ", ts.tv_nsec / 1000000);

    char line[4096];
    int len;
    if (L.format == CFG_LOG_FORMAT_JSON) {
        /* jansson escapes the message; invalid UTF-8 (a client's bytes) is
         * replaced rather than dropping the line. */
        json_t *msgj = json_string(msg);
        if (!msgj)
            msgj = json_string("(log message was not valid UTF-8)");
        json_t *o = json_pack("{s:s, s:s, s:o}", "ts", stamp, "level", level_names[level], "msg",
                              msgj);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        len = snprintf(line, sizeof line, "%s\n", s ? s : "{}");
        free(s);
    } else {
        len = snprintf(line, sizeof line, "%s %-5s %s\n", stamp, level_names[level], msg);
    }
    if (len < 0)
        return;
    if ((size_t)len >= sizeof line) {
        len = (int)sizeof line - 1;
        line[len - 1] = '\n';
    }
    pthread_mutex_lock(&L.lock);
    ssize_t w = write(L.fd, line, (size_t)len);
    (void)w; /* nowhere to report a failed log write */
    pthread_mutex_unlock(&L.lock);
}
