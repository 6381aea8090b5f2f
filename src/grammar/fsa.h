/* Finite automata over Unicode code points: the languages of the JSON
 * schema compiler (string bodies from pattern / format / const / enum,
 * property names, numbers), where a schema needs what a grammar rule
 * cannot say directly: intersection (allOf of patterns, pattern with a
 * format, a key that is none of the named properties), complement (not,
 * additional properties next to patternProperties) and exact counting
 * (minLength with a pattern).
 *
 * An fsa is a trimmed DFA (every state reaches an accepting one; the
 * language accepting nothing is one state without edges), minimal unless
 * minimising would take over 64 rounds of refinement (long counted
 * chains, which are minimal enough), its states numbered in breadth-first
 * order from the start 0.  Edges are ranges of code points [lo, hi] (sorted,
 * disjoint, surrogates D800-DFFF never included); a missing range
 * rejects.  Every operation returns a new automaton, or NULL with an error
 * ("... over N states", out of memory); the size bound keeps compile time
 * and grammar size in check.
 *
 * Also here: the shared growable text buffer of the schema compiler, and
 * the GBNF writer of an automaton (fsa_emit.c). */
#ifndef TUTTI_GRAMMAR_FSA_H
#define TUTTI_GRAMMAR_FSA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define FSA_MAX_STATES 20000
#define FSA_MAX_CP 0x10FFFFu

typedef struct fsa_edge {
    uint32_t lo, hi;
    int32_t to;
} fsa_edge;

typedef struct fsa {
    int32_t n;   /* states, >= 1; 0 is the start */
    int32_t *e0; /* [n + 1]: state q's edges are edges[e0[q] .. e0[q + 1]) */
    fsa_edge *edges;
    uint8_t *acc; /* [n] accepting */
} fsa;

void fsa_free(fsa *a);
fsa *fsa_copy(const fsa *a);
fsa *fsa_nothing(void);                          /* the empty language */
fsa *fsa_all(void);                              /* every string */
fsa *fsa_literal(const uint32_t *cp, int32_t n); /* exactly that string */
fsa *fsa_utf8_literal(const char *s, size_t n);  /* the same from UTF-8 (NULL: invalid UTF-8) */
/* Exactly the k NUL-terminated UTF-8 strings s[0..k) (any order, repeats
 * allowed): their trie, minimised once; NULL with an error for invalid
 * UTF-8 or over FSA_MAX_STATES code points in all (then fsa_or them). */
fsa *fsa_utf8_literals(const char *const *s, int32_t k);
fsa *fsa_and(const fsa *a, const fsa *b);
fsa *fsa_or(const fsa *a, const fsa *b);
fsa *fsa_minus(const fsa *a, const fsa *b); /* in a, not in b */
fsa *fsa_not(const fsa *a);                 /* every string not in a */
/* The strings of a whose length in code points is in [min, max] (max < 0:
 * no upper bound). */
fsa *fsa_length(const fsa *a, int64_t min, int64_t max);
/* Concatenation a b. */
fsa *fsa_concat(const fsa *a, const fsa *b);
bool fsa_is_empty(const fsa *a);
/* The shortest and longest accepted lengths in code points (*min -1: the
 * empty language; *max -1: unbounded or empty); TUTTI_ERR out of memory. */
int fsa_length_range(const fsa *a, int64_t *min, int64_t *max);
bool fsa_is_all(const fsa *a);
bool fsa_equal(const fsa *a, const fsa *b);
bool fsa_accepts(const fsa *a, const uint32_t *cp, int32_t n);
bool fsa_accepts_utf8(const fsa *a, const char *s, size_t n);
/* Shortest accepted length, -1 when empty; longest, -1 when unbounded. */
int64_t fsa_min_length(const fsa *a);
int64_t fsa_max_length(const fsa *a);

/* ---- NFA builder (regex.c, js_number.c): states with epsilon moves and
 * range edges, made into an fsa by subset construction ---- */

typedef struct nfa_st {
    int32_t *eps;
    int32_t n_eps, cap_eps;
    fsa_edge *ed;
    int32_t n_ed, cap_ed;
} nfa_st;

typedef struct nfa {
    nfa_st *st;
    int32_t n, cap;
    bool oom;
} nfa;

int32_t nfa_state(nfa *m); /* -1 when over the limit or out of memory (m->oom) */
void nfa_eps(nfa *m, int32_t from, int32_t to);
/* An edge on [lo, hi] (surrogates cut out). */
void nfa_edge(nfa *m, int32_t from, uint32_t lo, uint32_t hi, int32_t to);
/* Copies automaton a into m between two new states *s and *f (f reached by
 * epsilon from every accepting state). */
void nfa_embed(nfa *m, const fsa *a, int32_t *s, int32_t *f);
void nfa_free(nfa *m);
/* The DFA of the strings leading from start to final. */
fsa *nfa_to_fsa(const nfa *m, int32_t start, int32_t final);

/* ---- text buffer ---- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

void sb_putn(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) TUTTI_PRINTF(2, 3);

/* ---- GBNF of an automaton (fsa_emit.c) ---- */

enum {
    FSA_RAW = 0,        /* the code points themselves (numbers); accepting states may end */
    FSA_JSON = 1,       /* the body of a JSON string: each code point raw where JSON allows it, or
                     escaped (\" \\ \/ \b \f \n \r \t, \uXXXX in either case, surrogate pairs
                     for code points above U+FFFF where the whole plane range is allowed);
                     accepting states end with the closing quote */
    FSA_JSON_CANON = 2, /* the same, each code point in its canonical spelling only (as json.dumps
                           with ensure_ascii=False and llama.cpp write it): raw, or \" \\ \b \f
                           \n \r \t, or \u00xx (lowercase) for the other control characters */
};

/* Rules shared by the automata of one grammar: the \uXXXX forms of a set
 * of code points (the same set recurs in every state of a counted chain),
 * written once as "<base>-<k>". */
typedef struct fsa_shared {
    char base[32];
    fsa_edge **sets; /* the sets, their ranges */
    int32_t *n_set;
    int32_t n, cap;
} fsa_shared;
void fsa_shared_free(fsa_shared *sh);

/* Writes one rule per state, named "<prefix>--<q>", and returns in start
 * the name of the start state's rule (cap bytes).  The rules for the
 * empty language are one rule matching nothing but a character class with
 * no members.  sh: rules shared with other automata (NULL: none). */
void fsa_emit(const fsa *a, int enc, const char *prefix, sbuf *out, char *start, size_t cap, fsa_shared *sh);
/* GBNF class text "[...]" for the ranges r[0..n) into b. */
void fsa_class_text(sbuf *b, const fsa_edge *r, int32_t n);

#endif
