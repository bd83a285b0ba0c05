/* Integer ranges for JSON Schema (split from schema.c): the digit-by-digit
 * alternatives that match exactly the integers of a range, and the bounds a schema
 * gives (minimum, maximum and their exclusive forms). */
#include "engine/grammar/schema-impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define INT_BOUND 999999999999999LL /* 15 digits: the default integer range */

/* Same-length decimal strings lo <= hi: the alternatives matching lo..hi. */
static void digits_range(ut_buf *b, const char *lo, const char *hi, size_t n)
{
    if (n == 0)
        return;
    if (memcmp(lo, hi, n) == 0) {
        sc_lit(b, lo, n);
        return;
    }
    if (lo[0] == hi[0]) {
        ut_buf_printf(b, "\"%c\" ", lo[0]);
        digits_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo_all0 = strspn(lo + 1, "0") >= n - 1, hi_all9 = strspn(hi + 1, "9") >= n - 1;
    char a = lo_all0 ? lo[0] : (char)(lo[0] + 1), z = hi_all9 ? hi[0] : (char)(hi[0] - 1);
    ut_buf_addc(b, '(');
    bool first = true;
    if (!lo_all0) {
        char nines[32];
        memset(nines, '9', n - 1);
        ut_buf_printf(b, "\"%c\" (", lo[0]);
        digits_range(b, lo + 1, nines, n - 1);
        ut_buf_addc(b, ')');
        first = false;
    }
    if (a <= z) {
        ut_buf_printf(b, "%s[%c-%c]", first ? "" : " | ", a, z);
        if (n > 1)
            ut_buf_printf(b, " [0-9]{%zu}", n - 1);
        first = false;
    }
    if (!hi_all9) {
        char zeros[32];
        memset(zeros, '0', n - 1);
        ut_buf_printf(b, "%s\"%c\" (", first ? "" : " | ", hi[0]);
        digits_range(b, zeros, hi + 1, n - 1);
        ut_buf_addc(b, ')');
    }
    ut_buf_addc(b, ')');
}

/* 0 <= lo <= hi: alternatives by digit count. */
static void nonneg_range(ut_buf *b, long long lo, long long hi, bool *first)
{
    long long p = 1; /* 10^(len-1) */
    for (int len = 1; len <= 18 && lo <= hi; len++, p *= 10) {
        long long top = p * 10 - 1;
        if (lo > top)
            continue;
        long long a = lo, z = hi < top ? hi : top;
        char sa[32], sz[32];
        snprintf(sa, sizeof sa, "%lld", a);
        snprintf(sz, sizeof sz, "%lld", z);
        ut_buf_adds(b, *first ? "(" : " | (");
        digits_range(b, sa, sz, strlen(sa));
        ut_buf_addc(b, ')');
        *first = false;
        lo = z + 1;
    }
}

void sc_int_range(ut_buf *b, long long lo, long long hi)
{
    bool first = true;
    ut_buf_addc(b, '(');
    if (lo < 0) { /* -(1 .. -lo) or -(-hi .. -lo) */
        long long a = hi < 0 ? -hi : 1, z = -lo;
        ut_buf_adds(b, "\"-\" (");
        bool f2 = true;
        nonneg_range(b, a, z, &f2);
        ut_buf_addc(b, ')');
        first = false;
    }
    if (hi >= 0) {
        if (!first)
            ut_buf_adds(b, " | ");
        bool f2 = true;
        ut_buf_addc(b, '(');
        nonneg_range(b, lo > 0 ? lo : 0, hi, &f2);
        ut_buf_addc(b, ')');
    }
    ut_buf_addc(b, ')');
}

/* The bounds of an integer (or integral number) schema, in [-INT_BOUND, INT_BOUND]. */
int sc_int_bounds(struct sc *c, const json_t *s, const char *path, long long *lo,
                      long long *hi, bool *bounded)
{
    *lo = -INT_BOUND;
    *hi = INT_BOUND;
    *bounded = false;
    static const char *const kw[] = {"minimum", "exclusiveMinimum", "maximum",
                                     "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        const json_t *v = json_object_get(s, kw[i]);
        if (!v)
            continue;
        if (json_is_boolean(v)) /* draft 4's boolean exclusives */
            return sc_refuse(c, kw[i], path, "a boolean '%s' at %s (draft 4) is not supported",
                             kw[i], path);
        if (!json_is_number(v))
            return sc_refuse(c, kw[i], path, "'%s' at %s must be a number", kw[i], path);
        double x = json_number_value(v);
        *bounded = true;
        if (i < 2) {
            double m = i == 0 ? ceil(x) : floor(x) + 1;
            if (m > (double)*lo)
                *lo = m > (double)INT_BOUND ? INT_BOUND + 1 : (long long)m;
        } else {
            double m = i == 2 ? floor(x) : ceil(x) - 1;
            if (m < (double)*hi)
                *hi = m < (double)-INT_BOUND ? -INT_BOUND - 1 : (long long)m;
        }
    }
    if (*lo > *hi)
        return sc_refuse(c, "minimum", path, "the range at %s holds no integer", path);
    return 0;
}

