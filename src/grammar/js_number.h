/* JSON number texts as automata (js_number.c), for minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum, const and enum numbers and integer
 * multipleOf, exactly as python-jsonschema judges them: an integer
 * literal is a Python int and compared exactly; any other number text is
 * parsed as a double (correctly rounded, so "1.00000000000000001" is 1.0
 * and "1e-400" is 0.0) and then compared exactly with the bound (a Python
 * int when the schema writes an integer, else a double).
 *
 * Accepted spellings: the integer literals -?(0|[1-9][0-9]*) of any
 * length, and for type number also decimals -?(0|[1-9][0-9]*)\.[0-9]{1,24}
 * and normalised exponent forms -?[1-9](\.[0-9]{1,16})?[eE][+-]?[0-9]+
 * (every number Python's json.dumps writes).  Other spellings of a valid
 * value (more than 24 decimals, 12e3, 0.5e1) are rejected: never an
 * invalid value accepted, only rare spellings of valid ones refused. */
#ifndef TUTTI_GRAMMAR_JS_NUMBER_H
#define TUTTI_GRAMMAR_JS_NUMBER_H

#include <stdbool.h>

#include "grammar/fsa.h"

/* One side of a range: the bound's JSON literal text (NULL: none). */
typedef struct num_bound {
    const char *text;
    bool strict;
} num_bound;

/* Every JSON number (integer: every integer literal), any spelling. */
fsa *num_any(bool integer);
/* The number texts whose value lies within lo and hi; NULL + error for a
 * bound that is not a finite double. */
fsa *num_range(bool integer, num_bound lo, num_bound hi);
/* Integer literals that are multiples of k (1 <= k <= 10000 states' worth:
 * larger k is refused with an error). */
fsa *num_multiple_of(const char *k_text);
/* true when text is a JSON integer literal. */
bool num_is_int_literal(const char *text);

#endif
