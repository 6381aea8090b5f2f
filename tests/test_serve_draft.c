/* `tutti serve -md FILE` (issue 26): a served model with a draft gives
 * llama.cpp's own greedy text.  stories260K verified, its fine-tune
 * stories260K-dreams drafting (same tokenizer, other choices: rounds with
 * rejections), 48 tokens greedy from prompt 1, against
 * ../shared/ref/models/stories260K.p1.jsonl's "text"; with continuous
 * batching (the default), without, and two slots; the /metrics draft
 * counters show rounds (with rejections at --draft-p-min 0). */
#include "test_common.h"
#include "serve_common.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *ref_text(void) {
    size_t n;
    char *js = read_file(shared_path("ref/models/stories260K.p1.jsonl"), &n);
    assert_non_null(js);
    const char *last = strstr(js, "{\"greedy\"");
    assert_non_null(last);
    cJSON *j = cJSON_Parse(last);
    assert_non_null(j);
    char *t = strdup(jstr(j, "text"));
    cJSON_Delete(j);
    free(js);
    return t;
}

static void test_greedy_identity(void **state) {
    (void)state;
    require_shared();
    char *want = ref_text();
    const char *modes[] = {"", "-nocb", "--parallel 2"};
    const char *drafts[] = {"--draft-max 4 --draft-p-min 0", "--draft-max 16"};
    for (int m = 0; m < 3; m++)
        for (int d = 0; d < 2; d++) {
            server s;
            char args[2048];
            snprintf(args, sizeof args, "-m %s -md %s %s %s -t 1", shared_path(M_STORIES), shared_path(M_DREAMS),
                     drafts[d], modes[m]);
            start(&s, "", args, true);
            char *got = completion_text(
                &s, "{\"model\":\"stories260K\",\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":0}");
            size_t n;
            char *log = read_file(s.log, &n);
            if (log && strstr(log, "without the draft")) fail_msg("the draft was not used:\n%s", log);
            free(log);
            double rounds = metric(&s, "tutti_draft_rounds_total"), nd = metric(&s, "tutti_draft_tokens_total"),
                   acc = metric(&s, "tutti_draft_accepted_total");
            if (!(rounds > 0 && nd >= rounds && acc <= nd && (d || acc < nd)))
                fail_msg(
                    "serve %s %s: no draft rounds (with rejections at p-min 0; rounds %g, drafted %g, accepted %g)",
                    modes[m], drafts[d], rounds, nd, acc);
            if (strcmp(want, got))
                fail_msg("serve %s %s: not llama.cpp's greedy text:\n  want [%s]\n  got  [%s]", modes[m], drafts[d],
                         want, got);
            printf("  serve -md %s %s: llama.cpp's 48 greedy tokens; %g rounds, %g drafted, %g accepted\n", drafts[d],
                   modes[m], rounds, nd, acc);
            free(got);
            assert_int_equal(stop(&s), 0);
        }
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
