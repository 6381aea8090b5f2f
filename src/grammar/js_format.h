/* JSON schema `format` values as automata (js_format.c). */
#ifndef TUTTI_GRAMMAR_JS_FORMAT_H
#define TUTTI_GRAMMAR_JS_FORMAT_H

#include "grammar/fsa.h"

/* 1 with *out the strings format `name` admits; 0 for a name that is only
 * an annotation (*out NULL: every string); -2 for a format a validator
 * checks that is not supported; TUTTI_ERR when building fails. */
int js_format(const char *name, fsa **out);

#endif
