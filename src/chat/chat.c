/* Public entry points of the chat-template engine: set up the variables,
 * run lexer -> parser -> evaluator under one error trap, hand back the text. */
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/jinja.h"
#include "util/error.h"

typedef void (*setup_fn)(jctx *c, struct jscope *s, const void *ud);

/* Renders; returns the malloc'd text (NUL-terminated, *len bytes) and, when
 * marks is not NULL, a malloc'd [*len] array: 1 for bytes of caller data. */
static char *render(const char *tmpl, size_t len, setup_fn setup, const void *ud, size_t *out_len, uint8_t **marks) {
    if (marks) *marks = NULL;
    if (!tmpl) return tutti_set_error("chat template: template is NULL"), NULL;
    jctx *c = calloc(1, sizeof *c);
    if (!c) return tutti_set_error("chat template: out of memory"), NULL;
    if (setjmp(c->jmp)) {
        tutti_set_error("chat template: %s", c->err);
        jarena_free(&c->arena);
        free(c);
        return NULL;
    }
    /* Jinja2's lexer turns every \r\n and lone \r of the template (its text
     * and its string literals) into \n; the variables are left alone */
    char *src = jalloc(c, len + 1);
    size_t n_src = 0;
    for (size_t i = 0; i < len; i++) {
        if (tmpl[i] == '\r') {
            src[n_src++] = '\n';
            if (i + 1 < len && tmpl[i + 1] == '\n') i++;
        } else {
            src[n_src++] = tmpl[i];
        }
    }
    c->src = src;
    jinja_lex(c, src, n_src);
    jnodes prog = jinja_parse(c);
    struct jscope *globals = jscope_new(c, NULL);
    c->globals = globals;
    setup(c, globals, ud);
    jinja_exec(c, &prog, globals);
    size_t n = c->out.n;
    char *out = malloc(n + 1);
    uint8_t *m = marks ? malloc(n ? n : 1) : NULL;
    if (out && (!marks || m)) {
        if (n) memcpy(out, c->out.p, n);
        out[n] = 0;
        if (m) {
            if (c->out.d && n) memcpy(m, c->out.d, n);
            else if (n) memset(m, 0, n);
            *marks = m;
        }
        if (out_len) *out_len = n;
    } else {
        free(out);
        free(m);
        out = NULL;
        tutti_set_error("chat template: out of memory for %zu bytes of output", n);
    }
    jarena_free(&c->arena);
    free(c);
    return out;
}

/* ---- tutti_chat_render -------------------------------------------------- */
typedef struct msg_setup {
    const tutti_chat_message *msgs;
    size_t n_msgs;
    bool add_generation_prompt;
    const char *bos, *eos;
} msg_setup;

static void setup_messages(jctx *c, struct jscope *s, const void *ud) {
    const msg_setup *m = ud;
    jv list = jv_list_new(c, m->n_msgs);
    for (size_t i = 0; i < m->n_msgs; i++) {
        if (!m->msgs[i].role) jctx_fail(c, 0, 0, "message %zu has no role (NULL)", i);
        jv d = jv_dict_new(c, JV_DICT);
        /* roles and contents are caller data: never template text */
        const char *role = m->msgs[i].role, *content = m->msgs[i].content;
        jdict_set(c, d.u.d, jstr_z("role"), jv_str(jstr_data(c, role, strlen(role))));
        jdict_set(c, d.u.d, jstr_z("content"), content ? jv_str(jstr_data(c, content, strlen(content))) : jv_none());
        jlist_push(c, list.u.l, d);
    }
    jscope_set(c, s, jstr_z("messages"), list);
    jscope_set(c, s, jstr_z("add_generation_prompt"), jv_bool(m->add_generation_prompt));
    if (m->bos) jscope_set(c, s, jstr_z("bos_token"), jv_strz(c, m->bos));
    if (m->eos) jscope_set(c, s, jstr_z("eos_token"), jv_strz(c, m->eos));
}

char *tutti_chat_render(const char *tmpl, const tutti_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                        const char *bos_token, const char *eos_token) {
    return tutti_chat_render_marked(tmpl, msgs, n_msgs, add_generation_prompt, bos_token, eos_token, NULL, NULL);
}

char *tutti_chat_render_marked(const char *tmpl, const tutti_chat_message *msgs, size_t n_msgs,
                               bool add_generation_prompt, const char *bos_token, const char *eos_token, size_t *len,
                               uint8_t **is_data) {
    if (is_data) *is_data = NULL;
    if (n_msgs && !msgs) return tutti_set_error("chat template: %zu messages but msgs is NULL", n_msgs), NULL;
    msg_setup m = {msgs, n_msgs, add_generation_prompt, bos_token, eos_token};
    return render(tmpl, tmpl ? strlen(tmpl) : 0, setup_messages, &m, len, is_data);
}

/* ---- JSON context --------------------------------------------------------- */
typedef struct jp {
    jctx *c;
    const char *s;
    size_t i, n;
    int depth;
} jp;

static _Noreturn void jp_fail(jp *p, const char *what) {
    jctx_fail(p->c, 0, 0, "context JSON, byte %zu: %s", p->i, what);
}

static void jp_ws(jp *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static bool jp_lit(jp *p, const char *w) {
    size_t n = strlen(w);
    if (p->n - p->i >= n && memcmp(p->s + p->i, w, n) == 0) {
        p->i += n;
        return true;
    }
    return false;
}

static uint32_t jp_hex4(jp *p) {
    if (p->n - p->i < 4) jp_fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = p->s[p->i++];
        int h = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                         : -1;
        if (h < 0) jp_fail(p, "bad hex digit in \\u escape");
        v = v * 16 + (uint32_t)h;
    }
    return v;
}

static jstr jp_string(jp *p) {
    struct jbuf b = {0};
    p->i++; /* opening quote */
    for (;;) {
        if (p->i >= p->n) jp_fail(p, "unterminated string");
        char ch = p->s[p->i++];
        if (ch == '"') break;
        if (ch != '\\') {
            jbuf_put(p->c, &b, &ch, 1);
            continue;
        }
        if (p->i >= p->n) jp_fail(p, "unterminated string");
        char e = p->s[p->i++];
        const char *map = "\"\"\\\\//b\bf\fn\nr\rt\t";
        const char *m = NULL;
        for (const char *q = map; *q; q += 2)
            if (*q == e) m = q + 1;
        if (m) {
            jbuf_put(p->c, &b, m, 1);
            continue;
        }
        if (e != 'u') jp_fail(p, "bad escape in string");
        uint32_t cp = jp_hex4(p);
        if (cp >= 0xD800 && cp < 0xDC00 && p->n - p->i >= 6 && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
            size_t save = p->i;
            p->i += 2;
            uint32_t lo = jp_hex4(p);
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else p->i = save;
        }
        if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* lone surrogate */
        jinja_put_utf8(p->c, &b, cp);
    }
    /* every string of the JSON context (values and keys) is caller data */
    jstr s = jbuf_take(p->c, &b);
    return jstr_taint(p->c, s, true);
}

static jv jp_value(jp *p) {
    jp_ws(p);
    if (p->i >= p->n) jp_fail(p, "unexpected end");
    if (++p->depth > JINJA_MAX_DEPTH) jp_fail(p, "nested too deeply");
    char ch = p->s[p->i];
    jv r;
    if (ch == '{') {
        p->i++;
        r = jv_dict_new(p->c, JV_DICT);
        jp_ws(p);
        if (p->i < p->n && p->s[p->i] == '}') {
            p->i++;
        } else {
            for (;;) {
                jp_ws(p);
                if (p->i >= p->n || p->s[p->i] != '"') jp_fail(p, "expected a string key");
                jstr k = jp_string(p);
                jp_ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') jp_fail(p, "expected ':'");
                p->i++;
                jdict_set(p->c, r.u.d, k, jp_value(p));
                jp_ws(p);
                if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    continue;
                }
                if (p->i < p->n && p->s[p->i] == '}') {
                    p->i++;
                    break;
                }
                jp_fail(p, "expected ',' or '}'");
            }
        }
    } else if (ch == '[') {
        p->i++;
        r = jv_list_new(p->c, 0);
        jp_ws(p);
        if (p->i < p->n && p->s[p->i] == ']') {
            p->i++;
        } else {
            for (;;) {
                jlist_push(p->c, r.u.l, jp_value(p));
                jp_ws(p);
                if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    continue;
                }
                if (p->i < p->n && p->s[p->i] == ']') {
                    p->i++;
                    break;
                }
                jp_fail(p, "expected ',' or ']'");
            }
        }
    } else if (ch == '"') {
        r = jv_str(jp_string(p));
    } else if (jp_lit(p, "true")) {
        r = jv_bool(true);
    } else if (jp_lit(p, "false")) {
        r = jv_bool(false);
    } else if (jp_lit(p, "null")) {
        r = jv_none();
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        size_t st = p->i;
        bool fl = false;
        if (p->s[p->i] == '-') p->i++;
        while (p->i < p->n && ((p->s[p->i] >= '0' && p->s[p->i] <= '9') || p->s[p->i] == '.' || p->s[p->i] == 'e' ||
                               p->s[p->i] == 'E' || p->s[p->i] == '+' || p->s[p->i] == '-')) {
            if (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E') fl = true;
            p->i++;
        }
        char buf[64];
        if (p->i - st >= sizeof buf) jp_fail(p, "number too long");
        memcpy(buf, p->s + st, p->i - st);
        buf[p->i - st] = 0;
        char *end;
        if (!fl) {
            long long v = strtoll(buf, &end, 10);
            if (*end || end == buf) jp_fail(p, "bad number");
            r = jv_int(v);
        } else {
            double v = strtod(buf, &end);
            if (*end || end == buf) jp_fail(p, "bad number");
            r = jv_float(v);
        }
    } else {
        jp_fail(p, "unexpected character");
    }
    p->depth--;
    return r;
}

typedef struct json_setup {
    const char *json;
    const char *bos, *eos; /* template text (from the vocabulary), or NULL */
} json_setup;

static void setup_json(jctx *c, struct jscope *s, const void *ud) {
    const json_setup *js = ud;
    if (js->bos) jscope_set(c, s, jstr_z("bos_token"), jv_strz(c, js->bos));
    if (js->eos) jscope_set(c, s, jstr_z("eos_token"), jv_strz(c, js->eos));
    const char *json = js->json;
    if (!json) return;
    jp p = {.c = c, .s = json, .i = 0, .n = strlen(json)};
    jv v = jp_value(&p);
    jp_ws(&p);
    if (p.i != p.n) jp_fail(&p, "trailing characters after the object");
    if (v.t != JV_DICT) jctx_fail(c, 0, 0, "context JSON must be an object");
    for (size_t i = 0; i < v.u.d->n; i++) jscope_set(c, s, v.u.d->k[i], v.u.d->v[i]);
}

char *tutti_chat_render_json(const char *tmpl, size_t len, const char *ctx_json) {
    json_setup js = {ctx_json, NULL, NULL};
    return render(tmpl, len, setup_json, &js, NULL, NULL);
}

char *tutti_chat_render_json_marked(const char *tmpl, size_t len, const char *ctx_json, const char *bos_token,
                                    const char *eos_token, size_t *out_len, uint8_t **is_data) {
    json_setup js = {ctx_json, bos_token, eos_token};
    return render(tmpl, len, setup_json, &js, out_len, is_data);
}
