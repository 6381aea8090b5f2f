// Loads each GGUF given with libllama (weights too) and prints OK or the
// loader's error lines: the oracle for which files llama.cpp refuses.
#include <llama.h>
#include <stdio.h>
#include <string.h>
static char g_log[1 << 16];
static void logcb(enum ggml_log_level l, const char *t, void *u) {
    (void)u;
    if (l == GGML_LOG_LEVEL_ERROR || l == GGML_LOG_LEVEL_WARN || strstr(t, "error") || strstr(t, "tensor"))
        if (strlen(g_log) + strlen(t) < sizeof g_log - 1) strcat(g_log, t);
}
int main(int argc, char **argv) {
    llama_log_set(logcb, NULL);
    llama_backend_init();
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        g_log[0] = 0;
        struct llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = 0;
        struct llama_model *m = llama_model_load_from_file(argv[i], mp);
        printf("== %s: %s\n", argv[i], m ? "LOADED" : "REFUSED");
        if (!m) {
            printf("%s", g_log);
            bad++;
        } else llama_model_free(m);
    }
    return 0;
}
