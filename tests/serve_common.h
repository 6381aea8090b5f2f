/* Helpers of the `tutti serve` tests (test_serve.c, test_serve_scale.c):
 * a server started from the built CLI on a free loopback port, requests
 * with the curl command, JSON paths, Prometheus samples. */
#ifndef TUTTI_SERVE_COMMON_H
#define TUTTI_SERVE_COMMON_H

#include <stdbool.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#define M_STORIES "models/stories260K.gguf"
#define M_TINY "models/TinyStories-656K-Q8_0.gguf"
#define M_B105 "models/BabyLlama-tok105/babyllama-tok105.gguf"
#define M_B361 "models/BabyLlama-tok361/babyllama-tok361.gguf"
#define M_DREAMS "models/stories260K-ft/stories260K-dreams.gguf"
#define TEMPLATE TUTTI_SOURCE_DIR "/tests/serve/chat_template.jinja"
#define PROMPT "Once upon a time"

typedef struct server {
    pid_t pid;
    int port;
    char log[256];
    char dir[200];
} server;

void sleep_ms(int ms);
/* "-m A -m B -m C -m D": the four story models (static buffer) */
char *four_models(void);
/* Starts `tutti serve --port 0 ARGS` (env: extra environment, may be "");
 * waits for "ready" (or only for "listening" when !wait_ready). */
void start(server *s, const char *env, const char *args, bool wait_ready);
/* SIGTERM, then the exit status (fails after 30 s). */
int stop(server *s);
/* One request with the curl command; returns the body, *status = HTTP code. */
char *http(server *s, const char *method, const char *path, const char *body, const char *extra, int *status);
cJSON *post_json(server *s, const char *path, const char *body, int want_status);
/* The string / number at a dotted path ("choices.0.text"); NULL / fails. */
const char *jstr(const cJSON *o, const char *path);
double jnum(const cJSON *o, const char *path);
/* Checks OpenAI's error object (status, words of the message, param, code). */
void expect_error(server *s, const char *method, const char *path, const char *body, const char *extra, int want,
                  const char *want_in_msg, const char *want_param, const char *want_code);
/* CLI output (stdout) of `tutti CMD ARGS` (fails unless it exits 0). */
char *cli(const char *args);
bool utf8_ok(const char *s);
/* Streams a request: concatenated text of choice 0 (chat: delta.content),
 * its finish_reason and the number of chunks; checks the SSE framing, that
 * no chunk splits a UTF-8 character and that [DONE] ends the stream. */
char *stream_text(server *s, const char *path, const char *body, char *finish, int *n_chunks);
char *completion_text(server *s, const char *body);
void expect_same(const char *what, const char *want, const char *got);
/* Value of a Prometheus sample line "NAME VALUE" (-1 if absent). */
double metric(server *s, const char *name);

#endif
