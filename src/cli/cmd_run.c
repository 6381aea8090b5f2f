/* `tutti run`: fused generation of an ensemble.
 *
 *   tutti run -m A.gguf -m B.gguf [-m ...] [-w 0.5,0.3,0.2] [--rule mix|product|gate|contrastive]
 *             [--align auto|token|byte|span] -p TEXT [-n N] [--temp T] [--seed S] ...
 *
 * Fused text on stdout, per-member timings and the fusion overhead on
 * stderr.  Also home of the ensemble flags shared with `tutti eval` and
 * `tutti fit` (ens_args_*). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "tutti.h"

/* ---- ensemble flags shared by run / eval / fit ---- */

void ens_args_init(ens_args *a) {
    memset(a, 0, sizeof *a);
    a->rule = a->align = -1;
    a->prune = -1;
}

void ens_args_free(ens_args *a) { tutti_ensemble_file_free(a->file); }

const char *ens_args_help(void) {
    return "  -m FILE.gguf          a member (repeat: one -m per member)\n"
           "  -e, --ensemble FILE   members from an ensemble file (MODEL WEIGHT TEMP per line)\n"
           "  -w W1,W2,...          member weights (one per member; default uniform)\n"
           "  --temps T1,T2,...     member temperatures tau_i (default 1)\n"
           "  --rule R              mix | product | gate | contrastive (default mix)\n"
           "  --align A             auto | token | byte | span (default auto: token if the\n"
           "                        vocabularies are identical, else byte)\n"
           "  -t, --threads N       worker threads (default: all cores)\n"
           "  --parallel N          0 default, 1 members one after the other, 2 concurrently\n"
           "  -c, --ctx N           context per member in tokens\n"
           "  --prune X             byte alignment: hypothesis pruning share (default 1e-4, 0 = exact)\n"
           "  --max-hyps N          byte alignment: hypotheses per member (default 8)\n"
           "  --beta X              contrastive plausibility cut (default 0.1)\n";
}

static int parse_list(const char *opt, const char *s, float *out, int max) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *e;
        errno = 0;
        double v = strtod(p, &e);
        if (e == p || errno || (*e && *e != ',') || !isfinite(v)) {
            fprintf(stderr, "tutti: %s: \"%s\" is not a comma-separated list of finite numbers\n", opt, s);
            return -1;
        }
        if (n == max) {
            fprintf(stderr, "tutti: %s: more than %d values\n", opt, max);
            return -1;
        }
        out[n++] = (float)v;
        p = *e ? e + 1 : e;
    }
    return n;
}

static const char *need_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "tutti: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static int parse_int_opt(const char *opt, const char *v, int lo, int hi, int *out) {
    char *e;
    errno = 0;
    long x = strtol(v, &e, 10);
    if (e == v || *e || errno || x < lo || x > hi) {
        fprintf(stderr, "tutti: %s: \"%s\" is not an integer in [%d, %d]\n", opt, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_float_opt(const char *opt, const char *v, double *out) {
    char *e;
    errno = 0;
    double x = strtod(v, &e);
    if (e == v || *e || errno || isnan(x)) {
        fprintf(stderr, "tutti: %s: \"%s\" is not a number\n", opt, v);
        return -1;
    }
    *out = x;
    return 0;
}

int ens_args_take(ens_args *a, int argc, char **argv, int *i) {
    const char *o = argv[*i], *v;
    double d;
    if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
        if (!(v = need_value(argc, argv, i))) return -1;
        if (a->n_models == TUTTI_ENSEMBLE_MAX_MEMBERS) {
            fprintf(stderr, "tutti: at most %d members\n", TUTTI_ENSEMBLE_MAX_MEMBERS);
            return -1;
        }
        a->models[a->n_models++] = v;
    } else if (!strcmp(o, "-e") || !strcmp(o, "--ensemble")) {
        if (!(a->ens_file = need_value(argc, argv, i))) return -1;
    } else if (!strcmp(o, "-w") || !strcmp(o, "--weights")) {
        if (!(a->weights = need_value(argc, argv, i))) return -1;
    } else if (!strcmp(o, "--temps")) {
        if (!(a->temps = need_value(argc, argv, i))) return -1;
    } else if (!strcmp(o, "--rule")) {
        if (!(v = need_value(argc, argv, i))) return -1;
        if ((a->rule = tutti_rule_parse(v)) < 0) {
            fprintf(stderr, "tutti: --rule: \"%s\" is not one of mix, product, gate, contrastive\n", v);
            return -1;
        }
    } else if (!strcmp(o, "--align")) {
        if (!(v = need_value(argc, argv, i))) return -1;
        if ((a->align = tutti_align_parse(v)) < 0) {
            fprintf(stderr, "tutti: --align: \"%s\" is not one of auto, token, byte, span\n", v);
            return -1;
        }
    } else if (!strcmp(o, "-t") || !strcmp(o, "--threads")) {
        if (!(v = need_value(argc, argv, i)) || parse_int_opt(o, v, 1, 512, &a->n_threads) < 0) return -1;
    } else if (!strcmp(o, "--parallel")) {
        if (!(v = need_value(argc, argv, i)) || parse_int_opt(o, v, 0, 2, &a->parallel) < 0) return -1;
    } else if (!strcmp(o, "-c") || !strcmp(o, "--ctx")) {
        if (!(v = need_value(argc, argv, i)) || parse_int_opt(o, v, 0, 1 << 20, &a->n_ctx) < 0) return -1;
    } else if (!strcmp(o, "--max-hyps")) {
        if (!(v = need_value(argc, argv, i)) || parse_int_opt(o, v, 1, 4096, &a->max_hyps) < 0) return -1;
    } else if (!strcmp(o, "--prune")) {
        if (!(v = need_value(argc, argv, i)) || parse_float_opt(o, v, &d) < 0) return -1;
        if (d < 0 || d >= 1) {
            fprintf(stderr, "tutti: --prune must be in [0, 1)\n");
            return -1;
        }
        a->prune = d;
    } else if (!strcmp(o, "--beta")) {
        if (!(v = need_value(argc, argv, i)) || parse_float_opt(o, v, &d) < 0) return -1;
        a->beta = (float)d;
    } else {
        return 0;
    }
    return 1;
}

tutti_ensemble *ens_args_build(ens_args *a, const char *cmd) {
    int n = 0;
    int rule = a->rule, align = a->align;
    if (a->ens_file) {
        a->file = tutti_ensemble_file_read(a->ens_file);
        if (!a->file) {
            fprintf(stderr, "tutti %s: %s\n", cmd, tutti_last_error());
            return NULL;
        }
        for (int i = 0; i < a->file->n_members && n < TUTTI_ENSEMBLE_MAX_MEMBERS; i++) a->desc[n++] = a->file->members[i];
        if (rule < 0) rule = a->file->rule;
        if (align < 0) align = a->file->align;
    }
    for (int i = 0; i < a->n_models; i++) {
        if (n == TUTTI_ENSEMBLE_MAX_MEMBERS) {
            fprintf(stderr, "tutti %s: at most %d members\n", cmd, TUTTI_ENSEMBLE_MAX_MEMBERS);
            return NULL;
        }
        a->desc[n++] = (tutti_member_desc){.model_path = a->models[i], .weight = NAN, .temp = NAN};
    }
    if (n == 0) {
        fprintf(stderr, "tutti %s: no members: give -m MODEL.gguf (one per member) or -e ENSEMBLE_FILE\n", cmd);
        return NULL;
    }
    float v[TUTTI_ENSEMBLE_MAX_MEMBERS + 1];
    if (a->weights) {
        int k = parse_list("-w", a->weights, v, TUTTI_ENSEMBLE_MAX_MEMBERS + 1);
        if (k < 0) return NULL;
        if (k != n) {
            fprintf(stderr, "tutti %s: -w gives %d weight%s but the ensemble has %d member%s\n", cmd, k,
                    k == 1 ? "" : "s", n, n == 1 ? "" : "s");
            return NULL;
        }
        for (int i = 0; i < n; i++) a->desc[i].weight = v[i];
    }
    if (a->temps) {
        int k = parse_list("--temps", a->temps, v, TUTTI_ENSEMBLE_MAX_MEMBERS + 1);
        if (k < 0) return NULL;
        if (k != n) {
            fprintf(stderr, "tutti %s: --temps gives %d temperature%s but the ensemble has %d member%s\n", cmd, k,
                    k == 1 ? "" : "s", n, n == 1 ? "" : "s");
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            if (!(v[i] > 0)) {
                fprintf(stderr, "tutti %s: --temps: temperature %d is %g; each must be > 0\n", cmd, i + 1, (double)v[i]);
                return NULL;
            }
            a->desc[i].temp = v[i];
        }
    }
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = a->desc;
    p.n_members = n;
    if (rule >= 0) p.rule = (tutti_fusion_rule)rule;
    if (align >= 0) p.align = (tutti_align)align;
    p.n_threads = a->n_threads;
    p.parallel = a->parallel;
    p.n_ctx = a->n_ctx;
    if (a->max_hyps > 0) p.max_hyps = a->max_hyps;
    if (a->prune >= 0) p.prune = a->prune;
    if (a->beta > 0) p.beta = a->beta;
    tutti_ensemble *e = tutti_ensemble_new(&p);
    if (!e) fprintf(stderr, "tutti %s: %s\n", cmd, tutti_last_error());
    return e;
}

/* ---- run ---- */

static void usage(FILE *out) {
    fprintf(out,
            "usage: tutti run -m A.gguf -m B.gguf [-m ...] [options] -p TEXT\n"
            "Fused generation of several models; text on stdout, timings on stderr.\n"
            "%s"
            "  -p, --prompt TEXT     prompt (raw text; each member tokenizes it itself)\n"
            "  -f, --file FILE       prompt from a file\n"
            "  -n N                  tokens to generate (default 128), counted with member 1's tokenizer in\n"
            "                        every alignment: byte/span output is the longest text member 1\n"
            "                        tokenizes into at most N tokens (ending between UTF-8 characters)\n"
            "  --temp T              sampling temperature on the fused distribution (<= 0 greedy)\n"
            "  --top-k N, --top-p P, --min-p P, --repeat-penalty X, --repeat-last-n N, --seed S\n"
            "  --stop S              stop when the output contains S (repeat)\n"
            "  --allow S             the output must be (a prefix of) one of these strings (repeat)\n"
            "  --forbid S            the output never contains S (repeat)\n"
            "  --chat                the prompt is a user message: every member gets its own chat\n"
            "                        template's rendering (tokenized with its own tokenizer); the\n"
            "                        generated text is shared and ends at end of turn (token\n"
            "                        alignment: an end-of-generation token; byte: the end-of-text\n"
            "                        outcome, each member's end-of-generation mass)\n"
            "  --system TEXT         with --chat: a system message before the user message\n"
            "  --verbose-prompt      print every member's prompt token ids on stderr\n",
            ens_args_help());
}

/* Members leaving and contexts filling up, on stderr as they happen. */
static void notice_cb(const char *msg, void *u) {
    (void)u;
    fflush(stdout);
    fprintf(stderr, "\ntutti run: %s\n", msg);
}

static int write_cb(const char *b, size_t n, void *u) {
    (void)u;
    fwrite(b, 1, n, stdout);
    fflush(stdout);
    return 0;
}

#define MAX_STRS 64

int tutti_cmd_run(int argc, char **argv) {
    ens_args a;
    ens_args_init(&a);
    tutti_sampler_params sp = tutti_sampler_default_params();
    const char *prompt = NULL, *prompt_file = NULL, *system = NULL;
    bool seed_set = false, chat = false, verbose_prompt = false;
    int n_gen = 128;
    const char *stop[MAX_STRS], *allow[MAX_STRS], *forbid[MAX_STRS];
    int n_stop = 0, n_allow = 0, n_forbid = 0;
    for (int i = 0; i < argc; i++) {
        int r = ens_args_take(&a, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *o = argv[i], *v;
        double d;
        int k;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(o, "--chat")) {
            chat = true;
        } else if (!strcmp(o, "--verbose-prompt")) {
            verbose_prompt = true;
        } else if (!strcmp(o, "--system")) {
            if (!(system = need_value(argc, argv, &i))) return 1;
        } else if (!strcmp(o, "-p") || !strcmp(o, "--prompt")) {
            if (!(prompt = need_value(argc, argv, &i))) return 1;
        } else if (!strcmp(o, "-f") || !strcmp(o, "--file")) {
            if (!(prompt_file = need_value(argc, argv, &i))) return 1;
        } else if (!strcmp(o, "-n") || !strcmp(o, "--n-predict")) {
            if (!(v = need_value(argc, argv, &i)) || parse_int_opt(o, v, 0, 1 << 24, &n_gen) < 0) return 1;
        } else if (!strcmp(o, "--temp")) {
            if (!(v = need_value(argc, argv, &i)) || parse_float_opt(o, v, &d) < 0) return 1;
            sp.temp = (float)d;
        } else if (!strcmp(o, "--top-k")) {
            if (!(v = need_value(argc, argv, &i)) || parse_int_opt(o, v, 0, 1 << 30, &k) < 0) return 1;
            sp.top_k = k;
        } else if (!strcmp(o, "--top-p")) {
            if (!(v = need_value(argc, argv, &i)) || parse_float_opt(o, v, &d) < 0) return 1;
            sp.top_p = (float)d;
        } else if (!strcmp(o, "--min-p")) {
            if (!(v = need_value(argc, argv, &i)) || parse_float_opt(o, v, &d) < 0) return 1;
            sp.min_p = (float)d;
        } else if (!strcmp(o, "--repeat-penalty")) {
            if (!(v = need_value(argc, argv, &i)) || parse_float_opt(o, v, &d) < 0) return 1;
            sp.repeat_penalty = (float)d;
        } else if (!strcmp(o, "--repeat-last-n")) {
            if (!(v = need_value(argc, argv, &i)) || parse_int_opt(o, v, 0, 1 << 20, &k) < 0) return 1;
            sp.repeat_last_n = k;
        } else if (!strcmp(o, "--seed") || !strcmp(o, "-s")) {
            if (!(v = need_value(argc, argv, &i))) return 1;
            char *e;
            errno = 0;
            unsigned long long s = strtoull(v, &e, 10);
            if (e == v || *e || errno) {
                fprintf(stderr, "tutti run: --seed: \"%s\" is not a non-negative integer\n", v);
                return 1;
            }
            sp.seed = s;
            seed_set = true;
        } else if (!strcmp(o, "--stop") || !strcmp(o, "--allow") || !strcmp(o, "--forbid")) {
            if (!(v = need_value(argc, argv, &i))) return 1;
            const char **arr = o[2] == 's' ? stop : o[2] == 'a' ? allow : forbid;
            int *cnt = o[2] == 's' ? &n_stop : o[2] == 'a' ? &n_allow : &n_forbid;
            if (*cnt == MAX_STRS) {
                fprintf(stderr, "tutti run: at most %d %s strings\n", MAX_STRS, o + 2);
                return 1;
            }
            arr[(*cnt)++] = v;
        } else {
            fprintf(stderr, "tutti run: unknown option %s (see tutti run --help)\n", o);
            return 2;
        }
    }
    if (system && !chat) {
        fprintf(stderr, "tutti run: --system needs --chat\n");
        return 2;
    }
    if (!seed_set) sp.seed = (uint64_t)time(NULL); /* as tutti generate */
    char *buf = NULL;
    size_t plen = 0;
    if (prompt_file) {
        if (!(buf = cli_read_file(prompt_file, &plen))) return 1;
        prompt = buf;
    } else if (prompt) {
        plen = strlen(prompt);
    } else {
        prompt = "";
    }
    tutti_ensemble *e = ens_args_build(&a, "run");
    if (!e) {
        free(buf);
        ens_args_free(&a);
        return 1;
    }
    tutti_ensemble_set_notice(e, notice_cb, NULL);
    tutti_mask m = {.allowed = allow, .n_allowed = n_allow, .forbidden = forbid, .n_forbidden = n_forbid,
                    .stop = stop, .n_stop = n_stop, .max_tokens = n_gen};
    int n_mem = tutti_ensemble_n_members(e);
    int32_t *ids[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0}, n_ids[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0};
    int rc = 0;
    if (chat) {
        /* every member renders its own template and tokenizes it with its
         * own tokenizer; the continuation is shared */
        for (int i = 0; i < n_mem && rc == 0; i++) {
            char label[512];
            snprintf(label, sizeof label, "member %d (%s)", i + 1, tutti_ensemble_member_path(e, i));
            ids[i] = cli_chat_tokens_of(tutti_ensemble_member_model(e, i), n_mem > 1 ? label : NULL, system, prompt,
                                        &n_ids[i]);
            if (!ids[i]) rc = -2; /* message printed */
        }
    } else if (verbose_prompt) {
        for (int i = 0; i < n_mem && rc == 0; i++) {
            const tutti_vocab *v = tutti_model_vocab(tutti_ensemble_member_model(e, i));
            ids[i] = cli_tokenize(v, prompt, plen, tutti_vocab_add_bos(v), false, &n_ids[i]);
            if (!ids[i]) rc = -2;
        }
    }
    if (verbose_prompt && rc == 0)
        for (int i = 0; i < n_mem; i++) {
            fprintf(stderr, "member %d prompt ids:", i + 1);
            for (int32_t k = 0; k < n_ids[i]; k++) fprintf(stderr, " %d", ids[i][k]);
            fprintf(stderr, "\n");
        }
    tutti_ensemble_stats st;
    if (rc == 0 && n_gen > 0) {
        /* stdout holds the generated text only, exactly as tutti generate's */
        rc = chat ? tutti_ensemble_generate_ids(e, (const int32_t *const *)ids, n_ids, &sp, &m, write_cb, NULL, &st)
                  : tutti_ensemble_generate(e, prompt, plen, &sp, &m, write_cb, NULL, &st);
    }
    fflush(stdout);
    if (rc == TUTTI_ERR) {
        fprintf(stderr, "tutti run: %s\n", tutti_last_error());
    } else if (rc == 0 && n_gen > 0) {
        tutti_align al = tutti_ensemble_align(e);
        const char *unit = al == TUTTI_ALIGN_TOKEN ? "token" : "byte";
        fprintf(stderr, "\n%s alignment, rule %s: %d %ss (%d bytes) in %.3f s\n", tutti_align_name(al),
                tutti_rule_name(tutti_ensemble_rule(e)), st.n_units, unit, st.n_bytes, st.t_total_s);
        for (int i = 0; i < tutti_ensemble_n_members(e); i++)
            fprintf(stderr, "  member %d %-40s w=%.3g tau=%.3g: %6lld tokens evaluated, forward %.3f s%s\n", i + 1,
                    tutti_ensemble_member_path(e, i), (double)tutti_ensemble_member_weight(e, i),
                    (double)tutti_ensemble_member_temp(e, i), (long long)st.n_member_tokens[i], st.t_member_s[i],
                    !st.member_left[i] ? ""
                    : st.member_left_reason[i] == TUTTI_LEFT_PRUNED ? " (left: its hypotheses were pruned)"
                                                                    : " (left: its tokens cannot spell the text)");
        fprintf(stderr, "  fusion overhead (outside forward passes): %.3f s = %.3f ms per %s\n", st.t_fusion_s,
                st.n_units ? 1e3 * st.t_fusion_s / st.n_units : 0.0, unit);
    }
    for (int i = 0; i < n_mem; i++) free(ids[i]);
    tutti_ensemble_free(e);
    ens_args_free(&a);
    free(buf);
    return rc < 0 ? 1 : 0;
}
