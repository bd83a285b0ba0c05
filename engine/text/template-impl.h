/* chat internals shared by engine/chat*.c: a growable byte buffer and the Python
 * value printers that the template's output depends on. Not for other modules. */
#ifndef MINICPMD_ENGINE_CHAT_IMPL_H
#define MINICPMD_ENGINE_CHAT_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* The output is built in a ut_buf whose appends are not checked one by one: an
 * allocation failure sets `oom`, later appends are ignored, and the caller checks
 * `oom` once at the end (the prompt buffer is a per-request allocation that may be
 * large, so it fails into an error value). */

/* Python's str(v) of the value json.loads() gives for `v`: a string as itself,
 * True/False/None, ints, float repr ("1.0", "1e-05", "1e+16"), lists and dicts
 * with repr()'d elements ("{'k': [1, 'it\'s']}" — single quotes unless the string
 * holds ' and no ", \n \t \r \\ and \xNN escapes, printable non-ASCII kept). */
void eng__py_str(ut_buf *b, const json_t *v);

/* json.dumps(v, ensure_ascii=False) with the default separators ", " and ": ":
 * keys in the object's own order, non-ASCII kept, control characters as \u00XX,
 * numbers as Python prints them. */
void eng__py_tojson(ut_buf *b, const json_t *v);

/* Python truthiness of the value json.loads() gives for `v` (NULL: undefined). */
bool eng__py_truthy(const json_t *v);

/* SHA-256 of `len` bytes (FIPS 180-4). */
void eng__chat_sha256(const void *data, size_t len, uint8_t out[32]);

#endif
