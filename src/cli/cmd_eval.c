/* `tutti eval`: bits per byte and multiple-choice accuracy of every member
 * alone and of the ensemble.
 *
 *   tutti eval [--text FILE] [--choices FILE.jsonl] -m A.gguf [-m ...] [-w ...] [--rule ...]
 *              [--align ...] [--adapt] [--route] [--choices-static] [--compare ENSEMBLE_FILE ...]
 *              [--json] [--plot FILE.svg]
 *
 * The text is split into sentence-aligned chunks of at most 200 bytes, each
 * scored from BOS (as ../shared/oracle/bpb.py does with llama.cpp).  Choice
 * items are scored as lm-evaluation-harness's multiple_choice tasks
 * (tutti_ensemble_eval_choices). */
#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "cli/plot_svg.h"
#include "tutti.h"

/* "n/a" reasons for a member's token-level figure. */
static const char *why_not(double bpb) {
    return isnan(bpb)   ? " (n/a: a chunk is longer than its context)"
           : isinf(bpb) ? " (its tokens cannot spell the text)"
                        : "";
}

/* One evaluated ensemble: the command line's, or a --compare file's. */
typedef struct ens_eval {
    tutti_ensemble *e;
    const char *file; /* the ensemble file (--compare), or NULL */
    tutti_bpb_result r;
    tutti_choices_result cr;
    const char *choice_weights; /* "static", "posterior", "adapt", "route" */
    char choice_how[64];        /* ", posterior after the context", ... */
    char how[200];              /* ", adapt 0.01, context weights, ..." */
    char label[128];
} ens_eval;

/* Scores x->e on the text and the choice items; the exit status (0 ok). */
static int eval_one(ens_eval *x, const char *text, size_t len, const cli_choice_file *cf, bool choices_static) {
    tutti_ensemble *e = x->e;
    x->choice_weights = "static";
    if (text) {
        char what[96];
        snprintf(what, sizeof what, "scoring %zu bytes with %d members", len, (int)tutti_ensemble_n_members(e));
        cli_progress_start(what);
        int erc = tutti_ensemble_eval_bpb(e, text, len, &x->r);
        cli_progress_stop();
        if (erc < 0) /* a combination eval cannot score is a usage error */
            return erc == TUTTI_ERR_UNSUPPORTED ? cli_usage_error("%s", tutti_last_error())
                                                : cli_error("%s", tutti_last_error());
    }
    double adapt = tutti_ensemble_adapt(e), tau = tutti_ensemble_route(e);
    size_t k = 0;
    if (adapt >= 0) k += (size_t)snprintf(x->how + k, sizeof x->how - k, ", adapt %g", adapt);
    if (tutti_ensemble_context(e, NULL) > 0) k += (size_t)snprintf(x->how + k, sizeof x->how - k, ", context weights");
    if (tutti_ensemble_select(e) >= 0 && k < sizeof x->how)
        snprintf(x->how + k, sizeof x->how - k, ", fused where D >= %g: %.1f %% of the units", tutti_ensemble_select(e),
                 text ? 100 * x->r.fused_share : 100.0);
    snprintf(x->label, sizeof x->label, "ensemble (%s, %s)", tutti_rule_name(tutti_ensemble_rule(e)),
             tutti_align_name(tutti_ensemble_align(e)));
    if (!cf->n) return 0;
    /* How the ensemble weighs the members for a choice item (each scored
     * from BOS): mix defaults to the posterior after the context (adapt
     * with alpha 0 over the item: the exact sequence mixture) */
    if (adapt >= 0 && tau > 0)
        return cli_usage_error("--route and --adapt both set the weights from the context; give one of them");
    if (choices_static && (adapt >= 0 || tau > 0))
        return cli_usage_error("--choices-static scores with the given weights: drop --%s",
                               tau > 0 ? "route" : "adapt");
    if (tau > 0) {
        x->choice_weights = "route";
        snprintf(x->choice_how, sizeof x->choice_how, ", route tau %g", tau);
    } else if (adapt > 0) {
        x->choice_weights = "adapt";
        snprintf(x->choice_how, sizeof x->choice_how, ", adapt %g from BOS", adapt);
    } else if (adapt == 0 || (!choices_static && tutti_ensemble_rule(e) == TUTTI_RULE_MIX)) {
        x->choice_weights = "posterior";
        snprintf(x->choice_how, sizeof x->choice_how, ", posterior after the context");
        tutti_ensemble_set_adapt(e, 0);
    } else {
        snprintf(x->choice_how, sizeof x->choice_how, ", static weights");
    }
    char what[96];
    snprintf(what, sizeof what, "scoring %d choice items with %d members", cf->n, (int)tutti_ensemble_n_members(e));
    cli_progress_start(what);
    int crc = tutti_ensemble_eval_choices(e, cf->items, cf->n, &x->cr, NULL, NULL, NULL);
    cli_progress_stop();
    tutti_ensemble_set_adapt(e, adapt);
    return crc < 0 ? cli_error("%s", tutti_last_error()) : 0;
}

/* The ensemble's settings and figures as a JSON object. */
static cJSON *ens_json(const ens_eval *x, bool text, bool choices) {
    tutti_ensemble *e = x->e;
    cJSON *en = cJSON_CreateObject();
    if (x->file) cJSON_AddStringToObject(en, "file", x->file);
    if (text) cJSON_AddNumberToObject(en, "bits_per_byte", x->r.ensemble_bpb);
    if (choices) {
        cJSON_AddNumberToObject(en, "acc", x->cr.ensemble_acc);
        cJSON_AddNumberToObject(en, "acc_norm", x->cr.ensemble_acc_norm);
        cJSON_AddStringToObject(en, "choice_weights", x->choice_weights);
    }
    cJSON_AddStringToObject(en, "rule", tutti_rule_name(tutti_ensemble_rule(e)));
    cJSON_AddStringToObject(en, "align", tutti_align_name(tutti_ensemble_align(e)));
    tutti_context_weights cw;
    if (tutti_ensemble_context(e, &cw) > 0) {
        cJSON *cf = cJSON_AddArrayToObject(en, "context");
        for (int32_t k = 0; k < cw.n_features; k++)
            cJSON_AddItemToArray(cf, cJSON_CreateString(tutti_feature_name((tutti_feature)cw.features[k])));
    }
    if (tutti_ensemble_select(e) >= 0) {
        cJSON_AddNumberToObject(en, "select", tutti_ensemble_select(e));
        if (text) cJSON_AddNumberToObject(en, "fused_share", x->r.fused_share);
    }
    if (tutti_ensemble_adapt(e) >= 0) cJSON_AddNumberToObject(en, "adapt_alpha", tutti_ensemble_adapt(e));
    if (tutti_ensemble_route(e) > 0) cJSON_AddNumberToObject(en, "route_tau", tutti_ensemble_route(e));
    return en;
}

static void print_json(const ens_eval *x, int n_x, bool text, bool choices) {
    const ens_eval *m = &x[0];
    tutti_ensemble *e = m->e;
    cJSON *root = cJSON_CreateObject(), *mem = cJSON_AddArrayToObject(root, "members");
    for (int i = 0; i < tutti_ensemble_n_members(e); i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", tutti_ensemble_member_path(e, i));
        if (text) {
            cJSON_AddNumberToObject(o, "bits_per_byte", m->r.member_bpb[i]);
            if (!isnan(m->r.member_byte_bpb[i]))
                cJSON_AddNumberToObject(o, "byte_bits_per_byte", m->r.member_byte_bpb[i]);
        }
        if (choices) {
            cJSON_AddNumberToObject(o, "acc", m->cr.member_acc[i]);
            cJSON_AddNumberToObject(o, "acc_norm", m->cr.member_acc_norm[i]);
        }
        cJSON_AddNumberToObject(o, "weight", tutti_ensemble_member_weight(e, i));
        cJSON_AddNumberToObject(o, "temp", tutti_ensemble_member_temp(e, i));
        cJSON_AddItemToArray(mem, o);
    }
    cJSON_AddItemToObject(root, "ensemble", ens_json(m, text, choices));
    if (n_x > 1) {
        cJSON *cmp = cJSON_AddArrayToObject(root, "compare");
        for (int k = 1; k < n_x; k++) cJSON_AddItemToArray(cmp, ens_json(&x[k], text, choices));
    }
    if (text) {
        cJSON_AddNumberToObject(root, "chunks", m->r.n_chunks);
        cJSON_AddNumberToObject(root, "bytes", (double)m->r.n_bytes);
    }
    if (choices) cJSON_AddNumberToObject(root, "items", m->cr.n_items);
    char *js = cJSON_PrintUnformatted(root);
    if (js) printf("%s\n", js);
    free(js);
    cJSON_Delete(root);
}

static void print_text(const ens_eval *x, int n_x, bool text, bool choices) {
    tutti_ensemble *e = x[0].e;
    int nm = tutti_ensemble_n_members(e);
    if (text) {
        printf("%d chunks, %lld bytes\n", x[0].r.n_chunks, (long long)x[0].r.n_bytes);
        for (int i = 0; i < nm; i++) {
            printf("member %d %s: %.4f bits/byte%s", i + 1, tutti_ensemble_member_path(e, i), x[0].r.member_bpb[i],
                   why_not(x[0].r.member_bpb[i]));
            if (!isnan(x[0].r.member_byte_bpb[i]))
                printf(" (byte marginals at tau %.3g: %.4f)", (double)tutti_ensemble_member_temp(e, i),
                       x[0].r.member_byte_bpb[i]);
            printf("\n");
        }
        for (int k = 0; k < n_x; k++)
            printf("ensemble %s%s(%s, %s%s): %.4f bits/byte\n", k ? x[k].file : "", k ? " " : "",
                   tutti_rule_name(tutti_ensemble_rule(x[k].e)), tutti_align_name(tutti_ensemble_align(x[k].e)),
                   x[k].how, x[k].r.ensemble_bpb);
    }
    if (choices) {
        printf("%d choice items\n", x[0].cr.n_items);
        for (int i = 0; i < nm; i++)
            printf("member %d %s: acc %.4f acc_norm %.4f\n", i + 1, tutti_ensemble_member_path(e, i),
                   x[0].cr.member_acc[i], x[0].cr.member_acc_norm[i]);
        for (int k = 0; k < n_x; k++)
            printf("ensemble %s%s(%s, %s%s): acc %.4f acc_norm %.4f\n", k ? x[k].file : "", k ? " " : "",
                   tutti_rule_name(tutti_ensemble_rule(x[k].e)), tutti_align_name(tutti_ensemble_align(x[k].e)),
                   x[k].choice_how, x[k].cr.ensemble_acc, x[k].cr.ensemble_acc_norm);
    }
}

/* Bars: every member (byte marginals where they exist: the ensemble's
 * scale), then every ensemble. */
static int plot(const char *path, const ens_eval *x, int n_x, bool text, bool choices) {
    tutti_ensemble *e = x[0].e;
    int nm = tutti_ensemble_n_members(e), n = 0;
    const char *labels[32];
    double bpb[32], acc[32], accn[32];
    for (int i = 0; i < nm && n < 32; i++, n++) {
        const char *p = tutti_ensemble_member_path(e, i), *sl = strrchr(p, '/');
        labels[n] = sl ? sl + 1 : p;
        bpb[n] = text ? (!isnan(x[0].r.member_byte_bpb[i]) ? x[0].r.member_byte_bpb[i] : x[0].r.member_bpb[i]) : NAN;
        acc[n] = choices ? x[0].cr.member_acc[i] : NAN;
        accn[n] = choices ? x[0].cr.member_acc_norm[i] : NAN;
    }
    for (int k = 0; k < n_x && n < 32; k++, n++) {
        const char *sl = x[k].file ? strrchr(x[k].file, '/') : NULL;
        labels[n] = sl ? sl + 1 : x[k].label;
        bpb[n] = text ? x[k].r.ensemble_bpb : NAN;
        acc[n] = choices ? x[k].cr.ensemble_acc : NAN;
        accn[n] = choices ? x[k].cr.ensemble_acc_norm : NAN;
    }
    return plot_svg_write(path, labels, n, text ? bpb : NULL, choices ? acc : NULL, choices ? accn : NULL);
}

/* A --compare file's ensemble: its own settings, this command's thread,
 * context and byte-state flags; the same members as the first. */
static tutti_ensemble *build_compare(const ens_args *a, const char *file, const tutti_ensemble *first) {
    ens_args b;
    ens_args_init(&b);
    b.ens_file = file;
    b.n_threads = a->n_threads, b.parallel = a->parallel, b.n_ctx = a->n_ctx;
    b.prune = a->prune, b.max_hyps = a->max_hyps;
    tutti_ensemble *e = NULL;
    if (ens_args_check(&b) == CLI_RUN && (e = ens_args_build(&b, "eval"))) {
        bool same = tutti_ensemble_n_members(e) == tutti_ensemble_n_members(first);
        for (int i = 0; same && i < tutti_ensemble_n_members(e); i++) {
            char ra[PATH_MAX], rb[PATH_MAX];
            const char *pa = tutti_ensemble_member_path(e, i), *pb = tutti_ensemble_member_path(first, i);
            same = !strcmp(realpath(pa, ra) ? ra : pa, realpath(pb, rb) ? rb : pb);
        }
        if (!same) {
            cli_error("--compare %s: its members differ from the first ensemble's (the table shows one set of members)",
                      file);
            tutti_ensemble_free(e);
            e = NULL;
        }
    }
    ens_args_free(&b);
    return e;
}

int tutti_cmd_eval(int argc, char **argv) {
    ens_args args;
    ens_args *a = &args;
    ens_args_init(a);
    const char *text_path = NULL, *choices_path = NULL, *plot_path = NULL;
    bool json = false, choices_static = false;
    cli_strs compare = {.n = 0};
    const cli_opt opts[] = {
        CLI_STR("--text,-f,--file", "FILE", &text_path, "text to score (chunks of <= 200 bytes, each from BOS)",
                "none"),
        CLI_STR("--choices", "FILE.jsonl", &choices_path,
                "multiple-choice items, one JSON object a line: {\"context\", \"choices\": [...],\n"
                "\"label\"}: acc and acc_norm (LL per byte of the choice), lm-evaluation-harness style",
                "none"),
        CLI_FLAG("--choices-static", &choices_static,
                 "mix: score choices with the given weights per unit (byte, token, span)\n"
                 "instead of the posterior over members after the context (the exact\n"
                 "sequence mixture, the default for mix; --adapt/--route choose others)"),
        CLI_STRS("--compare", "ENSEMBLE_FILE", &compare,
                 "also score this ensemble file (same members, its own rule and weights; repeat):\n"
                 "one more line, JSON \"compare\" entry and bar each"),
        CLI_FLAG("--json", &json,
                 "one JSON object: {\"members\":[{\"model\",\"bits_per_byte\",\"acc\",\"acc_norm\",...}],\n"
                 "\"ensemble\":{\"bits_per_byte\",\"acc\",\"acc_norm\",\"rule\",\"align\"},...}"),
        CLI_STR("--plot", "FILE.svg", &plot_path,
                "draw every member's and the ensemble's figures as bar charts\n"
                "(an SVG file; not -: stdout holds the figures)",
                "none"),
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
    if (compare.n > 32 - TUTTI_ENSEMBLE_MAX_MEMBERS - 1) return cli_usage_error("--compare: at most 15 files");
    if ((pr = cli_output_check("--plot", plot_path, CLI_OUT_FILE_ONLY)) != CLI_RUN) return pr;
    if ((pr = ens_args_check(a)) != CLI_RUN) {
        ens_args_free(a);
        return pr;
    }
    size_t len = 0;
    char *text = NULL;
    cli_choice_file cf = {0};
    ens_eval x[16];
    memset(x, 0, sizeof x);
    int n_x = 0, rc = 1;
    if (text_path && !(text = cli_read_file(text_path, &len))) goto done;
    if (choices_path && cli_choice_file_read(choices_path, &cf)) goto done;
    if (!(x[0].e = ens_args_build(a, "eval"))) {
        rc = a->status;
        goto done;
    }
    n_x = 1;
    for (int k = 0; k < compare.n; k++, n_x++) {
        x[n_x].file = compare.v[k];
        if (!(x[n_x].e = build_compare(a, compare.v[k], x[0].e))) goto done;
    }
    for (int k = 0; k < n_x; k++)
        if ((rc = eval_one(&x[k], text, len, &cf, choices_static)) != 0) goto done;
    if (json) print_json(x, n_x, text != NULL, cf.n > 0);
    else print_text(x, n_x, text != NULL, cf.n > 0);
    rc = plot_path ? plot(plot_path, x, n_x, text != NULL, cf.n > 0) : 0;
done:
    for (int k = 0; k < 16; k++) tutti_ensemble_free(x[k].e);
    cli_choice_file_free(&cf);
    ens_args_free(a);
    free(text);
    return rc;
}
