/* Grammar flags (see grammar_args.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/grammar_args.h"

const char *cli_grammar_help(void) {
    return "      --grammar TEXT    constrain the output to a GBNF grammar (llama.cpp's format)\n"
           "      --grammar-file F  the same, read from a file\n"
           "      --json-schema S   constrain the output to JSON valid against a JSON schema\n"
           "                        (S is the schema's text if it starts with '{', else a file)\n"
           "      --json            constrain the output to any JSON value\n";
}

int cli_grammar_take(cli_grammar *a, const char *cmd, int argc, char **argv, int *i) {
    const char *o = argv[*i];
    bool has_value = !strcmp(o, "--grammar") || !strcmp(o, "--grammar-file") || !strcmp(o, "--json-schema");
    if (!has_value && strcmp(o, "--json")) return 0;
    if (a->flag) {
        fprintf(stderr, "tutti %s: %s and %s: give one grammar\n", cmd, a->flag, o);
        return -1;
    }
    a->flag = o;
    if (has_value) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "tutti %s: %s needs a value\n", cmd, o);
            return -1;
        }
        a->value = argv[++*i];
    }
    return 1;
}

tutti_grammar *cli_grammar_build(const cli_grammar *a, const char *cmd, bool *failed) {
    *failed = false;
    if (!a->flag) return NULL;
    tutti_grammar *g = NULL;
    char *file = NULL;
    size_t len = 0;
    const char *text = a->value;
    if (!strcmp(a->flag, "--json")) {
        g = tutti_grammar_json();
    } else {
        bool from_file = !strcmp(a->flag, "--grammar-file");
        if (!strcmp(a->flag, "--json-schema")) {
            const char *p = text;
            while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
            from_file = *p != '{' && strcmp(p, "true") != 0;
        }
        if (from_file) {
            if (!(file = cli_read_file(text, &len))) {
                *failed = true;
                return NULL;
            }
            text = file;
        } else {
            len = strlen(text);
        }
        g = !strcmp(a->flag, "--json-schema") ? tutti_grammar_from_json_schema(text, len)
                                              : tutti_grammar_parse(text, len);
    }
    if (!g) {
        fprintf(stderr, "tutti %s: %s%s%s: %s\n", cmd, a->flag, file ? " " : "", file ? a->value : "",
                tutti_last_error());
        *failed = true;
    }
    free(file);
    return g;
}
