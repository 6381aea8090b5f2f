/* Built-in filters, tests, methods and global functions of the Jinja
 * engine: the set chat templates use (Jinja2 "List of Builtin Filters" /
 * "List of Builtin Tests", Python str/dict methods, and transformers' globals
 * raise_exception and strftime_now).  Case mapping (upper, lower, title,
 * capitalize) is ASCII-only; other bytes pass through unchanged. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja.h"

#define FAIL(c, a, ...) jctx_fail((c), (a)->line, (a)->col, __VA_ARGS__)

const jv *jargs_get(const jargs *a, size_t pos, const char *kw) {
    size_t p = 0;
    for (size_t i = 0; i < a->n; i++) {
        if (a->kw[i].n) {
            if (kw && jstr_eqz(a->kw[i], kw)) return &a->v[i];
        } else if (p++ == pos) {
            return &a->v[i];
        }
    }
    return NULL;
}

static jstr arg_str(jctx *c, const jargs *a, size_t pos, const char *kw, const char *what, const char *dflt) {
    const jv *v = jargs_get(a, pos, kw);
    if (!v || v->t == JV_UNDEF || (v->t == JV_NONE && dflt)) {
        if (!dflt) FAIL(c, a, "%s: missing argument '%s'", what, kw ? kw : "?");
        return jstr_z(dflt);
    }
    if (v->t != JV_STR) FAIL(c, a, "%s: argument '%s' must be a string, got %s", what, kw ? kw : "?", jv_type_name(v));
    return v->u.s;
}

static int64_t arg_int(jctx *c, const jargs *a, size_t pos, const char *kw, const char *what, int64_t dflt) {
    const jv *v = jargs_get(a, pos, kw);
    if (!v || v->t == JV_UNDEF || v->t == JV_NONE) return dflt;
    if (v->t == JV_INT) return v->u.i;
    if (v->t == JV_BOOL) return v->u.b;
    FAIL(c, a, "%s: argument '%s' must be an integer, got %s", what, kw ? kw : "?", jv_type_name(v));
}

static bool arg_bool(const jargs *a, size_t pos, const char *kw, bool dflt) {
    const jv *v = jargs_get(a, pos, kw);
    return v && v->t != JV_UNDEF ? jv_truthy(v) : dflt;
}

/* ---- string helpers ---------------------------------------------------- */
/* Length in bytes of a whitespace character at s (0 if none): ASCII
 * whitespace and the Unicode spaces both Python and JavaScript strip. */
static size_t ws_len(const char *s, size_t n) {
    unsigned char c0 = (unsigned char)s[0];
    if (c0 == ' ' || (c0 >= '\t' && c0 <= '\r')) return 1;
    if (n >= 2 && c0 == 0xC2 && (unsigned char)s[1] == 0xA0) return 2;
    if (n >= 3 && c0 == 0xE1 && (unsigned char)s[1] == 0x9A && (unsigned char)s[2] == 0x80) return 3;
    if (n >= 3 && c0 == 0xE2 && (unsigned char)s[1] == 0x80) {
        unsigned char c2 = (unsigned char)s[2];
        if (c2 <= 0x8A || c2 == 0xA8 || c2 == 0xA9 || c2 == 0xAF) return 3;
    }
    if (n >= 3 && c0 == 0xE2 && (unsigned char)s[1] == 0x81 && (unsigned char)s[2] == 0x9F) return 3;
    if (n >= 3 && c0 == 0xE3 && (unsigned char)s[1] == 0x80 && (unsigned char)s[2] == 0x80) return 3;
    return 0;
}

/* Byte length of the whitespace character ending at s[n-1], 0 if none. */
static size_t ws_len_back(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        size_t l = ws_len(s + n - k, k);
        if (l == k) return k;
    }
    return 0;
}

static bool in_chars(jstr chars, const char *p, size_t *len, size_t avail) {
    /* chars is a set of UTF-8 characters */
    size_t i = 0;
    while (i < chars.n) {
        unsigned char ch = (unsigned char)chars.p[i];
        size_t l = ch < 0x80 ? 1 : (ch >> 5) == 6 ? 2 : (ch >> 4) == 14 ? 3 : (ch >> 3) == 30 ? 4 : 1;
        if (i + l > chars.n) l = 1;
        if (l <= avail && memcmp(chars.p + i, p, l) == 0) {
            *len = l;
            return true;
        }
        i += l;
    }
    return false;
}

static jstr strip(jstr s, const jstr *chars, bool left, bool right) {
    size_t a = 0, b = s.n, l;
    if (left)
        while (a < b) {
            if (chars) {
                if (!in_chars(*chars, s.p + a, &l, b - a)) break;
            } else if (!(l = ws_len(s.p + a, b - a))) {
                break;
            }
            a += l;
        }
    if (right)
        while (b > a) {
            if (chars) {
                bool hit = false;
                for (size_t k = 1; k <= 4 && k <= b - a && !hit; k++)
                    if (in_chars(*chars, s.p + b - k, &l, k) && l == k) hit = true;
                if (!hit) break;
            } else if (!(l = ws_len_back(s.p + a, b - a))) {
                break;
            }
            b -= l;
        }
    return jstr_sub(s, a, b - a);
}

/* mode 0 lower, 1 upper, 2 capitalize, 3 str.title() (a word starts after
 * any uncased character, digits included: "x1y" -> "X1Y"), 4 Jinja2's title
 * filter (words start after runs of whitespace and -({[<, each word is
 * upper-cased first, lower-cased after: "they're" -> "They're"). */
static jstr map_case(jctx *c, jstr s, int mode) {
    char *d = jalloc(c, s.n + 1);
    bool word_start = true;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        bool up = mode == 1 || (mode == 2 && i == 0) || (mode >= 3 && word_start);
        d[i] = (char)(ch < 0x80 ? (up ? toupper(ch) : tolower(ch)) : ch);
        if (mode == 3) word_start = !(isalpha(ch) || ch >= 0x80);
        else word_start = isspace(ch) || (ch && strchr("-({[<", ch));
    }
    return (jstr){d, s.n, s.d}; /* one byte for one byte: the marks stay valid */
}

static size_t n_codepoints(jstr s) {
    size_t n = 0;
    for (size_t i = 0; i < s.n; i++)
        if (((unsigned char)s.p[i] & 0xC0) != 0x80) n++;
    return n;
}

static const char *find(jstr h, jstr nd, size_t from) {
    if (nd.n == 0) return h.p + from;
    if (from > h.n || h.n - from < nd.n) return NULL;
    return jmemfind(h.p + from, h.n - from, nd.p, nd.n);
}

static jv replace(jctx *c, jstr s, jstr old, jstr rep, int64_t count) {
    struct jbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old.n == 0) { /* Python: insert rep between every character */
        size_t k = 0;
        while (k <= s.n && (count < 0 || done < count)) {
            jbuf_puts(c, &b, rep);
            done++;
            if (k == s.n) break;
            size_t l = 1;
            while (k + l < s.n && ((unsigned char)s.p[k + l] & 0xC0) == 0x80) l++;
            jbuf_puts(c, &b, jstr_sub(s, k, l));
            k += l;
        }
        if (k < s.n) jbuf_puts(c, &b, jstr_sub(s, k, s.n - k));
        return jv_str(jbuf_take(c, &b));
    }
    const char *hit;
    while ((count < 0 || done < count) && (hit = find(s, old, i)) != NULL) {
        size_t at = (size_t)(hit - s.p);
        jbuf_puts(c, &b, jstr_sub(s, i, at - i));
        jbuf_puts(c, &b, rep);
        i = at + old.n;
        done++;
    }
    jbuf_puts(c, &b, jstr_sub(s, i, s.n - i));
    return jv_str(jbuf_take(c, &b));
}

static jv split(jctx *c, const jargs *a, jstr s, const jv *sep, int64_t maxsplit) {
    jv r = jv_list_new(c, 0);
    if (!sep || sep->t == JV_NONE || sep->t == JV_UNDEF) {
        /* runs of whitespace, no empty strings */
        size_t i = 0, l;
        int64_t done = 0;
        for (;;) {
            while (i < s.n && (l = ws_len(s.p + i, s.n - i))) i += l;
            if (i >= s.n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                jstr rest = strip(jstr_sub(s, i, s.n - i), NULL, false, true);
                jlist_push(c, r.u.l, jv_str(rest));
                break;
            }
            size_t st = i;
            while (i < s.n && !ws_len(s.p + i, s.n - i)) i++;
            jlist_push(c, r.u.l, jv_str(jstr_sub(s, st, i - st)));
            done++;
        }
        return r;
    }
    if (sep->t != JV_STR) FAIL(c, a, "split: separator must be a string, got %s", jv_type_name(sep));
    if (sep->u.s.n == 0) FAIL(c, a, "split: empty separator");
    size_t i = 0;
    int64_t done = 0;
    const char *hit;
    while ((maxsplit < 0 || done < maxsplit) && (hit = find(s, sep->u.s, i)) != NULL) {
        size_t at = (size_t)(hit - s.p);
        jlist_push(c, r.u.l, jv_str(jstr_sub(s, i, at - i)));
        i = at + sep->u.s.n;
        done++;
    }
    jlist_push(c, r.u.l, jv_str(jstr_sub(s, i, s.n - i)));
    return r;
}

/* str.rsplit: as split, but the splits are made from the right. */
static jv rsplit(jctx *c, const jargs *a, jstr s, const jv *sep, int64_t maxsplit) {
    jv r = jv_list_new(c, 0);
    if (maxsplit < 0 || (sep && sep->t == JV_STR && sep->u.s.n == 0))
        return split(c, a, s, sep, maxsplit); /* the same pieces */
    size_t end = s.n, l;
    int64_t done = 0;
    if (!sep || sep->t == JV_NONE || sep->t == JV_UNDEF) {
        for (;;) {
            while (end > 0 && (l = ws_len_back(s.p, end))) end -= l;
            if (end == 0) break;
            if (done >= maxsplit) {
                jlist_push(c, r.u.l, jv_str(strip(jstr_sub(s, 0, end), NULL, true, false)));
                break;
            }
            size_t st = end;
            while (st > 0 && !ws_len_back(s.p, st)) st--;
            jlist_push(c, r.u.l, jv_str(jstr_sub(s, st, end - st)));
            end = st;
            done++;
        }
    } else {
        if (sep->t != JV_STR) FAIL(c, a, "rsplit: separator must be a string, got %s", jv_type_name(sep));
        jstr d = sep->u.s;
        while (done < maxsplit) {
            const char *hit = NULL;
            for (size_t i = end >= d.n ? end - d.n + 1 : 0; i-- > 0;)
                if (memcmp(s.p + i, d.p, d.n) == 0) {
                    hit = s.p + i;
                    break;
                }
            if (!hit) break;
            size_t at = (size_t)(hit - s.p);
            jlist_push(c, r.u.l, jv_str(jstr_sub(s, at + d.n, end - at - d.n)));
            end = at;
            done++;
        }
        jlist_push(c, r.u.l, jv_str(jstr_sub(s, 0, end)));
    }
    for (size_t i = 0; i < r.u.l->n / 2; i++) { /* collected right to left */
        jv t = r.u.l->v[i];
        r.u.l->v[i] = r.u.l->v[r.u.l->n - 1 - i];
        r.u.l->v[r.u.l->n - 1 - i] = t;
    }
    return r;
}

static bool prefix_match(jctx *c, const jargs *a, jstr s, const jv *p, bool suffix) {
    if (!p) FAIL(c, a, "%s: missing argument", suffix ? "endswith" : "startswith");
    if (p->t == JV_LIST) {
        for (size_t i = 0; i < p->u.l->n; i++)
            if (prefix_match(c, a, s, &p->u.l->v[i], suffix)) return true;
        return false;
    }
    if (p->t != JV_STR)
        FAIL(c, a, "%s: argument must be a string, got %s", suffix ? "endswith" : "startswith", jv_type_name(p));
    jstr x = p->u.s;
    if (x.n > s.n) return false;
    return memcmp(suffix ? s.p + s.n - x.n : s.p, x.p, x.n) == 0;
}

/* ---- sorting (stable merge sort; comparisons may fail the render) ----- */
typedef struct sort_opts {
    jctx *c;
    const jargs *a;
    bool case_sensitive;
    jstr attribute;
    int by; /* dictsort: 0 key, 1 value; -1 for plain sort */
} sort_opts;

static jv attr_path(jctx *c, jv v, jstr path);

static int sort_cmp(const sort_opts *o, const jv *x, const jv *y) {
    jv a = *x, b = *y;
    if (o->by >= 0) {
        a = a.u.l->v[o->by];
        b = b.u.l->v[o->by];
    }
    if (o->attribute.n) {
        a = attr_path(o->c, a, o->attribute);
        b = attr_path(o->c, b, o->attribute);
    }
    if (!o->case_sensitive && a.t == JV_STR && b.t == JV_STR) {
        a = jv_str(map_case(o->c, a.u.s, 0));
        b = jv_str(map_case(o->c, b.u.s, 0));
    }
    return jv_compare(o->c, &a, &b, o->a->line, o->a->col);
}

static void merge_sort(const sort_opts *o, jv *v, jv *tmp, size_t n) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(o, v, tmp, h);
    merge_sort(o, v + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = sort_cmp(o, &v[j], &v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

static jv sorted(jctx *c, const jargs *a, jv list, sort_opts *o, bool reverse) {
    size_t n = list.u.l->n;
    jv r = jv_list_new(c, n ? n : 1);
    if (n) memcpy(r.u.l->v, list.u.l->v, n * sizeof(jv));
    r.u.l->n = n;
    jv *tmp = jalloc(c, (n ? n : 1) * sizeof(jv));
    o->c = c;
    o->a = a;
    merge_sort(o, r.u.l->v, tmp, n);
    if (reverse)
        for (size_t i = 0; i < n / 2; i++) {
            jv t = r.u.l->v[i];
            r.u.l->v[i] = r.u.l->v[n - 1 - i];
            r.u.l->v[n - 1 - i] = t;
        }
    return r;
}

/* ---- misc helpers ------------------------------------------------------ */
/* "a.b.0" attribute path as used by map/selectattr/sort(attribute=...). */
static jv attr_path(jctx *c, jv v, jstr path) {
    size_t i = 0;
    while (i <= path.n) {
        size_t j = i;
        while (j < path.n && path.p[j] != '.') j++;
        jstr part = jstr_sub(path, i, j - i); /* a lookup key only */
        if (v.t == JV_DICT || v.t == JV_NS) {
            const jv *x = jdict_get(v.u.d, part);
            v = x ? *x : jv_undef();
        } else if (v.t == JV_LIST && part.n && isdigit((unsigned char)part.p[0])) {
            size_t idx = (size_t)strtoull(jstr_dup(c, part.p, part.n).p, NULL, 10);
            v = idx < v.u.l->n ? v.u.l->v[idx] : jv_undef();
        } else {
            return jv_undef();
        }
        i = j + 1;
    }
    return v;
}

static jv as_list(jctx *c, const jargs *a, jv v, const char *what) {
    if (v.t == JV_LIST) return v;
    if (v.t == JV_DICT) {
        jv r = jv_list_new(c, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) jlist_push(c, r.u.l, jv_str(v.u.d->k[i]));
        return r;
    }
    if (v.t == JV_STR) {
        jv r = jv_list_new(c, 0);
        size_t i = 0;
        while (i < v.u.s.n) {
            size_t l = 1;
            while (i + l < v.u.s.n && ((unsigned char)v.u.s.p[i + l] & 0xC0) == 0x80) l++;
            jlist_push(c, r.u.l, jv_str(jstr_sub(v.u.s, i, l)));
            i += l;
        }
        return r;
    }
    if (v.t == JV_UNDEF) return jv_list_new(c, 0);
    FAIL(c, a, "%s: expected a list, got %s", what, jv_type_name(&v));
}

static jv items_of(jctx *c, const jargs *a, jv v) {
    if (v.t == JV_UNDEF) return jv_list_new(c, 0);
    if (v.t != JV_DICT && v.t != JV_NS) FAIL(c, a, "items: expected a dict, got %s", jv_type_name(&v));
    jv r = jv_list_new(c, v.u.d->n);
    for (size_t i = 0; i < v.u.d->n; i++) {
        jv pair = jv_list_new(c, 2);
        pair.u.l->tuple = true;
        jlist_push(c, pair.u.l, jv_str(v.u.d->k[i]));
        jlist_push(c, pair.u.l, v.u.d->v[i]);
        jlist_push(c, r.u.l, pair);
    }
    return r;
}

static jv parse_number(jctx *c, jv v, bool want_float, int base, jv dflt) {
    (void)c;
    switch (v.t) {
    case JV_INT: return want_float ? jv_float((double)v.u.i) : v;
    case JV_BOOL: return want_float ? jv_float(v.u.b) : jv_int(v.u.b);
    case JV_FLOAT:
        if (want_float) return v;
        if (!(fabs(v.u.f) < 9.2e18)) return dflt;
        return jv_int((int64_t)v.u.f);
    case JV_STR: {
        char buf[64];
        jstr s = strip(v.u.s, NULL, true, true);
        if (s.n == 0 || s.n >= sizeof buf) return dflt;
        memcpy(buf, s.p, s.n);
        buf[s.n] = 0;
        char *end;
        if (!want_float) {
            long long x = strtoll(buf, &end, base);
            if (*end == 0) return jv_int(x);
            if (base != 10) return dflt;
        }
        double f = strtod(buf, &end);
        if (*end != 0) return dflt;
        return want_float ? jv_float(f) : (fabs(f) < 9.2e18 ? jv_int((int64_t)f) : dflt);
    }
    default: return dflt;
    }
}

/* ---- tests ------------------------------------------------------------- */
bool jinja_test(jctx *c, jstr name, const jv *v, const jargs *a) {
    const jv *arg = jargs_get(a, 0, NULL);
#define IS(n) jstr_eqz(name, n)
    if (IS("defined")) return v->t != JV_UNDEF;
    if (IS("undefined")) return v->t == JV_UNDEF;
    if (IS("none")) return v->t == JV_NONE;
    if (IS("string")) return v->t == JV_STR;
    if (IS("number")) return v->t == JV_INT || v->t == JV_FLOAT;
    if (IS("integer")) return v->t == JV_INT;
    if (IS("float")) return v->t == JV_FLOAT;
    if (IS("boolean")) return v->t == JV_BOOL;
    if (IS("true")) return v->t == JV_BOOL && v->u.b;
    if (IS("false")) return v->t == JV_BOOL && !v->u.b;
    if (IS("mapping")) return v->t == JV_DICT;
    if (IS("iterable")) return v->t == JV_LIST || v->t == JV_STR || v->t == JV_DICT;
    if (IS("sequence")) return v->t == JV_LIST || v->t == JV_STR || v->t == JV_DICT;
    if (IS("callable")) return v->t == JV_MACRO || v->t == JV_FUNC;
    if (IS("odd") || IS("even") || IS("divisibleby")) {
        if (v->t != JV_INT) FAIL(c, a, "test '%.*s' needs an integer, got %s", (int)name.n, name.p, jv_type_name(v));
        if (IS("odd")) return (v->u.i & 1) != 0;
        if (IS("even")) return (v->u.i & 1) == 0;
        int64_t d = arg_int(c, a, 0, "num", "divisibleby", 0);
        if (d == 0) FAIL(c, a, "divisibleby(0)");
        return d == -1 || v->u.i % d == 0;
    }
    if (IS("lower") || IS("upper")) {
        if (v->t != JV_STR) return false;
        jstr m = map_case(c, v->u.s, IS("lower") ? 0 : 1);
        return jstr_eq(m, v->u.s);
    }
    if (IS("eq") || IS("equalto") || IS("==") || IS("ne") || IS("!=") || IS("sameas")) {
        if (!arg) FAIL(c, a, "test '%.*s' needs an argument", (int)name.n, name.p);
        bool eq = jv_equal(v, arg);
        if (IS("sameas")) return eq && v->t == arg->t;
        return (IS("ne") || IS("!=")) ? !eq : eq;
    }
    if (IS("lt") || IS("le") || IS("gt") || IS("ge") || IS("lessthan") || IS("greaterthan")) {
        if (!arg) FAIL(c, a, "test '%.*s' needs an argument", (int)name.n, name.p);
        int r = jv_compare(c, v, arg, a->line, a->col);
        if (IS("lt") || IS("lessthan")) return r < 0;
        if (IS("le")) return r <= 0;
        if (IS("gt") || IS("greaterthan")) return r > 0;
        return r >= 0;
    }
    if (IS("in")) {
        if (!arg) FAIL(c, a, "test 'in' needs an argument");
        if (arg->t == JV_STR && v->t == JV_STR) return find(arg->u.s, v->u.s, 0) != NULL;
        if (arg->t == JV_LIST) {
            for (size_t i = 0; i < arg->u.l->n; i++)
                if (jv_equal(v, &arg->u.l->v[i])) return true;
            return false;
        }
        if ((arg->t == JV_DICT || arg->t == JV_NS) && v->t == JV_STR) return jdict_get(arg->u.d, v->u.s) != NULL;
        return false;
    }
#undef IS
    FAIL(c, a, "unknown test '%.*s'", (int)name.n, name.p);
}

/* select/reject/selectattr/rejectattr */
static jv select_items(jctx *c, const jargs *a, jv list, bool by_attr, bool keep) {
    list = as_list(c, a, list, "select");
    jstr attr = {0};
    size_t tpos = 0;
    if (by_attr) {
        attr = arg_str(c, a, 0, NULL, "selectattr", NULL);
        tpos = 1;
    }
    const jv *test = jargs_get(a, tpos, NULL);
    if (test && test->t != JV_STR) FAIL(c, a, "select: test name must be a string");
    jargs targs = *a;
    /* remaining positional arguments go to the test */
    size_t skip = tpos + (test ? 1 : 0);
    if (skip < a->n) {
        targs.v = a->v + skip;
        targs.kw = a->kw + skip;
        targs.n = a->n - skip;
    } else {
        targs.n = 0;
    }
    jv r = jv_list_new(c, 0);
    for (size_t i = 0; i < list.u.l->n; i++) {
        jv item = list.u.l->v[i];
        jv x = by_attr ? attr_path(c, item, attr) : item;
        bool t = test ? jinja_test(c, test->u.s, &x, &targs) : jv_truthy(&x);
        if (t == keep) jlist_push(c, r.u.l, item);
    }
    return r;
}

/* ---- filters ----------------------------------------------------------- */

/* One filter: v filtered with a's arguments; `what` names it in messages
 * ("filter 'join'"), name is the name it was called by (several share a
 * function). */
typedef jv (*jfilter_fn)(jctx *c, jstr name, jv v, const jargs *a, const char *what);

static jv f_safe(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    /* chat templates render without autoescape */
    if (!jstr_eqz(name, "safe")) FAIL(c, a, "%s: HTML escaping is not supported", what);
    return v;
}

static jv f_default(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)c, (void)name, (void)what;
    const jv *d = jargs_get(a, 0, "default_value");
    bool boolean = arg_bool(a, 1, "boolean", false);
    if (v.t == JV_UNDEF || (boolean && !jv_truthy(&v))) return d ? *d : jv_str(jstr_z(""));
    return v;
}

/* transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False) = json.dumps(...) */
static jv f_tojson(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    jjson_opts o = {.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false),
                    .sort_keys = arg_bool(a, 3, "sort_keys", false)};
    const jv *ind = jargs_get(a, 1, "indent");
    if (ind && ind->t != JV_NONE && ind->t != JV_UNDEF) {
        o.has_indent = true;
        if (ind->t == JV_STR) {
            o.indent = ind->u.s;
        } else if (ind->t == JV_INT || ind->t == JV_BOOL) {
            int64_t w = ind->t == JV_INT ? ind->u.i : ind->u.b;
            if (w > 64) FAIL(c, a, "%s: indent %lld is too wide", what, (long long)w);
            char *sp = jalloc(c, 65);
            memset(sp, ' ', w > 0 ? (size_t)w : 0);
            o.indent = (jstr){sp, w > 0 ? (size_t)w : 0, NULL};
        } else {
            FAIL(c, a, "%s: indent must be an integer or a string, got %s", what, jv_type_name(ind));
        }
    }
    o.item_sep = jstr_z(o.has_indent ? "," : ", ");
    o.key_sep = jstr_z(": ");
    const jv *sep = jargs_get(a, 2, "separators");
    if (sep && sep->t != JV_NONE && sep->t != JV_UNDEF) {
        if (sep->t != JV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != JV_STR || sep->u.l->v[1].t != JV_STR)
            FAIL(c, a, "%s: separators must be a pair of strings", what);
        o.item_sep = sep->u.l->v[0].u.s;
        o.key_sep = sep->u.l->v[1].u.s;
    }
    struct jbuf b = {0};
    jv_to_json(c, &b, &v, &o, 0, a->line, a->col);
    return jv_str(jbuf_take(c, &b));
}

static jv f_string(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name, (void)a, (void)what;
    return jv_str(jv_to_str(c, &v));
}

static jv f_length(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    switch (v.t) {
    case JV_STR: return jv_int((int64_t)n_codepoints(v.u.s));
    case JV_LIST: return jv_int((int64_t)v.u.l->n);
    case JV_DICT:
    case JV_NS: return jv_int((int64_t)v.u.d->n);
    case JV_UNDEF: return jv_int(0);
    default: FAIL(c, a, "%s: a %s has no length", what, jv_type_name(&v));
    }
}

static jv f_list(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    return as_list(c, a, v, what);
}

static jv f_number(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    bool fl = jstr_eqz(name, "float");
    const jv *d = jargs_get(a, 0, "default");
    int64_t base = fl ? 10 : arg_int(c, a, 1, "base", what, 10);
    if (base < 2 || base > 36) FAIL(c, a, "%s: base must be in [2, 36]", what);
    return parse_number(c, v, fl, (int)base, d ? *d : fl ? jv_float(0) : jv_int(0));
}

static jv f_abs(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    if (v.t == JV_INT) {
        if (v.u.i == INT64_MIN) FAIL(c, a, "abs: integer overflow");
        return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
    FAIL(c, a, "%s: expected a number, got %s", what, jv_type_name(&v));
}

static jv f_round(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    int64_t prec = arg_int(c, a, 0, "precision", what, 0);
    jstr method = arg_str(c, a, 1, "method", what, "common");
    if (v.t != JV_INT && v.t != JV_FLOAT) FAIL(c, a, "%s: expected a number, got %s", what, jv_type_name(&v));
    if (prec < 0 || prec > 15) FAIL(c, a, "%s: precision out of range", what);
    double x = v.t == JV_INT ? (double)v.u.i : v.u.f, m = pow(10, (double)prec);
    double r = jstr_eqz(method, "floor")  ? floor(x * m) / m
               : jstr_eqz(method, "ceil") ? ceil(x * m) / m
                                          : nearbyint(x * m) / m; /* Python's round: half to even */
    return jv_float(r);
}

static jv f_items(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name, (void)what;
    return items_of(c, a, v);
}

static jv f_dictsort(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    sort_opts o = {.case_sensitive = arg_bool(a, 0, "case_sensitive", false), .by = 0};
    jstr by = arg_str(c, a, 1, "by", what, "key");
    o.by = jstr_eqz(by, "value") ? 1 : 0;
    return sorted(c, a, items_of(c, a, v), &o, arg_bool(a, 2, "reverse", false));
}

static jv f_select(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)what;
    bool by_attr = jstr_eqz(name, "selectattr") || jstr_eqz(name, "rejectattr");
    return select_items(c, a, v, by_attr, jstr_eqz(name, "select") || jstr_eqz(name, "selectattr"));
}

static jv f_map(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    jv list = as_list(c, a, v, what);
    jv r = jv_list_new(c, list.u.l->n);
    const jv *attr = jargs_get(a, 99, "attribute");
    if (attr) {
        if (attr->t != JV_STR) FAIL(c, a, "%s: attribute must be a string", what);
        const jv *d = jargs_get(a, 99, "default");
        for (size_t i = 0; i < list.u.l->n; i++) {
            jv x = attr_path(c, list.u.l->v[i], attr->u.s);
            jlist_push(c, r.u.l, x.t == JV_UNDEF && d ? *d : x);
        }
        return r;
    }
    jstr fname = arg_str(c, a, 0, NULL, what, NULL);
    jargs fa = *a;
    fa.v = a->n ? a->v + 1 : a->v;
    fa.kw = a->n ? a->kw + 1 : a->kw;
    fa.n = a->n ? a->n - 1 : 0;
    for (size_t i = 0; i < list.u.l->n; i++) jlist_push(c, r.u.l, jinja_filter(c, fname, list.u.l->v[i], &fa));
    return r;
}

static jv f_unique(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    jv list = as_list(c, a, v, what);
    jv r = jv_list_new(c, 0);
    for (size_t i = 0; i < list.u.l->n; i++) {
        bool seen = false;
        for (size_t j = 0; j < r.u.l->n && !seen; j++) seen = jv_equal(&r.u.l->v[j], &list.u.l->v[i]);
        if (!seen) jlist_push(c, r.u.l, list.u.l->v[i]);
    }
    return r;
}

static jv f_sort(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    sort_opts o = {.case_sensitive = arg_bool(a, 1, "case_sensitive", false), .by = -1};
    const jv *attr = jargs_get(a, 2, "attribute");
    if (attr && attr->t == JV_STR) o.attribute = attr->u.s;
    return sorted(c, a, as_list(c, a, v, what), &o, arg_bool(a, 0, "reverse", false));
}

/* sum, min, max */
static jv f_fold(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    bool sum = jstr_eqz(name, "sum"), min = jstr_eqz(name, "min");
    jv list = as_list(c, a, v, what);
    const jv *attr = jargs_get(a, sum ? 0 : 1, "attribute");
    jv acc = sum ? *(jargs_get(a, 1, "start") ? jargs_get(a, 1, "start") : &(jv){.t = JV_INT}) : jv_undef();
    for (size_t i = 0; i < list.u.l->n; i++) {
        jv x = list.u.l->v[i];
        if (attr && attr->t == JV_STR) x = attr_path(c, x, attr->u.s);
        if (sum) {
            if ((acc.t != JV_INT && acc.t != JV_FLOAT) || (x.t != JV_INT && x.t != JV_FLOAT))
                FAIL(c, a, "%s: items must be numbers", what);
            if (acc.t == JV_INT && x.t == JV_INT) {
                int64_t s;
                if (__builtin_add_overflow(acc.u.i, x.u.i, &s)) FAIL(c, a, "%s: integer overflow", what);
                acc = jv_int(s);
            } else {
                acc = jv_float((acc.t == JV_INT ? (double)acc.u.i : acc.u.f) + (x.t == JV_INT ? (double)x.u.i : x.u.f));
            }
        } else if (acc.t == JV_UNDEF || (jv_compare(c, &x, &acc, a->line, a->col) < 0) == min) {
            if (acc.t == JV_UNDEF || !jv_equal(&x, &acc)) acc = x;
        }
    }
    return acc;
}

/* first, last (of a list or a string) */
static jv f_end(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    jv list = as_list(c, a, v, what);
    if (list.u.l->n == 0) return jv_undef();
    return list.u.l->v[jstr_eqz(name, "first") ? 0 : list.u.l->n - 1];
}

static jv f_reverse(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    jv list = as_list(c, a, v, what);
    size_t n = list.u.l->n;
    jv r = jv_list_new(c, n);
    for (size_t i = 0; i < n; i++) jlist_push(c, r.u.l, list.u.l->v[n - 1 - i]);
    if (v.t == JV_STR) {
        struct jbuf b = {0};
        for (size_t i = 0; i < n; i++) jbuf_puts(c, &b, r.u.l->v[i].u.s);
        return jv_str(jbuf_take(c, &b));
    }
    return r;
}

static jv f_join(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    jv list = as_list(c, a, v, what);
    jstr sep = arg_str(c, a, 0, "d", what, "");
    const jv *attr = jargs_get(a, 1, "attribute");
    struct jbuf b = {0};
    for (size_t i = 0; i < list.u.l->n; i++) {
        if (i) jbuf_puts(c, &b, sep);
        jv x = list.u.l->v[i];
        if (attr && attr->t == JV_STR) x = attr_path(c, x, attr->u.s);
        jbuf_puts(c, &b, jv_to_str(c, &x));
    }
    return jv_str(jbuf_take(c, &b));
}

/* ---- string filters (v is a string) ---- */

static jv f_trim(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)c, (void)name, (void)what;
    const jv *chars = jargs_get(a, 0, "chars");
    if (chars && chars->t == JV_STR) return jv_str(strip(v.u.s, &chars->u.s, true, true));
    return jv_str(strip(v.u.s, NULL, true, true));
}

/* upper, lower, capitalize, title */
static jv f_case(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)a, (void)what;
    jstr s = v.u.s;
    if (jstr_eqz(name, "upper")) return jv_str(map_case(c, s, 1));
    if (jstr_eqz(name, "lower")) return jv_str(map_case(c, s, 0));
    if (jstr_eqz(name, "capitalize")) return jv_str(map_case(c, map_case(c, s, 0), 2));
    return jv_str(map_case(c, s, 4)); /* title */
}

static jv f_replace(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    jstr old = arg_str(c, a, 0, "old", what, NULL);
    jstr rep = arg_str(c, a, 1, "new", what, NULL);
    return replace(c, v.u.s, old, rep, arg_int(c, a, 2, "count", what, -1));
}

static jv f_wordcount(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name, (void)what;
    jv w = split(c, a, v.u.s, NULL, -1);
    return jv_int((int64_t)w.u.l->n);
}

static jv f_indent(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    jstr s = v.u.s;
    const jv *wv = jargs_get(a, 0, "width");
    jstr pad = jstr_z("    ");
    if (wv && wv->t == JV_STR) pad = wv->u.s;
    else if (wv && wv->t == JV_INT) {
        if (wv->u.i < 0 || wv->u.i > 1024) FAIL(c, a, "%s: width out of range", what);
        char *p = jalloc(c, (size_t)wv->u.i + 1);
        memset(p, ' ', (size_t)wv->u.i);
        pad = (jstr){p, (size_t)wv->u.i, NULL};
    }
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    struct jbuf b = {0};
    size_t i = 0;
    bool is_first = true;
    while (i <= s.n) {
        size_t j = i;
        while (j < s.n && s.p[j] != '\n') j++;
        bool empty = j == i;
        if ((is_first ? first : true) && (blank || !empty)) jbuf_puts(c, &b, pad);
        jbuf_puts(c, &b, jstr_sub(s, i, j - i));
        if (j < s.n) jbuf_puts(c, &b, jstr_sub(s, j, 1)); /* the string's own newline */
        is_first = false;
        i = j + 1;
    }
    return jv_str(jbuf_take(c, &b));
}

static jv f_center(jctx *c, jstr name, jv v, const jargs *a, const char *what) {
    (void)name;
    jstr s = v.u.s;
    int64_t w = arg_int(c, a, 0, "width", what, 80);
    int64_t len = (int64_t)n_codepoints(s);
    if (w > 4096) FAIL(c, a, "%s: width out of range", what);
    if (w <= len) return v;
    int64_t total = w - len, left = total / 2 + (total & w & 1);
    struct jbuf b = {0};
    for (int64_t k = 0; k < left; k++) jbuf_put(c, &b, " ", 1);
    jbuf_puts(c, &b, s);
    for (int64_t k = 0; k < total - left; k++) jbuf_put(c, &b, " ", 1);
    return jv_str(jbuf_take(c, &b));
}

/* What a filter takes: any value; a list or a string (first, last,
 * reverse: undefined gives undefined, anything else is an error); a string,
 * str(value) of anything else as Jinja2's string filters do (undefined is
 * ""); a string and nothing else (truncate, which is not implemented: an
 * unknown filter on a string). */
typedef enum jfilter_takes { JF_ANY, JF_SEQ, JF_STR, JF_STR_ONLY } jfilter_takes;

static const struct {
    const char *name;
    jfilter_fn fn;
    jfilter_takes takes;
} g_filters[] = {
    {"safe", f_safe, JF_ANY},         {"e", f_safe, JF_ANY},
    {"escape", f_safe, JF_ANY},       {"forceescape", f_safe, JF_ANY},
    {"default", f_default, JF_ANY},   {"d", f_default, JF_ANY},
    {"tojson", f_tojson, JF_ANY},     {"string", f_string, JF_ANY},
    {"length", f_length, JF_ANY},     {"count", f_length, JF_ANY},
    {"list", f_list, JF_ANY},         {"int", f_number, JF_ANY},
    {"float", f_number, JF_ANY},      {"abs", f_abs, JF_ANY},
    {"round", f_round, JF_ANY},       {"items", f_items, JF_ANY},
    {"dictsort", f_dictsort, JF_ANY}, {"select", f_select, JF_ANY},
    {"reject", f_select, JF_ANY},     {"selectattr", f_select, JF_ANY},
    {"rejectattr", f_select, JF_ANY}, {"map", f_map, JF_ANY},
    {"unique", f_unique, JF_ANY},     {"sort", f_sort, JF_ANY},
    {"sum", f_fold, JF_ANY},          {"min", f_fold, JF_ANY},
    {"max", f_fold, JF_ANY},          {"join", f_join, JF_ANY},
    {"first", f_end, JF_SEQ},         {"last", f_end, JF_SEQ},
    {"reverse", f_reverse, JF_SEQ},   {"trim", f_trim, JF_STR},
    {"upper", f_case, JF_STR},        {"lower", f_case, JF_STR},
    {"title", f_case, JF_STR},        {"capitalize", f_case, JF_STR},
    {"replace", f_replace, JF_STR},   {"indent", f_indent, JF_STR},
    {"center", f_center, JF_STR},     {"wordcount", f_wordcount, JF_STR},
    {"truncate", NULL, JF_STR_ONLY},
};

jv jinja_filter(jctx *c, jstr name, jv v, const jargs *a) {
    char what[48];
    snprintf(what, sizeof what, "filter '%.*s'", (int)(name.n > 30 ? 30 : name.n), name.p);
    for (size_t k = 0; k < sizeof g_filters / sizeof g_filters[0]; k++) {
        if (!jstr_eqz(name, g_filters[k].name)) continue;
        switch (g_filters[k].takes) {
        case JF_ANY: break;
        case JF_SEQ:
            if (v.t == JV_LIST || v.t == JV_STR) break;
            if (v.t == JV_UNDEF) return jv_undef();
            FAIL(c, a, "%s: expected a list or string, got %s", what, jv_type_name(&v));
        case JF_STR:
            if (v.t != JV_STR) v = jv_str(jv_to_str(c, &v));
            break;
        case JF_STR_ONLY:
            if (v.t != JV_STR) FAIL(c, a, "%s: expected a string, got %s", what, jv_type_name(&v));
            break;
        }
        if (!g_filters[k].fn) break;
        return g_filters[k].fn(c, name, v, a, what);
    }
    FAIL(c, a, "unknown filter '%.*s'", (int)name.n, name.p);
}

/* ---- methods ----------------------------------------------------------- */
jv jinja_method(jctx *c, jv obj, jstr name, const jargs *a) {
#define IS(n) jstr_eqz(name, n)
    if (obj.t == JV_STR) {
        jstr s = obj.u.s;
        if (IS("strip") || IS("lstrip") || IS("rstrip")) {
            const jv *chars = jargs_get(a, 0, "chars");
            bool l = !IS("rstrip"), r = !IS("lstrip");
            if (chars && chars->t == JV_STR) return jv_str(strip(s, &chars->u.s, l, r));
            if (chars && chars->t != JV_NONE && chars->t != JV_UNDEF)
                FAIL(c, a, "%.*s: argument must be a string", (int)name.n, name.p);
            return jv_str(strip(s, NULL, l, r));
        }
        if (IS("split")) return split(c, a, s, jargs_get(a, 0, "sep"), arg_int(c, a, 1, "maxsplit", "split", -1));
        if (IS("rsplit")) return rsplit(c, a, s, jargs_get(a, 0, "sep"), arg_int(c, a, 1, "maxsplit", "rsplit", -1));
        if (IS("startswith") || IS("endswith"))
            return jv_bool(prefix_match(c, a, s, jargs_get(a, 0, "prefix"), IS("endswith")));
        if (IS("upper")) return jv_str(map_case(c, s, 1));
        if (IS("lower")) return jv_str(map_case(c, s, 0));
        if (IS("title")) return jv_str(map_case(c, s, 3));
        if (IS("capitalize")) return jv_str(map_case(c, map_case(c, s, 0), 2));
        if (IS("replace"))
            return replace(c, s, arg_str(c, a, 0, "old", "replace", NULL), arg_str(c, a, 1, "new", "replace", NULL),
                           arg_int(c, a, 2, "count", "replace", -1));
        if (IS("find") || IS("count") || IS("index")) {
            jstr sub = arg_str(c, a, 0, "sub", "find", NULL);
            if (IS("count")) {
                int64_t n = 0;
                if (sub.n == 0) return jv_int((int64_t)n_codepoints(s) + 1);
                for (const char *h = find(s, sub, 0); h; h = find(s, sub, (size_t)(h - s.p) + sub.n)) n++;
                return jv_int(n);
            }
            const char *h = find(s, sub, 0);
            if (!h && IS("index")) FAIL(c, a, "index: substring not found");
            return jv_int(h ? (int64_t)n_codepoints(jstr_sub(s, 0, (size_t)(h - s.p))) : -1);
        }
        if (IS("join")) {
            const jv *l = jargs_get(a, 0, "iterable");
            if (!l) FAIL(c, a, "join: missing argument");
            jargs ja = {.v = &obj, .kw = &(jstr){0}, .n = 1, .line = a->line, .col = a->col};
            return jinja_filter(c, jstr_z("join"), *l, &ja);
        }
        if (IS("splitlines")) {
            jv r = jv_list_new(c, 0);
            size_t i = 0;
            while (i < s.n) {
                size_t j = i;
                while (j < s.n && s.p[j] != '\n' && s.p[j] != '\r') j++;
                jlist_push(c, r.u.l, jv_str(jstr_sub(s, i, j - i)));
                if (j + 1 < s.n && s.p[j] == '\r' && s.p[j + 1] == '\n') j++;
                i = j + 1;
            }
            return r;
        }
        if (IS("isdigit") || IS("isalpha") || IS("isalnum") || IS("isspace") || IS("islower") || IS("isupper")) {
            if (s.n == 0) return jv_bool(false);
            bool cased = false;
            for (size_t i = 0; i < s.n; i++) {
                unsigned char ch = (unsigned char)s.p[i];
                if (IS("isdigit") && !isdigit(ch)) return jv_bool(false);
                if (IS("isalpha") && !isalpha(ch)) return jv_bool(false);
                if (IS("isalnum") && !isalnum(ch)) return jv_bool(false);
                if (IS("isspace") && !isspace(ch)) return jv_bool(false);
                if (IS("islower") && isupper(ch)) return jv_bool(false);
                if (IS("isupper") && islower(ch)) return jv_bool(false);
                cased = cased || isalpha(ch);
            }
            return jv_bool(IS("islower") || IS("isupper") ? cased : true);
        }
        if (IS("format")) FAIL(c, a, "str.format() is not supported");
    } else if (obj.t == JV_DICT || obj.t == JV_NS) {
        if (IS("items")) return items_of(c, a, obj);
        if (IS("keys") || IS("values")) {
            jv r = jv_list_new(c, obj.u.d->n);
            for (size_t i = 0; i < obj.u.d->n; i++)
                jlist_push(c, r.u.l, IS("keys") ? jv_str(obj.u.d->k[i]) : obj.u.d->v[i]);
            return r;
        }
        if (IS("get")) {
            jstr k = arg_str(c, a, 0, "key", "get", NULL);
            const jv *x = jdict_get(obj.u.d, k);
            if (x) return *x;
            const jv *d = jargs_get(a, 1, "default");
            return d ? *d : jv_none();
        }
    } else if (obj.t == JV_LOOP) {
        if (IS("cycle")) {
            if (a->n == 0) FAIL(c, a, "loop.cycle() needs at least one argument");
            return a->v[obj.u.loop->i % a->n];
        }
    } else if (obj.t == JV_UNDEF) {
        FAIL(c, a, "cannot call method '%.*s' of an undefined value", (int)name.n, name.p);
    }
#undef IS
    FAIL(c, a, "unknown method '%.*s' of a %s", (int)name.n, name.p, jv_type_name(&obj));
}

/* ---- global functions -------------------------------------------------- */
bool jinja_is_global(jstr name) {
    /* Jinja2's default globals and the two transformers adds */
    static const char *const names[] = {"range",  "dict",   "namespace",       "lipsum",
                                        "cycler", "joiner", "raise_exception", "strftime_now"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (jstr_eqz(name, names[i])) return true;
    return false;
}

jv jinja_global_call(jctx *c, jstr name, const jargs *a, bool *found) {
    *found = true;
    if (jstr_eqz(name, "raise_exception")) {
        const jv *m = jargs_get(a, 0, "message");
        jstr s = m ? jv_to_str(c, m) : jstr_z("(no message)");
        FAIL(c, a, "template raised an exception: %.*s", (int)(s.n > 300 ? 300 : s.n), s.p);
    }
    if (jstr_eqz(name, "range")) {
        int64_t start = 0, stop, stp = 1;
        size_t np = 0;
        for (size_t i = 0; i < a->n; i++)
            if (!a->kw[i].n) np++;
        if (np == 1) {
            stop = arg_int(c, a, 0, NULL, "range", 0);
        } else if (np == 2 || np == 3) {
            start = arg_int(c, a, 0, NULL, "range", 0);
            stop = arg_int(c, a, 1, NULL, "range", 0);
            stp = arg_int(c, a, 2, NULL, "range", 1);
        } else {
            FAIL(c, a, "range() takes 1 to 3 arguments");
        }
        if (stp == 0) FAIL(c, a, "range() step must not be zero");
        /* count first: the list is allocated once, at its size */
        uint64_t span = stp > 0 ? (stop > start ? (uint64_t)stop - (uint64_t)start : 0)
                                : (start > stop ? (uint64_t)start - (uint64_t)stop : 0);
        uint64_t step_abs = stp > 0 ? (uint64_t)stp : 0 - (uint64_t)stp;
        uint64_t count = span ? (span - 1) / step_abs + 1 : 0;
        if (count > 1000000) FAIL(c, a, "range() longer than 1000000 items");
        jv r = jv_list_new(c, (size_t)count);
        for (uint64_t k = 0; k < count; k++)
            jlist_push(c, r.u.l, jv_int((int64_t)((uint64_t)start + k * (uint64_t)stp)));
        return r;
    }
    if (jstr_eqz(name, "namespace") || jstr_eqz(name, "dict")) {
        jv r = jv_dict_new(c, jstr_eqz(name, "namespace") ? JV_NS : JV_DICT);
        for (size_t i = 0; i < a->n; i++) {
            if (a->kw[i].n) {
                jdict_set(c, r.u.d, a->kw[i], a->v[i]);
            } else if (a->v[i].t == JV_DICT || a->v[i].t == JV_NS) {
                for (size_t k = 0; k < a->v[i].u.d->n; k++) jdict_set(c, r.u.d, a->v[i].u.d->k[k], a->v[i].u.d->v[k]);
            } else {
                FAIL(c, a, "%.*s() takes keyword arguments or a dict", (int)name.n, name.p);
            }
        }
        return r;
    }
    if (jstr_eqz(name, "strftime_now")) {
        jstr fmt = arg_str(c, a, 0, "format", "strftime_now", NULL);
        char f[128], out[256];
        if (fmt.n >= sizeof f) FAIL(c, a, "strftime_now: format too long");
        memcpy(f, fmt.p, fmt.n);
        f[fmt.n] = 0;
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        size_t n = strftime(out, sizeof out, f, &tm);
        return jv_str(jstr_taint(c, jstr_dup(c, out, n), jstr_has_data(fmt)));
    }
    *found = false;
    return jv_undef();
}
