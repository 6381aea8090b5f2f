/* Error reporting shared by every layer.
 *
 * Functions that can fail return a status (0 = ok, negative = error) or NULL,
 * and record a human-readable message with tutti_set_error().  The message is
 * per thread, so concurrent members of an ensemble do not clobber each other.
 * tutti_last_error() (public, include/tutti.h) reads it back.  Messages must
 * say what to do: name the file, the field and what was wrong. */
#ifndef TUTTI_UTIL_ERROR_H
#define TUTTI_UTIL_ERROR_H

#include "tutti.h"

#if defined(__GNUC__)
#define TUTTI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TUTTI_PRINTF(a, b)
#endif

/* Records a formatted message and returns TUTTI_ERR (-1) so that callers can
 * write `return tutti_set_error("...")`. */
int tutti_set_error(const char *fmt, ...) TUTTI_PRINTF(1, 2);

/* The same for an error the caller's arguments caused (a value out of
 * range, a combination the function cannot do, an option the given models
 * do not allow): tutti_last_error_kind() then says TUTTI_ERR_UNSUPPORTED,
 * and the CLI exits 2 (bad usage) instead of 1.  Returns TUTTI_ERR. */
int tutti_set_usage_error(const char *fmt, ...) TUTTI_PRINTF(1, 2);

/* Prepends "prefix: " to the current message (adds context while
 * unwinding; the kind stays). */
void tutti_error_prefix(const char *fmt, ...) TUTTI_PRINTF(1, 2);

#endif
