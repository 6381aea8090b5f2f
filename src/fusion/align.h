/* The step interface of the alignments (TOKEN align_token.c, BYTE
 * align_byte.c, SPAN align_span.c) under the one generation loop (gen.c).
 *
 * A generation is: start after the prompt, then per step: stop if a
 * member's context cannot hold the next step (ctx_full) or the grammar lets
 * nothing follow; step() runs the members' forward passes and fuses them
 * into one row over this step's outcomes (member 1's tokens, the 257 byte
 * outcomes, or the span drafts); the loop applies the mask (the
 * alignment's own, on a writable copy) and the grammar, reports the step
 * (ens_report_step), draws the outcome (the sampler, or choose()), and
 * commits it: every member follows the outcome (members that cannot
 * leave), weights that follow the text update (adapt), and the loop
 * appends its bytes (stop strings, -n, max_len). */
#ifndef TUTTI_FUSION_ALIGN_H
#define TUTTI_FUSION_ALIGN_H

#include "fusion/ctxweights.h"

/* step / commit: a clean end of the generation (not an error) */
#define ALIGN_STOP 1

typedef enum align_outcomes {
    ALIGN_OUT_TOKENS, /* row[n_vocab] over member 1's token ids: grammar token masks */
    ALIGN_OUT_BYTES,  /* row[257]: grammar byte masks */
    ALIGN_OUT_SPANS,  /* row over drafts that already follow mask and grammar */
} align_outcomes;

typedef struct fusion_align fusion_align;

typedef struct align_ops {
    align_outcomes kind;
    const char *unit; /* "token", "byte": in "the mask rules out every ..." */
    bool report;      /* steps go to ens_report_step */
    /* Starts every member after the prompt; gives the prompt's units to
     * smp (the repetition penalty; smp is NULL with choose).  0 / TUTTI_ERR. */
    int (*start)(fusion_align *a, const gen_prompt *pr, tutti_sampler *smp);
    /* true when a member cannot evaluate the next step within its context
     * (the notice sent, ens_note_ctx_full): a clean stop. */
    bool (*ctx_full)(fusion_align *a);
    /* Forward passes and fusion: *row[*n] is the fused row (log-probabilities
     * or logits, any offset, -inf = impossible), valid until the next call;
     * it is a->work when the alignment's mask applies (a->masked).  0,
     * ALIGN_STOP or TUTTI_ERR. */
    int (*step)(fusion_align *a, const float **row, int32_t *n);
    /* Optional (with a->masked): rules out the outcomes the mask forbids
     * after the text so far, in a->work. */
    void (*mask)(fusion_align *a, float *row);
    /* Optional (drafting): the drafted outcome this step verifies, and in
     * *q the distribution it was drawn from (row[n]), or -1 when the step
     * has none; the loop then draws with tutti_sampler_sample_draft. */
    int32_t (*drafted)(fusion_align *a, const float **q);
    /* Optional: the alignment picks the outcome (instead of a sampler). */
    int32_t (*choose)(fusion_align *a, const float *row, int32_t n);
    /* The bytes outcome x writes (*bytes valid until the next call); *end:
     * x ends the generation here, not committed. */
    size_t (*bytes)(fusion_align *a, int32_t x, const char **bytes, bool *end);
    /* Every member follows outcome x; *units: what x counts for max_units;
     * each member's log-probability of x in a->unit_logp when the weigher
     * needs it (fusion_weigher_needs_logp; BYTE and SPAN always).
     * 0, ALIGN_STOP (x is the last: its bytes are appended, then the
     * generation ends) or TUTTI_ERR. */
    int (*commit)(fusion_align *a, int32_t x, int32_t *units);
    /* Optional: each member's log-probability of outcome x of this step
     * into out[0..n_members) (the step receiver's member_logprobs). */
    void (*member_lp)(fusion_align *a, int32_t x, double *out);
    void (*free)(fusion_align *a);
} align_ops;

struct fusion_align {
    const align_ops *ops;
    tutti_ensemble *e;
    gen_ctx *g;
    double t_phase; /* wall time of the members' forward phases */
    bool masked;    /* ops->mask applies each step */
    float *work;    /* writable row of the widest step (the loop's mask and grammar) */
    /* weights of this step: e->w at the start, 0 for members that left;
     * with context weights, adapt or selective fusion the weigher's
     * (align_unit_weights, each step); after every commit the loop gives
     * it each member's log-probability of the committed unit, which commit
     * leaves in unit_logp (gone: the members that left, or NULL; unit_bytes:
     * the unit's length, SPAN) */
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];
    fusion_weigher wg;
    int32_t lead; /* this step: the member that speaks alone (selective fusion), or -1 */
    double unit_logp[TUTTI_ENSEMBLE_MAX_MEMBERS];
    const bool *gone;
    double unit_bytes;
    /* mixture sampling (mixsample.h): this step's row is member mix_member's
     * own distribution, which the sampler draws from (-1: the fused row);
     * report_row is then the fused row for the step receiver (set only when
     * there is one); weigher_off: the weights are not followed (no step
     * reports: the writer chain replaces them), so the loop gives the
     * weigher nothing to observe */
    int32_t mix_member;
    const float *report_row;
    bool weigher_off;
};

/* This step's weights into a->w from the members' rows logp[i][0..n)
 * (log-probabilities; may be NULL unless fusion_weigher_needs_rows; gone:
 * members without a row, or NULL): the weigher's when it varies or selects,
 * else a->w as it is; members that left get 0.  Returns a->lead (-1: fuse)
 * or TUTTI_ERR (< -1). */
int32_t align_unit_weights(fusion_align *a, const float *const *logp, int32_t n, const bool *gone);

/* Each returns a started-to-be alignment (not yet started) or NULL + error. */
fusion_align *align_token_new(tutti_ensemble *e, gen_ctx *g, const tutti_sampler_params *sp);
fusion_align *align_byte_new(tutti_ensemble *e, gen_ctx *g);
fusion_align *align_span_new(tutti_ensemble *e, gen_ctx *g, const tutti_sampler_params *sp);

#endif
