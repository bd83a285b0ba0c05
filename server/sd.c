/* systemd's notify and socket-activation protocols, written from their man pages
 * (sd_notify(3), sd_listen_fds(3), sd_watchdog_enabled(3)). */
#include "server/sd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int srv_sd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    /* "/path" is a filesystem socket, "@name" the abstract namespace. */
    if (path[0] != '/' && path[0] != '@')
        return -EAFNOSUPPORT;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof sa.sun_path)
        return -EINVAL;
    memcpy(sa.sun_path, path, len);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = '\0';
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                                  (path[0] == '/' ? 1 : 0));

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    int rc = n < 0 ? -errno : 1;
    close(fd);
    return rc;
}

int srv_sd_notifyf(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        return -EMSGSIZE;
    return srv_sd_notify(buf);
}

/* Strictly parse a positive decimal number. */
static int parse_u64(const char *s, unsigned long long *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

static int pid_is_ours(const char *var)
{
    unsigned long long pid;
    const char *s = getenv(var);
    if (!s)
        return -ENOENT;
    if (parse_u64(s, &pid) != 0)
        return -EINVAL;
    return (pid_t)pid == getpid();
}

int64_t srv_sd_watchdog_usec(void)
{
    const char *s = getenv("WATCHDOG_USEC");
    if (!s)
        return 0;
    int ours = pid_is_ours("WATCHDOG_PID");
    if (ours == 0)
        return 0;          /* meant for another process */
    if (ours == -EINVAL)
        return -EINVAL;
    unsigned long long usec;
    if (parse_u64(s, &usec) != 0 || usec == 0 || usec > INT64_MAX)
        return -EINVAL;
    return (int64_t)usec;
}

int srv_sd_listen_fds(void)
{
    int rc = 0;
    int ours = pid_is_ours("LISTEN_PID");
    if (ours == -ENOENT)
        goto out;          /* not socket-activated */
    if (ours < 0) {
        rc = -EINVAL;
        goto out;
    }
    if (ours == 0)
        goto out;          /* meant for another process */
    unsigned long long n;
    if (parse_u64(getenv("LISTEN_FDS"), &n) != 0 || n > INT_MAX - SRV_SD_LISTEN_FDS_START) {
        rc = -EINVAL;
        goto out;
    }
    for (int fd = SRV_SD_LISTEN_FDS_START; fd < SRV_SD_LISTEN_FDS_START + (int)n; fd++) {
        int flags = fcntl(fd, F_GETFD);
        if (flags < 0) {
            rc = -errno;
            goto out;
        }
        if (fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) {
            rc = -errno;
            goto out;
        }
    }
    rc = (int)n;
out:
    /* Children must not believe the sockets are theirs. */
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return rc;
}
