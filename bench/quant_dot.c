/* bench/quant_dot: the dot-product kernels of one weight type alone, one
 * thread, no thread pool (tensor types of issue 23: MXFP4 and the i-quants,
 * with Q4_K and the others for comparison).
 *
 *   quant_dot [--types mxfp4,iq2_xxs,...] [--paths scalar,avx2,avx512]
 *             [--rows R] [--cols C] [--tokens 1,4] [--reps N] [--mib M]
 *
 * For each type, path and token count: a matrix of R x C weights (random
 * blocks: quantized random floats for types with a quantizer, random bytes
 * with a finite scale for the i-quants; copies up to M MiB so that one pass
 * reads the weights from memory, as generation does) is multiplied by
 * `tokens` activation rows with the path's tile kernel (the `gemm` entry of
 * quant/vecdot.h, 16 rows per call as matmul.c does), REPS times after a
 * warm-up.  Prints the best time per pass, the weight bytes per second, and
 * per weight byte the time in ns.  Under valgrind --tool=callgrind (see
 * bench/quant_dot.sh) the instruction count per weight byte is the
 * difference of two runs with different --reps divided by the bytes.
 *
 * TUTTI_KERNELS is not needed: --paths picks each path explicitly (only
 * those this CPU runs; valgrind runs neither AVX-512 nor, before 3.22,
 * some of its encodings, so the script keeps it to scalar and avx2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "quant/quant.h"
#include "quant/vecdot.h"
#include "tutti.h"
#include "util/fp16.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t g_seed = 0x2545F4914F6CDD1DULL;
static uint32_t rnd(void) {
    g_seed ^= g_seed << 13;
    g_seed ^= g_seed >> 7;
    g_seed ^= g_seed << 17;
    return (uint32_t)(g_seed >> 16);
}
static float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

/* One row of `type`: random floats quantized, or (i-quants) random bytes
 * whose f16 scale is set to a finite value (IQ1_M keeps it in the top
 * nibbles of its four scale words). */
static void fill_row(int type, uint8_t *w, int64_t n) {
    if (tutti_type_can_quantize(type)) {
        float *f = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) f[i] = frand();
        tutti_quantize_row_ref(type, f, w, n);
        free(f);
        return;
    }
    const tutti_type_traits *t = tutti_type_get(type);
    const size_t bytes = tutti_row_size(type, n);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    for (int64_t b = 0; b < n / t->block_size; b++) {
        uint8_t *blk = w + (size_t)b * t->type_size;
        const uint16_t h = tutti_f32_to_fp16(0.01f * (frand() + 1.5f));
        if (type == TUTTI_TYPE_IQ1_M) {
            for (int k = 0; k < 4; k++)
                blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 15) << 4));
        } else {
            memcpy(blk, &h, 2);
        }
    }
}

static int parse_ints(const char *s, int *out, int max) {
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 64) return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int type_by_name(const char *name) {
    for (int t = 0; t < TUTTI_TYPE_COUNT; t++)
        if (tutti_type_get(t) && !strcasecmp(tutti_type_name(t), name)) return t;
    return -1;
}

static void bench(int type, const char *paths, int64_t rows, int64_t cols, const int *toks, int n_toks, int reps,
                  double mib) {
    const size_t ldw = tutti_row_size(type, cols), mat = ldw * (size_t)rows;
    size_t copies = (size_t)(mib * 1048576.0 / (double)mat);
    if (copies < 1) copies = 1;
    uint8_t *w = malloc(mat * copies);
    float *x = malloc(sizeof(float) * (size_t)cols * 64);
    float *y = malloc(sizeof(float) * (size_t)rows * 64);
    if (!w || !x || !y) {
        fprintf(stderr, "quant_dot: out of memory\n");
        exit(1);
    }
    for (int64_t r = 0; r < rows; r++) fill_row(type, w + (size_t)r * ldw, cols);
    for (size_t k = 1; k < copies; k++) memcpy(w + k * mat, w, mat);
    for (int64_t i = 0; i < cols * 64; i++) x[i] = frand();
    char buf[128];
    snprintf(buf, sizeof buf, "%s", paths);
    char *save = NULL;
    for (char *pn = strtok_r(buf, ",", &save); pn; pn = strtok_r(NULL, ",", &save)) {
        const int path = tutti_simd_parse(pn);
        const tutti_vec_dot_traits *vt = path < 0 ? NULL : tutti_vec_dot_get_path((tutti_simd)path, type);
        if (!vt) {
            printf("%-8s %-7s not available\n", tutti_type_name(type), pn);
            continue;
        }
        const size_t ldx = tutti_row_size(vt->vec_type, cols);
        uint8_t *xq = malloc(ldx * 64);
        for (int c = 0; c < 64; c++) vt->from_float(x + (size_t)c * cols, xq + (size_t)c * ldx, cols);
        printf("%-8s %-7s (kernel %-6s) %lld x %lld, %.1f MiB x %zu", tutti_type_name(type), pn,
               tutti_simd_name(vt->path), (long long)rows, (long long)cols, (double)mat / 1048576.0, copies);
        for (int a = 0; a < n_toks; a++) {
            double best = 1e30;
            for (int it = -1; it < reps; it++) {
                const double t0 = now_s();
                for (size_t k = 0; k < copies; k++)
                    for (int64_t r = 0; r < rows; r += 16)
                        vt->gemm(cols, w + k * mat + (size_t)r * ldw, ldw, (int)(rows - r < 16 ? rows - r : 16), xq,
                                 ldx, toks[a], y + r, (size_t)rows);
                const double dt = (now_s() - t0) / (double)copies;
                if (it >= 0 && dt < best) best = dt;
            }
            printf("  n=%d %.3f ms %.2f GB/s %.3f ns/B", toks[a], 1e3 * best, (double)mat / best / 1e9,
                   best * 1e9 / (double)mat);
        }
        printf("\n");
        fflush(stdout);
        free(xq);
    }
    free(w);
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    const char *types = "q4_K,mxfp4,iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,iq1_m";
    const char *paths = "scalar,avx2,avx512";
    int64_t rows = 4096, cols = 4096;
    int toks[16] = {1, 4}, n_toks = 2, reps = 5;
    double mib = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--types")) types = v;
        else if (!strcmp(a, "--paths")) paths = v;
        else if (!strcmp(a, "--rows")) rows = atoll(v);
        else if (!strcmp(a, "--cols")) cols = atoll(v);
        else if (!strcmp(a, "--tokens")) {
            if ((n_toks = parse_ints(v, toks, 16)) < 1) goto usage;
        } else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--mib")) mib = atof(v);
        else goto usage;
        i++;
    }
    if (rows < 1 || cols < 256 || cols % 256 || reps < 1 || !(mib >= 0)) goto usage;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", types);
    char *save = NULL;
    for (char *tn = strtok_r(buf, ",", &save); tn; tn = strtok_r(NULL, ",", &save)) {
        const int t = type_by_name(tn);
        if (t < 0 || !tutti_type_supported(t)) {
            fprintf(stderr, "quant_dot: unknown type %s\n", tn);
            return 2;
        }
        bench(t, paths, rows, cols, toks, n_toks, reps, mib);
    }
    return 0;
usage:
    fprintf(stderr, "usage: quant_dot [--types T,...] [--paths scalar,avx2,avx512] [--rows R] [--cols C (x256)]\n"
                    "                 [--tokens 1,4] [--reps N] [--mib M]\n");
    return 2;
}
