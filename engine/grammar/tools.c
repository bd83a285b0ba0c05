/* OpenAI tools -> GBNF for MiniCPM5's tool-call XML (split from schema.c, whose
 * walk compiles each parameter): one to ENG_GRAM_MAX_CALLS calls, each
 * <function name="N"> then its parameters in declared order as <param name="K">V
 * </param>, V plain text for strings (schema.c's raw mode) and JSON otherwise. */
#include "engine/grammar/schema-impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* One tool call: <function name="N"> then its parameters in declared order. */
static int gen_call(struct sc *c, const json_t *fn, size_t index, ut_buf *b)
{
    char path[320];
    const char *name = json_string_value(json_object_get(fn, "name"));
    const json_t *params = json_object_get(fn, "parameters");
    snprintf(path, sizeof path, "tools[%zu].function.parameters", index);
    c->root = params;
    c->n_refs = 0;
    char head[400];
    snprintf(head, sizeof head, "<function name=\"%.300s\">", name ? name : "");
    sc_lits(b, head);
    ut_buf_addc(b, ' ');
    if (params) {
        if (!json_is_object(params))
            return sc_refuse(c, "parameters", path, "%s must be an object", path);
        if (sc_check_keywords(c, params, path))
            return c->rc;
        const json_t *type = json_object_get(params, "type");
        if (type && !(json_is_string(type) && strcmp(json_string_value(type), "object") == 0))
            return sc_refuse(c, "type", path, "%s must be of type 'object'", path);
        const json_t *props = json_object_get(params, "properties");
        const json_t *req = json_object_get(params, "required");
        const char *k;
        const json_t *v;
        size_t i = 0;
        /* `required` as a set (jansson's hash): a lookup per property, not a scan */
        json_t *req_set = json_object();
        if (!req_set)
            return c->rc = -ENOMEM;
        for (size_t j = 0; j < json_array_size(req); j++) {
            const char *rk = json_string_value(json_array_get(req, j));
            if (rk && json_object_set_new(req_set, rk, json_true())) {
                json_decref(req_set);
                return c->rc = -ENOMEM;
            }
        }
        json_object_foreach((json_t *)props, k, v) {
            bool required = json_object_get(req_set, k) != NULL;
            if (json_is_false(v) && !required)
                continue; /* a parameter that may not appear */
            char p[400], tag[400];
            snprintf(p, sizeof p, "%.200s/properties/%.100s", path, k);
            snprintf(tag, sizeof tag, "<param name=\"%.300s\">", k);
            int r = sc_new_rule(c);
            ut_buf body = {0};
            sc_lits(&body, tag);
            ut_buf_addc(&body, ' ');
            /* string values are plain text (raw), others JSON */
            sc_sub(c, v, p, true, 0, &body);
            ut_buf_adds(&body, " \"</param>\"");
            if (!c->rc)
                sc_define(c, r, &body);
            ut_buf_free(&body);
            ut_buf_printf(b, required ? "r%d " : "r%d? ", r);
            i++;
            if (c->rc)
                break;
        }
        json_decref(req_set);
        for (size_t j = 0; j < json_array_size(req); j++) {
            const char *rk = json_string_value(json_array_get(req, j));
            if (!rk || !json_object_get(props, rk))
                return sc_refuse(c, "required", path, "%s requires '%.60s', which is not in its "
                                                      "properties", path, rk ? rk : "?");
        }
    }
    ut_buf_adds(b, "\"</function>\"");
    return c->rc;
}

int eng_gram_from_tools(const json_t *tools, const char *only, int max_calls, char **gbnf,
                        struct eng_gram_refusal *why)
{
    struct sc c;
    *gbnf = NULL;
    if (sc_init(&c, NULL, true, why))
        return -ENOMEM;
    int call = sc_new_rule(&c);
    ut_buf alts = {0};
    size_t i, n = 0;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (only && strcmp(name, only) != 0))
            continue;
        if (n++)
            ut_buf_adds(&alts, " | ");
        ut_buf_addc(&alts, '(');
        if (gen_call(&c, fn, i, &alts) || sc_room(&c, &alts, "tools"))
            break;
        ut_buf_addc(&alts, ')');
    }
    if (!c.rc && n == 0)
        sc_refuse(&c, "tools", "tools", "no tool to call");
    if (!c.rc)
        sc_define(&c, call, &alts);
    ut_buf_free(&alts);
    if (max_calls == 1)
        ut_buf_printf(&c.out, "root ::= r%d\n", call);
    else
        ut_buf_printf(&c.out, "root ::= r%d (ws r%d){0,%d}\n", call, call,
                      (max_calls > 1 ? max_calls : ENG_GRAM_MAX_CALLS) - 1);
    return sc_finish(&c, gbnf);
}
