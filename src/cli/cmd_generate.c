/* tutti generate: one model, one prompt, sampled continuation on stdout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/grammar_args.h"
#include "grammar/constrain.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tutti generate -m MODEL -p TEXT [options]\n"
            "Generates a continuation of TEXT with one model. The generated text alone goes to\n"
            "stdout; loading progress and speed (tokens/s) go to stderr.\n\n"
            "  -m, --model FILE      GGUF model file\n"
            "  -p, --prompt TEXT     prompt (BOS is added when the model's metadata asks for it)\n"
            "  -f, --file FILE       read the prompt from FILE instead\n"
            "  -n, --n-predict N     tokens to generate (default 128); stops early at end of text\n"
            "      --temp T          temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K         keep the K most likely tokens, 0 = off (default 40)\n"
            "      --top-p P         nucleus sampling, 1 = off (default 0.95)\n"
            "      --min-p P         drop tokens below P x the top probability, 0 = off (default 0.05)\n"
            "      --repeat-penalty R  penalise the last --repeat-last-n tokens, 1 = off (default 1)\n"
            "      --repeat-last-n N (default 64)\n"
            "      --seed S          random seed (default: from the clock, printed on stderr)\n"
            "  -t, --threads N       worker threads (default: all cores)\n"
            "  -c, --ctx-size N      context length in tokens (default: min(trained, 4096))\n"
            "      --special         parse control-token text in the prompt (e.g. <|eot_id|>)\n"
            "      --chat            the prompt is a user message, formatted with the model's own\n"
            "                        chat template; generation stops at the end-of-turn token\n"
            "      --system TEXT     with --chat: a system message before the user message\n"
            "      --verbose-prompt  print the prompt's token ids on stderr\n"
            "%s"
            "  -h, --help            this text\n",
            cli_grammar_help());
}

/* NaN or +inf logits mean broken weights or an overflow; sampling from them
 * (greedy or not) would print garbage with exit status 0. */
static bool logits_finite(const float *logits, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY) return false;
    return true;
}

int cmd_generate(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL, *system = NULL;
    bool chat = false, verbose_prompt = false;
    int32_t n_predict = 128, n_threads = 0, n_ctx = 0;
    bool parse_special = false, seed_set = false;
    tutti_sampler_params sp = tutti_sampler_default_params();
    cli_grammar ga = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        int gr = cli_grammar_take(&ga, "generate", argc, argv, &i);
        if (gr < 0) return 2;
        if (gr > 0) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (model_path) {
                fprintf(stderr, "tutti generate: -m given twice; generate runs one model (tutti run fuses several)\n");
                return 2;
            }
            ok = cli_str(argc, argv, &i, &model_path);
        }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) ok = cli_str(argc, argv, &i, &prompt);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) ok = cli_str(argc, argv, &i, &prompt_file);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) ok = cli_int(argc, argv, &i, 0, 1 << 24, &n_predict);
        else if (!strcmp(a, "--temp")) ok = cli_float(argc, argv, &i, 0.0f, 100.0f, &sp.temp);
        else if (!strcmp(a, "--top-k")) ok = cli_int(argc, argv, &i, 0, 1 << 30, &sp.top_k);
        else if (!strcmp(a, "--top-p")) ok = cli_float(argc, argv, &i, 1e-6f, 1.0f, &sp.top_p);
        else if (!strcmp(a, "--min-p")) ok = cli_float(argc, argv, &i, 0.0f, 1.0f, &sp.min_p);
        else if (!strcmp(a, "--repeat-penalty")) ok = cli_float(argc, argv, &i, 1e-3f, 100.0f, &sp.repeat_penalty);
        else if (!strcmp(a, "--repeat-last-n")) ok = cli_int(argc, argv, &i, 0, 1 << 20, &sp.repeat_last_n);
        else if (!strcmp(a, "--seed")) ok = seed_set = cli_u64(argc, argv, &i, &sp.seed);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = cli_int(argc, argv, &i, 1, CLI_MAX_THREADS, &n_threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) ok = cli_int(argc, argv, &i, 1, 1 << 24, &n_ctx);
        else if (!strcmp(a, "--special")) parse_special = true;
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--verbose-prompt")) verbose_prompt = true;
        else if (!strcmp(a, "--system")) ok = cli_str(argc, argv, &i, &system);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "tutti generate: unknown option '%s' (see tutti generate --help)\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!model_path || (!prompt && !prompt_file) || (prompt && prompt_file)) {
        fprintf(stderr, "tutti generate: need -m MODEL and one of -p TEXT or -f FILE (see --help)\n");
        return 2;
    }
    if (system && !chat) {
        fprintf(stderr, "tutti generate: --system needs --chat\n");
        return 2;
    }
    if (!seed_set) sp.seed = (uint64_t)time(NULL);
    bool g_failed;
    tutti_grammar *grammar = cli_grammar_build(&ga, "generate", &g_failed);
    if (g_failed) return 1;
    gr_constraint gc = {0};
    float *row = NULL;

    int rc = 1;
    char *file_text = NULL;
    size_t prompt_len = 0;
    if (prompt_file) {
        if (!(file_text = cli_read_file(prompt_file, &prompt_len))) return 1;
        prompt = file_text;
    } else {
        prompt_len = strlen(prompt);
    }
    tutti_model *model = NULL;
    tutti_session *sess = NULL;
    tutti_sampler *smp = NULL;
    int32_t *ids = NULL, n_ids = 0;

    double t0 = cli_now();
    tutti_model_params mp = tutti_model_default_params();
    mp.verbose = true;
    if (!(model = tutti_model_load(model_path, &mp))) {
        fprintf(stderr, "tutti generate: %s\n", tutti_last_error());
        goto done;
    }
    double t_load = cli_now() - t0;
    const tutti_vocab *vocab = tutti_model_vocab(model);
    if (chat)
        ids = cli_chat_tokens(model, system, prompt, &n_ids);
    else
        ids = cli_tokenize(vocab, prompt, prompt_len, tutti_vocab_add_bos(vocab), parse_special, &n_ids);
    if (!ids) goto done;
    if (n_ids == 0) {
        fprintf(stderr, "tutti generate: the prompt gives no tokens and the model adds no BOS; give a non-empty prompt\n");
        goto done;
    }
    tutti_session_params cp = tutti_session_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = n_threads;
    if (!(sess = tutti_session_new(model, &cp))) {
        fprintf(stderr, "tutti generate: %s\n", tutti_last_error());
        goto done;
    }
    if (n_ids > tutti_session_n_ctx(sess)) {
        fprintf(stderr, "tutti generate: the prompt is %d tokens, longer than the context (%d); raise -c or shorten the prompt\n",
                n_ids, tutti_session_n_ctx(sess));
        goto done;
    }
    if (!(smp = tutti_sampler_new(&sp))) {
        fprintf(stderr, "tutti generate: %s\n", tutti_last_error());
        goto done;
    }
    fprintf(stderr, "tutti generate: %s loaded in %.2f s; prompt %d tokens; seed %llu\n", model_path, t_load,
            n_ids, (unsigned long long)sp.seed);
    if (verbose_prompt) {
        fprintf(stderr, "prompt ids:");
        for (int32_t i = 0; i < n_ids; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    for (int32_t i = 0; i < n_ids; i++) tutti_sampler_accept(smp, ids[i]);
    /* the grammar masks the logits before sampling; one it makes impossible
     * to start is an error before the prompt's forward pass */
    if (grammar) {
        int32_t nv = tutti_model_n_vocab(model);
        if (gr_constraint_init(&gc, grammar, vocab) < 0 || !(row = calloc((size_t)nv, sizeof(float))) ||
            gr_constraint_mask_tokens(&gc, row) < 0) {
            fprintf(stderr, "tutti generate: %s\n", row ? tutti_last_error() : "out of memory");
            goto done;
        }
    }

    double t1 = cli_now();
    if (tutti_session_eval(sess, ids, n_ids, NULL) != TUTTI_OK) {
        fprintf(stderr, "tutti generate: %s\n", tutti_last_error());
        goto done;
    }
    double t_prompt = cli_now() - t1, t2 = cli_now();
    int32_t n_gen = 0, n_vocab = tutti_model_n_vocab(model);
    int32_t piece_cap = 256;
    char *piece = malloc((size_t)piece_cap);
    rc = 0;
    while (piece && n_gen < n_predict) {
        if (!logits_finite(tutti_session_logits(sess), n_vocab)) {
            fprintf(stderr, "tutti generate: the model produced NaN or infinite logits at position %d (broken "
                            "weights?)\n",
                    tutti_session_n_past(sess) - 1);
            rc = 1;
            break;
        }
        const float *dist = tutti_session_logits(sess);
        if (gc.m) {
            if (gr_constraint_done(&gc)) break; /* complete, nothing may follow */
            memcpy(row, dist, sizeof(float) * (size_t)n_vocab);
            if (gr_constraint_mask_tokens(&gc, row) < 0) {
                fprintf(stderr, "tutti generate: %s\n", tutti_last_error());
                rc = 1;
                break;
            }
            dist = row;
        }
        int32_t tok = tutti_sampler_sample(smp, dist, n_vocab);
        if (tok < 0) {
            fprintf(stderr, "tutti generate: %s\n", tutti_last_error());
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
            fprintf(stderr, "tutti generate: %s\n", tutti_last_error());
            rc = 1;
            break;
        }
        if (len > 0) fwrite(piece, 1, (size_t)len, stdout);
        fflush(stdout);
        n_gen++;
        if (n_gen == n_predict) break;
        if (tutti_session_n_past(sess) >= tutti_session_n_ctx(sess)) {
            fprintf(stderr, "\ntutti generate: context full (%d tokens); raise -c for longer output\n",
                    tutti_session_n_ctx(sess));
            break;
        }
        if (tutti_session_eval(sess, &tok, 1, NULL) != TUTTI_OK) {
            fprintf(stderr, "tutti generate: %s\n", tutti_last_error());
            rc = 1;
            break;
        }
    }
    free(piece);
    double t_gen = cli_now() - t2;
    fprintf(stderr, "\ntutti generate: prompt %d tokens in %.3f s (%.1f tokens/s); generated %d tokens in %.3f s (%.1f tokens/s)\n",
            n_ids, t_prompt, n_ids / (t_prompt > 0 ? t_prompt : 1e-9), n_gen, t_gen,
            n_gen / (t_gen > 0 ? t_gen : 1e-9));
    if (gc.m && rc == 0 && !tutti_grammar_matcher_is_complete(gc.m))
        fprintf(stderr, "tutti generate: stopped before the grammar was complete (raise -n or -c)\n");
done:
    gr_constraint_free(&gc);
    free(row);
    tutti_grammar_free(grammar);
    tutti_sampler_free(smp);
    tutti_session_free(sess);
    tutti_model_free(model);
    free(ids);
    free(file_text);
    return rc;
}
