/* See constrain.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/constrain.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

/* The grammar layer's tables of a vocabulary are its own: made here, kept
 * in the vocabulary's attachment slot, freed by tutti_grammar_vocab_free
 * when the vocabulary goes (the tokenizer knows nothing of grammars). */
static void *make_tables(const tutti_vocab *vocab) { return tutti_grammar_vocab_new(vocab); }
static void free_tables(void *gv) { tutti_grammar_vocab_free(gv); }

tutti_grammar_vocab *gr_vocab_shared(const tutti_vocab *vocab) {
    return tok_vocab_attachment(vocab, make_tables, free_tables);
}

int gr_constraint_init(gr_constraint *c, const tutti_grammar *g, const tutti_vocab *vocab) {
    memset(c, 0, sizeof *c);
    if (!g) return 0;
    if (!(c->m = tutti_grammar_matcher_new(g))) return TUTTI_ERR;
    if (vocab && (!(c->v = gr_vocab_shared(vocab)) || tutti_grammar_vocab_prepare(c->v, g) < 0)) {
        gr_constraint_free(c);
        return TUTTI_ERR;
    }
    return 0;
}

void gr_constraint_free(gr_constraint *c) {
    tutti_grammar_matcher_free(c->m); /* c->v belongs to the vocabulary */
    memset(c, 0, sizeof *c);
}

bool gr_constraint_done(gr_constraint *c) {
    return c->m && tutti_grammar_matcher_is_complete(c->m) && !tutti_grammar_matcher_can_continue(c->m);
}

int gr_constraint_mask_tokens(gr_constraint *c, float *dist) {
    if (!c->m) return 1;
    int32_t n = tutti_grammar_matcher_mask(c->m, c->v, dist);
    if (n < 0) return TUTTI_ERR;
    if (n == 0)
        return tutti_set_error("grammar: no token of the vocabulary can continue the text here (the grammar "
                               "needs characters the tokenizer cannot write)");
    return n;
}

int gr_constraint_mask_bytes(gr_constraint *c, float *dist) {
    if (!c->m) return 0;
    bool al[257];
    if (tutti_grammar_matcher_allowed_bytes(c->m, al) < 0) return TUTTI_ERR;
    for (int b = 0; b < 257; b++)
        if (!al[b]) dist[b] = -INFINITY;
    return 0;
}

int gr_constraint_accept(gr_constraint *c, const char *bytes, size_t n) {
    if (!c->m) return 0;
    if (tutti_grammar_matcher_accept(c->m, bytes, n) < 0) {
        tutti_error_prefix("generation");
        return TUTTI_ERR;
    }
    return 0;
}
