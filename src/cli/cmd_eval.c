/* `tutti eval`: bits per byte and multiple-choice accuracy of every member
 * alone and of the ensemble.
 *
 *   tutti eval [--text FILE] [--choices FILE.jsonl] -m A.gguf [-m ...] [-w ...] [--rule ...]
 *              [--align ...] [--adapt] [--route] [--choices-static] [--json] [--plot FILE.svg]
 *
 * The text is split into sentence-aligned chunks of at most 200 bytes, each
 * scored from BOS (as ../shared/oracle/bpb.py does with llama.cpp).  Choice
 * items are scored as lm-evaluation-harness's multiple_choice tasks
 * (tutti_ensemble_eval_choices). */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "cli/plot_svg.h"
#include "tutti.h"

/* The items of a JSON-lines file {"context", "choices": [...], "label"}. */
typedef struct choice_file {
    cJSON **lines;
    tutti_choice_item *items;
    const char **choices; /* [n * TUTTI_MAX_CHOICES] */
    int n;
} choice_file;

static void choice_file_free(choice_file *c) {
    for (int i = 0; i < c->n; i++) cJSON_Delete(c->lines[i]);
    free(c->lines), free(c->items), free(c->choices);
}

static int choice_file_read(const char *path, choice_file *c) {
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
            rc = cli_error("%s: line %d: needs {\"context\": string, \"choices\": [strings], \"label\": integer}",
                           path, lineno);
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

/* "n/a" reasons for a member's token-level figure. */
static const char *why_not(double bpb) {
    return isnan(bpb) ? " (n/a: a chunk is longer than its context)" : isinf(bpb) ? " (its tokens cannot spell the text)" : "";
}

int tutti_cmd_eval(int argc, char **argv) {
    ens_args args;
    ens_args *a = &args;
    ens_args_init(a);
    const char *text_path = NULL, *choices_path = NULL, *plot_path = NULL;
    bool json = false, choices_static = false;
    const cli_opt opts[] = {
        CLI_STR("--text,-f,--file", "FILE", &text_path, "text to score (chunks of <= 200 bytes, each from BOS)", "none"),
        CLI_STR("--choices", "FILE.jsonl", &choices_path,
                "multiple-choice items, one JSON object a line: {\"context\", \"choices\": [...],\n"
                "\"label\"}: acc and acc_norm (LL per byte of the choice), lm-evaluation-harness style",
                "none"),
        CLI_FLAG("--choices-static", &choices_static,
                 "mix: score choices with the given weights per unit (byte, token, span)\n"
                 "instead of the posterior over members after the context (the exact\n"
                 "sequence mixture, the default for mix; --adapt/--route choose others)"),
        CLI_FLAG("--json", &json, "one JSON object: {\"members\":[{\"model\",\"bits_per_byte\",\"acc\",\"acc_norm\",...}],\n"
                                  "\"ensemble\":{\"bits_per_byte\",\"acc\",\"acc_norm\",\"rule\",\"align\"},...}"),
        CLI_STR("--plot", "FILE.svg", &plot_path, "draw every member's and the ensemble's figures as bar charts\n"
                                                  "(an SVG file; not -: stdout holds the figures)", "none"),
        CLI_INCLUDE(a->opts),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "eval",
        .usage = "(--text FILE | --choices FILE.jsonl) (-m A.gguf [-m ...] | -e ENSEMBLE_FILE) [options]",
        .description = "Bits per byte of every member alone (token level) and of the ensemble on a text, and/or\n"
                       "multiple-choice accuracy on JSON-lines items (each choice's log-likelihood given the\n"
                       "context). Progress goes to stderr when it takes longer than a second.",
        .opts = opts,
        .epilog = ens_file_help,
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if (!text_path && !choices_path)
        return cli_usage_error("give a text to score with --text FILE, or choice items with --choices FILE.jsonl");
    if ((pr = cli_output_check("--plot", plot_path, CLI_OUT_FILE_ONLY)) != CLI_RUN) return pr;
    if ((pr = ens_args_check(a)) != CLI_RUN) {
        ens_args_free(a);
        return pr;
    }
    size_t len = 0;
    char *text = NULL;
    choice_file cf = {0};
    tutti_ensemble *e = NULL;
    tutti_bpb_result r;
    tutti_choices_result cr;
    int rc = 1;
    if (text_path && !(text = cli_read_file(text_path, &len))) goto done;
    if (choices_path && choice_file_read(choices_path, &cf)) goto done;
    if (!(e = ens_args_build(a, "eval"))) {
        rc = a->status;
        goto done;
    }
    if (text) {
        char what[96];
        snprintf(what, sizeof what, "scoring %zu bytes with %d members", len, (int)tutti_ensemble_n_members(e));
        cli_progress_start(what);
        int erc = tutti_ensemble_eval_bpb(e, text, len, &r);
        cli_progress_stop();
        if (erc < 0) { /* a combination eval cannot score is a usage error */
            rc = erc == TUTTI_ERR_UNSUPPORTED ? cli_usage_error("%s", tutti_last_error())
                                              : cli_error("%s", tutti_last_error());
            goto done;
        }
    }
    /* How the ensemble weighs the members for a choice item (each scored
     * from BOS): mix defaults to the posterior after the context (adapt
     * with alpha 0 over the item: the exact sequence mixture) */
    char choice_how[64] = "";
    const char *choice_weights = "static";
    if (cf.n) {
        double adapt = tutti_ensemble_adapt(e), tau = tutti_ensemble_route(e);
        if (adapt >= 0 && tau > 0) {
            rc = cli_usage_error("--route and --adapt both set the weights from the context; give one of them");
            goto done;
        }
        if (choices_static && (adapt >= 0 || tau > 0)) {
            rc = cli_usage_error("--choices-static scores with the given weights: drop --%s", tau > 0 ? "route" : "adapt");
            goto done;
        }
        if (tau > 0) {
            choice_weights = "route";
            snprintf(choice_how, sizeof choice_how, ", route tau %g", tau);
        } else if (adapt > 0) {
            choice_weights = "adapt";
            snprintf(choice_how, sizeof choice_how, ", adapt %g from BOS", adapt);
        } else if (adapt == 0 || (!choices_static && tutti_ensemble_rule(e) == TUTTI_RULE_MIX)) {
            choice_weights = "posterior";
            snprintf(choice_how, sizeof choice_how, ", posterior after the context");
            tutti_ensemble_set_adapt(e, 0);
        } else {
            snprintf(choice_how, sizeof choice_how, ", static weights");
        }
        char what[96];
        snprintf(what, sizeof what, "scoring %d choice items with %d members", cf.n, (int)tutti_ensemble_n_members(e));
        cli_progress_start(what);
        int crc = tutti_ensemble_eval_choices(e, cf.items, cf.n, &cr, NULL, NULL, NULL);
        cli_progress_stop();
        tutti_ensemble_set_adapt(e, adapt);
        if (crc < 0) {
            cli_error("%s", tutti_last_error());
            goto done;
        }
    }
    int nm = tutti_ensemble_n_members(e);
    double adapt = tutti_ensemble_adapt(e);
    if (json) {
        cJSON *root = cJSON_CreateObject(), *mem = cJSON_AddArrayToObject(root, "members");
        for (int i = 0; i < nm; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "model", tutti_ensemble_member_path(e, i));
            if (text) {
                cJSON_AddNumberToObject(o, "bits_per_byte", r.member_bpb[i]);
                if (!isnan(r.member_byte_bpb[i])) cJSON_AddNumberToObject(o, "byte_bits_per_byte", r.member_byte_bpb[i]);
            }
            if (cf.n) {
                cJSON_AddNumberToObject(o, "acc", cr.member_acc[i]);
                cJSON_AddNumberToObject(o, "acc_norm", cr.member_acc_norm[i]);
            }
            cJSON_AddNumberToObject(o, "weight", tutti_ensemble_member_weight(e, i));
            cJSON_AddNumberToObject(o, "temp", tutti_ensemble_member_temp(e, i));
            cJSON_AddItemToArray(mem, o);
        }
        cJSON *en = cJSON_AddObjectToObject(root, "ensemble");
        if (text) cJSON_AddNumberToObject(en, "bits_per_byte", r.ensemble_bpb);
        if (cf.n) {
            cJSON_AddNumberToObject(en, "acc", cr.ensemble_acc);
            cJSON_AddNumberToObject(en, "acc_norm", cr.ensemble_acc_norm);
            cJSON_AddStringToObject(en, "choice_weights", choice_weights);
        }
        cJSON_AddStringToObject(en, "rule", tutti_rule_name(tutti_ensemble_rule(e)));
        cJSON_AddStringToObject(en, "align", tutti_align_name(tutti_ensemble_align(e)));
        if (adapt >= 0) cJSON_AddNumberToObject(en, "adapt_alpha", adapt);
        if (tutti_ensemble_route(e) > 0) cJSON_AddNumberToObject(en, "route_tau", tutti_ensemble_route(e));
        if (text) {
            cJSON_AddNumberToObject(root, "chunks", r.n_chunks);
            cJSON_AddNumberToObject(root, "bytes", (double)r.n_bytes);
        }
        if (cf.n) cJSON_AddNumberToObject(root, "items", cr.n_items);
        char *js = cJSON_PrintUnformatted(root);
        if (js) printf("%s\n", js);
        free(js);
        cJSON_Delete(root);
    } else {
        char how[64] = "";
        if (adapt >= 0) snprintf(how, sizeof how, ", adapt %g", adapt);
        if (text) {
            printf("%d chunks, %lld bytes\n", r.n_chunks, (long long)r.n_bytes);
            for (int i = 0; i < nm; i++) {
                printf("member %d %s: %.4f bits/byte%s", i + 1, tutti_ensemble_member_path(e, i), r.member_bpb[i],
                       why_not(r.member_bpb[i]));
                if (!isnan(r.member_byte_bpb[i]))
                    printf(" (byte marginals at tau %.3g: %.4f)", (double)tutti_ensemble_member_temp(e, i),
                           r.member_byte_bpb[i]);
                printf("\n");
            }
            printf("ensemble (%s, %s%s): %.4f bits/byte\n", tutti_rule_name(tutti_ensemble_rule(e)),
                   tutti_align_name(tutti_ensemble_align(e)), how, r.ensemble_bpb);
        }
        if (cf.n) {
            printf("%d choice items\n", cr.n_items);
            for (int i = 0; i < nm; i++)
                printf("member %d %s: acc %.4f acc_norm %.4f\n", i + 1, tutti_ensemble_member_path(e, i),
                       cr.member_acc[i], cr.member_acc_norm[i]);
            printf("ensemble (%s, %s%s): acc %.4f acc_norm %.4f\n", tutti_rule_name(tutti_ensemble_rule(e)),
                   tutti_align_name(tutti_ensemble_align(e)), choice_how, cr.ensemble_acc, cr.ensemble_acc_norm);
        }
    }
    rc = 0;
    if (plot_path) {
        const char *labels[TUTTI_ENSEMBLE_MAX_MEMBERS + 1];
        double bpb[TUTTI_ENSEMBLE_MAX_MEMBERS + 1], acc[TUTTI_ENSEMBLE_MAX_MEMBERS + 1],
            accn[TUTTI_ENSEMBLE_MAX_MEMBERS + 1];
        char ens_label[64];
        for (int i = 0; i < nm; i++) {
            const char *p = tutti_ensemble_member_path(e, i), *sl = strrchr(p, '/');
            labels[i] = sl ? sl + 1 : p;
            /* a member's figure on the ensemble's scale: byte marginals where they exist */
            bpb[i] = text ? (!isnan(r.member_byte_bpb[i]) ? r.member_byte_bpb[i] : r.member_bpb[i]) : NAN;
            acc[i] = cf.n ? cr.member_acc[i] : NAN;
            accn[i] = cf.n ? cr.member_acc_norm[i] : NAN;
        }
        snprintf(ens_label, sizeof ens_label, "ensemble (%s, %s)", tutti_rule_name(tutti_ensemble_rule(e)),
                 tutti_align_name(tutti_ensemble_align(e)));
        labels[nm] = ens_label;
        bpb[nm] = text ? r.ensemble_bpb : NAN;
        acc[nm] = cf.n ? cr.ensemble_acc : NAN;
        accn[nm] = cf.n ? cr.ensemble_acc_norm : NAN;
        rc = plot_svg_write(plot_path, labels, nm + 1, text ? bpb : NULL, cf.n ? acc : NULL, cf.n ? accn : NULL);
    }
done:
    tutti_ensemble_free(e);
    choice_file_free(&cf);
    ens_args_free(a);
    free(text);
    return rc;
}
