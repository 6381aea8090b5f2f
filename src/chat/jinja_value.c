/* Values of the Jinja engine: construction, truthiness, comparison,
 * printing and JSON.
 *
 * Printing follows Python, as Jinja2 under transformers prints: str() of
 * the value, so True/False, None, floats as repr() (1.0, 1e-05, inf), lists,
 * tuples and dicts as repr() with quoted strings; undefined prints nothing.
 * JSON is json.dumps' text (tojson).  Truthiness and equality follow
 * Python. */
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

jv jv_strz(jctx *c, const char *z) { return jv_str(jstr_dup(c, z, strlen(z))); }

jv jv_list_new(jctx *c, size_t cap) {
    jv v = {.t = JV_LIST};
    v.u.l = jalloc(c, sizeof *v.u.l);
    if (cap) {
        if (cap > JINJA_MAX_ARENA / sizeof(jv)) jctx_fail(c, 0, 0, "list too long");
        v.u.l->v = jalloc(c, cap * sizeof(jv));
        v.u.l->cap = cap;
    }
    return v;
}

jv jv_dict_new(jctx *c, jv_type t) {
    jv v = {.t = t};
    v.u.d = jalloc(c, sizeof *v.u.d);
    return v;
}

void jlist_push(jctx *c, struct jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = jalloc(c, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

const jv *jdict_get(const struct jdict *d, jstr k) {
    for (size_t i = 0; i < d->n; i++)
        if (jstr_eq(d->k[i], k)) return &d->v[i];
    return NULL;
}

void jdict_set(jctx *c, struct jdict *d, jstr k, jv v) {
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

bool jv_truthy(const jv *v) {
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
    case JV_LOOP:
    case JV_FUNC: return true;
    }
    return false;
}

static bool is_num(const jv *v) { return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL; }

static double num(const jv *v) {
    return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i : v->u.b ? 1.0 : 0.0;
}

bool jv_equal(const jv *a, const jv *b) {
    if (is_num(a) && is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT) {
            int64_t x = a->t == JV_INT ? a->u.i : a->u.b, y = b->t == JV_INT ? b->u.i : b->u.b;
            return x == y;
        }
        return num(a) == num(b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return jstr_eq(a->u.s, b->u.s);
    case JV_LIST:
        if (a->u.l->n != b->u.l->n || a->u.l->tuple != b->u.l->tuple) /* (1, 2) != [1, 2] */
            return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!jv_equal(&a->u.l->v[i], &b->u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const jv *o = jdict_get(b->u.d, a->u.d->k[i]);
            if (!o || !jv_equal(&a->u.d->v[i], o)) return false;
        }
        return true;
    case JV_NS: return a->u.d == b->u.d;
    case JV_MACRO: return a->u.m == b->u.m;
    case JV_LOOP: return a->u.loop == b->u.loop;
    case JV_FUNC: return jstr_eq(a->u.s, b->u.s);
    default: return false;
    }
}

int jv_compare(jctx *c, const jv *a, const jv *b, int line, int col) {
    if (is_num(a) && is_num(b)) {
        if (a->t == JV_INT && b->t == JV_INT) return (a->u.i > b->u.i) - (a->u.i < b->u.i);
        double x = num(a), y = num(b);
        return (x > y) - (x < y);
    }
    if (a->t == JV_STR && b->t == JV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int r = n ? memcmp(a->u.s.p, b->u.s.p, n) : 0;
        if (r) return r < 0 ? -1 : 1;
        return (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
    }
    if (a->t == JV_LIST && b->t == JV_LIST) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            int r = jv_compare(c, &a->u.l->v[i], &b->u.l->v[i], line, col);
            if (r) return r;
        }
        return (a->u.l->n > b->u.l->n) - (a->u.l->n < b->u.l->n);
    }
    jctx_fail(c, line, col, "cannot compare %s with %s", jv_type_name(a), jv_type_name(b));
}

const char *jv_type_name(const jv *v) {
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
    case JV_FUNC: return "function";
    }
    return "?";
}

/* Shortest decimal digits that read back as f (f finite, non-zero):
 * digits[] without a point, *exp10 the power of ten of the first digit. */
static size_t shortest_digits(double f, char *digits, size_t cap, int *exp10) {
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    const char *s = e + (e[0] == '-');
    size_t nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.' && nd < cap - 1) digits[nd++] = *s;
    *exp10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    return nd;
}

/* Python's repr(float): the shortest digits that read back, fixed notation
 * for 1e-4 <= |f| < 1e16 (integral values keep ".0"), else d.ddde+XX with
 * at least two exponent digits; inf, nan.  JSON (json.dumps) is the same
 * except for the non-finite values, "Infinity" / "NaN". */
static void py_float(double f, bool json, char *buf, size_t n) {
    if (isnan(f)) {
        snprintf(buf, n, json ? "NaN" : "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, n, "%s%s", f < 0 ? "-" : "", json ? "Infinity" : "inf");
        return;
    }
    if (f == 0) {
        snprintf(buf, n, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char digits[24], out[64];
    int exp10;
    size_t nd = shortest_digits(f, digits, sizeof digits, &exp10), o = 0;
    if (f < 0) out[o++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int k = 0; k < -exp10 - 1; k++) out[o++] = '0';
            for (size_t k = 0; k < nd; k++) out[o++] = digits[k];
        } else {
            for (int k = 0; k <= exp10; k++) out[o++] = k < (int)nd ? digits[k] : '0';
            out[o++] = '.';
            if ((int)nd > exp10 + 1)
                for (size_t k = (size_t)exp10 + 1; k < nd; k++) out[o++] = digits[k];
            else out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t k = 1; k < nd; k++) out[o++] = digits[k];
        }
        out[o] = 0;
        snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(buf, n, "%s", out);
}

/* One UTF-8 character at s[0..n): its code point and length; an invalid
 * byte gives -1 and length 1. */
static int32_t utf8_at(const unsigned char *s, size_t n, size_t *len) {
    unsigned char c0 = s[0];
    size_t l = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
    *len = 1;
    if (l == 0 || l > n) return l == 1 ? c0 : -1;
    int32_t cp = l == 1 ? c0 : l == 2 ? c0 & 0x1F : l == 3 ? c0 & 0x0F : c0 & 0x07;
    for (size_t k = 1; k < l; k++) {
        if ((s[k] >> 6) != 2) return -1;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    static const int32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[l] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return -1;
    *len = l;
    return cp;
}

/* str.isprintable() for the code points we can name without Unicode's
 * tables: ASCII and C1 controls, the space separators other than ' ',
 * format characters (soft hyphen, zero-width and bidi marks, BOM), line and
 * paragraph separators, the private use areas.  Others count as printable. */
static bool py_printable(int32_t cp) {
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB))
        return false;
    if ((cp >= 0xE000 && cp <= 0xF8FF) || cp >= 0xF0000) return false;
    return true;
}

/* Python's repr(str): single quotes unless the text has ' and no ". */
static void py_repr_str(jctx *c, struct jbuf *b, jstr s) {
    bool data = jstr_has_data(s); /* the quoted form of data is data as a whole */
    bool sq = false, dq = false;
    for (size_t i = 0; i < s.n; i++) {
        sq |= s.p[i] == '\'';
        dq |= s.p[i] == '"';
    }
    char q = sq && !dq ? '"' : '\'';
    jbuf_put_as(c, b, &q, 1, data);
    size_t i = 0;
    while (i < s.n) {
        size_t l;
        int32_t cp = utf8_at((const unsigned char *)s.p + i, s.n - i, &l);
        char e[16];
        const char *esc = NULL;
        if (cp == q || cp == '\\') {
            e[0] = '\\';
            e[1] = (char)cp;
            e[2] = 0;
            esc = e;
        } else if (cp == '\n') {
            esc = "\\n";
        } else if (cp == '\r') {
            esc = "\\r";
        } else if (cp == '\t') {
            esc = "\\t";
        } else if (cp < 0) { /* Python's strings hold no invalid UTF-8: show the byte */
            snprintf(e, sizeof e, "\\x%02x", (unsigned char)s.p[i]);
            esc = e;
        } else if (!py_printable(cp)) {
            snprintf(e, sizeof e, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", (unsigned)cp);
            esc = e;
        }
        if (esc) jbuf_put_as(c, b, esc, strlen(esc), data);
        else jbuf_put_as(c, b, s.p + i, l, data);
        i += l;
    }
    jbuf_put_as(c, b, &q, 1, data);
}

/* Python's repr() of a value inside a printed container. */
static void py_repr(jctx *c, struct jbuf *b, const jv *v, int depth) {
    char num[64];
    if (depth > JINJA_MAX_DEPTH) jctx_fail(c, 0, 0, "value nested too deeply to print");
    switch (v->t) {
    case JV_UNDEF: jbuf_putz(c, b, "Undefined"); return;
    case JV_NONE: jbuf_putz(c, b, "None"); return;
    case JV_BOOL: jbuf_putz(c, b, v->u.b ? "True" : "False"); return;
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->u.i);
        jbuf_putz(c, b, num);
        return;
    case JV_FLOAT:
        py_float(v->u.f, false, num, sizeof num);
        jbuf_putz(c, b, num);
        return;
    case JV_STR: py_repr_str(c, b, v->u.s); return;
    case JV_LIST: {
        bool tuple = v->u.l->tuple;
        jbuf_putz(c, b, tuple ? "(" : "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) jbuf_putz(c, b, ", ");
            py_repr(c, b, &v->u.l->v[i], depth + 1);
        }
        if (tuple && v->u.l->n == 1) jbuf_putz(c, b, ",");
        jbuf_putz(c, b, tuple ? ")" : "]");
        return;
    }
    case JV_DICT:
    case JV_NS: {
        if (v->t == JV_NS) jbuf_putz(c, b, "<Namespace ");
        jbuf_putz(c, b, "{");
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) jbuf_putz(c, b, ", ");
            py_repr_str(c, b, v->u.d->k[i]);
            jbuf_putz(c, b, ": ");
            py_repr(c, b, &v->u.d->v[i], depth + 1);
        }
        jbuf_putz(c, b, "}");
        if (v->t == JV_NS) jbuf_putz(c, b, ">");
        return;
    }
    case JV_MACRO:
    case JV_LOOP:
    case JV_FUNC: jctx_fail(c, 0, 0, "cannot print a %s", jv_type_name(v));
    }
}

/* ---- JSON: Python's json.dumps ------------------------------------------ */
static void json_str(jctx *c, struct jbuf *b, jstr s, bool ascii) {
    /* the quoted, escaped form of data is data as a whole */
    bool data = jstr_has_data(s);
    jbuf_put_as(c, b, "\"", 1, data);
    size_t i = 0;
    while (i < s.n) {
        unsigned char ch = (unsigned char)s.p[i];
        char u[16];
        const char *esc = NULL;
        size_t l = 1;
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
            } else if (ch >= 0x80) {
                int32_t cp = utf8_at((const unsigned char *)s.p + i, s.n - i, &l);
                if (ascii) {
                    if (cp < 0) cp = 0xFFFD;
                    if (cp >= 0x10000)
                        snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                                 0xDC00 + ((cp - 0x10000) & 0x3FF));
                    else snprintf(u, sizeof u, "\\u%04x", (unsigned)cp);
                    esc = u;
                }
            }
        }
        if (esc) jbuf_put_as(c, b, esc, strlen(esc), data);
        else jbuf_put_as(c, b, s.p + i, l, data);
        i += l;
    }
    jbuf_put_as(c, b, "\"", 1, data);
}

static void newline_indent(jctx *c, struct jbuf *b, const jjson_opts *o, int depth) {
    jbuf_put(c, b, "\n", 1);
    for (int k = 0; k < depth; k++) jbuf_puts(c, b, o->indent);
}

/* Key order of a dict for sort_keys: indices sorted by key bytes (UTF-8
 * byte order is code point order, as Python compares). */
static size_t *key_order(jctx *c, const struct jdict *d, bool sort) {
    size_t *ix = jalloc(c, (d->n ? d->n : 1) * sizeof *ix);
    for (size_t i = 0; i < d->n; i++) ix[i] = i;
    if (!sort) return ix;
    for (size_t i = 1; i < d->n; i++) { /* insertion sort: stable, dicts are small */
        size_t x = ix[i], j = i;
        while (j > 0) {
            jstr a = d->k[ix[j - 1]], k = d->k[x];
            size_t m = a.n < k.n ? a.n : k.n;
            int r = m ? memcmp(a.p, k.p, m) : 0;
            if (r < 0 || (r == 0 && a.n <= k.n)) break;
            ix[j] = ix[j - 1];
            j--;
        }
        ix[j] = x;
    }
    return ix;
}

void jv_to_json(jctx *c, struct jbuf *b, const jv *v, const jjson_opts *o, int depth, int line, int col) {
    char num[64];
    if (depth > JINJA_MAX_DEPTH) jctx_fail(c, line, col, "value nested too deeply for tojson");
    switch (v->t) {
    case JV_NONE: jbuf_putz(c, b, "null"); return;
    case JV_BOOL: jbuf_putz(c, b, v->u.b ? "true" : "false"); return;
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->u.i);
        jbuf_putz(c, b, num);
        return;
    case JV_FLOAT:
        py_float(v->u.f, true, num, sizeof num);
        jbuf_putz(c, b, num);
        return;
    case JV_STR: json_str(c, b, v->u.s, o->ensure_ascii); return;
    case JV_LIST: {
        if (v->u.l->n == 0) {
            jbuf_putz(c, b, "[]");
            return;
        }
        jbuf_put(c, b, "[", 1);
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) jbuf_puts(c, b, o->item_sep);
            if (o->has_indent) newline_indent(c, b, o, depth + 1);
            jv_to_json(c, b, &v->u.l->v[i], o, depth + 1, line, col);
        }
        if (o->has_indent) newline_indent(c, b, o, depth);
        jbuf_put(c, b, "]", 1);
        return;
    }
    case JV_DICT: {
        const struct jdict *d = v->u.d;
        if (d->n == 0) {
            jbuf_putz(c, b, "{}");
            return;
        }
        size_t *ix = key_order(c, d, o->sort_keys);
        jbuf_put(c, b, "{", 1);
        for (size_t i = 0; i < d->n; i++) {
            if (i) jbuf_puts(c, b, o->item_sep);
            if (o->has_indent) newline_indent(c, b, o, depth + 1);
            json_str(c, b, d->k[ix[i]], o->ensure_ascii);
            jbuf_puts(c, b, o->key_sep);
            jv_to_json(c, b, &d->v[ix[i]], o, depth + 1, line, col);
        }
        if (o->has_indent) newline_indent(c, b, o, depth);
        jbuf_put(c, b, "}", 1);
        return;
    }
    case JV_UNDEF:
    case JV_NS:
    case JV_MACRO:
    case JV_LOOP:
    case JV_FUNC: jctx_fail(c, line, col, "tojson: object of type %s is not JSON serializable", jv_type_name(v));
    }
}

/* {{ v }}: Python's str(v); undefined prints nothing. */
void jv_print(jctx *c, struct jbuf *b, const jv *v) {
    switch (v->t) {
    case JV_UNDEF: return;
    case JV_STR: jbuf_puts(c, b, v->u.s); return;
    default: py_repr(c, b, v, 0); return;
    }
}

jstr jv_to_str(jctx *c, const jv *v) {
    if (v->t == JV_STR) return v->u.s;
    struct jbuf b = {0};
    jv_print(c, &b, v);
    return jbuf_take(c, &b);
}
