/* Python's printing of JSON values, byte for byte, as the chat template needs it.
 *
 * The template prints tool definitions and non-string tool results with
 * transformers' tojson filter (json.dumps with ensure_ascii=False) and non-string
 * tool-call arguments with Jinja2's {{ value }}, which is Python's str(). Both
 * differ from what jansson prints (floats above all), so they are written out
 * here from CPython's rules: float_repr_style 'short', unicode_repr() and
 * json.encoder.py_encode_basestring(). */
#include "engine/text/template-impl.h"
#include "util/utf8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- numbers ------------------------------------------------------------- */

/* repr(float): the shortest digit string that reads back as the same double (the
 * first precision whose correctly rounded %e round-trips), laid out as CPython's
 * format_float_short() does for repr: exponent form when the decimal point sits
 * more than 16 digits right or 4 or more left of the first digit, and ".0" on
 * integral values. `json` selects json.dumps's names for the non-finite values. */
static void py_float(ut_buf *b, double x, bool json)
{
    if (isnan(x)) {
        ut_buf_adds(b, json ? "NaN" : "nan");
        return;
    }
    if (isinf(x)) {
        ut_buf_adds(b, x < 0 ? (json ? "-Infinity" : "-inf") : (json ? "Infinity" : "inf"));
        return;
    }
    if (x == 0) {
        ut_buf_adds(b, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    /* tmp is "[-]d[.ddd]e[+-]dd"; take the digits and the exponent apart, without
     * trusting the locale's decimal point. */
    char digits[24];
    size_t nd = 0;
    const char *s = tmp;
    if (*s == '-') {
        ut_buf_addc(b, '-');
        s++;
    }
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9' && nd < sizeof digits - 1)
            digits[nd++] = *s;
    digits[nd] = '\0';
    while (nd > 1 && digits[nd - 1] == '0') /* %e pads the precision we asked for */
        digits[--nd] = '\0';
    int exp10 = *s == 'e' ? atoi(s + 1) : 0;
    int decpt = exp10 + 1; /* digits d1d2… mean 0.d1d2… × 10^decpt */

    if (decpt <= -4 || decpt > 16) {
        ut_buf_addc(b, digits[0]);
        if (nd > 1) {
            ut_buf_addc(b, '.');
            ut_buf_add(b, digits + 1, nd - 1);
        }
        snprintf(tmp, sizeof tmp, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
        ut_buf_adds(b, tmp);
    } else if (decpt <= 0) {
        ut_buf_adds(b, "0.");
        for (int i = 0; i < -decpt; i++)
            ut_buf_addc(b, '0');
        ut_buf_add(b, digits, nd);
    } else if ((size_t)decpt >= nd) {
        ut_buf_add(b, digits, nd);
        for (size_t i = nd; i < (size_t)decpt; i++)
            ut_buf_addc(b, '0');
        ut_buf_adds(b, ".0");
    } else {
        ut_buf_add(b, digits, (size_t)decpt);
        ut_buf_addc(b, '.');
        ut_buf_add(b, digits + decpt, nd - (size_t)decpt);
    }
}

static void py_int(ut_buf *b, json_int_t i)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT, i);
    ut_buf_add(b, tmp, (size_t)n);
}

/* ---- strings ------------------------------------------------------------- */

/* CPython's Py_UNICODE_ISPRINTABLE for non-ASCII code points: everything except
 * the categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs. utf8proc's tables may be a
 * Unicode version ahead of the oracle's Python; only code points assigned in
 * between can differ. */
static bool py_printable(int32_t cp)
{
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

/* repr(str), after CPython's unicode_repr(). */
static void py_repr_str(ut_buf *b, const char *s, size_t n)
{
    char quote = '\'';
    if (memchr(s, '\'', n) && !memchr(s, '"', n))
        quote = '"';
    ut_buf_addc(b, quote);
    char tmp[16];
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            i++;
            if (c == (unsigned char)quote || c == '\\') {
                ut_buf_addc(b, '\\');
                ut_buf_addc(b, (char)c);
            } else if (c == '\t') {
                ut_buf_adds(b, "\\t");
            } else if (c == '\n') {
                ut_buf_adds(b, "\\n");
            } else if (c == '\r') {
                ut_buf_adds(b, "\\r");
            } else if (c < ' ' || c == 0x7f) {
                snprintf(tmp, sizeof tmp, "\\x%02x", c);
                ut_buf_adds(b, tmp);
            } else {
                ut_buf_addc(b, (char)c);
            }
            continue;
        }
        uint32_t cp;
        int len = ut_utf8_decode(s + i, n - i, &cp);
        if (len <= 0) { /* not UTF-8: jansson never gives us this; pass it through */
            ut_buf_addc(b, (char)c);
            i++;
            continue;
        }
        if (py_printable(cp)) {
            ut_buf_add(b, s + i, (size_t)len);
        } else {
            if (cp <= 0xff)
                snprintf(tmp, sizeof tmp, "\\x%02x", (unsigned)cp);
            else if (cp <= 0xffff)
                snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
            else
                snprintf(tmp, sizeof tmp, "\\U%08x", (unsigned)cp);
            ut_buf_adds(b, tmp);
        }
        i += (size_t)len;
    }
    ut_buf_addc(b, quote);
}

/* json.dumps's string form with ensure_ascii=False (py_encode_basestring). */
static void json_str(ut_buf *b, const char *s, size_t n)
{
    ut_buf_addc(b, '"');
    size_t run = 0; /* bytes copied verbatim, flushed in one append */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", c);
                esc = tmp;
            }
        }
        if (!esc) {
            run++;
            continue;
        }
        ut_buf_add(b, s + i - run, run);
        run = 0;
        ut_buf_adds(b, esc);
    }
    ut_buf_add(b, s + n - run, run);
    ut_buf_addc(b, '"');
}

/* ---- values -------------------------------------------------------------- */

static void py_repr(ut_buf *b, const json_t *v);

/* A value inside a container: json.dumps() writes it as JSON, str() as repr(). */
static void py_elem(ut_buf *b, const json_t *e, bool json)
{
    if (json)
        eng__py_tojson(b, e);
    else
        py_repr(b, e);
}

static void py_container(ut_buf *b, const json_t *v, bool json)
{
    size_t i = 0;
    if (json_is_array(v)) {
        ut_buf_addc(b, '[');
        const json_t *e;
        json_array_foreach(v, i, e) {
            if (i)
                ut_buf_adds(b, ", ");
            py_elem(b, e, json);
        }
        ut_buf_addc(b, ']');
        return;
    }
    ut_buf_addc(b, '{');
    const char *k;
    size_t klen;
    json_t *e;
    /* jansson keeps insertion order, as Python's dict does; with a duplicate key
     * both keep the first position and the last value. */
    json_object_keylen_foreach((json_t *)v, k, klen, e) {
        if (i++)
            ut_buf_adds(b, ", ");
        if (json)
            json_str(b, k, klen);
        else
            py_repr_str(b, k, klen);
        ut_buf_adds(b, ": ");
        py_elem(b, e, json);
    }
    ut_buf_addc(b, '}');
}

static void py_repr(ut_buf *b, const json_t *v)
{
    if (json_is_string(v))
        py_repr_str(b, json_string_value(v), json_string_length(v));
    else
        eng__py_str(b, v);
}

/* Python's str(v) (json false) or json.dumps(v) (json true): the two differ only
 * in how strings, floats, containers and the three constants are spelled. */
static void py_value(ut_buf *b, const json_t *v, bool json)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        if (json)
            json_str(b, json_string_value(v), json_string_length(v));
        else
            ut_buf_add(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        py_int(b, json_integer_value(v));
        break;
    case JSON_REAL:
        py_float(b, json_real_value(v), json);
        break;
    case JSON_TRUE:
        ut_buf_adds(b, json ? "true" : "True");
        break;
    case JSON_FALSE:
        ut_buf_adds(b, json ? "false" : "False");
        break;
    case JSON_NULL:
        ut_buf_adds(b, json ? "null" : "None");
        break;
    case JSON_ARRAY:
    case JSON_OBJECT:
        py_container(b, v, json);
        break;
    }
}

void eng__py_str(ut_buf *b, const json_t *v) { py_value(b, v, false); }

void eng__py_tojson(ut_buf *b, const json_t *v) { py_value(b, v, true); }

bool eng__py_truthy(const json_t *v)
{
    if (!v)
        return false;
    switch (json_typeof(v)) {
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return true;
    case JSON_FALSE: return false;
    case JSON_NULL: return false;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    }
    return false;
}
