/* Writing files safely — the `util` layer, used by every command that
 * writes one (merge, fit -o, logits -o, eval --plot, the schedule cache,
 * the GGUF writer).
 *
 * tutti_write_atomic writes a file so that no reader ever sees a partial
 * one and a failed or interrupted write destroys nothing: the bytes go to a
 * new temporary file in the destination's own folder (same file system,
 * so the rename below is atomic), which is flushed, fsync'd and renamed
 * onto the destination only once the producer has written everything; on
 * any failure the temporary is removed and the destination is as it was.
 * Because the old file is replaced and never truncated, a process that has
 * it memory-mapped (a merge reading its inputs, a running model) keeps
 * reading the old bytes: no SIGBUS, no stub left behind.
 *
 * A symbolic link at the destination is followed: the file it names is
 * replaced and the link stays.  An existing file keeps its permission bits;
 * a new one gets 0666 minus the umask, as fopen(path, "w") would give. */
#ifndef TUTTI_UTIL_FILE_H
#define TUTTI_UTIL_FILE_H

#include <stdbool.h>
#include <stdio.h>

/* Writes the file's whole content to fp; 0, or TUTTI_ERR with
 * tutti_last_error() set (the write is then abandoned).  A short write
 * seen only at flush time (disk full) is caught by tutti_write_atomic. */
typedef int (*tutti_write_fn)(FILE *fp, void *ctx);

/* Creates or replaces path with what produce(fp, ctx) writes (see above).
 * 0, or TUTTI_ERR with tutti_last_error() naming path and the cause (the
 * folder is missing or not writable, path is a directory, write failed,
 * the disk is full, ...). */
int tutti_write_atomic(const char *path, tutti_write_fn produce, void *ctx);

/* true when a and b name the same existing file: the same device and inode
 * after following symbolic links, so "./x", "/abs/x", a symlink to x and a
 * hard link to x are all x.  false when either does not exist. */
bool tutti_same_file(const char *a, const char *b);

/* Whether tutti_write_atomic(path) can be expected to succeed, checked
 * before long work (a merge, a fit) so that it does not end in a lost
 * result: path is not a directory and its folder exists and is writable.
 * 0, or TUTTI_ERR with the reason. */
int tutti_check_writable(const char *path);

#endif
