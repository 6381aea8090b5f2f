/* tutti logits: raw float32 logits of every position, for comparison with
 * llama.cpp (../shared/ref).  File layout: little-endian float32
 * [n_tokens][n_vocab], row i = the logits after token i. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

typedef struct rows_out {
    const float *logits;
    int32_t n, n_vocab;
} rows_out;

static int write_rows(FILE *fp, void *ctx) {
    const rows_out *r = ctx;
    if (fwrite(r->logits, sizeof(float) * (size_t)r->n_vocab, (size_t)r->n, fp) != (size_t)r->n)
        return tutti_set_error("write failed");
    return 0;
}

int cmd_logits(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL, *ids_arg = NULL, *out = NULL;
    int32_t n_threads = 0, split_ub = 0;
    const char *split_counts = NULL; /* --split-layers: NULL = off, "" = by memory */
    bool split_experts = false;      /* --split-experts */
    bool escape = true, special = false;
    cli_opt opts[] = {
        {"-m,--model", "FILE", CLI_T_STR, 0, 0, &model_path, "GGUF model file", "none", NULL, CLI_ONCE},
        CLI_HF_OPTS(&model_path, CLI_T_STR, CLI_ONCE),
        CLI_STR("-p,--prompt", "TEXT", &prompt, "text to run (BOS added as the model's metadata says)", "none"),
        CLI_STR("-f,--file", "FILE", &prompt_file, "read the text from FILE (one trailing newline is dropped)", "none"),
        CLI_FLAG("-e,--escape", &escape, "process escapes (\\n \\t \\xHH ...) in the prompt"),
        CLI_FLAG_OFF("--no-escape", &escape, "take the prompt literally"),
        CLI_FLAG("--special", &special, "parse control-token text in the prompt"),
        CLI_STR("--ids", "LIST", &ids_arg, "comma-separated token ids, used as given (no BOS added)", "none"),
        CLI_STR("-o,--out", "FILE", &out, "output file (raw float32; - = stdout)", "none"),
        CLI_THREADS_OPT(&n_threads),
        CLI_SECTION("one model over MPI ranks (mpirun -np K tutti logits ...)"),
        CLI_SPLIT_OPTS(&split_counts, &split_ub, "the model"),
        CLI_SPLIT_EXPERTS_OPT(&split_experts),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "logits",
        .usage = "(-m MODEL | -hf REPO[:QUANT]) (-p TEXT | -f FILE | --ids 1,2,3) -o FILE [options]",
        .description = "Runs the prompt through the model in one batch and writes the logits of every\n"
                       "position as raw little-endian float32 [n_tokens][n_vocab] to FILE (the context is\n"
                       "exactly the prompt's length).",
        .opts = opts,
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if ((pr = cli_split_check(split_counts, split_ub)) != CLI_RUN) return pr;
    if (split_experts && split_counts) return cli_usage_error("--split-experts and --split-layers exclude each other");
    const bool split = split_counts != NULL; /* a model split by layers over MPI ranks, as in tutti generate */
    if (!model_path || !out || (!!prompt + !!prompt_file + !!ids_arg) != 1)
        return cli_usage_error(
            "need -m MODEL (or -hf REPO), -o FILE and exactly one of -p TEXT, -f FILE or --ids LIST");
    if ((pr = cli_resolve_model(&model_path)) != CLI_RUN) return pr;
    if ((pr = cli_output_check("-o", out, CLI_OUT_BINARY)) != CLI_RUN) return pr;
    int32_t *ids = NULL, n = 0;
    if (ids_arg && !cli_ids(ids_arg, &ids, &n)) {
        return cli_usage_error("--ids needs comma-separated non-negative token ids, got '%s'", ids_arg);
    }
    int rc = 1;
    float *logits = NULL;
    tutti_session *sess = NULL;
    tutti_model *model = split           ? tutti_mpi_split_load(model_path, NULL, split_counts[0] ? split_counts : NULL)
                         : split_experts ? tutti_mpi_experts_load(model_path, NULL)
                                         : tutti_model_load(model_path, NULL);
    if (!model) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    const tutti_vocab *vocab = tutti_model_vocab(model);
    if (!ids_arg) {
        size_t len;
        char *text = cli_prompt_text(prompt, prompt_file, escape, &len);
        if (!text) goto done;
        ids = cli_tokenize(vocab, text, len, tutti_vocab_add_bos(vocab), special, &n);
        free(text);
        if (!ids) goto done;
        cli_warn_double_bos(vocab, ids, n);
    }
    if (n == 0) {
        cli_error("no tokens to evaluate");
        goto done;
    }
    tutti_session_params cp = tutti_session_default_params();
    cp.n_threads = n_threads;
    cp.n_ctx = n;
    int32_t n_vocab = tutti_model_n_vocab(model);
    if (!(sess = tutti_session_new(model, &cp)) || (split && tutti_mpi_split_attach(sess, n_threads, split_ub) < 0) ||
        (split_experts && tutti_mpi_experts_attach(sess, model_path) < 0)) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    if (!logits) {
        cli_error("out of memory for %d x %d logits", n, n_vocab);
        goto done;
    }
    if (tutti_session_eval(sess, ids, n, logits) != TUTTI_OK) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    rows_out ro = {logits, n, n_vocab};
    if (cli_output_write(out, write_rows, &ro) != 0) goto done;
    cli_info("tutti logits: wrote %d x %d float32 to %s\n", n, n_vocab, strcmp(out, "-") ? out : "stdout");
    rc = 0;
done:
    free(logits);
    free(ids);
    tutti_session_free(sess);
    tutti_model_free(model);
    return rc;
}
