/* JSON schema `pattern` regular expressions as automata (regex.c).
 *
 * The dialect is what ECMA-262 (the JSON Schema specification's) and
 * Python's re (python-jsonschema, the validator the tests use) agree on:
 * literals and escapes (\n \t \r \f \v \0 \xhh \uhhhh, escaped
 * punctuation), . [] [^] ranges, \d \D \w \W \s \S, groups ( ) (?: )
 * (?<name> ) (?P<name> ), alternation, * + ? {m} {m,} {m,n} {,n} and their
 * lazy forms, ^ and $ at the start and end of the pattern or of a top-level
 * alternative, and (?= ) (?! ) lookaheads in the top-level sequence.
 * Matching is re.search's: an unanchored pattern matches anywhere.
 *
 * Where the two engines differ (\d, \w and \s are Unicode-aware in Python,
 * ASCII or another set in ECMA; . and $ treat line ends differently), the
 * automaton is made safe for its use: RX_SUBSET gives only strings both
 * accept (a grammar built from it never accepts a string a validator
 * rejects), RX_SUPERSET every string either accepts (its complement, for
 * `not`, is then a subset of the strings both reject).  Everything else
 * (backreferences, lookbehind, \b, flags, possessive quantifiers, Unicode
 * property escapes) is refused: NULL with "pattern, offset N: reason". */
#ifndef TUTTI_GRAMMAR_REGEX_H
#define TUTTI_GRAMMAR_REGEX_H

#include "grammar/fsa.h"

enum { RX_SUBSET = 0, RX_SUPERSET = 1 };

/* pat[0..n) (UTF-8). */
fsa *rx_compile(const char *pat, size_t n, int polarity);

#endif
