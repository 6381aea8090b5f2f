/* Transfer cost of one member answer over MPI, as tutti's remote members
 * do it (src/fusion/member_mpi.c): rank 0 posts the 32-byte header receive,
 * sends a 16-byte request (one new token id), rank 1 answers with the
 * header and the payload.  Payloads: a full logits row of a 151,669-token
 * vocabulary (Qwen-sized), a 512-token row (stories260K) and the 257
 * doubles of a next-byte distribution.  Rank 0 polls with MPI_Test, as
 * tutti does.
 *   mpirun --oversubscribe --allow-run-as-root -np 2 build/bench_mpi_row [iterations] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void wait_poll(MPI_Request *r) {
    int f = 0;
    while (!f) MPI_Test(r, &f, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv) {
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    const int sizes[3] = {151669 * 4, 512 * 4, 257 * 8};
    const char *names[3] = {"logits row, 151,669 floats", "logits row, 512 floats",
                            "next-byte distribution, 257 doubles"};
    char *buf = calloc(1, (size_t)sizes[0]);
    char hdr[32] = {0}, req[16] = {0};
    for (int s = 0; s < 3; s++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0;
        for (int i = -10; i < iters; i++) {
            if (i == 0) t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Request r[3];
                MPI_Irecv(hdr, 32, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &r[1]);
                MPI_Isend(req, 16, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &r[0]);
                wait_poll(&r[0]);
                wait_poll(&r[1]);
                MPI_Irecv(buf, sizes[s], MPI_BYTE, 1, 7, MPI_COMM_WORLD, &r[2]);
                wait_poll(&r[2]);
            } else if (rank == 1) {
                MPI_Recv(req, 16, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(hdr, 32, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
                MPI_Send(buf, sizes[s], MPI_BYTE, 0, 7, MPI_COMM_WORLD);
            }
        }
        double dt = (MPI_Wtime() - t0) / iters;
        if (rank == 0)
            printf("%-38s %8d bytes: %8.1f us per request (%.2f GB/s)\n", names[s], sizes[s] + 48, 1e6 * dt,
                   (sizes[s] + 48) / dt / 1e9);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
