/* Fuzz harness of the pipeline config reader (src/server/pipeline_config.c); see
 * fuzz/README.md for the pattern.
 *
 * Input: JSON text, a config's "pipelines" array (or a whole config object,
 * whose "pipelines" is read).  Served model names: "a", "b", "c", "default".
 * Promises checked (trap when broken): the reader returns 0, or -1 with a
 * non-empty message; in what it returns every pipeline has 1..PL_MAX_STEPS
 * steps with valid distinct names, known models and an output in range;
 * every reference segment points at a step its deps mask has, the deps
 * graph has a topological order (no cycle), and expanding each step with
 * known texts gives exactly the sum of its segments' lengths.  Crashes,
 * leaks and undefined behaviour are the other findings. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/pipeline.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static bool known(void *u, const char *name) {
    (void)u;
    return !strcmp(name, "a") || !strcmp(name, "b") || !strcmp(name, "c") || !strcmp(name, "default");
}

/* Kahn's algorithm over the deps masks: every step is placed */
static void check_acyclic(const pl_pipeline *p) {
    uint64_t placed = 0;
    for (int round = 0; round < p->n_steps; round++) {
        bool moved = false;
        for (int k = 0; k < p->n_steps; k++)
            if (!(placed >> k & 1) && (p->steps[k].deps & ~placed) == 0) placed |= (uint64_t)1 << k, moved = true;
        if (!moved) break;
    }
    CHECK(placed == (p->n_steps == 64 ? ~(uint64_t)0 : (((uint64_t)1 << p->n_steps) - 1)));
}

static void check_pipeline(const pl_pipeline *p) {
    CHECK(p->name && p->name[0]);
    CHECK(p->n_steps >= 1 && p->n_steps <= PL_MAX_STEPS);
    CHECK(p->output >= 0 && p->output < p->n_steps);
    static const char texts[3][8] = {"", "x", "{input}"};
    pl_result r;
    memset(&r, 0, sizeof r);
    for (int k = 0; k < p->n_steps; k++) r.text[k] = (char *)texts[k % 3], r.n_text[k] = strlen(texts[k % 3]);
    pl_run_opts o = {.input = "IN", .input_len = 2, .messages = "user: IN", .messages_len = 8};
    for (int k = 0; k < p->n_steps; k++) {
        const pl_step *s = &p->steps[k];
        size_t nl = strlen(s->name);
        CHECK(nl >= 1 && nl < PL_MAX_NAME && known(NULL, s->model) && s->prompt);
        CHECK(s->n_stop >= 0 && s->n_stop <= PL_MAX_STOP);
        for (int i = 0; i < k; i++) CHECK(strcmp(p->steps[i].name, s->name) != 0);
        uint64_t seen = 0;
        size_t want = 0;
        for (int g = 0; g < s->n_segs; g++) {
            const pl_seg *sg = &s->segs[g];
            if (sg->kind == PL_SEG_STEP) {
                CHECK(sg->step >= 0 && sg->step < p->n_steps);
                seen |= (uint64_t)1 << sg->step;
                want += r.n_text[sg->step];
            } else if (sg->kind == PL_SEG_TEXT) {
                CHECK(sg->text >= s->prompt && sg->text + sg->len <= s->prompt + strlen(s->prompt));
                want += sg->len;
            } else {
                want += sg->kind == PL_SEG_INPUT ? 2 : 8;
            }
        }
        CHECK(seen == s->deps && !(s->deps >> k & 1));
        size_t n = 0;
        char *e = pl_expand(s, &o, &r, &n);
        CHECK(e && n == want && strlen(e) <= n);
        free(e);
    }
    check_acyclic(p);
}

int tutti_fuzz_pipeline_one(const uint8_t *data, size_t size) {
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    if (!root) return 0;
    const cJSON *pipes = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "pipelines") : root;
    pl_set set;
    char err[2048];
    err[0] = 0;
    int rc = pl_set_parse(&set, pipes, known, NULL, NULL, err, sizeof err);
    CHECK(rc == 0 || (rc == -1 && err[0]));
    if (rc == 0)
        for (int i = 0; i < set.n; i++) check_pipeline(&set.items[i]);
    pl_set_free(&set);
    cJSON_Delete(root);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_pipeline_one(data, size);
    return 0;
}
#endif
