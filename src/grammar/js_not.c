/* Negation (js_ir.h): the values a node does not admit, for `not`, the
 * other branches of a `oneOf` and the `else` of if/then/else.
 *
 * not (A | B) = not A & not B.  The complement of a BASE is the union of
 * the other types and, per type, of the ways a value of that type breaks
 * one keyword: a number outside the number automaton, a string outside
 * the string automaton or its length bounds, an array too short, too long,
 * with a wrong item or no item of `contains`, an object missing a required
 * property, with a wrong property value, or with some property its
 * patterns, additionalProperties or propertyNames forbid ("some property
 * with a name in K and a value in V": need_key / need_val).
 *
 * Only what stays exact is built: a number automaton is complemented on
 * the spellings where it is exact (js_number.h), a pattern through its
 * superset automaton (regex.h); formats (subsets of what validators
 * accept), uniqueItems and the like are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/js_ir.h"
#include "grammar/regex.h"

typedef struct alts {
    js_node **k;
    int32_t n, cap;
} alts;

static js_node *push(js_ctx *c, alts *a, js_node *x) {
    if (!x) return NULL;
    if (a->n == a->cap) {
        int32_t nc = a->cap ? a->cap * 2 : 8;
        js_node **k = realloc(a->k, sizeof(js_node *) * (size_t)nc);
        if (!k) return js_err(c, x->path, "out of memory"), NULL;
        a->k = k, a->cap = nc;
    }
    a->k[a->n++] = x;
    return x;
}

static int refuse(js_ctx *c, js_node *n, const char *what) {
    const char *kw = n->kw ? n->kw : "not";
    const char *why = !strcmp(kw, "oneOf") ? "this oneOf branch may overlap another and its values cannot be excluded: "
                      : !strcmp(kw, "if")  ? "the values failing `if` (for `else`) cannot be described: "
                                           : "";
    return js_unsupported(c, n->path, kw, "%s%s", why, what);
}

/* Spellings on which the number automata are exact: integer literals,
 * decimals up to 24 places, exponent forms up to 16 (js_number.h). */
static fsa *exact_numbers(uint32_t types) {
    const char *ri = "^-?(?:0|[1-9][0-9]*)$";
    const char *rf = "^-?(?:(?:0|[1-9][0-9]*)\\.[0-9]{1,24}|[1-9](?:\\.[0-9]{1,16})?[eE][+-]?[0-9]+)$";
    fsa *i = (types & JT_INT) ? rx_compile(ri, strlen(ri), RX_SUBSET) : fsa_nothing();
    fsa *f = (types & JT_FLOAT) ? rx_compile(rf, strlen(rf), RX_SUBSET) : fsa_nothing();
    fsa *u = i && f ? fsa_or(i, f) : NULL;
    fsa_free(i), fsa_free(f);
    return u;
}

/* Decimals that are certainly not integers to Python (at most 15
 * significant digits, a non-zero fraction: no rounding reaches an
 * integer), for "not an integer". */
static fsa *non_integral(void) {
    const char *r = "^-?(?:0|[1-9][0-9]{0,6})\\.[0-9]{0,7}[1-9]$";
    return rx_compile(r, strlen(r), RX_SUBSET);
}

static int neg_numbers(js_ctx *c, js_node *n, js_node *b, alts *out) {
    uint32_t nt = b->types & (JT_INT | JT_FLOAT);
    /* a FLOAT spelling can be an integer ("1.0"): the complement of
     * "integer" only has the decimals that are certainly not */
    if ((b->types & JT_INT) && !(b->types & JT_FLOAT)) {
        js_node *f = push(c, out, js_base(c, n->path, JT_FLOAT));
        if (!f || !(f->num = non_integral())) return js_err(c, n->path, "%s", tutti_last_error());
    }
    if (!nt || !b->num) return 0;
    fsa *ex = exact_numbers(b->num_inexact ? JT_INT : nt);
    fsa *d = ex ? fsa_minus(ex, b->num) : NULL;
    fsa_free(ex);
    if (!d) return js_err(c, n->path, "%s", tutti_last_error());
    js_node *x = push(c, out, js_base(c, n->path, b->num_inexact ? JT_INT : nt));
    if (!x) return fsa_free(d), TUTTI_ERR;
    x->num = d;
    if (b->num_inexact && (nt & JT_FLOAT)) { /* not a multiple: certainly not when not an integer */
        js_node *f = push(c, out, js_base(c, n->path, JT_FLOAT));
        if (!f || !(f->num = non_integral())) return js_err(c, n->path, "%s", tutti_last_error());
    }
    return 0;
}

static int neg_strings(js_ctx *c, js_node *n, js_node *b, alts *out) {
    if (!b->str && !b->n_sup_src && b->min_len == 0 && b->max_len < 0) return 0;
    if (b->str_no_neg) return refuse(c, n, "a format's strings cannot be complemented exactly");
    fsa *sup = b->str_sup ? fsa_copy(b->str_sup) : fsa_all(), *sub = b->str ? fsa_copy(b->str) : fsa_all();
    for (int32_t i = 0; i < b->n_sup_src && sup; i++) { /* the patterns' supersets, built now */
        fsa *p = rx_compile(b->sup_src[i], strlen(b->sup_src[i]), RX_SUPERSET), *x = p ? fsa_and(sup, p) : NULL;
        fsa_free(p), fsa_free(sup);
        sup = x;
    }
    if (sup && (b->min_len || b->max_len >= 0)) {
        fsa *l = fsa_length(sup, b->min_len, b->max_len);
        fsa_free(sup);
        sup = l;
    }
    if (sub && (b->min_len || b->max_len >= 0)) {
        fsa *l = fsa_length(sub, b->min_len, b->max_len);
        fsa_free(sub);
        sub = l;
    }
    js_node *x = sup && sub ? push(c, out, js_base(c, n->path, JT_STR)) : NULL;
    if (x) {
        x->str = fsa_not(sup);     /* surely outside: a subset of the complement */
        x->str_sup = fsa_not(sub); /* maybe outside */
    }
    fsa_free(sup), fsa_free(sub);
    if (!x || !x->str || !x->str_sup) return refuse(c, n, tutti_last_error());
    return 0;
}

static int neg_arrays(js_ctx *c, js_node *n, js_node *b, alts *out) {
    if (b->min_items > 0) {
        js_node *x = push(c, out, js_base(c, n->path, JT_ARR));
        if (!x) return TUTTI_ERR;
        x->max_items = b->min_items - 1;
    }
    if (b->max_items >= 0) {
        js_node *x = push(c, out, js_base(c, n->path, JT_ARR));
        if (!x) return TUTTI_ERR;
        x->min_items = b->max_items + 1;
    }
    for (int32_t i = 0; i < b->n_prefix; i++) {
        if (b->prefix[i] == c->any) continue;
        js_node *x = push(c, out, js_base(c, n->path, JT_ARR));
        if (!x || !(x->prefix = calloc((size_t)i + 1, sizeof(js_node *)))) return js_err(c, n->path, "out of memory");
        for (int32_t k = 0; k < i; k++) x->prefix[k] = c->any;
        x->prefix[i] = js_not(c, b->prefix[i], n->path);
        x->n_prefix = i + 1, x->min_items = i + 1;
    }
    if (b->items && b->items != c->any) {
        if (b->n_prefix) return refuse(c, n, "a wrong item after prefixItems cannot be described");
        js_node *x = push(c, out, js_base(c, n->path, JT_ARR));
        if (!x) return TUTTI_ERR;
        x->contains = js_not(c, b->items, n->path);
    }
    if (b->contains) {
        js_node *x = push(c, out, js_base(c, n->path, JT_ARR));
        if (!x) return TUTTI_ERR;
        x->items = js_not(c, b->contains, n->path);
    }
    if (b->unique) return refuse(c, n, "uniqueItems cannot be negated");
    return 0;
}

/* Objects with some property named in key (consumed) whose value is in v. */
static int need(js_ctx *c, js_node *n, alts *out, fsa *key, js_node *v) {
    if (!key) return js_err(c, n->path, "%s", tutti_last_error());
    if (fsa_is_empty(key)) return fsa_free(key), 0;
    js_node *x = push(c, out, js_base(c, n->path, JT_OBJ));
    if (!x) return fsa_free(key), TUTTI_ERR;
    x->need_key = key, x->need_val = v;
    return 0;
}

static int neg_objects(js_ctx *c, js_node *n, js_node *b, alts *out) {
    for (int32_t k = 0; k < b->n_props; k++) {
        js_prop *p = &b->props[k];
        if (p->required) { /* missing */
            js_node *x = push(c, out, js_base(c, n->path, JT_OBJ));
            if (!x || !(x->props = calloc(1, sizeof(js_prop))) || !(x->props[0].name = strdup(p->name)))
                return js_err(c, n->path, "out of memory");
            x->props[0].node = c->nothing, x->n_props = 1;
        }
        if (p->node != c->any) { /* present with a wrong value */
            js_node *x = push(c, out, js_base(c, n->path, JT_OBJ));
            if (!x || !(x->props = calloc(1, sizeof(js_prop))) || !(x->props[0].name = strdup(p->name)))
                return js_err(c, n->path, "out of memory");
            x->props[0] = (js_prop){x->props[0].name, js_not(c, p->node, n->path), true};
            x->n_props = 1;
        }
    }
    /* a name outside the named properties */
    fsa *named = js_named_fsa(b);
    fsa *other = named ? fsa_not(named) : NULL, *in_pats = fsa_nothing();
    for (int32_t k = 0; k < b->n_pats && other && in_pats; k++) {
        fsa *u = fsa_or(in_pats, b->pats[k].key);
        fsa_free(in_pats);
        in_pats = u;
        if (b->pats[k].node != c->any &&
            need(c, n, out, fsa_and(other, b->pats[k].key), js_not(c, b->pats[k].node, n->path)) < 0)
            goto fail;
    }
    if (!other || !in_pats) goto fail;
    if (b->additional && b->additional != c->any) {
        fsa *rest = fsa_minus(other, in_pats);
        if (need(c, n, out, rest, b->additional == c->nothing ? c->any : js_not(c, b->additional, n->path)) < 0)
            goto fail;
    }
    if (b->names && need(c, n, out, fsa_not(b->names), c->any) < 0) goto fail;
    fsa_free(named), fsa_free(other), fsa_free(in_pats);
    if (b->min_props > 0) {
        js_node *x = push(c, out, js_base(c, n->path, JT_OBJ));
        if (!x) return TUTTI_ERR;
        x->max_props = b->min_props - 1;
    }
    if (b->max_props >= 0) {
        js_node *x = push(c, out, js_base(c, n->path, JT_OBJ));
        if (!x) return TUTTI_ERR;
        x->min_props = b->max_props + 1;
    }
    if (b->need_key) return refuse(c, n, "'some property must ...' cannot be negated");
    return 0;
fail:
    fsa_free(named), fsa_free(other), fsa_free(in_pats);
    return c->failed ? TUTTI_ERR : js_err(c, n->path, "%s", tutti_last_error());
}

int js_force_not(js_ctx *c, js_node *n) {
    js_node *a = js_hnf(c, n->a);
    if (!a) return TUTTI_ERR;
    if (a->kind == JK_OR) { /* not (x | y) = not x & not y */
        js_node *r = c->any;
        for (int32_t i = 0; i < a->n_kid && r; i++) r = js_and(c, r, js_not(c, a->kid[i], n->path), n->path);
        n->fwd = r;
        return r ? 0 : TUTTI_ERR;
    }
    alts out = {0};
    int rc = 0;
    size_t warned = c->warn ? c->warn->n : 0;
    /* the other types (FLOAT apart when a admits INT: a decimal can be an
     * integer, neg_numbers adds the ones that are certainly not) */
    uint32_t others = JT_ALL & ~a->types & ~((a->types & JT_INT) ? (uint32_t)JT_FLOAT : 0u);
    if (others) rc = push(c, &out, js_base(c, n->path, others)) ? 0 : TUTTI_ERR;
    if (!rc && (a->types & (JT_INT | JT_FLOAT))) rc = neg_numbers(c, n, a, &out);
    if (!rc && (a->types & JT_STR)) rc = neg_strings(c, n, a, &out);
    if (!rc && (a->types & JT_ARR)) rc = neg_arrays(c, n, a, &out);
    if (!rc && (a->types & JT_OBJ)) rc = neg_objects(c, n, a, &out);
    /* lenient, and a part could not be negated: the whole `not` (or
     * oneOf exclusion, or `else` condition) is dropped, as its warning says */
    if (!rc) n->fwd = c->warn && c->warn->n != warned ? c->any : js_or(c, out.k, out.n, n->path);
    free(out.k);
    if (rc == 0 && !n->fwd) rc = TUTTI_ERR;
    return rc;
}
