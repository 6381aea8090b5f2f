/* Drafting in the generation loop (internal): the draft model's proposals
 * (draft.c) for the token alignment, which verifies them (align_token.c).
 *
 * A round: the draft proposes up to k tokens after the committed sequence,
 * each from its own distribution q_j (greedy: its argmax, q_j one-hot);
 * every member scores the committed sequence's next token and all drafted
 * tokens in one forward pass; the loop then draws each position from the
 * fused row with tutti_sampler_sample_draft against (tok[j], q_j), and the
 * round ends at the first token that differs from the draft (or after the
 * row past the last drafted token).  Drafting stops early at a position
 * where the draft's most likely token has probability below p_min (at
 * temperature 1): a property of q_j's logits, not of the token drawn, so
 * that every drafted token is a draw from q_j as the acceptance rule
 * needs. */
#ifndef TUTTI_FUSION_DRAFT_H
#define TUTTI_FUSION_DRAFT_H

#include "fusion/ensemble_impl.h"
#include "fusion/retok.h"

typedef struct fusion_draft {
    fusion_member *m; /* the ensemble's draft (borrowed); NULL: prompt lookup (p.lookup_n) */
    tutti_draft_params p;
    tutti_sampler *smp; /* the draft's own: the generation's filters and temperature, another seed, no penalty */
    int32_t V;
    int32_t *tok;   /* [p.n_max] this round's drafted tokens */
    float *q;       /* [p.n_max][V] the distribution each was drawn from */
    float *scratch; /* [V] */
    int32_t n;      /* tokens drafted this round */
    /* re-spelling (a draft with another tokenizer): the committed text,
     * the draft's tokens of it and of its proposal, member 1's tokens of
     * both; q is one-hot (a deterministic proposal is exact) */
    bool respell;
    const tutti_vocab *target;
    char *text;
    int32_t cap, *dids, *tids;
    fusion_retok rd, rt; /* the draft's and member 1's tokens of the text, kept between rounds */
    /* byte alignment (fusion_draft_new_bytes): text and dids grow as the
     * text does (cap_text bytes, cap ids); tok, q, tids unused */
    bool bytes;
    int32_t cap_text;
} fusion_draft;

/* NULL + error (out of memory, bad sampler settings); sp: the generation's. */
fusion_draft *fusion_draft_new(tutti_ensemble *e, const tutti_sampler_params *sp);
void fusion_draft_free(fusion_draft *d);
/* Drafts up to k >= 1 tokens after ids[0..n) (member 1's sequence; for
 * prompt lookup all of it is searched), into
 * d->tok and d->q and after the sequence, ids[n..n + d->n) (the caller
 * leaves room for k more); stops after an end-of-generation token.
 * Returns d->n (0: the draft was not confident enough; a plain step) or
 * TUTTI_ERR. */
int32_t fusion_draft_propose(fusion_draft *d, int32_t *ids, int32_t n, int32_t k);

/* Byte alignment (align_byte.c): the draft model (any tokenizer) of e.
 * Each round it tokenizes the text so far, text[0..n) (the prompt and the
 * committed bytes), in its own tokens and continues it greedily by up to
 * k <= n_max tokens while its most likely token has probability >= p_min
 * (an end-of-generation token ends the proposal: it has no bytes); the
 * proposal is the bytes of those tokens, *out[0..return) (valid until the
 * next call), deterministic given the text, so its q is one-hot.  Returns
 * the bytes drafted (0: none: not confident, fewer than n_min tokens, the
 * text longer than the draft's context) or TUTTI_ERR. */
fusion_draft *fusion_draft_new_bytes(tutti_ensemble *e);
int32_t fusion_draft_propose_bytes(fusion_draft *d, const char *text, size_t n, int32_t k, const char **out);

#endif
