/* x86-64 SIMD paths: the kernels of simd_x86_kernels.inc compiled for AVX2
 * (+FMA, F16C) and for AVX-512 VL/BW with VNNI, each with GCC/Clang target
 * pragmas so the rest of the binary stays baseline x86-64 and runs on any
 * CPU; the path is only used after the CPU feature test below passes. */
#include "quant/simd_common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>

bool tutti_simd_cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

bool tutti_simd_cpu_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define SFX(name) name##_avx2
#define KV_VNNI 0
#include "quant/simd_x86_kernels.inc"
#undef SFX
#undef KV_VNNI
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#define SFX(name) name##_avx512
#define KV_VNNI 1
#include "quant/simd_x86_kernels.inc"
#undef SFX
#undef KV_VNNI
#pragma GCC pop_options

void tutti_simd_fill_avx2(tutti_vec_dot_traits *tab) { fill_avx2(tab, TUTTI_SIMD_AVX2); }
void tutti_simd_fill_avx512(tutti_vec_dot_traits *tab) { fill_avx512(tab, TUTTI_SIMD_AVX512); }

#else /* not x86-64: the x86 paths are never available */

bool tutti_simd_cpu_avx2(void) { return false; }
bool tutti_simd_cpu_avx512(void) { return false; }
void tutti_simd_fill_avx2(tutti_vec_dot_traits *tab) { (void)tab; }
void tutti_simd_fill_avx512(tutti_vec_dot_traits *tab) { (void)tab; }

#endif
