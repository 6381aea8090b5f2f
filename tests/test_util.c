/* Header-only helpers of src/util shared by the layers: the growing
 * buffer's formatted append (util/buf.h) against snprintf of the same
 * formats into one large buffer, from an empty buffer, within the capacity
 * there is and across several doublings; a path's file name (util/path.h). */
#include "test_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_vappendf),
        cmocka_unit_test(test_base_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
