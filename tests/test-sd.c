/* server/sd: the notify datagram on a real AF_UNIX socket (path and abstract),
 * the watchdog variables and LISTEN_FDS validation. */
#include "server/sd.h"

#include "tests/check.h"
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int bind_dgram(const char *name, bool abstract, char *envval, size_t envlen)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t len;
    if (abstract) {
        snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "%s", name);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
        snprintf(envval, envlen, "@%s", name);
    } else {
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", name);
        unlink(name);
        len = sizeof sa;
        snprintf(envval, envlen, "%s", name);
    }
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, len), 0, "bind: %s", strerror(errno));
    return fd;
}

static void recv_exact(int fd, const char *want)
{
    char buf[512];
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    cr_assert_gt(n, 0, "no datagram: %s", strerror(errno));
    buf[n] = '\0';
    cr_assert_str_eq(buf, want);
}

MCD_TEST(sd_notify, no_socket_is_a_no_op)
{
    unsetenv("NOTIFY_SOCKET");
    cr_assert_eq(srv_sd_notify("READY=1"), 0);
}

MCD_TEST(sd_notify, filesystem_socket)
{
    char path[64], env[128];
    snprintf(path, sizeof path, "/tmp/mcd-notify-%d", (int)getpid());
    int fd = bind_dgram(path, false, env, sizeof env);
    setenv("NOTIFY_SOCKET", env, 1);
    cr_assert_eq(srv_sd_notify("READY=1\nSTATUS=ready"), 1);
    recv_exact(fd, "READY=1\nSTATUS=ready");
    cr_assert_eq(srv_sd_notifyf("EXTEND_TIMEOUT_USEC=%d", 5000000), 1);
    recv_exact(fd, "EXTEND_TIMEOUT_USEC=5000000");
    close(fd);
    unlink(path);
}

MCD_TEST(sd_notify, abstract_socket)
{
    char name[64], env[128];
    snprintf(name, sizeof name, "mcd-notify-abstract-%d", (int)getpid());
    int fd = bind_dgram(name, true, env, sizeof env);
    setenv("NOTIFY_SOCKET", env, 1);
    cr_assert_eq(srv_sd_notify("WATCHDOG=1"), 1);
    recv_exact(fd, "WATCHDOG=1");
    close(fd);
}

MCD_TEST(sd_notify, bad_addresses)
{
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    cr_assert_eq(srv_sd_notify("READY=1"), -EAFNOSUPPORT);
    char longp[200];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    setenv("NOTIFY_SOCKET", longp, 1);
    cr_assert_eq(srv_sd_notify("READY=1"), -EINVAL);
    setenv("NOTIFY_SOCKET", "/nonexistent/dir/sock", 1);
    cr_assert_lt(srv_sd_notify("READY=1"), 0);
}

MCD_TEST(sd_watchdog, variables)
{
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    cr_assert_eq(srv_sd_watchdog_usec(), 0);
    setenv("WATCHDOG_USEC", "30000000", 1);
    cr_assert_eq(srv_sd_watchdog_usec(), 30000000);
    setenv("WATCHDOG_PID", pid, 1);
    cr_assert_eq(srv_sd_watchdog_usec(), 30000000);
    setenv("WATCHDOG_PID", "1", 1);
    cr_assert_eq(srv_sd_watchdog_usec(), 0, "another process's watchdog");
    setenv("WATCHDOG_PID", "x", 1);
    cr_assert_eq(srv_sd_watchdog_usec(), -EINVAL);
    unsetenv("WATCHDOG_PID");
    setenv("WATCHDOG_USEC", "0", 1);
    cr_assert_eq(srv_sd_watchdog_usec(), -EINVAL);
    setenv("WATCHDOG_USEC", "12abc", 1);
    cr_assert_eq(srv_sd_watchdog_usec(), -EINVAL);
    setenv("WATCHDOG_USEC", "-5", 1);
    cr_assert_eq(srv_sd_watchdog_usec(), -EINVAL);
}

MCD_TEST(sd_listen, not_activated)
{
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    cr_assert_eq(srv_sd_listen_fds(), 0);
}

MCD_TEST(sd_listen, other_pid_is_ignored_and_variables_cleared)
{
    setenv("LISTEN_PID", "1", 1);
    setenv("LISTEN_FDS", "1", 1);
    setenv("LISTEN_FDNAMES", "x", 1);
    cr_assert_eq(srv_sd_listen_fds(), 0);
    cr_assert_null(getenv("LISTEN_PID"));
    cr_assert_null(getenv("LISTEN_FDS"));
    cr_assert_null(getenv("LISTEN_FDNAMES"));
}

/* fd 3 belongs to Criterion's own IPC in the test process, so the socket that
 * systemd would pass is set up in a child. */
static int child_listen_fds(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || dup2(s, 3) != 3)
        return 10;
    if (s != 3)
        close(s);
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDS", "1", 1);
    if (srv_sd_listen_fds() != 1)
        return 11;
    if (!(fcntl(3, F_GETFD) & FD_CLOEXEC))
        return 12;
    if (getenv("LISTEN_FDS") || getenv("LISTEN_PID"))
        return 13;
    return 0;
}

MCD_TEST(sd_listen, ours)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(child_listen_fds());
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status));
    cr_assert_eq(WEXITSTATUS(status), 0, "child check %d failed", WEXITSTATUS(status));
}

MCD_TEST(sd_listen, malformed)
{
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDS", "many", 1);
    cr_assert_eq(srv_sd_listen_fds(), -EINVAL);
    setenv("LISTEN_PID", "abc", 1);
    setenv("LISTEN_FDS", "1", 1);
    cr_assert_eq(srv_sd_listen_fds(), -EINVAL);
    /* A count whose fds are not open (fds 3.. may be Criterion's; those past
     * 1000 are not). */
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDS", "100000", 1);
    cr_assert_lt(srv_sd_listen_fds(), 0);
}
