/* Grammar flags shared by `tutti generate` and `tutti run` (and later
 * commands): --grammar TEXT | --grammar-file FILE | --json-schema FILE|TEXT |
 * --json [--json-schema-lenient], one table group for the shared parser (opts.h). */
#ifndef TUTTI_CLI_GRAMMAR_ARGS_H
#define TUTTI_CLI_GRAMMAR_ARGS_H

#include <stdbool.h>

#include "cli/opts.h"
#include "tutti.h"

typedef struct cli_grammar {
    const char *grammar, *grammar_file, *json_schema;
    bool json;
    bool json_schema_lenient; /* drop keywords that cannot be enforced, with a warning */
} cli_grammar;

#define CLI_GRAMMAR_OPTS(g)                                                                                        \
    CLI_SECTION("constrained output (one of)"),                                                                    \
        CLI_STR("--grammar", "TEXT", &(g)->grammar, "constrain the output to a GBNF grammar (llama.cpp's format)", \
                "none"),                                                                                           \
        CLI_STR("--grammar-file", "FILE", &(g)->grammar_file, "the same, read from a file", "none"),               \
        CLI_STR("--json-schema", "SCHEMA", &(g)->json_schema,                                                      \
                "constrain the output to JSON valid against a JSON schema\n"                                       \
                "(the schema's text if it starts with '{', else a file)",                                          \
                "none"),                                                                                           \
        CLI_FLAG("--json", &(g)->json, "constrain the output to any JSON value"),                                  \
        CLI_FLAG("--json-schema-lenient", &(g)->json_schema_lenient,                                               \
                 "drop the schema keywords that cannot be enforced exactly (each named in a warning)\n"            \
                 "instead of refusing the schema")

/* The grammar the flags ask for: NULL with *status 0 when none was given;
 * NULL with *status 2 (two grammar flags: usage) or 1 (a bad grammar,
 * schema or file; message printed). */
tutti_grammar *cli_grammar_build(const cli_grammar *g, int *status);

#endif
