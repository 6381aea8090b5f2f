/* Tool calling (OpenAI's chat "tools"), the model side: which format the
 * chat template speaks, the template's variables (messages with their tool
 * fields, tools), the grammar that makes a call parse and match its
 * function's JSON schema, and the calls read back from the generated text
 * in OpenAI's shape.
 *
 * Formats, from member 1's chat template (as llama.cpp's chat parsers):
 *   hermes   (the template writes "<tool_call>": Qwen2.5/3, Hermes)
 *            <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, one per call
 *   llama3   ("<|python_tag|>" or "Environment: ipython": Llama 3.1-3.3)
 *            {"name": N, "parameters": {...}}, one call
 *   mistral  ("[TOOL_CALLS]")  [{"name": N, "arguments": {...}}, ...]
 *            (the [TOOL_CALLS] control token itself is not generated)
 *   generic  (any other template: the tools are described in a system
 *            message)  {"tool_calls": [{"name": N, "arguments": {...}}]}, or
 *            with tool_choice "auto" {"response": "text"}
 * tool_choice "required" or a named function: the grammar admits calls
 * only (of that function); "auto": calls or text that does not start as a
 * call does (hermes: not with '<', llama3: not with '{', mistral: not with
 * '['), so a call that begins always completes and parses; "none": no tools
 * in the prompt, no grammar. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "server/tools.h"

int srv_tools_format(const char *tmpl) {
    if (!tmpl) return SRV_TF_GENERIC;
    if (strstr(tmpl, "<tool_call>")) return SRV_TF_HERMES;
    if (strstr(tmpl, "[TOOL_CALLS]")) return SRV_TF_MISTRAL;
    if (strstr(tmpl, "<|python_tag|>") || strstr(tmpl, "Environment: ipython")) return SRV_TF_LLAMA3;
    return SRV_TF_GENERIC;
}

const char *srv_tools_format_name(int fmt) {
    static const char *const n[] = {"hermes", "llama3", "mistral", "generic"};
    return fmt >= 0 && fmt <= SRV_TF_GENERIC ? n[fmt] : "?";
}

static bool active(const srv_tools *t) { return t->n > 0 && t->choice != SRV_TC_NONE; }

/* the system text of the generic format */
static char *generic_system(const srv_tools *t) {
    const char *head = "You can call these tools (their parameters are JSON schemas):\n";
    const char *tail =
        t->choice == SRV_TC_AUTO
            ? "\nAnswer with one JSON object: {\"tool_calls\": [{\"name\": TOOL, \"arguments\": {...}}]} "
              "to call tools, or {\"response\": TEXT} to answer the user directly."
            : "\nAnswer with one JSON object: {\"tool_calls\": [{\"name\": TOOL, \"arguments\": {...}}]}.";
    size_t n = strlen(head) + strlen(t->json) + strlen(tail) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s%s", head, t->json, tail);
    return s;
}

char *srv_tools_ctx_json(const srv_request *r, int fmt) {
    const srv_tools *t = &r->tools;
    cJSON *o = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(o, "messages");
    bool generic = fmt == SRV_TF_GENERIC && active(t);
    char *sys = generic ? generic_system(t) : NULL;
    if (generic && !sys) return cJSON_Delete(o), NULL;
    if (sys && !(r->n_msgs > 0 && !strcmp(r->msgs[0].role, "system"))) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", sys);
        cJSON_AddItemToArray(msgs, m);
    }
    for (int i = 0; i < r->n_msgs; i++) {
        const srv_msg *sm = &r->msgs[i];
        cJSON *m = sm->tool_json ? cJSON_Parse(sm->tool_json) : cJSON_CreateObject();
        if (!m) m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", sm->role);
        const char *content = sm->content ? sm->content : "";
        char *joined = NULL;
        if (i == 0 && sys && !strcmp(sm->role, "system")) {
            size_t n = strlen(content) + strlen(sys) + 3;
            if ((joined = malloc(n))) snprintf(joined, n, "%s\n\n%s", content, sys);
        }
        cJSON_AddStringToObject(m, "content", joined ? joined : content);
        free(joined);
        cJSON_AddItemToArray(msgs, m);
    }
    free(sys);
    if (active(t) && fmt != SRV_TF_GENERIC) cJSON_AddItemToObject(o, "tools", cJSON_Parse(t->json));
    cJSON_AddTrueToObject(o, "add_generation_prompt");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

bool srv_tools_in_chat(const srv_request *r) {
    if (active(&r->tools)) return true;
    for (int i = 0; i < r->n_msgs; i++)
        if (r->msgs[i].tool_json) return true;
    return false;
}

/* ---- the grammar ---- */

/* the JSON schema of one call of tool k: {"name": const, ARGS: params} */
static cJSON *call_schema(const srv_tools *t, int k, int fmt) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "object");
    cJSON *p = cJSON_AddObjectToObject(s, "properties");
    cJSON *nm = cJSON_AddObjectToObject(p, "name");
    cJSON_AddStringToObject(nm, "const", t->name[k]);
    cJSON *params = cJSON_Parse(t->params[k]);
    /* JSON Schema admits properties a schema does not name; a call takes
     * only the ones its tool declares (as llama.cpp's tool grammars and
     * OpenAI's strict mode), unless the tool says otherwise: a small model
     * free to invent keys keeps inventing them */
    if (cJSON_IsObject(params) && !cJSON_HasObjectItem(params, "additionalProperties"))
        cJSON_AddFalseToObject(params, "additionalProperties");
    cJSON_AddItemToObject(p, fmt == SRV_TF_LLAMA3 ? "parameters" : "arguments", params ? params : cJSON_CreateObject());
    cJSON *req = cJSON_AddArrayToObject(s, "required");
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString(fmt == SRV_TF_LLAMA3 ? "parameters" : "arguments"));
    cJSON_AddFalseToObject(s, "additionalProperties"); /* {"name", ARGS} and nothing else */
    return s;
}

/* GBNF of one call: the converter's grammar with its root renamed */
static char *call_gbnf(const srv_tools *t, int fmt, char *err, size_t cap) {
    cJSON *sch;
    int only = -1;
    if (t->choice == SRV_TC_NAMED)
        for (int k = 0; k < t->n; k++)
            if (!strcmp(t->name[k], t->named)) only = k;
    if (only >= 0 || t->n == 1) {
        sch = call_schema(t, only >= 0 ? only : 0, fmt);
    } else {
        sch = cJSON_CreateObject();
        cJSON *any = cJSON_AddArrayToObject(sch, "anyOf");
        for (int k = 0; k < t->n; k++) cJSON_AddItemToArray(any, call_schema(t, k, fmt));
    }
    char *js = cJSON_PrintUnformatted(sch);
    cJSON_Delete(sch);
    char *g = js ? tutti_json_schema_to_gbnf(js, strlen(js)) : NULL;
    free(js);
    if (!g) {
        snprintf(err, cap, "tools: a function's 'parameters' cannot constrain the call: %s", tutti_last_error());
        return NULL;
    }
    /* the converter's first line is "root ::= ..." and no rule refers to root */
    const char *rest = strncmp(g, "root ::=", 8) ? NULL : g + 8;
    size_t n = rest ? strlen(rest) + 32 : 0;
    char *out = rest ? malloc(n) : NULL;
    if (out) snprintf(out, n, "tutti-call ::=%s", rest);
    else snprintf(err, cap, "tools: out of memory");
    free(g);
    return out;
}

tutti_grammar *srv_tools_grammar(const srv_tools *t, int fmt, char *err, size_t cap) {
    char *call = call_gbnf(t, fmt, err, cap);
    if (!call) return NULL;
    const bool many = t->parallel, aut = t->choice == SRV_TC_AUTO;
    char head[2048];
    const char *ws = "tutti-ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
    const char *str =
        "tutti-str ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n";
    switch (fmt) {
    case SRV_TF_HERMES:
        snprintf(head, sizeof head,
                 "root ::= tutti-calls%s\ntutti-calls ::= tutti-tc%s\n"
                 "tutti-tc ::= \"<tool_call>\\n\" tutti-call \"\\n</tool_call>\"\n%s",
                 aut ? " | tutti-plain" : "", many ? " ( \"\\n\" tutti-tc )*" : "",
                 aut ? "tutti-plain ::= ( [^<] .* )?\n" : "");
        break;
    case SRV_TF_LLAMA3:
        snprintf(head, sizeof head, "root ::= tutti-call%s\n%s", aut ? " | tutti-plain" : "",
                 aut ? "tutti-plain ::= ( [^{] .* )?\n" : "");
        break;
    case SRV_TF_MISTRAL:
        snprintf(head, sizeof head, "root ::= \"[\" tutti-call %s\"]\"%s\n%s%s",
                 many ? "( \",\" tutti-ws tutti-call )* " : "", aut ? " | tutti-plain" : "",
                 aut ? "tutti-plain ::= ( [^[] .* )?\n" : "", ws);
        break;
    default:
        snprintf(head, sizeof head,
                 "root ::= \"{\" tutti-ws \"\\\"tool_calls\\\"\" tutti-ws \":\" tutti-ws \"[\" tutti-ws tutti-call "
                 "%stutti-ws \"]\" tutti-ws \"}\"%s\n%s%s",
                 many ? "( \",\" tutti-ws tutti-call )* " : "",
                 aut ? " | \"{\" tutti-ws \"\\\"response\\\"\" tutti-ws \":\" tutti-ws tutti-str tutti-ws \"}\"" : "",
                 ws, aut ? str : "");
    }
    size_t n = strlen(head) + strlen(call) + 1;
    char *g = malloc(n);
    tutti_grammar *gr = NULL;
    if (g) {
        snprintf(g, n, "%s%s", head, call);
        gr = tutti_grammar_parse(g, strlen(g));
        if (!gr) snprintf(err, cap, "tools: %s", tutti_last_error());
    } else {
        snprintf(err, cap, "tools: out of memory");
    }
    free(g), free(call);
    return gr;
}

/* ---- the answer ---- */

bool srv_tools_is_text(int fmt, const char *text, size_t n) {
    static const char first[] = {'<', '{', '['}; /* hermes, llama3, mistral; generic: always JSON */
    return n > 0 && fmt >= 0 && fmt < SRV_TF_GENERIC && text[0] != first[fmt];
}

/* a call id: 9 letters and digits (Mistral's templates ask for exactly that) */
static void call_id(char out[10]) {
    static unsigned long long ctr;
    unsigned long long x = (unsigned long long)time(NULL) * 0x9E3779B97F4A7C15ull ^
                           __atomic_add_fetch(&ctr, 1, __ATOMIC_RELAXED) * 0xBF58476D1CE4E5B9ull;
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for (int i = 0; i < 9; i++) {
        x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
        out[i] = a[x % 62];
    }
    out[9] = 0;
}

/* one parsed call {name, arguments|parameters} of a given tool -> OpenAI's */
static bool add_call(cJSON *calls, const cJSON *c, const srv_tools *t) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(c, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(c, "parameters");
    if (!cJSON_IsObject(c) || !cJSON_IsString(name) || !cJSON_IsObject(args)) return false;
    bool known = false;
    for (int k = 0; k < t->n; k++) known |= !strcmp(t->name[k], name->valuestring);
    if (!known) return false;
    char id[10];
    call_id(id);
    char *a = cJSON_PrintUnformatted(args);
    if (!a) return false;
    cJSON *o = cJSON_CreateObject(), *f = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON_AddStringToObject(f, "arguments", a);
    free(a);
    cJSON_AddItemToObject(o, "function", f);
    cJSON_AddItemToArray(calls, o);
    return true;
}

static char *trimmed(const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    char *o = malloc(n + 1);
    if (o) memcpy(o, s, n), o[n] = 0;
    return o;
}

/* hermes: every <tool_call> block; the text outside them is the content
 * (a last block that max_tokens cut off is dropped) */
static bool read_hermes(const char *s, const srv_tools *t, cJSON *calls, char **content) {
    const char *open = "<tool_call>", *close = "</tool_call>";
    size_t n = strlen(s), k = 0;
    char *rest = malloc(n + 1);
    if (!rest) return false;
    const char *p = s;
    bool ok = true;
    for (const char *q; ok && (q = strstr(p, open));) {
        memcpy(rest + k, p, (size_t)(q - p)), k += (size_t)(q - p);
        const char *b = q + strlen(open), *e = strstr(b, close);
        if (!e) { /* cut by max_tokens: the calls before it stand */
            ok = cJSON_GetArraySize(calls) > 0;
            p = q + strlen(q);
            break;
        }
        char *body = trimmed(b, (size_t)(e - b));
        cJSON *c = body ? cJSON_Parse(body) : NULL;
        ok = c && add_call(calls, c, t);
        cJSON_Delete(c), free(body);
        p = e + strlen(close);
    }
    if (ok) {
        size_t tail = strlen(p);
        memcpy(rest + k, p, tail), k += tail;
        *content = trimmed(rest, k);
    }
    free(rest);
    return ok && cJSON_GetArraySize(calls) > 0;
}

int srv_tools_answer(const char *text, size_t n, int fmt, const srv_tools *t, char **calls_json, char **content) {
    *calls_json = NULL, *content = NULL;
    char *s = trimmed(text, n);
    if (!s) return -1;
    cJSON *calls = cJSON_CreateArray();
    bool ok = false;
    if (fmt == SRV_TF_HERMES) {
        ok = read_hermes(s, t, calls, content);
    } else {
        const char *p = s;
        if (fmt == SRV_TF_LLAMA3 && !strncmp(p, "<|python_tag|>", 14)) p += 14;
        if (fmt == SRV_TF_MISTRAL && !strncmp(p, "[TOOL_CALLS]", 12)) p += 12;
        cJSON *v = cJSON_Parse(p);
        if (fmt == SRV_TF_LLAMA3) {
            ok = v && add_call(calls, v, t);
        } else if (fmt == SRV_TF_MISTRAL) {
            const cJSON *c;
            ok = cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0;
            cJSON_ArrayForEach(c, v) ok = ok && add_call(calls, c, t);
        } else {
            const cJSON *tc = cJSON_GetObjectItemCaseSensitive(v, "tool_calls"), *one, *c;
            const cJSON *resp = cJSON_GetObjectItemCaseSensitive(v, "response");
            if ((one = cJSON_GetObjectItemCaseSensitive(v, "tool_call"))) ok = add_call(calls, one, t);
            else if (cJSON_IsArray(tc) && cJSON_GetArraySize(tc) > 0) {
                ok = true;
                cJSON_ArrayForEach(c, tc) ok = ok && add_call(calls, c, t);
            } else if (cJSON_IsString(resp)) {
                *content = strdup(resp->valuestring); /* the generic format's text answer */
            }
        }
        cJSON_Delete(v);
    }
    if (ok) *calls_json = cJSON_PrintUnformatted(calls);
    else if (!*content) *content = s, s = NULL;
    if (ok && fmt != SRV_TF_HERMES) free(*content), *content = NULL;
    cJSON_Delete(calls);
    free(s);
    return ok ? 1 : 0;
}
