/* Mixture sampling (internal): a sampled step of the mix rule that runs
 * one member's forward pass instead of every member's (mixsample.c; the
 * token alignment takes it, align_token.c; tutti_ensemble_set_mix_sample).
 *
 * Why it is exact.  The mix rule's fused distribution is the mixture
 *   p(x) = Σ_i w_i p_i(x)            (w normalised over the members with w > 0,
 *                                     p_i = softmax(z_i / tau_i), each member at
 *                                     its own temperature tau_i)
 * and a draw from a mixture is a draw of a component i with probability
 * w_i, then a draw from p_i.  Only member i's row is needed for that step.
 *
 * Whole texts, not only one step.  With fixed weights the component is
 * drawn afresh at every token.  With --adapt (adapt.c, ctxweights.c) the
 * step's weights are w(t) = (1 - alpha) post(t-1) + alpha prior, post
 * Bayes' rule after the text so far, so they depend on every member's
 * probability of every earlier token.  But that sequence of predictive
 * distributions is exactly the one of a hidden Markov model ("fixed
 * share"): a member z(1) ~ prior writes the first token; before each next
 * token the writer stays with probability 1 - alpha, or with probability
 * alpha a fresh writer is drawn from the prior (possibly the same one);
 * x(t) ~ p_z(t)(. | x(<t)).  The forward algorithm of that model gives
 * P(z(t) = i | x(<t)) = w_i(t) above, so sampling the text token by token
 * from the adapted mixture and sampling it from the model (the writer
 * chain first, independent of the text, the tokens from the writers) give
 * texts with the same distribution.  So with adapt no member has to
 * catch up per step either: alpha 0 picks one member for the whole text,
 * alpha 1 is the fixed-weight case.  Only the weights that a step report
 * shows need every member's probabilities.
 *
 * When it is exact: the distribution the sampler draws from must be the
 * mixture itself, so mixture sampling is taken only when
 *   - the rule is mix, in token alignment, without drafting (drafting
 *     verifies with every member already), without context weights (the
 *     weights depend on every member's row of this step) and without
 *     selective fusion (whether to fuse depends on every row);
 *   - the sampler's temperature is exactly 1: a temperature T on the
 *     mixture gives p^(1/T), which is not a mixture of the members (the
 *     members' own temperatures tau_i are part of p_i and are fine);
 *   - top-k, top-p and min-p are off and the repetition penalty is off
 *     (1, or repeat_last_n 0): they act on the fused distribution;
 *   - no logit bias, no allowed/forbidden strings, no ignore_eos, no
 *     grammar: they act on the fused row before the draw;
 *   - every member is local (a remote member may leave mid-generation,
 *     which the ordinary step notices at once for every member).
 * Stop strings, -n and the context limits act on the drawn text and do not
 * matter.  Elsewhere the ordinary step (every member every token) is
 * taken, with a notice saying why.
 *
 * Catching up.  A member that was not drawn for some steps runs the tokens
 * it missed in the pass of the next step it is drawn for: one forward pass
 * over the missed tokens (its KV cache extended as a prompt is), so the
 * cost of a step is one member's pass over about 1 / w_i tokens.  With a
 * step receiver (logprobs, step reports) every member runs every step to
 * report the fused row and the members' log-probabilities (no gain), and
 * the draw is still the mixture sampling's, so a receiver does not change
 * the text.
 *
 * Random numbers: the choice of the member (with adapt: whether the writer
 * switches, then which) and the token's draw from its row all come from
 * the generation's sampler.  A seed gives a reproducible text, but another
 * one than the ordinary step gives for that seed (which draws once from
 * the fused row); the distribution of texts is the same. */
#ifndef TUTTI_FUSION_MIXSAMPLE_H
#define TUTTI_FUSION_MIXSAMPLE_H

#include "fusion/ensemble_impl.h"

/* The writer chain of one generation. */
typedef struct mix_chain {
    int32_t n;                               /* members */
    float prior[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* the weights normalised over w > 0 (0 elsewhere) */
    float stay[2];                           /* {1 - alpha, alpha}: drawn index 1 = a fresh writer */
    bool fresh_each;                         /* alpha 1 (fixed weights): a fresh writer every token */
    int32_t z;                               /* this token's writer, -1 before the first */
} mix_chain;

/* Why mixture sampling would not be exact for a generation with sampler
 * params sp, mask (may be NULL), a grammar (has_grammar) and a draft
 * (drafting) on ensemble e: a phrase for the notice, or NULL when it is
 * exact (it is then taken if e->mix_sample is on). */
const char *mix_sample_inexact(const tutti_ensemble *e, const tutti_sampler_params *sp, const tutti_mask *mask,
                               bool has_grammar, bool drafting);
/* Starts the chain over weights w[e->n] (the generation's, routed or
 * given), with e's adapt alpha (fixed weights: alpha 1).  TUTTI_ERR when
 * no weight is positive. */
int mix_chain_start(mix_chain *c, const tutti_ensemble *e, const float *w);
/* The writer of the next token, drawn with smp's random generator; -1 +
 * error (tutti_sampler_draw's). */
int32_t mix_chain_next(mix_chain *c, tutti_sampler *smp);

#endif
