/* Tokens of a growing text without tokenizing all of it again (internal).
 *
 * A draft with another tokenizer needs, every round, the draft's tokens of
 * the committed text and member 1's tokens of the text with the drafted
 * continuation; tokenizing the whole text each round is quadratic in its
 * length.  fusion_retok keeps the last text's tokens with the byte where
 * each ends, and for a new text re-tokenizes only from a word start some
 * bytes before the first changed byte, keeping the tokens before it.
 *
 * The splice is checked, not assumed: the tail's pieces must spell the
 * tail's bytes, and its tokens must equal the kept tokenization's over the
 * unchanged bytes past the cut; otherwise the whole text is tokenized.
 * The result can still differ from the whole text's tokenization where a
 * tokenizer merges across a word start; drafting stays exact whatever is
 * proposed (a deterministic proposal with one-hot q), so that costs at most
 * acceptance, never correctness. */
#ifndef TUTTI_FUSION_RETOK_H
#define TUTTI_FUSION_RETOK_H

#include <stdbool.h>
#include <stdint.h>

#include "tutti.h"

typedef struct fusion_retok {
    char *text; /* [len] the text last tokenized (owned) */
    int32_t len, cap_text;
    int32_t *ids; /* [n] its tokens (owned) */
    int32_t *end; /* [n] the byte of text where token i ends (0 for BOS) */
    int32_t n, cap;
    int64_t n_full, n_tail; /* tokenizations of a whole text / of a tail only */
} fusion_retok;

/* Tokenizes text[0..len) (add_bos as tutti_tokenize; plain text, control
 * tokens never parsed) into r->ids[0..r->n).  The vocabulary and add_bos
 * must be the same on every call with one r.  Returns r->n, 0 where the
 * text does not tokenize, or TUTTI_ERR (out of memory). */
int32_t fusion_retok_update(fusion_retok *r, const tutti_vocab *v, bool add_bos, const char *text, int32_t len);
void fusion_retok_free(fusion_retok *r);

#endif
