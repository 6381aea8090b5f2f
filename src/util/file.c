/* Writing files safely (see file.h). */
#define _GNU_SOURCE
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/error.h"

/* The file a path finally names: symbolic links followed one by one (also
 * a dangling one, whose target is then created), at most 40 as the kernel
 * allows.  Writes into out (PATH_MAX); false when the chain is too long or
 * a name does not fit. */
static bool resolve_links(const char *path, char *out) {
    if (strlen(path) >= PATH_MAX) return false;
    strcpy(out, path);
    for (int hop = 0; hop < 40; hop++) {
        struct stat st;
        if (lstat(out, &st) != 0 || !S_ISLNK(st.st_mode)) return true;
        char target[PATH_MAX];
        ssize_t n = readlink(out, target, sizeof target - 1);
        if (n < 0) return true; /* cannot read it: let the write report the error */
        target[n] = 0;
        if (target[0] == '/') {
            strcpy(out, target);
        } else { /* relative to the link's folder */
            char *slash = strrchr(out, '/');
            size_t dir = slash ? (size_t)(slash - out) + 1 : 0;
            if (dir + (size_t)n >= PATH_MAX) return false;
            memcpy(out + dir, target, (size_t)n + 1);
        }
    }
    return false;
}

/* The folder of a path ("." for a bare name) into dir (PATH_MAX). */
static void folder_of(const char *path, char *dir) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = 0;
    }
}

int tutti_check_writable(const char *path) {
    char real[PATH_MAX], dir[PATH_MAX];
    if (!path || !*path) return tutti_set_error("no output file name");
    if (!resolve_links(path, real)) return tutti_set_error("%s: name too long or too many symbolic links", path);
    struct stat st;
    if (stat(real, &st) == 0 && S_ISDIR(st.st_mode))
        return tutti_set_error("%s is a directory; give a file name", path);
    folder_of(real, dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return tutti_set_error("cannot write %s: the folder %s does not exist", path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return tutti_set_error("cannot write %s: the folder %s is not writable: %s", path, dir, strerror(errno));
    return 0;
}

bool tutti_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0) return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* A device, FIFO or socket (/dev/null, /dev/stdout, a named pipe) is
 * written in place: replacing its node would not reach the reader (and as
 * root would remove /dev/null). */
static int write_in_place(const char *path, tutti_write_fn produce, void *ctx) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return tutti_set_error("cannot write %s: %s", path, strerror(errno));
    int rc = produce(fp, ctx);
    if (fflush(fp) != 0 && rc == 0) rc = tutti_set_error("cannot write %s: %s", path, strerror(errno));
    if (fclose(fp) != 0 && rc == 0) rc = tutti_set_error("cannot write %s: %s", path, strerror(errno));
    return rc;
}

/* A new file ".NAME.tmp-PID-N" beside real, created exclusively with the
 * mode a plain creation would get (0666 minus the umask).  fd or -1. */
static int open_temporary(const char *real, char *tmp) {
    static atomic_uint counter;
    char dir[PATH_MAX];
    folder_of(real, dir);
    const char *slash = strrchr(real, '/');
    const char *base = slash ? slash + 1 : real;
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned k = atomic_fetch_add(&counter, 1);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int n = snprintf(tmp, PATH_MAX, "%s/.%.100s.tmp-%ld-%u-%lx", dir, base, (long)getpid(), k,
                         (unsigned long)ts.tv_nsec);
        if (n < 0 || n >= PATH_MAX) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

int tutti_write_atomic(const char *path, tutti_write_fn produce, void *ctx) {
    char real[PATH_MAX], tmp[PATH_MAX];
    if (!path || !*path || !produce) return tutti_set_error("write: no file name or no content");
    if (!resolve_links(path, real)) return tutti_set_error("%s: name too long or too many symbolic links", path);
    struct stat st;
    bool exists = stat(real, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) return tutti_set_error("%s is a directory; give a file name", path);
    if (exists && !S_ISREG(st.st_mode)) return write_in_place(real, produce, ctx);
    int fd = open_temporary(real, tmp);
    if (fd < 0) {
        char dir[PATH_MAX];
        folder_of(real, dir);
        return tutti_set_error("cannot write %s: cannot create a file in %s: %s", path, dir, strerror(errno));
    }
    if (exists) (void)fchmod(fd, st.st_mode & 07777); /* a replaced file keeps its permissions */
    FILE *fp = fdopen(fd, "wb");
    if (!fp) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return tutti_set_error("cannot write %s: %s", path, strerror(e));
    }
    int rc = produce(fp, ctx);
    /* everything on the disk before the name points at it */
    if (rc == 0 && (fflush(fp) != 0 || fsync(fileno(fp)) != 0))
        rc = tutti_set_error("cannot write %s: %s", path, strerror(errno));
    if (fclose(fp) != 0 && rc == 0) rc = tutti_set_error("cannot write %s: %s", path, strerror(errno));
    if (rc == 0 && rename(tmp, real) != 0) rc = tutti_set_error("cannot write %s: %s", path, strerror(errno));
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    /* the rename itself survives a crash once the folder is synced */
    char dir[PATH_MAX];
    folder_of(real, dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}
