/* Pipelines and mixture-of-agents (src/pipeline/, issue 31).
 *
 * References: a pipeline's answer must equal the steps run by hand with
 * `tutti run` (one model or the fused ensemble, the same seeds), each step's
 * prompt written out by this test from the template, not by the pipeline
 * code; through `tutti run -e FILE`, and through `tutti serve` with curl
 * and the official openai npm package (tests/serve/pipeline_client.mjs),
 * streamed and not.  The config reader's structure (the moa expansion, the
 * references, literal braces) and its errors are checked directly. */
#include "test_common.h"
#include "tutti.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/pipeline.h"

#define M_STORIES "models/stories260K.gguf"
#define M_TINY "models/TinyStories-656K-Q8_0.gguf"
#define M_B105 "models/BabyLlama-tok105/babyllama-tok105.gguf"
#define M_B361 "models/BabyLlama-tok361/babyllama-tok361.gguf"
#define PROMPT "Once upon a time"

static char g_dir[256];
static int g_seq;
static pid_t g_server = -1; /* a server a failing assertion left running: teardown stops it */

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

/* The config every test uses: the four story models, one fused ensemble,
 * and the pipelines under test (extra: more pipelines, "" for none). */
static const char *write_config(const char *name, const char *extra) {
    char *cfg = malloc(1 << 16);
    assert_non_null(cfg);
    snprintf(
        cfg, 1 << 16,
        "{\"models\": [{\"path\": \"%s\", \"name\": \"stories\"}, {\"path\": \"%s\", \"name\": \"tiny\"},\n"
        "  {\"path\": \"%s\", \"name\": \"b105\"}, {\"path\": \"%s\", \"name\": \"b361\"}],\n"
        " \"ensembles\": [{\"name\": \"fused\", \"members\": [\"stories\", \"b361\"]}],\n"
        " \"pipelines\": [\n"
        "  {\"name\": \"two\", \"steps\": [\n"
        "    {\"name\": \"draft\", \"model\": \"stories\", \"prompt\": \"{input}\", \"max_tokens\": 16, \"seed\": 5},\n"
        "    {\"name\": \"cont\", \"model\": \"tiny\", \"prompt\": \"{draft} And then\", \"max_tokens\": 16, "
        "\"seed\": 6}]},\n"
        "  {\"name\": \"moa3\", \"moa\": {\"proposers\": [\"stories\", \"tiny\", \"b105\"], \"aggregator\": \"fused\",\n"
        "    \"max_tokens\": 12, \"seed\": 7, \"aggregator_prompt\": \"{drafts}\\n{input}\"}}%s%s]}\n",
        shared_path(M_STORIES), shared_path(M_TINY), shared_path(M_B105), shared_path(M_B361), extra[0] ? ",\n" : "",
        extra);
    const char *path = tmp_path(name);
    write_text(path, cfg);
    free(cfg);
    return path;
}

/* stdout of `tutti run ARGS -f PROMPT_FILE` (the prompt exactly: -f drops
 * one trailing newline, so one is added) */
static char *run_by_hand(const char *models, const char *prompt, int n, int seed) {
    char pf[512], cmd[8192];
    snprintf(pf, sizeof pf, "%s/prompt_%d", g_dir, g_seq++);
    char *text = malloc(strlen(prompt) + 2);
    assert_non_null(text);
    sprintf(text, "%s\n", prompt);
    write_text(pf, text);
    free(text);
    snprintf(cmd, sizeof cmd, "%s run %s -f %s -n %d -s %d 2>/dev/null", TUTTI_CLI, models, pf, n, seed);
    int st;
    char *out = run_cmd(cmd, &st);
    if (st != 0) fail_msg("%s: exit %d", cmd, st);
    return out;
}

static char *model_arg(const char *rel) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "-m %s", shared_path(rel));
    return buf[k];
}

static void expect_same(const char *what, const char *want, const char *got) {
    if (!got || strcmp(want, got)) fail_msg("%s:\n  want '%s'\n  got  '%s'", what, want, got ? got : "(none)");
}

/* The moa3 pipeline by hand: three proposers (seeds 7, 8, 9 by step
 * index), then the fused aggregator (seed 10) on "1. A\n2. B\n3. C\nINPUT". */
static char *moa3_by_hand(void) {
    char *p1 = run_by_hand(model_arg(M_STORIES), PROMPT, 12, 7);
    char *p2 = run_by_hand(model_arg(M_TINY), PROMPT, 12, 8);
    char *p3 = run_by_hand(model_arg(M_B105), PROMPT, 12, 9);
    size_t n = strlen(p1) + strlen(p2) + strlen(p3) + 64;
    char *agg = malloc(n);
    assert_non_null(agg);
    snprintf(agg, n, "1. %s\n2. %s\n3. %s\n" PROMPT, p1, p2, p3);
    char models[2048];
    snprintf(models, sizeof models, "%s %s", model_arg(M_STORIES), model_arg(M_B361));
    char *out = run_by_hand(models, agg, 12, 10);
    free(p1), free(p2), free(p3), free(agg);
    return out;
}

static char *two_by_hand(void) {
    char *d = run_by_hand(model_arg(M_STORIES), PROMPT, 16, 5);
    char *p = malloc(strlen(d) + 16);
    assert_non_null(p);
    sprintf(p, "%s And then", d);
    char *out = run_by_hand(model_arg(M_TINY), p, 16, 6);
    free(d), free(p);
    return out;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/tutti_test_pipeline_%d", (int)getpid());
    mkdir(g_dir, 0700);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (g_server > 0) kill(g_server, SIGKILL), waitpid(g_server, NULL, 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    int st;
    free(run_cmd(cmd, &st));
    return 0;
}

/* ---- tutti run -e FILE ---- */

static void test_run_two_steps(void **state) {
    (void)state;
    require_shared();
    const char *cfg = write_config("run.json", "");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s run -e %s -p '" PROMPT "' 2>/dev/null", TUTTI_CLI, cfg);
    int st;
    char *got = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    char *want = two_by_hand();
    expect_same("tutti run -e: the two-step pipeline vs its steps by hand", want, got);
    free(got), free(want);
}

/* ---- errors ---- */

/* `tutti run -e` of a config with one bad pipeline: exit 1, and stderr
 * names what is wrong */
static void expect_run_error(const char *pipeline, const char *want1, const char *want2) {
    char name[64];
    snprintf(name, sizeof name, "bad_%d.json", g_seq++);
    const char *cfg = write_config(name, pipeline);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s run -e %s -p x 2>&1 >/dev/null", TUTTI_CLI, cfg);
    int st;
    char *err = run_cmd(cmd, &st);
    if (st != 1) fail_msg("%s: exit %d, want 1: %s", pipeline, st, err);
    if (!strstr(err, want1) || (want2 && !strstr(err, want2)))
        fail_msg("%s: the message lacks '%s'/'%s': %s", pipeline, want1, want2 ? want2 : "", err);
    free(err);
}

static void test_errors(void **state) {
    (void)state;
    require_shared();
    expect_run_error("{\"name\": \"p\", \"steps\": [{\"name\": \"a\", \"model\": \"nosuch\"}]}",
                     "step 'a': model 'nosuch' is not a served model", NULL);
    expect_run_error("{\"name\": \"p\", \"steps\": [{\"name\": \"a\", \"model\": \"stories\", \"prompt\": \"{b}\"},"
                     " {\"name\": \"b\", \"model\": \"tiny\", \"prompt\": \"x {a}\"}]}",
                     "pipeline 'p': the steps' references form a cycle", "'a' needs 'b' needs 'a'");
    expect_run_error("{\"name\": \"p\", \"steps\": [{\"name\": \"a\", \"model\": \"stories\", \"prompt\": \"{a}\"}]}",
                     "cycle", "'a' needs 'a'");
    expect_run_error(
        "{\"name\": \"p\", \"steps\": [{\"name\": \"a\", \"model\": \"stories\", \"prompt\": \"{nothere}\"}]}",
        "step 'a': the prompt refers to {nothere}, which is no step of this pipeline", "its steps: a");
    expect_run_error("{\"name\": \"p\", \"moa\": {\"proposers\": [\"stories\", \"gone\"], \"aggregator\": \"tiny\"}}",
                     "proposers[1]: 'gone' is not a served model", NULL);
    expect_run_error("{\"name\": \"stories\", \"steps\": [{\"name\": \"a\", \"model\": \"tiny\"}]}",
                     "the name 'stories' is taken", NULL);
    /* a runtime failure names its step: a byte-fused generation that
     * cannot end by itself, stopped by its 1 ms timeout (its member's context ends it at
     * 254 bytes, 0.1 s on a quiet machine: a longer timeout would race) */
    char cmd[4096];
    const char *cfg = write_config("slow.json", "");
    char *slow = malloc(1 << 16);
    assert_non_null(slow);
    char *body = read_file(cfg, NULL);
    assert_non_null(body);
    /* the slow pipeline first, so that run -e runs it */
    char *at = strstr(body, "\"pipelines\": [\n");
    assert_non_null(at);
    at += strlen("\"pipelines\": [\n");
    snprintf(slow, 1 << 16,
             "%.*s{\"name\": \"slow\", \"steps\": [{\"name\": \"quick\", \"model\": \"stories\", "
             "\"max_tokens\": 4}, {\"name\": \"long\", \"model\": \"fused\", \"prompt\": \"{quick}\", "
             "\"max_tokens\": 100000, \"ignore_eos\": true, \"timeout\": 0.001}]},\n%s",
             (int)(at - body), body, at);
    write_text(cfg, slow);
    free(slow), free(body);
    snprintf(cmd, sizeof cmd, "%s run -e %s -p x 2>&1 >/dev/null", TUTTI_CLI, cfg);
    int st;
    char *err = run_cmd(cmd, &st);
    if (st != 1 || !strstr(err, "pipeline 'slow': step 'long' (model 'fused'): timed out after 0.001 s"))
        fail_msg("timeout: exit %d: %s", st, err);
    free(err);
}

/* ---- the config reader alone ---- */

static bool any_model(void *u, const char *name) {
    (void)u;
    return strcmp(name, "nosuch") != 0;
}

static void parse_ok(pl_set *set, const char *json) {
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    char err[2048] = "";
    int rc = pl_set_parse(set, j, any_model, NULL, NULL, err, sizeof err);
    cJSON_Delete(j);
    if (rc < 0) fail_msg("%s: %s", json, err);
}

static void test_config_structure(void **state) {
    (void)state;
    pl_set set;
    parse_ok(&set, "[{\"name\": \"m\", \"moa\": {\"proposers\": [\"a\", \"b\", \"c\"], \"aggregator\": \"d\", "
                   "\"layers\": 2, \"seed\": 100, \"max_tokens\": 9}}]");
    const pl_pipeline *p = pl_set_find(&set, "m");
    assert_non_null(p);
    assert_int_equal(p->n_steps, 7);
    const char *names[7] = {"l1.p1", "l1.p2", "l1.p3", "l2.p1", "l2.p2", "l2.p3", "aggregator"};
    const char *models[7] = {"a", "b", "c", "a", "b", "c", "d"};
    uint64_t deps[7] = {0, 0, 0, 7, 7, 7, 7 << 3};
    for (int k = 0; k < 7; k++) {
        assert_string_equal(p->steps[k].name, names[k]);
        assert_string_equal(p->steps[k].model, models[k]);
        assert_int_equal(p->steps[k].deps, deps[k]);
        assert_int_equal(p->steps[k].seed, 100 + k);
        assert_int_equal(p->steps[k].max_tokens, 9);
    }
    assert_int_equal(p->output, 6);
    /* the aggregator's prompt, expanded with known drafts */
    pl_result r;
    memset(&r, 0, sizeof r);
    const char *d[3] = {"AA", "BB", "CC"};
    for (int k = 0; k < 3; k++) r.text[3 + k] = (char *)d[k], r.n_text[3 + k] = 2;
    pl_run_opts o = {.input = "Q?", .input_len = 2};
    size_t n;
    char *e = pl_expand(&p->steps[6], &o, &r, &n);
    assert_non_null(strstr(e, "Drafts:\n1. AA\n2. BB\n3. CC\n\nRequest:\nQ?\n"));
    assert_int_equal(n, strlen(e));
    free(e);
    pl_set_free(&set);
    /* literal braces: {{ }} and anything that is no {NAME}; references to
     * a later step; {messages} */
    parse_ok(&set, "[{\"name\": \"p\", \"output\": \"a\", \"steps\": [{\"name\": \"a\", \"model\": \"x\", "
                   "\"prompt\": \"{{input}} {\\\"k\\\": [1, {}]} {b}|{input}|{messages}|{ input}}}\"}, "
                   "{\"name\": \"b\", \"model\": \"y\"}]}]");
    p = pl_set_find(&set, "p");
    assert_int_equal(p->output, 0);
    assert_int_equal(p->steps[0].deps, 2);
    memset(&r, 0, sizeof r);
    r.text[1] = (char *)"B!", r.n_text[1] = 2;
    o = (pl_run_opts){.input = "IN", .input_len = 2, .messages = "user: IN", .messages_len = 8};
    e = pl_expand(&p->steps[0], &o, &r, &n);
    assert_string_equal(e, "{input} {\"k\": [1, {}]} B!|IN|user: IN|{ input}}");
    free(e);
    e = pl_expand(&p->steps[1], &o, &r, &n); /* the default template */
    assert_string_equal(e, "IN");
    free(e);
    pl_set_free(&set);
}

static void parse_fails(const char *json, const char *want) {
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    pl_set set;
    char err[2048] = "";
    int rc = pl_set_parse(&set, j, any_model, any_model, NULL, err, sizeof err);
    pl_set_free(&set);
    cJSON_Delete(j);
    if (rc == 0) fail_msg("%s: accepted", json);
    if (!strstr(err, want)) fail_msg("%s: message '%s' lacks '%s'", json, err, want);
}

static void test_config_errors(void **state) {
    (void)state;
    parse_fails("{}", "'pipelines' must be an array");
    parse_fails("[{\"steps\": []}]", "pipelines[0]: a pipeline is an object with a 'name'");
    parse_fails("[{\"name\": \"x\", \"steps\": []}]", "the name 'x' is taken"); /* any_model: every name is a model */
    cJSON *j = cJSON_Parse("[{\"name\": \"p\", \"steps\": [{\"name\": \"a\", \"model\": \"m\"}, "
                           "{\"name\": \"a\", \"model\": \"m\"}]}]");
    pl_set set;
    char err[2048];
    assert_int_equal(pl_set_parse(&set, j, any_model, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "two steps are named 'a'"));
    pl_set_free(&set);
    cJSON_Delete(j);
    const char *bad[][2] = {
        {"{\"name\": \"input\", \"model\": \"m\"}", "step name 'input' must be"},
        {"{\"name\": \"a b\", \"model\": \"m\"}", "step name 'a b' must be"},
        {"{\"name\": \"a\", \"model\": \"m\", \"max_tokens\": -1}", "'max_tokens' must be an integer"},
        {"{\"name\": \"a\", \"model\": \"m\", \"temperature\": \"hot\"}", "'temperature' must be a number"},
        {"{\"name\": \"a\", \"model\": \"m\", \"timeout\": 0}", "'timeout' must be a number"},
        {"{\"name\": \"a\", \"model\": \"m\", \"stop\": [1]}", "'stop' strings"},
        {"{\"name\": \"a\", \"model\": \"m\", \"grammar\": \"root ::= (\"}", "step 'a': 'grammar':"},
        {"{\"name\": \"a\", \"model\": \"m\", \"grammar\": \"root ::= \\\"x\\\"\", \"json\": true}", "give one of"},
        {"{\"name\": \"a\", \"model\": 3}", "step 'a': 'model' must be a model's name"},
        {"{\"name\": \"a\", \"model\": \"nosuch\"}", "model 'nosuch' is not a served model"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char json[1024];
        snprintf(json, sizeof json, "[{\"name\": \"p\", \"steps\": [%s]}]", bad[k][0]);
        j = cJSON_Parse(json);
        assert_non_null(j);
        int rc = pl_set_parse(&set, j, any_model, NULL, NULL, err, sizeof err);
        pl_set_free(&set);
        cJSON_Delete(j);
        if (rc == 0 || !strstr(err, bad[k][1])) fail_msg("%s: %s, want '%s'", json, rc ? err : "accepted", bad[k][1]);
    }
}

/* ---- tutti serve ---- */

typedef struct server {
    pid_t pid;
    int port;
    char log[512];
} server;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void start(server *s, const char *cfg) {
    memset(s, 0, sizeof *s);
    snprintf(s->log, sizeof s->log, "%s/server_%d.log", g_dir, g_seq++);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec %s serve --port 0 -t 1 --config %s 2>%s >/dev/null", TUTTI_CLI, cfg, s->log);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    g_server = s->pid;
    for (int t = 0; t < 1200; t++) {
        char *log = read_file(s->log, NULL);
        const char *l = log ? strstr(log, "listening on http://127.0.0.1:") : NULL;
        if (l) s->port = atoi(l + strlen("listening on http://127.0.0.1:"));
        bool ok = s->port && strstr(log, "tutti serve: ready");
        int st;
        if (!ok && waitpid(s->pid, &st, WNOHANG) == s->pid) fail_msg("tutti serve exited early:\n%s", log ? log : "");
        free(log);
        if (ok) return;
        sleep_ms(50);
    }
    fail_msg("tutti serve did not start within 60 s (log %s)", s->log);
}

static void stop(server *s) {
    kill(s->pid, SIGTERM);
    int st = 0;
    waitpid(s->pid, &st, 0);
    g_server = -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("tutti serve: exit status %d after SIGTERM", st);
}

/* POST body to path with curl; the body of the answer, *status its code */
static char *post(server *s, const char *path, const char *body, int *status) {
    char bf[512], of[512], cmd[4096];
    snprintf(bf, sizeof bf, "%s/body_%d", g_dir, g_seq);
    snprintf(of, sizeof of, "%s/out_%d", g_dir, g_seq++);
    write_text(bf, body);
    snprintf(cmd, sizeof cmd,
             "curl -sS -N -o %s -w '%%{http_code}' -H 'Content-Type: application/json' "
             "--data-binary @%s 'http://127.0.0.1:%d%s'",
             of, bf, s->port, path);
    int rc;
    char *code = run_cmd(cmd, &rc);
    assert_non_null(code);
    *status = atoi(code);
    free(code);
    char *out = read_file(of, NULL);
    return out ? out : strdup("");
}

static cJSON *post_json(server *s, const char *path, const char *body) {
    int st;
    char *out = post(s, path, body, &st);
    if (st != 200) fail_msg("POST %s %s: status %d: %s", path, body, st, out);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("not JSON: %s", out);
    free(out);
    return j;
}

static const char *jget(const cJSON *o, const char *a, int i, const char *b, const char *c) {
    const cJSON *x = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, a), i);
    x = cJSON_GetObjectItemCaseSensitive(x, b);
    if (c) x = cJSON_GetObjectItemCaseSensitive(x, c);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* The streamed text (SSE chunks' text or delta.content) and the usage of
 * the last chunk that has one (caller frees both). */
static char *stream_text(server *s, const char *path, const char *body, cJSON **usage) {
    int st;
    char *out = post(s, path, body, &st);
    if (st != 200) fail_msg("POST %s (stream): %d: %s", path, st, out);
    size_t cap = strlen(out) + 1, n = 0;
    char *text = calloc(1, cap);
    assert_non_null(text);
    bool done = false;
    *usage = NULL;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6)) continue;
        if (!strcmp(line + 6, "[DONE]")) {
            done = true;
            continue;
        }
        cJSON *j = cJSON_Parse(line + 6);
        if (!j) fail_msg("a chunk is not JSON: %s", line);
        if (cJSON_GetObjectItemCaseSensitive(j, "error")) fail_msg("error in the stream: %s", line);
        const char *t = jget(j, "choices", 0, "text", NULL);
        if (!t) t = jget(j, "choices", 0, "delta", "content");
        if (t) memcpy(text + n, t, strlen(t)), n += strlen(t);
        cJSON *u = cJSON_DetachItemFromObject(j, "usage");
        if (u && cJSON_IsObject(u)) cJSON_Delete(*usage), *usage = u;
        else cJSON_Delete(u);
        cJSON_Delete(j);
    }
    if (!done) fail_msg("the stream has no [DONE]");
    free(out);
    return text;
}

/* the steps' usage: four steps named as the moa expands them; prints the
 * proposers' wall time against the sum of their times */
static void check_steps(const cJSON *usage, const char *what) {
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(usage, "tutti"), "steps");
    if (cJSON_GetArraySize(steps) != 4)
        fail_msg("%s: usage.tutti.steps has %d entries, want 4", what, cJSON_GetArraySize(steps));
    const char *names[4] = {"l1.p1", "l1.p2", "l1.p3", "aggregator"};
    double t0 = INFINITY, t1 = 0, sum = 0;
    for (int k = 0; k < 4; k++) {
        const cJSON *o = cJSON_GetArrayItem(steps, k);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "step");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, names[k]))
            fail_msg("%s: step %d is not %s", what, k, names[k]);
        double a = cJSON_GetObjectItemCaseSensitive(o, "start_seconds")->valuedouble;
        double b = cJSON_GetObjectItemCaseSensitive(o, "end_seconds")->valuedouble;
        assert_true(cJSON_GetObjectItemCaseSensitive(o, "completion_tokens")->valuedouble > 0);
        if (k == 3) {
            if (a < t1 - 1e-9) fail_msg("%s: the aggregator started before its drafts were done", what);
            continue;
        }
        t0 = a < t0 ? a : t0, t1 = b > t1 ? b : t1, sum += b - a;
    }
    printf("  %s: the 3 proposers took %.4f s of wall time, %.4f s added up (ratio %.2f)\n", what, t1 - t0, sum,
           t1 > t0 ? sum / (t1 - t0) : 0.0);
}

static void test_serve(void **state) {
    (void)state;
    require_shared();
    const char *cfg = write_config("serve.json", "{\"name\": \"slow\", \"steps\": [{\"name\": \"long\", \"model\": "
                                                 "\"fused\", \"max_tokens\": 100000, \"ignore_eos\": true, "
                                                 "\"timeout\": 0.001}]}");
    char *want = moa3_by_hand(), *want2 = two_by_hand();
    server s;
    start(&s, cfg);
    /* completions and chat, plain and streamed: all the aggregator's text */
    cJSON *j = post_json(&s, "/v1/completions", "{\"model\": \"moa3\", \"prompt\": \"" PROMPT "\"}");
    expect_same("moa3 completions vs by hand", want, jget(j, "choices", 0, "text", NULL));
    check_steps(cJSON_GetObjectItemCaseSensitive(j, "usage"), "completions");
    cJSON_Delete(j);
    j = post_json(&s, "/v1/chat/completions",
                  "{\"model\": \"moa3\", \"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, "
                  "{\"role\": \"user\", \"content\": \"" PROMPT "\"}]}");
    expect_same("moa3 chat vs by hand", want, jget(j, "choices", 0, "message", "content"));
    cJSON_Delete(j);
    cJSON *u;
    char *t = stream_text(&s, "/v1/completions",
                          "{\"model\": \"moa3\", \"prompt\": \"" PROMPT "\", \"stream\": true, "
                          "\"stream_options\": {\"include_usage\": true}}",
                          &u);
    expect_same("moa3 completions streamed vs by hand", want, t);
    if (!u) fail_msg("no usage chunk in the stream");
    check_steps(u, "completions streamed");
    cJSON_Delete(u);
    free(t);
    t = stream_text(&s, "/v1/chat/completions",
                    "{\"model\": \"moa3\", \"messages\": [{\"role\": \"user\", \"content\": \"" PROMPT "\"}], "
                    "\"stream\": true}",
                    &u);
    expect_same("moa3 chat streamed vs by hand", want, t);
    cJSON_Delete(u);
    free(t);
    j = post_json(&s, "/v1/completions", "{\"model\": \"two\", \"prompt\": \"" PROMPT "\"}");
    expect_same("two (served) vs by hand", want2, jget(j, "choices", 0, "text", NULL));
    cJSON_Delete(j);
    /* listed; what a pipeline cannot answer; a step's failure names it */
    int st;
    char *out = post(&s, "/v1/completions", "{\"model\": \"moa3\", \"prompt\": \"x\", \"logprobs\": 2}", &st);
    if (st != 400 || !strstr(out, "'logprobs' is not available")) fail_msg("logprobs: %d %s", st, out);
    free(out);
    out = post(&s, "/v1/completions", "{\"model\": \"slow\", \"prompt\": \"x\"}", &st);
    if (st != 504 || !strstr(out, "pipeline 'slow': step 'long' (model 'fused'): timed out"))
        fail_msg("timeout: %d %s", st, out);
    free(out);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "curl -sS http://127.0.0.1:%d/v1/models", s.port);
    out = run_cmd(cmd, &st);
    if (!strstr(out, "\"id\":\"moa3\"") || !strstr(out, "\"output\":\"aggregator\"")) fail_msg("/v1/models: %s", out);
    free(out);
    /* a step whose model is a remote member: this server, by its native
     * endpoints (greedy, as tests/test_remote.c compares remote members) */
    char *rcfg = malloc(1 << 14);
    assert_non_null(rcfg);
    snprintf(rcfg, 1 << 14,
             "{\"models\": [{\"path\": \"http://127.0.0.1:%d#stories;vocab=%s\", \"name\": \"rstories\"},\n"
             "  {\"path\": \"%s\", \"name\": \"tiny\"}],\n"
             " \"pipelines\": [{\"name\": \"rtwo\", \"steps\": [\n"
             "    {\"name\": \"draft\", \"model\": \"rstories\", \"max_tokens\": 16, \"temperature\": 0},\n"
             "    {\"name\": \"cont\", \"model\": \"tiny\", \"prompt\": \"{draft} And then\", \"max_tokens\": 16, "
             "\"seed\": 6}]}]}\n",
             s.port, shared_path(M_STORIES), shared_path(M_TINY));
    write_text(tmp_path("remote.json"), rcfg);
    free(rcfg);
    snprintf(cmd, sizeof cmd, "%s run -e %s -p '" PROMPT "' 2>/dev/null", TUTTI_CLI, tmp_path("remote.json"));
    out = run_cmd(cmd, &st);
    char dm[1100];
    snprintf(dm, sizeof dm, "--temp 0 %s", model_arg(M_STORIES));
    char *d = run_by_hand(dm, PROMPT, 16, 1), *p2 = malloc(strlen(d) + 16);
    assert_non_null(p2);
    sprintf(p2, "%s And then", d);
    char *want3 = run_by_hand(model_arg(M_TINY), p2, 16, 6);
    if (st != 0) fail_msg("a pipeline with a remote member's step: exit %d", st);
    expect_same("a remote member's step vs by hand", want3, out);
    free(out), free(d), free(p2), free(want3);
    /* the official openai npm package, streamed and not */
    struct stat sb;
    if (stat(TUTTI_SOURCE_DIR "/tests/serve/node_modules/openai/package.json", &sb) != 0)
        fail_msg("the openai npm package is missing: run `npm ci` in tests/serve (Node 20)");
    snprintf(cmd, sizeof cmd, "node %s/tests/serve/pipeline_client.mjs http://127.0.0.1:%d moa3 '" PROMPT "'",
             TUTTI_SOURCE_DIR, s.port);
    out = run_cmd(cmd, &st);
    if (st != 0) fail_msg("pipeline_client.mjs: exit %d: %s", st, out);
    j = cJSON_Parse(out);
    if (!j) fail_msg("pipeline_client.mjs: %s", out);
    const char *keys[4] = {"completion", "completion_stream", "chat", "chat_stream"};
    for (int k = 0; k < 4; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
        expect_same(keys[k], want, cJSON_IsString(v) ? v->valuestring : NULL);
    }
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(j, "completion_steps");
    if (!cJSON_IsNumber(ns) || ns->valueint != 4) fail_msg("openai: usage.tutti.steps: %s", out);
    cJSON_Delete(j);
    free(out);
    stop(&s);
    free(want), free(want2);
}

/* the server refuses a config with a bad pipeline before it listens */
static void test_serve_bad_config(void **state) {
    (void)state;
    require_shared();
    const char *cfg = write_config("bad_serve.json", "{\"name\": \"p\", \"steps\": [{\"name\": \"a\", \"model\": "
                                                     "\"stories\", \"prompt\": \"{zz}\"}]}");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s serve --port 0 --config %s 2>&1 >/dev/null", TUTTI_CLI, cfg);
    int st;
    char *err = run_cmd(cmd, &st);
    if (st == 0 || !strstr(err, "step 'a': the prompt refers to {zz}")) fail_msg("serve: exit %d: %s", st, err);
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_structure),
        cmocka_unit_test(test_config_errors),
        shared_unit_test(test_run_two_steps),
        shared_unit_test(test_errors),
        shared_unit_test(test_serve),
        shared_unit_test(test_serve_bad_config),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, setup, teardown);
}
