/* The `ensemble` layer (internal): making an ensemble (new.c: its members
 * through member/member.h's factory, placed over MPI ranks by src/mpi/, and
 * the schedule of their forward passes, schedule.c) and the ensemble file
 * format (file.c).  The public entry points are tutti_ensemble_new and the
 * tutti_ensemble_file_* calls of include/tutti.h; what an ensemble does once
 * made (generation, evaluation, fitting) is the fusion layer's.
 *
 * Layering: cli/server -> ensemble -> mpi -> fusion -> member -> model. */
#ifndef TUTTI_ENSEMBLE_H
#define TUTTI_ENSEMBLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "member/member.h"
#include "tutti.h"

/* ---- file_weights.c: the ensemble file's context-weight and select lines ---- */

/* One comment-stripped, trimmed line: 1 when it is a `context`,
 * `context-halflife`, `context-coef` or `select` line (parsed into ef;
 * *max_member: the largest member number a context-coef line named), 0 when
 * it is another kind of line, TUTTI_ERR with a message (the caller names
 * the file and line). */
int ens_file_weights_line(tutti_ensemble_file *ef, const char *line, int32_t *max_member);
/* After the last line: every context-coef names a member of the file. */
int ens_file_weights_done(const tutti_ensemble_file *ef, int32_t max_member);
/* The lines for e's context weights and selective fusion (if on). */
int ens_file_weights_write(const tutti_ensemble *e, FILE *out);

/* ---- schedule.c ---- */

/* Scheduling calibration for local members m[0..n): seconds per step (one
 * one-token forward pass of every member) when they run concurrently with
 * n_threads_each threads each (*t_par) and one after the other with
 * n_threads_all each (*t_seq): the fastest of three alternating rounds of
 * about 30 ms (at least one step) per mode, after a warm-up step per
 * member and mode (which also pages the weights in). */
int ens_members_calibrate(fusion_member *const *m, int32_t n, int32_t n_threads_each, int32_t n_threads_all,
                          double *t_seq, double *t_par);

/* The calibration cached per machine, member files and thread counts.
 * key: -1 when a path cannot be resolved; get: true with the cached
 * seconds per step (a busy machine's entry only within 10 minutes of its
 * measurement); put stores them (errors ignored) with busy_at, 0 for a
 * quiet machine, else the Unix time of the measurement
 * (ens_schedule_busy_at, read before measuring: a load average above the
 * CPU count means other programs competed for them); path[cap] receives
 * the cache file's name. */
int ens_schedule_cache_key(const char *const *paths, int32_t n, int32_t threads_each, int32_t threads_all,
                           uint64_t *key);
bool ens_schedule_cache_get(uint64_t key, double *t_seq, double *t_par, char *path, size_t cap);
void ens_schedule_cache_put(uint64_t key, double t_seq, double t_par, int64_t busy_at, char *path, size_t cap);
int64_t ens_schedule_busy_at(void);

#endif
