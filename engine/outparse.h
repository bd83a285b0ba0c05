/* outparse — splits MiniCPM5's generated text, as it streams, into reasoning
 * (inside <think>…</think>), content, and tool calls in MiniCPM5's XML format
 * (<function name="…"><param name="…">value or CDATA</param></function>).
 *
 * Incremental: fed text pieces, it emits deltas as soon as they are certain. It
 * holds back only a run of whitespace (it may be dropped), a "<" that may open a tag
 * it acts on, and a tool call until it is complete. The concatenated deltas of each
 * kind, and the list of tool calls, are the same for every way of cutting the same
 * output into pieces, down to single bytes. Every delta text is valid UTF-8 and
 * whole characters: invalid input bytes, and NUL, become U+FFFD.
 *
 * What it does with the model's text:
 *  - reasoning: "<think>" at the start of the output (after whitespace), or the
 *    whole start when `in_think`, up to "</think>". Its leading and trailing
 *    whitespace is dropped, and so is the whitespace after "</think>" (the template
 *    writes "<think>\n…\n</think>\n\n"; llama.cpp trims it too). An unclosed
 *    reasoning block stays reasoning to the end. "<think>" later in the output and a
 *    "</think>" outside reasoning are content, verbatim. Tool-call markup inside
 *    reasoning is reasoning text.
 *  - tool calls, only when `tools` is a non-empty array (no tools: the markup is
 *    content, as in llama.cpp): <function name="N"> (<param name="K">V</param>)*
 *    </function>, with up to 64 whitespace characters allowed between the pieces
 *    and around "=" and ">". Names are 1..256 bytes without '"', '<', '>' or control
 *    characters. V is plain text up to the first "</param>", or <![CDATA[…]]> (after
 *    optional whitespace) ending at the first "]]>" that "</param>" follows — the
 *    template does not escape "]]>" inside values. No entity decoding. Calls to
 *    functions not in `tools` are still calls. Whitespace before, between and after
 *    calls is dropped; text after a call is content.
 *  - argument values: a parameter whose schema type (tools[i].function.parameters.
 *    properties[K].type, a name or a list, else the types in anyOf/oneOf) allows a
 *    non-string type is parsed as JSON and kept when the result is of an allowed
 *    type; Python's True/False/None (which the template prints for past calls) count
 *    as true/false/null. Anything else is a string: "string" schemas always, and
 *    values that do not parse or do not match. Without a schema (unknown function
 *    or parameter, no "type"), plain values that parse as a non-string JSON value
 *    (or True/False/None) are typed, CDATA values are strings. Typed values keep
 *    their text (numbers are not reformatted) minus whitespace.
 *  - arguments: one compact JSON object string, keys in the order they were
 *    written; a repeated key keeps its first place and its last value.
 *  - malformed markup degrades to content: the '<' that opened it is content and
 *    scanning resumes after it, so the raw text reaches the client and a
 *    well-formed call later on is still found.
 *  - a call the output cuts (max_tokens, a stop string, the end of the output
 *    inside it) is never content: with its name written it is one more TOOL_CALL
 *    delta with `cut` set and the arguments as far as they got, a JSON text left
 *    open ({"a":1,"b":"tex), as OpenAI's API hands out a call that max_tokens
 *    cut; before its name is complete (or in its first tag) it is dropped, and so
 *    is a "<think>" or "</think>" the end cuts.
 */
#ifndef MINICPMD_ENGINE_OUTPARSE_H
#define MINICPMD_ENGINE_OUTPARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct eng_outparse eng_outparse;

enum eng_delta_kind {
    ENG_DELTA_CONTENT = 0,       /* text for message.content */
    ENG_DELTA_REASONING,         /* text for message.reasoning_content */
    ENG_DELTA_TOOL_CALL,         /* one complete tool call */
};

struct eng_delta {
    enum eng_delta_kind kind;
    char *text;                  /* CONTENT / REASONING: UTF-8 text, never empty; else NULL */
    /* TOOL_CALL: */
    int index;                   /* 0, 1, … in order of appearance */
    char *name;                  /* function name */
    char *arguments;             /* JSON object as a string, e.g. {"city":"Paris"} */
    bool cut;                    /* the output ended inside the call: `arguments` is the
                                    JSON text so far, not closed (the last delta) */
};

/* Deltas are appended; one feed/finish call merges consecutive text of one kind into
 * one delta. The list owns the strings. */
struct eng_delta_list {
    struct eng_delta *items;
    size_t n, cap;
};

/* Frees the items' strings and the array; the list is empty and reusable after. */
void eng_delta_list_clear(struct eng_delta_list *l);

/* `tools`: the request's tools array (for recognising calls and JSON-typing
 * parameters per their schema), or NULL / empty to treat tool-call markup as
 * content (no tools, or tool_choice "none"). Borrowed: it must outlive the parser.
 * `in_think`: the prompt already opened "<think>" (enable_thinking true), so output
 * starts inside reasoning. Returns NULL on allocation failure. Any thread, one at a
 * time per parser. */
eng_outparse *eng_outparse_new(const json_t *tools, bool in_think);
void eng_outparse_free(eng_outparse *p);   /* accepts NULL */

/* Feed `len` bytes (any split, even inside a UTF-8 character); appends certain
 * deltas to `out`. Returns 0 or -ENOMEM; after -ENOMEM only _free is useful.
 * Feeding after _finish does nothing. */
int eng_outparse_feed(eng_outparse *p, const char *text, size_t len, struct eng_delta_list *out);
/* End of output: flush what was held back (an unfinished tag or call becomes
 * content). Call once. Returns 0 or -ENOMEM. */
int eng_outparse_finish(eng_outparse *p, struct eng_delta_list *out);

/* Whether any complete tool call was emitted (finish_reason "tool_calls"). */
bool eng_outparse_saw_tool_call(const eng_outparse *p);

#endif
