/* JSON schema -> GBNF: the public entry points (include/tutti.h).
 *
 * The schema text is parsed with cJSON (number literals kept as written:
 * bounds and const numbers are compared exactly, js_number.h), made into
 * the node graph of js_ir.h (js_ir.c: keywords, js_ops.c: allOf / anyOf /
 * oneOf / $ref, js_not.c: not), and written as GBNF (js_emit.c).  What the
 * grammar accepts is valid against the schema (checked with
 * python-jsonschema in tests/test_grammar_schema.c); a keyword that
 * constrains and cannot be enforced exactly is an error naming its schema
 * path, or with params->lenient a warning (the grammar then admits more). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/js_ir.h"
#include "util/error.h"

#define JS_BUDGET 400000 /* nodes and rules of one schema */

/* cJSON keeps numbers as doubles; the literals as written go into
 * valuestring (freed and copied by cJSON with the item) so that
 * 9007199254740993 or 0.1 are compared as the validator reads them. */
static size_t next_number(const char *s, size_t n, size_t at, size_t *len) {
    for (size_t i = at; i < n; i++) {
        char ch = s[i];
        if (ch == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
            continue;
        }
        if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t j = i + 1;
            while (j < n && (strchr("0123456789.eE+-", s[j]) != NULL)) j++;
            *len = j - i;
            return i;
        }
    }
    return n;
}

static void keep_literals(cJSON *v, const char *s, size_t n, size_t *at) {
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            size_t len = 0, i = next_number(s, n, *at, &len);
            if (i >= n) return;
            v->valuestring = malloc(len + 1);
            if (v->valuestring) memcpy(v->valuestring, s + i, len), v->valuestring[len] = 0;
            *at = i + len;
        }
        if (v->child) keep_literals(v->child, s, n, at);
    }
}

tutti_json_schema_params tutti_json_schema_default_params(void) {
    tutti_json_schema_params p = {0};
    return p;
}

char *tutti_json_schema_to_gbnf_params(const char *schema, size_t len, tutti_json_schema_params *params) {
    if (params) params->warnings = NULL;
    if (!schema) {
        tutti_set_error("json schema: no text");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(schema, len, &end, false);
    if (!root) {
        size_t off = end && end >= schema ? (size_t)(end - schema) : 0;
        int line = 1, col = 1;
        for (size_t i = 0; i < off && i < len; i++) {
            if (schema[i] == '\n') line++, col = 1;
            else col++;
        }
        tutti_set_error("json schema: not valid JSON near line %d, column %d", line, col);
        return NULL;
    }
    size_t at = 0;
    keep_literals(root, schema, len, &at);
    sbuf warn = {0}, out = {0};
    js_ctx c = {.root = root,
                .lenient = params && params->lenient,
                .all_spellings = params && params->all_spellings,
                .open_objects = params && params->open_objects,
                .warn = &warn,
                .budget = JS_BUDGET};
    char *res = NULL, top[128];
    c.any = js_base(&c, "", JT_ALL);
    c.nothing = js_base(&c, "", 0);
    js_node *r = js_of_schema(&c, root, "");
    if (r && !c.failed && js_is_empty(&c, r, 2) && !c.failed) {
        js_err(&c, "", "the schema admits no JSON value");
    } else if (r && !c.failed && js_emit(&c, r, "root-value", &out, top, sizeof top) == 0) {
        sbuf fin = {0};
        sb_printf(&fin, "root ::= space %s\n", top);
        sb_puts(&fin, out.s ? out.s : "");
        if (fin.oom) {
            free(fin.s);
            tutti_set_error("json schema: out of memory");
        } else {
            res = fin.s;
        }
    } else if (!c.failed) {
        tutti_set_error("json schema: out of memory");
    }
    if (params && warn.n) params->warnings = warn.s;
    else free(warn.s);
    js_ctx_free(&c);
    free(out.s);
    cJSON_Delete(root);
    return res;
}

char *tutti_json_schema_to_gbnf(const char *schema, size_t len) {
    return tutti_json_schema_to_gbnf_params(schema, len, NULL);
}

tutti_grammar *tutti_grammar_from_json_schema_params(const char *schema, size_t len, tutti_json_schema_params *params) {
    char *g = tutti_json_schema_to_gbnf_params(schema, len, params);
    if (!g) return NULL;
    tutti_grammar *gr = tutti_grammar_parse(g, strlen(g));
    if (!gr) tutti_error_prefix("json schema: the generated grammar");
    free(g);
    return gr;
}

tutti_grammar *tutti_grammar_from_json_schema(const char *schema, size_t len) {
    return tutti_grammar_from_json_schema_params(schema, len, NULL);
}

static const char k_json_gbnf[] =
    "# any JSON value (llama.cpp grammars/json.gbnf, with any value at the top)\n"
    "root   ::= ws value\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

const char *tutti_grammar_json_gbnf(void) { return k_json_gbnf; }

tutti_grammar *tutti_grammar_json(void) { return tutti_grammar_parse(k_json_gbnf, strlen(k_json_gbnf)); }
