/* GBNF parser (llama.cpp's grammar format, grammars/README.md there):
 *
 *   name ::= alternatives          a rule; names are [a-zA-Z0-9_-]+
 *   a | b                          alternatives
 *   "lit"  [a-z0-9_]  [^"\\]  .    literal, class (ranges, negation), any character
 *   ( ... )                        group
 *   x*  x+  x?  x{m}  x{m,}  x{m,n} repetition of the last symbol
 *   # comment                      to the end of the line
 *   \x hh  \u hhhh  \U hhhhhhhh  \t \n \r \\ \" \[ \] \-  escapes
 * A rule ends at a newline unless inside ( ) or right after | or ::=.
 *
 * Groups and repetitions become generated rules (x* -> r ::= x r | ),
 * which keeps tail repetition from growing the matcher's stacks.  Errors
 * are "grammar: line L, column C: reason". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/hash.h"
#include "util/error.h"

#define GR_MAX_REPEAT 10000 /* {m,n} bounds; beyond this the expansion is refused */
#define GR_MAX_DEPTH 256    /* nesting of ( ) */

typedef struct parser {
    tutti_grammar *g;
    const char *s;
    size_t n, pos;
    int depth;
} parser;

static void line_col(const parser *p, size_t pos, int32_t *line, int32_t *col) {
    int32_t l = 1, c = 1;
    for (size_t i = 0; i < pos && i < p->n; i++) {
        if (p->s[i] == '\n') l++, c = 1;
        else if (((unsigned char)p->s[i] & 0xC0) != 0x80) c++;
    }
    *line = l, *col = c;
}

static int perr(const parser *p, size_t pos, const char *msg) {
    int32_t l, c;
    line_col(p, pos, &l, &c);
    return tutti_set_error("grammar: line %d, column %d: %s", l, c, msg);
}

/* ---- builder ---- */

static void *grow(void *ptr, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return ptr;
    int32_t nc = *cap ? *cap * 2 : 8;
    while (nc < need) nc *= 2;
    void *np = realloc(ptr, (size_t)nc * elem);
    if (!np) return NULL;
    *cap = nc;
    return np;
}

int gr_seq_push(gr_seq *s, int32_t type, int32_t arg) {
    gr_elem *e = grow(s->e, &s->cap, s->n + 1, sizeof *e);
    if (!e) return tutti_set_error("grammar: out of memory");
    s->e = e;
    s->e[s->n++] = (gr_elem){type, arg};
    return 0;
}

int gr_rule_add_alt(tutti_grammar *g, int32_t rule, gr_seq *seq) {
    gr_rule *r = &g->rules[rule];
    gr_seq *a = grow(r->alts, &r->cap_alts, r->n_alts + 1, sizeof *a);
    if (!a) return tutti_set_error("grammar: out of memory");
    r->alts = a;
    r->alts[r->n_alts++] = *seq;
    memset(seq, 0, sizeof *seq);
    return 0;
}

static uint64_t name_hash(const char *s, size_t n) { return tutti_fnv1a(TUTTI_FNV_OFFSET, s, n); }

/* Names are looked up for every reference: a hash keeps parsing linear in
 * grammars of thousands of rules (JSON schemas make such). */
static int rehash_rules(tutti_grammar *g) {
    int32_t nc = g->rule_hcap ? g->rule_hcap * 2 : 64;
    int32_t *h = malloc(sizeof(int32_t) * (size_t)nc);
    if (!h) return tutti_set_error("grammar: out of memory");
    for (int32_t i = 0; i < nc; i++) h[i] = -1;
    for (int32_t r = 0; r < g->n_rules; r++) {
        if (g->rules[r].origin != r) continue; /* generated: not found by name */
        uint64_t j = name_hash(g->rules[r].name, strlen(g->rules[r].name)) & (uint64_t)(nc - 1);
        while (h[j] >= 0) j = (j + 1) & (uint64_t)(nc - 1);
        h[j] = r;
    }
    free(g->rule_hash);
    g->rule_hash = h, g->rule_hcap = nc;
    return 0;
}

/* A new rule named name (taken); origin < 0: a user's rule, found by name;
 * else a generated rule of user rule origin, never found by name (a user's
 * rule may be called like one: "root-1"). */
static int32_t rule_new(tutti_grammar *g, char *name, int32_t origin) {
    gr_rule *r = grow(g->rules, &g->cap_rules, g->n_rules + 1, sizeof *r);
    if (r) g->rules = r;
    if (!r || ((g->n_rules + 1) * 2 > g->rule_hcap && rehash_rules(g) < 0)) {
        free(name);
        return tutti_set_error("grammar: out of memory");
    }
    memset(&g->rules[g->n_rules], 0, sizeof(gr_rule));
    g->rules[g->n_rules].name = name;
    g->rules[g->n_rules].origin = origin < 0 ? g->n_rules : origin;
    if (origin >= 0) return g->n_rules++;
    uint64_t j = name_hash(name, strlen(name)) & (uint64_t)(g->rule_hcap - 1);
    while (g->rule_hash[j] >= 0) j = (j + 1) & (uint64_t)(g->rule_hcap - 1);
    g->rule_hash[j] = g->n_rules;
    return g->n_rules++;
}

int32_t gr_rule_get(tutti_grammar *g, const char *name, size_t n, bool create) {
    if (g->rule_hcap) {
        uint64_t j = name_hash(name, n) & (uint64_t)(g->rule_hcap - 1);
        for (int32_t i; (i = g->rule_hash[j]) >= 0; j = (j + 1) & (uint64_t)(g->rule_hcap - 1))
            if (strlen(g->rules[i].name) == n && !memcmp(g->rules[i].name, name, n)) return i;
    }
    if (!create) return -1;
    char *nm = malloc(n + 1);
    if (!nm) return tutti_set_error("grammar: out of memory");
    memcpy(nm, name, n);
    nm[n] = 0;
    return rule_new(g, nm, -1);
}

int32_t gr_rule_new_anon(tutti_grammar *g, int32_t origin, size_t at, bool rep) {
    char buf[300];
    snprintf(buf, sizeof buf, "%.200s-%d", g->rules[origin].name, g->n_rules);
    char *nm = strdup(buf);
    if (!nm) return tutti_set_error("grammar: out of memory");
    int32_t r = rule_new(g, nm, origin);
    if (r >= 0) g->rules[r].defined = true, g->rules[r].at = (int64_t)at + 1, g->rules[r].rep = rep;
    return r;
}

static int cmp_range(const void *a, const void *b) {
    const gr_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int32_t gr_class_new(tutti_grammar *g, const gr_range *rin, int32_t n, bool negate) {
    /* sorted, merged, complemented if negated, surrogates removed */
    gr_range *tmp = malloc(sizeof(gr_range) * (size_t)(n + 2) * 4);
    if (!tmp) return tutti_set_error("grammar: out of memory");
    if (n) memcpy(tmp, rin, sizeof(gr_range) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_range);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m && tmp[i].lo <= tmp[m - 1].hi + 1) {
            if (tmp[i].hi > tmp[m - 1].hi) tmp[m - 1].hi = tmp[i].hi;
        } else {
            tmp[m++] = tmp[i];
        }
    }
    gr_range *out = tmp + n + 2;
    int32_t k = 0;
    if (negate) {
        uint32_t next = 0;
        for (int32_t i = 0; i < m; i++) {
            if (tmp[i].lo > next) out[k++] = (gr_range){next, tmp[i].lo - 1};
            next = tmp[i].hi + 1;
        }
        if (next <= GR_MAX_CP) out[k++] = (gr_range){next, GR_MAX_CP};
    } else {
        memcpy(out, tmp, sizeof(gr_range) * (size_t)m);
        k = m;
    }
    /* cut out the surrogates (never valid UTF-8) */
    gr_range *fin = out + n + 2; /* k <= n + 1 ranges become at most k + 1 */
    int32_t f = 0;
    for (int32_t i = 0; i < k; i++) {
        gr_range r = out[i];
        if (r.hi < 0xD800 || r.lo > 0xDFFF) fin[f++] = r;
        else {
            if (r.lo < 0xD800) fin[f++] = (gr_range){r.lo, 0xD7FF};
            if (r.hi > 0xDFFF) fin[f++] = (gr_range){0xE000, r.hi};
        }
    }
    gr_range *rr = grow(g->ranges, &g->cap_ranges, g->n_ranges + f + 1, sizeof *rr);
    gr_class *cc = rr ? grow(g->classes, &g->cap_classes, g->n_classes + 1, sizeof *cc) : NULL;
    if (rr) g->ranges = rr;
    if (cc) g->classes = cc;
    if (!rr || !cc) {
        free(tmp);
        return tutti_set_error("grammar: out of memory");
    }
    memcpy(g->ranges + g->n_ranges, fin, sizeof(gr_range) * (size_t)f);
    free(tmp);
    g->classes[g->n_classes] = (gr_class){g->n_ranges, f};
    g->n_ranges += f;
    return g->n_classes++;
}

bool gr_class_has(const tutti_grammar *g, int32_t cls, uint32_t cp) {
    const gr_class *c = &g->classes[cls];
    const gr_range *r = g->ranges + c->r0;
    int32_t lo = 0, hi = c->n;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo) hi = mid;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}

bool gr_class_meets(const tutti_grammar *g, int32_t cls, uint32_t lo, uint32_t hi) {
    const gr_class *c = &g->classes[cls];
    const gr_range *r = g->ranges + c->r0;
    for (int32_t i = 0; i < c->n; i++)
        if (r[i].lo <= hi && r[i].hi >= lo) return true;
    return false;
}

bool gr_class_covers(const tutti_grammar *g, int32_t cls, uint32_t lo, uint32_t hi) {
    const gr_class *c = &g->classes[cls];
    const gr_range *r = g->ranges + c->r0;
    for (int32_t i = 0; i < c->n; i++)
        if (r[i].lo <= lo && r[i].hi >= hi) return true; /* ranges are merged: one must hold it all */
    return false;
}

void gr_grammar_free_parts(tutti_grammar *g) {
    for (int32_t i = 0; i < g->n_rules; i++) {
        for (int32_t a = 0; a < g->rules[i].n_alts; a++) free(g->rules[i].alts[a].e);
        free(g->rules[i].alts);
        free(g->rules[i].name);
    }
    free(g->rules);
    free(g->rule_hash);
    free(g->ranges);
    free(g->classes);
    free(g->elems);
    free(g->alt_pos);
    free(g->rule_alt0);
    free(g->rule_nalt);
}

int gr_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t v = c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_cp[len] || v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* ---- lexing ---- */

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines only if newline_ok. */
static void skip_space(parser *p, bool newline_ok) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c == '#') {
            while (p->pos < p->n && p->s[p->pos] != '\n') p->pos++;
        } else if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
            p->pos++;
        } else {
            break;
        }
    }
}

static int hex_digits(parser *p, int count, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < count; i++) {
        if (p->pos >= p->n) return perr(p, p->pos, "escape ends early: expected a hex digit");
        char c = p->s[p->pos];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return perr(p, p->pos, "expected a hex digit in the escape");
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return 0;
}

/* One (possibly escaped) character of a literal or class. */
static int parse_char(parser *p, uint32_t *cp) {
    size_t at = p->pos;
    if (p->pos >= p->n) return perr(p, at, "unexpected end of the grammar");
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '\\') {
        p->pos++;
        if (p->pos >= p->n) return perr(p, at, "escape at the end of the grammar");
        char e = p->s[p->pos++];
        switch (e) {
        case 'x':
            if (hex_digits(p, 2, cp) < 0) return TUTTI_ERR;
            break;
        case 'u':
            if (hex_digits(p, 4, cp) < 0) return TUTTI_ERR;
            break;
        case 'U':
            if (hex_digits(p, 8, cp) < 0) return TUTTI_ERR;
            break;
        case 't': *cp = '\t'; break;
        case 'n': *cp = '\n'; break;
        case 'r': *cp = '\r'; break;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/': *cp = (uint32_t)e; break;
        default: return perr(p, at, "unknown escape (known: \\x \\u \\U \\t \\n \\r \\\\ \\\" \\[ \\] \\- \\^ \\/)");
        }
        if (*cp > GR_MAX_CP) return perr(p, at, "code point above U+10FFFF");
        if (*cp >= 0xD800 && *cp <= 0xDFFF) return perr(p, at, "a surrogate code point is not a character");
        return 0;
    }
    int len = gr_utf8_decode((const unsigned char *)p->s + p->pos, p->n - p->pos, cp);
    if (!len) return perr(p, at, "invalid UTF-8 in the grammar");
    p->pos += (size_t)len;
    return 0;
}

static int parse_alternates(parser *p, int32_t rule);

static int32_t single_class(tutti_grammar *g, uint32_t cp) {
    gr_range r = {cp, cp};
    return gr_class_new(g, &r, 1, false);
}

/* A rule standing for seq->e[from..n) (the unit a repetition repeats). */
static int32_t unit_rule(parser *p, gr_seq *seq, int32_t from, int32_t origin, size_t at) {
    if (seq->n - from == 1 && seq->e[from].type == GR_REF) return seq->e[from].arg;
    int32_t r = gr_rule_new_anon(p->g, origin, at, false);
    if (r < 0) return r;
    gr_seq alt = {0};
    for (int32_t i = from; i < seq->n; i++)
        if (gr_seq_push(&alt, seq->e[i].type, seq->e[i].arg) < 0) return TUTTI_ERR;
    if (gr_rule_add_alt(p->g, r, &alt) < 0) return TUTTI_ERR;
    return r;
}

/* Replaces seq->e[from..n) by min..max copies (max < 0: unbounded). */
static int apply_repeat(parser *p, gr_seq *seq, int32_t from, int32_t min, int32_t max, int32_t origin, size_t at) {
    int32_t u = unit_rule(p, seq, from, origin, at);
    if (u < 0) return TUTTI_ERR;
    seq->n = from;
    for (int32_t i = 0; i < min; i++)
        if (gr_seq_push(seq, GR_REF, u) < 0) return TUTTI_ERR;
    if (max < 0) {
        /* star ::= u star | (empty) */
        int32_t st = gr_rule_new_anon(p->g, origin, at, true);
        if (st < 0) return TUTTI_ERR;
        gr_seq a = {0}, e = {0};
        if (gr_seq_push(&a, GR_REF, u) < 0 || gr_seq_push(&a, GR_REF, st) < 0) return TUTTI_ERR;
        if (gr_rule_add_alt(p->g, st, &a) < 0 || gr_rule_add_alt(p->g, st, &e) < 0) return TUTTI_ERR;
        return gr_seq_push(seq, GR_REF, st);
    }
    /* opt_k ::= u opt_{k-1} | (empty), opt_1 ::= u | (empty) */
    int32_t prev = -1;
    for (int32_t k = 0; k < max - min; k++) {
        int32_t o = gr_rule_new_anon(p->g, origin, at, true);
        if (o < 0) return TUTTI_ERR;
        gr_seq a = {0}, e = {0};
        if (gr_seq_push(&a, GR_REF, u) < 0 || (prev >= 0 && gr_seq_push(&a, GR_REF, prev) < 0)) return TUTTI_ERR;
        if (gr_rule_add_alt(p->g, o, &a) < 0 || gr_rule_add_alt(p->g, o, &e) < 0) return TUTTI_ERR;
        prev = o;
    }
    return prev >= 0 ? gr_seq_push(seq, GR_REF, prev) : 0;
}

static int parse_int(parser *p, int32_t *out) {
    size_t at = p->pos;
    int64_t v = 0;
    if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return perr(p, at, "expected a number");
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        v = v * 10 + (p->s[p->pos++] - '0');
        if (v > GR_MAX_REPEAT) return perr(p, at, "repetition bound above 10000");
    }
    *out = (int32_t)v;
    return 0;
}

static int parse_sequence(parser *p, int32_t rule, gr_seq *seq, bool nested) {
    int32_t last = -1; /* start of the last symbol in seq, for repetitions */
    int32_t origin = p->g->rules[rule].origin;
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        size_t at = p->pos;
        if (c == '"') {
            p->pos++;
            last = seq->n;
            while (p->pos < p->n && p->s[p->pos] != '"') {
                if (p->s[p->pos] == '\n') return perr(p, p->pos, "newline inside a literal (write \\n)");
                uint32_t cp;
                if (parse_char(p, &cp) < 0) return TUTTI_ERR;
                int32_t cl = single_class(p->g, cp);
                if (cl < 0 || gr_seq_push(seq, GR_CLASS, cl) < 0) return TUTTI_ERR;
            }
            if (p->pos >= p->n) return perr(p, at, "unterminated literal");
            p->pos++;
            if (seq->n == last) last = -1; /* "" is nothing to repeat */
        } else if (c == '[') {
            p->pos++;
            bool neg = false;
            if (p->pos < p->n && p->s[p->pos] == '^') neg = true, p->pos++;
            gr_range *rs = NULL;
            int32_t nr = 0, cap = 0;
            while (p->pos < p->n && p->s[p->pos] != ']') {
                uint32_t lo, hi;
                size_t cat = p->pos;
                if (parse_char(p, &lo) < 0) goto bad_class;
                hi = lo;
                if (p->pos + 1 < p->n && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
                    p->pos++;
                    if (parse_char(p, &hi) < 0) goto bad_class;
                    if (hi < lo) {
                        perr(p, cat, "character range with its end before its start");
                        goto bad_class;
                    }
                }
                gr_range *nrs = grow(rs, &cap, nr + 1, sizeof *rs);
                if (!nrs) {
                    tutti_set_error("grammar: out of memory");
                    goto bad_class;
                }
                rs = nrs;
                rs[nr++] = (gr_range){lo, hi};
            }
            if (p->pos >= p->n) {
                perr(p, at, "unterminated character class");
                goto bad_class;
            }
            p->pos++;
            int32_t cl = gr_class_new(p->g, rs, nr, neg);
            free(rs);
            last = seq->n;
            if (cl < 0 || gr_seq_push(seq, GR_CLASS, cl) < 0) return TUTTI_ERR;
            skip_space(p, nested);
            continue;
        bad_class:
            free(rs);
            return TUTTI_ERR;
        } else if (c == '.') {
            p->pos++;
            int32_t cl = gr_class_new(p->g, NULL, 0, true);
            last = seq->n;
            if (cl < 0 || gr_seq_push(seq, GR_CLASS, cl) < 0) return TUTTI_ERR;
        } else if (is_word(c)) {
            size_t st = p->pos;
            while (p->pos < p->n && is_word(p->s[p->pos])) p->pos++;
            /* a name followed by ::= starts the next rule: the sequence ended */
            size_t save = p->pos;
            skip_space(p, true);
            if (p->pos + 2 < p->n + 0 && !strncmp(p->s + p->pos, "::=", 3)) {
                if (nested) return perr(p, st, "missing ')' before the next rule");
                p->pos = st;
                return 0;
            }
            p->pos = save;
            int32_t r = gr_rule_get(p->g, p->s + st, p->pos - st, true);
            if (r < 0) return TUTTI_ERR;
            /* the position only: its line and column are counted when an
             * error needs them (counting here would be quadratic) */
            if (!p->g->rules[r].defined && !p->g->rules[r].ref_at) p->g->rules[r].ref_at = (int64_t)st + 1;
            last = seq->n;
            if (gr_seq_push(seq, GR_REF, r) < 0) return TUTTI_ERR;
        } else if (c == '(') {
            p->pos++;
            if (++p->depth > GR_MAX_DEPTH) return perr(p, at, "groups nested more than 256 deep");
            int32_t sub = gr_rule_new_anon(p->g, origin, at, false);
            if (sub < 0) return TUTTI_ERR;
            if (parse_alternates(p, sub) < 0) return TUTTI_ERR;
            if (p->pos >= p->n || p->s[p->pos] != ')') return perr(p, at, "unclosed '('");
            p->pos++;
            p->depth--;
            last = seq->n;
            if (gr_seq_push(seq, GR_REF, sub) < 0) return TUTTI_ERR;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return perr(p, at, "repetition operator without a preceding symbol");
            int32_t mn = 0, mx = -1;
            p->pos++;
            if (c == '+') mn = 1;
            else if (c == '?') mx = 1;
            else if (c == '{') {
                skip_space(p, false);
                if (p->pos < p->n && p->s[p->pos] == ',') mn = 0; /* {,n} = {0,n} */
                else if (parse_int(p, &mn) < 0) return TUTTI_ERR;
                skip_space(p, false);
                if (p->pos < p->n && p->s[p->pos] == ',') {
                    p->pos++;
                    skip_space(p, false);
                    if (p->pos < p->n && p->s[p->pos] != '}') {
                        if (parse_int(p, &mx) < 0) return TUTTI_ERR;
                        skip_space(p, false);
                    }
                } else {
                    mx = mn;
                }
                if (p->pos >= p->n || p->s[p->pos] != '}') return perr(p, at, "expected '}' closing the repetition");
                p->pos++;
                if (mx >= 0 && mx < mn) return perr(p, at, "repetition {m,n} with n < m");
            }
            if (apply_repeat(p, seq, last, mn, mx, origin, at) < 0) return TUTTI_ERR;
            last = -1; /* x** is refused as in llama.cpp */
        } else if (c == '<') {
            return perr(p, at, "token references <...> are not supported");
        } else {
            break;
        }
        skip_space(p, nested);
    }
    return 0;
}

static int parse_alternates(parser *p, int32_t rule) {
    bool nested = p->depth > 0;
    skip_space(p, true);
    for (;;) {
        gr_seq seq = {0};
        if (parse_sequence(p, rule, &seq, nested) < 0 || gr_rule_add_alt(p->g, rule, &seq) < 0) {
            free(seq.e);
            return TUTTI_ERR;
        }
        if (p->pos < p->n && p->s[p->pos] == '|') {
            p->pos++;
            skip_space(p, true);
            continue;
        }
        /* a continuation line starting with '|' */
        size_t save = p->pos;
        skip_space(p, true);
        if (p->pos < p->n && p->s[p->pos] == '|') {
            p->pos++;
            skip_space(p, true);
            continue;
        }
        p->pos = save;
        return 0;
    }
}

static int parse_rule(parser *p) {
    size_t st = p->pos;
    while (p->pos < p->n && is_word(p->s[p->pos])) p->pos++;
    if (p->pos == st) return perr(p, st, "expected a rule name");
    size_t nl = p->pos - st;
    skip_space(p, false);
    if (p->pos + 3 > p->n || strncmp(p->s + p->pos, "::=", 3))
        return perr(p, p->pos, "expected '::=' after the rule name");
    p->pos += 3;
    int32_t r = gr_rule_get(p->g, p->s + st, nl, true);
    if (r < 0) return TUTTI_ERR;
    if (p->g->rules[r].defined) {
        char msg[300];
        snprintf(msg, sizeof msg, "rule '%.*s' is defined twice", (int)(nl > 200 ? 200 : nl), p->s + st);
        return perr(p, st, msg);
    }
    p->g->rules[r].defined = true;
    if (parse_alternates(p, r) < 0) return TUTTI_ERR;
    skip_space(p, false);
    if (p->pos < p->n && p->s[p->pos] != '\n') {
        if (p->s[p->pos] == ')') return perr(p, p->pos, "unmatched ')'");
        return perr(p, p->pos, "unexpected character (expected a symbol, '|' or the end of the line)");
    }
    return 0;
}

tutti_grammar *tutti_grammar_parse(const char *text, size_t len) {
    if (!text) {
        tutti_set_error("grammar: no text");
        return NULL;
    }
    tutti_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        tutti_set_error("grammar: out of memory");
        return NULL;
    }
    g->root = -1;
    parser p = {.g = g, .s = text, .n = len};
    skip_space(&p, true);
    while (p.pos < p.n) {
        if (parse_rule(&p) < 0) goto fail;
        skip_space(&p, true);
    }
    for (int32_t i = 0; i < g->n_rules; i++)
        if (!g->rules[i].defined) {
            int32_t line, col;
            line_col(&p, (size_t)(g->rules[i].ref_at - 1), &line, &col);
            tutti_set_error("grammar: line %d, column %d: undefined rule '%s'", line, col, g->rules[i].name);
            goto fail;
        }
    g->root = gr_rule_get(g, "root", 4, false);
    if (g->root < 0) {
        tutti_set_error("grammar: no 'root' rule (the start symbol must be called root)");
        goto fail;
    }
    if (gr_compile(g, text, len) < 0) goto fail;
    return g;
fail:
    tutti_grammar_free(g);
    return NULL;
}

void tutti_grammar_free(tutti_grammar *g) {
    if (!g) return;
    gr_grammar_free_parts(g);
    free(g);
}
