/* JSON bodies of `tutti serve`'s responses (OpenAI's shapes) and SSE chunks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/format.h"

char *srv_utf8_clean(const char *s, size_t n) {
    char *o = malloc(n * 3 + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n && c != 0;
        for (size_t j = 1; ok && j < len; j++) ok = ((unsigned char)s[i + j] & 0xC0) == 0x80;
        if (ok && len > 1) {
            /* overlong forms, surrogates and code points past U+10FFFF */
            uint32_t cp = c & (0x7F >> len);
            for (size_t j = 1; j < len; j++) cp = (cp << 6) | ((unsigned char)s[i + j] & 0x3F);
            ok = !((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                   (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF);
        }
        if (ok) {
            memcpy(o + k, s + i, len);
            k += len, i += len;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3); /* U+FFFD */
            k += 3, i += 1;
        }
    }
    o[k] = 0;
    return o;
}

static const char *type_of(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429:
    case 503: return "server_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

char *srv_error_json(int status, const char *message, const char *param, const char *code) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    char *m = srv_utf8_clean(message, strlen(message));
    cJSON_AddStringToObject(e, "message", m ? m : "error");
    free(m);
    cJSON_AddStringToObject(e, "type", type_of(status));
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static cJSON *base_object(const srv_job *j, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object",
                            j->req.kind == SRV_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                    : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model_name);
    cJSON_AddStringToObject(o, "system_fingerprint", "tutti");
    return o;
}

static cJSON *usage(const srv_job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)j->n_units);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_prompt + j->n_units));
    /* tutti's own: the unit of completion_tokens (bytes in byte and span
     * alignment), the time spent generating, and per member the prompt's tokens and how many of them
     * ran through the forward pass (the rest came from the slot's KV cache) */
    cJSON *t = cJSON_AddObjectToObject(u, "tutti");
    cJSON_AddStringToObject(t, "unit", j->unit);
    cJSON_AddNumberToObject(t, "generation_seconds", j->t_gen_s);
    cJSON *pt = cJSON_AddArrayToObject(t, "prompt_tokens");
    cJSON *pe = cJSON_AddArrayToObject(t, "prompt_tokens_evaluated");
    if (j->pipe_steps) cJSON_AddItemToObject(t, "steps", cJSON_Parse(j->pipe_steps)); /* a pipeline's */
    for (int i = 0; i < j->spec.n; i++) {
        int64_t n = 0;
        for (int p = 0; p < j->n_prompts; p++) n += j->n_ids[p][i];
        cJSON_AddItemToArray(pt, cJSON_CreateNumber((double)n));
        cJSON_AddItemToArray(pe, cJSON_CreateNumber((double)j->prompt_eval[i]));
    }
    return u;
}

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* The logprobs of choice c's entries [from, to), or null (none asked, or
 * none in this chunk of a stream; a whole answer has its lists, empty for
 * an empty text, as OpenAI's). */
static cJSON *logprobs_json(const srv_job *j, int c, size_t from, size_t to, size_t text_len, bool whole) {
    if (j->req.logprobs < 0 || (from >= to && !whole)) return cJSON_CreateNull();
    cJSON *o = srv_lp_json(&j->lp[c], from, to, text_len, j->req.kind == SRV_CHAT);
    return o ? o : cJSON_CreateNull();
}

char *srv_chunk_json(srv_job *j, int choice, const char *text, size_t n, const char *finish, bool role, size_t lp_to) {
    cJSON *o = base_object(j, true);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c);
    cJSON_AddNumberToObject(c, "index", choice);
    char *t = text ? srv_utf8_clean(text, n) : NULL;
    if (j->req.kind == SRV_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (t) cJSON_AddStringToObject(d, "content", t);
    } else {
        cJSON_AddStringToObject(c, "text", t ? t : "");
    }
    free(t);
    srv_lp *lp = &j->lp[choice];
    cJSON_AddItemToObject(c, "logprobs", logprobs_json(j, choice, lp->sent, lp_to, lp->emitted, false));
    if (j->req.shares && lp_to > lp->sent)
        cJSON_AddItemToObject(cJSON_AddObjectToObject(c, "tutti"), "shares",
                              srv_lp_shares_json(lp, lp->sent, lp_to, lp->emitted));
    if (lp_to > lp->sent) lp->sent = lp_to;
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return print_free(o);
}

/* OpenAI's tool_calls array from the job's JSON text; with index (deltas) */
static cJSON *tool_calls(const char *json, bool index) {
    cJSON *a = cJSON_Parse(json ? json : "[]"), *it;
    int i = 0;
    if (index) cJSON_ArrayForEach(it, a) cJSON_AddItemToObject(it, "index", cJSON_CreateNumber(i++));
    return a ? a : cJSON_CreateArray();
}

char *srv_tool_chunk_json(const srv_job *j, int c, bool role) {
    cJSON *o = base_object(j, true);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *x = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, x);
    cJSON_AddNumberToObject(x, "index", c);
    cJSON *d = cJSON_AddObjectToObject(x, "delta");
    if (role) cJSON_AddStringToObject(d, "role", "assistant");
    if (j->tool_content[c] && j->tool_content[c][0]) cJSON_AddStringToObject(d, "content", j->tool_content[c]);
    else cJSON_AddNullToObject(d, "content");
    cJSON_AddItemToObject(d, "tool_calls", tool_calls(j->tool_calls[c], true));
    cJSON_AddNullToObject(x, "logprobs");
    cJSON_AddNullToObject(x, "finish_reason");
    return print_free(o);
}

char *srv_usage_chunk_json(const srv_job *j) {
    cJSON *o = base_object(j, true);
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage(j));
    return print_free(o);
}

char *srv_final_json(const srv_job *j) {
    cJSON *o = base_object(j, false);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    for (int k = 0; k < j->n_prompts * j->req.n; k++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(ch, c);
        cJSON_AddNumberToObject(c, "index", k);
        char *t = srv_utf8_clean(j->text[k] ? j->text[k] : "", j->n_text[k]);
        if (j->req.kind == SRV_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            const char *tc = j->tool_content[k]; /* under tools: the text beside the calls, or the text answer */
            if (j->tool_calls[k] && !(tc && tc[0])) cJSON_AddNullToObject(m, "content");
            else cJSON_AddStringToObject(m, "content", j->tool_calls[k] || tc ? tc : t ? t : "");
            if (j->tool_calls[k]) cJSON_AddItemToObject(m, "tool_calls", tool_calls(j->tool_calls[k], false));
        } else {
            cJSON_AddStringToObject(c, "text", t ? t : "");
        }
        free(t);
        const srv_lp *lp = &j->lp[k];
        size_t to = srv_lp_ready(lp, j->n_text[k], true);
        cJSON_AddItemToObject(c, "logprobs", logprobs_json(j, k, 0, to, j->n_text[k], true));
        if (j->req.shares)
            cJSON_AddItemToObject(cJSON_AddObjectToObject(c, "tutti"), "shares",
                                  srv_lp_shares_json(lp, 0, to, j->n_text[k]));
        cJSON_AddStringToObject(c, "finish_reason", j->finish[k] ? j->finish[k] : "stop");
    }
    cJSON_AddItemToObject(o, "usage", usage(j));
    return print_free(o);
}
