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

#endif
