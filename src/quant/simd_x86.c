/* x86-64 SIMD paths: the kernels of simd_x86_kernels.inc compiled for AVX2
 * (+FMA, F16C) and for AVX-512 VL/BW with VNNI, each with GCC/Clang target
 * pragmas so the rest of the binary stays baseline x86-64 and runs on any
 * CPU; the path is only used after the CPU feature test below passes. */
#include "quant/simd_common.h"

/* Plain float expressions stay two roundings, as in the scalar kernels they
 * must match (GCC in ISO C mode does not contract; clang needs this). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>

#include <cpuid.h>

/* F16C is CPUID.1:ECX bit 29 (clang 14's __builtin_cpu_supports does not
 * know "f16c"); the AVX state check of __builtin_cpu_supports("avx2")
 * covers the OS side. */
static bool cpu_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

bool tutti_simd_cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c();
}

bool tutti_simd_cpu_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

/* Every function of the .inc gets the path's target: GCC through its
 * target pragma, clang (which ignores that pragma) through
 * `#pragma clang attribute`. */
#if defined(__clang__)
#define TARGET_BEGIN_AVX2 \
    _Pragma("clang attribute push (__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
#define TARGET_BEGIN_AVX512 \
    _Pragma(                \
        "clang attribute push (__attribute__((target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni\"))), apply_to = function)")
#define TARGET_END _Pragma("clang attribute pop")
#else
#define TARGET_BEGIN_AVX2 _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define TARGET_BEGIN_AVX512 \
    _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni\")")
#define TARGET_END _Pragma("GCC pop_options")
#endif

TARGET_BEGIN_AVX2
#define SFX(name) name##_avx2
#define KV_VNNI 0
#include "quant/simd_x86_kernels.inc"
#undef SFX
#undef KV_VNNI
TARGET_END

TARGET_BEGIN_AVX512
#define SFX(name) name##_avx512
#define KV_VNNI 1
#include "quant/simd_x86_kernels.inc"
#undef SFX
#undef KV_VNNI
TARGET_END

void tutti_simd_fill_avx2(tutti_vec_dot_traits *tab) { fill_avx2(tab, TUTTI_SIMD_AVX2); }
void tutti_simd_fill_avx512(tutti_vec_dot_traits *tab) { fill_avx512(tab, TUTTI_SIMD_AVX512); }

#else /* not x86-64: the x86 paths are never available */

bool tutti_simd_cpu_avx2(void) { return false; }
bool tutti_simd_cpu_avx512(void) { return false; }
void tutti_simd_fill_avx2(tutti_vec_dot_traits *tab) { (void)tab; }
void tutti_simd_fill_avx512(tutti_vec_dot_traits *tab) { (void)tab; }

#endif
