/* SIMD dot-product kernels (quant/vecdot.h) against references.
 *
 * 1. The scalar path against the float reference tutti_vec_dot_ref (quant
 *    engineer's exact dequantize-and-dot): the only allowed difference is
 *    the activation rounding, so |scalar - ref| <= sum_i |w_i| * |x_i - x~_i|
 *    (x~ = the activation as the kernel sees it, decoded from its blocks)
 *    plus 1e-5 relative float slack.  A layout error (wrong nibble, scale or
 *    sign) breaks this by orders of magnitude.
 * 2. The activation quantizers against their definition: |x - x~| <= d/2
 *    (+ half rounding of d) per element, bsums = sums of 16 qs.
 * 3. Every available SIMD path against the scalar path on the same blocks:
 *    the integer sums are identical, only the float accumulation order
 *    differs: |simd - scalar| <= 2e-5 * sum_i |w_i x~_i| + 1e-6.
 *    Same for the tile kernels (gemm) with every nr x nc shape.
 * Sizes are awkward on purpose (odd block counts; 1..1001 elements for the
 * float types) and weights are random (quantized with the reference
 * quantizers, or random bytes with sane scales for types without one). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_common.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
#include "quant/vecdot.h"
#include "tutti.h"
#include "util/fp16.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

static const int k_types[] = {
    TUTTI_TYPE_F32,   TUTTI_TYPE_F16,     TUTTI_TYPE_BF16,   TUTTI_TYPE_Q4_0,  TUTTI_TYPE_Q4_1,    TUTTI_TYPE_Q5_0,
    TUTTI_TYPE_Q5_1,  TUTTI_TYPE_Q8_0,    TUTTI_TYPE_Q2_K,   TUTTI_TYPE_Q3_K,  TUTTI_TYPE_Q4_K,    TUTTI_TYPE_Q5_K,
    TUTTI_TYPE_Q6_K,  TUTTI_TYPE_IQ4_NL,  TUTTI_TYPE_IQ4_XS, TUTTI_TYPE_MXFP4, TUTTI_TYPE_IQ2_XXS, TUTTI_TYPE_IQ2_XS,
    TUTTI_TYPE_IQ2_S, TUTTI_TYPE_IQ3_XXS, TUTTI_TYPE_IQ3_S,  TUTTI_TYPE_IQ1_S, TUTTI_TYPE_IQ1_M};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

/* Random activations with a varying scale and a few outliers, like
 * real hidden states. */
static void fill_x(float *x, int64_t n) {
    const float scale = 0.1f + 3.0f * (frand() + 1.0f);
    for (int64_t i = 0; i < n; i++) {
        x[i] = frand() * scale;
        if (rnd() % 97 == 0) x[i] *= 20.0f;
    }
}

static void put_half(uint8_t *p, float f) {
    const uint16_t h = tutti_f32_to_fp16(f);
    memcpy(p, &h, 2);
}

/* Types whose SIMD kernels must give the scalar kernel's bits exactly (the
 * same integer sums, then the same float operations in the same order);
 * the others add their float terms in another order (tolerance of 3). */
static bool bit_exact(int type) {
    switch (type) {
    case TUTTI_TYPE_Q8_0:
    case TUTTI_TYPE_MXFP4:
    case TUTTI_TYPE_IQ2_XXS:
    case TUTTI_TYPE_IQ2_XS:
    case TUTTI_TYPE_IQ2_S:
    case TUTTI_TYPE_IQ3_XXS:
    case TUTTI_TYPE_IQ3_S:
    case TUTTI_TYPE_IQ1_S:
    case TUTTI_TYPE_IQ1_M: return true;
    default: return false;
    }
}

/* One random weight row of `type`: quantized floats, or random bytes with
 * sane scales (every code, also those no quantizer makes: MXFP4's -0). */
static void fill_w(int type, void *w, int64_t n) {
    const size_t bytes = tutti_row_size(type, n);
    if (tutti_type_can_quantize(type) && type != TUTTI_TYPE_MXFP4) {
        float *f = malloc(sizeof(float) * (size_t)n);
        fill_x(f, n);
        assert_true(tutti_quantize_row_ref(type, f, w, n));
        free(f);
        return;
    }
    uint8_t *b = w;
    for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)rnd();
    const int64_t nb = n / tutti_type_get(type)->block_size;
    const size_t bs = tutti_type_get(type)->type_size;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *blk = b + (size_t)i * bs;
        switch (type) {
        case TUTTI_TYPE_Q2_K:
            put_half(blk + 80, 0.01f * (frand() + 1.5f));
            put_half(blk + 82, 0.01f * frand());
            break;
        case TUTTI_TYPE_Q3_K: put_half(blk + 108, 0.01f * frand()); break;
        case TUTTI_TYPE_IQ4_NL: put_half(blk, 0.01f * frand()); break;
        case TUTTI_TYPE_IQ4_XS: put_half(blk, 0.01f * frand()); break;
        case TUTTI_TYPE_MXFP4: blk[0] = (uint8_t)(118 + rnd() % 16); break; /* 2^-10 .. 2^5 */
        case TUTTI_TYPE_IQ2_XXS:
        case TUTTI_TYPE_IQ2_XS:
        case TUTTI_TYPE_IQ2_S:
        case TUTTI_TYPE_IQ3_XXS:
        case TUTTI_TYPE_IQ3_S:
        case TUTTI_TYPE_IQ1_S: put_half(blk, 0.01f * frand()); break;
        case TUTTI_TYPE_IQ1_M: { /* the f16 d lives in the top nibbles of the 4 scale words */
            const uint16_t h = tutti_f32_to_fp16(0.01f * frand());
            for (int k = 0; k < 4; k++)
                blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 15) << 4));
        } break;
        default: fail_msg("no weight generator for %s", tutti_type_name(type));
        }
    }
}

/* The activations as the kernel sees them (decoded from vec_dot blocks). */
static void decode_act(int vtype, const void *vx, float *out, int64_t n) {
    const uint8_t *b = vx;
    switch (vtype) {
    case TUTTI_TYPE_F32: memcpy(out, vx, sizeof(float) * (size_t)n); break;
    case TUTTI_TYPE_F16:
        for (int64_t i = 0; i < n; i++) out[i] = tutti_fp16_to_f32(((const uint16_t *)vx)[i]);
        break;
    case TUTTI_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) out[i] = tutti_bf16_to_f32(((const uint16_t *)vx)[i]);
        break;
    case TUTTI_TYPE_Q8_0: assert_true(tutti_dequantize_row(TUTTI_TYPE_Q8_0, vx, out, n)); break;
    case TUTTI_TYPE_Q8_1:
        for (int64_t i = 0; i < n / 32; i++, b += 36) {
            uint16_t d;
            memcpy(&d, b, 2);
            for (int j = 0; j < 32; j++) out[32 * i + j] = tutti_fp16_to_f32(d) * (float)(int8_t)b[4 + j];
        }
        break;
    case TUTTI_TYPE_Q8_K:
        for (int64_t i = 0; i < n / 256; i++, b += 292) {
            float d;
            memcpy(&d, b, 4);
            for (int j = 0; j < 256; j++) out[256 * i + j] = d * (float)(int8_t)b[4 + j];
        }
        break;
    default: fail_msg("unknown activation type %d", vtype);
    }
}

/* Checks the activation quantizer's output against its definition. */
static void check_act_quant(int vtype, const float *x, const void *vx, int64_t n) {
    float *xd = malloc(sizeof(float) * (size_t)n);
    decode_act(vtype, vx, xd, n);
    const int64_t bs = vtype == TUTTI_TYPE_Q8_K ? 256 : vtype == TUTTI_TYPE_Q8_0 || vtype == TUTTI_TYPE_Q8_1 ? 32 : 1;
    for (int64_t i0 = 0; i0 < n; i0 += bs) {
        float amax = 0;
        for (int64_t i = i0; i < i0 + bs; i++) amax = fmaxf(amax, fabsf(x[i]));
        for (int64_t i = i0; i < i0 + bs; i++) {
            double tol;
            if (bs == 1) /* half rounding: 2^-11 relative (bf16: 2^-8), subnormals */
                tol = fabs(x[i]) * (vtype == TUTTI_TYPE_BF16 ? 1.0 / 256 : 1.0 / 2048) + 1e-7;
            else /* half a step d = amax/127, and the half rounding of d */
                tol = amax / 127.0 * 0.5 + amax * (1.0 / 1024) + 1e-30;
            if (fabs((double)x[i] - xd[i]) > tol)
                fail_msg("activation %s element %lld: x=%g decoded %g (tol %g)", tutti_type_name(vtype), (long long)i,
                         x[i], xd[i], tol);
        }
    }
    if (vtype == TUTTI_TYPE_Q8_K) {
        const uint8_t *b = vx;
        for (int64_t i = 0; i < n / 256; i++, b += 292)
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int k = 0; k < 16; k++) s += (int8_t)b[4 + 16 * j + k];
                int16_t bsum;
                memcpy(&bsum, b + 260 + 2 * j, 2);
                assert_int_equal(s, bsum);
            }
    }
    free(xd);
}

/* Sizes to try for a type: odd block counts. */
static int sizes_for(int type, int64_t *out) {
    const int64_t bs = tutti_type_get(type)->block_size;
    if (bs == 1) {
        const int64_t s[] = {1, 7, 15, 16, 17, 33, 250, 1001};
        memcpy(out, s, sizeof s);
        return 8;
    }
    const int64_t k[] = {1, 3, 7, 13};
    for (int i = 0; i < 4; i++) out[i] = k[i] * bs * (bs == 32 ? 3 : 1);
    return 4;
}

typedef struct row_case {
    int64_t n;
    void *w;  /* NR rows */
    float *x; /* NC rows */
    void *xq; /* NC rows of activation blocks (scalar quantizer) */
    size_t ldw, ldx;
} row_case;

#define NR 11 /* > 8: a full 8-row K-quant panel and a partial one */
#define NC 10

static void make_case(int type, const tutti_vec_dot_traits *sc, int64_t n, row_case *rc) {
    rc->n = n;
    rc->ldw = tutti_row_size(type, n);
    rc->ldx = tutti_row_size(sc->vec_type, n);
    assert_true(rc->ldw > 0 && rc->ldx > 0);
    rc->w = malloc(rc->ldw * NR);
    rc->x = malloc(sizeof(float) * (size_t)n * NC);
    rc->xq = malloc(rc->ldx * NC);
    for (int r = 0; r < NR; r++) fill_w(type, (char *)rc->w + r * rc->ldw, n);
    for (int c = 0; c < NC; c++) {
        fill_x(rc->x + c * n, n);
        sc->from_float(rc->x + c * n, (char *)rc->xq + c * rc->ldx, n);
    }
}

static void free_case(row_case *rc) {
    free(rc->w);
    free(rc->x);
    free(rc->xq);
}

/* 1 + 2: scalar kernels and quantizers vs the float reference. */
static void test_scalar_vs_reference(void **state) {
    (void)state;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int type = k_types[ti];
        const tutti_vec_dot_traits *sc = tutti_vec_dot_get_path(TUTTI_SIMD_SCALAR, type);
        assert_non_null(sc);
        int64_t sizes[8];
        const int ns = sizes_for(type, sizes);
        for (int si = 0; si < ns; si++) {
            row_case rc;
            make_case(type, sc, sizes[si], &rc);
            const int64_t n = rc.n;
            float *wd = malloc(sizeof(float) * (size_t)n), *xd = malloc(sizeof(float) * (size_t)n);
            for (int r = 0; r < NR; r++)
                for (int c = 0; c < NC; c++) {
                    const void *w = (char *)rc.w + r * rc.ldw;
                    const float *x = rc.x + c * n;
                    const void *xq = (char *)rc.xq + c * rc.ldx;
                    check_act_quant(sc->vec_type, x, xq, n);
                    assert_true(tutti_dequantize_row(type, w, wd, n));
                    decode_act(sc->vec_type, xq, xd, n);
                    double bound = 0, mag = 0;
                    for (int64_t i = 0; i < n; i++) {
                        bound += fabs((double)wd[i]) * fabs((double)x[i] - xd[i]);
                        mag += fabs((double)wd[i] * x[i]);
                    }
                    const float ref = tutti_vec_dot_ref(type, w, x, n);
                    float got;
                    sc->vec_dot(n, &got, w, xq);
                    const double tol = bound * 1.001 + 1e-5 * mag + 1e-6;
                    if (!(fabs((double)got - ref) <= tol))
                        fail_msg("scalar %s n=%lld: %.9g vs reference %.9g (|diff| %.3g > tol %.3g)",
                                 tutti_type_name(type), (long long)n, got, ref, fabs((double)got - ref), tol);
                }
            free(wd);
            free(xd);
            free_case(&rc);
        }
    }
}

/* 3: every SIMD path vs the scalar path, vec_dot and all tile shapes. */
static int g_paths_tested;

static void check_path(tutti_simd path) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int type = k_types[ti];
        const tutti_vec_dot_traits *sc = tutti_vec_dot_get_path(TUTTI_SIMD_SCALAR, type);
        const tutti_vec_dot_traits *k = tutti_vec_dot_get_path(path, type);
        assert_non_null(k);
        assert_int_equal(k->vec_type, sc->vec_type);
        int64_t sizes[8];
        const int ns = sizes_for(type, sizes);
        for (int si = 0; si < ns; si++) {
            row_case rc;
            make_case(type, sc, sizes[si], &rc);
            const int64_t n = rc.n;
            /* the path's activation quantizer vs its definition */
            void *xq2 = malloc(rc.ldx);
            for (int c = 0; c < NC; c++) {
                k->from_float(rc.x + c * n, xq2, n);
                check_act_quant(k->vec_type, rc.x + c * n, xq2, n);
                /* and bit-identical to the scalar quantizer (same rounding rule) */
                if (memcmp(xq2, (char *)rc.xq + c * rc.ldx, rc.ldx) != 0)
                    fail_msg("%s from_float for %s n=%lld differs from the scalar one", tutti_simd_name(path),
                             tutti_type_name(type), (long long)n);
            }
            free(xq2);
            float *wd = malloc(sizeof(float) * (size_t)n), *xd = malloc(sizeof(float) * (size_t)n);
            float want[NC][NR], mag[NC][NR];
            for (int r = 0; r < NR; r++) {
                const void *w = (char *)rc.w + r * rc.ldw;
                assert_true(tutti_dequantize_row(type, w, wd, n));
                for (int c = 0; c < NC; c++) {
                    const void *xq = (char *)rc.xq + c * rc.ldx;
                    decode_act(sc->vec_type, xq, xd, n);
                    double m = 0;
                    for (int64_t i = 0; i < n; i++) m += fabs((double)wd[i] * xd[i]);
                    mag[c][r] = (float)m;
                    sc->vec_dot(n, &want[c][r], w, xq);
                    float got;
                    k->vec_dot(n, &got, w, xq);
                    const double tol = bit_exact(type) ? 0 : 2e-5 * m + 1e-6;
                    if (!(fabs((double)got - want[c][r]) <= tol))
                        fail_msg("%s vec_dot %s n=%lld: %.9g vs scalar %.9g (tol %.3g)", tutti_simd_name(path),
                                 tutti_type_name(type), (long long)n, got, want[c][r], tol);
                }
            }
            for (int nr = 1; nr <= NR; nr++)
                for (int nc = 1; nc <= NC; nc++) {
                    float s[NC][NR + 1];
                    memset(s, 0xff, sizeof s); /* NaN: unwritten entries show */
                    k->gemm(n, rc.w, rc.ldw, nr, rc.xq, rc.ldx, nc, &s[0][0], NR + 1);
                    for (int c = 0; c < nc; c++)
                        for (int r = 0; r < nr; r++) {
                            const double tol = bit_exact(type) ? 0 : 2e-5 * mag[c][r] + 1e-6;
                            if (!(fabs((double)s[c][r] - want[c][r]) <= tol))
                                fail_msg("%s gemm %s n=%lld tile %dx%d [%d][%d]: %.9g vs scalar %.9g",
                                         tutti_simd_name(path), tutti_type_name(type), (long long)n, nr, nc, c, r,
                                         s[c][r], want[c][r]);
                        }
                }
            free(wd);
            free(xd);
            free_case(&rc);
        }
    }
    g_paths_tested++;
}

/* 4: repacked Q4_K (Q4_K_X8, quant.h) on every path that has kernels for
 * it: 16 random rows repacked, then the panel kernel for 8 and 16 rows and
 * 1..NC tokens against the scalar Q4_K kernel on the original rows (same
 * integer sums, float order differs: the tolerance of 3).  The internal
 * id is not a file type, and shapes that do not fit are refused. */
static void test_repack_q4_k(void **state) {
    (void)state;
    assert_null(tutti_type_get(TUTTI_TYPE_Q4_K_X8));
    assert_int_equal(tutti_repack_type(TUTTI_TYPE_Q4_K), TUTTI_TYPE_Q4_K_X8);
    assert_int_equal(tutti_repack_type(TUTTI_TYPE_Q6_K), -1);
    assert_int_equal(tutti_repack_size(TUTTI_TYPE_Q4_K, 12, 256), 0);
    assert_int_equal(tutti_repack_size(TUTTI_TYPE_Q4_K, 16, 300), 0);
    assert_int_equal(tutti_repack_size(TUTTI_TYPE_Q8_0, 16, 256), 0);
    assert_int_equal(tutti_repack(TUTTI_TYPE_Q4_K, NULL, NULL, 12, 256), -1);
    const tutti_vec_dot_traits *sc = tutti_vec_dot_get_path(TUTTI_SIMD_SCALAR, TUTTI_TYPE_Q4_K);
    assert_null(tutti_vec_dot_get_path(TUTTI_SIMD_SCALAR, TUTTI_TYPE_Q4_K_X8));
    int tested = 0;
    for (int path = 0; path < TUTTI_SIMD_COUNT; path++) {
        const tutti_vec_dot_traits *k = tutti_vec_dot_get_path((tutti_simd)path, TUTTI_TYPE_Q4_K_X8);
        if (!k) continue;
        assert_int_equal(k->vec_type, TUTTI_TYPE_Q8_K);
        const int64_t sizes[] = {256, 768, 3328};
        for (int si = 0; si < 3; si++) {
            const int64_t n = sizes[si], R = 16;
            const size_t ldw = tutti_row_size(TUTTI_TYPE_Q4_K, n), ldx = tutti_row_size(TUTTI_TYPE_Q8_K, n);
            assert_int_equal(tutti_row_size(TUTTI_TYPE_Q4_K_X8, n) * (size_t)R,
                             tutti_repack_size(TUTTI_TYPE_Q4_K, R, n));
            char *w = malloc(ldw * (size_t)R), *xq = malloc(ldx * NC);
            float *x = malloc(sizeof(float) * (size_t)n);
            void *wp = NULL;
            assert_int_equal(posix_memalign(&wp, 64, tutti_repack_size(TUTTI_TYPE_Q4_K, R, n)), 0);
            for (int r = 0; r < R; r++) fill_w(TUTTI_TYPE_Q4_K, w + r * ldw, n);
            for (int c = 0; c < NC; c++) {
                fill_x(x, n);
                sc->from_float(x, xq + c * ldx, n);
            }
            assert_int_equal(tutti_repack(TUTTI_TYPE_Q4_K, w, wp, R, n), TUTTI_TYPE_Q4_K_X8);
            float want[NC][16], mag[NC][16];
            float *wd = malloc(sizeof(float) * (size_t)n), *xd = malloc(sizeof(float) * (size_t)n);
            for (int r = 0; r < R; r++) {
                assert_true(tutti_dequantize_row(TUTTI_TYPE_Q4_K, w + r * ldw, wd, n));
                for (int c = 0; c < NC; c++) {
                    decode_act(TUTTI_TYPE_Q8_K, xq + c * ldx, xd, n);
                    double m = 0;
                    for (int64_t i = 0; i < n; i++) m += fabs((double)wd[i] * xd[i]);
                    mag[c][r] = (float)m;
                    sc->vec_dot(n, &want[c][r], w + r * ldw, xq + c * ldx);
                }
            }
            for (int nr = 8; nr <= R; nr += 8)
                for (int nc = 1; nc <= NC; nc++) {
                    float s[NC][17];
                    memset(s, 0xff, sizeof s);
                    k->gemm(n, wp, tutti_row_size(TUTTI_TYPE_Q4_K_X8, n), nr, xq, ldx, nc, &s[0][0], 17);
                    for (int c = 0; c < nc; c++)
                        for (int r = 0; r < nr; r++) {
                            const double tol = 2e-5 * mag[c][r] + 1e-6;
                            if (!(fabs((double)s[c][r] - want[c][r]) <= tol))
                                fail_msg("%s q4_K_x8 n=%lld %dx%d [%d][%d]: %.9g vs scalar q4_K %.9g",
                                         tutti_simd_name((tutti_simd)path), (long long)n, nr, nc, c, r, s[c][r],
                                         want[c][r]);
                        }
                    if (isfinite(s[nc < NC ? nc : 0][nr < 16 ? nr : 0]) && (nc < NC || nr < 16))
                        fail_msg("%s q4_K_x8 wrote outside its %dx%d tile", tutti_simd_name((tutti_simd)path), nr, nc);
                }
            free(w);
            free(xq);
            free(x);
            free(wp);
            free(wd);
            free(xd);
        }
        tested++;
    }
#if defined(__x86_64__)
    if (tutti_simd_available(TUTTI_SIMD_AVX2)) assert_true(tested > 0);
#endif
}

static void test_paths_vs_scalar(void **state) {
    (void)state;
    for (int p = 0; p < TUTTI_SIMD_COUNT; p++) {
        if (!tutti_simd_available((tutti_simd)p)) {
            printf("# path %s: not available on this CPU/build, skipped\n", tutti_simd_name((tutti_simd)p));
            continue;
        }
        printf("# path %s: checking\n", tutti_simd_name((tutti_simd)p));
        check_path((tutti_simd)p);
    }
    assert_true(g_paths_tested >= 1);
#if defined(__x86_64__)
    /* every x86-64 CPU this project runs on has AVX2; make sure we did not
     * silently test the scalar path alone */
    if (tutti_simd_available(TUTTI_SIMD_AVX2)) assert_true(g_paths_tested >= 2);
#endif
}

/* TUTTI_KERNELS: a forced path is honoured; unknown/unavailable ones are an
 * error naming the value.  Runs in child processes (the choice is made once
 * per process). */
static int child_init(const char *value, char *msg, size_t msg_len) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        setenv("TUTTI_KERNELS", value, 1);
        const int rc = tutti_simd_init();
        char buf[512];
        int len = snprintf(buf, sizeof buf, "%s|%s", tutti_simd_name(tutti_simd_current()),
                           rc == TUTTI_OK ? "ok" : tutti_last_error());
        if (write(fd[1], buf, (size_t)len) < 0) _exit(3);
        _exit(rc == TUTTI_OK ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], msg, msg_len - 1);
    msg[got > 0 ? got : 0] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_forced_path(void **state) {
    (void)state;
    char msg[512];
    assert_int_equal(child_init("scalar", msg, sizeof msg), 0);
    assert_string_equal(msg, "scalar|ok");
    assert_int_equal(child_init("bogus", msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "TUTTI_KERNELS=bogus"));
    assert_non_null(strstr(msg, "unknown"));
    for (int p = 1; p < TUTTI_SIMD_COUNT; p++) {
        const char *name = tutti_simd_name((tutti_simd)p);
        const int rc = child_init(name, msg, sizeof msg);
        if (tutti_simd_available((tutti_simd)p)) {
            assert_int_equal(rc, 0);
            assert_true(strncmp(msg, name, strlen(name)) == 0);
        } else {
            assert_int_equal(rc, 1);
            assert_non_null(strstr(msg, "cannot run"));
            assert_true(strncmp(msg, "scalar|", 7) == 0);
        }
    }
}

/* Thread pool: static jobs run every share exactly once; dynamic jobs
 * (items claimed from a counter) complete every item exactly once however
 * many workers join, and never run after the call returned (the job lives
 * on the caller's stack).  Alternating the two, with tiny jobs, stresses
 * the hand-offs between spinning, sleeping and late workers. */
typedef struct tp_job {
    atomic_int next;
    int n_items;
    atomic_int done_items;
    atomic_int shares[8];
    atomic_int *alive; /* 1 while the caller is inside run */
    atomic_int violations;
} tp_job;

static void tp_static_fn(void *arg, int ith, int nth) {
    tp_job *j = arg;
    (void)nth;
    if (!atomic_load(j->alive)) atomic_fetch_add(&j->violations, 1);
    atomic_fetch_add(&j->shares[ith], 1);
}

static void tp_dynamic_fn(void *arg, int ith, int nth) {
    tp_job *j = arg;
    (void)ith;
    (void)nth;
    for (;;) {
        const int i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_items) break;
        if (!atomic_load(j->alive)) atomic_fetch_add(&j->violations, 1);
        atomic_fetch_add(&j->done_items, 1);
    }
}

/* 6: row kernels on this process's path against their definitions in
 * double (softmax, SwiGLU: within a few float ulp) and the f16 row
 * conversion against the scalar converter (bit-identical). */
static void test_row_kernels(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 7, 8, 33, 172, 1000};
    float x[1000], up[1000], orig[1000];
    for (int si = 0; si < 6; si++) {
        const int64_t n = sizes[si];
        for (int64_t i = 0; i < n; i++) orig[i] = x[i] = frand() * 60 + (i % 11 == 3 ? -1e30f : 0);
        tutti_softmax(x, n);
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; i++) mx = orig[i] > mx ? orig[i] : mx;
        for (int64_t i = 0; i < n; i++) sum += exp((double)orig[i] - mx);
        for (int64_t i = 0; i < n; i++) {
            const double want = exp((double)orig[i] - mx) / sum;
            /* x - max is rounded to float first: relative error up to |x - max| 2^-24 */
            if (!(fabs(x[i] - want) <= (5e-7 + 6e-8 * fabs(orig[i] - mx)) * want + 1e-30))
                fail_msg("softmax %s n=%lld [%lld]: %.9g vs %.9g", tutti_kernels_backend(), (long long)n, (long long)i,
                         x[i], want);
        }
        for (int64_t i = 0; i < n; i++) {
            orig[i] = x[i] = frand() * (i % 5 == 0 ? 200 : 8);
            up[i] = frand();
        }
        tutti_swiglu(x, up, n);
        for (int64_t i = 0; i < n; i++) {
            const double want = orig[i] / (1 + exp(-(double)orig[i])) * up[i];
            if (!(fabs(x[i] - want) <= 1e-6 * fabs(want) + 1e-30))
                fail_msg("swiglu %s n=%lld [%lld]: %.9g vs %.9g", tutti_kernels_backend(), (long long)n, (long long)i,
                         x[i], want);
        }
        /* the forward pass runs SwiGLU over n_tok rows of n_ff as one array:
         * a row's result must not depend on where it starts (bit-identical
         * alone and inside the batch, whatever n_ff % 8) */
        if (n < 200) {
            float gb[5 * 200], ub[5 * 200], g1[200];
            for (int64_t i = 0; i < 5 * n; i++) {
                gb[i] = frand() * 12;
                ub[i] = frand();
            }
            float gcopy[5 * 200];
            memcpy(gcopy, gb, sizeof(float) * (size_t)(5 * n));
            tutti_swiglu(gb, ub, 5 * n);
            for (int t = 0; t < 5; t++) {
                memcpy(g1, gcopy + t * n, sizeof(float) * (size_t)n);
                tutti_swiglu(g1, ub + t * n, n);
                if (memcmp(g1, gb + t * n, sizeof(float) * (size_t)n) != 0)
                    fail_msg("swiglu %s n=%lld: row %d differs alone and in a batch of 5", tutti_kernels_backend(),
                             (long long)n, t);
            }
        }
        uint16_t h[1000];
        for (int64_t i = 0; i < n; i++) x[i] = frand() * (i % 3 == 0 ? 1e5f : i % 3 == 1 ? 1e-6f : 1.0f);
        tutti_f32_to_f16_row(x, h, n);
        for (int64_t i = 0; i < n; i++) assert_int_equal(h[i], tutti_f32_to_fp16(x[i]));
    }
}

/* 5: attention (kernels.h) against its definition computed in double, with
 * the two f16 roundings ggml applies (q before q.k, probabilities before
 * p.v): GQA head mapping, causal and sliding-window masks, soft-capping,
 * token blocks with a remainder, pos0 > 0, head sizes with and without a
 * multiple of 8 (the vector path and its scalar fallback), 1 and 3 threads. */
static void attn_case(int nth, int n_head, int n_head_kv, int hd, int pos0, int n_tok, int n_swa, float softcap) {
    const int n_ctx = pos0 + n_tok + 3, nq = n_head * hd, nk = n_head_kv * hd;
    float *q = malloc(sizeof(float) * (size_t)n_tok * nq), *out = malloc(sizeof(float) * (size_t)n_tok * nq);
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)n_ctx * nk), *v = malloc(sizeof(uint16_t) * (size_t)n_ctx * nk);
    for (int i = 0; i < n_tok * nq; i++) q[i] = frand() * 2;
    for (int i = 0; i < n_ctx * nk; i++) {
        k[i] = tutti_f32_to_fp16(frand() * 2);
        v[i] = tutti_f32_to_fp16(frand());
    }
    tutti_threadpool *tp = tutti_threadpool_new(nth);
    assert_non_null(tp);
    const size_t per = tutti_attn_scratch_floats(n_ctx, n_head, n_head_kv, hd, hd);
    float *scratch = malloc(sizeof(float) * per * (size_t)nth);
    const float scale = 1.0f / sqrtf((float)hd);
    tutti_attn_params ap = {.n_tok = n_tok,
                            .n_head = n_head,
                            .n_head_kv = n_head_kv,
                            .head_dim_k = hd,
                            .head_dim_v = hd,
                            .pos0 = pos0,
                            .n_ctx = n_ctx,
                            .n_swa = n_swa,
                            .scale = scale,
                            .softcap = softcap,
                            .q = q,
                            .k = k,
                            .v = v,
                            .out = out,
                            .scratch = scratch};
    tutti_attention(tp, &ap);
    const int group = n_head / n_head_kv;
    double *pr = malloc(sizeof(double) * (size_t)n_ctx);
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_head; h++) {
            const int pos = pos0 + t, j0 = n_swa > 0 && pos - n_swa + 1 > 0 ? pos - n_swa + 1 : 0;
            const int kvh = h / group;
            double mx = -INFINITY, sum = 0;
            for (int j = j0; j <= pos; j++) {
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)tutti_fp16_to_f32(tutti_f32_to_fp16(q[(t * n_head + h) * hd + e])) *
                         tutti_fp16_to_f32(k[j * nk + kvh * hd + e]);
                d *= scale;
                if (softcap > 0) d = softcap * tanh(d / softcap);
                pr[j] = d;
                if (d > mx) mx = d;
            }
            for (int j = j0; j <= pos; j++) sum += (pr[j] = exp(pr[j] - mx));
            for (int j = j0; j <= pos; j++) pr[j] = tutti_fp16_to_f32(tutti_f32_to_fp16((float)(pr[j] / sum)));
            for (int e = 0; e < hd; e++) {
                double want = 0, mag = 0;
                for (int j = j0; j <= pos; j++) {
                    const double x = pr[j] * tutti_fp16_to_f32(v[j * nk + kvh * hd + e]);
                    want += x;
                    mag += fabs(x);
                }
                const float got = out[(t * n_head + h) * hd + e];
                /* a probability may round to the neighbouring f16 value (float vs double softmax) */
                if (!(fabs(got - want) <= 2e-3 * mag + 1e-5))
                    fail_msg("attention %s nth=%d heads %d/%d hd=%d pos0=%d n_tok=%d swa=%d softcap=%g: "
                             "out[t=%d][h=%d][%d] = %.7g, definition %.7g",
                             tutti_kernels_backend(), nth, n_head, n_head_kv, hd, pos0, n_tok, n_swa, softcap, t, h, e,
                             got, want);
            }
        }
    free(pr);
    free(scratch);
    tutti_threadpool_free(tp);
    free(q);
    free(out);
    free(k);
    free(v);
}

static void test_attention(void **state) {
    (void)state;
    attn_case(1, 6, 2, 24, 0, 19, 0, 0);
    attn_case(3, 6, 2, 24, 5, 19, 0, 0);
    attn_case(2, 6, 2, 20, 5, 19, 7, 0);
    attn_case(2, 4, 4, 64, 70, 9, 0, 30.0f);
    attn_case(2, 8, 1, 16, 100, 1, 0, 0);   /* one token (generation), 8 heads on one KV head */
    attn_case(2, 14, 2, 64, 3, 130, 50, 0); /* Qwen-like grouping, a window across chunks */
}

static void test_threadpool(void **state) {
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        tutti_threadpool *tp = tutti_threadpool_new(nt);
        assert_non_null(tp);
        atomic_int alive;
        atomic_init(&alive, 0);
        for (int it = 0; it < 3000; it++) {
            tp_job j;
            memset(&j, 0, sizeof j);
            j.alive = &alive;
            j.n_items = 1 + it % 7;
            atomic_store(&alive, 1);
            if (it % 3 == 0) {
                tutti_threadpool_run(tp, tp_static_fn, &j);
                atomic_store(&alive, 0);
                for (int t = 0; t < nt; t++) assert_int_equal(atomic_load(&j.shares[t]), 1);
            } else {
                tutti_threadpool_run_dynamic(tp, tp_dynamic_fn, &j);
                atomic_store(&alive, 0);
                assert_int_equal(atomic_load(&j.done_items), j.n_items);
            }
            assert_int_equal(atomic_load(&j.violations), 0);
            if (it % 500 == 0) usleep(3000); /* let the workers fall asleep */
        }
        tutti_threadpool_free(tp);
    }
}

/* 7: tutti_matmul on every path (tutti_matmul_path): a batch of n = 2..8
 * tokens gives each token exactly the bits (memcmp) it gets alone, and 1
 * and 2 threads give the same bits, for every weight type (and the
 * repacked Q4_K where the path has it), with row counts that are no
 * multiple of the tiles (4, 8, 16 rows) and two row lengths: short (odd
 * block counts, F32 at an odd length) and long enough to be cut into
 * segments (matmul.c seg_run: more than 96 KiB of one token's activations;
 * here two full segments and a partial one).  The kernels keep one
 * accumulator per (row, token), in the same order whatever the tile, so
 * nothing but equality is acceptable -- except K-quant batches of 8 or more
 * tokens on the SIMD paths (their panel kernels add in another order),
 * checked against the single-token result within the tolerance of 3.  The
 * single-token result itself is checked against the scalar path's vec_dot
 * of the whole row, within the tolerance of 3 (segments add the same
 * integer block sums, in a different float order). */
#define MB_TOK 8

static bool is_iquant(int type) {
    return type == TUTTI_TYPE_IQ2_XXS || type == TUTTI_TYPE_IQ2_XS || type == TUTTI_TYPE_IQ2_S ||
           type == TUTTI_TYPE_IQ3_XXS || type == TUTTI_TYPE_IQ3_S || type == TUTTI_TYPE_IQ1_S ||
           type == TUTTI_TYPE_IQ1_M;
}

static bool is_kquant(int type) {
    return type == TUTTI_TYPE_Q2_K || type == TUTTI_TYPE_Q3_K || type == TUTTI_TYPE_Q4_K || type == TUTTI_TYPE_Q5_K ||
           type == TUTTI_TYPE_Q6_K || type == TUTTI_TYPE_Q4_K_X8;
}

static void matmul_batch_case(int type, int64_t n_rows, int64_t n) {
    const int base = type == TUTTI_TYPE_Q4_K_X8 ? TUTTI_TYPE_Q4_K : type;
    const tutti_vec_dot_traits *sc = tutti_vec_dot_get_path(TUTTI_SIMD_SCALAR, base);
    const size_t ldw = tutti_row_size(base, n), ldx = tutti_row_size(sc->vec_type, n);
    char *w = malloc(ldw * (size_t)n_rows), *xq = malloc(ldx * MB_TOK);
    float *x = malloc(sizeof(float) * (size_t)n * MB_TOK), *wd = malloc(sizeof(float) * (size_t)n),
          *xd = malloc(sizeof(float) * (size_t)n);
    float *y1 = malloc(sizeof(float) * (size_t)n_rows * MB_TOK), *yb = malloc(sizeof(float) * (size_t)n_rows * MB_TOK),
          *y2 = malloc(sizeof(float) * (size_t)n_rows);
    assert_true(w && xq && x && wd && xd && y1 && yb && y2);
    for (int64_t r = 0; r < n_rows; r++) fill_w(base, w + (size_t)r * ldw, n);
    for (int t = 0; t < MB_TOK; t++) {
        fill_x(x + (size_t)t * n, n);
        sc->from_float(x + (size_t)t * n, xq + (size_t)t * ldx, n);
    }
    /* what the scalar path says, and the magnitude of the terms */
    float want[MB_TOK][64];
    double mag[MB_TOK][64];
    assert_true(n_rows <= 64);
    for (int64_t r = 0; r < n_rows; r++) {
        assert_true(tutti_dequantize_row(base, w + (size_t)r * ldw, wd, n));
        for (int t = 0; t < MB_TOK; t++) {
            decode_act(sc->vec_type, xq + (size_t)t * ldx, xd, n);
            mag[t][r] = 0;
            for (int64_t i = 0; i < n; i++) mag[t][r] += fabs((double)wd[i] * xd[i]);
            sc->vec_dot(n, &want[t][r], w + (size_t)r * ldw, xq + (size_t)t * ldx);
        }
    }
    char *wp = NULL;
    if (type == TUTTI_TYPE_Q4_K_X8) {
        void *a = NULL; /* the panel kernels use aligned loads, as the loader's arena allows */
        assert_int_equal(posix_memalign(&a, 64, tutti_repack_size(base, n_rows, n)), 0);
        wp = a;
        assert_int_equal(tutti_repack(base, w, wp, n_rows, n), TUTTI_TYPE_Q4_K_X8);
    }
    const void *wuse = wp ? (const void *)wp : (const void *)w;
    const int ns[] = {2, 3, 4, 5, 8};
    for (int p = 0; p < TUTTI_SIMD_COUNT; p++) {
        if (!tutti_vec_dot_get_path((tutti_simd)p, type)) continue;
        const char *pn = tutti_simd_name((tutti_simd)p);
        for (int th = 1; th <= 2; th++) {
            tutti_threadpool *tp = tutti_threadpool_new(th);
            assert_non_null(tp);
            for (int t = 0; t < MB_TOK; t++)
                tutti_matmul_path(tp, p, type, wuse, n_rows, n, x + (size_t)t * n, 1, y1 + (size_t)t * n_rows);
            for (int t = 0; t < MB_TOK; t++)
                for (int64_t r = 0; r < n_rows; r++) {
                    const float a = y1[(size_t)t * n_rows + r];
                    if (!(fabs((double)a - want[t][r]) <= 2e-5 * mag[t][r] + 1e-6))
                        fail_msg("%s matmul %s %lld x %lld token %d row %lld: %.9g vs scalar vec_dot %.9g", pn,
                                 tutti_type_name(base), (long long)n_rows, (long long)n, t, (long long)r, a,
                                 want[t][r]);
                }
            if (th == 2) { /* the same bits as one thread */
                tutti_threadpool *tp1 = tutti_threadpool_new(1);
                tutti_matmul_path(tp1, p, type, wuse, n_rows, n, x, 1, y2);
                tutti_threadpool_free(tp1);
                if (memcmp(y2, y1, sizeof(float) * (size_t)n_rows) != 0)
                    fail_msg("%s matmul %s %lld x %lld: 2 threads differ from 1", pn, tutti_type_name(base),
                             (long long)n_rows, (long long)n);
            }
            for (int k = 0; k < 5; k++) {
                const int nt = ns[k];
                memset(yb, 0xff, sizeof(float) * (size_t)n_rows * MB_TOK);
                tutti_matmul_path(tp, p, type, wuse, n_rows, n, x, nt, yb);
                for (int t = 0; t < nt; t++)
                    for (int64_t r = 0; r < n_rows; r++) {
                        const float a = yb[(size_t)t * n_rows + r], b = y1[(size_t)t * n_rows + r];
                        if (memcmp(&a, &b, sizeof a) == 0) continue;
                        if (is_kquant(type) && nt >= 8 && p != TUTTI_SIMD_SCALAR &&
                            fabs((double)a - b) <= 2e-5 * mag[t][r] + 1e-6)
                            continue;
                        fail_msg("%s matmul %s %lld x %lld, %d threads: token %d of a batch of %d, row %lld: %.9g, "
                                 "alone %.9g",
                                 pn, tutti_type_name(base), (long long)n_rows, (long long)n, th, t, nt, (long long)r, a,
                                 b);
                    }
            }
            tutti_threadpool_free(tp);
        }
    }
    free(wp);
    free(w);
    free(xq);
    free(x);
    free(wd);
    free(xd);
    free(y1);
    free(yb);
    free(y2);
}

static void test_matmul_batches(void **state) {
    (void)state;
    for (int ti = 0; ti <= N_TYPES; ti++) {
        const int type = ti < N_TYPES ? k_types[ti] : TUTTI_TYPE_Q4_K_X8;
        const int base = type == TUTTI_TYPE_Q4_K_X8 ? TUTTI_TYPE_Q4_K : type;
        const int64_t bs = tutti_type_get(base)->block_size;
        const tutti_vec_dot_traits *sc = tutti_vec_dot_get_path(TUTTI_SIMD_SCALAR, base);
        /* matmul.c's segment length: 96 KiB of one token's activations, in columns, a multiple of 256 */
        const double per_col = (double)tutti_row_size(sc->vec_type, 256) / 256.0;
        const int64_t seg = (int64_t)(98304.0 / per_col) / 256 * 256;
        const int64_t short_n = bs == 1 ? 67 : bs * 5, long_n = 2 * seg + (bs == 1 ? 1001 : 3 * bs);
        const int64_t rows_short = type == TUTTI_TYPE_Q4_K_X8 ? 40 : 37,
                      rows_long = type == TUTTI_TYPE_Q4_K_X8 ? 16 : 11;
        matmul_batch_case(type, rows_short, short_n);
        /* the segments of long rows are matmul.c's, the same for every
         * kernel: the i-quants (slow scalar kernels, seconds under ASan)
         * check them in one type, IQ2_XXS */
        if (!is_iquant(base) || base == TUTTI_TYPE_IQ2_XXS) matmul_batch_case(type, rows_long, long_n);
    }
}

/* tutti_matmul_batch: products of several weights (one repacked), token
 * counts 1..9, some sharing their input (one conversion), one with rows
 * longer than a segment (run alone), on 1 and 2 threads: every y has the
 * bits of tutti_matmul of its product alone. */
static void test_matmul_batch_products(void **state) {
    (void)state;
    enum { N_MM = 9 };
    const int types[N_MM] = {TUTTI_TYPE_Q4_K, TUTTI_TYPE_Q4_K,    TUTTI_TYPE_Q8_0, TUTTI_TYPE_F16, TUTTI_TYPE_F32,
                             TUTTI_TYPE_Q6_K, TUTTI_TYPE_Q4_K_X8, TUTTI_TYPE_Q8_0, TUTTI_TYPE_F16};
    const int64_t rows[N_MM] = {48, 33, 70, 17, 9, 40, 64, 24, 16}, toks[N_MM] = {5, 5, 1, 9, 3, 5, 2, 5, 5};
    /* columns: product 2's rows are longer than one segment (96 KiB of activations) */
    const int64_t cols[N_MM] = {512, 512, 98304 + 32, 256, 96, 512, 1024, 512, 512};
    /* products 0, 1, 5, 7 and 8 read the same rows: 0, 1 and 5 in one format (Q8_K), 7 and 8 in others */
    const int xs[N_MM] = {0, 0, 1, 2, 3, 0, 4, 0, 0};
    float *x[5], *y[N_MM], *want[N_MM];
    void *w[N_MM];
    tutti_mm mm[N_MM];
    for (int i = 0; i < 5; i++) {
        int64_t n = 0, t = 0;
        for (int k = 0; k < N_MM; k++)
            if (xs[k] == i) n = cols[k], t = toks[k];
        x[i] = malloc(sizeof(float) * (size_t)(n * t));
        assert_non_null(x[i]);
        fill_x(x[i], n * t);
    }
    for (int k = 0; k < N_MM; k++) {
        const int base = types[k] == TUTTI_TYPE_Q4_K_X8 ? TUTTI_TYPE_Q4_K : types[k];
        const size_t ldw = tutti_row_size(base, cols[k]);
        char *wb = malloc(ldw * (size_t)rows[k]);
        assert_non_null(wb);
        for (int64_t r = 0; r < rows[k]; r++) fill_w(base, wb + (size_t)r * ldw, cols[k]);
        w[k] = wb;
        if (types[k] == TUTTI_TYPE_Q4_K_X8) {
            void *a = NULL;
            assert_int_equal(posix_memalign(&a, 64, tutti_repack_size(base, rows[k], cols[k])), 0);
            assert_int_equal(tutti_repack(base, wb, a, rows[k], cols[k]), TUTTI_TYPE_Q4_K_X8);
            free(wb);
            w[k] = a;
        }
        y[k] = malloc(sizeof(float) * (size_t)(rows[k] * toks[k]));
        want[k] = malloc(sizeof(float) * (size_t)(rows[k] * toks[k]));
        assert_true(y[k] && want[k]);
        mm[k] = (tutti_mm){types[k], w[k], rows[k], cols[k], x[xs[k]], toks[k], y[k]};
    }
    for (int th = 1; th <= 2; th++) {
        tutti_threadpool *tp = tutti_threadpool_new(th);
        assert_non_null(tp);
        for (int k = 0; k < N_MM; k++) {
            tutti_matmul(tp, types[k], w[k], rows[k], cols[k], x[xs[k]], toks[k], want[k]);
            memset(y[k], 0xff, sizeof(float) * (size_t)(rows[k] * toks[k]));
        }
        tutti_matmul_batch(tp, mm, N_MM);
        for (int k = 0; k < N_MM; k++)
            if (memcmp(y[k], want[k], sizeof(float) * (size_t)(rows[k] * toks[k])))
                fail_msg("%d threads: product %d (%s %lld x %lld, %lld tokens) differs from tutti_matmul", th, k,
                         tutti_type_name(types[k]), (long long)rows[k], (long long)cols[k], (long long)toks[k]);
        tutti_threadpool_free(tp);
    }
    for (int k = 0; k < N_MM; k++) free(w[k]), free(y[k]), free(want[k]);
    for (int i = 0; i < 5; i++) free(x[i]);
}

/* 8: the small-batch tiles of the signed legacy types (Q8_0, Q4_0, Q5_0,
 * IQ4_NL: AVX-512 8 rows x 4 tokens in zmm pairs, AVX2 2 rows x 4 tokens),
 * forced path by path through tutti_matmul_path, with 1..9 tokens and row
 * counts around every tile edge (1..9, 15..17, 31, 33: partial 8-row and
 * 2-row tiles, partial 4-token groups) and 1, 3 and 17 blocks per row.
 * Every (row, token) result must have the bits of the path's own single-row
 * vec_dot (the same integer lane sums and float order); for Q8_0 also the
 * bits of the scalar vd_q8_0, which is llama.cpp's order (vecdot.c), and
 * the Q8_0 weights include the quant -128 (possible in a file, never made
 * by the quantizer: the sign and offset tricks must stay exact for it).
 * Other types: within the tolerance of 3 of the scalar path. */
static int legacy_tile_case(int type, int64_t n_rows, int64_t n) {
    enum { MAX_TOK = 9 };
    const tutti_vec_dot_traits *sc = tutti_vec_dot_get_path(TUTTI_SIMD_SCALAR, type);
    const size_t ldw = tutti_row_size(type, n), ldx = tutti_row_size(sc->vec_type, n);
    char *w = malloc(ldw * (size_t)n_rows), *xq = malloc(ldx * MAX_TOK);
    float *x = malloc(sizeof(float) * (size_t)n * MAX_TOK), *y = malloc(sizeof(float) * (size_t)n_rows * MAX_TOK);
    float *want = malloc(sizeof(float) * (size_t)n_rows * MAX_TOK), *wd = malloc(sizeof(float) * (size_t)n),
          *xd = malloc(sizeof(float) * (size_t)n);
    double *mag = malloc(sizeof(double) * (size_t)n_rows * MAX_TOK);
    assert_true(w && xq && x && y && want && wd && xd && mag);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *row = (uint8_t *)w + (size_t)r * ldw;
        fill_w(type, row, n);
        if (type == TUTTI_TYPE_Q8_0)
            for (int64_t b = 0; b < n / 32; b++) row[34 * b + 2 + (size_t)(r + b) % 32] = 0x80; /* -128 */
    }
    for (int t = 0; t < MAX_TOK; t++) {
        fill_x(x + (size_t)t * n, n);
        sc->from_float(x + (size_t)t * n, xq + (size_t)t * ldx, n);
    }
    for (int64_t r = 0; r < n_rows; r++) {
        assert_true(tutti_dequantize_row(type, w + (size_t)r * ldw, wd, n));
        for (int t = 0; t < MAX_TOK; t++) {
            decode_act(sc->vec_type, xq + (size_t)t * ldx, xd, n);
            double m = 0;
            for (int64_t i = 0; i < n; i++) m += fabs((double)wd[i] * xd[i]);
            mag[(size_t)t * n_rows + r] = m;
            sc->vec_dot(n, &want[(size_t)t * n_rows + r], w + (size_t)r * ldw, xq + (size_t)t * ldx);
        }
    }
    tutti_threadpool *tp = tutti_threadpool_new(2);
    assert_non_null(tp);
    int paths = 0;
    for (int p = 0; p < TUTTI_SIMD_COUNT; p++) {
        const tutti_vec_dot_traits *k = tutti_vec_dot_get_path((tutti_simd)p, type);
        if (!k) continue;
        paths++;
        const char *pn = tutti_simd_name((tutti_simd)p);
        for (int nt = 1; nt <= MAX_TOK; nt++) {
            memset(y, 0xff, sizeof(float) * (size_t)n_rows * MAX_TOK);
            tutti_matmul_path(tp, p, type, w, n_rows, n, x, nt, y);
            for (int t = 0; t < MAX_TOK; t++)
                for (int64_t r = 0; r < n_rows; r++) {
                    const size_t i = (size_t)t * n_rows + (size_t)r;
                    if (t >= nt) { /* rows past the batch stay untouched */
                        if (!isnan(y[i]))
                            fail_msg("%s %s: matmul of %d tokens wrote token %d", pn, tutti_type_name(type), nt, t);
                        continue;
                    }
                    float own;
                    k->vec_dot(n, &own, w + (size_t)r * ldw, xq + (size_t)t * ldx);
                    const bool exact = bit_exact(type) || p == TUTTI_SIMD_SCALAR;
                    if (memcmp(&y[i], &own, sizeof own) != 0 || (exact && memcmp(&y[i], &want[i], sizeof own) != 0) ||
                        !(fabs((double)y[i] - want[i]) <= 2e-5 * mag[i] + 1e-6))
                        fail_msg(
                            "%s %s %lld x %lld, %d tokens: [%d][%lld] = %.9g, the path's vec_dot %.9g, scalar %.9g", pn,
                            tutti_type_name(type), (long long)n_rows, (long long)n, nt, t, (long long)r, y[i], own,
                            want[i]);
                }
        }
    }
    tutti_threadpool_free(tp);
    free(w);
    free(xq);
    free(x);
    free(y);
    free(want);
    free(wd);
    free(xd);
    free(mag);
    return paths;
}

static void test_legacy_tiles(void **state) {
    (void)state;
    const int types[] = {TUTTI_TYPE_Q8_0, TUTTI_TYPE_Q4_0, TUTTI_TYPE_Q5_0, TUTTI_TYPE_IQ4_NL, TUTTI_TYPE_MXFP4};
    const int64_t rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33};
    const int64_t cols[] = {32, 96, 544};
    for (int ti = 0; ti < (int)(sizeof types / sizeof types[0]); ti++)
        for (int ri = 0; ri < (int)(sizeof rows / sizeof rows[0]); ri++)
            for (int ci = 0; ci < 3; ci++) {
                const int paths = legacy_tile_case(types[ti], rows[ri], cols[ci]);
                assert_true(paths >= 1);
                /* the x86 paths were among them where the CPU has them */
                if (tutti_simd_available(TUTTI_SIMD_AVX2)) assert_true(paths >= 2);
                if (tutti_simd_available(TUTTI_SIMD_AVX512)) assert_true(paths >= 3);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_vs_reference),
        cmocka_unit_test(test_paths_vs_scalar),
        cmocka_unit_test(test_repack_q4_k),
        cmocka_unit_test(test_forced_path),
        cmocka_unit_test(test_threadpool),
        /* after test_forced_path: this one fixes the process's kernel path */
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_row_kernels),
        cmocka_unit_test(test_matmul_batches),
        cmocka_unit_test(test_matmul_batch_products),
        cmocka_unit_test(test_legacy_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
