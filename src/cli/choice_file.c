/* Multiple-choice items from a JSON-lines file (tutti eval --choices, tutti
 * merge --search --choices): one object a line, {"context": string,
 * "choices": [2..TUTTI_MAX_CHOICES strings], "label": integer}; blank lines
 * skipped; every malformed line is an error naming it. */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

void cli_choice_file_free(cli_choice_file *c) {
    for (int i = 0; i < c->n; i++) cJSON_Delete(c->lines[i]);
    free(c->lines), free(c->items), free(c->choices);
}

int cli_choice_file_read(const char *path, cli_choice_file *c) {
    memset(c, 0, sizeof *c);
    size_t len;
    char *txt = cli_read_file(path, &len);
    if (!txt) return 1;
    int cap = 1;
    for (size_t i = 0; i < len; i++) cap += txt[i] == '\n';
    c->lines = calloc((size_t)cap, sizeof *c->lines);
    c->items = calloc((size_t)cap, sizeof *c->items);
    c->choices = calloc((size_t)cap * TUTTI_MAX_CHOICES, sizeof *c->choices);
    int rc = 0, lineno = 0;
    if (!c->lines || !c->items || !c->choices) rc = cli_error("out of memory reading %s", path);
    for (char *p = txt, *nl; rc == 0 && p < txt + len; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(txt + len - p));
        if (!nl) nl = txt + len;
        *nl = 0;
        lineno++;
        const char *q = p;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (!*q) continue;
        const char *err = NULL;
        cJSON *j = cJSON_ParseWithOpts(p, &err, 0);
        if (!j) {
            rc = cli_error("%s: line %d: not JSON (at byte %ld)", path, lineno, err ? (long)(err - p) + 1 : 0L);
            break;
        }
        c->lines[c->n] = j;
        tutti_choice_item *it = &c->items[c->n++];
        cJSON *ctx = cJSON_GetObjectItemCaseSensitive(j, "context");
        cJSON *chs = cJSON_GetObjectItemCaseSensitive(j, "choices");
        cJSON *lab = cJSON_GetObjectItemCaseSensitive(j, "label");
        if (!cJSON_IsString(ctx) || !cJSON_IsArray(chs) || !cJSON_IsNumber(lab) || lab->valuedouble != lab->valueint) {
            rc = cli_error("%s: line %d: needs {\"context\": string, \"choices\": [strings], \"label\": integer}", path,
                           lineno);
            break;
        }
        it->context = ctx->valuestring;
        it->label = lab->valueint;
        it->choices = c->choices + (size_t)(c->n - 1) * TUTTI_MAX_CHOICES;
        cJSON *x;
        cJSON_ArrayForEach(x, chs) {
            if (!cJSON_IsString(x) || it->n_choices == TUTTI_MAX_CHOICES) {
                rc = cli_error("%s: line %d: choices must be 2 to %d strings", path, lineno, TUTTI_MAX_CHOICES);
                break;
            }
            ((const char **)it->choices)[it->n_choices++] = x->valuestring;
        }
    }
    free(txt);
    if (rc == 0 && c->n == 0) rc = cli_error("%s: no items", path);
    return rc;
}
