/* tutti_mpi.h without MPI (CMake found none): every member is local, and
 * --place is refused with a message saying why. */
#include <stdio.h>
#include <string.h>

#include "mpi/tutti_mpi.h"
#include "tutti.h"
#include "util/error.h"

int tutti_mpi_start(int *argc, char **argv) {
    for (int i = 1; i < *argc; i++)
        if (!strcmp(argv[i], "--place")) {
            fprintf(stderr, "tutti: --place: this tutti was built without MPI (install libopenmpi-dev and "
                            "reconfigure)\n");
            return 2;
        }
    return -1;
}
int tutti_mpi_stop(int rc) { return rc; }
int tutti_mpi_member_rank(int32_t i, int32_t n) {
    (void)i, (void)n;
    return 0;
}
int tutti_mpi_size(void) { return 1; }
int tutti_mpi_dead_rank(char *members, size_t cap) {
    (void)members, (void)cap;
    return 0;
}

/* --split-layers needs ranks: refused like --place */
int tutti_mpi_split_check(const char *counts, int32_t ubatch) {
    if (!counts && !ubatch) return TUTTI_OK;
    return tutti_set_error("%s: this tutti was built without MPI (install libopenmpi-dev and reconfigure)",
                           counts ? "--split-layers" : "--split-ubatch");
}
struct tutti_model *tutti_mpi_split_load(const char *path, const struct tutti_model_params *params,
                                         const char *counts) {
    (void)path, (void)params, (void)counts;
    tutti_set_error("--split-layers: this tutti was built without MPI");
    return NULL;
}
int tutti_mpi_split_attach(struct tutti_session *s, int32_t n_threads, int32_t ubatch) {
    (void)s, (void)n_threads, (void)ubatch;
    return tutti_set_error("--split-layers: this tutti was built without MPI");
}
int tutti_mpi_split_members(const char *counts, int32_t ubatch, const char *const *paths, int32_t n_paths) {
    (void)paths, (void)n_paths;
    return tutti_mpi_split_check(counts ? counts : "", ubatch);
}
bool tutti_mpi_member_split(const char *path, const char **counts, int32_t *ubatch) {
    (void)path, (void)counts, (void)ubatch;
    return false;
}
tutti_mpi_ring *tutti_mpi_ring_open(const char *path, const struct tutti_model *whole,
                                    const struct tutti_model_params *params, const char *counts, int32_t ubatch,
                                    struct tutti_model **part) {
    (void)path, (void)whole, (void)params, (void)counts, (void)ubatch;
    if (part) *part = NULL;
    tutti_set_error("--split-layers: this tutti was built without MPI");
    return NULL;
}
int tutti_mpi_ring_attach(tutti_mpi_ring *r, struct tutti_session *s, int32_t slot, int32_t n_threads) {
    (void)r, (void)s, (void)slot, (void)n_threads;
    return tutti_set_error("--split-layers: this tutti was built without MPI");
}
int tutti_mpi_ring_copy(tutti_mpi_ring *r, int32_t dst, int32_t src, int32_t k) {
    (void)r, (void)dst, (void)src, (void)k;
    return TUTTI_OK;
}
void tutti_mpi_ring_free(tutti_mpi_ring *r) { (void)r; }
tutti_model *tutti_mpi_experts_load(const char *path, const tutti_model_params *params) {
    return tutti_model_load(path, params);
}
int tutti_mpi_experts_attach(struct tutti_session *s, const char *path) {
    (void)s, (void)path;
    return tutti_set_error(
        "--split-experts: this tutti was built without MPI (install libopenmpi-dev and reconfigure)");
}
int tutti_mpi_experts_members(bool on, bool strict) {
    (void)strict;
    return on ? tutti_set_error("--split-experts: this tutti was built without MPI (install libopenmpi-dev and "
                                "reconfigure)")
              : TUTTI_OK;
}
int tutti_mpi_member_experts(void) { return 0; }
