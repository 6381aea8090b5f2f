/* `tutti run`: fused generation of an ensemble.
 *
 *   tutti run -m A.gguf -m B.gguf [-m ...] [-w 0.5,0.3,0.2] [--rule mix|product|gate|contrastive]
 *             [--align auto|token|byte|span] -p TEXT [-n N] [--temp T] [--seed S] ...
 *
 * Fused text on stdout, per-member timings and the fusion overhead on
 * stderr.  The ensemble flags it shares with `tutti eval`, `fit` and
 * `serve` are ens_args.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "cli/grammar_args.h"
#include "cli/run_pipeline.h"
#include "tutti.h"

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
    return cli_interrupted(); /* Ctrl-C: stop after this unit */
}

/* The summary: what was generated and why it ended (the first line),
 * then each member's work and the fusion's overhead.  In byte
 * and span alignment the fusion samples bytes, and the output can be
 * shorter than what was sampled: -n counts member 1's tokens and cuts the
 * text back to the longest prefix it allows, a stop string is not printed,
 * and an unfinished UTF-8 character at the end is held back.  Last, the
 * draft's line. */
static void print_summary(const tutti_ensemble *e, const tutti_ensemble_stats *st, int32_t n_gen, bool stops,
                          const cli_draft *draft) {
    tutti_align al = tutti_ensemble_align(e);
    const char *unit = al == TUTTI_ALIGN_TOKEN ? "token" : "byte";
    double t = st->t_total_s > 0 ? st->t_total_s : 1e-9;
    char what[256];
    if (al == TUTTI_ALIGN_TOKEN)
        snprintf(what, sizeof what, "%d tokens generated (%d bytes of text)", st->n_units, st->n_bytes);
    else if (st->n_units == st->n_bytes) snprintf(what, sizeof what, "%d bytes generated", st->n_units);
    else
        snprintf(what, sizeof what, "%d bytes sampled, %d output (the last %d cut: %s)", st->n_units, st->n_bytes,
                 st->n_units - st->n_bytes,
                 st->at_limit ? "-n counts member 1's tokens and ends the text at the last whole one"
                 : stops      ? "a stop string, which is not printed"
                              : "an unfinished UTF-8 character");
    char why[256];
    if (st->ctx_full_member >= 0)
        snprintf(why, sizeof why, "length: member %d's context is full", st->ctx_full_member + 1);
    else if (st->finish == TUTTI_FINISH_LENGTH) snprintf(why, sizeof why, "length: -n %d reached", n_gen);
    else snprintf(why, sizeof why, "stop");
    cli_info("\n%s alignment, rule %s: %s in %.3f s (%.1f %ss/s); finish: %s\n", tutti_align_name(al),
             tutti_rule_name(tutti_ensemble_rule(e)), what, st->t_total_s, st->n_units / t, unit, why);
    for (int i = 0; i < tutti_ensemble_n_members(e); i++)
        cli_info("  member %d %-40s w=%.3g tau=%.3g: %6lld tokens evaluated in %lld forward passes, forward %.3f s "
                 "(%.1f tokens/s)%s\n",
                 i + 1, tutti_ensemble_member_path(e, i), (double)tutti_ensemble_member_weight(e, i),
                 (double)tutti_ensemble_member_temp(e, i), (long long)st->n_member_tokens[i],
                 (long long)st->n_member_passes[i], st->t_member_s[i],
                 st->t_member_s[i] > 0 ? (double)st->n_member_tokens[i] / st->t_member_s[i] : 0.0,
                 !st->member_left[i]                              ? ""
                 : st->member_left_reason[i] == TUTTI_LEFT_PRUNED ? " (left: its hypotheses were pruned)"
                                                                  : " (left: its tokens cannot spell the text)");
    cli_info("  fusion overhead (outside forward passes): %.3f s = %.3f ms per %s\n", st->t_fusion_s,
             st->n_units ? 1e3 * st->t_fusion_s / st->n_units : 0.0, unit);
    if (tutti_ensemble_select(e) >= 0)
        cli_info("selective fusion (D >= %g nats): %d of %d %ss fused (%.1f %%)\n", tutti_ensemble_select(e),
                 st->n_fused, st->n_units, unit, st->n_units ? 100.0 * st->n_fused / st->n_units : 100.0);
    if (tutti_ensemble_mix_sample(e))
        cli_info("mixture sampling: %d of %d %ss drawn from one member's forward pass\n", st->n_mix_sampled,
                 st->n_units, unit);
    cli_draft_report("run", draft, st, al == TUTTI_ALIGN_BYTE ? "byte" : "token");
}

/* With --chat, every member's rendering of its own chat template in its own
 * tokens (ids[i], n_ids[i]: owned by the caller); with --verbose-prompt,
 * every member's prompt ids, printed on stderr.  0, or -2 when a member
 * cannot (the message is printed). */
static int member_prompt_ids(tutti_ensemble *e, bool chat, bool verbose_prompt, const char *system, const char *prompt,
                             size_t plen, int32_t **ids, int32_t *n_ids) {
    const int n_mem = tutti_ensemble_n_members(e);
    int rc = 0;
    if (chat) {
        /* every member renders its own template and tokenizes it with its
         * own tokenizer; the continuation is shared */
        for (int i = 0; i < n_mem && rc == 0; i++) {
            char label[512];
            snprintf(label, sizeof label, "member %d (%s)", i + 1, tutti_ensemble_member_path(e, i));
            /* from the member's file when its model is elsewhere (an MPI rank, a split member) */
            ids[i] = cli_chat_tokens_with(tutti_ensemble_member_vocab(e, i),
                                          tutti_ensemble_member_meta_str(e, i, "tokenizer.chat_template"),
                                          n_mem > 1 ? label : NULL, system, prompt, &n_ids[i]);
            if (!ids[i]) rc = -2; /* message printed */
        }
    } else if (verbose_prompt) {
        for (int i = 0; i < n_mem && rc == 0; i++) {
            const tutti_vocab *v = tutti_ensemble_member_vocab(e, i);
            ids[i] = cli_tokenize(v, prompt, plen, tutti_vocab_add_bos(v), false, &n_ids[i]);
            if (!ids[i]) rc = -2;
        }
    }
    if (verbose_prompt && rc == 0)
        for (int i = 0; i < n_mem; i++) {
            char label[32];
            snprintf(label, sizeof label, "member %d", i + 1);
            cli_print_prompt_ids(label, ids[i], n_ids[i]);
        }
    return rc;
}

/* --mix-sample: the plain mixture unless the flags say otherwise (then
 * the ordinary step, with the library's notice), and the members in turn:
 * one member runs per token, with all the threads. */
static void mix_sample_defaults(cli_sampling *cs, ens_args *a) {
    if (!cli_given("--temp")) cs->sp.temp = 1.0f;
    if (!cli_given("--top-k")) cs->sp.top_k = 0;
    if (!cli_given("--top-p")) cs->sp.top_p = 1.0f;
    if (!cli_given("--min-p")) cs->sp.min_p = 0.0f;
    if (!cli_given("--parallel")) a->parallel = 1;
}

int tutti_cmd_run(int argc, char **argv) {
    ens_args a;
    ens_args_init(&a);
    cli_sampling cs;
    cli_sampling_init(&cs);
    a.ctx_shift = true; /* llama.cpp's context shift, unless --no-context-shift */
    const char *prompt = NULL, *prompt_file = NULL, *system = NULL;
    bool chat = false, verbose_prompt = false, escape = true, mix_sample = false;
    int32_t n_gen = 128;
    cli_strs stop_s = {.n = 0}, allow_s = {.n = 0}, forbid_s = {.n = 0};
    cli_grammar ga = {0};
    cli_draft draft;
    cli_draft_init(&draft);
    const cli_opt opts[] = {
        CLI_STR("-p,--prompt", "TEXT", &prompt, "prompt (raw text; each member tokenizes it itself)", "none"),
        CLI_STR("-f,--file", "FILE", &prompt_file, "read the prompt from FILE (one trailing newline is dropped)",
                "none"),
        CLI_FLAG("--escape", &escape,
                 "process escapes (\\n \\r \\t \\' \\\" \\\\ \\xHH) in the prompt and --stop\n"
                 "(-e is --ensemble here)"),
        CLI_FLAG_OFF("--no-escape", &escape, "take the prompt and --stop strings literally"),
        CLI_INT("-n,--n-predict", "N", &n_gen, -1, 1 << 24,
                "tokens to generate, counted with member 1's tokenizer in every alignment\n"
                "(byte/span: the longest text member 1 tokenizes into at most N tokens,\n"
                "ending between UTF-8 characters); -1 = until end of text or a full context",
                NULL),
        CLI_CTX_SHIFT_OPTS(&a.ctx_shift, &a.n_keep, "each member's first N\nof its own prompt tokens"),
        CLI_STRS("--stop", "TEXT", &stop_s, "stop when the output contains TEXT (not printed; repeatable)"),
        CLI_STRS("--allow", "TEXT", &allow_s, "the output must be (a prefix of) one of these strings (repeatable)"),
        CLI_STRS("--forbid", "TEXT", &forbid_s, "the output never contains TEXT (repeatable)"),
        CLI_FLAG("--chat", &chat,
                 "the prompt is a user message: every member gets its own chat\n"
                 "template's rendering (tokenized with its own tokenizer); the\n"
                 "generated text is shared and ends at end of turn (token\n"
                 "alignment: an end-of-generation token; byte: the end-of-text\n"
                 "outcome, each member's end-of-generation mass)"),
        CLI_STR("--system", "TEXT", &system, "with --chat: a system message before the user message", "none"),
        CLI_FLAG("--verbose-prompt", &verbose_prompt, "print every member's prompt token ids on stderr"),
        CLI_INCLUDE(a.opts),
        CLI_SECTION("sampling (on the fused distribution)"),
        CLI_SAMPLING_OPTS(&cs),
        CLI_FLAG("--mix-sample", &mix_sample,
                 "mix rule, token alignment: draw a member by its weight, then the token\n"
                 "from that member's own distribution: a draw from the mixture, for one\n"
                 "member's forward pass per token (the others run the tokens they missed\n"
                 "in one pass when next drawn; with --adapt the member follows the fixed-\n"
                 "share chain). Exact only for the plain mixture, so it sets --temp 1\n"
                 "--top-k 0 --top-p 1 --min-p 0 unless given, and members in turn unless\n"
                 "--parallel; other settings (a grammar, --forbid, ...) take the ordinary\n"
                 "step with a notice. A seed gives another text than without it, drawn from\n"
                 "the same distribution"),
        CLI_GRAMMAR_OPTS(&ga),
        CLI_SECTION("drafting (speculative decoding; token or byte alignment)"),
        CLI_DRAFT_OPTS(&draft),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "run",
        .usage = "(-m A.gguf -m B.gguf ... | -e ENSEMBLE_FILE) (-p TEXT | -f FILE) [options]",
        .description = "Fused generation of several models. The generated text alone goes to stdout; the seed,\n"
                       "speed (tokens/s) and per-member timings go to stderr.",
        .opts = opts,
        .epilog = "Ctrl-C stops the generation after the current token or byte: the text so far and the\n"
                  "timings are printed and the exit status is 130. Exit status 2: bad flags or values;\n"
                  "1: runtime error.\n\n" ENS_FILE_HELP,
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if (system && !chat) return cli_usage_error("--system needs --chat");
    if (prompt && prompt_file) return cli_usage_error("-p and -f both give the prompt; use one");
    if (a.n_keep < 0)
        return cli_usage_error("--keep -1 (the whole prompt) needs one tokenizer: give N >= 0 tokens per member");
    a.ctx_shift &= n_gen >= 0; /* -n -1 means "until a context is full" */
    if (mix_sample) mix_sample_defaults(&cs, &a);
    if (a.ens_file && cli_is_pipeline_file(a.ens_file))
        return cli_run_pipeline(&a, &cs, prompt, prompt_file, escape, n_gen);
    int gst;
    tutti_grammar *grammar = cli_grammar_build(&ga, &gst); /* before loading: fail fast */
    if (gst) return gst;
    if ((pr = ens_args_check(&a)) != CLI_RUN || (pr = cli_draft_check(&draft)) != CLI_RUN) {
        tutti_grammar_free(grammar);
        ens_args_free(&a);
        return pr;
    }
    /* escapes apply to --stop as to the prompt (llama.cpp: reverse prompts) */
    char *owned[CLI_MAX_STRS] = {0};
    for (int k = 0; escape && k < stop_s.n; k++) {
        if ((owned[k] = strdup(stop_s.v[k]))) cli_process_escapes(owned[k], strlen(owned[k]));
        if (owned[k]) stop_s.v[k] = owned[k];
    }
    const char **stop = stop_s.v, **allow = allow_s.v, **forbid = forbid_s.v;
    int n_stop = stop_s.n, n_allow = allow_s.n, n_forbid = forbid_s.n;
    size_t plen = 0;
    char *buf = cli_prompt_text(prompt, prompt_file, escape, &plen);
    tutti_ensemble *e = buf ? ens_args_build(&a, "run") : NULL;
    if (e && mix_sample) tutti_ensemble_set_mix_sample(e, true);
    if (e && cli_draft_apply(e, &draft) != CLI_RUN) {
        tutti_ensemble_free(e);
        e = NULL;
    }
    if (!e) {
        free(buf);
        tutti_grammar_free(grammar);
        ens_args_free(&a);
        for (int k = 0; k < CLI_MAX_STRS; k++) free(owned[k]);
        return buf ? a.status : 1;
    }
    prompt = buf;
    cs.sp.seed = cli_seed_resolve(cs.sp.seed);
    tutti_ensemble_set_notice(e, notice_cb, NULL);
    tutti_mask m = {.allowed = allow,
                    .n_allowed = n_allow,
                    .forbidden = forbid,
                    .n_forbidden = n_forbid,
                    .stop = stop,
                    .n_stop = n_stop,
                    .max_tokens = n_gen,
                    .grammar = grammar,
                    .ignore_eos = cs.ignore_eos};
    int n_mem = tutti_ensemble_n_members(e);
    int32_t *ids[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0}, n_ids[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0};
    int rc = member_prompt_ids(e, chat, verbose_prompt, system, prompt, plen, ids, n_ids);
    tutti_ensemble_stats st;
    cli_catch_sigint();
    if (rc == 0 && n_gen != 0) {
        /* stdout holds the generated text only, exactly as tutti generate's */
        rc = chat ? tutti_ensemble_generate_ids(e, (const int32_t *const *)ids, n_ids, &cs.sp, &m, write_cb, NULL, &st)
                  : tutti_ensemble_generate(e, prompt, plen, &cs.sp, &m, write_cb, NULL, &st);
    }
    fflush(stdout);
    if (rc == TUTTI_ERR) {
        fprintf(stderr, "tutti run: %s\n", tutti_last_error());
    } else if (rc == 0 && n_gen != 0) {
        if (cli_interrupted()) cli_info("\ntutti run: interrupted (Ctrl-C)\n");
        print_summary(e, &st, n_gen, n_stop > 0, &draft);
    }
    for (int i = 0; i < n_mem; i++) free(ids[i]);
    tutti_ensemble_free(e);
    ens_args_free(&a);
    tutti_grammar_free(grammar);
    free(buf);
    for (int k = 0; k < CLI_MAX_STRS; k++) free(owned[k]);
    return rc < 0 ? 1 : cli_interrupted() ? CLI_EXIT_INTERRUPTED : 0;
}
