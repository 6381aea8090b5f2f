/* tutti_mpi.h without MPI (CMake found none): every member is local, and
 * --place is refused with a message saying why. */
#include <stdio.h>
#include <string.h>

#include "mpi/tutti_mpi.h"

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
