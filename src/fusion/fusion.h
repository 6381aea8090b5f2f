/* The `fusion` layer (internal): byte tries, exact next-byte marginals,
 * fusion rules, masks, evaluation and fitting, over the members of
 * member/member.h.
 * Public entry points are the "Ensembles" section of include/tutti.h.
 *
 * Pieces, top to bottom:
 *   fusion_trie     every token's exact bytes in a byte trie whose nodes are
 *                   ranges of the byte-sorted token table: "mass of all tokens
 *                   whose bytes start with u" is one subtraction of a
 *                   cumulative sum (bytetrie.c).
 *   fusion_bytes    exact next-byte distribution of one member given the
 *                   committed bytes (Phan et al. 2024, "Exact Byte-Level
 *                   Probabilities from Tokenized Language Models";
 *                   ByteSampler, Hayase et al. 2025), with lazily extended
 *                   tokenization hypotheses (bytestate.c).
 *   rules           mix / product / gate / contrastive on log-probability
 *                   vectors of any width (token vocabularies or 257 byte
 *                   outcomes) (rules.c).
 */
#ifndef TUTTI_FUSION_H
#define TUTTI_FUSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <math.h>

#include "member/member.h"
#include "tutti.h"
#include "util/fastmath.h"

/* exp(x) for x <= 0 and log(x) for x > 0 that vectorise (util/fastmath.h):
 * relative error < 3e-7; exp(-inf) = 0, log(0) = -inf. */
static inline float fusion_fast_exp(float x) { return tutti_fast_exp(x); }
static inline float fusion_fast_log(float x) { return tutti_fast_log(x); }

/* ------------------------------------------------------------------------ */
/* Members: the interface is member/member.h; here the calls of a byte state
 * kept where a member's model is (a member on another MPI rank). */

struct fusion_bytes_params;
struct fusion_trie;
/* The fusion_bytes_* calls of a byte state kept elsewhere (same meaning,
 * on the implementation's context). */
typedef struct fusion_bytes_ops {
    void *(*open)(fusion_member *m, const struct fusion_bytes_params *p); /* NULL + error */
    int (*start)(void *c, const char *text, size_t n);
    int (*start_ids)(void *c, const int32_t *ids, int32_t n);
    int32_t (*need_tokens)(void *c);
    const int32_t *(*best_path)(void *c, int32_t *n);
    int (*prepare)(void *c);
    int (*next)(void *c, double *out);
    int (*commit)(void *c, uint8_t b);
    void *(*clone)(void *c);
    int32_t (*n_hyps)(void *c);
    double (*pruned)(void *c);
    void (*free)(void *c);
    int32_t (*n_deferred)(void *c);
    int (*resolve)(void *c);
} fusion_bytes_ops;

/* ------------------------------------------------------------------------ */
/* Byte trie over a vocabulary */

typedef struct fusion_trie_node {
    int32_t lo, hi;  /* range [lo, hi) of the sorted token table with this prefix */
    int32_t n_exact; /* sorted[lo .. lo+n_exact) are exactly this prefix */
    int32_t child0;  /* index of the first child in trie->child_node */
    int32_t n_child; /* children, ascending byte */
} fusion_trie_node;

typedef struct fusion_trie {
    int32_t n_vocab;
    int32_t n_sorted;       /* tokens with >= 1 byte (control and empty tokens are left out) */
    int32_t *sorted;        /* [n_sorted] token ids, ascending by bytes */
    int32_t *rank;          /* [n_vocab] position in sorted, -1 if left out */
    fusion_trie_node *node; /* [n_node]; node 0 = root (empty prefix) */
    int32_t n_node;
    uint8_t *child_byte; /* [n_child_total] */
    int32_t *child_node; /* [n_child_total] */
    int32_t max_len;     /* longest piece in bytes */
    bool *is_eog;        /* [n_vocab] end-of-generation tokens (the 257th outcome) */
    int32_t *unsorted;   /* [n_unsorted] ids not in sorted (rank -1), ascending */
    int32_t n_unsorted;
    int32_t *eog_ids; /* [n_eog] ids with is_eog, ascending */
    int32_t n_eog;
    char *bytes;    /* concatenated pieces */
    int64_t *off;   /* [n_vocab+1] piece of id i = bytes[off[i] .. off[i+1]) */
    char prefix[8]; /* bytes the tokenizer puts before any text (SPM: " ") */
    int32_t n_prefix;
} fusion_trie;

/* Builds the trie from the vocabulary's pieces (tutti_token_to_piece without
 * rendering specials).  Returns NULL + error on out of memory. */
fusion_trie *fusion_trie_build(const tutti_vocab *vocab);
/* Builds from explicit pieces (tests, remote members): piece i is
 * bytes[off[i]..off[i+1]); eog may be NULL. */
fusion_trie *fusion_trie_build_pieces(int32_t n_vocab, const char *bytes, const int64_t *off, const bool *eog,
                                      const char *prefix, int32_t n_prefix);
void fusion_trie_free(fusion_trie *t);
/* Child of node with byte b, or -1. */
int32_t fusion_trie_child(const fusion_trie *t, int32_t node, uint8_t b);

/* ------------------------------------------------------------------------ */
/* Exact next-byte distribution of one member */

#define FUSION_N_BYTE_OUT 257 /* 256 bytes + end of text */
/* Speculative distributions a byte state keeps (bytestate.c): a member
 * needs that many sessions beyond one per hypothesis. */
#define FUSION_SPEC_MAX 8
#define FUSION_END 256

typedef struct fusion_bytes fusion_bytes;

typedef struct fusion_bytes_params {
    float temp;       /* member temperature: p(t) = softmax(logits / temp) */
    double prune;     /* drop hypotheses whose share of the live mass is below this (0 = exact) */
    int32_t max_hyps; /* keep at most this many hypotheses (largest mass first) */
    /* With prune > 0: a hypothesis whose share of the live mass is below
     * prune gets no forward pass unless it is needed (bytestate.c, "Lazy
     * evaluation"); its share is left out of fusion_bytes_next until
     * fusion_bytes_resolve.  Exact results (prune 0) are unchanged. */
    bool lazy;
} fusion_bytes_params;

/* The byte state works on the member's byte view: trie->prefix followed by
 * the committed text.  m and trie are borrowed. */
fusion_bytes *fusion_bytes_new(fusion_member *m, const fusion_trie *trie, const fusion_bytes_params *p);
void fusion_bytes_free(fusion_bytes *s);
/* Starts a new text: from BOS (members whose vocabulary adds one) with the
 * tokenizer prefix and text[0..n) committed byte by byte (exact).  A member
 * without BOS has no distribution for the first token: there the canonical
 * tokenization of text minus its last token is taken as given (n must be
 * > 0) and the rest is committed byte by byte. */
int fusion_bytes_start(fusion_bytes *s, const char *text, size_t n);
/* Starts after a prompt given as token ids ids[0..n) (n >= 1, BOS included
 * when wanted; e.g. a chat-template rendering): one hypothesis, nothing
 * committed, no tokenizer prefix in the view, so the committed text is
 * exactly the bytes of the tokens that follow the prompt. */
int fusion_bytes_start_ids(fusion_bytes *s, const int32_t *ids, int32_t n);
/* Longest token path among the hypotheses that still need a forward pass
 * (0 if none): prepare fails when it exceeds the member's n_ctx. */
int32_t fusion_bytes_need_tokens(const fusion_bytes *s);
/* Token path (prompt included) of the heaviest hypothesis whose tokens
 * spell exactly the committed text, or NULL (*n = 0) when pruning left
 * none.  Owned by s, valid until the next commit. */
const int32_t *fusion_bytes_best_path(const fusion_bytes *s, int32_t *n);
/* Runs the forward passes the committed bytes require (hypotheses created by
 * the last commits).  Safe to call from a worker thread (one per member). */
int fusion_bytes_prepare(fusion_bytes *s);
/* Writes P(next outcome | committed) for the 256 bytes and end of text,
 * normalised (out[257]); calls prepare first if needed. */
int fusion_bytes_next(fusion_bytes *s, double *out);
/* Hypotheses left without a forward pass (lazy; 0 otherwise). */
int32_t fusion_bytes_n_deferred(const fusion_bytes *s);
/* Runs the forward passes of the deferred hypotheses too: the next
 * fusion_bytes_next includes their mass. */
int fusion_bytes_resolve(fusion_bytes *s);
/* Commits one byte (not END).  Fails (FUSION_ERR_SPELL) if the byte has zero probability under
 * every live hypothesis. */
int fusion_bytes_commit(fusion_bytes *s, uint8_t b);
int fusion_bytes_commit_n(fusion_bytes *s, const char *bytes, size_t n);
/* Says that the next n bytes committed will be text[0..n) (eval's text,
 * a prompt: fusion_bytes_start says it of its own text).  Speed only:
 * the distributions along the canonical tokenization of the text are
 * computed ahead in one forward pass per window of tokens, and a
 * hypothesis whose path is a prefix of it takes its distribution from
 * there instead of a pass of its own; results are those without the
 * hint.  A text the canonical tokens cannot spell, or a member that
 * cannot compute ahead (no logits_from), is no error: nothing is done. */
int fusion_bytes_expect(fusion_bytes *s, const char *text, size_t n);
/* Deep copy (shares member and trie). */
fusion_bytes *fusion_bytes_clone(const fusion_bytes *s);
int32_t fusion_bytes_n_hyps(const fusion_bytes *s);
/* Mass dropped by pruning so far (sum of relative shares). */
double fusion_bytes_pruned(const fusion_bytes *s);

/* ------------------------------------------------------------------------ */
/* Fusion rules on log-probabilities */

typedef struct fusion_rule_params {
    int rule;             /* TUTTI_RULE_* */
    const float *weights; /* [n_members] */
    float beta;           /* contrastive plausibility cut: keep p_1(x) >= beta * max p_1 */
} fusion_rule_params;

/* logp[i] = log-probabilities of member i over n outcomes (-INFINITY for
 * impossible).  Writes the fused, normalised log-probabilities to out[n].
 * `work` needs n doubles.  *chosen (may be NULL) receives the member gate
 * picked, -1 for the other rules.  Returns 0, or TUTTI_ERR when every
 * outcome ends up impossible or the weights are unusable. */
int fusion_combine(const fusion_rule_params *p, int32_t n_members, const float *const *logp, int32_t n, float *out,
                   double *work, int32_t *chosen);
/* MIX and PRODUCT straight from raw logits (member temperatures applied):
 * the same result as log-softmax per member + fusion_combine with fewer
 * passes over the vocabulary.  scratch: n_members * n floats.  Other
 * rules: error. */
int fusion_combine_logits(const fusion_rule_params *p, const float *temps, int32_t n_members,
                          const float *const *logits, int32_t n, float *out, float *scratch);
/* log_softmax(logits / temp) into out (n floats). */
void fusion_log_softmax(const float *logits, int32_t n, float temp, float *out);
/* Entropy in nats of a log-probability vector. */
double fusion_entropy(const float *logp, int32_t n);

/* UTF-8: the byte outcomes allowed after the committed bytes so far.
 * state = number of continuation bytes still expected (0..3) and the
 * allowed range of the next one; see utf8_allowed in rules.c. */
typedef struct fusion_utf8 {
    int need;       /* continuation bytes still expected */
    uint8_t lo, hi; /* allowed range of the next continuation byte */
} fusion_utf8;
void fusion_utf8_init(fusion_utf8 *u);
/* allowed[257]: which outcomes keep the text valid UTF-8 (END only between characters). */
void fusion_utf8_allowed(const fusion_utf8 *u, bool *allowed);
void fusion_utf8_push(fusion_utf8 *u, uint8_t b);

/* ------------------------------------------------------------------------ */
/* Evaluation helpers (shared by eval.c, fit.c and tests) */

/* Splits text into sentence-aligned chunks of at most max_bytes bytes,
 * exactly as ../shared/oracle/bpb.py does: paragraphs split on "\n\n",
 * stripped, split into sentences after [.!?"] followed by a space, sentences
 * joined by one space while the chunk stays within max_bytes.  Returns the
 * number of chunks; *out is an array of malloc'd NUL-terminated strings
 * (caller frees each and the array).  -1 on error. */
int fusion_split_chunks(const char *text, size_t len, int max_bytes, char ***out);
void fusion_free_chunks(char **chunks, int n);

/* Token-level negative log-likelihood (nats) of text under member m: the
 * text is tokenized canonically with BOS, and every token after BOS is
 * scored (as bpb.py does).  temp scales the logits. */
int fusion_token_nll(fusion_member *m, const char *text, size_t len, float temp, double *nll);

/* Per-byte conditionals of text under member m: out[len][257] log-probs
 * (row i = log P(outcome | text[0..i))), from BOS. */
int fusion_byte_table(fusion_member *m, const fusion_trie *trie, const fusion_bytes_params *bp, const char *text,
                      size_t len, float *out);

#endif
