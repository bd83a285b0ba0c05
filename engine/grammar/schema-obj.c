/* JSON Schema objects and arrays to GBNF (schema.c walks the schema and calls
 * these): properties in their declared order, the required ones always and the
 * others optionally, additionalProperties, items, prefixItems and the counts. */
#include "engine/grammar/schema-impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Properties from index i on; `comma`: one is owed before the next property. */
struct prop {
    const char *key;
    const json_t *schema;    /* NULL: any value */
    bool required;
};

int sc_gen_object(struct sc *c, const json_t *s, const char *path, int depth, ut_buf *b)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    char p[320];
    if (props && !json_is_object(props))
        return sc_refuse(c, "properties", path, "'properties' at %s must be an object", path);
    if (req && !json_is_array(req))
        return sc_refuse(c, "required", path, "'required' at %s must be an array", path);
    size_t n_props = json_object_size(props), n_req = json_array_size(req);
    struct prop *pr = calloc(n_props + n_req + 1, sizeof *pr);
    if (!pr)
        return c->rc = -ENOMEM;
    /* `required` as a set (jansson's hash), so that many properties and many
     * required names cost a lookup each, not a scan of the others */
    json_t *req_set = json_object();
    if (!req_set) {
        free(pr);
        return c->rc = -ENOMEM;
    }
    for (size_t i = 0; i < n_req; i++) {
        const char *name = json_string_value(json_array_get(req, i));
        if (!name) {
            free(pr);
            json_decref(req_set);
            return sc_refuse(c, "required", path, "'required' at %s must list strings", path);
        }
        if (json_object_set_new(req_set, name, json_true())) {
            free(pr);
            json_decref(req_set);
            return c->rc = -ENOMEM;
        }
    }
    size_t n = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        bool required = json_object_get(req_set, k) != NULL;
        if (json_is_false(v)) {
            /* a property that may not appear: left out, unless it must */
            if (required) {
                free(pr);
                json_decref(req_set);
                return sc_refuse(c, "required", path, "'required' at %s lists '%.60s', whose "
                                 "schema is false", path, k);
            }
            continue;
        }
        pr[n++] = (struct prop){k, v, required};
    }
    /* required names without a schema: any value, in the order `required` lists
     * them (once each); none may be there when additionalProperties is false */
    for (size_t i = 0; i < n_req; i++) {
        const char *name = json_string_value(json_array_get(req, i));
        if (json_object_get(props, name) || !json_object_get(req_set, name))
            continue;
        if (json_is_false(addl)) {
            free(pr);
            json_decref(req_set);
            return sc_refuse(c, "required", path, "'required' at %s lists '%.60s', which "
                             "'additionalProperties': false forbids", path, name);
        }
        json_object_del(req_set, name);
        pr[n++] = (struct prop){name, NULL, true};
    }
    json_decref(req_set);
    if (n == 0) {
        /* a map: any keys, values of additionalProperties (any when absent or true) */
        free(pr);
        if (json_is_false(addl) || n_props) { /* n_props: every one was false */
            ut_buf_adds(b, "\"{\" ws \"}\"");
            return 0;
        }
        ut_buf value = {0};
        if (sc_sub_or_any(c, addl, path, "additionalProperties", depth, &value))
            return c->rc;
        ut_buf_printf(b, "\"{\" ws (jstring ws \":\" ws %s (ws \",\" ws jstring ws \":\" ws %s)*)? "
                         "ws \"}\"", value.p, value.p);
        ut_buf_free(&value);
        return 0;
    }
    /* Two rules per position: rest[i][0] (no comma owed) and rest[i][1]. */
    int *rest = malloc((n + 1) * 2 * sizeof *rest);
    int *kv = malloc(n * sizeof *kv);
    if (!rest || !kv) {
        free(pr);
        free(rest);
        free(kv);
        return c->rc = -ENOMEM;
    }
    for (size_t i = 0; i < n && !c->rc; i++) {
        kv[i] = sc_new_rule(c);
        ut_buf body = {0};
        json_t *key = json_string(pr[i].key);
        if (key)
            sc_json_lit(c, key, false, &body);
        json_decref(key);
        ut_buf_adds(&body, " ws \":\" ws ");
        snprintf(p, sizeof p, "%.200s/properties/%.100s", path, pr[i].key);
        if (pr[i].schema)
            sc_sub(c, pr[i].schema, p, false, depth, &body);
        else
            ut_buf_adds(&body, "jvalue1");
        if (!c->rc)
            sc_define(c, kv[i], &body);
        ut_buf_free(&body);
    }
    for (size_t i = 0; i <= n; i++) {
        rest[2 * i] = sc_new_rule(c);
        rest[2 * i + 1] = sc_new_rule(c);
    }
    for (size_t i = n + 1; i-- > 0 && !c->rc;) {
        for (int comma = 0; comma < 2; comma++) {
            ut_buf body = {0};
            if (i == n) {
                ut_buf_adds(&body, "\"\"");
            } else {
                ut_buf_printf(&body, "%sr%d r%d", comma ? "ws \",\" ws " : "", kv[i],
                              rest[2 * (i + 1) + 1]);
                if (!pr[i].required)
                    ut_buf_printf(&body, " | r%d", rest[2 * (i + 1) + comma]);
            }
            sc_define(c, rest[2 * i + comma], &body);
            ut_buf_free(&body);
        }
    }
    ut_buf_printf(b, "\"{\" ws r%d ws \"}\"", rest[0]);
    free(pr);
    free(rest);
    free(kv);
    return c->rc;
}

int sc_gen_array(struct sc *c, const json_t *s, const char *path, int depth, ut_buf *b)
{
    const json_t *items = json_object_get(s, "items");
    const json_t *prefix = json_object_get(s, "prefixItems");
    char p[320];
    long long mn, mx;
    if (sc_count_range(c, s, "minItems", "maxItems", "array", path, &mn, &mx))
        return c->rc;
    if (prefix && !json_is_array(prefix))
        return sc_refuse(c, "prefixItems", path, "'prefixItems' at %s must be an array", path);
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return sc_refuse(c, "items", path, "'items' at %s must be a schema (an array of "
                                           "schemas is 'prefixItems' now)", path);
    ut_buf item = {0};
    bool no_more = json_is_false(items);
    if (sc_sub_or_any(c, items, path, "items", depth, &item))
        return c->rc;
    long long k = (long long)json_array_size(prefix);
    if (no_more && (mx < 0 || mx > k))
        mx = k;
    if (mn > k && no_more) {
        ut_buf_free(&item);
        return sc_refuse(c, "minItems", path, "'minItems' at %s needs more items than "
                                              "'prefixItems' allows", path);
    }
    ut_buf_adds(b, "\"[\" ws ");
    /* the prefix: element j, then the rest, optional from minItems on */
    int opened = 0;
    for (long long j = 0; j < k && (mx < 0 || j < mx) && !c->rc; j++) {
        if (j >= mn) {
            ut_buf_addc(b, '(');
            opened++;
        }
        if (j > 0)
            ut_buf_adds(b, "ws \",\" ws ");
        snprintf(p, sizeof p, "%.200s/prefixItems/%lld", path, j);
        sc_sub(c, json_array_get(prefix, (size_t)j), p, false, depth, b);
        ut_buf_addc(b, ' ');
    }
    if (!c->rc && (mx < 0 || mx > k)) {
        long long rmin = mn > k ? mn - k : 0, rmax = mx < 0 ? -1 : mx - k;
        if (k == 0) {
            /* item (, item){rmin-1, rmax-1}, all optional when rmin is 0 */
            long long a = rmin > 0 ? rmin - 1 : 0, z = rmax < 0 ? -1 : rmax - 1;
            ut_buf_printf(b, "%s%s (ws \",\" ws %s)", rmin == 0 ? "(" : "", item.p, item.p);
            if (z < 0)
                ut_buf_printf(b, "{%lld,}", a);
            else
                ut_buf_printf(b, "{%lld,%lld}", a, z);
            ut_buf_adds(b, rmin == 0 ? ")? " : " ");
        } else {
            ut_buf_printf(b, "(ws \",\" ws %s)", item.p);
            if (rmax < 0)
                ut_buf_printf(b, "{%lld,} ", rmin);
            else
                ut_buf_printf(b, "{%lld,%lld} ", rmin, rmax);
        }
    }
    for (int i = 0; i < opened; i++)
        ut_buf_adds(b, ")? ");
    ut_buf_adds(b, "ws \"]\"");
    ut_buf_free(&item);
    return c->rc;
}

