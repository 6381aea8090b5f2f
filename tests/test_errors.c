/* One error-code space (src/util/error.h): the internal kinds of failure
 * never take the value of a public code, so a caller testing a public
 * function's status for TUTTI_ERR_UNSUPPORTED (cmd_eval.c: exit 2, bad
 * usage) can never be handed an internal "cannot spell the text" or
 * "context full" instead; each maps back to its primary code. */
#include "test_common.h"

#include "tutti.h"
#include "util/error.h"

static const int internal[] = {FUSION_ERR_SPELL, FUSION_ERR_CTX, FUSION_ERR_NONFINITE};
static const int public_codes[] = {TUTTI_OK, TUTTI_ERR, TUTTI_ERR_UNSUPPORTED, TUTTI_ERR_SIZE};

static void test_internal_codes_are_not_public_ones(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof internal / sizeof *internal; i++) {
        assert_true(internal[i] < 0);
        for (size_t j = 0; j < sizeof public_codes / sizeof *public_codes; j++)
            assert_int_not_equal(internal[i], public_codes[j]);
        for (size_t j = 0; j < i; j++) assert_int_not_equal(internal[i], internal[j]);
    }
}

static void test_primary_codes(void **state) {
    (void)state;
    /* every internal kind is a run-time failure */
    for (size_t i = 0; i < sizeof internal / sizeof *internal; i++)
        assert_int_equal(tutti_primary_code(internal[i]), TUTTI_ERR);
    /* the public codes (and successes) are their own primary */
    for (size_t j = 0; j < sizeof public_codes / sizeof *public_codes; j++)
        assert_int_equal(tutti_primary_code(public_codes[j]), public_codes[j]);
    assert_int_equal(tutti_primary_code(7), 7);
    assert_int_equal(tutti_primary_code(TUTTI_EXTENDED_CODE(TUTTI_ERR_UNSUPPORTED, 5)), TUTTI_ERR_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_internal_codes_are_not_public_ones),
        cmocka_unit_test(test_primary_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
