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

/* --split-layers needs ranks: refused like --place */
int tutti_mpi_split_args(int *argc, char **argv, const char **counts, int32_t *ubatch) {
    (void)counts, (void)ubatch;
    for (int i = 0; i < *argc; i++)
        if (!strcmp(argv[i], "--split-layers") || !strncmp(argv[i], "--split-layers=", 15) ||
            !strcmp(argv[i], "--split-ubatch")) {
            fprintf(stderr, "tutti: %s: this tutti was built without MPI (install libopenmpi-dev and "
                            "reconfigure)\n", argv[i]);
            return -1;
        }
    return 0;
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
