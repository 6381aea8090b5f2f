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

/* One error-code space (SQLite's primary and extended codes).  The public
 * codes of tutti.h are the primary ones: TUTTI_OK, TUTTI_ERR (a failure at
 * run time), TUTTI_ERR_UNSUPPORTED (a request the caller cannot make) and
 * TUTTI_ERR_SIZE.  Layers that need to tell failures apart internally use
 * extended codes -(primary | k << 8): each is a kind of its primary, never
 * equal to any primary code, and tutti_primary_code() maps it back.  So
 * an internal code that escapes through a public function still reads as
 * the failure it is (a caller testing `== TUTTI_ERR_UNSUPPORTED` is never
 * fooled), and public functions return tutti_primary_code(rc). */
#define TUTTI_EXTENDED_CODE(primary, k) (-((-(primary)) | ((k) << 8)))
/* A member's tokens cannot spell the committed text (it may leave a
 * byte/span generation). */
#define FUSION_ERR_SPELL TUTTI_EXTENDED_CODE(TUTTI_ERR, 1)
/* A member's context is full (generation stops). */
#define FUSION_ERR_CTX TUTTI_EXTENDED_CODE(TUTTI_ERR, 2)
/* A member's logits are NaN or +inf (an error where they come from). */
#define FUSION_ERR_NONFINITE TUTTI_EXTENDED_CODE(TUTTI_ERR, 3)

/* The primary code of rc: rc itself for 0, the public codes and positive
 * values, the primary of an extended code. */
static inline int tutti_primary_code(int rc) {
    if (rc >= 0 || rc == TUTTI_ERR_SIZE) return rc;
    return -((-rc) & 0xff);
}

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
