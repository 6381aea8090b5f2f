/* llama.cpp's grammar sampler on the token sequences of grammar_bench.c
 * (build and run in the oracle chroot: see grammar_bench.sh).
 *
 *   llama_grammar_bench VOCAB.gguf DIR NAME...
 *
 * For DIR/NAME.gbnf and DIR/NAME.ids: per token, llama_sampler_apply of
 * llama_sampler_init_grammar on the full candidate array (all n_vocab
 * tokens, the same pseudo-random logits as grammar_bench) plus
 * llama_sampler_accept; refilling the array is not timed. */
#include <llama.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static char *slurp(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1);
    size_t n = fread(b, 1, (size_t)l, f);
    b[n] = 0;
    fclose(f);
    return b;
}

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void)l, (void)t, (void)u; }

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int V = llama_vocab_n_tokens(vocab);
    float *base = malloc(sizeof(float) * (size_t)V);
    srand(1);
    for (int i = 0; i < V; i++) base[i] = (float)rand() / (float)RAND_MAX * 10.0f;
    llama_token_data *data = malloc(sizeof(llama_token_data) * (size_t)V);
    double *all = malloc(sizeof(double) * 200000);
    int n_all = 0;
    printf("llama.cpp grammar sampler, vocabulary %d tokens\n%-17s %8s %6s | %s\n", V, "case", "init", "tokens",
           "us per token: mean    p50     p99     max");
    for (int a = 3; a < argc; a++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.gbnf", argv[2], argv[a]);
        char *gbnf = slurp(path);
        snprintf(path, sizeof path, "%s/%s.ids", argv[2], argv[a]);
        char *ids = slurp(path);
        if (!gbnf || !ids) return 1;
        double *t = malloc(sizeof(double) * 100000);
        int nt = 0;
        double t_init = 0;
        for (char *line = strtok(ids, "\n"); line; line = strtok(NULL, "\n")) {
            double ti = now();
            struct llama_sampler *s = llama_sampler_init_grammar(vocab, gbnf, "root");
            t_init = now() - ti;
            if (!s) {
                fprintf(stderr, "%s: grammar refused\n", argv[a]);
                return 1;
            }
            for (char *p = line; *p;) {
                char *e;
                long tok = strtol(p, &e, 10);
                if (e == p) break;
                p = e;
                for (int i = 0; i < V; i++) data[i] = (llama_token_data){i, base[i], 0.0f};
                llama_token_data_array arr = {data, (size_t)V, -1, false};
                double t0 = now();
                llama_sampler_apply(s, &arr);
                if (!(arr.data[tok].logit > -INFINITY)) {
                    fprintf(stderr, "%s: llama.cpp rejects token %ld\n", argv[a], tok);
                    return 1;
                }
                llama_sampler_accept(s, (llama_token)tok);
                t[nt++] = now() - t0;
            }
            llama_sampler_free(s);
        }
        memcpy(all + n_all, t, sizeof(double) * (size_t)nt);
        n_all += nt;
        double sum = 0;
        for (int i = 0; i < nt; i++) sum += t[i];
        qsort(t, (size_t)nt, sizeof *t, cmp_d);
        printf("%-17s %6.2fms %6d | %12.1f %7.1f %7.1f %7.1f\n", argv[a], 1e3 * t_init, nt, 1e6 * sum / nt,
               1e6 * t[nt / 2], 1e6 * t[(int)(0.99 * (nt - 1))], 1e6 * t[nt - 1]);
        free(t), free(gbnf), free(ids);
    }
    double sum = 0;
    for (int i = 0; i < n_all; i++) sum += all[i];
    qsort(all, (size_t)n_all, sizeof *all, cmp_d);
    printf("\nall cases: %d tokens, mean %.1f us, p50 %.1f us, p99 %.1f us per token\n", n_all, 1e6 * sum / n_all,
           1e6 * all[n_all / 2], 1e6 * all[(int)(0.99 * (n_all - 1))]);
    llama_model_free(model);
    return 0;
}
