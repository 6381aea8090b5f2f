/* -hf and the other hub flags of every command with -m (see cli.h). */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

const char *cli_hf_token = NULL;
bool cli_offline = false;

/* the resolved paths: the commands keep pointers to them until exit */
static char *g_paths[4 * CLI_MAX_STRS];
static int g_n_paths;

/* --hf-token, --offline, --quiet for every resolution, also the library's own
 * (ensemble files, merge and serve configurations) */
static void configure(void) {
    static bool done;
    if (done) return;
    done = true;
    tutti_hub_params p = tutti_hub_default_params();
    p.token = cli_hf_token;
    p.offline = cli_offline;
    p.progress = !cli_quiet;
    tutti_hub_configure(&p);
}

/* A malloc'd local path for spec, or NULL with the exit status in *rc. */
static char *resolve(const char *spec, int *rc) {
    if (tutti_hub_spec_check(spec) < 0) {
        *rc = cli_usage_error("%s", tutti_last_error());
        return NULL;
    }
    char *p = tutti_hub_resolve(spec);
    if (!p) *rc = cli_error("%s", tutti_last_error());
    return p;
}

int cli_resolve_model(const char **path) {
    configure();
    if (!*path || !tutti_is_hub_spec(*path)) return CLI_RUN;
    if (g_n_paths == (int)(sizeof g_paths / sizeof g_paths[0])) return cli_usage_error("too many models");
    int rc = CLI_RUN;
    char *p = resolve(*path, &rc);
    if (!p) return rc;
    *path = g_paths[g_n_paths++] = p;
    return CLI_RUN;
}

int cli_resolve_models(cli_strs *paths) {
    configure();
    for (int i = 0; i < paths->n; i++) {
        int rc = cli_resolve_model(&paths->v[i]);
        if (rc != CLI_RUN) return rc;
    }
    return CLI_RUN;
}

int cli_resolve_owned(char **path) {
    configure();
    if (!*path || !tutti_is_hub_spec(*path)) return CLI_RUN;
    int rc = CLI_RUN;
    char *p = resolve(*path, &rc);
    if (!p) return rc;
    free(*path);
    *path = p;
    return CLI_RUN;
}
