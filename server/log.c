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
#include <sys/uio.h>
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

/* Client bytes (a path, a method) end up in messages: they must neither start a
 * new line nor reach a terminal raw, so text lines escape control characters.
 * JSON lines are escaped by jansson and never cut, so they always parse. */
size_t srv_log_escape(const char *in, char *out, size_t cap)
{
    size_t j = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && j + 5 < cap; p++) {
        if (*p < 0x20 || *p == 0x7f)
            j += (size_t)snprintf(out + j, cap - j, "\\x%02x", *p);
        else
            out[j++] = (char)*p;
    }
    out[j] = '\0';
    return j;
}

static void write_line(const char *a, size_t alen)
{
    static const char nl = '\n';
    struct iovec iov[2] = {{(void *)a, alen}, {(void *)&nl, 1}};
    pthread_mutex_lock(&L.lock);
    ssize_t w = writev(L.fd, iov, 2);
    (void)w; /* nowhere to report a failed log write */
    pthread_mutex_unlock(&L.lock);
}

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

    if (L.format == CFG_LOG_FORMAT_JSON) {
        /* Invalid UTF-8 (a client's bytes) is replaced rather than losing the line. */
        json_t *msgj = json_string(msg);
        if (!msgj)
            msgj = json_string("(log message was not valid UTF-8)");
        json_t *o = json_pack("{s:s, s:s, s:o}", "ts", stamp, "level", level_names[level], "msg",
                              msgj);
        char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (line)
            write_line(line, strlen(line));
        free(line);
        return;
    }
    char clean[sizeof msg * 4];
    srv_log_escape(msg, clean, sizeof clean);
    char line[sizeof clean + 64];
    int len = snprintf(line, sizeof line, "%s %-5s %s", stamp, level_names[level], clean);
    if (len > 0)
        write_line(line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
}

void srv_say(FILE *f, const char *fmt, ...)
{
    char msg[4096], clean[sizeof msg * 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_log_escape(msg, clean, sizeof clean);
    fprintf(f, "%s\n", clean);
}
