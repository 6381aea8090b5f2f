/* Helpers of the `tutti serve` tests (serve_common.h). */
#include "test_common.h"
#include "serve_common.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int g_seq;

void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

char *four_models(void) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "-m %s -m %s -m %s -m %s", shared_path(M_STORIES), shared_path(M_TINY),
             shared_path(M_B105), shared_path(M_B361));
    return buf;
}

/* Starts `tutti serve --port 0 ARGS` (env: extra environment, may be "");
 * waits for "ready" (or only for "listening" when !wait_ready). */
void start(server *s, const char *env, const char *args, bool wait_ready) {
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/tutti_test_serve_%d_%d", (int)getpid(), g_seq++);
    mkdir(s->dir, 0700);
    snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "exec env %s %s serve --port 0 %s 2>%s >/dev/null", env, TUTTI_CLI, args, s->log);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int t = 0; t < 1200; t++) {
        size_t n;
        char *log = read_file(s->log, &n);
        const char *l = log ? strstr(log, "listening on http://127.0.0.1:") : NULL;
        if (l && !s->port) s->port = atoi(l + strlen("listening on http://127.0.0.1:"));
        bool ok = s->port && (!wait_ready || (log && strstr(log, "tutti serve: ready")));
        int st;
        if (!ok && waitpid(s->pid, &st, WNOHANG) == s->pid) fail_msg("tutti serve exited early:\n%s", log ? log : "");
        free(log);
        if (ok) return;
        sleep_ms(50);
    }
    fail_msg("tutti serve did not start within 60 s (log %s)", s->log);
}

/* SIGTERM, then the exit status (fails after 30 s). */
int stop(server *s) {
    kill(s->pid, SIGTERM);
    for (int t = 0; t < 600; t++) {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            if (rc == 0) { /* keep the log of a failed stop for debugging */
                char cmd[300];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
                int ignored;
                free(run_cmd(cmd, &ignored));
            }
            return rc;
        }
        sleep_ms(50);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    fail_msg("tutti serve did not stop within 30 s of SIGTERM");
    return -1;
}

/* One request with the curl command; returns the body, *status = HTTP code. */
char *http(server *s, const char *method, const char *path, const char *body, const char *extra, int *status) {
    char bf[300], of[300], cmd[4096];
    snprintf(bf, sizeof bf, "%s/body_%d", s->dir, g_seq);
    snprintf(of, sizeof of, "%s/out_%d", s->dir, g_seq++);
    if (body) {
        FILE *f = fopen(bf, "wb");
        assert_non_null(f);
        fwrite(body, 1, strlen(body), f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd,
             "curl -sS -X %s -o %s -w '%%{http_code}' -H 'Content-Type: application/json' %s%s %s "
             "'http://127.0.0.1:%d%s'",
             method, of, body ? "--data-binary @" : "", body ? bf : "", extra ? extra : "", s->port, path);
    int rc;
    char *code = run_cmd(cmd, &rc);
    assert_non_null(code);
    *status = atoi(code);
    free(code);
    size_t n;
    char *out = read_file(of, &n);
    return out ? out : strdup("");
}

cJSON *post_json(server *s, const char *path, const char *body, int want_status) {
    int st;
    char *out = http(s, "POST", path, body, NULL, &st);
    if (st != want_status) fail_msg("POST %s %s: status %d, want %d: %s", path, body, st, want_status, out);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("POST %s: not JSON: %s", path, out);
    free(out);
    return j;
}

const char *jstr(const cJSON *o, const char *path) {
    /* "a.b.0.c" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *cur = o;
    for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, "."))
        cur = (tok[0] >= '0' && tok[0] <= '9') ? cJSON_GetArrayItem(cur, atoi(tok))
                                               : cJSON_GetObjectItemCaseSensitive(cur, tok);
    return cJSON_IsString(cur) ? cur->valuestring : NULL;
}

double jnum(const cJSON *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *cur = o;
    for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, "."))
        cur = (tok[0] >= '0' && tok[0] <= '9') ? cJSON_GetArrayItem(cur, atoi(tok))
                                               : cJSON_GetObjectItemCaseSensitive(cur, tok);
    if (!cJSON_IsNumber(cur)) fail_msg("no number at %s", path);
    return cur->valuedouble;
}

/* Checks OpenAI's error object and returns a copy of the message. */
void expect_error(server *s, const char *method, const char *path, const char *body, const char *extra, int want,
                  const char *want_in_msg, const char *want_param, const char *want_code) {
    int st;
    char *out = http(s, method, path, body, extra, &st);
    if (st != want) fail_msg("%s %s %s: status %d, want %d: %s", method, path, body ? body : "", st, want, out);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("error body is not JSON: %s", out);
    const char *msg = jstr(j, "error.message"), *type = jstr(j, "error.type");
    if (!msg || !type) fail_msg("not an OpenAI error object: %s", out);
    if (want_in_msg && !strstr(msg, want_in_msg)) fail_msg("error message '%s' lacks '%s'", msg, want_in_msg);
    if (want_param && (!jstr(j, "error.param") || strcmp(jstr(j, "error.param"), want_param)))
        fail_msg("error param of %s: %s", body ? body : path, out);
    if (want_code && (!jstr(j, "error.code") || strcmp(jstr(j, "error.code"), want_code)))
        fail_msg("error code of %s: %s, want %s", body ? body : path, out, want_code);
    cJSON_Delete(j);
    free(out);
}

/* CLI output (stdout) of `tutti CMD ARGS`. */
char *cli(const char *args) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", TUTTI_CLI, args);
    int st;
    char *out = run_cmd(cmd, &st);
    if (st != 0) fail_msg("%s failed (%d)", cmd, st);
    return out;
}

bool utf8_ok(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int k = *p < 0x80 ? 0 : (*p >> 5) == 6 ? 1 : (*p >> 4) == 14 ? 2 : (*p >> 3) == 30 ? 3 : -1;
        if (k < 0) return false;
        for (int i = 1; i <= k; i++)
            if ((p[i] & 0xC0) != 0x80) return false;
        p += k + 1;
    }
    return true;
}

/* Streams a request: concatenated text of choice 0 (chat: delta.content),
 * its finish_reason and the number of chunks; checks the SSE framing, that
 * no chunk splits a UTF-8 character and that [DONE] ends the stream. */
char *stream_text(server *s, const char *path, const char *body, char *finish, int *n_chunks) {
    int st;
    char *out = http(s, "POST", path, body, "-N", &st);
    if (st != 200) fail_msg("stream %s: status %d: %s", body, st, out);
    size_t cap = strlen(out) + 1, n = 0;
    char *text = calloc(cap, 1);
    bool done = false;
    *n_chunks = 0;
    finish[0] = 0;
    for (char *ev = out; ev && *ev;) {
        char *next = strstr(ev, "\n\n");
        if (next) *next = 0, next += 2;
        if (strncmp(ev, "data: ", 6)) fail_msg("SSE event without 'data: ': %s", ev);
        assert_false(done); /* nothing after [DONE] */
        if (!strcmp(ev + 6, "[DONE]")) {
            done = true;
        } else {
            cJSON *j = cJSON_Parse(ev + 6);
            if (!j) fail_msg("chunk is not JSON: %s", ev + 6);
            if (cJSON_GetObjectItemCaseSensitive(j, "error")) fail_msg("error in stream: %s", ev + 6);
            const char *t = strstr(path, "chat") ? jstr(j, "choices.0.delta.content") : jstr(j, "choices.0.text");
            if (t) {
                assert_true(utf8_ok(t));
                memcpy(text + n, t, strlen(t));
                n += strlen(t);
            }
            const char *f = jstr(j, "choices.0.finish_reason");
            if (f) snprintf(finish, 16, "%s", f);
            (*n_chunks)++;
            cJSON_Delete(j);
        }
        ev = next;
    }
    assert_true(done);
    free(out);
    return text;
}

char *completion_text(server *s, const char *body) {
    cJSON *j = post_json(s, "/v1/completions", body, 200);
    const char *t = jstr(j, "choices.0.text");
    assert_non_null(t);
    char *r = strdup(t);
    cJSON_Delete(j);
    return r;
}

void expect_same(const char *what, const char *want, const char *got) {
    if (strcmp(want, got)) fail_msg("%s differs from the CLI:\n  CLI:    [%s]\n  served: [%s]", what, want, got);
}

/* Value of a Prometheus sample line "NAME VALUE" (-1 if absent). */
double metric(server *s, const char *name) {
    int st;
    char *m = http(s, "GET", "/metrics", NULL, NULL, &st);
    assert_int_equal(st, 200);
    double v = -1;
    size_t ln = strlen(name);
    for (char *l = m; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, name, ln) && l[ln] == ' ') v = atof(l + ln + 1);
    free(m);
    return v;
}
