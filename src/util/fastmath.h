/* Vectorisable exp/log and per-CPU function clones for loops over whole
 * vocabularies (fusion rules, byte marginals, the sampler).
 *
 * libm's expf/logf are one call per element, and floorf is a call without
 * SSE4.1, so the loops that use them cannot be vectorised.  These versions
 * are plain branch-free arithmetic the compiler turns into SIMD code:
 *   exp: x = n·ln2 + r, |r| <= ln2/2, degree-7 Taylor polynomial;
 *   log: x = 2^e·m, m in [√½, √2), log m = 2 atanh((m-1)/(m+1)) to s^11.
 * Relative error < 3e-7 (float rounding level).  tutti_fast_exp is for
 * x <= 0 (probabilities relative to a maximum): exp(-inf) = 0 and x < -87
 * flushes to 0; x > 88 gives +inf (exp(88.72) is FLT_MAX, so (88, 88.72]
 * overflows early); NaN gives NaN.  No input is undefined behaviour.
 * tutti_fast_log(0) = -inf, log(+inf) = +inf, negative or NaN input: NaN.
 *
 * TUTTI_VEC_CLONES on a function compiles it once per instruction set
 * (AVX-512, AVX2, baseline x86-64) and picks the best at load time (GCC's
 * target_clones, glibc ifunc; clang 14 emits no resolver for clones called
 * from other files, so clang builds get the baseline only): the build itself targets baseline
 * x86-64, where the loops run 4 floats wide.  Put it on the function that
 * holds the loops, and TUTTI_VEC_INLINE on the helpers it calls. */
#ifndef TUTTI_UTIL_FASTMATH_H
#define TUTTI_UTIL_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__has_attribute) && !defined(__clang__) && !defined(TUTTI_NO_CLONES)
#if __has_attribute(target_clones)
#define TUTTI_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef TUTTI_VEC_CLONES
#define TUTTI_VEC_CLONES
#endif
/* Helpers of cloned functions must be inlined into every clone (a call
 * would go to the baseline build). */
#if defined(__GNUC__)
#define TUTTI_VEC_INLINE static inline __attribute__((always_inline))
#else
#define TUTTI_VEC_INLINE static inline
#endif

TUTTI_VEC_INLINE float tutti_fast_exp(float x) {
    /* Clamp before the float -> int conversion of n: converting NaN or a
     * value out of int32's range is undefined behaviour, and exponents
     * outside [-126, 127] would overflow the shift.  NaN fails both
     * comparisons and is clamped to -87 here (its result is chosen below). */
    float xc = x >= -87.0f ? x : -87.0f;
    xc = xc <= 88.0f ? xc : 88.0f;
    /* round to nearest with the 1.5·2^23 trick (no floorf call) */
    float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693145752f - n * 1.42860677e-6f;
    float p =
        1.0f +
        r * (1.0f +
             r * (0.5f + r * (1.6666667e-1f +
                              r * (4.1666668e-2f + r * (8.3333338e-3f + r * (1.3888889e-3f + r * 1.9841270e-4f))))));
    union {
        uint32_t i;
        float f;
    } u = {.i = (uint32_t)((int32_t)n + 127) << 23};
    float y = p * u.f;
    y = x < -87.0f ? 0.0f : y;
    y = x > 88.0f ? INFINITY : y;
    return x == x ? y : x; /* NaN in, NaN out */
}

TUTTI_VEC_INLINE float tutti_fast_log(float x) {
    union {
        float f;
        int32_t i;
    } u = {.f = x};
    int32_t e = ((u.i >> 23) & 0xff) - 127;
    u.i = (u.i & 0x007fffff) | 0x3f800000; /* m in [1, 2) */
    float m = u.f;
    int big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    float ef = (float)(e + big);
    float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float l = 2.0f * s *
              (1.0f + s2 * (0.33333334f + s2 * (0.2f + s2 * (0.14285715f + s2 * (0.11111111f + s2 * 0.09090909f)))));
    float y = ef * 0.693145752f + (ef * 1.42860677e-6f + l);
    y = x < INFINITY ? y : x; /* +inf */
    return x > 0 ? y : (x == 0 ? -INFINITY : NAN);
}

/* max of x[0..n); NaN ignored, -inf when empty.  Written with GCC/clang
 * 4-float vector types (4 accumulators): GCC 12 does not vectorise a float
 * max reduction unless NaNs are assumed away, and lowers wider generic
 * vector compares element by element on baseline x86-64. */
#if defined(__GNUC__)
typedef float tutti_v4f __attribute__((vector_size(16)));
typedef int32_t tutti_v4i __attribute__((vector_size(16)));
TUTTI_VEC_INLINE float tutti_vec_max(const float *x, int32_t n) {
    const tutti_v4f ninf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    tutti_v4f m[4] = {ninf, ninf, ninf, ninf};
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int a = 0; a < 4; a++) {
            tutti_v4f v;
            memcpy(&v, x + j + 4 * a, sizeof v);
            tutti_v4i gt = v > m[a]; /* all ones where v > m; NaN never is */
            m[a] = (tutti_v4f)(((tutti_v4i)v & gt) | ((tutti_v4i)m[a] & ~gt));
        }
    float r = -INFINITY;
    for (int a = 0; a < 4; a++)
        for (int k = 0; k < 4; k++) r = m[a][k] > r ? m[a][k] : r;
    for (; j < n; j++) r = x[j] > r ? x[j] : r;
    return r;
}
/* Whether any of x[0..16) is > t (NaN never is). */
TUTTI_VEC_INLINE int tutti_any_gt16(const float *x, float t) {
    const tutti_v4f tv = {t, t, t, t};
    tutti_v4i any = {0, 0, 0, 0};
    for (int a = 0; a < 4; a++) {
        tutti_v4f v;
        memcpy(&v, x + 4 * a, sizeof v);
        any |= v > tv;
    }
    return (any[0] | any[1] | any[2] | any[3]) != 0;
}
/* Whether any of x[0..16) is NaN or +inf (-inf is a masked outcome, allowed). */
TUTTI_VEC_INLINE int tutti_any_bad16(const float *x) {
    const tutti_v4f inf = {INFINITY, INFINITY, INFINITY, INFINITY};
    tutti_v4i ok = {-1, -1, -1, -1};
    for (int a = 0; a < 4; a++) {
        tutti_v4f v;
        memcpy(&v, x + 4 * a, sizeof v);
        ok &= v < inf; /* false for NaN and +inf */
    }
    return (ok[0] & ok[1] & ok[2] & ok[3]) == 0;
}
/* Whether any of x[0..16) is == t. */
TUTTI_VEC_INLINE int tutti_any_eq16(const float *x, float t) {
    const tutti_v4f tv = {t, t, t, t};
    tutti_v4i any = {0, 0, 0, 0};
    for (int a = 0; a < 4; a++) {
        tutti_v4f v;
        memcpy(&v, x + 4 * a, sizeof v);
        any |= v == tv;
    }
    return (any[0] | any[1] | any[2] | any[3]) != 0;
}
#else
TUTTI_VEC_INLINE float tutti_vec_max(const float *x, int32_t n) {
    float r = -INFINITY;
    for (int32_t j = 0; j < n; j++) r = x[j] > r ? x[j] : r;
    return r;
}
TUTTI_VEC_INLINE int tutti_any_gt16(const float *x, float t) {
    int any = 0;
    for (int k = 0; k < 16; k++) any |= x[k] > t;
    return any;
}
TUTTI_VEC_INLINE int tutti_any_eq16(const float *x, float t) {
    int any = 0;
    for (int k = 0; k < 16; k++) any |= x[k] == t;
    return any;
}
TUTTI_VEC_INLINE int tutti_any_bad16(const float *x) {
    int any = 0;
    for (int k = 0; k < 16; k++) any |= !(x[k] < INFINITY);
    return any;
}
#endif

/* Index of the first NaN or +inf in x[0..n), -1 when there is none (-inf
 * is allowed: a masked outcome).  Logits like that come from broken weights
 * or an overflow; every consumer of logits (sampler, fusion members) checks
 * with this one vectorised pass instead of sampling garbage. */
TUTTI_VEC_INLINE int32_t tutti_first_nonfinite(const float *x, int32_t n) {
    int32_t i = 0;
    while (i + 16 <= n && !tutti_any_bad16(x + i)) i += 16;
    for (; i < n; i++)
        if (!(x[i] < INFINITY)) return i;
    return -1;
}

#endif
