/* tutti generate: one model, one prompt, sampled continuation on stdout.
 *
 * A one-member `tutti run`: the model is an ensemble of one member in token
 * alignment, generated through the library's one generation loop
 * (src/fusion/gen.c: the same sampler, stop strings, --ignore-eos, grammar,
 * limits), whose single member at temperature 1 hands its raw logits to the
 * sampler, exactly as a plain session would.  Only the prompt (its own
 * tokenization, --special, --chat) and the messages are generate's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/grammar_args.h"

/* The text on stdout, followed by a matcher of the grammar (NULL: none)
 * to tell at the end whether it is complete. */
static int write_cb(const char *b, size_t n, void *u) {
    tutti_grammar_matcher *m = u;
    fwrite(b, 1, n, stdout);
    fflush(stdout);
    if (m) (void)tutti_grammar_matcher_accept(m, b, n);
    return cli_interrupted(); /* Ctrl-C: stop after this token */
}

/* The prompt's ids (chat template, or its text with --special) in vocab,
 * the tokenizer of model (NULL when split by layers: the file at path),
 * NULL after the message. */
static int32_t *prompt_ids(const tutti_model *model, const char *path, const tutti_vocab *vocab, bool chat,
                           const char *system, const char *text, size_t len, bool parse_special, int32_t *n_ids) {
    const char *key = "tokenizer.chat_template";
    int32_t *ids =
        chat ? cli_chat_tokens_with(vocab, model ? tutti_model_meta_str(model, key) : tutti_file_meta_str(path, key),
                                    NULL, system, text, n_ids)
             : cli_tokenize(vocab, text, len, tutti_vocab_add_bos(vocab), parse_special, n_ids);
    if (ids && *n_ids == 0) {
        cli_error("the prompt gives no tokens and the model adds no BOS; give a non-empty prompt");
        free(ids);
        return NULL;
    }
    if (ids && !chat) cli_warn_double_bos(vocab, ids, *n_ids);
    return ids;
}

/* A full context ends the generation; the warning is generate's (below). */
static void notice_cb(const char *msg, void *u) { (void)msg, (void)u; }

/* The MPI split flags: by layers (counts NULL = off, "" = by memory;
 * ubatch) or by routed experts (the one member splits them; a dense model
 * is refused).  CLI_RUN or the exit status. */
static int split_flags(const char *counts, int32_t ubatch, bool experts) {
    int pr = cli_split_check(counts, ubatch);
    if (pr != CLI_RUN) return pr;
    if (counts && tutti_mpi_split_members(counts[0] ? counts : NULL, ubatch, NULL, 0) < 0)
        return cli_usage_error("%s", tutti_last_error());
    return cli_split_experts_check(experts, counts, true);
}

/* The ensemble of one member: path, its model already loaded (NULL when
 * split by layers over MPI ranks: the member loads its part); n_keep < 0:
 * no context shift, else the shift keeps BOS and n_keep tokens after it. */
static tutti_ensemble *one_member(const char *path, const tutti_model *model, int32_t n_ctx, int32_t n_threads,
                                  int32_t n_keep) {
    tutti_member_desc d = {.model_path = path, .weight = NAN, .temp = NAN};
    const tutti_model *models[1] = {model};
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = &d;
    p.n_members = 1;
    p.align = TUTTI_ALIGN_TOKEN;
    p.models = model ? models : NULL;
    p.n_ctx = n_ctx;
    p.n_threads = n_threads;
    p.ctx_shift = n_keep >= 0;
    p.n_keep = n_keep >= 0 ? n_keep : 0;
    tutti_ensemble *e = tutti_ensemble_new(&p);
    if (!e) cli_error("%s", tutti_last_error());
    return e;
}

/* The warnings and timings after the generation; returns the exit status
 * (rc, or CLI_EXIT_INTERRUPTED after Ctrl-C).  n_keep: the positions a
 * context shift keeps, -1 without the shift; draft: the draft's line. */
static int report_end(int rc, const tutti_ensemble_stats *st, int32_t n_ids, int32_t n_ctx_used, int32_t n_predict,
                      const tutti_grammar_matcher *gm, int32_t n_keep, const cli_draft *draft) {
    double t_prompt = st->t_prompt_s, t_gen = st->t_total_s - st->t_prompt_s;
    if (rc == 0 && st->ctx_full_member >= 0 && n_predict >= 0) /* -n -1 asks for exactly this end */
        cli_warn("\ncontext full (%d tokens); raise -c for longer output", n_ctx_used);
    if (gm && rc == 0 && !cli_interrupted() && !tutti_grammar_matcher_is_complete(gm))
        cli_warn("stopped before the grammar was complete (raise -n or -c)");
    if (cli_interrupted()) {
        cli_info("\ntutti generate: interrupted (Ctrl-C)\n");
        rc = CLI_EXIT_INTERRUPTED;
    }
    /* the timings once the prompt went through the model (not after an
     * error before it, e.g. a grammar no token can start) */
    if (rc == 1 && st->n_prompt_evaluated[0] == 0) return rc;
    cli_info("\ntutti generate: prompt %d tokens in %.3f s (%.1f tokens/s); generated %d tokens in %.3f s (%.1f "
             "tokens/s)\n",
             n_ids, t_prompt, n_ids / (t_prompt > 0 ? t_prompt : 1e-9), st->n_units, t_gen,
             st->n_units / (t_gen > 0 ? t_gen : 1e-9));
    cli_draft_report("generate", draft, st, "token");
    if (n_keep >= 0 && n_ids + st->n_units > n_ctx_used)
        cli_info(
            "tutti generate: the context (%d tokens) filled and shifted: its oldest tokens were dropped, the first "
            "%d kept (--keep; --no-context-shift stops at a full context instead)\n",
            n_ctx_used, n_keep);
    return rc;
}

/* Escapes processed in the --stop strings (llama.cpp: reverse prompts), into
 * copies owned[] (freed by the caller); -1 when out of memory. */
static int escape_stops(cli_strs *stop, char **owned) {
    for (int k = 0; k < stop->n; k++) {
        if (!(owned[k] = strdup(stop->v[k]))) return -1;
        cli_process_escapes(owned[k], strlen(owned[k]));
        stop->v[k] = owned[k];
    }
    return 0;
}

int cmd_generate(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL, *system = NULL;
    bool chat = false, verbose_prompt = false, escape = true;
    int32_t n_predict = 128, n_threads = 0, n_ctx = CLI_CTX_UNSET, n_keep = 0;
    bool ctx_shift = true;
    bool parse_special = false;
    cli_strs stop = {.n = 0};
    cli_sampling cs;
    cli_sampling_init(&cs);
    tutti_sampler_params *sp = &cs.sp;
    cli_grammar ga = {0};
    const char *split_counts = NULL; /* --split-layers: NULL = off, "" = by memory */
    int32_t split_ub = 0;
    bool split_experts = false; /* --split-experts */
    cli_draft draft;
    cli_draft_init(&draft);
    cli_opt opts[] = {
        {"-m,--model", "FILE", CLI_T_STR, 0, 0, &model_path, "GGUF model file", "none", NULL, CLI_ONCE},
        CLI_HF_OPTS(&model_path, CLI_T_STR, CLI_ONCE),
        CLI_STR("-p,--prompt", "TEXT", &prompt, "prompt (BOS is added when the model's metadata asks for it)", "none"),
        CLI_STR("-f,--file", "FILE", &prompt_file, "read the prompt from FILE (one trailing newline is dropped)",
                "none"),
        CLI_FLAG("-e,--escape", &escape, "process escapes (\\n \\r \\t \\' \\\" \\\\ \\xHH) in the prompt and --stop"),
        CLI_FLAG_OFF("--no-escape", &escape, "take the prompt and --stop strings literally"),
        CLI_INT("-n,--n-predict", "N", &n_predict, -1, 1 << 24,
                "tokens to generate; -1 = until end of text or a full context", NULL),
        CLI_THREADS_OPT(&n_threads),
        CLI_CTX_OPT(&n_ctx, ""),
        CLI_CTX_SHIFT_OPTS(&ctx_shift, &n_keep, "the prompt's first N\n(-1 = the whole prompt)"),
        CLI_STRS("--stop", "TEXT", &stop, "stop when the output contains TEXT (not printed; repeatable)"),
        CLI_FLAG("--special", &parse_special, "parse control-token text in the prompt (e.g. <|eot_id|>)"),
        CLI_FLAG("--chat", &chat,
                 "the prompt is a user message, formatted with the model's own\n"
                 "chat template; generation stops at the end-of-turn token"),
        CLI_STR("--system", "TEXT", &system, "with --chat: a system message before the user message", "none"),
        CLI_FLAG("--verbose-prompt", &verbose_prompt, "print the prompt's token ids on stderr"),
        CLI_SECTION("sampling"),
        CLI_SAMPLING_OPTS(&cs),
        CLI_GRAMMAR_OPTS(&ga),
        CLI_SECTION("drafting (speculative decoding)"),
        CLI_DRAFT_OPTS(&draft),
        CLI_SECTION("one model over MPI ranks (mpirun -np K tutti generate ...)"),
        CLI_SPLIT_OPTS(&split_counts, &split_ub, "the model"),
        CLI_SPLIT_EXPERTS_OPT(&split_experts),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "generate",
        .usage = "(-m MODEL | -hf REPO[:QUANT]) (-p TEXT | -f FILE) [options]",
        .description = "Generates a continuation of the prompt with one model. The generated text alone goes to\n"
                       "stdout; the seed, loading progress and speed (tokens/s) go to stderr.",
        .opts = opts,
        .epilog = "Ctrl-C stops the generation after the current token: the text so far and the timings\n"
                  "are printed and the exit status is 130. Exit status 2: bad flags or values; 1: runtime\n"
                  "error (unreadable model, prompt longer than the context, ...).",
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if ((pr = split_flags(split_counts, split_ub, split_experts)) != CLI_RUN) return pr;
    const bool split = split_counts != NULL;
    if (!model_path) return cli_usage_error("need -m MODEL or -hf REPO[:QUANT] (see tutti generate --help)");
    if (!prompt && !prompt_file) return cli_usage_error("need -p TEXT or -f FILE (see tutti generate --help)");
    if (prompt && prompt_file) return cli_usage_error("-p and -f both give the prompt; use one");
    if (system && !chat) return cli_usage_error("--system needs --chat");
    if ((pr = cli_resolve_model(&model_path)) != CLI_RUN || (pr = cli_draft_check(&draft)) != CLI_RUN) return pr;
    char *stop_owned[CLI_MAX_STRS] = {0};
    if (escape && escape_stops(&stop, stop_owned) < 0) return cli_error("out of memory");
    int gst;
    tutti_grammar *grammar = cli_grammar_build(&ga, &gst); /* before loading: fail fast */
    if (gst) return gst;
    int rc = 1;
    size_t prompt_len = 0;
    char *text = cli_prompt_text(prompt, prompt_file, escape, &prompt_len);
    tutti_model *model = NULL;
    tutti_vocab *own_vocab = NULL; /* split by layers: the tokenizer alone */
    tutti_ensemble *e = NULL;
    int32_t *ids = NULL, n_ids = 0;
    tutti_grammar_matcher *gm = NULL;
    if (!text) goto done;

    double t0 = cli_now();
    tutti_model_params mp = tutti_model_default_params();
    mp.verbose = !cli_quiet;
    /* split by layers: the member loads rank 0's part of the model itself;
     * split by experts: rank 0 places only its own experts */
    if (!split &&
        !(model = split_experts ? tutti_mpi_experts_load(model_path, &mp) : tutti_model_load(model_path, &mp))) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    /* the prompt first: --keep -1 keeps all of it */
    const tutti_vocab *vocab = model ? tutti_model_vocab(model) : (own_vocab = tutti_vocab_load(model_path));
    if (!vocab) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    if (!(ids = prompt_ids(model, model_path, vocab, chat, system, text, prompt_len, parse_special, &n_ids))) goto done;
    int32_t ctx =
        model ? cli_ctx_for(model, n_ctx, NULL) : cli_ctx_for_train(cli_ctx_train_of_file(model_path), n_ctx, NULL);
    /* llama.cpp's context shift; -n -1 asks for "until the context is
     * full", which a shift would make endless.  llama.cpp: --keep N prompt
     * tokens besides BOS, -1 (or more than the prompt has) = the whole
     * prompt (the session caps it) */
    int32_t bos = tutti_vocab_add_bos(vocab) ? 1 : 0;
    int32_t keep = !(ctx_shift && n_predict >= 0 && !split) ? -1 : n_keep < 0 || n_keep > n_ids ? n_ids - bos : n_keep;
    if (!(e = one_member(model_path, model, ctx, n_threads, keep)) || cli_draft_apply(e, &draft) != CLI_RUN) goto done;
    double t_load = cli_now() - t0;
    int32_t n_ctx_used = tutti_ensemble_member_n_ctx(e, 0);
    if (n_ids > n_ctx_used) {
        cli_error("the prompt is %d tokens, longer than the context (%d); raise -c or shorten the prompt", n_ids,
                  n_ctx_used);
        goto done;
    }
    sp->seed = cli_seed_resolve(sp->seed); /* printed once the run can go ahead */
    cli_info("tutti generate: %s loaded in %.2f s; prompt %d tokens\n", model_path, t_load, n_ids);
    if (verbose_prompt) cli_print_prompt_ids("", ids, n_ids);
    tutti_mask m = {
        .stop = stop.v, .n_stop = stop.n, .max_tokens = n_predict, .grammar = grammar, .ignore_eos = cs.ignore_eos};
    if (grammar && !(gm = tutti_grammar_matcher_new(grammar))) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    tutti_ensemble_set_notice(e, notice_cb, NULL);
    tutti_ensemble_stats st = {.ctx_full_member = -1};
    cli_catch_sigint();
    rc = 0;
    if (n_predict != 0) {
        const int32_t *const pids[1] = {ids};
        if (tutti_ensemble_generate_ids(e, pids, &n_ids, sp, &m, write_cb, gm, &st) < 0) {
            fflush(stdout);
            cli_error("%s", tutti_last_error());
            rc = 1;
        }
    }
    fflush(stdout);
    rc = report_end(rc, &st, n_ids, n_ctx_used, n_predict, gm, keep >= 0 ? keep + bos : -1, &draft);
done:
    tutti_ensemble_free(e);
    tutti_model_free(model);
    tutti_vocab_free(own_vocab);
    tutti_grammar_matcher_free(gm);
    tutti_grammar_free(grammar);
    free(ids);
    free(text);
    for (int k = 0; k < CLI_MAX_STRS; k++) free(stop_owned[k]);
    return rc;
}
