/* tutti info: what tutti read from a GGUF file. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int cmd_info(int argc, char **argv) {
    const char *model_path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (model_path) {
                fprintf(stderr, "tutti info: -m given twice; info describes one model per call\n");
                return 2;
            }
            if (!cli_str(argc, argv, &i, &model_path)) return 2;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tutti info -m MODEL\n"
                   "Prints the architecture, every hyper-parameter tutti uses, tensor types and\n"
                   "sizes, and the tokenizer of a GGUF model.\n");
            return 0;
        } else {
            fprintf(stderr, "tutti info: unknown option '%s' (see tutti info --help)\n", argv[i]);
            return 2;
        }
    }
    if (!model_path) {
        fprintf(stderr, "tutti info: need -m MODEL\n");
        return 2;
    }
    /* metadata only: no need to copy the weights */
    tutti_model_params mp = tutti_model_default_params();
    mp.use_mmap = true;
    tutti_model *model = tutti_model_load(model_path, &mp);
    if (!model) {
        fprintf(stderr, "tutti info: %s\n", tutti_last_error());
        return 1;
    }
    tutti_model_describe(model, stdout);
    tutti_model_free(model);
    return 0;
}
