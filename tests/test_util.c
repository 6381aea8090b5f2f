/* Helpers of src/util shared by the layers: the growing buffer's
 * formatted append (util/buf.h) against snprintf of the same formats into
 * one large buffer, from an empty buffer, within the capacity there is and
 * across several doublings; a path's file name (util/path.h); the re-read
 * of a mapped file's small folios (util/mem.h) keeps the mapping's content
 * and never lowers its share of 2 MiB entries. */
#include "test_common.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/mem.h"
#include "util/path.h"

static int appendf(char **b, size_t *n, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int appendf(char **b, size_t *n, size_t *cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tutti_buf_vappendf(b, n, cap, fmt, ap);
    va_end(ap);
    return rc;
}

static void test_buf_vappendf(void **state) {
    (void)state;
    static char want[1 << 16];
    size_t w = 0;
    char *b = NULL;
    size_t n = 0, cap = 0;
    /* pieces of 0 to ~1000 bytes: some fit in the capacity, others grow it */
    for (int i = 0; w < 60000; i++) {
        const int len = (i * 37) % 1000;
        assert_int_equal(appendf(&b, &n, &cap, "[%d:%*s]", i, len, "x"), 0);
        w += (size_t)snprintf(want + w, sizeof want - w, "[%d:%*s]", i, len, "x");
        assert_int_equal(n, w);
        assert_true(cap > n);
        assert_int_equal(b[n], 0);
        assert_memory_equal(b, want, w);
    }
    assert_int_equal(appendf(&b, &n, &cap, "%s", ""), 0); /* nothing to add */
    assert_int_equal(b[n], 0);
    free(b);
}

static void test_base_name(void **state) {
    (void)state;
    assert_string_equal(tutti_base_name("/a/b/model.gguf"), "model.gguf");
    assert_string_equal(tutti_base_name("model.gguf"), "model.gguf");
    assert_string_equal(tutti_base_name("dir/"), "");
}

/* A file of 4 whole 2 MiB chunks and a partial fifth, cached in small
 * folios (read back 64 KiB at a time without readahead, as a program that
 * does not advise MADV_HUGEPAGE may leave it), mapped at a 2 MiB-aligned
 * address and faulted in; after tutti_mem_reread_small the mapping still
 * reads the file's bytes and is mapped by 2 MiB entries at least as much as
 * before (on Linux 6.x ext4, all of the 4 chunks: printed). */
static void test_mem_reread_small(void **state) {
    (void)state;
    const size_t chunk = (size_t)2 << 20, size = 4 * chunk + 12345;
    char path[] = "/tmp/tutti-test-reread-XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    unsigned char *want = malloc(size);
    assert_non_null(want);
    for (size_t i = 0; i < size; i++) want[i] = (unsigned char)((i * 2654435761u) >> 13);
    assert_int_equal(write(fd, want, size), (ssize_t)size);
    assert_int_equal(fdatasync(fd), 0); /* clean pages: the page cache may drop them */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    static unsigned char block[1 << 16];
    for (off_t at = 0; pread(fd, block, sizeof block, at) > 0;) at += (off_t)sizeof block;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_NORMAL);
    /* a 2 MiB-aligned address for the mapping: reserve, then map over it */
    char *res = mmap(NULL, size + chunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(res != MAP_FAILED);
    char *map = (char *)(((uintptr_t)res + chunk - 1) / chunk * chunk);
    assert_true(mmap(map, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == map);
    (void)madvise(map, size, MADV_HUGEPAGE);
    tutti_mem_populate(map, size);
    const double before = tutti_mem_huge_share(map, NULL);
    const size_t done = tutti_mem_reread_small(map, size, fd);
    assert_true(done <= 4 * chunk && done % chunk == 0);
    const double after = tutti_mem_huge_share(map, NULL);
    printf("2 MiB-mapped share %.2f -> %.2f, %zu MiB re-read\n", before, after, done >> 20);
    assert_memory_equal(map, want, size);
    assert_true(after >= before);
    /* a mapping not 2 MiB-aligned is left as it is */
    assert_int_equal(tutti_mem_reread_small(map + 4096, size - 4096, fd), 0);
    assert_memory_equal(map, want, size);
    munmap(res, size + chunk);
    close(fd);
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_vappendf),
        cmocka_unit_test(test_base_name),
        cmocka_unit_test(test_mem_reread_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
