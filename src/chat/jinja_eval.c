/* Evaluator: walks the AST, writing text to a buffer.
 *
 * Scoping follows Jinja2: a for loop and a macro call open a new scope,
 * {% set %} assigns in the innermost scope (so a set inside a loop does not
 * leak out; namespace() objects are the way to carry state out), lookups walk
 * outwards.  Undefined names evaluate to `undefined`, Jinja2's default
 * Undefined: printing nothing, falsy, iterating as empty, "" for ~ and the
 * string filters; arithmetic, attributes and items of it fail. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chat/jinja.h"

typedef enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE } flow;

static flow exec_body(jctx *c, const jnodes *body, struct jscope *s, struct jbuf *out);
static jv eval(jctx *c, const jnode *n, struct jscope *s);

/* ---- scopes ------------------------------------------------------------ */
struct jscope *jscope_new(jctx *c, struct jscope *parent) {
    struct jscope *s = jalloc(c, sizeof *s);
    s->parent = parent;
    return s;
}

static const jv *scope_get(const struct jscope *s, jstr name) {
    for (; s; s = s->parent)
        for (size_t i = 0; i < s->n; i++)
            if (jstr_eq(s->vars[i].name, name)) return &s->vars[i].v;
    return NULL;
}

void jscope_set(jctx *c, struct jscope *s, jstr name, jv v) {
    for (size_t i = 0; i < s->n; i++)
        if (jstr_eq(s->vars[i].name, name)) {
            s->vars[i].v = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        struct jvar *nv = jalloc(c, cap * sizeof *nv);
        if (s->n) memcpy(nv, s->vars, s->n * sizeof *nv);
        s->vars = nv;
        s->cap = cap;
    }
    s->vars[s->n].name = name;
    s->vars[s->n].v = v;
    s->n++;
}

static void step(jctx *c, const jnode *n) {
    if (++c->steps > JINJA_MAX_STEPS)
        jctx_fail(c, n->line, n->col, "template exceeded %d evaluation steps (endless loop?)", JINJA_MAX_STEPS);
}

/* ---- UTF-8 helpers for Python-like string indexing (by code point) ----- */
/* Byte offsets of each code point start, plus the end; invalid bytes count
 * as one code point each.  Returns the number of code points. */
static size_t cp_offsets(jctx *c, jstr s, size_t **offs) {
    size_t *o = jalloc(c, (s.n + 1) * sizeof *o);
    size_t n = 0, i = 0;
    while (i < s.n) {
        o[n++] = i;
        unsigned char ch = (unsigned char)s.p[i];
        size_t len = ch < 0x80 ? 1 : (ch >> 5) == 6 ? 2 : (ch >> 4) == 14 ? 3 : (ch >> 3) == 30 ? 4 : 1;
        if (i + len > s.n) len = 1;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s.p[i + k] >> 6) != 2) {
                len = 1;
                break;
            }
        i += len;
    }
    o[n] = s.n;
    *offs = o;
    return n;
}

/* ---- slicing (Python semantics) ---------------------------------------- */
static int64_t slice_arg(jctx *c, const jnode *n, struct jscope *s, bool *given) {
    *given = false;
    if (!n) return 0;
    jv v = eval(c, n, s);
    if (v.t == JV_NONE || v.t == JV_UNDEF) return 0;
    if (v.t != JV_INT) jctx_fail(c, n->line, n->col, "slice indices must be integers, got %s", jv_type_name(&v));
    *given = true;
    return v.u.i;
}

static jv eval_slice(jctx *c, const jnode *n, struct jscope *s) {
    jv obj = eval(c, n->a, s);
    bool g0, g1, g2;
    int64_t start = slice_arg(c, n->args.v[0], s, &g0);
    int64_t stop = slice_arg(c, n->args.v[1], s, &g1);
    int64_t stp = slice_arg(c, n->args.v[2], s, &g2);
    if (!g2) stp = 1;
    if (stp == 0) jctx_fail(c, n->line, n->col, "slice step cannot be zero");
    size_t *offs = NULL;
    int64_t len;
    if (obj.t == JV_LIST) len = (int64_t)obj.u.l->n;
    else if (obj.t == JV_STR) len = (int64_t)cp_offsets(c, obj.u.s, &offs);
    else jctx_fail(c, n->line, n->col, "cannot slice a %s", jv_type_name(&obj));
    /* normalise like CPython's PySlice_AdjustIndices */
    if (!g0) start = stp > 0 ? 0 : len - 1;
    else {
        if (start < 0) start += len;
        if (start < 0) start = stp > 0 ? 0 : -1;
        if (start >= len) start = stp > 0 ? len : len - 1;
    }
    if (!g1) stop = stp > 0 ? len : -1;
    else {
        if (stop < 0) stop += len;
        if (stop < 0) stop = stp > 0 ? 0 : -1;
        if (stop >= len) stop = stp > 0 ? len : len - 1;
    }
    if (obj.t == JV_LIST) {
        jv r = jv_list_new(c, 0);
        for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp) jlist_push(c, r.u.l, obj.u.l->v[i]);
        return r;
    }
    struct jbuf b = {0};
    for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp)
        jbuf_puts(c, &b, jstr_sub(obj.u.s, offs[i], offs[i + 1] - offs[i]));
    return jv_str(jbuf_take(c, &b));
}

/* ---- attribute / item access ------------------------------------------ */
static jv loop_attr(const struct jloop *L, jstr name) {
    size_t i = L->i, n = L->n;
    if (jstr_eqz(name, "index")) return jv_int((int64_t)i + 1);
    if (jstr_eqz(name, "index0")) return jv_int((int64_t)i);
    if (jstr_eqz(name, "revindex")) return jv_int((int64_t)(n - i));
    if (jstr_eqz(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (jstr_eqz(name, "first")) return jv_bool(i == 0);
    if (jstr_eqz(name, "last")) return jv_bool(i + 1 == n);
    if (jstr_eqz(name, "length")) return jv_int((int64_t)n);
    if (jstr_eqz(name, "depth")) return jv_int(1);
    if (jstr_eqz(name, "depth0")) return jv_int(0);
    if (jstr_eqz(name, "previtem")) return i > 0 ? L->items[i - 1] : jv_undef();
    if (jstr_eqz(name, "nextitem")) return i + 1 < n ? L->items[i + 1] : jv_undef();
    return jv_undef();
}

/* n->a evaluated to undefined and n needs a value from it. */
static _Noreturn void undefined_fail(jctx *c, const jnode *n) {
    if (n->a->t == JN_NAME) jctx_fail(c, n->line, n->col, "'%.*s' is undefined", (int)n->a->s.n, n->a->s.p);
    jctx_fail(c, n->line, n->col, "attribute or item of an undefined value");
}

static jv get_attr(jctx *c, jv obj, jstr name) {
    (void)c;
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        const jv *v = jdict_get(obj.u.d, name);
        return v ? *v : jv_undef();
    }
    if (obj.t == JV_LOOP) return loop_attr(obj.u.loop, name);
    /* Attributes of other values are undefined, as Jinja2's getattr gives
     * them (the caller fails for an undefined obj); methods are handled at
     * the call site. */
    return jv_undef();
}

static jv get_item(jctx *c, const jnode *n, jv obj, jv key) {
    if (key.t == JV_STR) return get_attr(c, obj, key.u.s);
    if (key.t == JV_INT || key.t == JV_BOOL) {
        int64_t i = key.t == JV_INT ? key.u.i : key.u.b;
        if (obj.t == JV_LIST) {
            int64_t len = (int64_t)obj.u.l->n;
            if (i < 0) i += len;
            return i >= 0 && i < len ? obj.u.l->v[i] : jv_undef();
        }
        if (obj.t == JV_STR) {
            size_t *offs;
            int64_t len = (int64_t)cp_offsets(c, obj.u.s, &offs);
            if (i < 0) i += len;
            if (i < 0 || i >= len) return jv_undef();
            return jv_str(jstr_sub(obj.u.s, offs[i], offs[i + 1] - offs[i]));
        }
        return jv_undef();
    }
    if (obj.t == JV_UNDEF || obj.t == JV_NONE) return jv_undef();
    jctx_fail(c, n->line, n->col, "cannot index a %s with a %s", jv_type_name(&obj), jv_type_name(&key));
}

/* ---- calls ------------------------------------------------------------- */
static jargs eval_args(jctx *c, const jnode *n, struct jscope *s) {
    jargs a = {0};
    a.n = n->args.n;
    a.line = n->line;
    a.col = n->col;
    if (a.n) {
        a.v = jalloc(c, a.n * sizeof *a.v);
        a.kw = jalloc(c, a.n * sizeof *a.kw);
        for (size_t i = 0; i < a.n; i++) {
            a.v[i] = eval(c, n->args.v[i], s);
            if (n->kwnames) a.kw[i] = n->kwnames[i];
        }
    }
    return a;
}

static jv call_macro(jctx *c, const jnode *at, const struct jmacro *m, const jargs *a, const jv *caller) {
    const jnode *def = m->def;
    step(c, at);
    if (++c->depth > JINJA_MAX_DEPTH)
        jctx_fail(c, at->line, at->col, "macro calls nested deeper than %d (unbounded recursion?)", JINJA_MAX_DEPTH);
    struct jscope *s = jscope_new(c, m->closure);
    size_t n_pos = 0;
    for (size_t i = 0; i < a->n; i++) {
        if (a->kw[i].n) {
            size_t k;
            for (k = 0; k < def->n_names; k++)
                if (jstr_eq(def->names[k], a->kw[i])) break;
            if (k == def->n_names)
                jctx_fail(c, at->line, at->col, "macro '%.*s' has no parameter '%.*s'", (int)def->s.n, def->s.p,
                          (int)a->kw[i].n, a->kw[i].p);
            jscope_set(c, s, def->names[k], a->v[i]);
        } else {
            if (n_pos >= def->n_names)
                jctx_fail(c, at->line, at->col, "macro '%.*s' takes at most %zu argument(s)", (int)def->s.n, def->s.p,
                          def->n_names);
            jscope_set(c, s, def->names[n_pos++], a->v[i]);
        }
    }
    for (size_t k = 0; k < def->n_names; k++) {
        bool bound = false;
        for (size_t i = 0; i < s->n; i++)
            if (jstr_eq(s->vars[i].name, def->names[k])) bound = true;
        if (!bound) jscope_set(c, s, def->names[k], def->args.v[k] ? eval(c, def->args.v[k], s) : jv_undef());
    }
    if (caller) jscope_set(c, s, jstr_z("caller"), *caller);
    struct jbuf out = {0};
    flow f = exec_body(c, &def->body, s, &out);
    if (f != FLOW_NORMAL) jctx_fail(c, at->line, at->col, "{%% break %%} or {%% continue %%} outside a loop in macro");
    c->depth--;
    return jv_str(jbuf_take(c, &out));
}

static jv eval_call(jctx *c, const jnode *n, struct jscope *s) {
    const jnode *f = n->a;
    if (f->t == JN_NAME) {
        const jv *v = scope_get(s, f->s);
        if (v && v->t == JV_MACRO) {
            jargs a = eval_args(c, n, s);
            return call_macro(c, n, v->u.m, &a, NULL);
        }
        if (!v || v->t == JV_UNDEF || v->t == JV_FUNC) {
            jargs a = eval_args(c, n, s);
            bool found;
            jv r = jinja_global_call(c, f->s, &a, &found);
            if (found) return r;
            jctx_fail(c, n->line, n->col, "unknown function '%.*s'", (int)f->s.n, f->s.p);
        }
        jctx_fail(c, n->line, n->col, "'%.*s' is a %s, not a function", (int)f->s.n, f->s.p, jv_type_name(v));
    }
    if (f->t == JN_ATTR) {
        jv obj = eval(c, f->a, s);
        if (obj.t == JV_DICT || obj.t == JV_NS) {
            const jv *m = jdict_get(obj.u.d, f->s);
            if (m && m->t == JV_MACRO) {
                jargs a = eval_args(c, n, s);
                return call_macro(c, n, m->u.m, &a, NULL);
            }
        }
        jargs a = eval_args(c, n, s);
        return jinja_method(c, obj, f->s, &a);
    }
    jv v = eval(c, f, s);
    if (v.t == JV_MACRO) {
        jargs a = eval_args(c, n, s);
        return call_macro(c, n, v.u.m, &a, NULL);
    }
    if (v.t == JV_FUNC) {
        jargs a = eval_args(c, n, s);
        bool found;
        return jinja_global_call(c, v.u.s, &a, &found);
    }
    jctx_fail(c, n->line, n->col, "cannot call a %s", jv_type_name(&v));
}

/* ---- operators --------------------------------------------------------- */
static bool numeric(const jv *v) { return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL; }

static double as_f(const jv *v) { return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i : (double)v->u.b; }

static int64_t as_i(const jv *v) { return v->t == JV_INT ? v->u.i : (int64_t)v->u.b; }

/* Python floats overflow to inf (and inf - inf is nan) except in **. */
static jv float_result(jctx *c, const jnode *n, double r) {
    (void)c;
    (void)n;
    return jv_float(r);
}

static jv repeat(jctx *c, const jnode *n, jv seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.t == JV_STR) {
        if (seq.u.s.n && (uint64_t)times > JINJA_MAX_OUTPUT / seq.u.s.n)
            jctx_fail(c, n->line, n->col, "string repetition too long");
        struct jbuf b = {0};
        for (int64_t k = 0; k < times; k++) jbuf_puts(c, &b, seq.u.s);
        return jv_str(jbuf_take(c, &b));
    }
    if (seq.u.l->n && (uint64_t)times > (JINJA_MAX_ARENA / sizeof(jv)) / seq.u.l->n)
        jctx_fail(c, n->line, n->col, "list repetition too long");
    jv r = jv_list_new(c, 0);
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < seq.u.l->n; i++) jlist_push(c, r.u.l, seq.u.l->v[i]);
    return r;
}

static jv arith(jctx *c, const jnode *n, jop op, jv a, jv b) {
    bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
    if (op == JOP_DIV) {
        if (as_f(&b) == 0) jctx_fail(c, n->line, n->col, "division by zero");
        return float_result(c, n, as_f(&a) / as_f(&b));
    }
    if (fl || op == JOP_POW) {
        double x = as_f(&a), y = as_f(&b), r = 0;
        switch (op) {
        case JOP_ADD: r = x + y; break;
        case JOP_SUB: r = x - y; break;
        case JOP_MUL: r = x * y; break;
        case JOP_FLOORDIV:
        case JOP_MOD:
            if (y == 0) jctx_fail(c, n->line, n->col, "division by zero");
            r = op == JOP_FLOORDIV ? floor(x / y) : x - floor(x / y) * y;
            break;
        case JOP_POW:
            if (x == 0 && y < 0) jctx_fail(c, n->line, n->col, "0 cannot be raised to a negative power");
            r = pow(x, y);
            if (isinf(r) && isfinite(x) && isfinite(y)) jctx_fail(c, n->line, n->col, "numerical result out of range");
            if (!fl && y >= 0) {
                if (!(fabs(r) < 9.2e18)) jctx_fail(c, n->line, n->col, "integer power overflows");
                return jv_int((int64_t)r);
            }
            break;
        default: break;
        }
        return float_result(c, n, r);
    }
    int64_t x = as_i(&a), y = as_i(&b), r = 0;
    bool ovf = false;
    switch (op) {
    case JOP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
    case JOP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
    case JOP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (y == 0) jctx_fail(c, n->line, n->col, "division by zero");
        if (x == INT64_MIN && y == -1) {
            ovf = op == JOP_FLOORDIV;
            r = 0;
            break;
        }
        {
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { /* floor, as Python */
                q--;
                m += y;
            }
            r = op == JOP_FLOORDIV ? q : m;
        }
        break;
    default: break;
    }
    if (ovf) jctx_fail(c, n->line, n->col, "integer overflow");
    return jv_int(r);
}

/* Python's printf-style str % args: %s, %d, %i and %%; args is a tuple of
 * values or one value.  The format's bytes and each %s argument keep their
 * marks. */
static jv percent_format(jctx *c, const jnode *n, jstr fmt, jv args) {
    size_t n_args = args.t == JV_LIST && args.u.l->tuple ? args.u.l->n : 1, used = 0;
    const jv *argv = args.t == JV_LIST && args.u.l->tuple ? args.u.l->v : &args;
    struct jbuf b = {0};
    size_t i = 0, run = 0;
    while (i < fmt.n) {
        if (fmt.p[i] != '%') {
            i++;
            run++;
            continue;
        }
        jbuf_puts(c, &b, jstr_sub(fmt, i - run, run));
        run = 0;
        char conv = i + 1 < fmt.n ? fmt.p[i + 1] : 0;
        if (conv == '%') {
            jbuf_puts(c, &b, jstr_sub(fmt, i, 1));
            i += 2;
            continue;
        }
        if (conv != 's' && conv != 'd' && conv != 'i')
            jctx_fail(c, n->line, n->col, "'%%' formatting: only %%s, %%d and %%i are supported");
        if (used >= n_args) jctx_fail(c, n->line, n->col, "not enough arguments for format string");
        const jv *v = &argv[used++];
        if (conv == 's') {
            jbuf_puts(c, &b, jv_to_str(c, v));
        } else {
            if (!numeric(v))
                jctx_fail(c, n->line, n->col, "%%%c format: a number is required, not %s", conv, jv_type_name(v));
            char num[32];
            double f = as_f(v);
            if (v->t == JV_FLOAT && !(fabs(f) < 9.2e18))
                jctx_fail(c, n->line, n->col, "%%%c format: number out of range", conv);
            snprintf(num, sizeof num, "%lld", v->t == JV_FLOAT ? (long long)f : (long long)as_i(v));
            jbuf_putz(c, &b, num);
        }
        i += 2;
    }
    jbuf_puts(c, &b, jstr_sub(fmt, i - run, run));
    if (used < n_args) jctx_fail(c, n->line, n->col, "not all arguments converted during string formatting");
    return jv_str(jbuf_take(c, &b));
}

static jv eval_binary(jctx *c, const jnode *n, struct jscope *s) {
    jv a = eval(c, n->a, s);
    if (n->op == JOP_AND) return jv_truthy(&a) ? eval(c, n->b, s) : a;
    if (n->op == JOP_OR) return jv_truthy(&a) ? a : eval(c, n->b, s);
    jv b = eval(c, n->b, s);
    switch (n->op) {
    case JOP_EQ: return jv_bool(jv_equal(&a, &b));
    case JOP_NE: return jv_bool(!jv_equal(&a, &b));
    case JOP_IN:
    case JOP_NOTIN: {
        bool in = false;
        if (b.t == JV_UNDEF) in = false;
        else if (b.t == JV_STR && a.t == JV_STR)
            in = a.u.s.n == 0 || (b.u.s.n >= a.u.s.n && jmemfind(b.u.s.p, b.u.s.n, a.u.s.p, a.u.s.n) != NULL);
        else if (b.t == JV_LIST) {
            for (size_t i = 0; i < b.u.l->n && !in; i++) in = jv_equal(&a, &b.u.l->v[i]);
        } else if ((b.t == JV_DICT || b.t == JV_NS) && a.t == JV_STR) in = jdict_get(b.u.d, a.u.s) != NULL;
        else if (b.t == JV_DICT || b.t == JV_NS) in = false;
        else
            jctx_fail(c, n->line, n->col, "'in' needs a string, list or dict on the right, got %s in %s",
                      jv_type_name(&a), jv_type_name(&b));
        return jv_bool(n->op == JOP_IN ? in : !in);
    }
    case JOP_CONCAT: /* str() of each side: None prints "None", undefined "" (Jinja2) */
        return jv_str(jstr_cat(c, jv_to_str(c, &a), jv_to_str(c, &b)));
    default: break;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        jctx_fail(c, n->line, n->col, "operation on an undefined value (%s %s)", jv_type_name(&a), jv_type_name(&b));
    switch (n->op) {
    case JOP_LT: return jv_bool(jv_compare(c, &a, &b, n->line, n->col) < 0);
    case JOP_LE: return jv_bool(jv_compare(c, &a, &b, n->line, n->col) <= 0);
    case JOP_GT: return jv_bool(jv_compare(c, &a, &b, n->line, n->col) > 0);
    case JOP_GE: return jv_bool(jv_compare(c, &a, &b, n->line, n->col) >= 0);
    default: break;
    }
    if (numeric(&a) && numeric(&b)) return arith(c, n, n->op, a, b);
    if (n->op == JOP_ADD) {
        if (a.t == JV_LIST && b.t == JV_LIST) {
            jv r = jv_list_new(c, a.u.l->n + b.u.l->n);
            for (size_t i = 0; i < a.u.l->n; i++) jlist_push(c, r.u.l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++) jlist_push(c, r.u.l, b.u.l->v[i]);
            return r;
        }
        if (a.t == JV_STR && b.t == JV_STR) /* Python: str + str only */
            return jv_str(jstr_cat(c, a.u.s, b.u.s));
    }
    if (n->op == JOP_MOD && a.t == JV_STR) return percent_format(c, n, a.u.s, b);
    if (n->op == JOP_MUL) {
        if ((a.t == JV_STR || a.t == JV_LIST) && b.t == JV_INT) return repeat(c, n, a, b.u.i);
        if ((b.t == JV_STR || b.t == JV_LIST) && a.t == JV_INT) return repeat(c, n, b, a.u.i);
    }
    static const char *opname[] = {[JOP_ADD] = "+",       [JOP_SUB] = "-", [JOP_MUL] = "*", [JOP_DIV] = "/",
                                   [JOP_FLOORDIV] = "//", [JOP_MOD] = "%", [JOP_POW] = "**"};
    jctx_fail(c, n->line, n->col, "unsupported operand types for %s: %s and %s",
              n->op <= JOP_POW && opname[n->op] ? opname[n->op] : "?", jv_type_name(&a), jv_type_name(&b));
}

static jv eval(jctx *c, const jnode *n, struct jscope *s) {
    if (++c->depth > JINJA_MAX_DEPTH)
        jctx_fail(c, n->line, n->col, "expression nested deeper than %d levels", JINJA_MAX_DEPTH);
    jv r;
    switch (n->t) {
    case JN_LITERAL: r = n->val; break;
    case JN_NAME: {
        const jv *v = scope_get(s, n->s);
        r = v ? *v : jinja_is_global(n->s) ? (jv){.t = JV_FUNC, .u.s = n->s} : jv_undef();
        break;
    }
    case JN_LIST:
    case JN_TUPLE:
        r = jv_list_new(c, n->args.n);
        for (size_t i = 0; i < n->args.n; i++) jlist_push(c, r.u.l, eval(c, n->args.v[i], s));
        r.u.l->tuple = n->t == JN_TUPLE;
        break;
    case JN_DICT:
        r = jv_dict_new(c, JV_DICT);
        for (size_t i = 0; i + 1 < n->args.n; i += 2) {
            jv k = eval(c, n->args.v[i], s);
            if (k.t != JV_STR)
                jctx_fail(c, n->args.v[i]->line, n->args.v[i]->col, "dict keys must be strings, got %s",
                          jv_type_name(&k));
            jdict_set(c, r.u.d, k.u.s, eval(c, n->args.v[i + 1], s));
        }
        break;
    case JN_ATTR: {
        jv obj = eval(c, n->a, s);
        if (obj.t == JV_UNDEF) /* Jinja2's Undefined: no attributes */
            undefined_fail(c, n);
        r = get_attr(c, obj, n->s);
        break;
    }
    case JN_INDEX: {
        jv obj = eval(c, n->a, s);
        if (obj.t == JV_UNDEF) undefined_fail(c, n);
        r = get_item(c, n, obj, eval(c, n->b, s));
        break;
    }
    case JN_SLICE: r = eval_slice(c, n, s); break;
    case JN_CALL: r = eval_call(c, n, s); break;
    case JN_FILTER: {
        jv a = eval(c, n->a, s);
        jargs args = eval_args(c, n, s);
        r = jinja_filter(c, n->s, a, &args);
        break;
    }
    case JN_TEST: {
        jv a = eval(c, n->a, s);
        jargs args = eval_args(c, n, s);
        bool t = jinja_test(c, n->s, &a, &args);
        r = jv_bool(n->negate ? !t : t);
        break;
    }
    case JN_UNARY: {
        jv a = eval(c, n->a, s);
        if (n->op == JOP_NOT) {
            r = jv_bool(!jv_truthy(&a));
        } else if (a.t == JV_INT) {
            if (n->op == JOP_NEG && a.u.i == INT64_MIN) jctx_fail(c, n->line, n->col, "integer overflow");
            r = jv_int(n->op == JOP_NEG ? -a.u.i : a.u.i);
        } else if (a.t == JV_FLOAT) {
            r = jv_float(n->op == JOP_NEG ? -a.u.f : a.u.f);
        } else if (a.t == JV_BOOL) {
            r = jv_int(n->op == JOP_NEG ? -(int64_t)a.u.b : a.u.b);
        } else {
            jctx_fail(c, n->line, n->col, "bad operand type for unary %s: %s", n->op == JOP_NEG ? "-" : "+",
                      jv_type_name(&a));
        }
        break;
    }
    case JN_BINARY: r = eval_binary(c, n, s); break;
    case JN_TERNARY: {
        jv cond = eval(c, n->a, s);
        r = jv_truthy(&cond) ? eval(c, n->b, s) : n->c ? eval(c, n->c, s) : jv_undef();
        break;
    }
    default: jctx_fail(c, n->line, n->col, "internal error: statement used as expression");
    }
    c->depth--;
    return r;
}

/* ---- statements -------------------------------------------------------- */
static void bind_targets(jctx *c, const jnode *n, struct jscope *s, jv v) {
    if (n->n_names == 1) {
        jscope_set(c, s, n->names[0], v);
        return;
    }
    if (v.t != JV_LIST)
        jctx_fail(c, n->line, n->col, "cannot unpack a %s into %zu names", jv_type_name(&v), n->n_names);
    if (v.u.l->n != n->n_names)
        jctx_fail(c, n->line, n->col, "cannot unpack %zu values into %zu names", v.u.l->n, n->n_names);
    for (size_t i = 0; i < n->n_names; i++) jscope_set(c, s, n->names[i], v.u.l->v[i]);
}

/* Items a for loop iterates over: list items, dict keys, string characters;
 * undefined iterates as empty (Jinja2's default Undefined). */
static jv iter_items(jctx *c, const jnode *n, jv it) {
    if (it.t == JV_LIST) return it;
    if (it.t == JV_UNDEF) return jv_list_new(c, 0);
    if (it.t == JV_DICT) {
        jv r = jv_list_new(c, it.u.d->n);
        for (size_t i = 0; i < it.u.d->n; i++) jlist_push(c, r.u.l, jv_str(it.u.d->k[i]));
        return r;
    }
    if (it.t == JV_STR) {
        size_t *offs;
        size_t cnt = cp_offsets(c, it.u.s, &offs);
        jv r = jv_list_new(c, cnt);
        for (size_t i = 0; i < cnt; i++) jlist_push(c, r.u.l, jv_str(jstr_sub(it.u.s, offs[i], offs[i + 1] - offs[i])));
        return r;
    }
    jctx_fail(c, n->line, n->col, "cannot iterate over a %s", jv_type_name(&it));
}

static void exec_for(jctx *c, const jnode *n, struct jscope *s, struct jbuf *out) {
    struct jscope *ls = jscope_new(c, s);
    jv all = iter_items(c, n->a, eval(c, n->a, s));
    jv items = all;
    if (n->b) { /* {% for x in xs if cond %}: filter first, so loop.* counts the kept items */
        items = jv_list_new(c, 0);
        for (size_t i = 0; i < all.u.l->n; i++) {
            step(c, n);
            bind_targets(c, n, ls, all.u.l->v[i]);
            jv keep = eval(c, n->b, ls);
            if (jv_truthy(&keep)) jlist_push(c, items.u.l, all.u.l->v[i]);
        }
    }
    struct jloop *L = jalloc(c, sizeof *L);
    L->items = items.u.l->v;
    L->n = items.u.l->n;
    jv loopv = {.t = JV_LOOP, .u.loop = L};
    for (size_t i = 0; i < L->n; i++) {
        step(c, n);
        L->i = i;
        jscope_set(c, ls, jstr_z("loop"), loopv);
        bind_targets(c, n, ls, L->items[i]);
        flow f = exec_body(c, &n->body, ls, out);
        if (f == FLOW_BREAK) break;
    }
    if (L->n == 0) exec_body(c, &n->else_body, ls, out);
}

static void exec_set(jctx *c, const jnode *n, struct jscope *s) {
    jv v;
    if (n->a) {
        v = eval(c, n->a, s);
    } else {
        struct jbuf b = {0};
        if (exec_body(c, &n->body, s, &b) != FLOW_NORMAL)
            jctx_fail(c, n->line, n->col, "{%% break %%}/{%% continue %%} inside {%% set %%} block");
        v = jv_str(jbuf_take(c, &b));
    }
    if (n->s.n) { /* set ns.attr = v */
        const jv *obj = scope_get(s, n->names[0]);
        if (!obj || obj->t != JV_NS)
            jctx_fail(c, n->line, n->col, "cannot assign attribute '%.*s': '%.*s' is not a namespace()", (int)n->s.n,
                      n->s.p, (int)n->names[0].n, n->names[0].p);
        jdict_set(c, obj->u.d, n->s, v);
        return;
    }
    bind_targets(c, n, s, v);
}

static flow exec_stmt(jctx *c, const jnode *n, struct jscope *s, struct jbuf *out) {
    step(c, n);
    switch (n->t) {
    case JN_TEXT: jbuf_put(c, out, n->s.p, n->s.n); break;
    case JN_OUTPUT: {
        jv v = eval(c, n->a, s);
        if (v.t == JV_MACRO || v.t == JV_LOOP) jctx_fail(c, n->line, n->col, "cannot print a %s", jv_type_name(&v));
        jv_print(c, out, &v);
        break;
    }
    case JN_IF: {
        jv cond = eval(c, n->a, s);
        return exec_body(c, jv_truthy(&cond) ? &n->body : &n->else_body, s, out);
    }
    case JN_FOR: exec_for(c, n, s, out); break;
    case JN_SET: exec_set(c, n, s); break;
    case JN_MACRO: {
        struct jmacro *m = jalloc(c, sizeof *m);
        m->def = n;
        m->closure = s;
        jscope_set(c, s, n->s, (jv){.t = JV_MACRO, .u.m = m});
        break;
    }
    case JN_CALLBLOCK: {
        const jnode *call = n->a;
        jv callee = eval(c, call->a, s);
        if (callee.t != JV_MACRO)
            jctx_fail(c, n->line, n->col, "{%% call %%} needs a macro, got %s", jv_type_name(&callee));
        jnode *body = jalloc(c, sizeof *body);
        *body = *n;
        body->t = JN_MACRO;
        body->s = jstr_z("caller");
        body->n_names = 0;
        body->args.n = 0;
        struct jmacro *m = jalloc(c, sizeof *m);
        m->def = body;
        m->closure = s;
        jv caller = {.t = JV_MACRO, .u.m = m};
        jargs a = eval_args(c, call, s);
        jv r = call_macro(c, n, callee.u.m, &a, &caller);
        jv_print(c, out, &r);
        break;
    }
    case JN_FILTERBLOCK: {
        struct jbuf b = {0};
        if (exec_body(c, &n->body, s, &b) != FLOW_NORMAL)
            jctx_fail(c, n->line, n->col, "{%% break %%}/{%% continue %%} inside {%% filter %%} block");
        n->b->val = jv_str(jbuf_take(c, &b)); /* the AST belongs to this render alone */
        jv r = eval(c, n->a, s);
        jv_print(c, out, &r);
        break;
    }
    case JN_BREAK: return FLOW_BREAK;
    case JN_CONTINUE: return FLOW_CONTINUE;
    default: jctx_fail(c, n->line, n->col, "internal error: expression used as statement");
    }
    return FLOW_NORMAL;
}

static flow exec_body(jctx *c, const jnodes *body, struct jscope *s, struct jbuf *out) {
    if (++c->depth > JINJA_MAX_DEPTH) jctx_fail(c, 0, 0, "blocks nested deeper than %d levels", JINJA_MAX_DEPTH);
    for (size_t i = 0; i < body->n; i++) {
        flow f = exec_stmt(c, body->v[i], s, out);
        if (f != FLOW_NORMAL) {
            c->depth--;
            return f;
        }
    }
    c->depth--;
    return FLOW_NORMAL;
}

void jinja_exec(jctx *c, const jnodes *prog, struct jscope *scope) {
    c->depth = 0;
    flow f = exec_body(c, prog, scope, &c->out);
    if (f != FLOW_NORMAL) jctx_fail(c, 0, 0, "{%% break %%} or {%% continue %%} outside a loop");
}
