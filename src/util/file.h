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

/* The declarations (tutti_write_fn, tutti_write_atomic, tutti_same_file,
 * tutti_check_writable) are public: include/tutti.h. */
#include "tutti.h"

#endif
