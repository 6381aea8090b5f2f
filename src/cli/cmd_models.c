/* `tutti models`: the model cache of -hf (docs/models-by-name.md).
 *
 *   tutti models [--json]                 every cached file: repository, file, tag, size, last use
 *   tutti models rm REPO[:QUANT]|FILE ... removes entries (and blobs nothing uses any more) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

static void when(int64_t t, char *buf, size_t cap, bool iso) {
    time_t tt = (time_t)t;
    struct tm tm;
    if (t <= 0 || !(iso ? gmtime_r(&tt, &tm) : localtime_r(&tt, &tm))) {
        snprintf(buf, cap, "-");
        return;
    }
    strftime(buf, cap, iso ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%d %H:%M", &tm);
}

static void size_text(int64_t n, char *buf, size_t cap) {
    double b = (double)n;
    if (b < 1 << 20) snprintf(buf, cap, "%.0f KiB", b / 1024);
    else if (b < 1024.0 * (1 << 20)) snprintf(buf, cap, "%.1f MiB", b / (1 << 20));
    else snprintf(buf, cap, "%.2f GiB", b / (1024.0 * (1 << 20)));
}

static int list_json(const tutti_hub_entry *v, int32_t n, const char *root) {
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "models");
    cJSON_AddStringToObject(o, "cache", root);
    for (int32_t i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        char t[64];
        when(v[i].last_use, t, sizeof t, true);
        cJSON_AddStringToObject(e, "repo", v[i].repo);
        cJSON_AddStringToObject(e, "file", v[i].file);
        cJSON_AddStringToObject(e, "quant", v[i].tag);
        cJSON_AddNumberToObject(e, "size", (double)v[i].size);
        cJSON_AddStringToObject(e, "last_use", t);
        cJSON_AddStringToObject(e, "commit", v[i].commit);
        cJSON_AddBoolToObject(e, "current", v[i].current);
        cJSON_AddStringToObject(e, "path", v[i].path);
        cJSON_AddItemToArray(a, e);
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) return cli_error("out of memory");
    printf("%s\n", s);
    free(s);
    return 0;
}

static int list(bool json) {
    char root[4096];
    tutti_hub_entry *v;
    int32_t n;
    if (tutti_hub_cache_dir(root, sizeof root) < 0 || tutti_hub_list(&v, &n) < 0)
        return cli_error("%s", tutti_last_error());
    int rc = 0;
    if (json) {
        rc = list_json(v, n, root);
    } else {
        int64_t total = 0;
        if (n) printf("%-40s %-44s %-8s %10s  %s\n", "REPO", "FILE", "QUANT", "SIZE", "LAST USE");
        for (int32_t i = 0; i < n; i++) {
            char sz[32], t[32];
            size_text(v[i].size, sz, sizeof sz);
            when(v[i].last_use, t, sizeof t, false);
            printf("%-40s %-44s %-8s %10s  %s%s\n", v[i].repo, v[i].file, v[i].tag[0] ? v[i].tag : "-", sz, t,
                   v[i].current ? "" : "  (older snapshot)");
            total += v[i].size;
        }
        char sz[32];
        size_text(total, sz, sizeof sz);
        cli_info("cache: %s (%d file%s, %s)\n", root, (int)n, n == 1 ? "" : "s", sz);
    }
    free(v);
    return rc;
}

static int remove_entries(int argc, char **argv) {
    int n_names = 0, rc = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--quiet")) {
            cli_quiet = true;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("models rm: unknown option '%s' (tutti models rm REPO[:QUANT]|FILE ...)", argv[i]);
        } else {
            n_names++;
        }
    }
    if (n_names == 0)
        return cli_usage_error("models rm: name what to remove: REPO, REPO:QUANT or FILE (tutti models lists them)");
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        int32_t k = 0;
        if (tutti_hub_remove(argv[i], &k) < 0) rc = cli_error("%s", tutti_last_error());
        else cli_info("removed %s (%d file%s)\n", argv[i], (int)k, k == 1 ? "" : "s");
    }
    return rc;
}

int cmd_models(int argc, char **argv) {
    bool json = false;
    if (argc > 0 && !strcmp(argv[0], "rm")) {
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) argc = 0;
        if (argc) return remove_entries(argc - 1, argv + 1);
        argv[0] = (char *)"--help";
        argc = 1;
    }
    cli_opt opts[] = {
        CLI_FLAG("--json", &json,
                 "the list as JSON (cJSON): {\"cache\", \"models\": [{repo, file, quant, size,\n"
                 "last_use, commit, current, path}]}"),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "models",
        .usage = "[--json]  |  tutti models rm REPO[:QUANT]|FILE ...",
        .description = "Lists the models -hf downloaded (the Hugging Face hub cache: $LLAMA_CACHE, else\n"
                       "$HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub): repository, file, quant tag,\n"
                       "size and last use. `tutti models rm` removes a repository (REPO), its files of one\n"
                       "tag (REPO:QUANT) or a file (FILE: as listed, or REPO/FILE; a split model's part\n"
                       "removes all its parts), and the file contents nothing else uses.",
        .opts = opts,
    };
    int r = cli_parse(&spec, argc, argv);
    if (r != CLI_RUN) return r;
    return list(json);
}
