/* Grammar flags (see grammar_args.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/grammar_args.h"

tutti_grammar *cli_grammar_build(const cli_grammar *g, int *status) {
    *status = 0;
    int n = (g->grammar != NULL) + (g->grammar_file != NULL) + (g->json_schema != NULL) + g->json;
    if (n == 0) return NULL;
    if (n > 1) {
        *status = cli_usage_error("--grammar, --grammar-file, --json-schema and --json: give one grammar");
        return NULL;
    }
    const char *flag = g->json           ? "--json"
                       : g->grammar      ? "--grammar"
                       : g->grammar_file ? "--grammar-file"
                                         : "--json-schema";
    const char *text = g->grammar ? g->grammar : g->grammar_file ? g->grammar_file : g->json_schema;
    tutti_grammar *gr = NULL;
    char *file = NULL;
    size_t len = 0;
    if (g->json) {
        gr = tutti_grammar_json();
    } else {
        bool from_file = g->grammar_file != NULL;
        if (g->json_schema) {
            const char *p = text;
            while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
            from_file = *p != '{' && strcmp(p, "true") != 0;
        }
        if (from_file) {
            if (!(file = cli_read_file(text, &len))) {
                *status = 1;
                return NULL;
            }
            text = file;
        } else {
            len = strlen(text);
        }
        if (g->json_schema) {
            tutti_json_schema_params jp = tutti_json_schema_default_params();
            jp.lenient = g->json_schema_lenient;
            gr = tutti_grammar_from_json_schema_params(text, len, &jp);
            for (const char *w = jp.warnings; gr && w && *w;) { /* one warning a line */
                const char *e = strchr(w, '\n');
                int n = e ? (int)(e - w) : (int)strlen(w);
                fprintf(stderr, "tutti: warning: --json-schema: %.*s\n", n, w);
                w += n + (e != NULL);
            }
            free(jp.warnings);
        } else {
            gr = tutti_grammar_parse(text, len);
        }
    }
    if (!gr) { /* a grammar or schema given inline is a flag value: exit 2; a file's content: 1 */
        *status = (file ? cli_error : cli_usage_error)("%s%s%s: %s", flag, file ? " " : "",
                                                       file ? (g->grammar_file ? g->grammar_file : g->json_schema) : "",
                                                       tutti_last_error());
    }
    free(file);
    return gr;
}
