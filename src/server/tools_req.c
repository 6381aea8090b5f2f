/* The tool fields of a chat request (OpenAI's function calling): "tools",
 * "tool_choice", "parallel_tool_calls", and the messages' "tool_calls",
 * "tool_call_id" and "name".  Pure (no model), part of the fuzzed request
 * parser (fuzz/fuzz_http.c); tools.c turns them into the template's
 * variables, the grammar and the answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/request.h"

static int fail(char *err, size_t cap, const char *msg, const char *arg) {
    snprintf(err, cap, msg, arg ? arg : "");
    return -1;
}

static const cJSON *get(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* a function name as OpenAI allows it: [a-zA-Z0-9_-.:]{1,64} */
static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.' || c == ':'))
            return false;
    }
    return true;
}

int srv_tools_parse(srv_tools *t, const cJSON *v, char *err, size_t cap) {
    if (!cJSON_IsArray(v))
        return fail(err, cap, "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}", NULL);
    if (cJSON_GetArraySize(v) > SRV_MAX_TOOLS) return fail(err, cap, "'tools': at most 128 tools", NULL);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        const cJSON *type = get(it, "type"), *fn = get(it, "function");
        if (!cJSON_IsObject(it) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsObject(fn))
            return fail(err, cap, "'tools': every tool must be {\"type\": \"function\", \"function\": {\"name\", ...}}",
                        NULL);
        const cJSON *name = get(fn, "name"), *params = get(fn, "parameters"), *desc = get(fn, "description");
        if (!cJSON_IsString(name) || !name_ok(name->valuestring))
            return fail(err, cap, "'tools': a function's 'name' must be 1 to 64 of a-z A-Z 0-9 _ - . :", NULL);
        if (desc && !cJSON_IsString(desc))
            return fail(err, cap, "'tools': '%s': 'description' must be a string", name->valuestring);
        if (params && !cJSON_IsObject(params))
            return fail(err, cap, "'tools': '%s': 'parameters' must be a JSON schema object", name->valuestring);
        for (int k = 0; k < t->n; k++)
            if (!strcmp(t->name[k], name->valuestring))
                return fail(err, cap, "'tools': the function '%s' is given twice", name->valuestring);
        int k = t->n++;
        t->name[k] = strdup(name->valuestring);
        /* no parameters: a call takes the empty object */
        t->params[k] = params && params->child ? cJSON_PrintUnformatted(params)
                                               : strdup("{\"type\": \"object\", \"properties\": {}}");
        if (!t->name[k] || !t->params[k]) return fail(err, cap, "out of memory", NULL);
    }
    if (!(t->json = cJSON_PrintUnformatted(v))) return fail(err, cap, "out of memory", NULL);
    return 0;
}

int srv_tool_choice_parse(srv_tools *t, const cJSON *v, char *err, size_t cap) {
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (!strcmp(s, "auto")) t->choice = SRV_TC_AUTO;
        else if (!strcmp(s, "none")) t->choice = SRV_TC_NONE;
        else if (!strcmp(s, "required")) t->choice = SRV_TC_REQUIRED;
        else
            return fail(err, cap,
                        "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}",
                        NULL);
        return 0;
    }
    const cJSON *fn = cJSON_IsObject(v) ? get(v, "function") : NULL, *name = fn ? get(fn, "name") : NULL;
    if (!cJSON_IsString(name))
        return fail(err, cap,
                    "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                    "\"function\": {\"name\": ...}}",
                    NULL);
    free(t->named);
    if (!(t->named = strdup(name->valuestring))) return fail(err, cap, "out of memory", NULL);
    t->choice = SRV_TC_NAMED;
    return 0;
}

/* One call of an assistant message in the template's form: arguments
 * given as a JSON string become the object it holds. */
static cJSON *template_call(const cJSON *c, int i, char *err, size_t cap) {
    const cJSON *fn = cJSON_IsObject(c) ? get(c, "function") : NULL, *name = fn ? get(fn, "name") : NULL;
    const cJSON *args = fn ? get(fn, "arguments") : NULL, *id = get(c, "id");
    char what[64];
    snprintf(what, sizeof what, "%d", i);
    if (!cJSON_IsString(name)) return fail(err, cap, "tool call %s: 'function.name' must be a string", what), NULL;
    if (id && !cJSON_IsString(id)) return fail(err, cap, "tool call %s: 'id' must be a string", what), NULL;
    cJSON *a = NULL;
    if (cJSON_IsString(args)) {
        a = cJSON_Parse(args->valuestring);
        if (!a) return fail(err, cap, "tool call %s: 'function.arguments' is not JSON", what), NULL;
    } else if (cJSON_IsObject(args)) {
        a = cJSON_Duplicate(args, true);
    } else if (!args) {
        a = cJSON_CreateObject();
    } else {
        return fail(err, cap, "tool call %s: 'function.arguments' must be a JSON string", what), NULL;
    }
    cJSON *o = cJSON_CreateObject(), *f = cJSON_CreateObject();
    if (id) cJSON_AddStringToObject(o, "id", id->valuestring);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON_AddItemToObject(f, "arguments", a);
    cJSON_AddItemToObject(o, "function", f);
    return o;
}

int srv_msg_tools_parse(srv_msg *m, const cJSON *msg, char *err, size_t cap) {
    const cJSON *calls = get(msg, "tool_calls"), *id = get(msg, "tool_call_id"), *name = get(msg, "name");
    if (!calls && !id && !name) return 0;
    if (calls && !cJSON_IsArray(calls)) return fail(err, cap, "'tool_calls' must be an array", NULL);
    if (id && !cJSON_IsString(id)) return fail(err, cap, "'tool_call_id' must be a string", NULL);
    if (name && !cJSON_IsString(name)) return fail(err, cap, "'name' must be a string", NULL);
    cJSON *o = cJSON_CreateObject();
    int rc = 0;
    if (calls && cJSON_GetArraySize(calls) > 0) {
        cJSON *a = cJSON_AddArrayToObject(o, "tool_calls");
        const cJSON *c;
        int i = 0;
        cJSON_ArrayForEach(c, calls) {
            cJSON *tc = template_call(c, i++, err, cap);
            if (!tc) {
                rc = -1;
                break;
            }
            cJSON_AddItemToArray(a, tc);
        }
    }
    if (id) cJSON_AddStringToObject(o, "tool_call_id", id->valuestring);
    if (name) cJSON_AddStringToObject(o, "name", name->valuestring);
    if (!rc && !(m->tool_json = cJSON_PrintUnformatted(o))) rc = fail(err, cap, "out of memory", NULL);
    cJSON_Delete(o);
    return rc;
}

int srv_tools_check(const srv_request *r, char *err, size_t cap, const char **param) {
    const srv_tools *t = &r->tools;
    *param = "tool_choice";
    if ((t->choice == SRV_TC_REQUIRED || t->choice == SRV_TC_NAMED) && !t->n)
        return fail(err, cap, "'tool_choice' asks for a tool call but 'tools' gives no tools", NULL);
    if (t->choice == SRV_TC_NAMED) {
        bool found = false;
        for (int k = 0; k < t->n; k++) found |= !strcmp(t->name[k], t->named);
        if (!found)
            return fail(err, cap, "'tool_choice' names the function '%s', which 'tools' does not give", t->named);
    }
    if (t->n && t->choice != SRV_TC_NONE && r->grammar) {
        *param = r->grammar_field;
        return fail(err, cap,
                    "tools constrain the answer with their own grammar: leave out '%s' or set tool_choice "
                    "\"none\"",
                    r->grammar_field);
    }
    *param = NULL;
    return 0;
}

void srv_tools_free(srv_tools *t) {
    for (int k = 0; k < t->n; k++) free(t->name[k]), free(t->params[k]);
    free(t->json);
    free(t->named);
    memset(t, 0, sizeof *t);
}
