/* Grammar checks and the flat element array.
 *
 * Refused, each with the rule's name:
 *   - left recursion (a rule that can reach itself without consuming a
 *     character: r ::= r "x", or through nullable prefixes): a top-down
 *     matcher would loop on it, as llama.cpp's does (it refuses it too);
 *   - a root that derives no finite string (every alternative needs an
 *     empty character class or recursion without a base case), which would
 *     otherwise only show up as "everything masked" after a forward pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/error.h"

static bool class_empty(const tutti_grammar *g, int32_t cls) { return g->classes[cls].n == 0; }

/* nullable[r]: r derives the empty string (fixed point). */
static void compute_nullable(const tutti_grammar *g, bool *nullable) {
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < g->n_rules; r++) {
            if (nullable[r]) continue;
            for (int32_t a = 0; a < g->rules[r].n_alts && !nullable[r]; a++) {
                const gr_seq *s = &g->rules[r].alts[a];
                bool all = true;
                for (int32_t i = 0; i < s->n && all; i++) all = s->e[i].type == GR_REF && nullable[s->e[i].arg];
                if (all) nullable[r] = changed = true;
            }
        }
    }
}

/* productive[r]: r derives some finite string. */
static void compute_productive(const tutti_grammar *g, bool *prod) {
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < g->n_rules; r++) {
            if (prod[r]) continue;
            for (int32_t a = 0; a < g->rules[r].n_alts && !prod[r]; a++) {
                const gr_seq *s = &g->rules[r].alts[a];
                bool all = true;
                for (int32_t i = 0; i < s->n && all; i++)
                    all = s->e[i].type == GR_REF ? prod[s->e[i].arg] : !class_empty(g, s->e[i].arg);
                if (all) prod[r] = changed = true;
            }
        }
    }
}

/* Depth-first search over "r may start with s" edges; color 1 = on the
 * path.  Returns the rule closing a cycle, or -1. */
static int32_t left_cycle(const tutti_grammar *g, const bool *nullable, int32_t r, uint8_t *color, int32_t *path,
                          int32_t *n_path) {
    color[r] = 1;
    path[(*n_path)++] = r;
    for (int32_t a = 0; a < g->rules[r].n_alts; a++) {
        const gr_seq *s = &g->rules[r].alts[a];
        for (int32_t i = 0; i < s->n; i++) {
            if (s->e[i].type != GR_REF) break;
            int32_t t = s->e[i].arg;
            if (color[t] == 1) {
                path[(*n_path)++] = t;
                return t;
            }
            if (color[t] == 0) {
                int32_t c = left_cycle(g, nullable, t, color, path, n_path);
                if (c >= 0) return c;
            }
            if (!nullable[t]) break;
        }
    }
    color[r] = 2;
    (*n_path)--;
    return -1;
}

/* Line and column of byte offset at in text. */
static void line_col(const char *text, size_t len, size_t at, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < at && i < len; i++) {
        if (text[i] == '\n') l++, c = 1;
        else if (((unsigned char)text[i] & 0xC0) != 0x80) c++;
    }
    *line = l, *col = c;
}

/* A left-recursion cycle (rules path[0..n)), told in the user's terms:
 * generated rules (groups, repetitions) are not named but shown as the
 * construct the user wrote, at its line and column. */
static int left_recursion_error(const tutti_grammar *g, const int32_t *path, int32_t n, const char *text, size_t len) {
    /* a repetition in the cycle: its repeated part can match nothing */
    for (int32_t i = 0; i < n; i++) {
        const gr_rule *r = &g->rules[path[i]];
        if (!r->rep) continue;
        int line, col;
        line_col(text, len, (size_t)(r->at - 1), &line, &col);
        return tutti_set_error("grammar: line %d, column %d: in rule '%s', the repeated part can match the empty "
                               "string, so the repetition never ends: make each repetition consume something, "
                               "e.g. (\"a\"?)* is \"a\"*",
                               line, col, g->rules[r->origin].name);
    }
    char chain[1024] = "";
    size_t k = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < n && k + 260 < sizeof chain; i++) {
        int32_t u = g->rules[path[i]].origin;
        if (u == last && i + 1 < n) continue; /* the closing rule is always shown */
        k += (size_t)snprintf(chain + k, sizeof chain - k, "%s%.200s", k ? " -> " : "", g->rules[u].name);
        last = u;
    }
    return tutti_set_error("grammar: rule '%s' is left-recursive (%s): rewrite it with repetition, e.g. "
                           "x ::= y (op y)*",
                           g->rules[g->rules[path[0]].origin].name, chain);
}

int gr_compile(tutti_grammar *g, const char *text, size_t len) {
    int32_t R = g->n_rules;
    bool *nullable = calloc((size_t)R, sizeof(bool));
    bool *prod = calloc((size_t)R, sizeof(bool));
    uint8_t *color = calloc((size_t)R, 1);
    int32_t *path = malloc(sizeof(int32_t) * (size_t)(R + 1));
    int rc = TUTTI_ERR;
    if (!nullable || !prod || !color || !path) {
        tutti_set_error("grammar: out of memory");
        goto done;
    }
    compute_nullable(g, nullable);
    for (int32_t r = 0; r < R; r++) {
        if (color[r]) continue;
        int32_t np = 0;
        int32_t c = left_cycle(g, nullable, r, color, path, &np);
        if (c >= 0) {
            int32_t start = 0;
            while (path[start] != c) start++;
            left_recursion_error(g, path + start, np - start, text, len);
            goto done;
        }
    }
    compute_productive(g, prod);
    if (!prod[g->root]) {
        tutti_set_error("grammar: 'root' admits no string (every alternative needs an empty character class "
                        "or a rule that never ends)");
        goto done;
    }
    /* flatten */
    int64_t ne = 0, na = 0;
    for (int32_t r = 0; r < R; r++) {
        na += g->rules[r].n_alts;
        for (int32_t a = 0; a < g->rules[r].n_alts; a++) ne += g->rules[r].alts[a].n + 1;
    }
    if (ne > INT32_MAX / 2 || na > INT32_MAX / 2) {
        tutti_set_error("grammar: too large");
        goto done;
    }
    g->elems = malloc(sizeof(gr_elem) * (size_t)(ne + 1));
    g->alt_pos = malloc(sizeof(int32_t) * (size_t)(na + 1));
    g->rule_alt0 = malloc(sizeof(int32_t) * (size_t)R);
    g->rule_nalt = malloc(sizeof(int32_t) * (size_t)R);
    if (!g->elems || !g->alt_pos || !g->rule_alt0 || !g->rule_nalt) {
        tutti_set_error("grammar: out of memory");
        goto done;
    }
    int32_t pe = 0, pa = 0;
    for (int32_t r = 0; r < R; r++) {
        g->rule_alt0[r] = pa;
        g->rule_nalt[r] = 0;
        for (int32_t a = 0; a < g->rules[r].n_alts; a++) {
            const gr_seq *s = &g->rules[r].alts[a];
            /* alternatives that can never match (an empty class, an
             * unproductive rule) are dropped: they would only make dead
             * stacks */
            bool live = true;
            for (int32_t i = 0; i < s->n && live; i++)
                live = s->e[i].type == GR_REF ? prod[s->e[i].arg] : !class_empty(g, s->e[i].arg);
            if (!live) continue;
            g->alt_pos[pa++] = pe;
            g->rule_nalt[r]++;
            for (int32_t i = 0; i < s->n; i++) g->elems[pe++] = s->e[i];
            g->elems[pe++] = (gr_elem){GR_END, 0};
        }
    }
    g->n_elems = pe;
    rc = 0;
done:
    free(nullable), free(prod), free(color), free(path);
    return rc;
}
