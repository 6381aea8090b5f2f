/* tutti generate: one model, one prompt, sampled continuation on stdout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/grammar_args.h"
#include "grammar/constrain.h"
#include "mpi/tutti_mpi.h"

/* NaN or +inf logits mean broken weights or an overflow; sampling from them
 * (greedy or not) would print garbage with exit status 0. */
static bool logits_finite(const float *logits, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY) return false;
    return true;
}

/* Holds back output that may be the start of a --stop string and cuts the
 * text at the first stop string (which is not printed). */
typedef struct stop_buf {
    char *text; /* everything generated */
    size_t len, cap, printed;
    const cli_strs *stop;
    bool stopped;
} stop_buf;

static void stop_emit(stop_buf *b, const char *piece, size_t n, bool final) {
    if (n) {
        if (b->len + n + 1 > b->cap) {
            size_t cap = (b->len + n + 1) * 2;
            char *t = realloc(b->text, cap);
            if (!t) { /* cannot track: print as is */
                fwrite(piece, 1, n, stdout);
                return;
            }
            b->text = t;
            b->cap = cap;
        }
        memcpy(b->text + b->len, piece, n);
        b->len += n;
        b->text[b->len] = 0;
    }
    size_t upto = b->len;
    for (int k = 0; k < b->stop->n; k++) {
        const char *s = b->stop->v[k];
        size_t sl = strlen(s);
        if (!sl) continue;
        /* a match can start at most sl - 1 bytes before the unprinted text */
        size_t from = b->printed >= sl ? b->printed - sl + 1 : 0;
        for (size_t i = from; i + sl <= b->len; i++)
            if (!memcmp(b->text + i, s, sl)) {
                if (i < upto) upto = i;
                b->stopped = true;
                break;
            }
    }
    if (!b->stopped && !final) /* keep back a tail that is a prefix of a stop string */
        for (int k = 0; k < b->stop->n; k++) {
            size_t sl = strlen(b->stop->v[k]);
            for (size_t h = sl > 1 ? sl - 1 : 0; h > 0; h--)
                if (h <= b->len && !memcmp(b->text + b->len - h, b->stop->v[k], h)) {
                    if (b->len - h < upto) upto = b->len - h;
                    break;
                }
        }
    if (upto > b->printed) {
        fwrite(b->text + b->printed, 1, upto - b->printed, stdout);
        b->printed = upto;
    }
    fflush(stdout);
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
    cli_opt opts[] = {
        {"-m,--model", "FILE", CLI_T_STR, 0, 0, &model_path, "GGUF model file", "none", NULL, CLI_ONCE},
        CLI_HF_OPTS(&model_path, CLI_T_STR, CLI_ONCE),
        CLI_STR("-p,--prompt", "TEXT", &prompt, "prompt (BOS is added when the model's metadata asks for it)", "none"),
        CLI_STR("-f,--file", "FILE", &prompt_file, "read the prompt from FILE (one trailing newline is dropped)", "none"),
        CLI_FLAG("-e,--escape", &escape, "process escapes (\\n \\r \\t \\' \\\" \\\\ \\xHH) in the prompt and --stop"),
        CLI_FLAG_OFF("--no-escape", &escape, "take the prompt and --stop strings literally"),
        CLI_INT("-n,--n-predict", "N", &n_predict, -1, 1 << 24,
                "tokens to generate; -1 = until end of text or a full context", NULL),
        CLI_THREADS_OPT(&n_threads),
        CLI_CTX_OPT(&n_ctx, ""),
        CLI_CTX_SHIFT_OPTS(&ctx_shift, &n_keep, "the prompt's first N\n(-1 = the whole prompt)"),
        CLI_STRS("--stop", "TEXT", &stop, "stop when the output contains TEXT (not printed; repeatable)"),
        CLI_FLAG("--special", &parse_special, "parse control-token text in the prompt (e.g. <|eot_id|>)"),
        CLI_FLAG("--chat", &chat, "the prompt is a user message, formatted with the model's own\n"
                                   "chat template; generation stops at the end-of-turn token"),
        CLI_STR("--system", "TEXT", &system, "with --chat: a system message before the user message", "none"),
        CLI_FLAG("--verbose-prompt", &verbose_prompt, "print the prompt's token ids on stderr"),
        CLI_SECTION("sampling"),
        CLI_SAMPLING_OPTS(&cs),
        CLI_GRAMMAR_OPTS(&ga),
        CLI_SECTION("one model over MPI ranks (mpirun -np K tutti generate ...)"),
        CLI_SPLIT_OPTS(&split_counts, &split_ub, "the model"),
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
    if ((pr = cli_split_check(split_counts, split_ub)) != CLI_RUN) return pr;
    const bool split = split_counts != NULL;
    if (!model_path) return cli_usage_error("need -m MODEL or -hf REPO[:QUANT] (see tutti generate --help)");
    if (!prompt && !prompt_file) return cli_usage_error("need -p TEXT or -f FILE (see tutti generate --help)");
    if (prompt && prompt_file) return cli_usage_error("-p and -f both give the prompt; use one");
    if (system && !chat) return cli_usage_error("--system needs --chat");
    if ((pr = cli_resolve_model(&model_path)) != CLI_RUN) return pr;
    char *stop_owned[CLI_MAX_STRS] = {0};
    if (escape)
        for (int k = 0; k < stop.n; k++) {
            if (!(stop_owned[k] = strdup(stop.v[k]))) return cli_error("out of memory");
            cli_process_escapes(stop_owned[k], strlen(stop_owned[k]));
            stop.v[k] = stop_owned[k];
        }

    int gst;
    tutti_grammar *grammar = cli_grammar_build(&ga, &gst); /* before loading: fail fast */
    if (gst) return gst;
    gr_constraint gc = {0};
    float *row = NULL;
    int rc = 1;
    size_t prompt_len = 0;
    char *text = cli_prompt_text(prompt, prompt_file, escape, &prompt_len);
    tutti_model *model = NULL;
    tutti_session *sess = NULL;
    tutti_sampler *smp = NULL;
    int32_t *ids = NULL, n_ids = 0;
    float *biased = NULL;
    stop_buf out = {.stop = &stop};
    if (!text) goto done;

    double t0 = cli_now();
    tutti_model_params mp = tutti_model_default_params();
    mp.verbose = !cli_quiet;
    if (!(model = split ? tutti_mpi_split_load(model_path, &mp, split_counts[0] ? split_counts : NULL) : tutti_model_load(model_path, &mp))) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    double t_load = cli_now() - t0;
    const tutti_vocab *vocab = tutti_model_vocab(model);
    if (chat)
        ids = cli_chat_tokens(model, system, text, &n_ids);
    else
        ids = cli_tokenize(vocab, text, prompt_len, tutti_vocab_add_bos(vocab), parse_special, &n_ids);
    if (!ids) goto done;
    if (n_ids == 0) {
        cli_error("the prompt gives no tokens and the model adds no BOS; give a non-empty prompt");
        goto done;
    }
    if (!chat) cli_warn_double_bos(vocab, ids, n_ids);
    tutti_session_params cp = tutti_session_default_params();
    cp.n_ctx = cli_ctx_for(model, n_ctx, NULL);
    cp.n_threads = n_threads;
    /* llama.cpp's context shift; -n -1 asks for "until the context is
     * full", which a shift would make endless */
    cp.ctx_shift = ctx_shift && n_predict >= 0 && !split;
    if (cp.ctx_shift) {
        /* llama.cpp: --keep N prompt tokens besides BOS, -1 (or more than
         * the prompt has) = the whole prompt */
        int32_t bos = tutti_vocab_add_bos(vocab) ? 1 : 0;
        cp.n_keep = n_keep < 0 || n_keep > n_ids ? n_ids : n_keep + bos; /* the session caps it */
    }
    if (!(sess = tutti_session_new(model, &cp)) || (split && tutti_mpi_split_attach(sess, n_threads, split_ub) < 0)) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    if (n_ids > tutti_session_n_ctx(sess)) {
        cli_error("the prompt is %d tokens, longer than the context (%d); raise -c or shorten the prompt", n_ids,
                  tutti_session_n_ctx(sess));
        goto done;
    }
    sp->seed = cli_seed_resolve(sp->seed); /* printed once the run can go ahead */
    if (!(smp = tutti_sampler_new(sp))) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    int32_t n_vocab = tutti_model_n_vocab(model);
    if (cs.ignore_eos && !(biased = malloc(sizeof(float) * (size_t)n_vocab))) {
        cli_error("out of memory");
        goto done;
    }
    /* the grammar masks the logits before sampling; one it makes impossible
     * to start is an error before the prompt's forward pass */
    if (grammar && (gr_constraint_init(&gc, grammar, vocab) < 0 || !(row = calloc((size_t)n_vocab, sizeof(float))) ||
                    gr_constraint_mask_tokens(&gc, row) < 0)) {
        cli_error("%s", row ? tutti_last_error() : "out of memory");
        goto done;
    }
    cli_info("tutti generate: %s loaded in %.2f s; prompt %d tokens\n", model_path, t_load, n_ids);
    if (verbose_prompt) {
        fprintf(stderr, "prompt ids:");
        for (int32_t i = 0; i < n_ids; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    for (int32_t i = 0; i < n_ids; i++) tutti_sampler_accept(smp, ids[i]);
    cli_catch_sigint();

    double t1 = cli_now();
    if (tutti_session_eval(sess, ids, n_ids, NULL) != TUTTI_OK) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    double t_prompt = cli_now() - t1, t2 = cli_now();
    int32_t n_gen = 0;
    int32_t piece_cap = 256;
    char *piece = malloc((size_t)piece_cap);
    rc = 0;
    while (piece && (n_predict < 0 || n_gen < n_predict) && !cli_interrupted()) {
        const float *logits = tutti_session_logits(sess);
        if (!logits_finite(logits, n_vocab)) {
            cli_error("\nthe model produced NaN or infinite logits at position %d (broken weights?)",
                      tutti_session_n_past(sess) - 1);
            rc = 1;
            break;
        }
        if (biased) { /* --ignore-eos: end-of-generation tokens cannot be drawn */
            memcpy(biased, logits, sizeof(float) * (size_t)n_vocab);
            for (int32_t t = 0; t < n_vocab; t++)
                if (tutti_vocab_is_eog(vocab, t)) biased[t] = -INFINITY;
            logits = biased;
        }
        if (gc.m) {
            if (gr_constraint_done(&gc)) break; /* complete, nothing may follow */
            if (logits != row) memcpy(row, logits, sizeof(float) * (size_t)n_vocab);
            if (gr_constraint_mask_tokens(&gc, row) < 0) {
                cli_error("%s", tutti_last_error());
                rc = 1;
                break;
            }
            logits = row;
        }
        int32_t tok = tutti_sampler_sample(smp, logits, n_vocab);
        if (tok < 0) {
            cli_error("%s", tutti_last_error());
            rc = 1;
            break;
        }
        if (tutti_vocab_is_eog(vocab, tok)) break;
        tutti_sampler_accept(smp, tok);
        int32_t len = tutti_token_to_piece(vocab, tok, false, piece, piece_cap);
        if (len < 0 && len != TUTTI_ERR_SIZE) {
            char *p = realloc(piece, (size_t)(piece_cap = -len));
            if (!p) break;
            piece = p;
            len = tutti_token_to_piece(vocab, tok, false, piece, piece_cap);
        }
        if (gr_constraint_accept(&gc, piece, len > 0 ? (size_t)len : 0) < 0) {
            cli_error("%s", tutti_last_error());
            rc = 1;
            break;
        }
        n_gen++;
        stop_emit(&out, piece, len > 0 ? (size_t)len : 0, false);
        if (out.stopped || n_gen == n_predict) break;
        if (tutti_session_n_past(sess) >= tutti_session_n_ctx(sess)) {
            if (n_predict >= 0) /* -n -1 asks for exactly this end */
                cli_warn("\ncontext full (%d tokens); raise -c for longer output", tutti_session_n_ctx(sess));
            break;
        }
        if (tutti_session_eval(sess, &tok, 1, NULL) != TUTTI_OK) {
            cli_error("%s", tutti_last_error());
            rc = 1;
            break;
        }
    }
    free(piece);
    stop_emit(&out, NULL, 0, true);
    double t_gen = cli_now() - t2;
    if (gc.m && rc == 0 && !cli_interrupted() && !tutti_grammar_matcher_is_complete(gc.m))
        cli_warn("stopped before the grammar was complete (raise -n or -c)");
    if (cli_interrupted()) {
        cli_info("\ntutti generate: interrupted (Ctrl-C)\n");
        rc = CLI_EXIT_INTERRUPTED;
    }
    cli_info("\ntutti generate: prompt %d tokens in %.3f s (%.1f tokens/s); generated %d tokens in %.3f s (%.1f tokens/s)\n",
             n_ids, t_prompt, n_ids / (t_prompt > 0 ? t_prompt : 1e-9), n_gen, t_gen,
             n_gen / (t_gen > 0 ? t_gen : 1e-9));
    if (tutti_session_n_tokens(sess) > tutti_session_n_past(sess))
        cli_info("tutti generate: the context (%d tokens) filled and shifted: %d of its oldest tokens were dropped, "
                 "the first %d kept (--keep; --no-context-shift stops at a full context instead)\n",
                 tutti_session_n_ctx(sess), tutti_session_n_tokens(sess) - tutti_session_n_past(sess), cp.n_keep);
done:
    gr_constraint_free(&gc);
    free(row);
    tutti_grammar_free(grammar);
    tutti_sampler_free(smp);
    tutti_session_free(sess);
    tutti_model_free(model);
    free(ids);
    free(text);
    free(biased);
    free(out.text);
    for (int k = 0; k < CLI_MAX_STRS; k++) free(stop_owned[k]);
    return rc;
}
