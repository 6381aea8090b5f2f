/* `tutti eval`: bits per byte of every member alone and of the ensemble.
 *
 *   tutti eval --text FILE -m A.gguf [-m ...] [-w ...] [--rule ...] [--align ...] [--json]
 *
 * The text is split into sentence-aligned chunks of at most 200 bytes, each
 * scored from BOS (as ../shared/oracle/bpb.py does with llama.cpp). */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "tutti.h"

int tutti_cmd_eval(int argc, char **argv) {
    ens_args args;
    ens_args *a = &args;
    ens_args_init(a);
    const char *text_path = NULL;
    bool json = false;
    const cli_opt opts[] = {
        CLI_STR("--text,-f,--file", "FILE", &text_path, "text to score (chunks of <= 200 bytes, each from BOS)", "none"),
        CLI_FLAG("--json", &json, "one JSON object: {\"members\":[{\"model\",\"bits_per_byte\",...}],\n"
                                  "\"ensemble\":{\"bits_per_byte\",\"rule\",\"align\"},\"chunks\",\"bytes\"}"),
        CLI_INCLUDE(a->opts),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "eval",
        .usage = "--text FILE (-m A.gguf [-m ...] | -e ENSEMBLE_FILE) [options]",
        .description = "Bits per byte of every member alone (token level) and of the ensemble on a text.\n"
                       "Progress goes to stderr when it takes longer than a second.",
        .opts = opts,
        .epilog = ens_file_help,
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if (!text_path) return cli_usage_error("give the text to score with --text FILE");
    if ((pr = ens_args_check(a)) != CLI_RUN) {
        ens_args_free(a);
        return pr;
    }
    size_t len;
    char *text = cli_read_file(text_path, &len);
    if (!text) {
        ens_args_free(a);
        return 1;
    }
    tutti_ensemble *e = ens_args_build(a, "eval");
    if (!e) {
        free(text);
        ens_args_free(a);
        return 1;
    }
    tutti_bpb_result r;
    char what[96];
    snprintf(what, sizeof what, "scoring %zu bytes with %d members", len, (int)tutti_ensemble_n_members(e));
    cli_progress_start(what);
    int rc = tutti_ensemble_eval_bpb(e, text, len, &r);
    cli_progress_stop();
    if (rc < 0) {
        fprintf(stderr, "tutti eval: %s\n", tutti_last_error());
    } else if (json) {
        cJSON *root = cJSON_CreateObject(), *mem = cJSON_AddArrayToObject(root, "members");
        for (int i = 0; i < r.n_members; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "model", tutti_ensemble_member_path(e, i));
            cJSON_AddNumberToObject(o, "bits_per_byte", r.member_bpb[i]);
            if (!isnan(r.member_byte_bpb[i])) cJSON_AddNumberToObject(o, "byte_bits_per_byte", r.member_byte_bpb[i]);
            cJSON_AddNumberToObject(o, "weight", tutti_ensemble_member_weight(e, i));
            cJSON_AddNumberToObject(o, "temp", tutti_ensemble_member_temp(e, i));
            cJSON_AddItemToArray(mem, o);
        }
        cJSON *en = cJSON_AddObjectToObject(root, "ensemble");
        cJSON_AddNumberToObject(en, "bits_per_byte", r.ensemble_bpb);
        cJSON_AddStringToObject(en, "rule", tutti_rule_name(tutti_ensemble_rule(e)));
        cJSON_AddStringToObject(en, "align", tutti_align_name(tutti_ensemble_align(e)));
        cJSON_AddNumberToObject(root, "chunks", r.n_chunks);
        cJSON_AddNumberToObject(root, "bytes", (double)r.n_bytes);
        char *js = cJSON_PrintUnformatted(root);
        if (js) printf("%s\n", js);
        free(js);
        cJSON_Delete(root);
    } else {
        printf("%d chunks, %lld bytes\n", r.n_chunks, (long long)r.n_bytes);
        for (int i = 0; i < r.n_members; i++) {
            printf("member %d %s: %.4f bits/byte", i + 1, tutti_ensemble_member_path(e, i), r.member_bpb[i]);
            if (!isnan(r.member_byte_bpb[i])) printf(" (byte marginals at tau %.3g: %.4f)", (double)tutti_ensemble_member_temp(e, i), r.member_byte_bpb[i]);
            printf("\n");
        }
        printf("ensemble (%s, %s): %.4f bits/byte\n", tutti_rule_name(tutti_ensemble_rule(e)),
               tutti_align_name(tutti_ensemble_align(e)), r.ensemble_bpb);
    }
    tutti_ensemble_free(e);
    ens_args_free(a);
    free(text);
    return rc < 0 ? 1 : 0;
}
