/* Parser: tokens -> AST, recursive descent with Jinja2's operator
 * precedence (lowest first):
 *   a if c else b  <  or  <  and  <  not  <  == != < <= > >= in, not in
 *   <  + -  <  ~  <  * / // %  <  **  <  unary - +  <  | filter, is test
 *   <  postfix . [] ()  <  primary
 * (jinja2/parser.py: parse_condexpr ... parse_unary, parse_filter_expr.) */
#include <stdio.h>
#include <string.h>

#include "chat/jinja.h"

static jtok *peek(jctx *c) { return &c->toks[c->pos]; }

static jtok *peek2(jctx *c) { return c->pos + 1 < c->n_toks ? &c->toks[c->pos + 1] : &c->toks[c->n_toks - 1]; }

static jtok *next(jctx *c) {
    jtok *t = &c->toks[c->pos];
    if (t->t != JT_EOF) c->pos++;
    return t;
}

static const char *tok_desc(const jtok *t, char *buf, size_t n) {
    switch (t->t) {
    case JT_TEXT: return "template text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_STRING: return "a string";
    case JT_INT:
    case JT_FLOAT: return "a number";
    case JT_EOF: return "end of template";
    case JT_NAME:
    case JT_OP: snprintf(buf, n, "'%.*s'", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p); return buf;
    }
    return "?";
}

static _Noreturn void fail_at(jctx *c, const jtok *t, const char *what) {
    char buf[64];
    jctx_fail(c, t->line, t->col, "%s, found %s", what, tok_desc(t, buf, sizeof buf));
}

static bool is_op(const jtok *t, const char *op) { return t->t == JT_OP && jstr_eqz(t->s, op); }

static bool is_name(const jtok *t, const char *w) { return t->t == JT_NAME && jstr_eqz(t->s, w); }

static void expect_op(jctx *c, const char *op) {
    if (!is_op(peek(c), op)) {
        char msg[48];
        snprintf(msg, sizeof msg, "expected '%s'", op);
        fail_at(c, peek(c), msg);
    }
    next(c);
}

static void expect_block_end(jctx *c, const char *stmt) {
    if (peek(c)->t != JT_BLOCK_END) {
        char msg[80];
        snprintf(msg, sizeof msg, "expected '%%}' to close {%% %s %%}", stmt);
        fail_at(c, peek(c), msg);
    }
    next(c);
}

static jstr expect_name(jctx *c, const char *what) {
    if (peek(c)->t != JT_NAME) fail_at(c, peek(c), what);
    return next(c)->s;
}

static jnode *mk(jctx *c, jnode_type t, const jtok *at) {
    jnode *n = jalloc(c, sizeof *n);
    n->t = t;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static void nodes_push(jctx *c, jnodes *v, jnode *n) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jnode **nv = jalloc(c, cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
}

static void enter(jctx *c) {
    if (++c->depth > JINJA_MAX_DEPTH)
        jctx_fail(c, peek(c)->line, peek(c)->col, "template nested deeper than %d levels", JINJA_MAX_DEPTH);
}

static void leave(jctx *c) { c->depth--; }

static jnode *parse_expr(jctx *c);
static jnode *parse_or(jctx *c);
static jnode *parse_unary(jctx *c, bool with_filter);

/* Arguments of a call, filter or test: "(" [expr | name=expr] {, ...} ")". */
static void parse_args(jctx *c, jnode *n) {
    expect_op(c, "(");
    size_t cap = 0;
    while (!is_op(peek(c), ")")) {
        jstr kw = {0};
        if (peek(c)->t == JT_NAME && is_op(peek2(c), "=")) {
            kw = next(c)->s;
            next(c);
        }
        nodes_push(c, &n->args, parse_expr(c));
        if (kw.n || n->kwnames) {
            if (cap < n->args.cap) {
                jstr *k = jalloc(c, n->args.cap * sizeof *k);
                if (n->kwnames) memcpy(k, n->kwnames, (n->args.n - 1) * sizeof *k);
                n->kwnames = k;
                cap = n->args.cap;
            }
            n->kwnames[n->args.n - 1] = kw;
        }
        if (!is_op(peek(c), ",")) break;
        next(c);
    }
    expect_op(c, ")");
}

static jnode *parse_primary(jctx *c) {
    jtok *t = peek(c);
    jnode *n;
    switch (t->t) {
    case JT_NAME:
        next(c);
        if (jstr_eqz(t->s, "true") || jstr_eqz(t->s, "True")) {
            n = mk(c, JN_LITERAL, t);
            n->val = jv_bool(true);
        } else if (jstr_eqz(t->s, "false") || jstr_eqz(t->s, "False")) {
            n = mk(c, JN_LITERAL, t);
            n->val = jv_bool(false);
        } else if (jstr_eqz(t->s, "none") || jstr_eqz(t->s, "None")) {
            n = mk(c, JN_LITERAL, t);
            n->val = jv_none();
        } else {
            n = mk(c, JN_NAME, t);
            n->s = t->s;
        }
        return n;
    case JT_STRING: {
        next(c);
        n = mk(c, JN_LITERAL, t);
        jstr s = t->s;
        while (peek(c)->t == JT_STRING) /* "a" "b" is "ab", as in Python */
            s = jstr_cat(c, s, next(c)->s);
        n->val = jv_str(s);
        return n;
    }
    case JT_INT:
        next(c);
        n = mk(c, JN_LITERAL, t);
        n->val = jv_int(t->i);
        return n;
    case JT_FLOAT:
        next(c);
        n = mk(c, JN_LITERAL, t);
        n->val = jv_float(t->f);
        return n;
    case JT_OP:
        if (is_op(t, "(")) {
            next(c);
            if (is_op(peek(c), ")")) {
                next(c);
                return mk(c, JN_TUPLE, t);
            }
            jnode *e = parse_expr(c);
            if (is_op(peek(c), ",")) {
                n = mk(c, JN_TUPLE, t);
                nodes_push(c, &n->args, e);
                while (is_op(peek(c), ",")) {
                    next(c);
                    if (is_op(peek(c), ")")) break;
                    nodes_push(c, &n->args, parse_expr(c));
                }
                e = n;
            }
            expect_op(c, ")");
            return e;
        }
        if (is_op(t, "[")) {
            next(c);
            n = mk(c, JN_LIST, t);
            while (!is_op(peek(c), "]")) {
                nodes_push(c, &n->args, parse_expr(c));
                if (!is_op(peek(c), ",")) break;
                next(c);
            }
            expect_op(c, "]");
            return n;
        }
        if (is_op(t, "{")) {
            next(c);
            n = mk(c, JN_DICT, t);
            while (!is_op(peek(c), "}")) {
                nodes_push(c, &n->args, parse_expr(c));
                expect_op(c, ":");
                nodes_push(c, &n->args, parse_expr(c));
                if (!is_op(peek(c), ",")) break;
                next(c);
            }
            expect_op(c, "}");
            return n;
        }
        break;
    default: break;
    }
    fail_at(c, t, "expected an expression");
}

static jnode *parse_postfix(jctx *c, jnode *n) {
    for (;;) {
        jtok *t = peek(c);
        if (is_op(t, ".")) {
            next(c);
            jtok *a = peek(c);
            if (a->t == JT_INT) { /* foo.0 is foo[0] */
                next(c);
                jnode *idx = mk(c, JN_LITERAL, a);
                idx->val = jv_int(a->i);
                jnode *m = mk(c, JN_INDEX, t);
                m->a = n;
                m->b = idx;
                n = m;
                continue;
            }
            jnode *m = mk(c, JN_ATTR, t);
            m->a = n;
            m->s = expect_name(c, "expected an attribute name after '.'");
            n = m;
        } else if (is_op(t, "[")) {
            next(c);
            jnode *parts[3] = {NULL, NULL, NULL};
            int n_colons = 0;
            for (;;) {
                if (is_op(peek(c), ":")) {
                    if (++n_colons > 2) fail_at(c, peek(c), "too many ':' in slice");
                    next(c);
                    continue;
                }
                if (is_op(peek(c), "]")) break;
                if (parts[n_colons]) fail_at(c, peek(c), "expected ']' or ':'");
                parts[n_colons] = parse_expr(c);
            }
            expect_op(c, "]");
            jnode *m;
            if (n_colons == 0) {
                if (!parts[0]) fail_at(c, t, "empty subscript '[]'");
                m = mk(c, JN_INDEX, t);
                m->b = parts[0];
            } else {
                m = mk(c, JN_SLICE, t);
                for (int k = 0; k < 3; k++) nodes_push(c, &m->args, parts[k]);
            }
            m->a = n;
            n = m;
        } else if (is_op(t, "(")) {
            jnode *m = mk(c, JN_CALL, t);
            m->a = n;
            parse_args(c, m);
            n = m;
        } else {
            return n;
        }
    }
}

static bool starts_test_arg(const jtok *t) {
    static const char *stop[] = {"and", "or", "else", "if", "is", "in", "not"};
    if (t->t == JT_STRING || t->t == JT_INT || t->t == JT_FLOAT) return true;
    if (t->t == JT_NAME) {
        for (size_t k = 0; k < sizeof stop / sizeof stop[0]; k++)
            if (jstr_eqz(t->s, stop[k])) return false;
        return true;
    }
    return is_op(t, "[") || is_op(t, "{");
}

static jnode *parse_filter_expr(jctx *c, jnode *n) {
    for (;;) {
        jtok *t = peek(c);
        if (is_op(t, "|")) {
            next(c);
            jnode *f = mk(c, JN_FILTER, t);
            f->a = n;
            f->s = expect_name(c, "expected a filter name after '|'");
            while (is_op(peek(c), ".")) { /* dotted filter names */
                next(c);
                jstr part = expect_name(c, "expected a name after '.'");
                f->s = jstr_cat(c, jstr_cat(c, f->s, jstr_z(".")), part);
            }
            if (is_op(peek(c), "(")) parse_args(c, f);
            n = f;
        } else if (is_name(t, "is")) {
            next(c);
            jnode *f = mk(c, JN_TEST, t);
            f->a = n;
            if (is_name(peek(c), "not")) {
                next(c);
                f->negate = 1;
            }
            /* "is none", "is true" ... are names here, not literals */
            if (peek(c)->t != JT_NAME) fail_at(c, peek(c), "expected a test name after 'is'");
            f->s = next(c)->s;
            if (is_op(peek(c), "(")) {
                parse_args(c, f);
            } else if (starts_test_arg(peek(c))) {
                enter(c);
                nodes_push(c, &f->args, parse_postfix(c, parse_primary(c)));
                leave(c);
            }
            n = f;
        } else if (is_op(t, "(") && n->t == JN_FILTER) {
            jnode *m = mk(c, JN_CALL, t);
            m->a = n;
            parse_args(c, m);
            n = m;
        } else {
            return n;
        }
    }
}

static jnode *parse_unary(jctx *c, bool with_filter) {
    enter(c);
    jtok *t = peek(c);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(c);
        n = mk(c, JN_UNARY, t);
        n->op = is_op(t, "-") ? JOP_NEG : JOP_POS;
        n->a = parse_unary(c, false);
    } else {
        n = parse_postfix(c, parse_primary(c));
    }
    if (with_filter) n = parse_filter_expr(c, n);
    leave(c);
    return n;
}

static jnode *binary(jctx *c, const jtok *t, jop op, jnode *a, jnode *b) {
    jnode *n = mk(c, JN_BINARY, t);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(jctx *c) {
    jnode *n = parse_unary(c, true);
    while (is_op(peek(c), "**")) {
        jtok *t = next(c);
        n = binary(c, t, JOP_POW, n, parse_unary(c, true));
    }
    return n;
}

static jnode *parse_math2(jctx *c) {
    jnode *n = parse_pow(c);
    for (;;) {
        jtok *t = peek(c);
        jop op = is_op(t, "*")    ? JOP_MUL
                 : is_op(t, "/")  ? JOP_DIV
                 : is_op(t, "//") ? JOP_FLOORDIV
                 : is_op(t, "%")  ? JOP_MOD
                                  : JOP_NONE;
        if (op == JOP_NONE) return n;
        next(c);
        n = binary(c, t, op, n, parse_pow(c));
    }
}

static jnode *parse_concat(jctx *c) {
    jnode *n = parse_math2(c);
    while (is_op(peek(c), "~")) {
        jtok *t = next(c);
        n = binary(c, t, JOP_CONCAT, n, parse_math2(c));
    }
    return n;
}

static jnode *parse_math1(jctx *c) {
    jnode *n = parse_concat(c);
    for (;;) {
        jtok *t = peek(c);
        jop op = is_op(t, "+") ? JOP_ADD : is_op(t, "-") ? JOP_SUB : JOP_NONE;
        if (op == JOP_NONE) return n;
        next(c);
        n = binary(c, t, op, n, parse_concat(c));
    }
}

static jnode *parse_compare(jctx *c) {
    jnode *n = parse_math1(c);
    for (;;) {
        jtok *t = peek(c);
        jop op = is_op(t, "==")     ? JOP_EQ
                 : is_op(t, "!=")   ? JOP_NE
                 : is_op(t, "<")    ? JOP_LT
                 : is_op(t, "<=")   ? JOP_LE
                 : is_op(t, ">")    ? JOP_GT
                 : is_op(t, ">=")   ? JOP_GE
                 : is_name(t, "in") ? JOP_IN
                                    : JOP_NONE;
        if (op == JOP_NONE && is_name(t, "not") && is_name(peek2(c), "in")) {
            next(c);
            op = JOP_NOTIN;
        }
        if (op == JOP_NONE) return n;
        next(c);
        n = binary(c, t, op, n, parse_math1(c));
    }
}

static jnode *parse_not(jctx *c) {
    jtok *t = peek(c);
    if (is_name(t, "not")) {
        next(c);
        enter(c);
        jnode *n = mk(c, JN_UNARY, t);
        n->op = JOP_NOT;
        n->a = parse_not(c);
        leave(c);
        return n;
    }
    return parse_compare(c);
}

static jnode *parse_and(jctx *c) {
    jnode *n = parse_not(c);
    while (is_name(peek(c), "and")) {
        jtok *t = next(c);
        n = binary(c, t, JOP_AND, n, parse_not(c));
    }
    return n;
}

static jnode *parse_or(jctx *c) {
    jnode *n = parse_and(c);
    while (is_name(peek(c), "or")) {
        jtok *t = next(c);
        n = binary(c, t, JOP_OR, n, parse_and(c));
    }
    return n;
}

static jnode *parse_expr(jctx *c) {
    enter(c);
    jnode *n = parse_or(c);
    while (is_name(peek(c), "if")) {
        jtok *t = next(c);
        jnode *tern = mk(c, JN_TERNARY, t);
        tern->b = n;
        tern->a = parse_or(c);
        if (is_name(peek(c), "else")) {
            next(c);
            tern->c = parse_expr(c);
        }
        n = tern;
    }
    leave(c);
    return n;
}

/* expr {"," expr}: a tuple when there is a comma (set a, b = 1, 2). */
static jnode *parse_tuple_expr(jctx *c) {
    jtok *t = peek(c);
    jnode *e = parse_expr(c);
    if (!is_op(peek(c), ",")) return e;
    jnode *n = mk(c, JN_TUPLE, t);
    nodes_push(c, &n->args, e);
    while (is_op(peek(c), ",")) {
        next(c);
        nodes_push(c, &n->args, parse_expr(c));
    }
    return n;
}

/* Target names: "a" or "a, b" or "(a, b)". */
static void parse_targets(jctx *c, jnode *n, const char *what) {
    bool paren = is_op(peek(c), "(");
    if (paren) next(c);
    size_t cap = 4;
    n->names = jalloc(c, cap * sizeof *n->names);
    for (;;) {
        if (n->n_names == cap) {
            jstr *nn = jalloc(c, cap * 2 * sizeof *nn);
            memcpy(nn, n->names, cap * sizeof *nn);
            n->names = nn;
            cap *= 2;
        }
        n->names[n->n_names++] = expect_name(c, what);
        if (!is_op(peek(c), ",")) break;
        next(c);
    }
    if (paren) expect_op(c, ")");
}

static void parse_body(jctx *c, jnodes *body, const char *const *ends, jstr *which);

static jnode *parse_if(jctx *c, const jtok *at) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *n = mk(c, JN_IF, at);
    n->a = parse_expr(c);
    expect_block_end(c, "if");
    jstr which;
    parse_body(c, &n->body, ends, &which);
    if (jstr_eqz(which, "elif")) {
        jtok *t = &c->toks[c->pos - 1];
        enter(c);
        nodes_push(c, &n->else_body, parse_if(c, t));
        leave(c);
        return n; /* the nested if consumed endif */
    }
    if (jstr_eqz(which, "else")) {
        expect_block_end(c, "else");
        static const char *const ends2[] = {"endif", NULL};
        parse_body(c, &n->else_body, ends2, &which);
    }
    expect_block_end(c, "endif");
    return n;
}

static jnode *parse_stmt(jctx *c, const jtok *begin) {
    jtok *kw = peek(c);
    if (kw->t != JT_NAME) fail_at(c, kw, "expected a statement name after '{%'");
    next(c);
    jstr w = kw->s;
    jstr which;
    if (jstr_eqz(w, "if")) return parse_if(c, kw);
    if (jstr_eqz(w, "for")) {
        static const char *const ends[] = {"else", "endfor", NULL};
        jnode *n = mk(c, JN_FOR, kw);
        parse_targets(c, n, "expected a loop variable name after 'for'");
        if (!is_name(peek(c), "in")) fail_at(c, peek(c), "expected 'in' in for loop");
        next(c);
        n->a = parse_or(c); /* no ternary: "if" here filters the loop */
        if (is_name(peek(c), "if")) {
            next(c);
            n->b = parse_or(c);
        }
        if (is_name(peek(c), "recursive")) fail_at(c, peek(c), "recursive for loops are not supported");
        expect_block_end(c, "for");
        parse_body(c, &n->body, ends, &which);
        if (jstr_eqz(which, "else")) {
            expect_block_end(c, "else");
            static const char *const ends2[] = {"endfor", NULL};
            parse_body(c, &n->else_body, ends2, &which);
        }
        expect_block_end(c, "endfor");
        return n;
    }
    if (jstr_eqz(w, "set")) {
        jnode *n = mk(c, JN_SET, kw);
        jstr first = expect_name(c, "expected a variable name after 'set'");
        if (is_op(peek(c), ".")) {
            next(c);
            n->s = expect_name(c, "expected an attribute name after '.'");
            n->names = jalloc(c, sizeof *n->names);
            n->names[0] = first;
            n->n_names = 1;
        } else {
            c->pos--;
            parse_targets(c, n, "expected a variable name after 'set'");
        }
        if (is_op(peek(c), "=")) {
            next(c);
            n->a = parse_tuple_expr(c);
            expect_block_end(c, "set");
        } else {
            if (n->n_names != 1 || n->s.n) fail_at(c, peek(c), "a {% set %} block needs a single variable name");
            expect_block_end(c, "set");
            static const char *const ends[] = {"endset", NULL};
            parse_body(c, &n->body, ends, &which);
            expect_block_end(c, "endset");
        }
        return n;
    }
    if (jstr_eqz(w, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        jnode *n = mk(c, JN_MACRO, kw);
        n->s = expect_name(c, "expected a macro name after 'macro'");
        expect_op(c, "(");
        size_t cap = 4;
        n->names = jalloc(c, cap * sizeof *n->names);
        while (!is_op(peek(c), ")")) {
            if (n->n_names == cap) {
                jstr *nn = jalloc(c, cap * 2 * sizeof *nn);
                memcpy(nn, n->names, cap * sizeof *nn);
                n->names = nn;
                cap *= 2;
            }
            n->names[n->n_names++] = expect_name(c, "expected a parameter name");
            jnode *def = NULL;
            if (is_op(peek(c), "=")) {
                next(c);
                def = parse_expr(c);
            }
            nodes_push(c, &n->args, def);
            if (!is_op(peek(c), ",")) break;
            next(c);
        }
        expect_op(c, ")");
        expect_block_end(c, "macro");
        parse_body(c, &n->body, ends, &which);
        if (peek(c)->t == JT_NAME) /* "{% endmacro name %}" */
            next(c);
        expect_block_end(c, "endmacro");
        return n;
    }
    if (jstr_eqz(w, "call")) {
        static const char *const ends[] = {"endcall", NULL};
        jnode *n = mk(c, JN_CALLBLOCK, kw);
        if (is_op(peek(c), "(")) fail_at(c, peek(c), "{% call %} with caller arguments is not supported");
        n->a = parse_expr(c);
        if (n->a->t != JN_CALL) fail_at(c, kw, "{% call %} needs a macro call");
        expect_block_end(c, "call");
        parse_body(c, &n->body, ends, &which);
        expect_block_end(c, "endcall");
        return n;
    }
    if (jstr_eqz(w, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        jnode *n = mk(c, JN_FILTERBLOCK, kw);
        /* parse "name(args) | name2" as filters applied to a placeholder */
        jnode *ph = mk(c, JN_LITERAL, kw);
        ph->val = jv_undef();
        c->pos--;
        c->toks[c->pos].t = JT_OP; /* reuse the 'filter' token as a '|' */
        c->toks[c->pos].s = jstr_z("|");
        n->a = parse_filter_expr(c, ph);
        n->b = ph;
        expect_block_end(c, "filter");
        parse_body(c, &n->body, ends, &which);
        expect_block_end(c, "endfilter");
        return n;
    }
    if (jstr_eqz(w, "break") || jstr_eqz(w, "continue")) {
        jnode *n = mk(c, jstr_eqz(w, "break") ? JN_BREAK : JN_CONTINUE, kw);
        expect_block_end(c, "break");
        return n;
    }
    if (jstr_eqz(w, "generation") || jstr_eqz(w, "endgeneration")) {
        /* transformers' assistant-mask marker: renders as nothing */
        expect_block_end(c, "generation");
        return NULL;
    }
    (void)begin;
    jctx_fail(c, kw->line, kw->col, "unknown or unsupported statement '{%% %.*s %%}'", (int)(w.n > 40 ? 40 : w.n), w.p);
}

/* Statements until a "{% end... %}" named in `ends` (NULL-terminated; NULL
 * ends = top level, until EOF).  Leaves the cursor after the end keyword and
 * stores it in *which. */
static void parse_body(jctx *c, jnodes *body, const char *const *ends, jstr *which) {
    enter(c);
    const jtok *open = c->pos > 0 ? &c->toks[c->pos - 1] : peek(c);
    for (;;) {
        jtok *t = peek(c);
        if (t->t == JT_EOF) {
            if (!ends) break;
            size_t last = 0;
            while (ends[last + 1]) last++;
            char msg[96];
            snprintf(msg, sizeof msg, "missing {%% %s %%} for the block opened at line %d, column %d", ends[last],
                     open->line, open->col);
            jctx_fail(c, t->line, t->col, "%s", msg);
        }
        if (t->t == JT_TEXT) {
            next(c);
            jnode *n = mk(c, JN_TEXT, t);
            n->s = t->s;
            nodes_push(c, body, n);
        } else if (t->t == JT_VAR_BEGIN) {
            next(c);
            jnode *n = mk(c, JN_OUTPUT, t);
            n->a = parse_tuple_expr(c);
            if (peek(c)->t != JT_VAR_END) fail_at(c, peek(c), "expected '}}'");
            next(c);
            nodes_push(c, body, n);
        } else if (t->t == JT_BLOCK_BEGIN) {
            jtok *kw = peek2(c);
            if (kw->t == JT_NAME && ends) {
                for (size_t k = 0; ends[k]; k++)
                    if (jstr_eqz(kw->s, ends[k])) {
                        c->pos += 2;
                        *which = kw->s;
                        leave(c);
                        return;
                    }
            }
            if (kw->t == JT_NAME && !ends &&
                (jstr_eqz(kw->s, "endif") || jstr_eqz(kw->s, "endfor") || jstr_eqz(kw->s, "else") ||
                 jstr_eqz(kw->s, "elif") || jstr_eqz(kw->s, "endset") || jstr_eqz(kw->s, "endmacro") ||
                 jstr_eqz(kw->s, "endcall") || jstr_eqz(kw->s, "endfilter")))
                jctx_fail(c, kw->line, kw->col, "unexpected {%% %.*s %%} outside any block", (int)kw->s.n, kw->s.p);
            if (kw->t == JT_NAME && ends &&
                (jstr_eqz(kw->s, "endif") || jstr_eqz(kw->s, "endfor") || jstr_eqz(kw->s, "else") ||
                 jstr_eqz(kw->s, "elif") || jstr_eqz(kw->s, "endset") || jstr_eqz(kw->s, "endmacro") ||
                 jstr_eqz(kw->s, "endcall") || jstr_eqz(kw->s, "endfilter")))
                jctx_fail(c, kw->line, kw->col, "unexpected {%% %.*s %%}, expected {%% %s %%}", (int)kw->s.n, kw->s.p,
                          ends[0]);
            next(c);
            jnode *n = parse_stmt(c, t);
            if (n) nodes_push(c, body, n);
        } else {
            fail_at(c, t, "unexpected token");
        }
    }
    leave(c);
}

jnodes jinja_parse(jctx *c) {
    jnodes prog = {0};
    jstr which;
    c->pos = 0;
    parse_body(c, &prog, NULL, &which);
    return prog;
}
