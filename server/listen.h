/* listen — the daemon's listening socket: systemd's, or one we bind. */
#ifndef MINICPMD_SERVER_LISTEN_H
#define MINICPMD_SERVER_LISTEN_H

#include <stdbool.h>
#include <stddef.h>

struct srv_listener {
    int fd;
    bool activated;      /* passed in by systemd (LISTEN_FDS) */
    char addr[192];      /* "127.0.0.1:8001", "[::1]:8001" or "unix:/run/…" for logs */
    int port;            /* the bound port (the kernel's choice for --port 0) */
};

/* Take the socket systemd passed, else bind host:port. Returns 0, or a negative
 * errno (-EADDRINUSE, -EINVAL for a host that does not resolve, -ENOTSOCK for a
 * passed fd that is not a listening socket, …) with one line in `err`
 * ("cannot listen on 127.0.0.1:8001: Address already in use"). */
int srv_listen_open(const char *host, int port, struct srv_listener *out, char *err,
                    size_t errlen);

#endif
