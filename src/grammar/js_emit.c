/* Nodes to GBNF (js_ir.h).
 *
 * Every node becomes one rule (named after where it is in the schema),
 * emitted once however many times it is used, so recursive schemas are
 * finite grammars.  A BASE is the alternatives of its types:
 *   numbers, strings  the automaton of the admitted texts (fsa_emit), or
 *                     the primitives when nothing constrains them;
 *   arrays            prefix items one by one, then items counted between
 *                     minItems and maxItems (contains: a first matching item);
 *   objects           the named properties in schema order (up to
 *                     JS_ANY_ORDER of them in any order), each optional
 *                     unless required, and between any two of them the
 *                     other properties (additionalProperties, or
 *                     patternProperties by the names' regions); with
 *                     min/maxProperties the rules also count, and with a
 *                     "some property must ..." condition (from not) they
 *                     remember whether it was met.
 * Whitespace between two tokens: none, one space, or a line break and up
 * to 40 spaces or tabs of indent (MaskBench's instances write ", " and
 * ": "; pretty-printed JSON fits too). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/js_ir.h"
#include "grammar/js_number.h"
#include "grammar/regex.h"
#include "util/hash.h"

#define JS_MAX_REGIONS 6    /* patternProperties of one object */
#define JS_MAX_COUNT 64     /* min/maxProperties counted up to */
#define JS_ANY_ORDER 5      /* objects of up to 5 named properties take them in any order */
#define JS_MAX_COUNTED 6000 /* states of a pattern or format counted for min/maxLength */

/* ---- names and primitives ---- */

typedef struct emitter {
    js_ctx *c;
    sbuf *out;
    char **names;
    int32_t *next_i; /* per name: the suffix its next derived name tries first (fresh) */
    int32_t n_names, cap_names;
    int32_t *nhash;
    int32_t hcap;
    fsa_shared hex; /* \uXXXX rules shared by the automata */
} emitter;

static uint64_t str_hash(const char *s) { return tutti_fnv1a(TUTTI_FNV_OFFSET, s, strlen(s)); }

/* The index of name s, or -1. */
static int32_t name_find(const emitter *e, const char *s) {
    if (!e->hcap) return -1;
    uint64_t j = str_hash(s) & (uint64_t)(e->hcap - 1);
    while (e->nhash[j] >= 0) {
        if (!strcmp(e->names[e->nhash[j]], s)) return e->nhash[j];
        j = (j + 1) & (uint64_t)(e->hcap - 1);
    }
    return -1;
}

static int name_add(emitter *e, const char *s) {
    if ((e->n_names + 1) * 2 > e->hcap) {
        int32_t nc = e->hcap ? e->hcap * 2 : 256;
        int32_t *h = malloc(sizeof(int32_t) * (size_t)nc);
        if (!h) return TUTTI_ERR;
        for (int32_t i = 0; i < nc; i++) h[i] = -1;
        for (int32_t i = 0; i < e->n_names; i++) {
            uint64_t j = str_hash(e->names[i]) & (uint64_t)(nc - 1);
            while (h[j] >= 0) j = (j + 1) & (uint64_t)(nc - 1);
            h[j] = i;
        }
        free(e->nhash);
        e->nhash = h, e->hcap = nc;
    }
    if (e->n_names == e->cap_names) {
        int32_t nc = e->cap_names ? e->cap_names * 2 : 64;
        char **a = realloc(e->names, sizeof(char *) * (size_t)nc);
        if (!a) return TUTTI_ERR;
        e->names = a;
        int32_t *ni = realloc(e->next_i, sizeof(int32_t) * (size_t)nc);
        if (!ni) return TUTTI_ERR;
        e->next_i = ni, e->cap_names = nc;
    }
    if (!(e->names[e->n_names] = strdup(s))) return TUTTI_ERR;
    e->next_i[e->n_names] = 1;
    uint64_t j = str_hash(s) & (uint64_t)(e->hcap - 1);
    while (e->nhash[j] >= 0) j = (j + 1) & (uint64_t)(e->hcap - 1);
    e->nhash[j] = e->n_names++;
    return 0;
}

/* A fresh rule name from a hint ([a-zA-Z0-9-] kept, at most 40). */
static int fresh(emitter *e, const char *hint, char *out, size_t cap) {
    char base[48];
    size_t k = 0;
    for (const char *p = hint; *p && k < 40; p++) {
        char ch = *p;
        bool w = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (w) base[k++] = ch;
        else if (k && base[k - 1] != '-') base[k++] = '-';
    }
    while (k && base[k - 1] == '-') k--;
    base[k] = 0;
    if (!k) snprintf(base, sizeof base, "v");
    snprintf(out, cap, "%s", base);
    /* the base remembers the suffixes it has handed out: a schema with
     * 10^5 rules of one hint would otherwise try every earlier suffix
     * again (quadratic: minutes for JSON Schema Store's largest) */
    int32_t bi = name_find(e, out);
    if (bi >= 0) {
        int32_t i = e->next_i[bi];
        do snprintf(out, cap, "%s-%d", base, i++);
        while (name_find(e, out) >= 0);
        e->next_i[bi] = i;
    }
    return name_add(e, out) < 0 ? js_err(e->c, "", "out of memory") : 0;
}

typedef struct prim {
    const char *name, *body, *deps;
} prim;

static const prim k_prims[] = {
    /* a space, or a line break and an indent (pretty-printed JSON): JSON
     * allows any run, but models free to write whitespace get stuck in it */
    {"space", "| \" \" | \"\\r\"? \"\\n\" [ \\t]{0,40}", ""},
    {"boolean", "(\"true\" | \"false\") space", "space"},
    {"integer", "\"-\"? (\"0\" | [1-9] [0-9]*) space", "space"},
    {"number", "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? space", "space"},
    /* one code point: raw, a short escape, \uXXXX but a surrogate, or a surrogate pair */
    {"char",
     "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] "
     "[0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2} ) )",
     ""},
    {"string", "\"\\\"\" char* \"\\\"\" space", "char space"},
    {"null", "\"null\" space", "space"},
    {"value", "object | array | string | number | boolean | null", "object array string number boolean null"},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
     "string space value"},
    {"array", "\"[\" space ( value (\",\" space value)* )? \"]\" space", "value space"},
};

static const char *use_prim(emitter *e, const char *name) {
    for (size_t i = 0; i < sizeof k_prims / sizeof k_prims[0]; i++) {
        const prim *p = &k_prims[i];
        if (strcmp(p->name, name)) continue;
        if (name_find(e, name) >= 0) return name;
        if (name_add(e, name) < 0) {
            e->out->oom = true;
            return name;
        }
        sb_printf(e->out, "%s ::= %s\n", name, p->body);
        for (const char *d = p->deps; *d;) {
            while (*d == ' ') d++;
            const char *x = d;
            while (*x && *x != ' ') x++;
            if (x > d) {
                char dep[32];
                snprintf(dep, sizeof dep, "%.*s", (int)(x - d), d);
                use_prim(e, dep);
            }
            d = x;
        }
        return name;
    }
    return name;
}

static const char k_nothing[] = "[^\\x00-\\U0010FFFF]";

static int emit(emitter *e, js_node *n, const char *hint, char *name, size_t cap);

/* ---- scalars ---- */

static int emit_fsa(emitter *e, const fsa *a, int enc, const char *hint, char *start, size_t cap) {
    char prefix[80];
    if (fresh(e, hint, prefix, sizeof prefix) < 0) return TUTTI_ERR;
    fsa_emit(a, enc, prefix, e->out, start, cap, &e->hex);
    return 0;
}

static int number_alt(emitter *e, js_node *b, const char *name, sbuf *alt) {
    uint32_t t = b->types & (JT_INT | JT_FLOAT);
    if (!t) return 0;
    const char *spc = use_prim(e, "space");
    if (!b->num && t == (JT_INT | JT_FLOAT)) return sb_printf(alt, " | %s", use_prim(e, "number")), 0;
    if (!b->num && t == JT_INT) return sb_printf(alt, " | %s", use_prim(e, "integer")), 0;
    const char *ri = "^-?(?:0|[1-9][0-9]*)$";
    const char *rf = "^-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)$";
    fsa *syn = t == JT_INT     ? rx_compile(ri, strlen(ri), RX_SUBSET)
               : t == JT_FLOAT ? rx_compile(rf, strlen(rf), RX_SUBSET)
                               : num_any(false);
    fsa *d = syn && b->num ? fsa_and(syn, b->num) : syn;
    if (d != syn) fsa_free(syn);
    if (!d) return js_err(e->c, b->path, "%s", tutti_last_error());
    if (!fsa_is_empty(d)) {
        char h[80], start[96];
        snprintf(h, sizeof h, "%s-num", name);
        if (emit_fsa(e, d, FSA_RAW, h, start, sizeof start) < 0) return fsa_free(d), TUTTI_ERR;
        sb_printf(alt, " | %s %s", start, spc);
    }
    fsa_free(d);
    return 0;
}

static int string_alt(emitter *e, js_node *b, const char *name, sbuf *alt) {
    const char *spc = use_prim(e, "space");
    bool len = b->min_len > 0 || b->max_len >= 0;
    if (!b->str) {
        if (!len) return sb_printf(alt, " | %s", use_prim(e, "string")), 0;
        if (b->max_len >= 0 && b->max_len < b->min_len) return 0;
        const char *ch = use_prim(e, "char");
        if (b->max_len < 0) sb_printf(alt, " | \"\\\"\" %s{%lld,} \"\\\"\" %s", ch, (long long)b->min_len, spc);
        else
            sb_printf(alt, " | \"\\\"\" %s{%lld,%lld} \"\\\"\" %s", ch, (long long)b->min_len, (long long)b->max_len,
                      spc);
        return 0;
    }
    /* counting code points inside the automaton multiplies its states:
     * a bound every string of the automaton meets already is not counted
     * (maxLength 255 on a date, minLength 1 on a non-empty pattern) */
    int64_t amin, amax, min_len = b->min_len, max_len = b->max_len;
    if (len && fsa_length_range(b->str, &amin, &amax) < 0) return js_err(e->c, b->path, "out of memory");
    if (len && amin >= min_len) min_len = 0;
    if (len && max_len >= 0 && amax >= 0 && amax <= max_len) max_len = -1;
    len = min_len > 0 || max_len >= 0;
    int64_t top = max_len >= 0 ? max_len : min_len;
    if (len && (int64_t)b->str->n * (top + 1) > JS_MAX_COUNTED) {
        char msg[200];
        snprintf(msg, sizeof msg, "counting to %lld inside a pattern or format of %d states would take over %d states",
                 (long long)top, (int)b->str->n, JS_MAX_COUNTED);
        if (js_unsupported(e->c, b->path, max_len >= 0 ? "maxLength" : "minLength", "%s", msg) < 0) return TUTTI_ERR;
        len = false;
    }
    fsa *d = len ? fsa_length(b->str, min_len, max_len) : b->str;
    if (!d) return js_err(e->c, b->path, "a pattern or format with minLength/maxLength: %s", tutti_last_error());
    if (!fsa_is_empty(d)) {
        char h[80], start[96];
        snprintf(h, sizeof h, "%s-str", name);
        if (emit_fsa(e, d, b->str_canon ? FSA_JSON_CANON : FSA_JSON, h, start, sizeof start) < 0) {
            if (len) fsa_free(d);
            return TUTTI_ERR;
        }
        sb_printf(alt, " | \"\\\"\" %s %s", start, spc);
    }
    if (len) fsa_free(d);
    return 0;
}

/* ---- arrays ---- */

/* The positions from i on of an array with k prefix rules p[], then items. */
static void array_positions(sbuf *o, char (*p)[96], int32_t i, int32_t k, int64_t m, int64_t mx, const char *item,
                            const char *spc) {
    if (i == k) {
        if (!item[0] || (mx >= 0 && mx <= k)) return;
        int64_t lo = m > k ? m - k : 0;
        if (mx < 0) sb_printf(o, " (\",\" %s %s){%lld,}", spc, item, (long long)lo);
        else sb_printf(o, " (\",\" %s %s){%lld,%lld}", spc, item, (long long)lo, (long long)(mx - k));
        return;
    }
    bool opt = i >= m;
    sb_puts(o, opt ? " (" : " ");
    if (i > 0) sb_printf(o, "\",\" %s ", spc);
    sb_puts(o, p[i]);
    array_positions(o, p, i + 1, k, m, mx, item, spc);
    if (opt) sb_puts(o, ")?");
}

/* ---- uniqueItems over a finite set of scalar values ---- */

#define JS_MAX_UNIQUE 8 /* values: 2^8 rules of the sets used */

/* The strings of the finite automaton a from state q (prefix cp[0..n)),
 * appended to out as UTF-8 GBNF-free text; false when there are more
 * than JS_MAX_UNIQUE in all or a is not finite (a loop). */
static bool finite_strings(const fsa *a, int32_t q, uint32_t *cp, int32_t n, int32_t depth, char **out, int32_t *no) {
    if (depth > 64) return false; /* deeper than any string of a finite automaton this small */
    if (a->acc[q]) {
        if (*no >= JS_MAX_UNIQUE) return false;
        sbuf t = {0};
        for (int32_t i = 0; i < n; i++) {
            char u[4];
            uint32_t c = cp[i];
            int l = c < 0x80      ? (u[0] = (char)c, 1)
                    : c < 0x800   ? (u[0] = (char)(0xC0 | c >> 6), u[1] = (char)(0x80 | (c & 63)), 2)
                    : c < 0x10000 ? (u[0] = (char)(0xE0 | c >> 12), u[1] = (char)(0x80 | (c >> 6 & 63)),
                                     u[2] = (char)(0x80 | (c & 63)), 3)
                                  : (u[0] = (char)(0xF0 | c >> 18), u[1] = (char)(0x80 | (c >> 12 & 63)),
                                     u[2] = (char)(0x80 | (c >> 6 & 63)), u[3] = (char)(0x80 | (c & 63)), 4);
            sb_putn(&t, u, (size_t)l);
        }
        sb_putn(&t, "", 0);
        if (t.oom || !t.s) return free(t.s), false;
        out[(*no)++] = t.s;
    }
    for (int32_t i = a->e0[q]; i < a->e0[q + 1]; i++)
        for (uint32_t c = a->edges[i].lo; c <= a->edges[i].hi; c++) {
            if (*no >= JS_MAX_UNIQUE || (uint64_t)a->edges[i].hi - a->edges[i].lo >= JS_MAX_UNIQUE) return false;
            cp[n] = c;
            if (!finite_strings(a, a->edges[i].to, cp, n + 1, depth + 1, out, no)) return false;
        }
    return true;
}

/* Arrays with uniqueItems whose items are a few null/boolean/string
 * values (enum, const): the rule of "the set S of values used so far" is
 * finite (2^K), and the count is |S| (minItems, maxItems).  A string is
 * one value whatever its spelling (each value's rule takes all of its
 * spellings, or the canonical one for generation), so repeats are caught
 * by value as python-jsonschema compares.  Anything else is refused. */
static int unique_alt(emitter *e, js_node *b, const char *name, sbuf *alt) {
    js_ctx *c = e->c;
    js_node *it = b->items ? js_hnf(c, b->items) : c->any;
    if (!it) return TUTTI_ERR;
    char *strs[JS_MAX_UNIQUE + 1];
    int32_t ns = 0;
    uint32_t cp[72];
    bool ok = it->kind == JK_BASE && !b->n_prefix && !b->contains &&
              !(it->types & ~(uint32_t)(JT_NULL | JT_TRUE | JT_FALSE | JT_STR)) &&
              (!(it->types & JT_STR) || (it->str && finite_strings(it->str, 0, cp, 0, 0, strs, &ns)));
    char val[JS_MAX_UNIQUE + 3][128];
    int32_t K = 0;
    for (int32_t i = 0; i < ns && ok; i++) {
        int64_t len = 0;
        for (const unsigned char *p = (const unsigned char *)strs[i]; *p; p++) len += (*p & 0xC0) != 0x80;
        if (len < it->min_len || (it->max_len >= 0 && len > it->max_len)) continue;
        fsa *one = fsa_utf8_literal(strs[i], strlen(strs[i]));
        char h[128], start[96];
        snprintf(h, sizeof h, "%s-u%d", name, (int)K);
        if (!one || emit_fsa(e, one, it->str_canon ? FSA_JSON_CANON : FSA_JSON, h, start, sizeof start) < 0) ok = false;
        else snprintf(val[K++], sizeof val[0], "\"\\\"\" %s", start);
        fsa_free(one);
    }
    for (int32_t i = 0; i < ns; i++) free(strs[i]);
    int32_t n_lit = 0;
    for (int t = 0; t < 3; t++) n_lit += (it->types & (uint32_t)(JT_NULL << t)) != 0;
    if (!ok || K + n_lit > JS_MAX_UNIQUE) {
        if (c->failed) return TUTTI_ERR;
        if (js_unsupported(c, b->path, "uniqueItems",
                           "items must be at most %d null/boolean/string values (enum, const): "
                           "a grammar cannot compare other items with each other",
                           JS_MAX_UNIQUE) < 0)
            return TUTTI_ERR;
        return 1; /* lenient: the array without it */
    }
    static const char *const k_lit[3] = {"\"null\"", "\"true\"", "\"false\""};
    for (int t = 0; t < 3; t++)
        if (it->types & (uint32_t)(JT_NULL << t)) snprintf(val[K++], sizeof val[0], "%s", k_lit[t]);
    const char *spc = use_prim(e, "space");
    int64_t m = b->min_items, mx = b->max_items;
    for (uint32_t set = 0; set < (1u << K); set++) { /* U(S): after the values of S, in any order */
        int32_t cnt = __builtin_popcount(set);
        sbuf body = {0};
        for (int32_t i = 0; i < K && (mx < 0 || cnt < mx); i++)
            if (!(set >> i & 1))
                sb_printf(&body, " | %s%s %s %s %s--u%u", set ? "\",\" " : "", set ? spc : "", val[i], spc, name,
                          set | 1u << i);
        if (cnt >= m) sb_puts(&body, " | \"\"");
        sb_printf(e->out, "%s--u%u ::= %s\n", name, set, body.n ? body.s + 3 : k_nothing);
        if (body.oom) e->out->oom = true;
        free(body.s);
    }
    sb_printf(alt, " | \"[\" %s %s--u0 \"]\" %s", spc, name, spc);
    return 0;
}

static int array_alt(emitter *e, js_node *b, const char *name, sbuf *alt) {
    js_ctx *c = e->c;
    int64_t m = b->min_items, mx = b->max_items;
    if (mx >= 0 && mx < m) return 0;
    if (b->unique && b->items != c->nothing && !(mx >= 0 && mx <= 1)) {
        int rc = unique_alt(e, b, name, alt);
        if (rc <= 0) return rc;
    }
    const char *spc = use_prim(e, "space");
    char item[96] = "", h[96];
    bool no_items = b->items == c->nothing;
    if (!no_items) {
        snprintf(h, sizeof h, "%s-item", name);
        if (emit(e, b->items ? b->items : c->any, h, item, sizeof item) < 0) return TUTTI_ERR;
    }
    if (b->contains) {
        if (b->n_prefix || m > 1 || mx >= 0) {
            if (js_unsupported(c, b->path, "contains", "with prefixItems, minItems above 1 or maxItems") < 0)
                return TUTTI_ERR;
        } else {
            if (no_items) return 0; /* an item is needed and none is allowed */
            char ic[96];
            snprintf(h, sizeof h, "%s-contains", name);
            js_node *both = js_and(c, b->items ? b->items : c->any, b->contains, b->path);
            if (!both || emit(e, both, h, ic, sizeof ic) < 0) return TUTTI_ERR;
            sb_printf(alt, " | \"[\" %s ((%s (\",\" %s %s)* \",\" %s)? %s (\",\" %s %s)*) \"]\" %s", spc, item, spc,
                      item, spc, ic, spc, item, spc);
            return 0;
        }
    }
    int32_t k = b->n_prefix;
    if (mx >= 0 && k > mx) k = (int32_t)mx;
    if (no_items && m > k) return 0;
    char(*p)[96] = calloc((size_t)k + 1, sizeof *p);
    if (!p) return js_err(c, b->path, "out of memory");
    for (int32_t i = 0; i < k; i++) {
        snprintf(h, sizeof h, "%s-%d", name, (int)i);
        if (emit(e, b->prefix[i], h, p[i], sizeof p[i]) < 0) return free(p), TUTTI_ERR;
    }
    sb_printf(alt, " | \"[\" %s", spc);
    if (k > 0) {
        array_positions(alt, p, 0, k, m, mx, no_items ? "" : item, spc);
    } else if (!no_items && mx != 0) {
        if (m == 0) sb_puts(alt, " (");
        sb_printf(alt, " %s", item);
        int64_t lo = m > 0 ? m - 1 : 0;
        if (mx < 0) sb_printf(alt, " (\",\" %s %s){%lld,}", spc, item, (long long)lo);
        else sb_printf(alt, " (\",\" %s %s){%lld,%lld}", spc, item, (long long)lo, (long long)(mx - 1));
        if (m == 0) sb_puts(alt, ")?");
    }
    sb_printf(alt, " \"]\" %s", spc);
    free(p);
    return 0;
}

/* ---- objects ---- */

typedef struct objgen {
    emitter *e;
    js_node *b;
    char name[96];
    const char *spc;
    int32_t n;       /* named properties */
    char (*kv)[96];  /* their pair rules ("" when never present) */
    char (*kvn)[96]; /* ... with a value that meets the need ("" none) */
    int32_t nx;      /* other-name regions */
    char (*xkv)[96], (*xkvn)[96];
    int64_t cnt;    /* counts kept up to cnt; -1: no counting */
    bool any_order; /* positions are the sets of named properties seen */
    int32_t n_pos;  /* positions: n + 1 indices, or 2^n sets */
    uint32_t req;   /* with any_order: the set of the required ones */
    /* loose (validators' reading of a wide object, js_ctx.open_objects):
     * the optional named properties in any order, a name seen again
     * checked again; positions track only the required ones: the set seen
     * (n_req <= JS_ANY_ORDER) or how many of them in schema order */
    bool loose;
    int32_t n_req, *reqs; /* the required ones' indices, schema order */
    bool need;
    js_node *add;  /* the value of other names (NULL: any) */
    uint8_t *made; /* R rules written, by index */
    int32_t *todo;
    int32_t n_todo;
} objgen;

static void gbnf_literal(sbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"') sb_puts(b, "\\\"");
        else if (*p == '\\') sb_puts(b, "\\\\");
        else if (*p < 0x20 || *p == 0x7F) sb_printf(b, "\\x%02X", *p);
        else sb_putn(b, (const char *)p, 1);
    }
    sb_puts(b, "\"");
}

/* R(pos, count, met, started): the rest of the object from position pos
 * (the next named property in schema order, or with any_order the set of
 * the named properties already written). */
static int32_t r_index(const objgen *g, int32_t pos, int64_t cnt, int met, int st) {
    int64_t nc = g->cnt < 0 ? 1 : g->cnt + 1;
    return (int32_t)((((int64_t)pos * nc + (g->cnt < 0 ? 0 : cnt)) * 2 + met) * 2 + st);
}

static void r_name(const objgen *g, int32_t idx, char *out, size_t cap) {
    snprintf(out, cap, "%s--r%d", g->name, (int)idx);
}

static void r_ref(objgen *g, sbuf *o, int32_t pos, int64_t cnt, int met, int st) {
    int32_t idx = r_index(g, pos, cnt, met, st);
    char nm[128];
    r_name(g, idx, nm, sizeof nm);
    sb_printf(o, " %s", nm);
    if (!g->made[idx]) g->made[idx] = 1, g->todo[g->n_todo++] = idx;
}

/* The alternatives writing named property i next, then going on at pos. */
static void r_named(objgen *g, sbuf *body, const char *sep, int32_t i, int32_t pos, int64_t nxt, int met) {
    if (g->kv[i][0]) sb_printf(body, " | %s%s", sep, g->kv[i]), r_ref(g, body, pos, nxt, met, 1);
    if (g->kvn[i][0] && !met) sb_printf(body, " | %s%s", sep, g->kvn[i]), r_ref(g, body, pos, nxt, 1, 1);
}

static void r_rule(objgen *g, int32_t idx) {
    int64_t nc = g->cnt < 0 ? 1 : g->cnt + 1;
    int st = idx % 2, met = (idx / 2) % 2;
    int64_t cnt = (idx / 4) % nc;
    int32_t pos = (int32_t)(idx / 4 / nc);
    const js_node *b = g->b;
    sbuf body = {0};
    char sep[64];
    snprintf(sep, sizeof sep, "%s", st ? "\",\" " : "");
    if (st) snprintf(sep, sizeof sep, "\",\" %s ", g->spc);
    bool room = b->max_props < 0 || cnt < b->max_props;
    int64_t nxt = g->cnt < 0 ? 0 : cnt + 1 > g->cnt ? g->cnt : cnt + 1;
    bool end;
    if (g->loose) {
        bool set = g->n_req <= JS_ANY_ORDER;
        for (int32_t k = 0, r = 0; k < g->n && room; k++) {
            if (!b->props[k].required) {
                r_named(g, &body, sep, k, pos, nxt, met);
                continue;
            }
            if (set && !((uint32_t)pos >> r & 1)) r_named(g, &body, sep, k, pos | (int32_t)(1u << r), nxt, met);
            if (!set && r == pos) r_named(g, &body, sep, k, pos + 1, nxt, met);
            r++;
        }
        end = set ? pos == (int32_t)((1u << g->n_req) - 1) : pos == g->n_req;
    } else if (g->any_order) {
        for (int32_t i = 0; i < g->n && room; i++)
            if (!((uint32_t)pos >> i & 1)) r_named(g, &body, sep, i, pos | (int32_t)(1u << i), nxt, met);
        end = ((uint32_t)pos & g->req) == g->req;
    } else {
        if (pos < g->n) {
            if (room) r_named(g, &body, sep, pos, pos + 1, nxt, met);
            if (!b->props[pos].required) sb_puts(&body, " |"), r_ref(g, &body, pos + 1, cnt, met, st);
        }
        end = pos == g->n;
    }
    for (int32_t r = 0; r < g->nx && room; r++) {
        if (g->xkv[r][0]) sb_printf(&body, " | %s%s", sep, g->xkv[r]), r_ref(g, &body, pos, nxt, met, 1);
        if (g->xkvn[r][0] && !met) sb_printf(&body, " | %s%s", sep, g->xkvn[r]), r_ref(g, &body, pos, nxt, 1, 1);
    }
    if (end && (g->cnt < 0 || cnt >= b->min_props) && (!g->need || met)) sb_puts(&body, " | \"\"");
    char nm[128];
    r_name(g, idx, nm, sizeof nm);
    sb_printf(g->e->out, "%s ::= %s\n", nm, body.n ? body.s + 3 : k_nothing);
    if (body.oom) g->e->out->oom = true;
    free(body.s);
}

/* The pair rule key ":" value. */
static int pair_rule(objgen *g, const char *key_text, const fsa *key_fsa, js_node *v, const char *hint, char *out) {
    emitter *e = g->e;
    char vr[96], h[128];
    snprintf(h, sizeof h, "%s-v", hint);
    if (emit(e, v, h, vr, sizeof vr) < 0) return TUTTI_ERR;
    sbuf k = {0};
    if (key_text) {
        cJSON *ks = cJSON_CreateString(key_text);
        char *js = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        if (!js) return js_err(e->c, g->b->path, "out of memory");
        gbnf_literal(&k, js);
        free(js);
    } else {
        char start[96];
        snprintf(h, sizeof h, "%s-k", hint);
        if (emit_fsa(e, key_fsa, FSA_JSON, h, start, sizeof start) < 0) return TUTTI_ERR;
        sb_printf(&k, "\"\\\"\" %s", start);
    }
    if (fresh(e, hint, out, 96) < 0) return free(k.s), TUTTI_ERR;
    sb_printf(e->out, "%s ::= %s %s \":\" %s %s\n", out, k.s ? k.s : "\"\"", g->spc, g->spc, vr);
    free(k.s);
    return 0;
}

/* The names outside the named properties and their values, split by which
 * patterns hold them. */
static int regions(objgen *g) {
    js_ctx *c = g->e->c;
    js_node *b = g->b;
    if (b->n_pats > JS_MAX_REGIONS)
        return js_unsupported(c, b->path, "patternProperties", "more than %d patterns on one object", JS_MAX_REGIONS);
    fsa *named = js_named_fsa(b);
    fsa *rest = named ? fsa_not(named) : NULL;
    fsa_free(named);
    if (rest && b->names) {
        fsa *x = fsa_and(rest, b->names);
        fsa_free(rest);
        rest = x;
    }
    if (!rest) return js_err(c, b->path, "%s", tutti_last_error());
    int32_t nsub = 1 << b->n_pats;
    g->xkv = calloc((size_t)nsub * 2, sizeof *g->xkv);
    g->xkvn = calloc((size_t)nsub * 2, sizeof *g->xkvn);
    if (!g->xkv || !g->xkvn) return fsa_free(rest), js_err(c, b->path, "out of memory");
    for (int32_t s = 0; s < nsub && !c->failed; s++) {
        fsa *key = fsa_copy(rest);
        js_node *v = s ? NULL : (g->add ? g->add : c->any);
        for (int32_t j = 0; j < b->n_pats && key; j++) {
            fsa *x = (s >> j) & 1 ? fsa_and(key, b->pats[j].key) : fsa_minus(key, b->pats[j].key);
            fsa_free(key);
            key = x;
            if ((s >> j) & 1) v = v ? js_and(c, v, b->pats[j].node, b->path) : b->pats[j].node;
        }
        if (!key) return fsa_free(rest), js_err(c, b->path, "%s", tutti_last_error());
        if (fsa_is_empty(key) || v == c->nothing) {
            fsa_free(key);
            continue;
        }
        char hint[128];
        snprintf(hint, sizeof hint, "%s-x%d", g->name, (int)g->nx);
        int rc = pair_rule(g, NULL, key, v, hint, g->xkv[g->nx]);
        if (rc == 0 && g->need) {
            fsa *kn = fsa_and(key, b->need_key);
            if (kn && !fsa_is_empty(kn)) {
                snprintf(hint, sizeof hint, "%s-xn%d", g->name, (int)g->nx);
                rc = pair_rule(g, NULL, kn, js_and(c, v, b->need_val ? b->need_val : c->any, b->path), hint,
                               g->xkvn[g->nx]);
            }
            fsa_free(kn);
        }
        fsa_free(key);
        if (rc < 0) return fsa_free(rest), TUTTI_ERR;
        g->nx++;
    }
    fsa_free(rest);
    return c->failed ? TUTTI_ERR : 0;
}

static int object_alt(emitter *e, js_node *b, const char *name, sbuf *alt) {
    js_ctx *c = e->c;
    if (b->max_props >= 0 && b->max_props < b->min_props) return 0;
    objgen g = {.e = e, .b = b, .n = b->n_props, .spc = use_prim(e, "space"), .need = b->need_key != NULL};
    snprintf(g.name, sizeof g.name, "%s", name);
    /* generation (js_ctx.open_objects false): no additionalProperties
     * means no other names once the schema names some, as llama.cpp's
     * grammars do (an allOf's branches are merged first, so the names of
     * every branch stay allowed); never where minProperties needs more */
    g.add = b->additional;
    if (!c->open_objects && !b->additional && !b->add_open && (b->n_props || b->n_pats) &&
        (b->n_pats || b->min_props <= b->n_props))
        g.add = c->nothing;
    int rc = TUTTI_ERR;
    g.kv = calloc((size_t)g.n + 1, sizeof *g.kv);
    g.kvn = calloc((size_t)g.n + 1, sizeof *g.kvn);
    if (!g.kv || !g.kvn) goto done;
    for (int32_t i = 0; i < g.n; i++) {
        js_prop *p = &b->props[i];
        if (p->node == c->nothing) {
            if (p->required) { /* a required property that no value fits: no object */
                rc = 0;
                goto done;
            }
            continue;
        }
        char hint[128];
        snprintf(hint, sizeof hint, "%s-%s", name, p->name);
        if (pair_rule(&g, p->name, NULL, p->node, hint, g.kv[i]) < 0) goto done;
        if (g.need && fsa_accepts_utf8(b->need_key, p->name, strlen(p->name))) {
            snprintf(hint, sizeof hint, "%s-%s-n", name, p->name);
            if (pair_rule(&g, p->name, NULL, js_and(c, p->node, b->need_val ? b->need_val : c->any, b->path), hint,
                          g.kvn[i]) < 0)
                goto done;
        }
    }
    if (regions(&g) < 0) goto done;
    g.cnt = -1;
    if (b->min_props > 0 || b->max_props >= 0) {
        g.cnt = b->max_props >= 0 ? b->max_props : b->min_props;
        if (g.cnt > JS_MAX_COUNT) {
            if (js_unsupported(c, b->path, b->max_props >= 0 ? "maxProperties" : "minProperties", "counts above %d",
                               JS_MAX_COUNT) < 0)
                goto done;
            g.cnt = -1;
        }
    }
    /* JSON objects are unordered: a few named properties are taken in any
     * order (MaskBench's instances do not always follow the schema's); more
     * would take 2^n positions, so they follow the schema's order */
    g.any_order = g.n >= 2 && g.n <= JS_ANY_ORDER;
    g.n_pos = g.any_order ? 1 << g.n : g.n + 1;
    /* wider objects as validators read them (any order: MaskBench's
     * instances do not always follow the schema's), where a repeated name
     * cannot make a wrong document pass: Python's json keeps a repeated
     * name's last value and every value is checked here, so repeats only
     * reject more; not with counts or a "some property must" condition,
     * which a repeat would fool.  The key position is then one state
     * whatever was written before (one mask), not one per property. */
    g.loose = c->open_objects && g.n > JS_ANY_ORDER && g.cnt < 0 && !g.need;
    if (g.loose) {
        g.reqs = malloc(sizeof(int32_t) * (size_t)g.n);
        if (!g.reqs) goto done;
        for (int32_t i = 0; i < g.n; i++)
            if (b->props[i].required) g.reqs[g.n_req++] = i;
        g.n_pos = g.n_req <= JS_ANY_ORDER ? 1 << g.n_req : g.n_req + 1;
    }
    for (int32_t i = 0; i < g.n && g.any_order; i++)
        if (b->props[i].required) g.req |= 1u << i;
    int64_t total = (int64_t)g.n_pos * (g.cnt < 0 ? 1 : g.cnt + 1) * 4;
    if (total > 200000) {
        rc = js_err(c, b->path, "the object's grammar is too large (%lld rules)", (long long)total);
        goto done;
    }
    g.made = calloc((size_t)total, 1);
    g.todo = malloc(sizeof(int32_t) * (size_t)total);
    if (!g.made || !g.todo) goto done;
    sb_printf(alt, " | \"{\" %s", g.spc);
    r_ref(&g, alt, 0, 0, 0, 0);
    sb_printf(alt, " \"}\" %s", g.spc);
    while (g.n_todo) r_rule(&g, g.todo[--g.n_todo]);
    rc = 0;
done:
    if (rc < 0 && !c->failed) js_err(c, b->path, "out of memory");
    free(g.kv), free(g.kvn), free(g.xkv), free(g.xkvn), free(g.made), free(g.todo), free(g.reqs);
    return rc;
}

/* ---- nodes ---- */

static int emit(emitter *e, js_node *n, const char *hint, char *name, size_t cap) {
    js_ctx *c = e->c;
    js_node *h = js_hnf(c, n);
    if (!h) return TUTTI_ERR;
    if (h == c->any) {
        snprintf(name, cap, "%s", use_prim(e, "value"));
        return 0;
    }
    if (h->rule) {
        snprintf(name, cap, "%s", h->rule);
        return 0;
    }
    if (--c->budget < 0) return js_err(c, h->path, "the schema is too large (over %d nodes and rules)", 400000);
    if (e->out->n > JS_MAX_GBNF) return js_err(c, h->path, "the grammar would be over %d MB", JS_MAX_GBNF >> 20);
    if (fresh(e, hint, name, cap) < 0 || !(h->rule = strdup(name))) return js_err(c, h->path, "out of memory");
    sbuf alt = {0};
    int rc = 0;
    if (h->kind == JK_OR) {
        for (int32_t i = 0; i < h->n_kid && rc == 0; i++) {
            char kn[96], kh[120];
            snprintf(kh, sizeof kh, "%s-%d", name, (int)i);
            rc = emit(e, h->kid[i], kh, kn, sizeof kn);
            if (rc == 0) sb_printf(&alt, " | %s", kn);
        }
    } else {
        const char *spc = use_prim(e, "space");
        if (h->types & JT_NULL) sb_printf(&alt, " | \"null\" %s", spc);
        if ((h->types & JT_TRUE) && (h->types & JT_FALSE)) sb_printf(&alt, " | %s", use_prim(e, "boolean"));
        else if (h->types & (JT_TRUE | JT_FALSE))
            sb_printf(&alt, " | \"%s\" %s", h->types & JT_TRUE ? "true" : "false", spc);
        rc = number_alt(e, h, name, &alt);
        if (rc == 0 && (h->types & JT_STR)) rc = string_alt(e, h, name, &alt);
        if (rc == 0 && (h->types & JT_ARR)) rc = array_alt(e, h, name, &alt);
        if (rc == 0 && (h->types & JT_OBJ)) rc = object_alt(e, h, name, &alt);
    }
    if (rc == 0) sb_printf(e->out, "%s ::= %s\n", name, alt.n ? alt.s + 3 : k_nothing);
    if (alt.oom) e->out->oom = true;
    free(alt.s);
    return rc;
}

int js_emit(js_ctx *c, js_node *n, const char *hint, sbuf *out, char *name, size_t cap) {
    emitter e = {.c = c, .out = out};
    snprintf(e.hex.base, sizeof e.hex.base, "esc-"); /* esc--N */
    /* fresh names never hold "--": the automata's states (P--N, P--e-N),
     * an object's rules (P--rN)
     * and the shared escapes (esc--N) are named from a fresh P or "esc"
     * and so never clash with another name */
    name_add(&e, "root");
    name_add(&e, "esc");
    use_prim(&e, "space"); /* root ::= space value */
    int rc = emit(&e, n, hint, name, cap);
    for (int32_t i = 0; i < e.n_names; i++) free(e.names[i]);
    free(e.names), free(e.next_i), free(e.nhash);
    fsa_shared_free(&e.hex);
    if (rc == 0 && out->oom) rc = js_err(c, "", "out of memory");
    return rc;
}
