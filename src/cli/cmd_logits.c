/* tutti logits: raw float32 logits of every position, for comparison with
 * llama.cpp (../shared/ref).  File layout: little-endian float32
 * [n_tokens][n_vocab], row i = the logits after token i. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tutti logits -m MODEL (-p TEXT | --ids 1,2,3) --out FILE [-t THREADS]\n"
            "Runs the prompt through the model in one batch and writes the logits of every\n"
            "position as raw little-endian float32 [n_tokens][n_vocab] to FILE.\n"
            "With -p, BOS is added as the model's metadata says; --ids are used as given.\n");
}

int cmd_logits(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *ids_arg = NULL, *out = NULL;
    int32_t n_threads = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = cli_str(argc, argv, &i, &model_path);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) ok = cli_str(argc, argv, &i, &prompt);
        else if (!strcmp(a, "--ids")) ok = cli_str(argc, argv, &i, &ids_arg);
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) ok = cli_str(argc, argv, &i, &out);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = cli_int(argc, argv, &i, 1, CLI_MAX_THREADS, &n_threads);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "tutti logits: unknown option '%s' (see tutti logits --help)\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!model_path || !out || (!prompt == !ids_arg)) {
        fprintf(stderr, "tutti logits: need -m MODEL, --out FILE and exactly one of -p TEXT or --ids LIST\n");
        return 2;
    }
    int32_t *ids = NULL, n = 0;
    if (ids_arg && !cli_ids(ids_arg, &ids, &n)) {
        fprintf(stderr, "tutti logits: --ids needs comma-separated non-negative token ids, got '%s'\n", ids_arg);
        return 2;
    }
    int rc = 1;
    float *logits = NULL;
    FILE *f = NULL;
    tutti_session *sess = NULL;
    tutti_model *model = tutti_model_load(model_path, NULL);
    if (!model) {
        fprintf(stderr, "tutti logits: %s\n", tutti_last_error());
        goto done;
    }
    const tutti_vocab *vocab = tutti_model_vocab(model);
    if (prompt && !(ids = cli_tokenize(vocab, prompt, strlen(prompt), tutti_vocab_add_bos(vocab), false, &n)))
        goto done;
    if (n == 0) {
        fprintf(stderr, "tutti logits: no tokens to evaluate\n");
        goto done;
    }
    tutti_session_params cp = tutti_session_default_params();
    cp.n_threads = n_threads;
    cp.n_ctx = n;
    int32_t n_vocab = tutti_model_n_vocab(model);
    if (!(sess = tutti_session_new(model, &cp))) {
        fprintf(stderr, "tutti logits: %s\n", tutti_last_error());
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    if (!logits) {
        fprintf(stderr, "tutti logits: out of memory for %d x %d logits\n", n, n_vocab);
        goto done;
    }
    if (tutti_session_eval(sess, ids, n, logits) != TUTTI_OK) {
        fprintf(stderr, "tutti logits: %s\n", tutti_last_error());
        goto done;
    }
    if (!(f = fopen(out, "wb")) || fwrite(logits, sizeof(float) * (size_t)n_vocab, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "tutti logits: cannot write %s\n", out);
        goto done;
    }
    fprintf(stderr, "tutti logits: wrote %d x %d float32 to %s\n", n, n_vocab, out);
    rc = 0;
done:
    if (f && fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "tutti logits: cannot write %s\n", out);
        rc = 1;
    }
    free(logits);
    free(ids);
    tutti_session_free(sess);
    tutti_model_free(model);
    return rc;
}
