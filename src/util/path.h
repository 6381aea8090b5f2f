/* The file name of a path: what follows its last '/' (the whole path when
 * it has none), as reports and error messages name a model file.
 * Header-only (static inline), so the front ends (src/cli) use it without
 * linking anything of the library's, as util/buf.h. */
#ifndef TUTTI_UTIL_PATH_H
#define TUTTI_UTIL_PATH_H

#include <string.h>

static inline const char *tutti_base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

#endif
