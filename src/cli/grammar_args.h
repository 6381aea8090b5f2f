/* Grammar flags shared by `tutti generate` and `tutti run`:
 *   --grammar TEXT | --grammar-file FILE | --json-schema FILE|TEXT | --json */
#ifndef TUTTI_CLI_GRAMMAR_ARGS_H
#define TUTTI_CLI_GRAMMAR_ARGS_H

#include "tutti.h"

typedef struct cli_grammar {
    const char *flag;  /* the grammar flag given (NULL: none) */
    const char *value; /* its value (NULL for --json) */
} cli_grammar;

/* Consumes argv[*i] (and its value) if it is a grammar flag: 1; 0 if not
 * one; -1 on misuse (a second grammar flag, a missing value; message
 * printed: exit 2). */
int cli_grammar_take(cli_grammar *a, const char *cmd, int argc, char **argv, int *i);
/* The grammar (NULL with *failed false when no flag was given); on a bad
 * grammar, schema or file prints the reason and sets *failed (exit 1). */
tutti_grammar *cli_grammar_build(const cli_grammar *a, const char *cmd, bool *failed);
const char *cli_grammar_help(void);

#endif
