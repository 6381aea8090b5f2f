/* bench/batch_matmul: what a forward pass of n = 1, 2, 3, 4, 8 tokens costs
 * compared with one of 1 token (issue 12: the byte path evaluates 2-4
 * hypotheses of a member in one pass, which is only cheap if the weights
 * are read once for all of them).
 *
 *   batch_matmul [-t 1,2] [-n 1,2,3,4,8] [-r REPS] MODEL.gguf...
 *       one session per model and thread count; after a 16-token prompt,
 *       REPS times: rewind to 16, one tutti_session_eval of n tokens; the
 *       median wall time per pass, and its ratio to n = 1.
 *   batch_matmul --kernels [-t 1,2] [-n ...] [-r REPS] [--mib 512] [--types f32,q8_0,...]
 *                [--shapes ROWSxCOLS,...]
 *       tutti_matmul alone on matrices of about --mib MiB (more than the
 *       last-level cache, so n = 1 is memory-bound) in three shapes: wide
 *       and short rows like a heavy twin's ffn_gate/ffn_up (N x 128), long
 *       rows like its ffn_down (128 x N), and square (4096 x K); weights
 *       are random rows quantized once and repeated (same memory traffic).
 *       --shapes instead times the given matrices (e.g. 896x4864, Qwen2.5-
 *       0.5B's ffn_up; 2048x8192, Llama-3.2-1B's): as many copies as make
 *       --mib MiB, multiplied one after the other, so each call reads its
 *       weights from memory as in a forward pass; times are per matrix.
 *       Each line ends with the weight traffic at n = 1 in GB/s; "x" is the
 *       time relative to n = 1.
 *
 * Heavy twins: bench/heavy_twins.sh.  TUTTI_KERNELS=avx2|scalar picks the
 * path as everywhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "kernels/kernels.h"
#include "quant/quant.h"
#include "quant/vecdot.h"
#include "tutti.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The fastest run: on a shared machine the others only add other
 * processes' interference. */
static double best(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[0];
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 512) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

#define MAX_LIST 16

static int bench_model(const char *path, const int *th, int n_th, const int *ns, int n_ns, int reps) {
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(path, &mp);
    if (!m) {
        fprintf(stderr, "batch_matmul: %s: %s\n", path, tutti_last_error());
        return 1;
    }
    const int32_t n_vocab = tutti_model_n_vocab(m);
    int32_t prompt[16], ids[512];
    uint64_t seed = 12345;
    for (int i = 0; i < 16; i++) prompt[i] = (int32_t)((seed = seed * 6364136223846793005ULL + 1) >> 33) % n_vocab;
    for (int i = 0; i < 512; i++) ids[i] = (int32_t)((seed = seed * 6364136223846793005ULL + 1) >> 33) % n_vocab;
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (int a = 0; a < n_th; a++) {
        tutti_session_params sp = tutti_session_default_params();
        sp.n_ctx = 16 + 512;
        sp.n_threads = th[a];
        tutti_session *s = tutti_session_new(m, &sp);
        if (!s || tutti_session_eval(s, prompt, 16, NULL) != TUTTI_OK) {
            fprintf(stderr, "batch_matmul: %s: %s\n", path, tutti_last_error());
            tutti_session_free(s);
            tutti_model_free(m);
            return 1;
        }
        double base = 0;
        printf("%-28s %-6s t=%d", name, tutti_kernels_backend(), th[a]);
        for (int b = 0; b < n_ns; b++) {
            double v[256];
            const int r = reps < 256 ? reps : 256;
            for (int i = -1; i < r; i++) { /* one warm-up */
                tutti_session_rewind(s, 16);
                const double t0 = now_s();
                if (tutti_session_eval(s, ids, ns[b], NULL) != TUTTI_OK) {
                    fprintf(stderr, "batch_matmul: %s\n", tutti_last_error());
                    return 1;
                }
                if (i >= 0) v[i] = now_s() - t0;
            }
            const double ms = 1e3 * best(v, r);
            if (b == 0) base = ms;
            printf("  n=%d %7.2f ms (x%.2f)", ns[b], ms, ms / base);
        }
        printf("\n");
        fflush(stdout);
        tutti_session_free(s);
    }
    tutti_model_free(m);
    return 0;
}

/* ---- kernels alone ---- */

static int type_by_name(const char *name) {
    for (int t = 0; t < TUTTI_TYPE_COUNT; t++)
        if (tutti_type_get(t) && strcasecmp(tutti_type_name(t), name) == 0) return t;
    return -1;
}

static int bench_kernels(const int *th, int n_th, const int *ns, int n_ns, int reps, double mib, const char *types,
                         const char *shapes_arg) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", types);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        const int ty = type_by_name(tok);
        if (ty < 0 || !tutti_type_can_quantize(ty)) {
            fprintf(stderr, "batch_matmul: type %s: unknown or cannot be quantized\n", tok);
            return 2;
        }
        const int64_t bs = tutti_type_get(ty)->block_size;
        /* rows x cols; N chosen so the matrix is about `mib` MiB */
        const size_t per_elem_x1000 = tutti_row_size(ty, 256 * 1000) / 256; /* bytes per 1000 elements */
        const int64_t elems = (int64_t)(mib * 1048576.0 * 1000.0 / (double)per_elem_x1000);
        int64_t shapes[MAX_LIST][2] = {
            {elems / 128 / 256 * 256, 128},
            {128, elems / 128 / 256 * 256},
            {4096, elems / 4096 / 256 * 256},
        };
        const char *shape_name[3] = {"N x 128", "128 x N", "4096 x K"};
        int n_shapes = 3;
        if (shapes_arg) {
            n_shapes = 0;
            for (const char *p = shapes_arg; *p && n_shapes < MAX_LIST;) {
                char *end;
                const long long r = strtoll(p, &end, 10);
                const long long c = *end == 'x' ? strtoll(end + 1, &end, 10) : 0;
                if (r < 1 || c < 1 || (*end && *end != ',')) {
                    fprintf(stderr, "batch_matmul: --shapes %s: want ROWSxCOLS,...\n", shapes_arg);
                    return 2;
                }
                shapes[n_shapes][0] = r;
                shapes[n_shapes++][1] = c;
                p = *end ? end + 1 : end;
            }
        }
        for (int sh = 0; sh < n_shapes; sh++) {
            const int64_t nr = shapes[sh][0], nc = shapes[sh][1];
            if (nr <= 0 || nc <= 0 || nc % bs) continue;
            const size_t rb = tutti_row_size(ty, nc), mat = rb * (size_t)nr;
            /* copies enough to exceed the last-level cache (one for the default shapes) */
            size_t copies = shapes_arg ? (size_t)(mib * 1048576.0 / (double)mat) : 1;
            if (copies < 1) copies = 1;
            char *w = malloc(mat * copies);
            float *x = malloc(sizeof(float) * (size_t)nc * 512);
            float *y = malloc(sizeof(float) * (size_t)nr * 512);
            if (!w || !x || !y) return 1;
            /* 64 random rows (fewer when rows are long), repeated */
            const int64_t uniq = nr < 64 ? nr : 64;
            float *row = malloc(sizeof(float) * (size_t)nc);
            uint64_t seed = 7;
            for (int64_t r = 0; r < uniq; r++) {
                for (int64_t c = 0; c < nc; c++)
                    row[c] =
                        (float)((int64_t)((seed = seed * 6364136223846793005ULL + 1) >> 40) % 2001 - 1000) / 1000.0f;
                tutti_quantize_row_ref(ty, row, w + (size_t)r * rb, nc);
            }
            for (int64_t r = uniq; r < nr; r++) memcpy(w + (size_t)r * rb, w + (size_t)(r % uniq) * rb, rb);
            for (size_t k = 1; k < copies; k++) memcpy(w + k * mat, w, mat);
            for (int64_t i = 0; i < nc * 512; i++)
                x[i] = (float)((int64_t)((seed = seed * 6364136223846793005ULL + 1) >> 40) % 2001 - 1000) / 1000.0f;
            free(row);
            /* the repacked layout, where the path has one (as the loader does) */
            int wt = ty;
            const int rt = tutti_repack_type(ty);
            char *wp = NULL;
            size_t matp = mat;
            if (rt >= 0 && tutti_vec_dot_get(rt) && tutti_repack_size(ty, nr, nc)) {
                matp = tutti_repack_size(ty, nr, nc);
                wp = malloc(matp * copies);
                if (wp) {
                    bool ok = true;
                    for (size_t k = 0; k < copies; k++)
                        ok = ok && tutti_repack(ty, w + k * mat, wp + k * matp, nr, nc) == rt;
                    if (ok) wt = rt;
                }
            }
            const char *wuse = wt == ty ? w : wp;
            const size_t stride = wt == ty ? mat : matp;
            for (int a = 0; a < n_th; a++) {
                tutti_threadpool *tp = tutti_threadpool_new(th[a]);
                if (!tp || !tutti_threadpool_scratch(tp, (size_t)nc * 512 * 2)) return 1;
                char label[32];
                if (sh < 3 && !shapes_arg) snprintf(label, sizeof label, "%s", shape_name[sh]);
                else snprintf(label, sizeof label, "x%zu", copies);
                printf("%-5s %-6s %-8s %6lld x %-7lld %6.1f MiB t=%d", tutti_type_name(ty), tutti_kernels_backend(),
                       label, (long long)nr, (long long)nc, (double)mat / 1048576.0, th[a]);
                double base = 0;
                for (int b = 0; b < n_ns; b++) {
                    double v[256];
                    const int r = reps < 256 ? reps : 256;
                    for (int i = -1; i < r; i++) {
                        const double t0 = now_s();
                        for (size_t k = 0; k < copies; k++)
                            tutti_matmul(tp, wt, wuse + k * stride, nr, nc, x, ns[b], y);
                        if (i >= 0) v[i] = (now_s() - t0) / (double)copies;
                    }
                    const double ms = 1e3 * best(v, r);
                    if (b == 0) base = ms;
                    printf("  n=%d %7.3f (x%.2f)", ns[b], ms, ms / base);
                }
                printf("   [ms; GB/s at n=1: %.1f]\n", (double)mat / (base * 1e6));
                fflush(stdout);
                tutti_threadpool_free(tp);
            }
            free(wp);
            free(w);
            free(x);
            free(y);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int th[MAX_LIST] = {1, 2}, n_th = 2;
    int ns[MAX_LIST] = {1, 2, 3, 4, 8}, n_ns = 5;
    int reps = 7;
    bool kernels = false;
    double mib = 512;
    const char *types = "f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q4_K,q5_K,q6_K";
    const char *shapes = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--kernels") == 0) {
            kernels = true;
        } else if (strcmp(a, "-t") == 0 && v) {
            if ((n_th = parse_list(v, th, MAX_LIST)) < 1) goto usage;
            i++;
        } else if (strcmp(a, "-n") == 0 && v) {
            if ((n_ns = parse_list(v, ns, MAX_LIST)) < 1) goto usage;
            i++;
        } else if (strcmp(a, "-r") == 0 && v) {
            reps = atoi(v);
            if (reps < 1) goto usage;
            i++;
        } else if (strcmp(a, "--mib") == 0 && v) {
            mib = atof(v);
            if (!(mib >= 1 && mib <= 8192)) goto usage;
            i++;
        } else if (strcmp(a, "--types") == 0 && v) {
            types = v;
            i++;
        } else if (strcmp(a, "--shapes") == 0 && v) {
            shapes = v;
            i++;
        } else {
            goto usage;
        }
    }
    if (tutti_simd_init() != TUTTI_OK) {
        fprintf(stderr, "batch_matmul: %s\n", tutti_last_error());
        return 2;
    }
    if (kernels) return bench_kernels(th, n_th, ns, n_ns, reps, mib, types, shapes);
    if (i >= argc) goto usage;
    for (; i < argc; i++)
        if (bench_model(argv[i], th, n_th, ns, n_ns, reps)) return 1;
    return 0;
usage:
    fprintf(stderr, "usage: batch_matmul [-t 1,2] [-n 1,2,3,4,8] [-r REPS] MODEL.gguf...\n"
                    "       batch_matmul --kernels [-t 1,2] [-n ...] [-r REPS] [--mib 512] [--types f32,q8_0,...]\n"
                    "                    [--shapes ROWSxCOLS,...]\n");
    return 2;
}
