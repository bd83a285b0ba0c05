/* security — API-key checks and CORS decisions, as pure functions so they can be
 * tested without a socket. */
#ifndef MINICPMD_SERVER_SECURITY_H
#define MINICPMD_SERVER_SECURITY_H

#include <stdbool.h>
#include <stddef.h>

/* The key a client presented: "Authorization: Bearer KEY" (scheme case-insensitive)
 * wins over "X-Api-Key: KEY". Either header may be NULL. Returns a pointer into one
 * of the header values, or NULL when none is presented. */
const char *srv_auth_presented_key(const char *authorization, const char *x_api_key);

/* Compare `presented` with `expected` in time that depends only on the length of
 * `presented` (which the client knows), never on where they differ or on the
 * length of the secret. NULL presented never matches. */
bool srv_auth_key_matches(const char *expected, const char *presented);

/* Whether `origin` (the request's Origin header) is one of the configured origins
 * (`origins`, `n`). "*" in the list allows any origin. Exact, case-sensitive match
 * on scheme://host[:port], as browsers send it; a trailing '/' in config is ignored. */
bool srv_cors_origin_allowed(char *const *origins, size_t n, const char *origin);

/* ---- what a loopback listener accepts (DNS rebinding) ------------------------------
 *
 * A name the attacker controls may resolve to 127.0.0.1 (DNS rebinding), so a
 * browser page can reach a daemon on loopback with its own name in Host. Like
 * Ollama's allowedHostsMiddleware, a loopback listener only answers Host values
 * that name loopback itself: "localhost", a loopback address (127.0.0.0/8,
 * [::1]), the configured --host, and the --allowed-host names; each with or
 * without ":port", case-insensitive. `host` NULL or malformed: false. */
bool srv_host_allowed(const char *host, const char *listen_host, char *const *allowed,
                      size_t n_allowed);

/* Whether `addr` (a numeric IPv4/IPv6 address, IPv6 without brackets) or "localhost"
 * is loopback: 127.0.0.0/8, ::1, ::ffff:127.x.y.z. */
bool srv_addr_is_loopback(const char *addr);

/* Whether a Content-Type value names JSON: "application/json", any case, with or
 * without parameters ("; charset=utf-8"). NULL (no header) is accepted: browsers
 * cannot send a cross-site body without one unless they send an Origin too. */
bool srv_content_type_is_json(const char *content_type);

/* Whether `origin` is the server's own origin as the client addressed it:
 * scheme://<Host header>, so a page served under the same name may post. */
bool srv_origin_is_host(const char *origin, const char *host);

#endif
