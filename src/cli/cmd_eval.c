/* `tutti eval`: bits per byte of every member alone and of the ensemble.
 *
 *   tutti eval --text FILE -m A.gguf [-m ...] [-w ...] [--rule ...] [--align ...] [--json]
 *
 * The text is split into sentence-aligned chunks of at most 200 bytes, each
 * scored from BOS (as ../shared/oracle/bpb.py does with llama.cpp). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "tutti.h"

static void json_str(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

int tutti_cmd_eval(int argc, char **argv) {
    ens_args args;
    ens_args *a = &args;
    ens_args_init(a);
    const char *text_path = NULL;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        int r = ens_args_take(a, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tutti eval --text FILE -m A.gguf [-m ...] [options] [--json]\n"
                   "Bits per byte of every member alone (token level) and of the ensemble.\n%s"
                   "  --text FILE           text to score (chunks of <= 200 bytes, each from BOS)\n"
                   "  --json                {\"members\":[{\"model\":...,\"bits_per_byte\":...}],\"ensemble\":{...}}\n",
                   ens_args_help());
            return 0;
        } else if (!strcmp(argv[i], "--text")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tutti eval: --text needs a file\n");
                return 1;
            }
            text_path = argv[++i];
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else {
            fprintf(stderr, "tutti eval: unknown option %s (see tutti eval --help)\n", argv[i]);
            return 2;
        }
    }
    if (!text_path) {
        fprintf(stderr, "tutti eval: give the text to score with --text FILE\n");
        return 1;
    }
    size_t len;
    char *text = cli_read_file(text_path, &len);
    if (!text) return 1;
    tutti_ensemble *e = ens_args_build(a, "eval");
    if (!e) {
        free(text);
        ens_args_free(a);
        return 1;
    }
    tutti_bpb_result r;
    int rc = tutti_ensemble_eval_bpb(e, text, len, &r);
    if (rc < 0) {
        fprintf(stderr, "tutti eval: %s\n", tutti_last_error());
    } else if (json) {
        printf("{\"members\":[");
        for (int i = 0; i < r.n_members; i++) {
            printf("%s{\"model\":", i ? "," : "");
            json_str(stdout, tutti_ensemble_member_path(e, i));
            printf(",\"bits_per_byte\":%.6f", r.member_bpb[i]);
            if (!isnan(r.member_byte_bpb[i])) printf(",\"byte_bits_per_byte\":%.6f", r.member_byte_bpb[i]);
            printf(",\"weight\":%.6g,\"temp\":%.6g}", (double)tutti_ensemble_member_weight(e, i),
                   (double)tutti_ensemble_member_temp(e, i));
        }
        printf("],\"ensemble\":{\"bits_per_byte\":%.6f,\"rule\":\"%s\",\"align\":\"%s\"},\"chunks\":%d,\"bytes\":%lld}\n",
               r.ensemble_bpb, tutti_rule_name(tutti_ensemble_rule(e)), tutti_align_name(tutti_ensemble_align(e)),
               r.n_chunks, (long long)r.n_bytes);
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
    return rc == TUTTI_ERR_UNSUPPORTED ? 2 : rc < 0 ? 1 : 0;
}
