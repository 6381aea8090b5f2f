/* The grammar side of one constrained generation, for the generation loops
 * (fusion alignments, single-model generation): a matcher following the
 * generated text and, for token-level masks, the vocabulary's trie.  Each
 * call is one line at the place where a mask is applied. */
#ifndef TUTTI_GRAMMAR_CONSTRAIN_H
#define TUTTI_GRAMMAR_CONSTRAIN_H

#include <stdbool.h>
#include <stddef.h>

#include "tutti.h"

typedef struct gr_constraint {
    tutti_grammar_matcher *m; /* NULL: no grammar (every call is a no-op) */
    tutti_grammar_vocab *v;   /* token masks (the vocabulary's, borrowed); NULL for byte-level use */
} gr_constraint;

/* The vocabulary's grammar trie and class tables, built on first use
 * (~60-180 ms for 151k tokens) and kept with the vocabulary, so every
 * later generation over it (ensemble members, server requests) shares
 * them.  Borrowed: lives as long as vocab.  NULL + error when out of
 * memory. */
tutti_grammar_vocab *gr_vocab_shared(const tutti_vocab *vocab);
/* g NULL: off.  vocab non-NULL: token masks over it (the shared trie, and
 * g's class tables built here, before the first forward pass).  0 or
 * TUTTI_ERR. */
int gr_constraint_init(gr_constraint *c, const tutti_grammar *g, const tutti_vocab *vocab);
void gr_constraint_free(gr_constraint *c);
/* true when generation must end: the text is complete and nothing may
 * follow. */
bool gr_constraint_done(gr_constraint *c);
/* dist[n_vocab]: rejected tokens -> -inf.  Returns the allowed count, or
 * TUTTI_ERR (with a message) when none is allowed. */
int gr_constraint_mask_tokens(gr_constraint *c, float *dist);
/* dist[257] (256 bytes + end): rejected outcomes -> -inf.  0 or TUTTI_ERR. */
int gr_constraint_mask_bytes(gr_constraint *c, float *dist);
/* The generated text grew by bytes[0..n). */
int gr_constraint_accept(gr_constraint *c, const char *bytes, size_t n);

#endif
