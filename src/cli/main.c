/* tutti — command-line entry point: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"

int tutti_cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_models(int argc, char **argv);

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} g_cmds[] = {
    {"generate", cmd_generate, "generate text with one model"},
    {"logits", cmd_logits, "dump the logits of every prompt position (float32)"},
    {"tokenize", cmd_tokenize, "print token ids of a text or of a test file"},
    {"info", cmd_info, "metadata, parameter count, tokenizer, chat template, hyper-parameters of a GGUF file"},
    {"run", tutti_cmd_run, "fused generation with an ensemble of models"},
    {"eval", tutti_cmd_eval, "bits per byte of each member and of the ensemble on a text"},
    {"fit", tutti_cmd_fit, "fit ensemble weights and temperatures on a text"},
    {"merge", cmd_merge, "merge models of one architecture into one GGUF file (mergekit's methods)"},
    {"bench", tutti_cmd_bench, "prompt-processing and generation speed (tokens/s), like llama-bench"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server for models and ensembles"},
    {"models", cmd_models, "the models -hf downloaded (the cache); `tutti models rm` removes them"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: tutti COMMAND [options]   (tutti COMMAND --help for its options)\n"
               "       tutti --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", g_cmds[i].name, g_cmds[i].help);
    fprintf(f, "\nEvery command takes the same names for the same things (-m, -hf, -p, -f, -n, -c, -t, -s, --temp,\n"
               "...; as llama.cpp names them), --help, --version and --quiet. Exit status: 0 ok, 1 runtime\n"
               "error, 2 bad flags or values, 130 generation stopped by Ctrl-C.\n");
}

static int dispatch(int argc, char **argv);

/* Under mpirun every rank but 0 serves its members and returns here (src/mpi). */
int main(int argc, char **argv) {
    int r = tutti_mpi_start(&argc, argv);
    return r >= 0 ? r : tutti_mpi_stop(dispatch(argc, argv));
}

static int dispatch(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("tutti %s\n", cli_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++) {
        if (!strcmp(argv[1], g_cmds[i].name)) {
            cli_cmd = g_cmds[i].name;
            return g_cmds[i].fn(argc - 2, argv + 2);
        }
    }
    fprintf(stderr, "tutti: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
