/* chat — MiniCPM5-2B's chat_template.jinja, compiled by hand into C.
 *
 * The template (tests/data/minicpm5-2b/chat_template.jinja, docs/model-minicpm5.md
 * §2.5) is short enough to translate statement by statement, and a Jinja
 * interpreter in the daemon would be far more code to trust. So this file is that
 * translation, with the template's Jinja2 semantics spelled out where they are not
 * obvious; tests/chat/ renders a corpus through real Jinja2 and compares bytes.
 *
 * Two steps. map_messages() turns OpenAI's wire shapes into what the template
 * expects (developer -> system, text parts -> one string, arguments JSON strings ->
 * objects); those are minicpmd's decisions and tests/chat/oracle.py makes the same
 * ones. render() then follows the template, and refuses the request wherever
 * Jinja2 would raise instead of rendering. */
#include "engine/template.h"
#include "engine/text/template-impl.h"
#include "util/utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- text of the template ------------------------------------------------ */

static const char TOOLS_HEAD[] =
    "# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>";
static const char TOOLS_TAIL[] =
    "\n</tools>\n\nTool usage guidelines:\n"
    "- You may call zero or more functions. If no function calls are needed, just answer "
    "normally and do not include any <function ... </function>.\n"
    "- When calling a function, return an XML object within <function ... </function> using:\n"
    "<function name=\"function-name\"><param name=\"param-name\">param-value</param></function>\n"
    "- param-value may be multi-line. If it contains <, & or newline characters, wrap it in a "
    "CDATA block: <param name=\"param-name\"><![CDATA[...multi-line value...]]></param>";

/* ---- string views -------------------------------------------------------- */

struct str {
    const char *p;
    size_t n;
};

#define STR_LIT(s) ((struct str){(s), sizeof(s) - 1})

static struct str str_of(const json_t *v)
{
    const char *p = json_string_value(v);
    return p ? (struct str){p, json_string_length(v)} : (struct str){"", 0};
}

/* First occurrence of `needle` in `s`, or NULL. */
static const char *str_find(struct str s, struct str needle)
{
    return s.p && s.n ? memmem(s.p, s.n, needle.p, needle.n) : NULL;
}

/* Last occurrence of `needle` in `s`, or NULL. */
static const char *str_rfind(struct str s, struct str needle)
{
    if (needle.n > s.n)
        return NULL;
    for (size_t i = s.n - needle.n + 1; i-- > 0;)
        if (memcmp(s.p + i, needle.p, needle.n) == 0)
            return s.p + i;
    return NULL;
}

/* Python's s.lstrip('\n') and s.rstrip('\n'). */
static struct str str_lstrip_nl(struct str s)
{
    while (s.n && s.p[0] == '\n')
        s.p++, s.n--;
    return s;
}

static struct str str_rstrip_nl(struct str s)
{
    while (s.n && s.p[s.n - 1] == '\n')
        s.n--;
    return s;
}

/* The byte length of the character at p[0..n) when Python's str.isspace() is true
 * for it, else 0: ASCII \t\n\v\f\r, \x1c-\x1f and space, U+0085, U+00A0, U+1680,
 * U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. */
static size_t py_space(const char *s, size_t n)
{
    uint32_t cp;
    int k = n ? ut_utf8_decode(s, n, &cp) : 0;
    if (k <= 0)
        return 0;
    bool space = (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
                 cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
                 cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
    return space ? (size_t)k : 0;
}

/* Python's s.strip() (no argument: Unicode whitespace). */
static struct str str_py_strip(struct str s)
{
    size_t k;
    while (s.n && (k = py_space(s.p, s.n)))
        s.p += k, s.n -= k;
    while (s.n) {
        size_t start = ut_utf8_char_start(s.p, s.n - 1);   /* the last character's */
        if (py_space(s.p + start, s.n - start) != s.n - start)
            break;
        s.n = start;
    }
    return s;
}

static void add(ut_buf *b, struct str s)
{
    ut_buf_add(b, s.p, s.n);
}

/* ---- the request, mapped ------------------------------------------------- */

enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };

static const char *const role_names[] = {"system", "user", "assistant", "tool"};

struct msg {
    enum role role;
    const json_t *obj;
    const json_t *content; /* NULL when absent: Jinja's undefined */
    bool is_str;           /* `message.content is string` */
    struct str text;       /* the string when is_str */
    char *joined;          /* owned: the text parts, joined */
    const json_t *calls;   /* tool_calls: an array, or NULL */
    json_t **args;         /* owned, one per call: its parsed arguments, or NULL */
};

struct ctx {
    const struct eng_chat_params *p;
    struct msg *m;
    size_t n;
    ut_buf out;
    char *err;
    size_t errlen;
    char *param;
    size_t paramlen;
    bool failed;
    bool oom;                   /* the failure is out of memory, not the request */
};

/* Record the (first) failure: `msg` for err, then printf-style the param path. */
static void fail(struct ctx *c, const char *msg, const char *param_fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(struct ctx *c, const char *msg, const char *param_fmt, ...)
{
    if (c->failed)
        return;
    c->failed = true;
    if (c->err && c->errlen) {
        snprintf(c->err, c->errlen, "%s", msg);
        /* One line: jansson's message may quote the offending input. */
        for (char *e = c->err; *e; e++)
            if ((unsigned char)*e < ' ')
                *e = ' ';
    }
    if (c->param && c->paramlen) {
        c->param[0] = '\0';
        if (param_fmt) {
            va_list ap;
            va_start(ap, param_fmt);
            vsnprintf(c->param, c->paramlen, param_fmt, ap);
            va_end(ap);
        }
    }
}

static void fail_oom(struct ctx *c)
{
    if (!c->failed)
        c->oom = true;
    fail(c, "out of memory", NULL);
}

static bool role_parse(const json_t *v, enum role *out)
{
    static const struct {
        const char *name;
        enum role role;
    } roles[] = {
        {"system", ROLE_SYSTEM},
        /* OpenAI's newer name for system instructions; the template knows only
         * "system", and would drop a "developer" turn without a word. */
        {"developer", ROLE_SYSTEM},
        {"user", ROLE_USER},
        {"assistant", ROLE_ASSISTANT},
        {"tool", ROLE_TOOL},
    };
    const char *s = json_string_value(v);
    for (size_t i = 0; s && i < sizeof roles / sizeof *roles; i++)
        if (strlen(roles[i].name) == json_string_length(v) && strcmp(s, roles[i].name) == 0) {
            *out = roles[i].role;
            return true;
        }
    return false;
}

/* Content as an array of parts: OpenAI's meaning is the texts one after the
 * other, so they are concatenated with nothing in between. An image or audio part
 * cannot be given to this text-only model: refused, naming the part. */
static void join_parts(struct ctx *c, size_t i, struct msg *m)
{
    ut_buf b = {0};
    ut_buf_add(&b, "", 0); /* "" for an empty array, not NULL */
    size_t j;
    const json_t *part;
    json_array_foreach(m->content, j, part) {
        const json_t *text = json_object_get(part, "text");
        if (!json_is_string(json_object_get(part, "type")) ||
            strcmp(json_string_value(json_object_get(part, "type")), "text") != 0 ||
            !json_is_string(text)) {
            fail(c, "only text content parts are supported", "messages[%zu].content[%zu]", i, j);
            ut_buf_free(&b);
            return;
        }
        add(&b, str_of(text));
    }
    if (b.oom) {
        fail_oom(c);
        ut_buf_free(&b);
        return;
    }
    m->joined = b.p;
    m->is_str = true;
    m->text = (struct str){b.p, b.n};
}

/* The object whose name/arguments the template reads for a tool call: the call's
 * "function" when that is truthy (OpenAI's form), else the call itself
 * (transformers' flat {name, arguments} form). May be a non-object, which renders
 * as <function name=""></function>, as in Jinja2. */
static const json_t *call_target(const json_t *call, bool *via_function)
{
    const json_t *f = json_is_object(call) ? json_object_get(call, "function") : NULL;
    *via_function = eng__py_truthy(f);
    return *via_function ? f : call;
}

/* OpenAI sends arguments as a JSON string; the template wants the object. */
static void parse_args(struct ctx *c, size_t i, size_t j, const json_t *call, json_t **out)
{
    bool via_function;
    const json_t *t = call_target(call, &via_function);
    const json_t *a = json_is_object(t) ? json_object_get(t, "arguments") : NULL;
    if (!json_is_string(a))
        return;
    struct str s = str_of(a);
    if (strspn(s.p, " \t\n\r") == s.n) { /* "" means no arguments, not an error */
        *out = json_object();
        if (!*out)
            fail_oom(c);
        return;
    }
    json_error_t je;
    *out = json_loadb(s.p, s.n, JSON_DECODE_ANY, &je);
    if (!*out) {
        char msg[256];
        snprintf(msg, sizeof msg, "arguments are not valid JSON: %s (at character %d)", je.text,
                 je.position);
        fail(c, msg, "messages[%zu].tool_calls[%zu]%s.arguments", i, j,
             via_function ? ".function" : "");
    }
}

static void map_message(struct ctx *c, size_t i, const json_t *obj, struct msg *m)
{
    m->obj = obj;
    if (!json_is_object(obj)) {
        fail(c, "a message must be an object", "messages[%zu]", i);
        return;
    }
    const json_t *role = json_object_get(obj, "role");
    if (!json_is_string(role)) {
        fail(c, "a message needs a role string", "messages[%zu].role", i);
        return;
    }
    if (!role_parse(role, &m->role)) {
        fail(c, "unsupported role (system, developer, user, assistant or tool)",
             "messages[%zu].role", i);
        return;
    }
    m->content = json_object_get(obj, "content");
    if (json_is_string(m->content)) {
        m->is_str = true;
        m->text = str_of(m->content);
    } else if (json_is_array(m->content)) {
        join_parts(c, i, m);
    }
    const json_t *calls = json_object_get(obj, "tool_calls");
    if (calls && !json_is_null(calls) && !json_is_array(calls)) {
        fail(c, "tool_calls must be an array", "messages[%zu].tool_calls", i);
        return;
    }
    if (!json_array_size(calls))
        return;
    m->calls = calls;
    m->args = calloc(json_array_size(calls), sizeof *m->args);
    if (!m->args) {
        fail_oom(c);
        return;
    }
    for (size_t j = 0; j < json_array_size(calls) && !c->failed; j++)
        parse_args(c, i, j, json_array_get(calls, j), &m->args[j]);
}

static void map_messages(struct ctx *c)
{
    const json_t *msgs = c->p->messages;
    if (!json_is_array(msgs)) {
        fail(c, "messages must be an array", "messages");
        return;
    }
    c->n = json_array_size(msgs);
    if (c->n == 0) {
        /* The template reads messages[0].role, which Jinja2 raises on. */
        fail(c, "messages must not be empty", "messages");
        return;
    }
    c->m = calloc(c->n, sizeof *c->m);
    if (!c->m) {
        fail_oom(c);
        return;
    }
    for (size_t i = 0; i < c->n && !c->failed; i++)
        map_message(c, i, json_array_get(msgs, i), &c->m[i]);
    const json_t *tools = c->p->tools;
    if (!c->failed && tools && !json_is_null(tools) && !json_is_array(tools))
        fail(c, "tools must be an array", "tools");
}

static void unmap_messages(struct ctx *c)
{
    for (size_t i = 0; c->m && i < c->n; i++) {
        free(c->m[i].joined);
        for (size_t j = 0; c->m[i].args && j < json_array_size(c->m[i].calls); j++)
            json_decref(c->m[i].args[j]);
        free(c->m[i].args);
    }
    free(c->m);
    c->m = NULL;
}

/* ---- the template -------------------------------------------------------- */

/* The `tools` block's system turn (template lines 1-21). */
static void render_system_with_tools(struct ctx *c)
{
    ut_buf defs = {0};
    ut_buf_adds(&defs, TOOLS_HEAD);
    size_t i;
    const json_t *tool;
    json_array_foreach(c->p->tools, i, tool) {
        ut_buf_addc(&defs, '\n');
        eng__py_tojson(&defs, tool);
    }
    ut_buf_adds(&defs, TOOLS_TAIL);
    if (defs.oom) {
        fail_oom(c);
        goto out;
    }
    struct str d = {defs.p, defs.n};

    ut_buf_adds(&c->out, "<|im_start|>system\n");
    if (c->m[0].role == ROLE_SYSTEM) {
        /* `'<tool_def_sep>' in content` and `content + '\n\n'` raise on anything but a
         * string (None, undefined). */
        if (!c->m[0].is_str) {
            fail(c, "the first system message's content must be a string", "messages[0].content");
            goto out;
        }
        struct str s = c->m[0].text;
        const struct str sep = STR_LIT("<tool_def_sep>");
        if (str_find(s, sep)) { /* content.replace(sep, tool_definitions): every one */
            const char *hit;
            while ((hit = str_find(s, sep))) {
                ut_buf_add(&c->out, s.p, (size_t)(hit - s.p));
                add(&c->out, d);
                s.n -= (size_t)(hit - s.p) + sep.n;
                s.p = hit + sep.n;
            }
            add(&c->out, s);
        } else {
            add(&c->out, s);
            ut_buf_adds(&c->out, "\n\n");
            add(&c->out, d);
        }
    } else {
        add(&c->out, d); /* tool_definitions.lstrip(): it starts with "#" */
    }
    ut_buf_adds(&c->out, "<|im_end|>\n");
out:
    ut_buf_free(&defs);
}

/* One tool call as the template's last tool-call loop prints it. */
static void render_call(struct ctx *c, size_t i, size_t j)
{
    const json_t *call = json_array_get(c->m[i].calls, j);
    bool via_function;
    const json_t *t = call_target(call, &via_function);
    bool obj = json_is_object(t);

    ut_buf_adds(&c->out, "<function name=\"");
    const json_t *name = obj ? json_object_get(t, "name") : NULL;
    if (name) /* `~` prints str(value); undefined prints nothing */
        eng__py_str(&c->out, name);
    ut_buf_adds(&c->out, "\">");

    const json_t *args = c->m[i].args[j];
    if (!args)
        args = obj ? json_object_get(t, "arguments") : NULL;
    if (eng__py_truthy(args)) {
        if (!json_is_object(args)) { /* args_dict.items() is undefined: Jinja2 raises */
            fail(c, "arguments must be a JSON object", "messages[%zu].tool_calls[%zu]%s.arguments",
                 i, j, via_function ? ".function" : "");
            return;
        }
        const char *k;
        size_t klen;
        json_t *v;
        json_object_keylen_foreach((json_t *)args, k, klen, v) {
            ut_buf_adds(&c->out, "<param name=\"");
            ut_buf_add(&c->out, k, klen);
            ut_buf_adds(&c->out, "\">");
            struct str s = json_is_string(v) ? str_of(v) : (struct str){"", 0};
            if (json_is_string(v) && (memchr(s.p, '<', s.n) || memchr(s.p, '&', s.n) ||
                                      memchr(s.p, '\n', s.n))) {
                /* No escaping of "]]>" inside: the template does none. */
                ut_buf_adds(&c->out, "<![CDATA[");
                add(&c->out, s);
                ut_buf_adds(&c->out, "]]>");
            } else {
                eng__py_str(&c->out, v);
            }
            ut_buf_adds(&c->out, "</param>");
        }
    }
    ut_buf_adds(&c->out, "</function>");
}

/* An assistant turn (template lines 43-151). */
static void render_assistant(struct ctx *c, size_t i)
{
    const struct msg *m = &c->m[i];
    struct str content = m->is_str ? m->text : STR_LIT("");
    struct str reasoning = STR_LIT("");
    const json_t *rc = json_object_get(m->obj, "reasoning_content");
    const struct str think = STR_LIT("<think>"), unthink = STR_LIT("</think>");

    if (json_is_string(rc)) {
        reasoning = str_of(rc); /* even "": then inline <think> is not looked for */
    } else if (str_find(content, unthink)) {
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        const char *end = str_find(content, unthink);
        struct str r = str_rstrip_nl((struct str){content.p, (size_t)(end - content.p)});
        const char *open = str_rfind(r, think);
        if (open)
            r = (struct str){open + think.n, r.n - (size_t)(open + think.n - r.p)};
        reasoning = str_lstrip_nl(r);
        /* content.split('</think>')[-1].lstrip('\n') */
        const char *last = str_rfind(content, unthink) + unthink.n;
        content = str_lstrip_nl((struct str){last, content.n - (size_t)(last - content.p)});
    }

    /* The template splits content at '<tool_sep>' and rebuilds it with the calls in
     * between, but inside {% for %} loops whose assignments Jinja2 scoping throws
     * away: all that survives is the text before the first '<tool_sep>', and every
     * call is then printed after the content (has_tool_sep is never defined). */
    if (m->calls) {
        const char *sep = str_find(content, STR_LIT("<tool_sep>"));
        if (sep)
            content.n = (size_t)(sep - content.p);
    }

    ut_buf_adds(&c->out, "<|im_start|>assistant\n");
    if (reasoning.n) {
        ut_buf_adds(&c->out, "<think>\n");
        add(&c->out, str_lstrip_nl(str_rstrip_nl(reasoning)));
        ut_buf_adds(&c->out, "\n</think>\n\n");
        add(&c->out, str_lstrip_nl(content));
    } else if (!str_find(content, think) && !str_find(content, unthink)) {
        ut_buf_adds(&c->out, "<think>\n\n</think>\n\n");
        add(&c->out, str_lstrip_nl(content));
    } else {
        add(&c->out, content);
    }

    for (size_t j = 0; m->calls && j < json_array_size(m->calls) && !c->failed; j++) {
        /* `(loop.first and content) or not loop.first`: content before lstrip. */
        if (j > 0 || content.n)
            ut_buf_addc(&c->out, '\n');
        render_call(c, i, j);
    }
    ut_buf_adds(&c->out, "<|im_end|>\n");
}

/* A tool result; consecutive ones share one user turn (template lines 152-166). */
static void render_tool(struct ctx *c, size_t i)
{
    const struct msg *m = &c->m[i];
    if (i == 0 || c->m[i - 1].role != ROLE_TOOL)
        ut_buf_adds(&c->out, "<|im_start|>user");
    ut_buf_adds(&c->out, "\n<tool_response>\n");
    if (m->is_str) {
        add(&c->out, m->text);
    } else if (m->content) {
        eng__py_tojson(&c->out, m->content);
    } else { /* tojson(undefined): json.dumps raises TypeError */
        fail(c, "a tool message needs content", "messages[%zu].content", i);
        return;
    }
    ut_buf_adds(&c->out, "\n</tool_response>");
    if (i + 1 == c->n || c->m[i + 1].role != ROLE_TOOL)
        ut_buf_adds(&c->out, "<|im_end|>\n");
}

static void render(struct ctx *c)
{
    const struct eng_chat_params *p = c->p;
    ut_buf_adds(&c->out, p->bos_token ? p->bos_token : "");

    if (eng__py_truthy(p->tools)) {
        render_system_with_tools(c);
    } else if (c->m[0].role == ROLE_SYSTEM) {
        if (!c->m[0].is_str) { /* '...' + content raises on None and undefined */
            fail(c, "the first system message's content must be a string", "messages[0].content");
            return;
        }
        ut_buf_adds(&c->out, "<|im_start|>system\n");
        add(&c->out, c->m[0].text);
        ut_buf_adds(&c->out, "<|im_end|>\n");
    }

    /* (The template's reverse loop computes ns.last_query_index, which the 2B
     * template never uses, and cannot raise: nothing to do.) */
    for (size_t i = 0; i < c->n && !c->failed; i++) {
        const struct msg *m = &c->m[i];
        switch (m->role) {
        case ROLE_SYSTEM:
            if (i == 0)
                break; /* already printed above */
            /* fall through */
        case ROLE_USER:
            ut_buf_adds(&c->out, "<|im_start|>");
            ut_buf_adds(&c->out, role_names[m->role]);
            ut_buf_addc(&c->out, '\n');
            if (m->is_str)
                add(&c->out, m->text);
            ut_buf_adds(&c->out, "<|im_end|>\n");
            break;
        case ROLE_ASSISTANT:
            render_assistant(c, i);
            break;
        case ROLE_TOOL:
            render_tool(c, i);
            break;
        }
    }

    if (p->add_generation_prompt && !p->continue_final) {
        ut_buf_adds(&c->out, "<|im_start|>assistant\n");
        if (p->thinking == ENG_THINKING_OFF)
            ut_buf_adds(&c->out, "<think>\n\n</think>\n\n");
        else if (p->thinking == ENG_THINKING_ON)
            ut_buf_adds(&c->out, "<think>\n");
    }
}

/* continue_final_message, as transformers' apply_chat_template: the render cut
 * right after the last occurrence of the final message's stripped content. */
static void cut_after_final(struct ctx *c)
{
    const struct msg *m = &c->m[c->n - 1];
    if (m->role != ROLE_ASSISTANT) {
        fail(c, "continue_final_message: the last message is not an assistant message",
             "messages[%zu].role", c->n - 1);
        return;
    }
    if (!m->is_str) {
        fail(c, "continue_final_message: the last message has no text content",
             "messages[%zu].content", c->n - 1);
        return;
    }
    struct str want = str_py_strip(m->text);
    const char *at = str_rfind((struct str){c->out.p, c->out.n}, want);
    if (!at) {
        fail(c, "continue_final_message: the final message's content does not appear in the "
                "rendered prompt (the template moved part of it)",
             "messages[%zu].content", c->n - 1);
        return;
    }
    c->out.n = (size_t)(at - c->out.p) + want.n;
    c->out.p[c->out.n] = '\0';
}

bool eng_chat_continues(const json_t *messages, bool add_generation_prompt)
{
    const json_t *m = json_array_get(messages, json_array_size(messages) - 1);
    if (!add_generation_prompt || !json_is_object(m) ||
        !json_is_string(json_object_get(m, "role")) ||
        strcmp(json_string_value(json_object_get(m, "role")), "assistant") != 0 ||
        json_array_size(json_object_get(m, "tool_calls")) > 0)
        return false;
    const json_t *content = json_object_get(m, "content");
    bool blank = true;
    if (json_is_string(content)) {
        struct str s = str_of(content);
        if (str_find(s, STR_LIT("</think>")))
            return false;
        blank = str_py_strip(s).n == 0;
    } else if (json_is_array(content)) {
        /* text parts, joined with nothing between them */
        size_t i;
        const json_t *part;
        json_array_foreach(content, i, part) {
            struct str s = str_of(json_object_get(part, "text"));
            if (str_find(s, STR_LIT("</think>")))
                return false;
            blank = blank && str_py_strip(s).n == 0;
        }
    }
    return !blank;
}

char *eng_chat_render(const struct eng_chat_params *p, char *err, size_t errlen, char *param,
                      size_t paramlen)
{
    struct ctx c = {.p = p, .err = err, .errlen = errlen, .param = param, .paramlen = paramlen};
    if (err && errlen)
        err[0] = '\0';
    if (param && paramlen)
        param[0] = '\0';

    map_messages(&c);
    if (!c.failed)
        render(&c);
    if (!c.failed && !c.out.oom && p->continue_final && c.n > 0)
        cut_after_final(&c);
    if (!c.failed && c.out.oom)
        fail_oom(&c);
    /* Jinja2 would print a NUL; a C string prompt cannot carry one. */
    if (!c.failed && strlen(c.out.p) != c.out.n)
        fail(&c, "a string in the request contains a NUL character", NULL);
    unmap_messages(&c);
    if (c.failed) {
        ut_buf_free(&c.out);
        errno = c.oom ? ENOMEM : EINVAL;
        return NULL;
    }
    return c.out.p;
}

int eng_chat_params_from_request(const json_t *request, struct eng_chat_params *p, char *err,
                                 size_t errlen, char *param, size_t paramlen)
{
    struct ctx c = {.err = err, .errlen = errlen, .param = param, .paramlen = paramlen};
    *p = (struct eng_chat_params){.add_generation_prompt = true, .bos_token = "<s>",
                                  .eos_token = "</s>"};
    if (!json_is_object(request)) {
        fail(&c, "the request must be a JSON object", NULL);
        return -EINVAL;
    }
    p->messages = json_object_get(request, "messages");
    p->tools = json_object_get(request, "tools");
    const json_t *agp = json_object_get(request, "add_generation_prompt");
    if (agp && !json_is_boolean(agp)) {
        fail(&c, "add_generation_prompt must be a boolean", "add_generation_prompt");
        return -EINVAL;
    }
    if (agp)
        p->add_generation_prompt = json_is_true(agp);
    const json_t *cont = json_object_get(request, "continue_final_message");
    if (cont && !json_is_null(cont) && !json_is_boolean(cont)) {
        fail(&c, "continue_final_message must be a boolean", "continue_final_message");
        return -EINVAL;
    }
    p->continue_final = json_is_boolean(cont)
                            ? json_is_true(cont)
                            : eng_chat_continues(p->messages, p->add_generation_prompt);
    /* `enable_thinking is true` / `is false` are identity tests in Jinja2: any other
     * value, null included, renders as if it were not given. */
    const json_t *et = json_object_get(json_object_get(request, "chat_template_kwargs"),
                                       "enable_thinking");
    p->thinking = json_is_true(et) ? ENG_THINKING_ON
                  : json_is_false(et) ? ENG_THINKING_OFF
                                      : ENG_THINKING_UNSET;
    if (err && errlen)
        err[0] = '\0';
    if (param && paramlen)
        param[0] = '\0';
    return 0;
}
