/* The `grammar` layer (internal): GBNF grammars (llama.cpp's format), JSON
 * schema to GBNF, and a byte-level matcher with a memoised automaton.
 * Public entry points are the "Grammars" section of include/tutti.h.
 *
 * Pieces, top to bottom:
 *   gbnf.c        parser: text -> rules of alternatives of element
 *                 sequences; repetitions and groups become generated rules
 *                 (as llama.cpp does), so the matcher knows only three
 *                 element kinds: END, CLASS (a set of code points), REF.
 *   compile.c     checks (undefined rules, root, left recursion, a language
 *                 that is empty) and the flat element array.
 *   matcher.c     states = sets of stacks of element positions (llama.cpp's
 *                 model), hash-consed: a stack is a persistent list node
 *                 (position, parent), a state the sorted set of its stacks
 *                 plus the bytes of an unfinished UTF-8 character.  The
 *                 transition (state, byte) is computed once and memoised,
 *                 so after warm-up matching is one table lookup per byte.
 *   vocab_mask.c  a vocabulary's token pieces as a byte trie in preorder;
 *                 the tokens allowed in a state are found by one scan of the
 *                 trie that skips every subtree whose prefix the grammar
 *                 rejects; the result is cached per state.
 *   run_mask.c    the fast path for states inside a long run of one
 *                 character class (string bodies, counted repetitions):
 *                 per vocabulary and class, the tokens made only of the
 *                 class's characters, as bitsets by character count,
 *                 computed once; a state's mask is one of those bitsets
 *                 plus the few other tokens checked byte by byte.
 *   json_schema.c JSON schema -> GBNF text (the rule shapes of llama.cpp's
 *                 json-schema-to-grammar: same whitespace, same primitives).
 */
#ifndef TUTTI_GRAMMAR_H
#define TUTTI_GRAMMAR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

#define GR_MAX_CP 0x10FFFFu

enum { GR_END = 0, GR_CLASS = 1, GR_REF = 2 };

typedef struct gr_elem {
    int32_t type; /* GR_END, GR_CLASS, GR_REF */
    int32_t arg;  /* class id or rule id */
} gr_elem;

typedef struct gr_range {
    uint32_t lo, hi; /* inclusive code points */
} gr_range;

/* A set of code points: sorted, disjoint, non-adjacent ranges (negations are
 * complemented at parse time; surrogates D800-DFFF never belong). */
typedef struct gr_class {
    int32_t r0, n;
} gr_class;

typedef struct gr_seq {
    gr_elem *e;
    int32_t n, cap;
} gr_seq;

typedef struct gr_rule {
    char *name;
    gr_seq *alts;
    int32_t n_alts, cap_alts;
    bool defined;
    int64_t ref_at; /* byte offset + 1 of the first reference (for "undefined rule"), 0: none */
    /* generated rules (groups, repetitions): the rule the user wrote them
     * in and where (byte offset + 1 of the '(' or the repetition operator),
     * for messages; origin of a user's rule is itself */
    int32_t origin;
    int64_t at;
    bool rep; /* a repetition x*, x+, x{m,n} (its alternatives repeat a unit) */
} gr_rule;

struct tutti_grammar {
    gr_rule *rules;
    int32_t n_rules, cap_rules;
    int32_t *rule_hash; /* open addressing over rule names (gbnf.c) */
    int32_t rule_hcap;
    gr_range *ranges;
    int32_t n_ranges, cap_ranges;
    gr_class *classes;
    int32_t n_classes, cap_classes;
    /* flat form (compile.c): every alternative is elems[start..] up to an
     * END; rule r's alternatives start at alt_pos[rule_alt0[r] ..
     * rule_alt0[r] + rule_nalt[r]) */
    gr_elem *elems;
    int32_t n_elems;
    int32_t *alt_pos, *rule_alt0, *rule_nalt;
    int32_t root;
};

/* Builder helpers (gbnf.c). */
int32_t gr_rule_get(tutti_grammar *g, const char *name, size_t n, bool create);
/* A generated rule for a construct of user rule `origin` at byte offset
 * at (rep: a repetition). */
int32_t gr_rule_new_anon(tutti_grammar *g, int32_t origin, size_t at, bool rep);
int gr_seq_push(gr_seq *s, int32_t type, int32_t arg);
int gr_rule_add_alt(tutti_grammar *g, int32_t rule, gr_seq *seq); /* takes seq's elements */
/* Class from ranges (any order, may overlap), negated or not. */
int32_t gr_class_new(tutti_grammar *g, const gr_range *r, int32_t n, bool negate);
bool gr_class_has(const tutti_grammar *g, int32_t cls, uint32_t cp);
bool gr_class_meets(const tutti_grammar *g, int32_t cls, uint32_t lo, uint32_t hi);
/* every code point of [lo, hi] is in the class */
bool gr_class_covers(const tutti_grammar *g, int32_t cls, uint32_t lo, uint32_t hi);
void gr_grammar_free_parts(tutti_grammar *g);

/* ---- matcher (matcher.c) ---- */

typedef struct gm_stack {
    int32_t pos, parent; /* element to match next; parent stack (0 = the empty stack) */
} gm_stack;

typedef struct gm_state {
    int64_t off; /* stack ids in m->pool[off .. off + n), sorted */
    int32_t n;
    uint32_t v;       /* unfinished UTF-8 character: value of its bytes so far */
    uint8_t rem, len; /* continuation bytes still needed (0: none pending), its length */
    bool accept;      /* the empty stack is in the set and no character is pending */
    int32_t *trans;   /* [256] next state, -1 rejected, -2 not computed yet; NULL until asked */
    int32_t mask;     /* token-mask cache slot (vocab_mask.c), -1 none */
} gm_state;

/* A cached token mask: the allowed ids when they are few, else a bitset. */
typedef struct gm_mask {
    int32_t *ids;   /* the allowed ids (bits NULL) */
    uint64_t *bits; /* [n_words] allowed tokens, or NULL */
    int32_t n;      /* ids */
    int32_t n_allowed;
} gm_mask;

struct tutti_grammar_matcher {
    const tutti_grammar *g;
    gm_stack *stk;
    int32_t n_stk, cap_stk;
    int32_t *stk_hash;
    int32_t stk_hcap;
    gm_state *st;
    int32_t n_st, cap_st;
    int32_t *st_hash;
    int32_t st_hcap;
    int32_t *pool;
    int64_t n_pool, cap_pool;
    int32_t initial, cur;
    /* closure scratch */
    uint32_t *visit;
    int32_t cap_visit;
    uint32_t stamp;
    int32_t *work, *out;
    int32_t cap_work, cap_out;
    /* token masks, valid for one grammar vocabulary */
    const tutti_grammar_vocab *gv;
    gm_mask *masks;
    int32_t n_masks, cap_masks;
    size_t mask_bytes;
    int32_t *walk;    /* [max piece length + 1] states along the trie path */
    float *save;      /* [n_vocab] */
    int32_t *ids_tmp; /* [n_vocab] */
    uint64_t *bits;   /* [n_words] run-path scratch */
    int32_t *chain;   /* [cap_chain] states after 0, 1, ... characters of a run */
    int32_t cap_chain;
    int64_t n_run, n_scan; /* masks computed by the run path / by a trie scan */
    int64_t n_sub;         /* ... of them by the run path from a superset's table */
    int64_t n_pure;        /* group results that took a gpure bitset whole */
    /* run path: the allowed tokens of group q of table t after its first
     * byte led to state nx (e.g. a string's closing quote: the same state
     * whatever the count or position before it), ids in gids[off..+n) */
    /* per class of g: its run table over gv, GM_NO_RUN, or NULL not looked up yet */
    const struct gv_run **cls_run;
    /* per class: with cls_run a superset S's table, the first bytes of the
     * characters of S outside the class (all zero: the class's own table) */
    uint64_t (*cls_bx)[4];
    int32_t *big_cls; /* the classes with enough trie nodes for a table (superset candidates), NULL: not listed yet */
    int32_t n_big;
    struct gm_gmemo *gmemo;
    int32_t gmemo_n, gmemo_cap;
    int32_t *gids;
    int64_t n_gids, cap_gids;
};

#define GM_NO_RUN ((const struct gv_run *)1) /* cls_run: the class has no run table */

typedef struct gm_gmemo {
    const struct gv_run *t; /* NULL: empty slot */
    int32_t nx, q;
    int64_t off;
    int32_t n;
    bool pure; /* also every token of the group's gpure bitset */
} gm_gmemo;

/* ---- vocabulary (vocab_mask.c, run_mask.c) ---- */

#define GV_CUM_MAX 16  /* pure tokens counted in bitsets up to this many characters */
#define GV_MAX_RUNS 96 /* run tables per vocabulary (run_mask.c says why) */

/* Per vocabulary and character class R: the tokens whose bytes are
 * characters of R only ("pure"), by character count, and the others grouped
 * by (j = leading characters in R, the byte after them). */
typedef struct gv_run {
    gr_range *r;
    int32_t nr;
    uint64_t key;        /* hash of r (run_mask.c, ranges_key) */
    int32_t max_pure;    /* longest pure token, in characters */
    int32_t n_cum;       /* min(max_pure, GV_CUM_MAX) */
    uint64_t *cum;       /* [(n_cum + 1) * n_words] pure tokens with <= n characters (n <= n_cum) */
    int32_t *ltok, *lnc; /* the pure tokens of more than n_cum characters, by count lnc (ascending) */
    int32_t n_long;
    int32_t max_j; /* largest j of any token (pure or not) */
    int32_t n_grp;
    int32_t *grp_j, *grp0; /* group g: tokens gtok[grp0[g] .. grp0[g + 1]) */
    uint8_t *grp_b;
    int32_t *gtok, *gpos; /* token id, byte offset of its first byte outside R */
    uint8_t *glcp;        /* per group token: bytes its suffix (after gpos) shares with the previous one's */
    /* groups of gv_big_group tokens or more: the tokens whose suffix is
     * pure in P (pr) are the group's last ones, from gsplit[g] (= grp0[g +
     * 1]: none), and with gv_pure_bits or more the bitset gpure[g] (else
     * NULL) */
    int32_t *gsplit;
    uint64_t **gpure;
    const gr_range *pr; /* the class P of gpure's suffixes (static or r) */
    int32_t npr;
    /* pure tokens that end inside a character that can still become one of
     * R, by j (their complete characters): counted as j + 1 characters in
     * cum, checked byte by byte when the run ends after exactly j */
    int32_t *ptok, *pj0; /* pj0[0 .. max_j + 1] */
} gv_run;

struct tutti_grammar_vocab {
    int32_t n_vocab, n_words; /* n_words: 64-bit words of a token bitset */
    int32_t n_nodes, max_depth, n_toks;
    uint8_t *byte;
    int32_t *depth, *end, *tok0, *ntok;
    int32_t *toks; /* token ids in byte order */
    int32_t *eog;  /* end-of-generation ids */
    int32_t n_eog;
    /* token pieces by id (len 0: not in the trie: no bytes, or end of generation) */
    uint8_t *pbytes;
    int64_t *poff;
    int32_t *plen;
    int32_t root_nodes[256];            /* trie nodes under the root's child for each first byte */
    int32_t root_at[256];               /* that child's node (0: none) */
    int32_t root_k0[256], root_k1[256]; /* its tokens: toks[root_k0 .. root_k1) */
    /* run tables, made on first use; shared by every matcher (locked) */
    pthread_mutex_t lock;
    gv_run **runs;
    int32_t n_runs, cap_runs;
};

/* Run tables below this many trie nodes under the class's first bytes are
 * not worth it (the trie scan is as cheap); tests lower it. */
extern int32_t gm_run_min_nodes;
/* Groups of at least gv_big_group tokens put their pure suffixes apart,
 * as a bitset from gv_pure_bits of them (run_mask.c, group_order); tests
 * lower them. */
extern int32_t gv_big_group, gv_pure_bits;

/* Sets in bits the tokens that start with byte b and that state s accepts
 * (a trie scan of b's subtree only); 0 or -3. */
int gm_scan_first(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s, uint8_t b, uint64_t *bits);
/* The run-path mask of state s into m->bits (tokens allowed, eog excluded):
 * 1 done, 0 not applicable (use the trie scan), -3 out of memory. */
int gm_run_mask(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s);
/* The largest character class among the stack tops of state s (no pending
 * character), or -1. */
int32_t gm_run_top_class(const tutti_grammar_matcher *m, int32_t s);
const gr_range *gm_class_ranges(const tutti_grammar *g, int32_t cls, int32_t *n);
bool gm_covers_all(const tutti_grammar *g, int32_t cls, const gr_range *r, int32_t nr);
bool gm_meets_any(const tutti_grammar *g, int32_t cls, const gr_range *r, int32_t nr);
/* Builds the run tables of g's classes that qualify (vocab_prepare). */
int gm_run_prepare(const tutti_grammar_vocab *v, const tutti_grammar *g);
void gv_runs_free(tutti_grammar_vocab *v);

/* Next state after byte b: >= 0, -1 rejected, -3 out of memory. */
int32_t gm_step_slow(tutti_grammar_matcher *m, int32_t s, uint8_t b);
static inline int32_t gm_step(tutti_grammar_matcher *m, int32_t s, uint8_t b) {
    const int32_t *t = m->st[s].trans;
    if (t && t[b] != -2) return t[b];
    return gm_step_slow(m, s, b);
}

/* The state of the stacks ids[0..n) (sorted, unique, no pending
 * character), created if new; -3 out of memory. */
int32_t gm_state_of(tutti_grammar_matcher *m, const int32_t *ids, int32_t n);

/* Checks and flattens (compile.c); errors name the user's rule and, for
 * what a group or repetition causes, its line and column in text[0..len). */
int gr_compile(tutti_grammar *g, const char *text, size_t len);

/* UTF-8 decode of one character from s[0..n): code point and length, or
 * length 0 for invalid input. */
int gr_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

#endif
