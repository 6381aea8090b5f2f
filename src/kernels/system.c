/* The machine section of include/tutti.h: what this build and CPU run
 * (tutti bench prints it beside every figure). */
#include <unistd.h>

#include "quant/vecdot.h"
#include "tutti.h"

int tutti_system_info_get(tutti_system_info *out) {
    int rc = tutti_simd_init(); /* the error names TUTTI_KERNELS and the paths this CPU runs */
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *out = (tutti_system_info){
        .kernels = tutti_simd_name(tutti_simd_current()),
        .n_cpus = n > 0 ? (int32_t)n : 1,
#ifdef TUTTI_HAVE_MPI
        .mpi = true,
#endif
    };
    return rc;
}
