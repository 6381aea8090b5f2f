/* Values of the Jinja engine: construction, truthiness, comparison,
 * printing and JSON.
 *
 * Printing follows @huggingface/jinja (our reference): booleans print as
 * "true"/"false", lists and dicts as JSON, floats like JavaScript numbers
 * with integral values keeping one decimal ("3.0"); undefined and none print
 * nothing in {{ }}.  Truthiness and equality follow Python. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

jv jv_undef(void) { return (jv){.t = JV_UNDEF}; }
jv jv_none(void) { return (jv){.t = JV_NONE}; }
jv jv_bool(bool b) { return (jv){.t = JV_BOOL, .u.b = b}; }
jv jv_int(int64_t i) { return (jv){.t = JV_INT, .u.i = i}; }
jv jv_float(double f) { return (jv){.t = JV_FLOAT, .u.f = f}; }
jv jv_str(jstr s) { return (jv){.t = JV_STR, .u.s = s}; }

jv jv_strz(jctx *c, const char *z)
{
    return jv_str(jstr_dup(c, z, strlen(z)));
}

jv jv_list_new(jctx *c, size_t cap)
{
    jv v = {.t = JV_LIST};
    v.u.l = jalloc(c, sizeof *v.u.l);
    if (cap) {
        if (cap > JINJA_MAX_ARENA / sizeof(jv))
            jctx_fail(c, 0, 0, "list too long");
        v.u.l->v = jalloc(c, cap * sizeof(jv));
        v.u.l->cap = cap;
    }
    return v;
}

jv jv_dict_new(jctx *c, jv_type t)
{
    jv v = {.t = t};
    v.u.d = jalloc(c, sizeof *v.u.d);
    return v;
}

void jlist_push(jctx *c, struct jlist *l, jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = jalloc(c, cap * sizeof *nv);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

const jv *jdict_get(const struct jdict *d, jstr k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jstr_eq(d->k[i], k))
            return &d->v[i];
    return NULL;
}

void jdict_set(jctx *c, struct jdict *d, jstr k, jv v)
{
    for (size_t i = 0; i < d->n; i++)
        if (jstr_eq(d->k[i], k)) {
            d->v[i] = v;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jstr *nk = jalloc(c, cap * sizeof *nk);
        jv *nv = jalloc(c, cap * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
}

bool jv_truthy(const jv *v)
{
    switch (v->t) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0.0;
    case JV_STR: return v->u.s.n > 0;
    case JV_LIST: return v->u.l->n > 0;
    case JV_DICT: return v->u.d->n > 0;
    case JV_NS:
    case JV_MACRO:
    case JV_LOOP: return true;
    }
    return false;
}

static bool is_num(const jv *v)
{
    return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
}

static double num(const jv *v)
{
    return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i : v->u.b ? 1.0 : 0.0;
}

bool jv_equal(const jv *a, const jv *b)
{
    if (is_num(a) && is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT) {
            int64_t x = a->t == JV_INT ? a->u.i : a->u.b, y = b->t == JV_INT ? b->u.i : b->u.b;
            return x == y;
        }
        return num(a) == num(b);
    }
    if (a->t != b->t)
        return false;
    switch (a->t) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return jstr_eq(a->u.s, b->u.s);
    case JV_LIST:
        if (a->u.l->n != b->u.l->n)
            return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!jv_equal(&a->u.l->v[i], &b->u.l->v[i]))
                return false;
        return true;
    case JV_DICT:
        if (a->u.d->n != b->u.d->n)
            return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const jv *o = jdict_get(b->u.d, a->u.d->k[i]);
            if (!o || !jv_equal(&a->u.d->v[i], o))
                return false;
        }
        return true;
    case JV_NS: return a->u.d == b->u.d;
    case JV_MACRO: return a->u.m == b->u.m;
    case JV_LOOP: return a->u.loop == b->u.loop;
    default: return false;
    }
}

int jv_compare(jctx *c, const jv *a, const jv *b, int line, int col)
{
    if (is_num(a) && is_num(b)) {
        if (a->t == JV_INT && b->t == JV_INT)
            return (a->u.i > b->u.i) - (a->u.i < b->u.i);
        double x = num(a), y = num(b);
        return (x > y) - (x < y);
    }
    if (a->t == JV_STR && b->t == JV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int r = n ? memcmp(a->u.s.p, b->u.s.p, n) : 0;
        if (r)
            return r < 0 ? -1 : 1;
        return (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
    }
    if (a->t == JV_LIST && b->t == JV_LIST) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            int r = jv_compare(c, &a->u.l->v[i], &b->u.l->v[i], line, col);
            if (r)
                return r;
        }
        return (a->u.l->n > b->u.l->n) - (a->u.l->n < b->u.l->n);
    }
    jctx_fail(c, line, col, "cannot compare %s with %s", jv_type_name(a), jv_type_name(b));
}

const char *jv_type_name(const jv *v)
{
    switch (v->t) {
    case JV_UNDEF: return "undefined";
    case JV_NONE: return "none";
    case JV_BOOL: return "boolean";
    case JV_INT: return "integer";
    case JV_FLOAT: return "float";
    case JV_STR: return "string";
    case JV_LIST: return "list";
    case JV_DICT: return "dict";
    case JV_NS: return "namespace";
    case JV_MACRO: return "macro";
    case JV_LOOP: return "loop";
    }
    return "?";
}

/* Shortest decimal that reads back as f, laid out like JavaScript's
 * Number.prototype.toString (fixed for 1e-7 <= |f| < 1e21, else exponent),
 * but integral values keep ".0" as Python floats print. */
void jv_format_float(double f, char *buf, size_t n)
{
    if (isnan(f)) {
        snprintf(buf, n, "NaN");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, n, f < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (f == 0) {
        snprintf(buf, n, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    if (f == floor(f) && fabs(f) < 1e21) {
        snprintf(buf, n, "%.1f", f);
        return;
    }
    char e[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    bool neg = e[0] == '-';
    const char *s = e + neg;
    char digits[24];
    size_t nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.' && nd < sizeof digits - 1)
            digits[nd++] = *s;
    digits[nd] = 0;
    int exp10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        digits[--nd] = 0;
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 >= -7 && exp10 < 21) {
        if (exp10 < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int k = 0; k < -exp10 - 1; k++)
                out[o++] = '0';
            for (size_t k = 0; k < nd; k++)
                out[o++] = digits[k];
        } else {
            for (int k = 0; k <= exp10 || k < (int)nd; k++) {
                if (k == exp10 + 1)
                    out[o++] = '.';
                out[o++] = k < (int)nd ? digits[k] : '0';
            }
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t k = 1; k < nd; k++)
                out[o++] = digits[k];
        }
        out[o] = 0;
        snprintf(out + o, sizeof out - o, "e%c%d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(buf, n, "%s", out);
}

static void json_str(jctx *c, struct jbuf *b, jstr s)
{
    /* the quoted, escaped form of data is data as a whole */
    bool data = jstr_has_data(s);
    jbuf_put_as(c, b, "\"", 1, data);
    size_t run = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        const char *esc = NULL;
        char u[8];
        switch (ch) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (ch < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", ch);
                esc = u;
            }
        }
        if (esc) {
            jbuf_put_as(c, b, s.p + i - run, run, data);
            run = 0;
            jbuf_put_as(c, b, esc, strlen(esc), data);
        } else {
            run++;
        }
    }
    jbuf_put_as(c, b, s.p + s.n - run, run, data);
    jbuf_put_as(c, b, "\"", 1, data);
}

static void newline_indent(jctx *c, struct jbuf *b, int indent, int depth)
{
    jbuf_put(c, b, "\n", 1);
    for (int k = 0; k < indent * depth; k++)
        jbuf_put(c, b, " ", 1);
}

void jv_to_json(jctx *c, struct jbuf *b, const jv *v, int indent, int depth, int line, int col)
{
    char num[64];
    if (depth > JINJA_MAX_DEPTH)
        jctx_fail(c, line, col, "value nested too deeply for tojson");
    switch (v->t) {
    case JV_UNDEF:
    case JV_NONE: jbuf_putz(c, b, "null"); return;
    case JV_BOOL: jbuf_putz(c, b, v->u.b ? "true" : "false"); return;
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->u.i);
        jbuf_putz(c, b, num);
        return;
    case JV_FLOAT:
        /* JSON.stringify: integral floats print without ".0" */
        if (isfinite(v->u.f) && v->u.f == floor(v->u.f) && fabs(v->u.f) < 1e21)
            snprintf(num, sizeof num, "%.0f", v->u.f == 0 ? 0.0 : v->u.f);
        else if (!isfinite(v->u.f))
            snprintf(num, sizeof num, "null");
        else
            jv_format_float(v->u.f, num, sizeof num);
        jbuf_putz(c, b, num);
        return;
    case JV_STR: json_str(c, b, v->u.s); return;
    case JV_LIST: {
        jbuf_put(c, b, "[", 1);
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i)
                jbuf_putz(c, b, indent > 0 ? "," : ", ");
            if (indent > 0)
                newline_indent(c, b, indent, depth + 1);
            jv_to_json(c, b, &v->u.l->v[i], indent, depth + 1, line, col);
        }
        if (indent > 0 && v->u.l->n)
            newline_indent(c, b, indent, depth);
        jbuf_put(c, b, "]", 1);
        return;
    }
    case JV_DICT:
    case JV_NS: {
        jbuf_put(c, b, "{", 1);
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i)
                jbuf_putz(c, b, indent > 0 ? "," : ", ");
            if (indent > 0)
                newline_indent(c, b, indent, depth + 1);
            json_str(c, b, v->u.d->k[i]);
            jbuf_putz(c, b, ": ");
            jv_to_json(c, b, &v->u.d->v[i], indent, depth + 1, line, col);
        }
        if (indent > 0 && v->u.d->n)
            newline_indent(c, b, indent, depth);
        jbuf_put(c, b, "}", 1);
        return;
    }
    case JV_MACRO:
    case JV_LOOP: jctx_fail(c, line, col, "cannot convert a %s to JSON", jv_type_name(v));
    }
}

void jv_print(jctx *c, struct jbuf *b, const jv *v)
{
    char num[64];
    switch (v->t) {
    case JV_UNDEF:
    case JV_NONE: return;
    case JV_BOOL: jbuf_putz(c, b, v->u.b ? "true" : "false"); return;
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->u.i);
        jbuf_putz(c, b, num);
        return;
    case JV_FLOAT:
        jv_format_float(v->u.f, num, sizeof num);
        jbuf_putz(c, b, num);
        return;
    case JV_STR: jbuf_puts(c, b, v->u.s); return;
    case JV_LIST:
    case JV_DICT:
    case JV_NS: jv_to_json(c, b, v, -1, 0, 0, 0); return;
    case JV_MACRO:
    case JV_LOOP: jctx_fail(c, 0, 0, "cannot print a %s", jv_type_name(v));
    }
}

jstr jv_to_str(jctx *c, const jv *v)
{
    if (v->t == JV_STR)
        return v->u.s;
    struct jbuf b = {0};
    jv_print(c, &b, v);
    return jbuf_take(c, &b);
}
