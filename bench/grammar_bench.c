/* Token-mask speed of the grammar layer on a large vocabulary.
 *
 *   grammar_bench VOCAB.gguf grammar_cases.json OUTDIR
 *
 * For each case (a JSON schema and valid instances, grammar_cases.py) the
 * schema is compiled to a grammar, each instance is tokenized with the
 * vocabulary and replayed token by token on one thread: per token the time
 * of tutti_grammar_matcher_mask on a full logits row (the trie walk, or the
 * cached mask, and writing -inf) plus accepting the token's bytes.  "cold"
 * is the first replay on a fresh matcher (every state and mask computed as
 * generation would meet them), "warm" a second replay.  Writes OUTDIR/NAME.gbnf
 * and OUTDIR/NAME.ids (the same token sequences, one instance per line) for
 * llama_grammar_bench.c, which times llama.cpp's grammar sampler on them. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tutti.h"

#define N_REP 5 /* cold replays on fresh matchers */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1);
    *n = fread(b, 1, (size_t)l, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

typedef struct stats {
    double mean, p50, p99, max;
} stats;

static stats summarize(double *t, int n) {
    stats s = {0};
    if (!n) return s;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    s.mean = sum / n, s.p50 = t[n / 2], s.p99 = t[(int)(0.99 * (n - 1))], s.max = t[n - 1];
    return s;
}

/* Replays ids on m, timing mask+accept per token into t; returns the count
 * or -1 if a token was rejected. */
static int replay(tutti_grammar_matcher *m, const tutti_grammar_vocab *gv, const tutti_vocab *v, const int32_t *ids,
                  int n, const float *base, float *row, int32_t V, double *t) {
    char piece[512];
    for (int k = 0; k <= n; k++) {
        memcpy(row, base, sizeof(float) * (size_t)V);
        double t0 = now();
        int32_t na = tutti_grammar_matcher_mask(m, gv, row);
        if (k == n) { /* the end: an end-of-generation token must be allowed */
            int32_t eos = tutti_vocab_eos(v);
            return na > 0 && eos >= 0 && row[eos] > -INFINITY ? n : -1;
        }
        int32_t l = tutti_token_to_piece(v, ids[k], false, piece, sizeof piece);
        if (na <= 0 || l <= 0 || row[ids[k]] == -INFINITY || tutti_grammar_matcher_accept(m, piece, (size_t)l) < 0) {
            fprintf(stderr, "token %d (id %d) rejected: %s\n", k, ids[k], tutti_last_error());
            return -1;
        }
        t[k] = now() - t0;
    }
    return n;
}

/* Byte alignment: per byte of text, the allowed next bytes (+ end) and
 * accepting the byte.  Cold: a fresh matcher; warm: the same text again.
 * Each the fastest of N_REP tries (a preemption of this loaded VM costs
 * 4-8 ms, more than a whole text). */
static void byte_cost(const tutti_grammar *g, cJSON *instances, double *cold_us, double *warm_us, int *n_bytes) {
    double best_c = 1e30, best_w = 1e30;
    int nb = 0;
    for (int r = 0; r < N_REP; r++) {
        tutti_grammar_matcher *m = tutti_grammar_matcher_new(g);
        double tc = 0, tw = 0;
        nb = 0;
        for (int pass = 0; pass < 2; pass++)
            for (cJSON *in = instances->child; in; in = in->next) {
                char *text = cJSON_PrintUnformatted(in);
                size_t n = strlen(text);
                bool al[257];
                tutti_grammar_matcher_reset(m);
                double t0 = now();
                for (size_t i = 0; i < n; i++) {
                    tutti_grammar_matcher_allowed_bytes(m, al);
                    tutti_grammar_matcher_accept(m, text + i, 1);
                }
                tutti_grammar_matcher_allowed_bytes(m, al);
                *(pass ? &tw : &tc) += now() - t0;
                if (!pass) nb += (int)n + 1;
                free(text);
            }
        tutti_grammar_matcher_free(m);
        if (tc < best_c) best_c = tc;
        if (tw < best_w) best_w = tw;
    }
    *cold_us = 1e6 * best_c / nb, *warm_us = 1e6 * best_w / nb, *n_bytes = nb;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: grammar_bench VOCAB.gguf grammar_cases.json OUTDIR\n");
        return 2;
    }
    tutti_vocab *v = tutti_vocab_load(argv[1]);
    if (!v) {
        fprintf(stderr, "%s\n", tutti_last_error());
        return 1;
    }
    int32_t V = tutti_vocab_n_tokens(v);
    double t0 = now();
    tutti_grammar_vocab *gv = tutti_grammar_vocab_new(v);
    double t_trie = now() - t0;
    printf("vocabulary %s: %d tokens, trie built in %.1f ms (once per vocabulary)\n\n", argv[1], V, 1e3 * t_trie);
    size_t n;
    char *txt = slurp(argv[2], &n);
    cJSON *cases = txt ? cJSON_Parse(txt) : NULL;
    if (!gv || !cases) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    float *base = malloc(sizeof(float) * (size_t)V), *row = malloc(sizeof(float) * (size_t)V);
    srand(1);
    for (int32_t i = 0; i < V; i++) base[i] = (float)rand() / (float)RAND_MAX * 10.0f;
    double *all_cold = malloc(sizeof(double) * 200000), *all_med = malloc(sizeof(double) * 200000);
    int n_all = 0;
    printf("%-17s %7s %8s %6s %7s | %-31s | %-31s | %-31s\n", "case", "compile", "tables", "tokens", "states",
           "cold us: mean  p50   p99   max", "cold, median of 5: mean p50 p99 max", "warm us: mean  p50   p99   max");
    for (cJSON *c = cases->child; c; c = c->next) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        cJSON *schema = cJSON_GetObjectItem(c, "schema");
        double tc = now();
        char *gbnf;
        if (cJSON_IsNull(schema)) {
            gbnf = strdup(tutti_grammar_json_gbnf());
        } else {
            char *s = cJSON_PrintUnformatted(schema);
            gbnf = tutti_json_schema_to_gbnf(s, strlen(s));
            free(s);
        }
        tutti_grammar *g = gbnf ? tutti_grammar_parse(gbnf, strlen(gbnf)) : NULL;
        tutti_grammar_matcher *m = g ? tutti_grammar_matcher_new(g) : NULL;
        tc = now() - tc;
        /* per-class token tables: once per vocabulary and class, shared by
         * every grammar (so a case pays only for classes no earlier case
         * had); timed apart from compile and from the per-token masks */
        double tp = now();
        if (m && tutti_grammar_vocab_prepare(gv, g) < 0) m = NULL;
        tp = now() - tp;
        if (!m) {
            fprintf(stderr, "%s: %s\n", name, tutti_last_error());
            return 1;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.gbnf", argv[3], name);
        FILE *fg = fopen(path, "w");
        fputs(gbnf, fg);
        fclose(fg);
        snprintf(path, sizeof path, "%s/%s.ids", argv[3], name);
        FILE *fi = fopen(path, "w");
        double *cold = malloc(sizeof(double) * 100000), *warm = malloc(sizeof(double) * 100000);
        double *rep = malloc(sizeof(double) * 100000 * N_REP);
        int32_t *all_ids[64];
        int all_k[64], n_inst = 0;
        int nc = 0, nw = 0;
        for (cJSON *in = cJSON_GetObjectItem(c, "instances")->child; in; in = in->next) {
            char *text = cJSON_PrintUnformatted(in);
            int32_t *ids = malloc(sizeof(int32_t) * (strlen(text) + 8));
            int k = tutti_tokenize(v, text, strlen(text), false, false, ids, (int32_t)strlen(text) + 8);
            for (int i = 0; i < k; i++) fprintf(fi, "%s%d", i ? " " : "", ids[i]);
            fprintf(fi, "\n");
            tutti_grammar_matcher_reset(m);
            if (replay(m, gv, v, ids, k, base, row, V, cold + nc) < 0) {
                fprintf(stderr, "%s: the grammar rejects the instance %s\n", name, text);
                return 1;
            }
            nc += k;
            tutti_grammar_matcher_reset(m);
            replay(m, gv, v, ids, k, base, row, V, warm + nw);
            nw += k;
            free(text);
            if (n_inst < 64) all_ids[n_inst] = ids, all_k[n_inst++] = k;
            else free(ids);
        }
        fclose(fi);
        /* the same cold replay on N_REP fresh matchers (run tables stay: they
         * are the vocabulary's); per token the median over them, which
         * drops the scheduler's preemptions of this loaded VM (4-8 ms
         * outliers that show up in warm replays of cached masks too) */
        memcpy(rep, cold, sizeof(double) * (size_t)nc);
        for (int r = 1; r < N_REP; r++) {
            tutti_grammar_matcher *mr = tutti_grammar_matcher_new(g);
            int at = 0;
            for (int i = 0; i < n_inst; i++) {
                replay(mr, gv, v, all_ids[i], all_k[i], base, row, V, rep + (size_t)r * 100000 + at);
                at += all_k[i];
            }
            tutti_grammar_matcher_free(mr);
        }
        double *med = malloc(sizeof(double) * (size_t)(nc + 1));
        for (int t = 0; t < nc; t++) {
            double x[N_REP];
            for (int r = 0; r < N_REP; r++) x[r] = rep[(size_t)r * 100000 + t];
            qsort(x, N_REP, sizeof(double), cmp_d);
            med[t] = x[N_REP / 2];
        }
        for (int i = 0; i < n_inst; i++) free(all_ids[i]);
        memcpy(all_med + n_all, med, sizeof(double) * (size_t)nc);
        memcpy(all_cold + n_all, cold, sizeof(double) * (size_t)nc);
        n_all += nc;
        stats sc = summarize(cold, nc), sw = summarize(warm, nw), sm = summarize(med, nc);
        printf("%-17s %5.2fms %6.1fms %6d %7d | %6.1f %5.1f %6.1f %7.1f | %6.1f %5.1f %6.1f %7.1f | %6.1f %5.1f %6.1f "
               "%7.1f\n",
               name, 1e3 * tc, 1e3 * tp, nc, tutti_grammar_matcher_n_states(m), 1e6 * sc.mean, 1e6 * sc.p50,
               1e6 * sc.p99, 1e6 * sc.max, 1e6 * sm.mean, 1e6 * sm.p50, 1e6 * sm.p99, 1e6 * sm.max, 1e6 * sw.mean,
               1e6 * sw.p50, 1e6 * sw.p99, 1e6 * sw.max);
        double bc, bw;
        int nbytes;
        byte_cost(g, cJSON_GetObjectItem(c, "instances"), &bc, &bw, &nbytes);
        printf(
            "%-17s byte alignment: %d bytes, cold %.2f us, warm %.2f us per byte (allowed bytes + accept; best of 5)\n",
            "", nbytes, bc, bw);
        free(cold), free(warm), free(gbnf), free(rep), free(med);
        tutti_grammar_matcher_free(m);
        tutti_grammar_free(g);
    }
    stats s = summarize(all_cold, n_all), s5 = summarize(all_med, n_all);
    printf("\nall cases, cold: %d tokens, mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us per token\n", n_all,
           1e6 * s.mean, 1e6 * s.p50, 1e6 * s.p99, 1e6 * s.max);
    printf("all cases, cold, median of %d fresh matchers: mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us\n", N_REP,
           1e6 * s5.mean, 1e6 * s5.p50, 1e6 * s5.p99, 1e6 * s5.max);
    free(all_cold), free(all_med), free(base), free(row), free(txt);
    cJSON_Delete(cases);
    tutti_grammar_vocab_free(gv);
    tutti_vocab_free(v);
    return 0;
}
