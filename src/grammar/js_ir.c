/* JSON schema objects to nodes (js_ir.h).
 *
 * One schema object is the intersection of its parts: a BASE made of its
 * per-type keywords (type, the number, string, array and object
 * keywords), and one part per combining keyword ($ref, allOf, anyOf,
 * oneOf, not, if/then/else, enum, const, dependencies); js_ops.c
 * intersects them.  Keywords that do not constrain (annotations, unknown
 * or vendor keywords, unknown formats) are ignored, as the specification
 * says; keywords that constrain and cannot be enforced exactly are
 * refused with their path (js_unsupported). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/js_format.h"
#include "grammar/js_ir.h"
#include "grammar/js_number.h"
#include "grammar/regex.h"

#define JS_MAX_LEN 10000 /* longest string / array a bound may ask for (GBNF's repetition limit) */

int js_err(js_ctx *c, const char *path, const char *fmt, ...) {
    if (c->failed) return TUTTI_ERR;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->failed = true;
    return tutti_set_error("json schema: at %s: %s", path && path[0] ? path : "/", msg);
}

int js_unsupported(js_ctx *c, const char *path, const char *keyword, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->lenient) {
        sb_printf(c->warn, "json schema: at %s: keyword '%s' dropped (not enforced): %s\n",
                  path && path[0] ? path : "/", keyword, msg);
        return 0;
    }
    return js_err(c, path, "keyword '%s': %s (--json-schema-lenient drops it with a warning)", keyword, msg);
}

js_node *js_node_new(js_ctx *c, int kind, const char *path) {
    if (c->failed) return NULL;
    if (--c->budget < 0) {
        js_err(c, path, "the schema is too large (over %d nodes and rules)", 400000);
        return NULL;
    }
    if (c->n_nodes == c->cap_nodes) {
        int32_t nc = c->cap_nodes ? c->cap_nodes * 2 : 64;
        js_node **a = realloc(c->nodes, sizeof(js_node *) * (size_t)nc);
        if (!a) {
            js_err(c, path, "out of memory");
            return NULL;
        }
        c->nodes = a, c->cap_nodes = nc;
    }
    js_node *n = calloc(1, sizeof *n);
    if (!n || !(n->path = strdup(path ? path : ""))) {
        free(n);
        js_err(c, path, "out of memory");
        return NULL;
    }
    n->kind = kind;
    n->id = c->n_nodes;
    n->max_len = n->max_items = n->max_props = -1;
    c->nodes[c->n_nodes++] = n;
    return n;
}

const cJSON *js_kw(const cJSON *s, const char *k) {
    const cJSON *r = NULL;
    for (const cJSON *x = s ? s->child : NULL; x; x = x->next)
        if (x->string && !strcmp(x->string, k)) r = x;
    return r;
}

char *js_path(const char *path, const char *a, const char *b) {
    sbuf o = {0};
    sb_puts(&o, path);
    const char *parts[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (!parts[i]) continue;
        sb_puts(&o, "/");
        for (const char *p = parts[i]; *p; p++) {
            if (*p == '~') sb_puts(&o, "~0");
            else if (*p == '/') sb_puts(&o, "~1");
            else sb_putn(&o, p, 1);
        }
    }
    if (o.oom) {
        free(o.s);
        return NULL;
    }
    return o.s ? o.s : strdup("");
}

/* The text of a number value: its literal as written (json_schema.c keeps
 * it in valuestring), else the nearest double printed exactly enough. */
static const char *num_text(const cJSON *v, char *buf, size_t cap) {
    if (v->valuestring) return v->valuestring;
    snprintf(buf, cap, "%.17g", v->valuedouble);
    return buf;
}

/* A count keyword (minLength, maxItems ...): -1 absent, else its value;
 * -2 after an error. */
static int64_t count_kw(js_ctx *c, const cJSON *s, const char *k, const char *path) {
    const cJSON *v = js_kw(s, k);
    if (!v) return -1;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) {
        js_err(c, path, "%s must be a non-negative integer", k);
        return -2;
    }
    return v->valuedouble > 1e15 ? (int64_t)1e15 : (int64_t)v->valuedouble;
}

/* ---- $ref ---- */

/* Resolves a local reference (a JSON pointer into the document: "#",
 * "#/definitions/x", "#/$defs/x", "#/properties/a/items" ...). */
static const cJSON *resolve(js_ctx *c, const char *ref, const char *path) {
    if (ref[0] != '#' || (ref[1] && ref[1] != '/')) {
        js_unsupported(c, path, "$ref",
                       "'%.200s' is not a local JSON pointer (#/...): other documents and $id anchors "
                       "cannot be fetched",
                       ref);
        return NULL;
    }
    const cJSON *cur = c->root;
    for (const char *p = ref + 1; *p && cur;) {
        p++; /* '/' */
        sbuf tok = {0};
        while (*p && *p != '/') {
            if (p[0] == '~' && p[1] == '0') sb_putn(&tok, "~", 1), p += 2;
            else if (p[0] == '~' && p[1] == '1') sb_putn(&tok, "/", 1), p += 2;
            else if (p[0] == '%' && p[1] && p[2]) {
                char hex[3] = {p[1], p[2], 0};
                char ch = (char)strtol(hex, NULL, 16);
                sb_putn(&tok, &ch, 1), p += 3;
            } else sb_putn(&tok, p++, 1);
        }
        const char *t = tok.s ? tok.s : "";
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(t, &end, 10);
            cur = *end || !*t ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else {
            cur = js_kw(cur, t);
        }
        free(tok.s);
    }
    if (!cur) js_err(c, path, "$ref '%.200s' points to nothing in the document", ref);
    return cur;
}

/* ---- enum and const ---- */

static js_node *value_node(js_ctx *c, const cJSON *v, const char *path);

static js_node *scalar_values(js_ctx *c, const cJSON *const *vals, int32_t n, const char *path) {
    js_node *b = js_base(c, path, 0);
    if (!b) return NULL;
    nfa strs = {0};
    int32_t s0 = nfa_state(&strs), sf = nfa_state(&strs);
    bool any_str = false;
    for (int32_t i = 0; i < n && !c->failed; i++) {
        const cJSON *v = vals[i];
        if (cJSON_IsNull(v)) b->types |= JT_NULL;
        else if (cJSON_IsTrue(v)) b->types |= JT_TRUE;
        else if (cJSON_IsFalse(v)) b->types |= JT_FALSE;
        else if (cJSON_IsString(v)) {
            /* one automaton for all the strings */
            const char *s = v->valuestring;
            size_t len = strlen(s);
            int32_t cur = s0;
            for (size_t k = 0; k < len;) {
                uint32_t cp;
                int l = gr_utf8_decode((const unsigned char *)s + k, len - k, &cp);
                if (!l) {
                    js_err(c, path, "a string value is not valid UTF-8");
                    break;
                }
                int32_t nx = nfa_state(&strs);
                nfa_edge(&strs, cur, cp, cp, nx);
                cur = nx, k += (size_t)l;
            }
            nfa_eps(&strs, cur, sf);
            b->types |= JT_STR, any_str = true;
        } else if (cJSON_IsNumber(v)) {
            char buf[40];
            const char *t = num_text(v, buf, sizeof buf);
            fsa *x = num_range(false, (num_bound){t, false}, (num_bound){t, false});
            if (x && b->num) {
                fsa *u = fsa_or(b->num, x);
                fsa_free(b->num), fsa_free(x);
                x = u;
            }
            b->num = x;
            if (!x) js_err(c, path, "the number %s: %s", t, tutti_last_error());
            b->types |= JT_INT | JT_FLOAT;
        }
    }
    if (any_str && !c->failed) {
        b->str = strs.oom ? NULL : nfa_to_fsa(&strs, s0, sf);
        b->str_sup = b->str ? fsa_copy(b->str) : NULL;
        b->str_canon = !c->all_spellings;
        if (!b->str_sup) js_err(c, path, "enum strings: %s", tutti_last_error());
    }
    if ((b->types & (JT_INT | JT_FLOAT)) && !b->num && !c->failed) b->num = fsa_nothing();
    nfa_free(&strs);
    return c->failed ? NULL : b;
}

/* The values of enum (or a const alone), as one node. */
static js_node *values_node(js_ctx *c, const cJSON *vals, bool is_enum, const char *path) {
    const cJSON *one[1] = {vals};
    int32_t n = is_enum ? cJSON_GetArraySize(vals) : 1;
    const cJSON **sc = malloc(sizeof(cJSON *) * (size_t)(n + 1));
    js_node **kids = malloc(sizeof(js_node *) * (size_t)(n + 1));
    int32_t ns = 0, nk = 0;
    js_node *r = NULL;
    if (!sc || !kids) {
        js_err(c, path, "out of memory");
        goto done;
    }
    for (const cJSON *v = is_enum ? vals->child : one[0]; v; v = is_enum ? v->next : NULL) {
        if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
            if (!(kids[nk++] = value_node(c, v, path))) goto done;
        } else {
            sc[ns++] = v;
        }
    }
    if (ns && !(kids[nk++] = scalar_values(c, sc, ns, path))) goto done;
    r = nk == 1 ? kids[0] : nk == 0 ? c->nothing : js_or(c, kids, nk, path);
done:
    free(sc), free(kids);
    return r;
}

/* Exactly one JSON value (a const, or an element of an enum). */
static js_node *value_node(js_ctx *c, const cJSON *v, const char *path) {
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v)) return scalar_values(c, &v, 1, path);
    js_node *b = js_base(c, path, cJSON_IsArray(v) ? JT_ARR : JT_OBJ);
    if (!b) return NULL;
    int32_t n = cJSON_GetArraySize(v);
    if (cJSON_IsArray(v)) {
        b->prefix = calloc((size_t)n + 1, sizeof(js_node *));
        if (!b->prefix) return js_err(c, path, "out of memory"), NULL;
        for (const cJSON *x = v->child; x; x = x->next)
            if (!(b->prefix[b->n_prefix++] = value_node(c, x, path))) return NULL;
        b->items = c->nothing;
        b->min_items = b->max_items = n;
        return b;
    }
    b->props = calloc((size_t)n + 1, sizeof(js_prop));
    if (!b->props) return js_err(c, path, "out of memory"), NULL;
    for (const cJSON *x = v->child; x; x = x->next) {
        /* a key written twice: the last value counts */
        int32_t k = 0;
        while (k < b->n_props && strcmp(b->props[k].name, x->string)) k++;
        if (k == b->n_props && !(b->props[b->n_props++].name = strdup(x->string)))
            return js_err(c, path, "out of memory"), NULL;
        if (!(b->props[k].node = value_node(c, x, path))) return NULL;
        b->props[k].required = true;
    }
    b->additional = c->nothing;
    return b;
}

/* ---- per-type keywords ---- */

static int types_kw(js_ctx *c, const cJSON *s, const char *path, uint32_t *types) {
    const cJSON *t = js_kw(s, "type");
    *types = JT_ALL;
    if (!t) return 0;
    static const struct {
        const char *name;
        uint32_t bits;
    } k_types[] = {{"null", JT_NULL},   {"boolean", JT_TRUE | JT_FALSE},
                   {"integer", JT_INT}, {"number", JT_INT | JT_FLOAT},
                   {"string", JT_STR},  {"array", JT_ARR},
                   {"object", JT_OBJ}};
    *types = 0;
    const cJSON *one[1] = {t};
    for (const cJSON *x = cJSON_IsArray(t) ? t->child : one[0]; x; x = cJSON_IsArray(t) ? x->next : NULL) {
        if (!cJSON_IsString(x)) return js_err(c, path, "type must be a string or an array of strings");
        size_t k = 0;
        while (k < sizeof k_types / sizeof k_types[0] && strcmp(k_types[k].name, x->valuestring)) k++;
        if (k == sizeof k_types / sizeof k_types[0]) return js_err(c, path, "unknown type '%.60s'", x->valuestring);
        *types |= k_types[k].bits;
    }
    return 0;
}

static int and_num(js_ctx *c, js_node *b, fsa *x, const char *path, const char *kw) {
    if (!x) return js_err(c, path, "%s: %s", kw, tutti_last_error());
    if (b->num) {
        fsa *u = fsa_and(b->num, x);
        fsa_free(b->num), fsa_free(x);
        x = u;
        if (!x) return js_err(c, path, "%s: %s", kw, tutti_last_error());
    }
    b->num = x;
    return 0;
}

/* multipleOf 2^-f written as a decimal (0.5, 0.25, 0.125, ... f <= 8): the
 * number texts -?int(.F)? whose fraction is a multiple of it, i.e. its
 * first f digits a multiple of 5^f and zeros after them.  Exact for
 * python-jsonschema too: it divides in floating point, and dividing by a
 * power of two is exact, so a double that is such a multiple (every
 * decimal written here parses to one: few digits, or so large that all
 * doubles there are) gives an integer quotient.  Other fractions (0.1:
 * 0.3 / 0.1 is 2.9999999999999996 to Python) stay refused.  NULL when t is
 * not such a power. */
static fsa *dyadic_multiples(const char *t) {
    if (strncmp(t, "0.", 2)) return NULL;
    size_t f = strlen(t + 2);
    while (f > 0 && t[2 + f - 1] == '0') f--;
    if (f == 0 || f > 8 || strspn(t + 2, "0123456789") < f) return NULL;
    long d = 0, p5 = 1;
    for (size_t i = 0; i < f; i++) d = d * 10 + (t[2 + i] - '0'), p5 *= 5;
    if (d != p5) return NULL;
    sbuf rx = {0};
    sb_puts(&rx, "^-?(?:0|[1-9][0-9]*)(?:\\.(?:0");
    long pow10 = 1;
    for (size_t i = 0; i < f; i++) pow10 *= 10;
    for (long m = p5; m < pow10; m += p5) { /* m as f digits, trailing zeros dropped (0* adds them) */
        char dig[24];                       /* f <= 8 digits; room for any long, as the compiler checks */
        snprintf(dig, sizeof dig, "%0*ld", (int)f, m);
        size_t n = strlen(dig);
        while (n > 1 && dig[n - 1] == '0') n--;
        sb_printf(&rx, "|%.*s", (int)n, dig);
    }
    sb_puts(&rx, ")0*)?$");
    fsa *a = rx.oom ? NULL : rx_compile(rx.s, rx.n, RX_SUBSET);
    free(rx.s);
    return a;
}

static int number_kws(js_ctx *c, const cJSON *s, const char *path, js_node *b) {
    static const char *const k_kw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
    const cJSON *v[5];
    for (int i = 0; i < 5; i++) {
        v[i] = js_kw(s, k_kw[i]);
        bool draft4 = i >= 2 && i < 4 && cJSON_IsBool(v[i]); /* exclusiveMinimum: true modifies minimum */
        if (v[i] && !cJSON_IsNumber(v[i]) && !draft4) return js_err(c, path, "%s must be a number", k_kw[i]);
    }
    bool integer = !(b->types & JT_FLOAT);
    char buf[40];
    for (int i = 0; i < 4; i++) {
        if (!v[i] || cJSON_IsBool(v[i])) continue;
        bool upper = i == 1 || i == 3;
        bool strict = i >= 2 || (cJSON_IsTrue(v[i + 2]));
        num_bound nb = {num_text(v[i], buf, sizeof buf), strict}, none = {NULL, false};
        char *kp = js_path(path, k_kw[i], NULL);
        int rc = and_num(c, b, num_range(integer, upper ? none : nb, upper ? nb : none), kp ? kp : path, k_kw[i]);
        free(kp);
        if (rc < 0) return TUTTI_ERR;
    }
    if (v[4]) {
        const char *t = num_text(v[4], buf, sizeof buf);
        char *kp = js_path(path, "multipleOf", NULL);
        int rc = 0;
        fsa *dy = num_is_int_literal(t) ? NULL : dyadic_multiples(t);
        if (dy) rc = and_num(c, b, dy, kp, "multipleOf");
        else if (!num_is_int_literal(t) || t[0] == '-' || !strcmp(t, "0"))
            rc = js_unsupported(c, kp, "multipleOf",
                                "%s: only positive integers and 0.5, 0.25, ... (2^-k) can be "
                                "enforced exactly (python-jsonschema divides floats in floating point: 0.3 is not a "
                                "multiple of 0.1 to it)",
                                t);
        else rc = and_num(c, b, num_multiple_of(t), kp, "multipleOf");
        b->num_inexact = true;
        free(kp);
        if (rc < 0) return TUTTI_ERR;
    }
    return 0;
}

static void and_str(fsa **dst, fsa *x) {
    if (*dst && x) {
        fsa *u = fsa_and(*dst, x);
        fsa_free(*dst), fsa_free(x);
        *dst = u;
    } else if (x) {
        *dst = x;
    }
}

/* true when the pattern uses what the engines read differently (\d \w \s
 * . $): then its superset automaton differs from its subset one */
static bool engines_may_differ(const char *p) { return strpbrk(p, ".$\\") != NULL; }

static int string_kws(js_ctx *c, const cJSON *s, const char *path, js_node *b) {
    int64_t mn = count_kw(c, s, "minLength", path), mx = count_kw(c, s, "maxLength", path);
    if (mn == -2 || mx == -2) return TUTTI_ERR;
    if (mn > JS_MAX_LEN && js_unsupported(c, path, "minLength", "%lld is above %d", (long long)mn, JS_MAX_LEN) < 0)
        return TUTTI_ERR;
    if (mn >= 0 && mn <= JS_MAX_LEN) b->min_len = mn;
    /* a longer bound is kept as JS_MAX_LEN: longer strings are refused */
    if (mx >= 0) b->max_len = mx > JS_MAX_LEN ? JS_MAX_LEN : mx;
    const cJSON *pat = js_kw(s, "pattern");
    if (pat) {
        if (!cJSON_IsString(pat)) return js_err(c, path, "pattern must be a string");
        char *kp = js_path(path, "pattern", NULL);
        const char *p = pat->valuestring;
        fsa *sub = rx_compile(p, strlen(p), RX_SUBSET);
        if (!sub) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", tutti_last_error());
            int rc = js_unsupported(c, kp, "pattern", "'%.120s': %s", p, msg);
            free(kp);
            return rc;
        }
        /* the superset automaton: the same one, unless the engines may
         * differ: then built only if a `not` needs it (js_not.c) */
        fsa *sup = NULL;
        if (engines_may_differ(p)) {
            const char **ns = realloc(b->sup_src, sizeof(char *) * (size_t)(b->n_sup_src + 1));
            if (!ns) return free(kp), fsa_free(sub), js_err(c, path, "out of memory");
            b->sup_src = ns;
            b->sup_src[b->n_sup_src++] = p;
        } else if (!(sup = fsa_copy(sub))) {
            return free(kp), fsa_free(sub), js_err(c, path, "out of memory");
        }
        and_str(&b->str, sub);
        if (sup) and_str(&b->str_sup, sup);
        free(kp);
        if (!b->str || (sup && !b->str_sup)) return js_err(c, path, "pattern: %s", tutti_last_error());
    }
    const cJSON *f = js_kw(s, "format");
    if (f && cJSON_IsString(f)) {
        fsa *x;
        int k = js_format(f->valuestring, &x);
        char *kp = js_path(path, "format", NULL);
        int rc = 0;
        if (k == -2)
            rc = js_unsupported(c, kp, "format", "'%.60s' is checked by validators and not supported", f->valuestring);
        else if (k < 0) rc = js_err(c, kp, "format '%.60s': %s", f->valuestring, tutti_last_error());
        else if (k == 1) {
            and_str(&b->str, x);
            b->str_no_neg = true; /* a subset of what validators accept: not complementable */
            if (!b->str) rc = js_err(c, kp, "format: %s", tutti_last_error());
        }
        free(kp);
        if (rc < 0) return TUTTI_ERR;
    }
    return 0;
}

static int array_kws(js_ctx *c, const cJSON *s, const char *path, js_node *b) {
    const cJSON *items = js_kw(s, "items"), *prefix = js_kw(s, "prefixItems"), *add = js_kw(s, "additionalItems");
    const cJSON *tuple = prefix && cJSON_IsArray(prefix) ? prefix : items && cJSON_IsArray(items) ? items : NULL;
    if (tuple) {
        int32_t n = cJSON_GetArraySize(tuple), i = 0;
        b->prefix = calloc((size_t)n + 1, sizeof(js_node *));
        if (!b->prefix) return js_err(c, path, "out of memory");
        const char *kw = tuple == prefix ? "prefixItems" : "items";
        for (const cJSON *x = tuple->child; x; x = x->next, i++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", i);
            char *kp = js_path(path, kw, idx);
            b->prefix[b->n_prefix++] = js_of_schema(c, x, kp);
            free(kp);
        }
        /* what follows the tuple: items (2020-12) or additionalItems */
        const cJSON *after = tuple == prefix ? items : add;
        if (after && !cJSON_IsArray(after)) {
            char *kp = js_path(path, tuple == prefix ? "items" : "additionalItems", NULL);
            b->items = js_of_schema(c, after, kp);
            free(kp);
        }
    } else if (items) {
        char *kp = js_path(path, "items", NULL);
        b->items = js_of_schema(c, items, kp);
        free(kp);
    }
    int64_t mn = count_kw(c, s, "minItems", path), mx = count_kw(c, s, "maxItems", path);
    if (mn == -2 || mx == -2) return TUTTI_ERR;
    if (mn > JS_MAX_LEN && js_unsupported(c, path, "minItems", "%lld is above %d", (long long)mn, JS_MAX_LEN) < 0)
        return TUTTI_ERR;
    if (mn >= 0 && mn <= JS_MAX_LEN) b->min_items = mn;
    if (mx >= 0) b->max_items = mx > JS_MAX_LEN ? JS_MAX_LEN : mx;
    const cJSON *ct = js_kw(s, "contains");
    int64_t cmin = count_kw(c, s, "minContains", path), cmax = count_kw(c, s, "maxContains", path);
    if (cmin == -2 || cmax == -2) return TUTTI_ERR;
    if (ct && cmin != 0) {
        if (cmin > 1 && js_unsupported(c, path, "minContains", "only 0 and 1 are supported") < 0) return TUTTI_ERR;
        char *kp = js_path(path, "contains", NULL);
        b->contains = js_of_schema(c, ct, kp);
        free(kp);
    }
    if (ct && cmax >= 0 && js_unsupported(c, path, "maxContains", "at most N matching items cannot be enforced") < 0)
        return TUTTI_ERR;
    const cJSON *u = js_kw(s, "uniqueItems");
    /* enforced where the items are a few null/boolean/string values
     * (js_emit.c), else refused there with this path */
    if (cJSON_IsTrue(u) && !(b->max_items >= 0 && b->max_items <= 1)) b->unique = true;
    return c->failed ? TUTTI_ERR : 0;
}

static int add_prop(js_ctx *c, js_node *b, const char *name, js_node *v, bool required, const char *path) {
    for (int32_t k = 0; k < b->n_props; k++)
        if (!strcmp(b->props[k].name, name)) {
            if (v) b->props[k].node = v;
            b->props[k].required |= required;
            return 0;
        }
    js_prop *p = realloc(b->props, sizeof(js_prop) * (size_t)(b->n_props + 1));
    if (!p) return js_err(c, path, "out of memory");
    b->props = p;
    b->props[b->n_props++] = (js_prop){strdup(name), v, required};
    if (!b->props[b->n_props - 1].name) return js_err(c, path, "out of memory");
    return 0;
}

int js_object_fixup(js_ctx *c, js_node *b, const char *path);

static int object_kws(js_ctx *c, const cJSON *s, const char *path, js_node *b) {
    const cJSON *props = js_kw(s, "properties"), *req = js_kw(s, "required");
    for (const cJSON *p = cJSON_IsObject(props) ? props->child : NULL; p; p = p->next) {
        char *kp = js_path(path, "properties", p->string);
        int rc = add_prop(c, b, p->string, js_of_schema(c, p, kp), false, path);
        free(kp);
        if (rc < 0) return rc;
    }
    if (req && !cJSON_IsArray(req)) return js_err(c, path, "required must be an array of strings");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) return js_err(c, path, "required must be an array of strings");
        if (add_prop(c, b, r->valuestring, NULL, true, path) < 0) return TUTTI_ERR;
    }
    const cJSON *pp = js_kw(s, "patternProperties");
    for (const cJSON *p = cJSON_IsObject(pp) ? pp->child : NULL; p; p = p->next) {
        char *kp = js_path(path, "patternProperties", p->string);
        fsa *sub = rx_compile(p->string, strlen(p->string), RX_SUBSET), *sup = NULL;
        if (sub)
            sup = engines_may_differ(p->string) ? rx_compile(p->string, strlen(p->string), RX_SUPERSET) : fsa_copy(sub);
        if (!sub || !sup) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", tutti_last_error());
            fsa_free(sub), fsa_free(sup);
            int rc = js_unsupported(c, kp, "patternProperties", "'%.120s': %s", p->string, msg);
            free(kp);
            if (rc < 0) return rc;
            continue;
        }
        js_pat *np = realloc(b->pats, sizeof(js_pat) * (size_t)(b->n_pats + 1));
        if (!np) return free(kp), js_err(c, path, "out of memory");
        b->pats = np;
        /* keys either engine may match but the subset does not: neither
         * the pattern's schema nor additionalProperties is known to apply,
         * so they are refused (kept as the pattern's "unsure" keys) */
        fsa *unsure = fsa_minus(sup, sub);
        b->pats[b->n_pats++] = (js_pat){sub, js_of_schema(c, p, kp)};
        fsa_free(sup);
        if (!unsure) return free(kp), js_err(c, path, "%s", tutti_last_error());
        if (!fsa_is_empty(unsure)) {
            fsa *nn = fsa_not(unsure);
            and_str(&b->names, nn);
        }
        fsa_free(unsure);
        free(kp);
    }
    const cJSON *add = js_kw(s, "additionalProperties");
    if (add) {
        char *kp = js_path(path, "additionalProperties", NULL);
        b->additional = cJSON_IsTrue(add) ? NULL : js_of_schema(c, add, kp);
        b->add_open = true;
        free(kp);
    }
    const cJSON *pn = js_kw(s, "propertyNames");
    if (pn) {
        char *kp = js_path(path, "propertyNames", NULL);
        js_node *x = js_of_schema(c, pn, kp);
        fsa *names = x ? js_string_language(c, x, kp) : NULL;
        free(kp);
        if (!names) return TUTTI_ERR;
        and_str(&b->names, names);
        if (!b->names) return js_err(c, path, "propertyNames: %s", tutti_last_error());
    }
    int64_t mn = count_kw(c, s, "minProperties", path), mx = count_kw(c, s, "maxProperties", path);
    if (mn == -2 || mx == -2) return TUTTI_ERR;
    if (mn >= 0) b->min_props = mn;
    if (mx >= 0) b->max_props = mx;
    if (js_kw(s, "unevaluatedProperties") && !cJSON_IsTrue(js_kw(s, "unevaluatedProperties")))
        if (js_unsupported(c, path, "unevaluatedProperties", "not supported") < 0) return TUTTI_ERR;
    return js_object_fixup(c, b, path);
}

/* ---- combining keywords ---- */

typedef struct parts {
    js_node **p;
    int32_t n, cap;
} parts;

static int push(js_ctx *c, parts *ps, js_node *x, const char *path) {
    if (!x) return TUTTI_ERR;
    if (ps->n == ps->cap) {
        int32_t nc = ps->cap ? ps->cap * 2 : 8;
        js_node **a = realloc(ps->p, sizeof(js_node *) * (size_t)nc);
        if (!a) return js_err(c, path, "out of memory");
        ps->p = a, ps->cap = nc;
    }
    ps->p[ps->n++] = x;
    return 0;
}

/* The nodes of an array of schemas (allOf, anyOf, oneOf). */
static js_node **schema_list(js_ctx *c, const cJSON *arr, const char *path, const char *kw, int32_t *n) {
    *n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    if (!cJSON_IsArray(arr) || *n == 0) {
        js_err(c, path, "%s must be a non-empty array of schemas", kw);
        return NULL;
    }
    js_node **k = calloc((size_t)*n, sizeof(js_node *));
    if (!k) {
        js_err(c, path, "out of memory");
        return NULL;
    }
    int32_t i = 0;
    for (const cJSON *x = arr->child; x; x = x->next, i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        char *kp = js_path(path, kw, idx);
        k[i] = js_of_schema(c, x, kp);
        free(kp);
        if (!k[i]) {
            free(k);
            return NULL;
        }
    }
    return k;
}

/* {"properties": {k: false}}: objects without k (anything else). */
static js_node *without(js_ctx *c, const char *k, const char *path) {
    js_node *b = js_base(c, path, JT_ALL);
    if (!b || add_prop(c, b, k, c->nothing, false, path) < 0) return NULL;
    return b;
}

/* {"required": names}: objects with them (anything else). */
static js_node *with(js_ctx *c, const char *k, const cJSON *more, const char *path) {
    js_node *b = js_base(c, path, JT_ALL);
    if (!b || add_prop(c, b, k, c->any, true, path) < 0) return NULL;
    for (const cJSON *r = more ? more->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) return js_err(c, path, "dependencies must name properties with strings"), NULL;
        if (add_prop(c, b, r->valuestring, c->any, true, path) < 0) return NULL;
    }
    return b;
}

/* dependencies / dependentRequired / dependentSchemas: for each key k,
 * objects without k, or with k and what it asks for. */
static int deps(js_ctx *c, const cJSON *s, const char *path, parts *ps) {
    static const char *const k_kw[] = {"dependencies", "dependentRequired", "dependentSchemas"};
    for (int w = 0; w < 3; w++) {
        const cJSON *d = js_kw(s, k_kw[w]);
        for (const cJSON *x = cJSON_IsObject(d) ? d->child : NULL; x; x = x->next) {
            char *kp = js_path(path, k_kw[w], x->string);
            js_node *alt[2] = {without(c, x->string, kp), NULL};
            if (cJSON_IsArray(x)) alt[1] = with(c, x->string, x, kp);
            else alt[1] = js_and(c, with(c, x->string, NULL, kp), js_of_schema(c, x, kp), kp);
            int rc = alt[0] && alt[1] ? push(c, ps, js_or(c, alt, 2, kp), kp) : TUTTI_ERR;
            free(kp);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

static int combinators(js_ctx *c, const cJSON *s, const char *path, parts *ps) {
    const cJSON *ref = js_kw(s, "$ref");
    if (ref) {
        if (!cJSON_IsString(ref)) return js_err(c, path, "$ref must be a string");
        const cJSON *t = resolve(c, ref->valuestring, path);
        if (t && push(c, ps, js_of_schema(c, t, ref->valuestring + 1), path) < 0) return TUTTI_ERR;
        if (!t && c->failed) return TUTTI_ERR;
    }
    static const char *const k_list[] = {"allOf", "anyOf", "oneOf"};
    for (int w = 0; w < 3; w++) {
        const cJSON *l = js_kw(s, k_list[w]);
        if (!l) continue;
        int32_t n;
        js_node **k = schema_list(c, l, path, k_list[w], &n);
        if (!k) return TUTTI_ERR;
        char *kp = js_path(path, k_list[w], NULL);
        int rc = 0;
        if (w == 0)
            for (int32_t i = 0; i < n && rc == 0; i++) rc = push(c, ps, k[i], path);
        else rc = push(c, ps, w == 1 ? js_or(c, k, n, kp) : js_oneof(c, k, n, kp), path);
        free(kp), free(k);
        if (rc < 0) return rc;
    }
    const cJSON *nt = js_kw(s, "not");
    if (nt) {
        char *kp = js_path(path, "not", NULL);
        int rc = push(c, ps, js_not(c, js_of_schema(c, nt, kp), kp), path);
        free(kp);
        if (rc < 0) return rc;
    }
    const cJSON *ifs = js_kw(s, "if");
    if (ifs) {
        char *ip = js_path(path, "if", NULL), *tp = js_path(path, "then", NULL), *ep = js_path(path, "else", NULL);
        const cJSON *th = js_kw(s, "then"), *el = js_kw(s, "else");
        js_node *i = js_of_schema(c, ifs, ip);
        js_node *ni = js_not(c, i, ip); /* the values that fail `if` */
        if (ni && ni->kw && !strcmp(ni->kw, "not")) ni->kw = "if";
        js_node *alt[2] = {th ? js_and(c, i, js_of_schema(c, th, tp), tp) : i,
                           el ? js_and(c, ni, js_of_schema(c, el, ep), ep) : ni};
        int rc = (th || el) && alt[0] && alt[1] ? push(c, ps, js_or(c, alt, 2, ip), path) : c->failed ? TUTTI_ERR : 0;
        free(ip), free(tp), free(ep);
        if (rc < 0) return rc;
    }
    const cJSON *en = js_kw(s, "enum"), *cs = js_kw(s, "const");
    if (en) {
        if (!cJSON_IsArray(en)) return js_err(c, path, "enum must be an array");
        char *kp = js_path(path, "enum", NULL);
        int rc = push(c, ps, values_node(c, en, true, kp), path);
        free(kp);
        if (rc < 0) return rc;
    }
    if (cs) {
        char *kp = js_path(path, "const", NULL);
        int rc = push(c, ps, values_node(c, cs, false, kp), path);
        free(kp);
        if (rc < 0) return rc;
    }
    return deps(c, s, path, ps);
}

/* Keywords that constrain values and have no meaning here. */
static int refused(js_ctx *c, const cJSON *s, const char *path) {
    static const char *const k_no[] = {"$dynamicRef", "$recursiveRef", "unevaluatedItems", NULL};
    for (int i = 0; k_no[i]; i++)
        if (js_kw(s, k_no[i]) && js_unsupported(c, path, k_no[i], "not supported") < 0) return TUTTI_ERR;
    return 0;
}

/* true when $ref or allOf comes before the object keywords of s. */
static bool combinator_first(const cJSON *s) {
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!k->string) continue;
        if (!strcmp(k->string, "$ref") || !strcmp(k->string, "allOf")) return true;
        if (!strcmp(k->string, "properties") || !strcmp(k->string, "required") ||
            !strcmp(k->string, "patternProperties"))
            return false;
    }
    return false;
}

int js_force_schema(js_ctx *c, js_node *n) {
    const cJSON *s = n->schema;
    if (cJSON_IsTrue(s)) {
        n->fwd = c->any;
        return 0;
    }
    if (cJSON_IsFalse(s)) {
        n->fwd = c->nothing;
        return 0;
    }
    if (!cJSON_IsObject(s)) return js_err(c, n->path, "a schema must be an object or a boolean");
    parts ps = {0};
    uint32_t types;
    js_node *b = NULL;
    int rc = TUTTI_ERR;
    if (types_kw(c, s, n->path, &types) < 0 || !(b = js_base(c, n->path, types))) goto done;
    if (number_kws(c, s, n->path, b) < 0 || string_kws(c, s, n->path, b) < 0 || array_kws(c, s, n->path, b) < 0 ||
        object_kws(c, s, n->path, b) < 0 || refused(c, s, n->path) < 0)
        goto done;
    /* the parts in the order the schema writes them: properties merged from
     * a $ref or allOf written before "properties" come first (the order
     * an instance's properties are expected in) */
    if (push(c, &ps, b, n->path) < 0 || combinators(c, s, n->path, &ps) < 0) goto done;
    if (ps.n > 1 && combinator_first(s)) {
        memmove(ps.p, ps.p + 1, sizeof(js_node *) * (size_t)(ps.n - 1));
        ps.p[ps.n - 1] = b;
    }
    js_node *r = ps.p[0];
    for (int32_t i = 1; i < ps.n && r; i++) r = js_and(c, r, ps.p[i], n->path);
    if (!r) goto done;
    n->fwd = r;
    rc = 0;
done:
    free(ps.p);
    return rc;
}

js_node *js_of_schema(js_ctx *c, const cJSON *s, const char *path) {
    if (c->failed) return NULL;
    js_node *m = js_memo_get(c, JK_SCHEMA, s, NULL);
    if (m) return m;
    js_node *n = js_node_new(c, JK_SCHEMA, path);
    if (!n) return NULL;
    n->schema = s;
    js_memo_put(c, JK_SCHEMA, s, NULL, n);
    return n;
}

fsa *js_named_fsa(const js_node *b) {
    /* one trie of every name: or-ing them one at a time minimised a growing
     * automaton per name (quadratic: seconds for an object of 500 names) */
    const char **names = malloc(sizeof(char *) * (size_t)(b->n_props > 0 ? b->n_props : 1));
    if (!names) {
        tutti_set_error("out of memory");
        return NULL;
    }
    for (int32_t k = 0; k < b->n_props; k++) names[k] = b->props[k].name;
    fsa *named = fsa_utf8_literals(names, b->n_props);
    free(names);
    if (named) return named;
    /* too many code points for one trie: the names one at a time */
    named = fsa_nothing();
    for (int32_t k = 0; k < b->n_props && named; k++) {
        fsa *l = fsa_utf8_literal(b->props[k].name, strlen(b->props[k].name)), *u = l ? fsa_or(named, l) : NULL;
        fsa_free(l), fsa_free(named);
        named = u;
    }
    return named;
}
