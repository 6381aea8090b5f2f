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

/* "n/a" reasons for a member's token-level figure. */
static const char *why_not(double bpb) {
    return isnan(bpb)   ? " (n/a: a chunk is longer than its context)"
           : isinf(bpb) ? " (its tokens cannot spell the text)"
                        : "";
}

/* What eval found: bits per byte (text) and accuracies (choices). */
typedef struct eval_out {
    bool text, choices;
    tutti_bpb_result r;
    tutti_choices_result cr;
    char choice_how[64];        /* how a choice item weighs the members, for the text output */
    const char *choice_weights; /* the same for --json */
} eval_out;

/* Bits per byte of the text.  0, 1 (runtime error) or 2 (a combination
 * eval cannot score: usage) after the message. */
static int score_text(tutti_ensemble *e, const char *text, size_t len, eval_out *o) {
    char what[96];
    snprintf(what, sizeof what, "scoring %zu bytes with %d members", len, (int)tutti_ensemble_n_members(e));
    cli_progress_start(what);
    int erc = tutti_ensemble_eval_bpb(e, text, len, &o->r);
    cli_progress_stop();
    if (erc >= 0) return 0;
    return erc == TUTTI_ERR_UNSUPPORTED ? cli_usage_error("%s", tutti_last_error())
                                        : cli_error("%s", tutti_last_error());
}

/* The choice items, each scored from BOS.  How the ensemble weighs the
 * members for an item: mix defaults to the posterior after the context
 * (adapt with alpha 0 over the item: the exact sequence mixture).  0, or
 * the exit status after the message. */
static int score_choices(tutti_ensemble *e, const choice_file *cf, bool choices_static, eval_out *o) {
    double adapt = tutti_ensemble_adapt(e), tau = tutti_ensemble_route(e);
    if (adapt >= 0 && tau > 0)
        return cli_usage_error("--route and --adapt both set the weights from the context; give one of them");
    if (choices_static && (adapt >= 0 || tau > 0))
        return cli_usage_error("--choices-static scores with the given weights: drop --%s",
                               tau > 0 ? "route" : "adapt");
    o->choice_weights = "static";
    if (tau > 0) {
        o->choice_weights = "route";
        snprintf(o->choice_how, sizeof o->choice_how, ", route tau %g", tau);
    } else if (adapt > 0) {
        o->choice_weights = "adapt";
        snprintf(o->choice_how, sizeof o->choice_how, ", adapt %g from BOS", adapt);
    } else if (adapt == 0 || (!choices_static && tutti_ensemble_rule(e) == TUTTI_RULE_MIX)) {
        o->choice_weights = "posterior";
        snprintf(o->choice_how, sizeof o->choice_how, ", posterior after the context");
        tutti_ensemble_set_adapt(e, 0);
    } else {
        snprintf(o->choice_how, sizeof o->choice_how, ", static weights");
    }
    char what[96];
    snprintf(what, sizeof what, "scoring %d choice items with %d members", cf->n, (int)tutti_ensemble_n_members(e));
    cli_progress_start(what);
    int crc = tutti_ensemble_eval_choices(e, cf->items, cf->n, &o->cr, NULL, NULL, NULL);
    cli_progress_stop();
    tutti_ensemble_set_adapt(e, adapt);
    return crc < 0 ? cli_error("%s", tutti_last_error()) : 0;
}

static void print_json_out(const tutti_ensemble *e, const eval_out *o) {
    int nm = tutti_ensemble_n_members(e);
    double adapt = tutti_ensemble_adapt(e);
    cJSON *root = cJSON_CreateObject(), *mem = cJSON_AddArrayToObject(root, "members");
    for (int i = 0; i < nm; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "model", tutti_ensemble_member_path(e, i));
        if (o->text) {
            cJSON_AddNumberToObject(m, "bits_per_byte", o->r.member_bpb[i]);
            if (!isnan(o->r.member_byte_bpb[i]))
                cJSON_AddNumberToObject(m, "byte_bits_per_byte", o->r.member_byte_bpb[i]);
        }
        if (o->choices) {
            cJSON_AddNumberToObject(m, "acc", o->cr.member_acc[i]);
            cJSON_AddNumberToObject(m, "acc_norm", o->cr.member_acc_norm[i]);
        }
        cJSON_AddNumberToObject(m, "weight", tutti_ensemble_member_weight(e, i));
        cJSON_AddNumberToObject(m, "temp", tutti_ensemble_member_temp(e, i));
        cJSON_AddItemToArray(mem, m);
    }
    cJSON *en = cJSON_AddObjectToObject(root, "ensemble");
    if (o->text) cJSON_AddNumberToObject(en, "bits_per_byte", o->r.ensemble_bpb);
    if (o->choices) {
        cJSON_AddNumberToObject(en, "acc", o->cr.ensemble_acc);
        cJSON_AddNumberToObject(en, "acc_norm", o->cr.ensemble_acc_norm);
        cJSON_AddStringToObject(en, "choice_weights", o->choice_weights);
    }
    cJSON_AddStringToObject(en, "rule", tutti_rule_name(tutti_ensemble_rule(e)));
    cJSON_AddStringToObject(en, "align", tutti_align_name(tutti_ensemble_align(e)));
    if (adapt >= 0) cJSON_AddNumberToObject(en, "adapt_alpha", adapt);
    if (tutti_ensemble_route(e) > 0) cJSON_AddNumberToObject(en, "route_tau", tutti_ensemble_route(e));
    if (o->text) {
        cJSON_AddNumberToObject(root, "chunks", o->r.n_chunks);
        cJSON_AddNumberToObject(root, "bytes", (double)o->r.n_bytes);
    }
    if (o->choices) cJSON_AddNumberToObject(root, "items", o->cr.n_items);
    char *js = cJSON_PrintUnformatted(root);
    if (js) printf("%s\n", js);
    free(js);
    cJSON_Delete(root);
}

static void print_text_out(const tutti_ensemble *e, const eval_out *o) {
    int nm = tutti_ensemble_n_members(e);
    double adapt = tutti_ensemble_adapt(e);
    char how[64] = "";
    if (adapt >= 0) snprintf(how, sizeof how, ", adapt %g", adapt);
    if (o->text) {
        printf("%d chunks, %lld bytes\n", o->r.n_chunks, (long long)o->r.n_bytes);
        for (int i = 0; i < nm; i++) {
            printf("member %d %s: %.4f bits/byte%s", i + 1, tutti_ensemble_member_path(e, i), o->r.member_bpb[i],
                   why_not(o->r.member_bpb[i]));
            if (!isnan(o->r.member_byte_bpb[i]))
                printf(" (byte marginals at tau %.3g: %.4f)", (double)tutti_ensemble_member_temp(e, i),
                       o->r.member_byte_bpb[i]);
            printf("\n");
        }
        printf("ensemble (%s, %s%s): %.4f bits/byte\n", tutti_rule_name(tutti_ensemble_rule(e)),
               tutti_align_name(tutti_ensemble_align(e)), how, o->r.ensemble_bpb);
    }
    if (o->choices) {
        printf("%d choice items\n", o->cr.n_items);
        for (int i = 0; i < nm; i++)
            printf("member %d %s: acc %.4f acc_norm %.4f\n", i + 1, tutti_ensemble_member_path(e, i),
                   o->cr.member_acc[i], o->cr.member_acc_norm[i]);
        printf("ensemble (%s, %s%s): acc %.4f acc_norm %.4f\n", tutti_rule_name(tutti_ensemble_rule(e)),
               tutti_align_name(tutti_ensemble_align(e)), o->choice_how, o->cr.ensemble_acc, o->cr.ensemble_acc_norm);
    }
}

/* Every member's and the ensemble's figures as bar charts.  0, or 1 after
 * the message. */
static int write_plot(const tutti_ensemble *e, const eval_out *o, const char *plot_path) {
    int nm = tutti_ensemble_n_members(e);
    const char *labels[TUTTI_ENSEMBLE_MAX_MEMBERS + 1];
    double bpb[TUTTI_ENSEMBLE_MAX_MEMBERS + 1], acc[TUTTI_ENSEMBLE_MAX_MEMBERS + 1],
        accn[TUTTI_ENSEMBLE_MAX_MEMBERS + 1];
    char ens_label[64];
    for (int i = 0; i < nm; i++) {
        const char *p = tutti_ensemble_member_path(e, i), *sl = strrchr(p, '/');
        labels[i] = sl ? sl + 1 : p;
        /* a member's figure on the ensemble's scale: byte marginals where they exist */
        bpb[i] = o->text ? (!isnan(o->r.member_byte_bpb[i]) ? o->r.member_byte_bpb[i] : o->r.member_bpb[i]) : NAN;
        acc[i] = o->choices ? o->cr.member_acc[i] : NAN;
        accn[i] = o->choices ? o->cr.member_acc_norm[i] : NAN;
    }
    snprintf(ens_label, sizeof ens_label, "ensemble (%s, %s)", tutti_rule_name(tutti_ensemble_rule(e)),
             tutti_align_name(tutti_ensemble_align(e)));
    labels[nm] = ens_label;
    bpb[nm] = o->text ? o->r.ensemble_bpb : NAN;
    acc[nm] = o->choices ? o->cr.ensemble_acc : NAN;
    accn[nm] = o->choices ? o->cr.ensemble_acc_norm : NAN;
    return plot_svg_write(plot_path, labels, nm + 1, o->text ? bpb : NULL, o->choices ? acc : NULL,
                          o->choices ? accn : NULL);
}

int tutti_cmd_eval(int argc, char **argv) {
    ens_args args;
    ens_args *a = &args;
    ens_args_init(a);
    const char *text_path = NULL, *choices_path = NULL, *plot_path = NULL;
    bool json = false, choices_static = false;
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
    if ((pr = cli_output_check("--plot", plot_path, CLI_OUT_FILE_ONLY)) != CLI_RUN) return pr;
    if ((pr = ens_args_check(a)) != CLI_RUN) {
        ens_args_free(a);
        return pr;
    }
    size_t len = 0;
    char *text = NULL;
    choice_file cf = {0};
    tutti_ensemble *e = NULL;
    eval_out o = {0};
    int rc = 1;
    if (text_path && !(text = cli_read_file(text_path, &len))) goto done;
    if (choices_path && choice_file_read(choices_path, &cf)) goto done;
    if (!(e = ens_args_build(a, "eval"))) {
        rc = a->status;
        goto done;
    }
    o.text = text != NULL, o.choices = cf.n > 0;
    if ((o.text && (rc = score_text(e, text, len, &o)) != 0) ||
        (o.choices && (rc = score_choices(e, &cf, choices_static, &o)) != 0))
        goto done;
    if (json) print_json_out(e, &o);
    else print_text_out(e, &o);
    rc = plot_path ? write_plot(e, &o, plot_path) : 0;
done:
    tutti_ensemble_free(e);
    choice_file_free(&cf);
    ens_args_free(a);
    free(text);
    return rc;
}
