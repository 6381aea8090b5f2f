/* AArch64 NEON path: placeholder until the kernels land (see below). */
#include "quant/simd_common.h"

bool tutti_simd_cpu_neon(void) { return false; }
void tutti_simd_fill_neon(tutti_vec_dot_traits *tab) { (void)tab; }
