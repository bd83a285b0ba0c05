#include "server/listen.h"

#include "server/log.h"
#include "server/sd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void describe(int fd, struct srv_listener *l)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        l->port = ntohs(a->sin_port);
        snprintf(l->addr, sizeof l->addr, "%s:%d", host, l->port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        l->port = ntohs(a->sin6_port);
        snprintf(l->addr, sizeof l->addr, "[%s]:%d", host, l->port);
    } else if (ss.ss_family == AF_UNIX) {
        struct sockaddr_un *a = (struct sockaddr_un *)&ss;
        snprintf(l->addr, sizeof l->addr, "unix:%s", a->sun_path[0] ? a->sun_path : "@");
    }
}

static int activated(struct srv_listener *out, char *err, size_t errlen)
{
    int n = srv_sd_listen_fds();
    if (n < 0) {
        snprintf(err, errlen, "socket activation: malformed LISTEN_PID/LISTEN_FDS");
        return -EINVAL;
    }
    if (n == 0)
        return 0;
    if (n > 1)
        log_warn("socket activation passed %d sockets; serving on the first", n);
    int fd = SRV_SD_LISTEN_FDS_START, type = 0, listening = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM ||
        (len = sizeof listening, getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len)) ||
        !listening) {
        snprintf(err, errlen, "socket activation: fd %d is not a listening stream socket", fd);
        return -ENOTSOCK;
    }
    for (int extra = fd + 1; extra < SRV_SD_LISTEN_FDS_START + n; extra++)
        close(extra);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    out->fd = fd;
    out->activated = true;
    describe(fd, out);
    return 1;
}

int srv_listen_open(const char *host, int port, struct srv_listener *out, char *err,
                    size_t errlen)
{
    *out = (struct srv_listener){.fd = -1};
    int a = activated(out, err, errlen);
    if (a != 0)
        return a < 0 ? a : 0;

    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "--host '%s': %s", host, gai_strerror(gai));
        return gai == EAI_MEMORY ? -ENOMEM : gai == EAI_SYSTEM && errno ? -errno : -EINVAL;
    }
    int last_errno = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6) /* "::" means IPv6 and IPv4 alike */
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){0}, sizeof(int));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
            out->fd = fd;
            describe(fd, out);
            freeaddrinfo(res);
            return 0;
        }
        last_errno = errno;
        close(fd);
    }
    freeaddrinfo(res);
    snprintf(err, errlen, "cannot listen on %s%s%s:%d: %s", strchr(host, ':') ? "[" : "", host,
             strchr(host, ':') ? "]" : "", port, strerror(last_errno));
    return last_errno ? -last_errno : -EADDRNOTAVAIL;
}
