/* JSON schema -> GBNF.
 *
 * The rule shapes follow llama.cpp's json-schema-to-grammar (read for its
 * rules, written anew): the same `space` rule between tokens, the same
 * primitives (integral-part of at most 16 digits, the `char` of a JSON
 * string, date/time formats, uuid), objects as "{" then the required
 * properties in schema order, then the optional ones in order, each at most
 * once, then additional properties when additionalProperties allows them
 * (absent = not allowed, as llama.cpp), arrays with minItems/maxItems as a
 * bounded repetition, prefixItems as a tuple, integer ranges as digit
 * ranges.  So any text the grammar accepts is valid against the schema
 * (checked by python3-jsonschema in tests/test_grammar_gen.c).
 *
 * Every keyword is either handled, or (annotations) deliberately ignored,
 * or an error with its JSON pointer: a schema is never silently weakened. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/buf.h"
#include "util/error.h"

#define JS_MAX_DEPTH 64

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n) {
    if (!b->oom && tutti_buf_append(&b->s, &b->n, &b->cap, s, n) < 0) b->oom = true;
}
static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }
static void sb_printf(sbuf *b, const char *fmt, ...) TUTTI_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        sb_putn(b, tmp, (size_t)k);
        return;
    }
    char *big = malloc((size_t)k + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    sb_putn(b, big, (size_t)k);
    free(big);
}

typedef struct conv {
    cJSON *root;
    sbuf out;          /* the rules */
    char **names;      /* rules emitted or being emitted */
    int32_t n_names, cap_names;
    char **refs;       /* $ref targets already given a rule: refs[i] -> ref_rule[i] */
    char **ref_rule;
    int32_t n_refs, cap_refs;
    int depth;
    bool failed;
} conv;

static int jerr(conv *c, const char *path, const char *fmt, ...) TUTTI_PRINTF(3, 4);
static int jerr(conv *c, const char *path, const char *fmt, ...) {
    if (c->failed) return TUTTI_ERR;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->failed = true;
    return tutti_set_error("json schema: at %s: %s", path[0] ? path : "/", msg);
}

static bool has_name(const conv *c, const char *n) {
    for (int32_t i = 0; i < c->n_names; i++)
        if (!strcmp(c->names[i], n)) return true;
    return false;
}

static int add_name(conv *c, const char *n) {
    if (c->n_names == c->cap_names) {
        int32_t nc = c->cap_names ? c->cap_names * 2 : 32;
        char **nn = realloc(c->names, sizeof(char *) * (size_t)nc);
        if (!nn) return TUTTI_ERR;
        c->names = nn, c->cap_names = nc;
    }
    if (!(c->names[c->n_names] = strdup(n))) return TUTTI_ERR;
    c->n_names++;
    return 0;
}

/* A fresh rule name from a hint: [a-zA-Z0-9-] only, made unique. */
static void fresh_name(conv *c, const char *hint, char *out, size_t cap) {
    char base[128];
    size_t k = 0;
    /* room for a "-N" suffix within cap: a cut suffix would repeat forever */
    size_t lim = cap > 24 ? cap - 16 : 8;
    if (lim > sizeof base) lim = sizeof base;
    for (const char *p = hint; *p && k + 1 < lim; p++) {
        char ch = *p;
        bool w = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        base[k++] = w ? ch : '-';
    }
    base[k] = 0;
    if (!k) snprintf(base, sizeof base, "r");
    snprintf(out, cap, "%s", base);
    for (int i = 1; has_name(c, out); i++) snprintf(out, cap, "%s-%d", base, i);
}

static void emit_rule(conv *c, const char *name, const char *body) {
    sb_printf(&c->out, "%s ::= %s\n", name, body);
}

/* ---- primitives (llama.cpp's shapes) ---- */

typedef struct prim {
    const char *name, *body, *deps;
} prim;

static const prim k_prims[] = {
    {"space", "| \" \" | \"\\n\" [ \\t]{0,20}", ""}, /* llama.cpp 0.7.0 (the oracle) */
    {"boolean", "(\"true\" | \"false\") space", "space"},
    {"decimal-part", "[0-9]{1,16}", ""},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", ""},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space",
     "integral-part decimal-part space"},
    {"integer", "(\"-\"? integral-part) space", "integral-part space"},
    {"value", "object | array | string | number | boolean | null", "object array string number boolean null"},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
     "string space value"},
    {"array", "\"[\" space ( value (\",\" space value)* )? \"]\" space", "value space"},
    {"uuid",
     "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
     "[0-9a-fA-F]{12} \"\\\"\" space",
     "space"},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})", ""},
    {"string", "\"\\\"\" char* \"\\\"\" space", "char space"},
    {"null", "\"null\" space", "space"},
    {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", ""},
    {"time",
     "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | ( \"+\" | \"-\" "
     ") ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
     ""},
    {"date-time", "date \"T\" time", "date time"},
    {"date-string", "\"\\\"\" date \"\\\"\" space", "date space"},
    {"time-string", "\"\\\"\" time \"\\\"\" space", "time space"},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\" space", "date-time space"},
};

/* Emits primitive `name` and what it uses (once); returns its name. */
static const char *use_prim(conv *c, const char *name) {
    for (size_t i = 0; i < sizeof k_prims / sizeof k_prims[0]; i++) {
        const prim *p = &k_prims[i];
        if (strcmp(p->name, name)) continue;
        if (has_name(c, name)) return name;
        if (add_name(c, name) < 0) {
            c->out.oom = true;
            return name;
        }
        emit_rule(c, name, p->body);
        /* the rules it uses, space-separated names */
        for (const char *d = p->deps; *d;) {
            while (*d == ' ') d++;
            const char *e = d;
            while (*e && *e != ' ') e++;
            if (e > d) {
                char dep[64];
                snprintf(dep, sizeof dep, "%.*s", (int)(e - d), d);
                use_prim(c, dep);
            }
            d = e;
        }
        return name;
    }
    return name;
}

/* ---- GBNF literals ---- */

/* Appends a GBNF literal for the bytes s[0..n) (UTF-8 kept, specials escaped). */
static void gbnf_literal(sbuf *b, const char *s, size_t n) {
    sb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"') sb_puts(b, "\\\"");
        else if (ch == '\\') sb_puts(b, "\\\\");
        else if (ch == '\n') sb_puts(b, "\\n");
        else if (ch == '\t') sb_puts(b, "\\t");
        else if (ch == '\r') sb_puts(b, "\\r");
        else if (ch < 0x20 || ch == 0x7F) sb_printf(b, "\\x%02X", ch);
        else sb_putn(b, (const char *)&ch, 1);
    }
    sb_puts(b, "\"");
}

/* The GBNF of one JSON value exactly as cJSON prints it, then space. */
static int const_expr(conv *c, const cJSON *v, sbuf *b, const char *path) {
    char *txt = cJSON_PrintUnformatted(v);
    if (!txt) return jerr(c, path, "out of memory");
    gbnf_literal(b, txt, strlen(txt));
    free(txt);
    sb_puts(b, " ");
    sb_puts(b, use_prim(c, "space"));
    return 0;
}

/* ---- integer ranges ---- */

#define JS_INT_MAX 9999999999999999LL /* 16 digits: llama.cpp's integral-part */

/* Digit strings a <= b of the same length: alternatives matching exactly
 * the numbers in [a, b] (as digit strings of that length). */
static void digit_range(sbuf *b, const char *a, const char *z, int len) {
    if (len == 0) return;
    if (!strncmp(a, z, (size_t)len)) {
        sb_printf(b, "\"%.*s\"", len, a);
        return;
    }
    if (a[0] == z[0]) {
        sb_printf(b, "\"%c\" (", a[0]);
        digit_range(b, a + 1, z + 1, len - 1);
        sb_puts(b, ")");
        return;
    }
    bool a_zero = true, z_nine = true;
    for (int i = 1; i < len; i++) a_zero &= a[i] == '0', z_nine &= z[i] == '9';
    char lo = a_zero ? a[0] : (char)(a[0] + 1), hi = z_nine ? z[0] : (char)(z[0] - 1);
    bool first = true;
    sb_puts(b, "(");
    if (!a_zero) {
        char nines[32];
        memset(nines, '9', sizeof nines);
        sb_printf(b, "\"%c\" (", a[0]);
        digit_range(b, a + 1, nines, len - 1);
        sb_puts(b, ")");
        first = false;
    }
    if (lo <= hi) {
        if (!first) sb_puts(b, " | ");
        if (lo == hi) sb_printf(b, "[%c]", lo);
        else sb_printf(b, "[%c-%c]", lo, hi);
        if (len > 1) sb_printf(b, " [0-9]{%d}", len - 1);
        first = false;
    }
    if (!z_nine) {
        char zeros[32];
        memset(zeros, '0', sizeof zeros);
        if (!first) sb_puts(b, " | ");
        sb_printf(b, "\"%c\" (", z[0]);
        digit_range(b, zeros, z + 1, len - 1);
        sb_puts(b, ")");
    }
    sb_puts(b, ")");
}

/* Non-negative integers in [lo, hi] without leading zeros. */
static void uint_range(sbuf *b, long long lo, long long hi) {
    char a[32], z[32];
    int la = snprintf(a, sizeof a, "%lld", lo), lz = snprintf(z, sizeof z, "%lld", hi);
    bool first = true;
    sb_puts(b, "(");
    for (int len = la; len <= lz; len++) {
        char x[32], y[32];
        if (len == la) memcpy(x, a, (size_t)la + 1);
        else {
            x[0] = '1';
            memset(x + 1, '0', (size_t)len - 1);
            x[len] = 0;
        }
        if (len == lz) memcpy(y, z, (size_t)lz + 1);
        else {
            memset(y, '9', (size_t)len);
            y[len] = 0;
        }
        if (!first) sb_puts(b, " | ");
        digit_range(b, x, y, len);
        first = false;
    }
    sb_puts(b, ")");
}

static int int_rule(conv *c, const cJSON *s, const char *path, sbuf *b) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    const cJSON *xmn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    const cJSON *xmx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    if (!mn && !mx && !xmn && !xmx) {
        sb_puts(b, use_prim(c, "integer"));
        return 0;
    }
    long long lo = -JS_INT_MAX, hi = JS_INT_MAX;
    const cJSON *bounds[4] = {mn, mx, xmn, xmx};
    for (int k = 0; k < 4; k++) {
        const cJSON *v = bounds[k];
        if (!v) continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return jerr(c, path, "%s must be a number", k == 0 ? "minimum" : k == 1 ? "maximum" : k == 2 ? "exclusiveMinimum" : "exclusiveMaximum");
        double d = v->valuedouble;
        if (fabs(d) > (double)JS_INT_MAX) return jerr(c, path, "integer bound %g beyond 16 digits", d);
        long long x;
        if (k == 0) x = (long long)ceil(d), lo = x > lo ? x : lo;
        else if (k == 1) x = (long long)floor(d), hi = x < hi ? x : hi;
        else if (k == 2) x = (long long)floor(d) + 1, lo = x > lo ? x : lo;
        else x = (long long)ceil(d) - 1, hi = x < hi ? x : hi;
    }
    if (lo > hi) return jerr(c, path, "the integer range [%lld, %lld] is empty", lo, hi);
    sb_puts(b, "(");
    bool first = true;
    if (lo < 0) {
        long long nhi = hi < -1 ? hi : -1; /* negatives in [lo, nhi] -> "-" and [|nhi|, |lo|] */
        sb_puts(b, "\"-\" ");
        uint_range(b, -nhi, -lo);
        first = false;
    }
    if (hi >= 0) {
        if (!first) sb_puts(b, " | ");
        uint_range(b, lo > 0 ? lo : 0, hi);
    }
    sb_puts(b, ") ");
    sb_puts(b, use_prim(c, "space"));
    return 0;
}

/* ---- regular expressions (pattern) ---- */

typedef struct rx {
    conv *c;
    const char *s;
    size_t n, pos;
    const char *path;
    int depth;
} rx;

static int rx_err(rx *r, const char *msg) {
    return jerr(r->c, r->path, "pattern, offset %zu: %s", r->pos, msg);
}

/* One JSON-string character (decoded value cp) as GBNF over the JSON text:
 * characters JSON must escape become their escape sequence. */
static void json_char_expr(sbuf *b, uint32_t cp) {
    switch (cp) {
    case '"': sb_puts(b, "\"\\\\\\\"\""); return;   /* \" */
    case '\\': sb_puts(b, "\"\\\\\\\\\""); return;  /* \\ */
    case '\n': sb_puts(b, "\"\\\\n\""); return;
    case '\t': sb_puts(b, "\"\\\\t\""); return;
    case '\r': sb_puts(b, "\"\\\\r\""); return;
    case '\b': sb_puts(b, "\"\\\\b\""); return;
    case '\f': sb_puts(b, "\"\\\\f\""); return;
    default: break;
    }
    if (cp < 0x20 || cp == 0x7F) {
        sb_printf(b, "\"\\\\u00%c%c\"", "0123456789abcdef"[cp >> 4], "0123456789abcdef"[cp & 15]);
        return;
    }
    if (cp < 0x80 && ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')))
        sb_printf(b, "\"%c\"", (char)cp);
    else if (cp < 0x10000) sb_printf(b, "\"\\u%04X\"", (unsigned)cp);
    else sb_printf(b, "\"\\U%08X\"", (unsigned)cp);
}

static bool json_special(uint32_t cp) { return cp == '"' || cp == '\\' || cp < 0x20 || cp == 0x7F; }

static void class_cp(sbuf *b, uint32_t cp) {
    if (cp < 0x10000) sb_printf(b, "\\u%04X", (unsigned)cp);
    else sb_printf(b, "\\U%08X", (unsigned)cp);
}

/* A set of code points (ranges, negated or not) as GBNF over the JSON text. */
static void class_expr(sbuf *b, const gr_range *rs, int32_t n, bool neg) {
    /* special characters in the set become escape sequences; the rest one
     * class without them */
    sb_puts(b, "(");
    if (neg) {
        sb_puts(b, "[^\\\"\\\\\\x00-\\x1F\\x7F");
        for (int32_t i = 0; i < n; i++) {
            class_cp(b, rs[i].lo);
            if (rs[i].hi != rs[i].lo) sb_puts(b, "-"), class_cp(b, rs[i].hi);
        }
        sb_puts(b, "]");
        static const uint32_t esc[] = {'"', '\\', '\n', '\t', '\r', '\b', '\f'};
        for (size_t k = 0; k < sizeof esc / sizeof esc[0]; k++) {
            bool excluded = false;
            for (int32_t i = 0; i < n; i++) excluded |= esc[k] >= rs[i].lo && esc[k] <= rs[i].hi;
            if (!excluded) sb_puts(b, " | "), json_char_expr(b, esc[k]);
        }
    } else {
        bool any = false;
        sbuf cls = {0};
        for (int32_t i = 0; i < n; i++) {
            for (uint32_t cp = rs[i].lo; cp <= rs[i].hi && cp < 0x80; cp++)
                if (json_special(cp)) {
                    if (any) sb_puts(b, " | ");
                    json_char_expr(b, cp);
                    any = true;
                }
            /* the non-special part of the range */
            uint32_t lo = rs[i].lo, hi = rs[i].hi;
            uint32_t segs[4][2];
            int ns = 0;
            /* cut out 0x00-0x1F, '"', '\\', 0x7F */
            static const uint32_t cuts[][2] = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}};
            uint32_t cur = lo;
            for (size_t k = 0; k < 4 && cur <= hi; k++) {
                if (cuts[k][1] < cur) continue;
                if (cuts[k][0] > hi) break;
                if (cuts[k][0] > cur && ns < 4) segs[ns][0] = cur, segs[ns][1] = cuts[k][0] - 1, ns++;
                cur = cuts[k][1] + 1;
            }
            for (int k = 0; k < ns; k++) {
                class_cp(&cls, segs[k][0]);
                if (segs[k][1] != segs[k][0]) sb_puts(&cls, "-"), class_cp(&cls, segs[k][1]);
            }
            if (cur <= hi) {
                class_cp(&cls, cur);
                if (hi != cur) sb_puts(&cls, "-"), class_cp(&cls, hi);
            }
        }
        if (cls.n) {
            if (any) sb_puts(b, " | ");
            sb_puts(b, "[");
            sb_puts(b, cls.s);
            sb_puts(b, "]");
            any = true;
        }
        free(cls.s);
        if (cls.oom) b->oom = true;
        if (!any) sb_puts(b, "[^\\x00-\\U0010FFFF]"); /* empty set */
    }
    sb_puts(b, ")");
}

static int rx_cp(rx *r, uint32_t *cp) {
    int k = gr_utf8_decode((const unsigned char *)r->s + r->pos, r->n - r->pos, cp);
    if (!k) return rx_err(r, "invalid UTF-8");
    r->pos += (size_t)k;
    return 0;
}

/* \d \w \s and friends: the ranges (at most 5); returns count, -1 if not a class escape. */
static int class_escape(char e, gr_range *out, bool *neg) {
    *neg = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
    case 'd': case 'D': out[0] = (gr_range){'0', '9'}; return 1;
    case 'w': case 'W':
        out[0] = (gr_range){'0', '9'}, out[1] = (gr_range){'A', 'Z'}, out[2] = (gr_range){'_', '_'},
        out[3] = (gr_range){'a', 'z'};
        return 4;
    case 's': case 'S':
        out[0] = (gr_range){'\t', '\r'}, out[1] = (gr_range){' ', ' '};
        return 2;
    default: return -1;
    }
}

static int rx_escape_char(rx *r, char e, uint32_t *cp) {
    switch (e) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    default: break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
        return rx_err(r, "unsupported escape (supported: \\d \\w \\s \\D \\W \\S \\n \\t \\r \\f \\v and escaped punctuation)");
    *cp = (uint32_t)(unsigned char)e;
    return 0;
}

static int rx_alt(rx *r, sbuf *b);

static int rx_class(rx *r, sbuf *b) {
    r->pos++; /* [ */
    bool neg = false;
    if (r->pos < r->n && r->s[r->pos] == '^') neg = true, r->pos++;
    gr_range rs[256];
    int32_t n = 0;
    bool first = true;
    while (r->pos < r->n && (r->s[r->pos] != ']' || first)) {
        first = false;
        uint32_t lo;
        if (r->s[r->pos] == '\\') {
            if (r->pos + 1 >= r->n) return rx_err(r, "escape at the end");
            char e = r->s[r->pos + 1];
            gr_range cr[5];
            bool cneg;
            int k = class_escape(e, cr, &cneg);
            if (k >= 0) {
                if (cneg) return rx_err(r, "negated class escapes inside [] are not supported");
                r->pos += 2;
                for (int i = 0; i < k && n < 256; i++) rs[n++] = cr[i];
                continue;
            }
            r->pos += 2;
            if (rx_escape_char(r, e, &lo) < 0) return TUTTI_ERR;
        } else if (rx_cp(r, &lo) < 0) {
            return TUTTI_ERR;
        }
        uint32_t hi = lo;
        if (r->pos + 1 < r->n && r->s[r->pos] == '-' && r->s[r->pos + 1] != ']') {
            r->pos++;
            if (r->s[r->pos] == '\\') {
                if (r->pos + 1 >= r->n) return rx_err(r, "escape at the end");
                char e = r->s[r->pos + 1];
                r->pos += 2;
                if (rx_escape_char(r, e, &hi) < 0) return TUTTI_ERR;
            } else if (rx_cp(r, &hi) < 0) {
                return TUTTI_ERR;
            }
            if (hi < lo) return rx_err(r, "range out of order");
        }
        if (n == 256) return rx_err(r, "more than 256 ranges in a class");
        rs[n++] = (gr_range){lo, hi};
    }
    if (r->pos >= r->n) return rx_err(r, "unterminated [");
    r->pos++;
    class_expr(b, rs, n, neg);
    return 0;
}

static int rx_atom(rx *r, sbuf *b) {
    char ch = r->s[r->pos];
    if (ch == '(') {
        r->pos++;
        if (r->pos + 1 < r->n && r->s[r->pos] == '?') {
            if (r->s[r->pos + 1] != ':') return rx_err(r, "only (?: ) groups are supported (no lookaround)");
            r->pos += 2;
        }
        if (++r->depth > 64) return rx_err(r, "groups nested too deep");
        sb_puts(b, "(");
        if (rx_alt(r, b) < 0) return TUTTI_ERR;
        if (r->pos >= r->n || r->s[r->pos] != ')') return rx_err(r, "missing )");
        r->pos++;
        r->depth--;
        sb_puts(b, ")");
        return 0;
    }
    if (ch == '[') return rx_class(r, b);
    if (ch == '.') {
        r->pos++;
        sb_puts(b, "[^\\\"\\\\\\x00-\\x1F\\x7F\\n\\r] | \"\\\\\\\"\" | \"\\\\\\\\\" | \"\\\\t\"");
        return 0;
    }
    if (ch == '\\') {
        if (r->pos + 1 >= r->n) return rx_err(r, "escape at the end");
        char e = r->s[r->pos + 1];
        gr_range cr[5];
        bool cneg;
        int k = class_escape(e, cr, &cneg);
        r->pos += 2;
        if (k >= 0) {
            class_expr(b, cr, k, cneg);
            return 0;
        }
        uint32_t cp = 0;
        if (rx_escape_char(r, e, &cp) < 0) return TUTTI_ERR;
        json_char_expr(b, cp);
        return 0;
    }
    if (ch == '^' || ch == '$') return rx_err(r, "anchors are supported only at the very start and end");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return rx_err(r, "quantifier without a preceding atom");
    uint32_t cp = 0;
    if (rx_cp(r, &cp) < 0) return TUTTI_ERR;
    json_char_expr(b, cp);
    return 0;
}

static int rx_seq(rx *r, sbuf *b) {
    bool any = false;
    while (r->pos < r->n && r->s[r->pos] != '|' && r->s[r->pos] != ')') {
        if (any) sb_puts(b, " ");
        sb_puts(b, "(");
        if (rx_atom(r, b) < 0) return TUTTI_ERR;
        sb_puts(b, ")");
        any = true;
        if (r->pos < r->n) {
            char q = r->s[r->pos];
            if (q == '*' || q == '+' || q == '?') {
                sb_putn(b, &q, 1);
                r->pos++;
            } else if (q == '{') {
                size_t st = r->pos;
                while (r->pos < r->n && r->s[r->pos] != '}') {
                    char d = r->s[r->pos];
                    if (!(d == '{' || d == ',' || (d >= '0' && d <= '9'))) return rx_err(r, "malformed {m,n}");
                    r->pos++;
                }
                if (r->pos >= r->n) return rx_err(r, "unterminated {");
                r->pos++;
                sb_putn(b, r->s + st, r->pos - st);
            }
            if (r->pos < r->n && r->s[r->pos] == '?') r->pos++; /* lazy: same language */
            if (r->pos < r->n && (r->s[r->pos] == '*' || r->s[r->pos] == '+' || r->s[r->pos] == '{'))
                return rx_err(r, "nested quantifiers");
        }
    }
    if (!any) sb_puts(b, "\"\"");
    return 0;
}

static int rx_alt(rx *r, sbuf *b) {
    if (rx_seq(r, b) < 0) return TUTTI_ERR;
    while (r->pos < r->n && r->s[r->pos] == '|') {
        r->pos++;
        sb_puts(b, " | ");
        if (rx_seq(r, b) < 0) return TUTTI_ERR;
    }
    return 0;
}

static int pattern_expr(conv *c, const char *pat, const char *path, sbuf *b) {
    size_t n = strlen(pat);
    if (n < 2 || pat[0] != '^' || pat[n - 1] != '$' || (n >= 3 && pat[n - 2] == '\\'))
        return jerr(c, path, "pattern must start with ^ and end with $ (as llama.cpp requires)");
    rx r = {.c = c, .s = pat + 1, .n = n - 2, .path = path};
    sb_puts(b, "\"\\\"\" (");
    if (rx_alt(&r, b) < 0) return TUTTI_ERR;
    if (r.pos != r.n) return rx_err(&r, "unmatched )");
    sb_puts(b, ") \"\\\"\" ");
    sb_puts(b, use_prim(c, "space"));
    return 0;
}

/* ---- schemas ---- */

static const char *const k_known[] = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
    "enum", "const", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
    /* annotations: no effect on validity */
    "title", "description", "$schema", "$id", "$comment", "default", "examples", NULL};

static int visit(conv *c, const cJSON *s, const char *hint, const char *path, char *name_out, size_t cap);

static int check_keys(conv *c, const cJSON *s, const char *path) {
    for (const cJSON *k = s->child; k; k = k->next) {
        bool ok = false;
        for (int i = 0; k_known[i] && !ok; i++) ok = !strcmp(k->string, k_known[i]);
        if (!ok) return jerr(c, path, "unsupported keyword '%s'", k->string);
    }
    return 0;
}

static void sub_path(char *out, size_t cap, const char *path, const char *a, const char *b) {
    if (b) snprintf(out, cap, "%s/%s/%s", path, a, b);
    else snprintf(out, cap, "%s/%s", path, a);
}

/* Resolves a local $ref; NULL + error. */
static const cJSON *resolve_ref(conv *c, const char *ref, const char *path) {
    const char *p;
    const cJSON *defs;
    if (!strncmp(ref, "#/$defs/", 8)) p = ref + 8, defs = cJSON_GetObjectItemCaseSensitive(c->root, "$defs");
    else if (!strncmp(ref, "#/definitions/", 14)) p = ref + 14, defs = cJSON_GetObjectItemCaseSensitive(c->root, "definitions");
    else if (!strcmp(ref, "#")) return c->root;
    else {
        jerr(c, path, "$ref '%s' is not supported (only local #/$defs/NAME or #/definitions/NAME)", ref);
        return NULL;
    }
    const cJSON *d = defs ? cJSON_GetObjectItemCaseSensitive(defs, p) : NULL;
    if (!d) jerr(c, path, "$ref '%s' names no definition", ref);
    return d;
}

static int object_rule(conv *c, const cJSON *props, const cJSON *required, const cJSON *addl, const char *name,
                       const char *path, sbuf *b) {
    int32_t np = props ? cJSON_GetArraySize(props) : 0;
    char (*kv)[128] = calloc((size_t)np + 1, sizeof *kv);
    bool *req = calloc((size_t)np + 1, sizeof(bool));
    int rc = TUTTI_ERR;
    if (!kv || !req) {
        jerr(c, path, "out of memory");
        goto done;
    }
    if (required && !cJSON_IsArray(required)) {
        jerr(c, path, "required must be an array of strings");
        goto done;
    }
    for (const cJSON *r = required ? required->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) {
            jerr(c, path, "required must be an array of strings");
            goto done;
        }
        bool found = false;
        int32_t i = 0;
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++)
            if (!strcmp(p->string, r->valuestring)) req[i] = found = true;
        if (!found) {
            jerr(c, path, "required property '%s' is not in properties", r->valuestring);
            goto done;
        }
    }
    int32_t i = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++) {
        char sp[512], vname[128], hint[200];
        sub_path(sp, sizeof sp, path, "properties", p->string);
        snprintf(hint, sizeof hint, "%s-%s", name, p->string);
        if (visit(c, p, hint, sp, vname, sizeof vname) < 0) goto done;
        char kvh[220];
        snprintf(kvh, sizeof kvh, "%s-kv", hint);
        fresh_name(c, kvh, kv[i], sizeof kv[i]);
        if (add_name(c, kv[i]) < 0) {
            jerr(c, path, "out of memory");
            goto done;
        }
        sbuf key = {0};
        cJSON *ks = cJSON_CreateString(p->string);
        char *js = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        if (!js) {
            jerr(c, path, "out of memory");
            goto done;
        }
        gbnf_literal(&key, js, strlen(js));
        free(js);
        sb_printf(&key, " %s \":\" %s %s", use_prim(c, "space"), use_prim(c, "space"), vname);
        emit_rule(c, kv[i], key.s ? key.s : "\"\"");
        free(key.s);
    }
    /* additional properties */
    char add_kv[128] = "";
    if (addl && !(cJSON_IsFalse(addl))) {
        char vname[128], sp[512], hint[200];
        sub_path(sp, sizeof sp, path, "additionalProperties", NULL);
        snprintf(hint, sizeof hint, "%s-additional", name);
        if (cJSON_IsTrue(addl)) snprintf(vname, sizeof vname, "%s", use_prim(c, "value"));
        else if (visit(c, addl, hint, sp, vname, sizeof vname) < 0) goto done;
        char kvh[220];
        snprintf(kvh, sizeof kvh, "%s-kv", hint);
        fresh_name(c, kvh, add_kv, sizeof add_kv);
        if (add_name(c, add_kv) < 0) goto done;
        sbuf body = {0};
        sb_printf(&body, "%s \":\" %s %s", use_prim(c, "string"), use_prim(c, "space"), vname);
        emit_rule(c, add_kv, body.s);
        free(body.s);
    }
    const char *spc = use_prim(c, "space");
    sb_printf(b, "\"{\" %s ", spc);
    bool any_req = false;
    for (i = 0; i < np; i++)
        if (req[i]) {
            if (any_req) sb_printf(b, "\",\" %s ", spc);
            sb_printf(b, "%s ", kv[i]);
            any_req = true;
        }
    /* tail(j): the optional properties after position j, each "," prefixed */
    if (any_req) {
        for (i = 0; i < np; i++)
            if (!req[i]) sb_printf(b, "(\",\" %s %s)? ", spc, kv[i]);
        if (add_kv[0]) sb_printf(b, "(\",\" %s %s)* ", spc, add_kv);
    } else {
        bool any_alt = false;
        sb_puts(b, "(");
        for (i = 0; i < np; i++) {
            if (any_alt) sb_puts(b, " | ");
            sb_printf(b, "%s ", kv[i]);
            for (int32_t j = i + 1; j < np; j++) sb_printf(b, "(\",\" %s %s)? ", spc, kv[j]);
            if (add_kv[0]) sb_printf(b, "(\",\" %s %s)* ", spc, add_kv);
            any_alt = true;
        }
        if (add_kv[0]) {
            if (any_alt) sb_puts(b, " | ");
            sb_printf(b, "%s (\",\" %s %s)* ", add_kv, spc, add_kv);
            any_alt = true;
        }
        sb_puts(b, any_alt ? ")? " : "\"\") ");
    }
    sb_printf(b, "\"}\" %s", spc);
    rc = 0;
done:
    free(kv), free(req);
    return rc;
}

static int get_count(conv *c, const cJSON *s, const char *key, const char *path, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) || v->valuedouble > 10000)
        return jerr(c, path, "%s must be an integer in [0, 10000]", key);
    *out = (int64_t)v->valuedouble;
    return 1;
}

static int array_rule(conv *c, const cJSON *s, const char *name, const char *path, sbuf *b) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const char *spc = use_prim(c, "space");
    int64_t mn = 0, mx = -1;
    if (get_count(c, s, "minItems", path, &mn) < 0 || get_count(c, s, "maxItems", path, &mx) < 0) return TUTTI_ERR;
    if (mx >= 0 && mx < mn) return jerr(c, path, "maxItems < minItems");
    if (prefix || (items && cJSON_IsArray(items))) {
        const cJSON *tuple = prefix ? prefix : items;
        if (!cJSON_IsArray(tuple)) return jerr(c, path, "prefixItems must be an array of schemas");
        if (prefix && items && !cJSON_IsFalse(items))
            return jerr(c, path, "items next to prefixItems is supported only as false (a closed tuple)");
        int32_t n = cJSON_GetArraySize(tuple);
        if (mn > n || (mx >= 0 && mx < n))
            return jerr(c, path, "minItems/maxItems other than the tuple length are not supported with prefixItems");
        sb_printf(b, "\"[\" %s ", spc);
        int32_t i = 0;
        for (const cJSON *it = tuple->child; it; it = it->next, i++) {
            char sp[512], idx[16], vname[128], hint[160];
            snprintf(idx, sizeof idx, "%d", i);
            sub_path(sp, sizeof sp, path, prefix ? "prefixItems" : "items", idx);
            snprintf(hint, sizeof hint, "%s-tuple-%d", name, i);
            if (visit(c, it, hint, sp, vname, sizeof vname) < 0) return TUTTI_ERR;
            if (i) sb_printf(b, "\",\" %s ", spc);
            sb_printf(b, "%s ", vname);
        }
        sb_printf(b, "\"]\" %s", spc);
        return 0;
    }
    char vname[128];
    if (!items || cJSON_IsTrue(items)) {
        snprintf(vname, sizeof vname, "%s", use_prim(c, "value"));
    } else {
        char sp[512], hint[160];
        sub_path(sp, sizeof sp, path, "items", NULL);
        snprintf(hint, sizeof hint, "%s-item", name);
        if (visit(c, items, hint, sp, vname, sizeof vname) < 0) return TUTTI_ERR;
    }
    sb_printf(b, "\"[\" %s ", spc);
    if (mx == 0) {
        sb_printf(b, "\"]\" %s", spc);
        return 0;
    }
    if (mn == 0) sb_puts(b, "(");
    sb_printf(b, "%s ", vname);
    int64_t lo = mn > 0 ? mn - 1 : 0;
    if (mx < 0) sb_printf(b, "(\",\" %s %s){%lld,}", spc, vname, (long long)lo);
    else sb_printf(b, "(\",\" %s %s){%lld,%lld}", spc, vname, (long long)lo, (long long)(mx - 1));
    if (mn == 0) sb_puts(b, ")?");
    sb_printf(b, " \"]\" %s", spc);
    return 0;
}

static int string_rule(conv *c, const cJSON *s, const char *path, sbuf *b) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    int64_t mn = 0, mx = -1;
    int hmn = get_count(c, s, "minLength", path, &mn), hmx = get_count(c, s, "maxLength", path, &mx);
    if (hmn < 0 || hmx < 0) return TUTTI_ERR;
    int n_kinds = (fmt != NULL) + (pat != NULL) + (hmn > 0 || hmx > 0);
    if (n_kinds > 1) return jerr(c, path, "format, pattern and minLength/maxLength together are not supported");
    if (fmt) {
        if (!cJSON_IsString(fmt)) return jerr(c, path, "format must be a string");
        const char *f = fmt->valuestring;
        if (!strcmp(f, "date")) sb_puts(b, use_prim(c, "date-string"));
        else if (!strcmp(f, "time")) sb_puts(b, use_prim(c, "time-string"));
        else if (!strcmp(f, "date-time")) sb_puts(b, use_prim(c, "date-time-string"));
        else if (!strcmp(f, "uuid")) sb_puts(b, use_prim(c, "uuid"));
        else return jerr(c, path, "format '%s' is not supported (date, time, date-time, uuid are)", f);
        return 0;
    }
    if (pat) {
        if (!cJSON_IsString(pat)) return jerr(c, path, "pattern must be a string");
        return pattern_expr(c, pat->valuestring, path, b);
    }
    if (hmn > 0 || hmx > 0) {
        if (mx >= 0 && mx < mn) return jerr(c, path, "maxLength < minLength");
        const char *ch = use_prim(c, "char");
        if (mx < 0) sb_printf(b, "\"\\\"\" %s{%lld,} \"\\\"\" %s", ch, (long long)mn, use_prim(c, "space"));
        else sb_printf(b, "\"\\\"\" %s{%lld,%lld} \"\\\"\" %s", ch, (long long)mn, (long long)mx, use_prim(c, "space"));
        return 0;
    }
    sb_puts(b, use_prim(c, "string"));
    return 0;
}

/* Keywords that make sense only for one type. */
static const char *type_of_keyword(const char *k) {
    static const char *const obj[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const arr[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
    static const char *const str[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int i = 0; obj[i]; i++) if (!strcmp(k, obj[i])) return "object";
    for (int i = 0; arr[i]; i++) if (!strcmp(k, arr[i])) return "array";
    for (int i = 0; str[i]; i++) if (!strcmp(k, str[i])) return "string";
    for (int i = 0; num[i]; i++) if (!strcmp(k, num[i])) return "integer";
    return NULL;
}

/* Body of a schema of one type t. */
static int typed_body(conv *c, const cJSON *s, const char *t, const char *name, const char *path, sbuf *b) {
    /* a keyword of another type would be ignored by this branch: refuse it */
    for (const cJSON *k = s->child; k; k = k->next) {
        const char *kt = type_of_keyword(k->string);
        if (!kt) continue;
        bool fits = !strcmp(kt, t) || (!strcmp(kt, "integer") && !strcmp(t, "number"));
        if (!fits && !(cJSON_GetObjectItemCaseSensitive(s, "type") && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(s, "type"))))
            return jerr(c, path, "keyword '%s' does not apply to type %s", k->string, t);
    }
    if (!strcmp(t, "object"))
        return object_rule(c, cJSON_GetObjectItemCaseSensitive(s, "properties"),
                           cJSON_GetObjectItemCaseSensitive(s, "required"),
                           cJSON_GetObjectItemCaseSensitive(s, "additionalProperties"), name, path, b);
    if (!strcmp(t, "array")) return array_rule(c, s, name, path, b);
    if (!strcmp(t, "string")) return string_rule(c, s, path, b);
    if (!strcmp(t, "integer")) return int_rule(c, s, path, b);
    if (!strcmp(t, "number")) {
        static const char *const nk[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        for (int i = 0; i < 4; i++)
            if (cJSON_GetObjectItemCaseSensitive(s, nk[i]))
                return jerr(c, path, "%s on type number is not supported (only on integer, as in llama.cpp)", nk[i]);
        sb_puts(b, use_prim(c, "number"));
        return 0;
    }
    if (!strcmp(t, "boolean")) {
        sb_puts(b, use_prim(c, "boolean"));
        return 0;
    }
    if (!strcmp(t, "null")) {
        sb_puts(b, use_prim(c, "null"));
        return 0;
    }
    return jerr(c, path, "unknown type '%s'", t);
}

static int merge_allof(conv *c, const cJSON *all, const char *path, cJSON **out) {
    /* allOf of object schemas: properties and required united */
    cJSON *m = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    if (!m || !props || !req) {
        cJSON_Delete(m), cJSON_Delete(props), cJSON_Delete(req);
        return jerr(c, path, "out of memory");
    }
    cJSON_AddStringToObject(m, "type", "object");
    cJSON_AddItemToObject(m, "properties", props);
    cJSON_AddItemToObject(m, "required", req);
    int i = 0;
    for (const cJSON *s = all->child; s; s = s->next, i++) {
        char sp[512], idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        sub_path(sp, sizeof sp, path, "allOf", idx);
        const cJSON *r = s;
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (ref && cJSON_IsString(ref) && !(r = resolve_ref(c, ref->valuestring, sp))) goto fail;
        if (!cJSON_IsObject(r)) {
            jerr(c, sp, "allOf is supported for object schemas only");
            goto fail;
        }
        for (const cJSON *k = r->child; k; k = k->next) {
            if (!strcmp(k->string, "properties")) {
                for (const cJSON *p = k->child; p; p = p->next) {
                    cJSON_DeleteItemFromObjectCaseSensitive(props, p->string);
                    cJSON_AddItemToObject(props, p->string, cJSON_Duplicate(p, true));
                }
            } else if (!strcmp(k->string, "required")) {
                for (const cJSON *q = k->child; q; q = q->next) cJSON_AddItemToArray(req, cJSON_Duplicate(q, true));
            } else if (!strcmp(k->string, "type")) {
                if (!cJSON_IsString(k) || strcmp(k->valuestring, "object")) {
                    jerr(c, sp, "allOf is supported for object schemas only");
                    goto fail;
                }
            } else if (strcmp(k->string, "title") && strcmp(k->string, "description") && strcmp(k->string, "$ref")) {
                jerr(c, sp, "keyword '%s' inside allOf is not supported (properties, required, type object are)",
                     k->string);
                goto fail;
            }
        }
    }
    *out = m;
    return 0;
fail:
    cJSON_Delete(m);
    return TUTTI_ERR;
}

/* A schema that is a $ref (and annotations): one rule per target, recorded
 * before its body is visited, so recursive schemas refer to it by name. */
static int visit_ref(conv *c, const cJSON *s, const cJSON *ref, const char *path, char *name_out, size_t cap) {
    if (!cJSON_IsString(ref)) return jerr(c, path, "$ref must be a string");
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, "$ref") && strcmp(k->string, "title") && strcmp(k->string, "description") &&
            strcmp(k->string, "$defs") && strcmp(k->string, "definitions"))
            return jerr(c, path, "keyword '%s' next to $ref is not supported", k->string);
    for (int32_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i], ref->valuestring)) {
            snprintf(name_out, cap, "%s", c->ref_rule[i]);
            return 0;
        }
    const cJSON *t = resolve_ref(c, ref->valuestring, path);
    if (!t) return TUTTI_ERR;
    char name[128];
    const char *last = strrchr(ref->valuestring, '/');
    fresh_name(c, last && last[1] ? last + 1 : "ref", name, sizeof name);
    if (add_name(c, name) < 0) return TUTTI_ERR;
    if (c->n_refs == c->cap_refs) {
        int32_t nc = c->cap_refs ? c->cap_refs * 2 : 16;
        char **a = realloc(c->refs, sizeof(char *) * (size_t)nc), **r2;
        if (!a) return TUTTI_ERR;
        c->refs = a;
        r2 = realloc(c->ref_rule, sizeof(char *) * (size_t)nc);
        if (!r2) return TUTTI_ERR;
        c->ref_rule = r2, c->cap_refs = nc;
    }
    c->refs[c->n_refs] = strdup(ref->valuestring);
    c->ref_rule[c->n_refs] = strdup(name);
    c->n_refs++;
    char inner[128];
    if (visit(c, t, name, ref->valuestring + 1, inner, sizeof inner) < 0) return TUTTI_ERR;
    emit_rule(c, name, inner);
    snprintf(name_out, cap, "%s", name);
    return 0;
}

/* const, enum, anyOf / oneOf, allOf: the body of rule `name` into b. */
static int combined_body(conv *c, const cJSON *s, const char *name, const char *path, sbuf *b, cJSON **merged) {
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    if (cst) return const_expr(c, cst, b, path);
    if (en) {
        if (!cJSON_IsArray(en) || !en->child) return jerr(c, path, "enum must be a non-empty array");
        sb_puts(b, "(");
        for (const cJSON *v = en->child; v; v = v->next) {
            if (v != en->child) sb_puts(b, " | ");
            if (const_expr(c, v, b, path) < 0) return TUTTI_ERR;
        }
        sb_puts(b, ")");
        return 0;
    }
    if (any) {
        const char *kw = cJSON_GetObjectItemCaseSensitive(s, "anyOf") ? "anyOf" : "oneOf";
        if (!cJSON_IsArray(any) || !any->child) return jerr(c, path, "%s must be a non-empty array", kw);
        int i = 0;
        for (const cJSON *v = any->child; v; v = v->next, i++) {
            char sp[512], idx[16], vn[128], h[160];
            snprintf(idx, sizeof idx, "%d", i);
            sub_path(sp, sizeof sp, path, kw, idx);
            snprintf(h, sizeof h, "%s-%d", name, i);
            if (visit(c, v, h, sp, vn, sizeof vn) < 0) return TUTTI_ERR;
            if (i) sb_puts(b, " | ");
            sb_puts(b, vn);
        }
        return 0;
    }
    if (!cJSON_IsArray(all) || !all->child) return jerr(c, path, "allOf must be a non-empty array");
    if (merge_allof(c, all, path, merged) < 0) return TUTTI_ERR;
    return object_rule(c, cJSON_GetObjectItemCaseSensitive(*merged, "properties"),
                       cJSON_GetObjectItemCaseSensitive(*merged, "required"), NULL, name, path, b);
}

/* A schema by its type: a list of types, one, or none (inferred from the
 * keywords, as llama.cpp does: 1 when it is any value).  Body into b. */
static int typed_or_inferred(conv *c, const cJSON *s, const char *name, const char *path, sbuf *b) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (type && cJSON_IsArray(type)) {
        int i = 0;
        for (const cJSON *t = type->child; t; t = t->next, i++) {
            if (!cJSON_IsString(t)) return jerr(c, path, "type must be a string or an array of strings");
            if (i) sb_puts(b, " | ");
            sb_puts(b, "(");
            if (typed_body(c, s, t->valuestring, name, path, b) < 0) return TUTTI_ERR;
            sb_puts(b, ")");
        }
        return i ? 0 : jerr(c, path, "type list is empty");
    }
    if (type) {
        if (!cJSON_IsString(type)) return jerr(c, path, "type must be a string or an array of strings");
        return typed_body(c, s, type->valuestring, name, path, b);
    }
    const char *t = NULL;
    for (const cJSON *k = s->child; k && !t; k = k->next) t = type_of_keyword(k->string);
    return t ? typed_body(c, s, t, name, path, b) : 1;
}

/* Emits the rule for schema s and writes its name to name_out. */
static int visit(conv *c, const cJSON *s, const char *hint, const char *path, char *name_out, size_t cap) {
    if (c->failed) return TUTTI_ERR;
    if (++c->depth > JS_MAX_DEPTH) {
        c->depth--;
        return jerr(c, path, "schema nested more than %d deep", JS_MAX_DEPTH);
    }
    int rc = TUTTI_ERR;
    sbuf b = {0};
    cJSON *merged = NULL;
    char name[128];
    if (cJSON_IsTrue(s) || (cJSON_IsObject(s) && !s->child)) {
        snprintf(name_out, cap, "%s", use_prim(c, "value"));
        rc = 0;
        goto done;
    }
    if (cJSON_IsFalse(s)) {
        jerr(c, path, "schema false admits no value");
        goto done;
    }
    if (!cJSON_IsObject(s)) {
        jerr(c, path, "a schema must be an object or a boolean");
        goto done;
    }
    if (check_keys(c, s, path) < 0) goto done;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref) {
        rc = visit_ref(c, s, ref, path, name_out, cap);
        goto done;
    }
    fresh_name(c, hint, name, sizeof name);
    if (add_name(c, name) < 0) goto done;
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    int n_comb = (cst != NULL) + (en != NULL) + (any != NULL) + (all != NULL);
    if (n_comb > 1 || (n_comb == 1 && cJSON_GetObjectItemCaseSensitive(s, "anyOf") && cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        jerr(c, path, "const, enum, anyOf, oneOf and allOf together are not supported");
        goto done;
    }
    if (n_comb == 1) {
        for (const cJSON *k = s->child; k; k = k->next)
            if (type_of_keyword(k->string) || !strcmp(k->string, "type")) {
                if (!strcmp(k->string, "type") && (cst || en)) continue; /* the values decide */
                if (!strcmp(k->string, "type") && all) continue;
                jerr(c, path, "keyword '%s' next to const/enum/anyOf/oneOf/allOf is not supported", k->string);
                goto done;
            }
    }
    int body = n_comb ? combined_body(c, s, name, path, &b, &merged) : typed_or_inferred(c, s, name, path, &b);
    if (body < 0) goto done;
    if (body == 1) { /* no type, no keyword of one: any value */
        snprintf(name_out, cap, "%s", use_prim(c, "value"));
        rc = 0;
        goto done;
    }
    if (b.oom) {
        jerr(c, path, "out of memory");
        goto done;
    }
    emit_rule(c, name, b.s);
    snprintf(name_out, cap, "%s", name);
    rc = 0;
done:
    cJSON_Delete(merged);
    free(b.s);
    c->depth--;
    return rc;
}

char *tutti_json_schema_to_gbnf(const char *schema, size_t len) {
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
    conv c = {.root = root};
    char top[128];
    char *res = NULL;
    add_name(&c, "root");
    if (visit(&c, root, "root-value", "", top, sizeof top) == 0 && !c.failed) {
        if (c.out.oom) tutti_set_error("json schema: out of memory");
        else {
            sbuf fin = {0};
            sb_printf(&fin, "root ::= %s\n", top);
            sb_puts(&fin, c.out.s ? c.out.s : "");
            if (fin.oom) {
                free(fin.s);
                tutti_set_error("json schema: out of memory");
            } else {
                res = fin.s;
            }
        }
    }
    for (int32_t i = 0; i < c.n_names; i++) free(c.names[i]);
    for (int32_t i = 0; i < c.n_refs; i++) free(c.refs[i]), free(c.ref_rule[i]);
    free(c.names), free(c.refs), free(c.ref_rule), free(c.out.s);
    cJSON_Delete(root);
    return res;
}

tutti_grammar *tutti_grammar_from_json_schema(const char *schema, size_t len) {
    char *g = tutti_json_schema_to_gbnf(schema, len);
    if (!g) return NULL;
    tutti_grammar *gr = tutti_grammar_parse(g, strlen(g));
    if (!gr) tutti_error_prefix("json schema: the generated grammar");
    free(g);
    return gr;
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
