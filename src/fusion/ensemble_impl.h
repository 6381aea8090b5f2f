/* Internal layout of tutti_ensemble, shared by its creation (the ensemble
 * layer, src/ensemble/new.c), ensemble.c (parameters, worker pool), the
 * generation loop (gen.c, gen_output.c) and its alignments (align.h:
 * align_token.c, align_byte.c, align_span.c), and eval.c (bits per byte,
 * fitting). */
#ifndef TUTTI_FUSION_ENSEMBLE_IMPL_H
#define TUTTI_FUSION_ENSEMBLE_IMPL_H

#include <pthread.h>

#include "fusion/fusion.h"
#include "grammar/constrain.h"

typedef int (*member_job)(tutti_ensemble *e, int32_t i, void *arg);

struct tutti_ensemble {
    int32_t n; /* members */
    fusion_member *m[TUTTI_ENSEMBLE_MAX_MEMBERS];
    fusion_trie *trie[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* BYTE/SPAN only */
    char *path[TUTTI_ENSEMBLE_MAX_MEMBERS];
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];
    float temp[TUTTI_ENSEMBLE_MAX_MEMBERS];
    tutti_fusion_rule rule;
    tutti_align align; /* resolved */
    bool same_vocab;
    float beta;
    double prune;
    int32_t max_hyps;
    int32_t n_ctx;
    int32_t n_threads;      /* all of the ensemble's threads (tutti_ensemble_params.n_threads resolved) */
    tutti_notice_cb notice; /* tutti_ensemble_set_notice */
    void *notice_user;
    tutti_step_cb step_cb; /* tutti_ensemble_set_step_cb */
    void *step_user;
    float *step_buf; /* [step_cap] renormalised row for step_cb */
    int32_t step_cap;
    bool step_members;         /* steps carry the members' log-probabilities (tutti_ensemble_set_step_members) */
    bool parallel;             /* members' forward passes on one thread each, concurrently */
    bool adapt_on;             /* MIX weights follow the text (adapt.c) */
    double adapt_alpha;        /* fixed-share alpha in [0, 1] */
    double route_tau;          /* > 0: weights from the prompt's perplexities (route.c), else off */
    tutti_context_weights ctx; /* n_features > 0: context-dependent weights (ctxweights.c) */
    double select;             /* >= 0: selective fusion threshold (nats), else off */
    bool mix_sample;           /* sampled mix steps from one member's pass where exact (mixsample.h) */
    /* worker pool (parallel): one thread per member */
    pthread_t th[TUTTI_ENSEMBLE_MAX_MEMBERS];
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_go, cv_done;
    uint64_t gen; /* job generation counter */
    int32_t n_done;
    bool quit;
    member_job job;
    void *job_arg;
    int rc[TUTTI_ENSEMBLE_MAX_MEMBERS];
    char err[TUTTI_ENSEMBLE_MAX_MEMBERS][512];
    /* forward tokens of each member up to its first next-token distribution
     * in the current generation (tutti_ensemble_stats.n_prompt_evaluated) */
    int64_t prompt_eval[TUTTI_ENSEMBLE_MAX_MEMBERS];
    bool prompt_marked;
    double t_prompt_done; /* when prompt_marked was set (ens_now_s) */
    /* drafting (tutti_ensemble_set_draft, src/ensemble/draft.c; used by
     * align_token.c through fusion/draft.c): NULL = none */
    fusion_member *draft;
    bool draft_respell; /* the draft has another tokenizer: its text is re-spelled in member 1's tokens (draft.c) */
    tutti_draft_params draft_p; /* model_path not kept; lookup_n > 0 without draft: prompt lookup */
};

/* Checks weights w[0..e->n) for e's rule (finite, not all 0, negative only
 * for contrastive, ...).  0 or TUTTI_ERR naming the member. */
int ens_check_weights(const tutti_ensemble *e, const float *w);
/* The weights given[0..e->n) with their NAN entries replaced by the
 * defaults for e's rule, into w. */
void ens_resolve_weights(const tutti_ensemble *e, const float *given, float *w);
/* Starts one worker thread per member (e->parallel); 0 or TUTTI_ERR (the
 * ones started are joined again). */
int ens_start_workers(tutti_ensemble *e);

/* Called after each forward phase: the first call of a generation records
 * the members' forward-token counts as their prompt evaluation. */
void ens_prompt_done(tutti_ensemble *e);

/* Runs fn(e, i, arg) for every member i, concurrently when e->parallel.
 * Returns 0 or the first member's error (message carried to this thread). */
int ens_run_members(tutti_ensemble *e, member_job fn, void *arg);
/* Gives weight 0 to members that have left (fusion_member_has_left); error
 * when no weight is left.  ens_run_members calls it after every job. */
int ens_drop_left(tutti_ensemble *e);
double ens_now_s(void);
/* text[0..len) tokenized by v (with its BOS when it adds one) into a
 * malloc'd *ids (the caller frees it): the count, or TUTTI_ERR ("out of
 * memory" or "the text cannot be tokenized"; the caller prefixes it). */
int32_t ens_tokenize(const tutti_vocab *v, const char *text, size_t len, int32_t **ids);
fusion_bytes_params ens_bytes_params(const tutti_ensemble *e, int32_t i);
fusion_rule_params ens_rule_params(const tutti_ensemble *e);

/* Fused log-probabilities of the next token after ids[0..n) (TOKEN
 * alignment), out[n_vocab]; and of the 257 byte outcomes given one byte
 * state per member (BYTE alignment), out[257].  Used by tests. */
int fusion_token_fused(tutti_ensemble *e, const int32_t *ids, int32_t n, float *out);
/* TOKEN alignment: the fused row[n_vocab] of the members' logits rows
 * logits[n_members] under weights w (their temperatures applied); logp:
 * n_members consecutive rows of scratch (logp[i] = logp[0] + i * n_vocab),
 * work: n_vocab doubles.  0 or TUTTI_ERR. */
int ens_fuse_token_row(const tutti_ensemble *e, const float *w, const float *const *logits, float *fused,
                       float *const *logp, double *work);
int fusion_bytes_fused(tutti_ensemble *e, fusion_bytes **st, float *out);

/* Negative log-likelihood (nats) of text[0..len) scored as one piece from
 * BOS: member_nll[n_members] each member alone at token level (its canonical
 * tokenization, tau 1), *ens_nll the ensemble under its rule, alignment,
 * weights and temperatures (eval.c).  Used by choice scoring. */
int fusion_text_nll(tutti_ensemble *e, const char *text, size_t len, double *member_nll, double *ens_nll);

/* Weights that follow the text (adapt.c): prior[n] = w normalised over
 * the members with w > 0; fusion_adapt_start sets the log-weights lw[n] to
 * log prior.  fusion_adapt_update turns the log-weights of the mixture lw[n]
 * (log-sum-exp 0) into those after a unit to which member i gave
 * log-probability logp[i]: fixed share toward prior with alpha, then Bayes,
 * both over the members present (gone[i] false; gone may be NULL; a gone
 * member's weight is left as it was), and returns the mixture's
 * log-probability of that unit, log (Σ w_i p_i / Σ w_i) over the members
 * present after the share (-inf: every member gave 0, no Bayes step).
 * fusion_adapt_share: only the fixed share, toward base (any scale).
 * fusion_lse2: log(e^a + e^b). */
void fusion_adapt_prior(const tutti_ensemble *e, const float *w, double *prior);
void fusion_adapt_start(const tutti_ensemble *e, const double *prior, double *lw);
double fusion_adapt_update(const tutti_ensemble *e, double alpha, const double *prior, double *lw, const double *logp,
                           const bool *gone);
void fusion_adapt_share(const tutti_ensemble *e, double alpha, const double *base, double *lw, const bool *gone);
double fusion_lse2(double a, double b);

/* BYTE alignment: the ensemble's negative log-likelihood (nats) of each
 * continuation cont[c] given prefix, nll[n_cont], with the prefix's byte
 * states built once and cloned (static weights; eval.c). */
int fusion_branches_nll(tutti_ensemble *e, const char *prefix, const char *const *cont, int n_cont, double *nll);

/* The prompt of a generation: raw text that every member tokenizes itself
 * (ids == NULL), or token ids of each member's own vocabulary,
 * ids[i][0..n_ids[i]) (tutti_ensemble_generate_ids). */
typedef struct gen_prompt {
    const char *text;
    size_t len;
    const int32_t *const *ids;
    const int32_t *n_ids;
} gen_prompt;

/* Routing (route.c): begin copies the given weights to w_given[n] and,
 * with route on, replaces the ensemble's weights by those computed from
 * the prompt (a notice names them); end puts the given weights back.
 * Called at the start and the end of every generation. */
int fusion_route_begin(tutti_ensemble *e, const gen_prompt *pr, float *w_given);
void fusion_route_end(tutti_ensemble *e, const float *w_given);

typedef struct gen_ctx gen_ctx;

/* Starts member i's byte state after the prompt (FUSION_ERR_CTX when the
 * prompt needs more tokens than its context holds, also for a member that
 * shifts its context). */
int ens_bytes_start(const tutti_ensemble *e, fusion_bytes *st, const gen_prompt *pr, int32_t i);
/* The first member whose byte state needs a forward pass over more tokens
 * than its context holds (generation stops there), or -1. */
int32_t ens_bytes_ctx_full(const tutti_ensemble *e, fusion_bytes *const *st);
/* Records that member i's full context ended the generation (g->ctx_full)
 * and sends the notice. */
void ens_note_ctx_full(tutti_ensemble *e, gen_ctx *g, int32_t i);
/* Mixture sampling was asked for but is not exact for this generation
 * (why: mix_sample_inexact's phrase): the notice. */
void ens_note_mix_fallback(tutti_ensemble *e, const char *why);
/* Member i leaves a BYTE/SPAN generation: g->dead, the reason, a notice.
 * b: the byte it could not follow (-1: the prompt). */
void ens_note_left(tutti_ensemble *e, gen_ctx *g, fusion_bytes *st, int32_t i, int b);

/* Output and mask state shared by the alignments (gen_output.c). */
struct gen_ctx {
    const tutti_mask *mask;
    tutti_text_cb cb;
    void *user;
    char *text; /* generated bytes (not the prompt) */
    size_t n_text, cap_text;
    size_t n_emitted;                             /* bytes given to cb */
    bool stopped;                                 /* a stop string, cb or max_len ended generation */
    bool dead[TUTTI_ENSEMBLE_MAX_MEMBERS];        /* BYTE/SPAN: members that left the generation */
    int32_t left_why[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* TUTTI_LEFT_* */
    int32_t ctx_full;                             /* member whose full context stopped the generation, -1 */
    int32_t n_units;
    int32_t n_fused; /* units whose members' distributions were fused (selective fusion) */
    int32_t max_units;
    gr_constraint gc; /* mask->grammar following the text (TOKEN: with member 1's vocabulary) */
    /* BYTE/SPAN: tutti_mask.max_tokens, counted by re-tokenizing the text
     * with member 1's tokenizer (count_vocab) from byte next_check on */
    const tutti_vocab *count_vocab;
    int32_t max_tokens;
    bool at_limit; /* stopped by max_tokens (token_limit) */
    size_t next_check;
    int32_t *count_ids; /* scratch for the counts */
    size_t cap_count;
    /* drafting (align_token.c): rounds, drafted and accepted tokens */
    int32_t n_draft_rounds;
    int64_t n_drafted, n_draft_accepted;
    int32_t n_mix_sampled; /* tokens drawn by mixture sampling (mixsample.h) */
};

/* Appends bytes to the generated text, emits what can no longer be part of
 * a stop string, detects stop strings (sets stopped, trims the stop
 * string).  Returns 0 or TUTTI_ERR. */
int gen_append(gen_ctx *g, const char *bytes, size_t n);
/* Gives step unit g->n_units to e's step receiver (tutti_ensemble_set_step_cb),
 * if any: dist[0..n) is the row the sampler draws from (log-probabilities or
 * logits, any offset; -inf = ruled out), renormalised here.  A receiver
 * asking to stop sets g->stopped; member_lp, w: the members' log-probabilities
 * of chosen and the step's weights (NULL: not asked for).  Returns 0 or
 * TUTTI_ERR (out of memory). */
int ens_report_step(tutti_ensemble *e, gen_ctx *g, const float *dist, int32_t n, int32_t chosen, const char *bytes,
                    size_t n_bytes, const double *member_lp, const float *w);
/* Emits everything still held back (at the end of generation). */
void gen_flush(gen_ctx *g);
/* true if the generated text followed by bytes[0..n) is allowed by the
 * mask's allowed/forbidden lists; at_end: the text would end there. */
bool gen_text_ok(const gen_ctx *g, const char *bytes, size_t n, bool at_end);

/* The mask over a token vocabulary (TOKEN alignment): the decisions of
 * gen_text_ok for every token of the trie's vocabulary at once.  init lists
 * the tokens containing each forbidden string (once per generation); apply
 * sets dist[id] = -inf for every token the mask rules out after g's text. */
typedef struct token_mask {
    const fusion_trie *t;
    const tutti_mask *mask;
    int32_t n_forbidden;
    int32_t **contains; /* [n_forbidden] ids whose piece contains the string */
    int32_t *n_contains;
    uint8_t *keep; /* [n_vocab] scratch */
} token_mask;
int token_mask_init(token_mask *tm, const fusion_trie *t, const tutti_mask *mask);
/* Whether a mask rules out any token by itself (allowed or forbidden
 * strings, ignore_eos): the alignments then apply it to every row. */
static inline bool token_mask_needed(const tutti_mask *m) {
    return m && (m->n_allowed > 0 || m->n_forbidden > 0 || m->ignore_eos);
}
void token_mask_apply(const token_mask *tm, const gen_ctx *g, float *dist);
void token_mask_free(token_mask *tm);

#endif
