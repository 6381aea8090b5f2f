/* Combining nodes (js_ir.h): intersection, union, exactly-one, and
 * forcing lazy nodes into their head form.
 *
 * Intersection of two BASEs is per type and per keyword: numbers and
 * strings intersect their automata (lengths: the tighter bound), arrays
 * item by item, objects property by property, where each side's schema for
 * a name is its property, else its matching patterns, else its
 * additionalProperties, so `allOf` and `$ref` next to other keywords are
 * exact.  Unions distribute: (A | B) & C = (A & C) | (B & C). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/js_ir.h"

#define JS_MAX_OR 1024 /* branches of one union after distribution */

/* ---- memo ---- */

typedef struct js_memo {
    int kind;
    const void *a, *b;
    js_node *n;
} js_memo;

static uint64_t memo_hash(int kind, const void *a, const void *b) {
    uint64_t h = (uint64_t)(uintptr_t)a * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)b * 0xC2B2AE3D27D4EB4Full;
    h ^= (uint64_t)kind * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    return h * 0xBF58476D1CE4E5B9ull;
}

js_node *js_memo_get(js_ctx *c, int kind, const void *a, const void *b) {
    if (!c->memo_cap) return NULL;
    uint64_t j = memo_hash(kind, a, b) & (uint64_t)(c->memo_cap - 1);
    while (c->memo[j].n) {
        if (c->memo[j].kind == kind && c->memo[j].a == a && c->memo[j].b == b) return c->memo[j].n;
        j = (j + 1) & (uint64_t)(c->memo_cap - 1);
    }
    return NULL;
}

void js_memo_put(js_ctx *c, int kind, const void *a, const void *b, js_node *n) {
    if ((c->memo_n + 1) * 2 > c->memo_cap) {
        int32_t nc = c->memo_cap ? c->memo_cap * 2 : 256;
        js_memo *m = calloc((size_t)nc, sizeof *m);
        if (!m) return; /* not memoised: only slower */
        for (int32_t i = 0; i < c->memo_cap; i++) {
            if (!c->memo[i].n) continue;
            uint64_t j = memo_hash(c->memo[i].kind, c->memo[i].a, c->memo[i].b) & (uint64_t)(nc - 1);
            while (m[j].n) j = (j + 1) & (uint64_t)(nc - 1);
            m[j] = c->memo[i];
        }
        free(c->memo);
        c->memo = m, c->memo_cap = nc;
    }
    uint64_t j = memo_hash(kind, a, b) & (uint64_t)(c->memo_cap - 1);
    while (c->memo[j].n) j = (j + 1) & (uint64_t)(c->memo_cap - 1);
    c->memo[j] = (js_memo){kind, a, b, n};
    c->memo_n++;
}

void js_ctx_free(js_ctx *c) {
    for (int32_t i = 0; i < c->n_nodes; i++) {
        js_node *n = c->nodes[i];
        fsa_free(n->num), fsa_free(n->str), fsa_free(n->str_sup), fsa_free(n->names), fsa_free(n->need_key);
        for (int32_t k = 0; k < n->n_props; k++) free(n->props[k].name);
        for (int32_t k = 0; k < n->n_pats; k++) fsa_free(n->pats[k].key);
        free(n->props), free(n->pats), free(n->prefix), free(n->kid), free(n->path), free(n->rule), free(n->sup_src);
        free(n);
    }
    free(c->nodes), free(c->memo);
    c->nodes = NULL, c->memo = NULL;
    c->n_nodes = c->cap_nodes = c->memo_n = c->memo_cap = 0;
}

/* ---- constructors ---- */

js_node *js_base(js_ctx *c, const char *path, uint32_t types) {
    js_node *n = js_node_new(c, JK_BASE, path);
    if (!n) return NULL;
    n->types = types;
    n->state = 2;
    return n;
}

js_node *js_and(js_ctx *c, js_node *a, js_node *b, const char *path) {
    if (!a || !b || c->failed) return NULL;
    if (a == c->any || a == b) return b;
    if (b == c->any) return a;
    if (a == c->nothing || b == c->nothing) return c->nothing;
    /* (a, b) in this order: a's properties come first in the object */
    js_node *m = js_memo_get(c, JK_AND, a, b);
    if (m) return m;
    js_node *n = js_node_new(c, JK_AND, path);
    if (!n) return NULL;
    n->a = a, n->b = b;
    js_memo_put(c, JK_AND, a, b, n);
    return n;
}

js_node *js_or(js_ctx *c, js_node **kid, int32_t n, const char *path) {
    if (c->failed) return NULL;
    js_node *o = js_node_new(c, JK_OR, path);
    if (!o || !(o->kid = malloc(sizeof(js_node *) * (size_t)(n + 1)))) return js_err(c, path, "out of memory"), NULL;
    for (int32_t i = 0; i < n; i++) {
        if (!kid[i]) return NULL;
        if (kid[i] == c->any) return c->any;
        if (kid[i] != c->nothing) o->kid[o->n_kid++] = kid[i];
    }
    if (o->n_kid == 0) return c->nothing;
    if (o->n_kid == 1) return o->kid[0];
    o->state = 2;
    return o;
}

js_node *js_not(js_ctx *c, js_node *a, const char *path) {
    if (!a || c->failed) return NULL;
    if (a == c->any) return c->nothing;
    if (a == c->nothing) return c->any;
    js_node *m = js_memo_get(c, JK_NOT, a, NULL);
    if (m) return m;
    js_node *n = js_node_new(c, JK_NOT, path);
    if (!n) return NULL;
    n->a = a;
    n->kw = "not";
    js_memo_put(c, JK_NOT, a, NULL, n);
    js_memo_put(c, JK_NOT, n, NULL, a); /* not not a = a */
    return n;
}

js_node *js_oneof(js_ctx *c, js_node **kid, int32_t n, const char *path) {
    if (c->failed) return NULL;
    if (n == 1) return kid[0];
    js_node *o = js_node_new(c, JK_ONEOF, path);
    if (!o || !(o->kid = malloc(sizeof(js_node *) * (size_t)n))) return js_err(c, path, "out of memory"), NULL;
    memcpy(o->kid, kid, sizeof(js_node *) * (size_t)n);
    o->n_kid = n;
    return o;
}

/* ---- forcing ---- */

static int force_and(js_ctx *c, js_node *n);
int js_force_not(js_ctx *c, js_node *n);
static int force_oneof(js_ctx *c, js_node *n);

int js_force(js_ctx *c, js_node *n) {
    if (!n || c->failed) return TUTTI_ERR;
    if (n->state == 2) return 0;
    if (n->state == 1)
        return js_err(c, n->path,
                      "the schema refers to itself without describing a value first (a $ref, allOf or "
                      "not cycle): no JSON value can be built from it");
    n->state = 1;
    int rc;
    switch (n->kind) {
    case JK_SCHEMA: rc = js_force_schema(c, n); break;
    case JK_AND: rc = force_and(c, n); break;
    case JK_NOT: rc = js_force_not(c, n); break;
    case JK_ONEOF: rc = force_oneof(c, n); break;
    default: rc = 0; break;
    }
    if (rc == 0 && n->fwd) rc = js_force(c, n->fwd);
    n->state = 2;
    return c->failed ? TUTTI_ERR : rc;
}

js_node *js_hnf(js_ctx *c, js_node *n) {
    while (n) {
        if (js_force(c, n) < 0) return NULL;
        if (!n->fwd) return n;
        n = n->fwd;
    }
    return NULL;
}

/* ---- intersection ---- */

static fsa *and_fsa(js_ctx *c, const fsa *a, const fsa *b, const char *path) {
    if (!a && !b) return NULL;
    fsa *r = !a ? fsa_copy(b) : !b ? fsa_copy(a) : fsa_and(a, b);
    if (!r) js_err(c, path, "%s", tutti_last_error());
    return r;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* the tighter of two upper bounds, -1 meaning none */
static int64_t min_bound(int64_t a, int64_t b) { return a < 0 ? b : b < 0 ? a : a < b ? a : b; }

static js_node *item_at(js_ctx *c, const js_node *x, int32_t i) {
    if (i < x->n_prefix) return x->prefix[i];
    return x->items ? x->items : c->any;
}

static bool accepts(const fsa *a, const char *s) { return !a || fsa_accepts_utf8(a, s, strlen(s)); }

js_node *js_prop_schema(js_ctx *c, js_node *n, const char *name) {
    if (!accepts(n->names, name)) return c->nothing;
    for (int32_t k = 0; k < n->n_props; k++)
        if (!strcmp(n->props[k].name, name)) return n->props[k].node ? n->props[k].node : c->any;
    js_node *r = NULL;
    for (int32_t k = 0; k < n->n_pats; k++)
        if (fsa_accepts_utf8(n->pats[k].key, name, strlen(name)))
            r = r ? js_and(c, r, n->pats[k].node, n->path) : n->pats[k].node;
    if (r) return r;
    return n->additional ? n->additional : c->any;
}

int js_object_fixup(js_ctx *c, js_node *b, const char *path) {
    for (int32_t k = 0; k < b->n_props && !c->failed; k++) {
        js_prop *p = &b->props[k];
        if (!accepts(b->names, p->name)) {
            p->node = c->nothing;
            continue;
        }
        js_node *v = p->node;
        bool matched = false;
        for (int32_t j = 0; j < b->n_pats; j++)
            if (fsa_accepts_utf8(b->pats[j].key, p->name, strlen(p->name))) {
                v = v ? js_and(c, v, b->pats[j].node, path) : b->pats[j].node;
                matched = true;
            }
        if (!v) v = matched ? c->any : b->additional ? b->additional : c->any;
        p->node = v;
    }
    return c->failed ? TUTTI_ERR : 0;
}

static int add_pat(js_ctx *c, js_node *n, fsa *key, js_node *v) {
    if (!key) return js_err(c, n->path, "%s", tutti_last_error());
    if (fsa_is_empty(key)) {
        fsa_free(key);
        return 0;
    }
    js_pat *p = realloc(n->pats, sizeof(js_pat) * (size_t)(n->n_pats + 1));
    if (!p) return fsa_free(key), js_err(c, n->path, "out of memory");
    n->pats = p;
    n->pats[n->n_pats++] = (js_pat){key, v};
    return 0;
}

/* The names any of x's patterns applies to. */
static fsa *pat_union(const js_node *x) {
    fsa *u = fsa_nothing();
    for (int32_t k = 0; k < x->n_pats && u; k++) {
        fsa *v = fsa_or(u, x->pats[k].key);
        fsa_free(u);
        u = v;
    }
    return u;
}

static int and_objects(js_ctx *c, js_node *n, js_node *a, js_node *b) {
    int32_t cap = a->n_props + b->n_props;
    n->props = calloc((size_t)cap + 1, sizeof(js_prop));
    if (!n->props) return js_err(c, n->path, "out of memory");
    for (int side = 0; side < 2; side++) {
        js_node *x = side ? b : a;
        for (int32_t k = 0; k < x->n_props; k++) {
            const char *name = x->props[k].name;
            int32_t j = 0;
            while (j < n->n_props && strcmp(n->props[j].name, name)) j++;
            if (j < n->n_props) continue; /* already merged from a */
            js_prop *p = &n->props[n->n_props++];
            if (!(p->name = strdup(name))) return js_err(c, n->path, "out of memory");
            p->node = js_and(c, js_prop_schema(c, a, name), js_prop_schema(c, b, name), n->path);
            for (int s2 = 0; s2 < 2; s2++) {
                js_node *y = s2 ? b : a;
                for (int32_t q = 0; q < y->n_props; q++)
                    if (!strcmp(y->props[q].name, name)) p->required |= y->props[q].required;
            }
        }
    }
    /* other names: each side's patterns, and its additionalProperties where
     * none of its patterns applies */
    for (int side = 0; side < 2; side++) {
        js_node *x = side ? b : a, *y = side ? a : b;
        for (int32_t k = 0; k < x->n_pats; k++)
            if (add_pat(c, n, fsa_copy(x->pats[k].key), x->pats[k].node) < 0) return TUTTI_ERR;
        if (y->additional && x->n_pats) {
            fsa *ux = pat_union(x), *uy = pat_union(y);
            fsa *only = ux && uy ? fsa_minus(ux, uy) : NULL;
            fsa_free(ux), fsa_free(uy);
            if (add_pat(c, n, only, y->additional) < 0) return TUTTI_ERR;
        }
    }
    n->additional = !a->additional   ? b->additional
                    : !b->additional ? a->additional
                                     : js_and(c, a->additional, b->additional, n->path);
    n->add_open = a->add_open || b->add_open;
    if (a->names || b->names) n->names = and_fsa(c, a->names, b->names, n->path);
    n->min_props = max64(a->min_props, b->min_props);
    n->max_props = min_bound(a->max_props, b->max_props);
    if (a->need_key && b->need_key)
        return js_unsupported(c, n->path, "not",
                              "two 'some property must ...' conditions on one object are not supported");
    const js_node *w = a->need_key ? a : b;
    if (w->need_key) {
        if (!(n->need_key = fsa_copy(w->need_key))) return js_err(c, n->path, "%s", tutti_last_error());
        n->need_val = w->need_val;
    }
    return c->failed ? TUTTI_ERR : 0;
}

static int and_arrays(js_ctx *c, js_node *n, js_node *a, js_node *b) {
    int32_t np = a->n_prefix > b->n_prefix ? a->n_prefix : b->n_prefix;
    if (np) {
        n->prefix = calloc((size_t)np, sizeof(js_node *));
        if (!n->prefix) return js_err(c, n->path, "out of memory");
        for (int32_t i = 0; i < np; i++) n->prefix[i] = js_and(c, item_at(c, a, i), item_at(c, b, i), n->path);
        n->n_prefix = np;
    }
    n->items = !a->items ? b->items : !b->items ? a->items : js_and(c, a->items, b->items, n->path);
    n->min_items = max64(a->min_items, b->min_items);
    n->max_items = min_bound(a->max_items, b->max_items);
    if (a->contains && b->contains)
        return js_unsupported(c, n->path, "contains",
                              "two contains constraints on one array (allOf) are not supported");
    n->contains = a->contains ? a->contains : b->contains;
    n->unique = a->unique || b->unique;
    return c->failed ? TUTTI_ERR : 0;
}

static int and_bases(js_ctx *c, js_node *n, js_node *a, js_node *b) {
    n->kind = JK_BASE;
    n->types = a->types & b->types;
    if (n->types & (JT_INT | JT_FLOAT)) {
        n->num = and_fsa(c, a->num, b->num, n->path);
        n->num_inexact = a->num_inexact || b->num_inexact;
    }
    if (n->types & JT_STR) {
        n->str = and_fsa(c, a->str, b->str, n->path);
        n->str_no_neg = a->str_no_neg || b->str_no_neg;
        n->str_canon = (a->str_canon && a->str) || (b->str_canon && b->str);
        if (!n->str_no_neg) n->str_sup = and_fsa(c, a->str_sup, b->str_sup, n->path);
        if (a->n_sup_src + b->n_sup_src) {
            n->sup_src = malloc(sizeof(char *) * (size_t)(a->n_sup_src + b->n_sup_src));
            if (!n->sup_src) return js_err(c, n->path, "out of memory");
            for (int32_t i = 0; i < a->n_sup_src; i++) n->sup_src[n->n_sup_src++] = a->sup_src[i];
            for (int32_t i = 0; i < b->n_sup_src; i++) n->sup_src[n->n_sup_src++] = b->sup_src[i];
        }
        n->min_len = max64(a->min_len, b->min_len);
        n->max_len = min_bound(a->max_len, b->max_len);
    }
    if ((n->types & JT_ARR) && and_arrays(c, n, a, b) < 0) return TUTTI_ERR;
    if ((n->types & JT_OBJ) && and_objects(c, n, a, b) < 0) return TUTTI_ERR;
    return c->failed ? TUTTI_ERR : 0;
}

/* n = a & b; unions distribute. */
static int force_and(js_ctx *c, js_node *n) {
    js_node *a = js_hnf(c, n->a), *b = a ? js_hnf(c, n->b) : NULL;
    if (!a || !b) return TUTTI_ERR;
    if (a->kind == JK_BASE && b->kind == JK_BASE) return and_bases(c, n, a, b);
    int32_t na = a->kind == JK_OR ? a->n_kid : 1, nb = b->kind == JK_OR ? b->n_kid : 1;
    if ((int64_t)na * nb > JS_MAX_OR)
        return js_err(c, n->path, "the combinations of anyOf/oneOf branches exceed %d", JS_MAX_OR);
    js_node **k = malloc(sizeof(js_node *) * (size_t)(na * nb));
    if (!k) return js_err(c, n->path, "out of memory");
    int32_t m = 0;
    for (int32_t i = 0; i < na; i++)
        for (int32_t j = 0; j < nb; j++)
            k[m++] = js_and(c, a->kind == JK_OR ? a->kid[i] : a, b->kind == JK_OR ? b->kid[j] : b, n->path);
    n->fwd = js_or(c, k, m, n->path);
    free(k);
    return n->fwd ? 0 : TUTTI_ERR;
}

/* ---- emptiness ---- */

static bool str_empty(const js_node *n) {
    if (n->max_len >= 0 && n->max_len < n->min_len) return true;
    if (!n->str) return false;
    if (fsa_is_empty(n->str)) return true;
    if (n->min_len == 0 && n->max_len < 0) return false;
    fsa *x = fsa_length(n->str, n->min_len, n->max_len);
    bool e = x && fsa_is_empty(x);
    fsa_free(x);
    return e;
}

static bool type_empty(js_ctx *c, js_node *n, uint32_t t, int depth) {
    switch (t) {
    case JT_INT:
    case JT_FLOAT: return n->num && fsa_is_empty(n->num);
    case JT_STR: return str_empty(n);
    case JT_ARR:
        if (n->max_items >= 0 && n->max_items < n->min_items) return true;
        for (int64_t i = 0; i < n->min_items && depth > 0; i++)
            if (js_is_empty(c, item_at(c, n, (int32_t)(i < n->n_prefix ? i : n->n_prefix)), depth - 1)) return true;
        return false;
    case JT_OBJ: {
        if (n->max_props >= 0 && n->max_props < n->min_props) return true;
        int64_t req = 0;
        for (int32_t k = 0; k < n->n_props; k++) {
            if (!n->props[k].required) continue;
            req++;
            if (n->props[k].node == c->nothing) return true;
            if (depth > 0 && js_is_empty(c, n->props[k].node, depth - 1)) return true;
        }
        return n->max_props >= 0 && req > n->max_props;
    }
    default: return false;
    }
}

bool js_is_empty(js_ctx *c, js_node *n, int depth) {
    if (n == c->nothing) return true;
    if (n == c->any) return false;
    if (n->state == 1) return false; /* recursion: cannot tell */
    js_node *h = js_hnf(c, n);
    if (!h) return false;
    if (h->kind == JK_OR) {
        for (int32_t i = 0; i < h->n_kid; i++)
            if (!js_is_empty(c, h->kid[i], depth)) return false;
        return true;
    }
    for (uint32_t t = 1; t <= JT_OBJ; t <<= 1)
        if ((h->types & t) && !type_empty(c, h, t, depth)) return false;
    return true;
}

fsa *js_string_language(js_ctx *c, js_node *n, const char *path) {
    js_node *h = js_hnf(c, n);
    if (!h) return NULL;
    if (h->kind == JK_OR) {
        fsa *u = fsa_nothing();
        for (int32_t i = 0; i < h->n_kid && u; i++) {
            fsa *k = js_string_language(c, h->kid[i], path), *v = k ? fsa_or(u, k) : NULL;
            fsa_free(u), fsa_free(k);
            u = v;
        }
        if (!u && !c->failed) js_err(c, path, "%s", tutti_last_error());
        return u;
    }
    if (!(h->types & JT_STR)) return fsa_nothing();
    fsa *all = h->str ? fsa_copy(h->str) : fsa_all();
    if (all && (h->min_len > 0 || h->max_len >= 0)) {
        fsa *l = fsa_length(all, h->min_len, h->max_len);
        fsa_free(all);
        all = l;
    }
    if (!all) js_err(c, path, "%s", tutti_last_error());
    return all;
}

/* ---- exactly one ---- */

/* oneOf: each branch without the values of the branches it may overlap
 * (branches that provably share no value need nothing more: anyOf). */
static int force_oneof(js_ctx *c, js_node *n) {
    int32_t k = n->n_kid;
    js_node **terms = malloc(sizeof(js_node *) * (size_t)k);
    if (!terms) return js_err(c, n->path, "out of memory");
    for (int32_t i = 0; i < k && !c->failed; i++) {
        js_node *t = n->kid[i];
        for (int32_t j = 0; j < k && t; j++) {
            if (j == i) continue;
            js_node *both = js_and(c, n->kid[i], n->kid[j], n->path);
            if (!both || js_is_empty(c, both, 3)) continue;
            /* the values of branch j are not those of branch i */
            char *kp = js_path(n->path, "oneOf", NULL);
            js_node *nj = js_not(c, n->kid[j], n->kid[j]->path);
            if (nj && !nj->kw) nj->kw = "oneOf";
            free(kp);
            t = js_and(c, t, nj, n->path);
        }
        terms[i] = t;
    }
    n->fwd = c->failed ? NULL : js_or(c, terms, k, n->path);
    free(terms);
    return n->fwd ? 0 : TUTTI_ERR;
}
