/* Behaviour every command shares: seeds, context sizes, prompt text,
 * Ctrl-C, progress (see cli.h). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

/* ---- seeds ---- */

uint64_t cli_seed_resolve(uint64_t seed) {
    if (seed == CLI_SEED_RANDOM) {
        /* the kernel's pool: two runs started in the same second differ */
        uint64_t s = 0;
        size_t got = 0;
        while (got < sizeof s) {
            ssize_t r = getrandom((char *)&s + got, sizeof s - got, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got < sizeof s) { /* no getrandom (old kernel, seccomp): clock and pid */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            s = (uint64_t)ts.tv_nsec * 6364136223846793005ULL ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 32);
        }
        seed = s == CLI_SEED_RANDOM ? 0 : s; /* -1 must stay "random" */
    }
    cli_info("seed: %llu\n", (unsigned long long)seed);
    return seed;
}

/* ---- sampling ---- */

void cli_sampling_init(cli_sampling *s) {
    memset(s, 0, sizeof *s);
    s->sp = tutti_sampler_default_params();
    s->sp.seed = CLI_SEED_RANDOM;
}

/* ---- context ---- */

int32_t cli_ctx_for(const tutti_model *model, int32_t n_ctx, const char *label) {
    return cli_ctx_for_train(tutti_model_n_ctx_train(model), n_ctx, label);
}

int32_t cli_ctx_for_train(int32_t train, int32_t n_ctx, const char *label) {
    if (n_ctx == CLI_CTX_UNSET) return 0; /* session default: min(trained, 4096) */
    if (n_ctx == 0) return train > 0 && train <= CLI_MAX_CTX ? train : 0;
    if (train > 0 && n_ctx > train)
        cli_warn("-c %d exceeds %s%strained context of %d tokens; output past it is likely poor", n_ctx,
                 label ? label : "the model's", label ? "'s " : " ", train);
    return n_ctx;
}

int32_t cli_ctx_train_of_file(const char *path) {
    tutti_gguf *f = tutti_gguf_open(path);
    if (!f) return 0;
    tutti_gguf_value arch, v;
    int32_t n = 0;
    int64_t k = tutti_gguf_find(f, "general.architecture");
    if (k >= 0 && tutti_gguf_get(f, k, -1, &arch) == 0 && arch.kind == TUTTI_GGUF_STRING && arch.len < 64) {
        char key[128];
        snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.str);
        k = tutti_gguf_find(f, key);
        if (k >= 0 && tutti_gguf_get(f, k, -1, &v) == 0 && v.kind == TUTTI_GGUF_NUMBER && !v.is_float &&
            v.number >= 0 && v.number <= INT32_MAX)
            n = (int32_t)v.number;
    }
    tutti_gguf_close(f);
    return n;
}

/* ---- prompt text ---- */

size_t cli_process_escapes(char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\\' || i + 1 >= len) {
            s[o++] = s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
        case 'n': s[o++] = '\n'; break;
        case 'r': s[o++] = '\r'; break;
        case 't': s[o++] = '\t'; break;
        case '\'': s[o++] = '\''; break;
        case '"': s[o++] = '"'; break;
        case '\\': s[o++] = '\\'; break;
        case 'x':
            /* as llama.cpp: the next two characters, if strtol reads both as
             * base-16 (which also admits " 1", "+f", "-1") */
            if (i + 2 < len) {
                char hex[3] = {s[i + 1], s[i + 2], 0};
                char *end;
                long v = strtol(hex, &end, 16);
                if (end == hex + 2) {
                    i += 2;
                    s[o++] = (char)v;
                    break;
                }
            }
            /* fall through */
        default:
            s[o++] = '\\';
            s[o++] = c;
            break;
        }
    }
    if (o < len) s[o] = 0;
    return o;
}

char *cli_prompt_text(const char *prompt, const char *file, bool escape, size_t *len) {
    char *buf;
    size_t n;
    if (file) {
        if (!(buf = cli_read_file(file, &n))) return NULL;
        if (n && buf[n - 1] == '\n') buf[--n] = 0; /* llama.cpp's -f drops one trailing newline */
    } else {
        if (!prompt) prompt = "";
        n = strlen(prompt);
        if (!(buf = malloc(n + 1))) {
            cli_error("out of memory for the prompt");
            return NULL;
        }
        memcpy(buf, prompt, n + 1);
    }
    if (escape) n = cli_process_escapes(buf, n);
    buf[n] = 0;
    *len = n;
    return buf;
}

void cli_warn_double_bos(const tutti_vocab *vocab, const int32_t *ids, int32_t n) {
    int32_t bos = tutti_vocab_bos(vocab);
    if (bos >= 0 && tutti_vocab_add_bos(vocab) && n >= 2 && ids[0] == bos && ids[1] == bos)
        cli_warn("the prompt starts with 2 BOS tokens: the model adds one and the prompt text (with --special) "
                 "begins with another; drop the BOS text from the prompt");
}

/* ---- output files ---- */

int cli_output_check(const char *flag, const char *path, cli_out_kind kind) {
    if (!path) return CLI_RUN;
    if (!*path) return cli_usage_error("%s: empty file name", flag);
    if (!strcmp(path, "-")) {
        if (kind == CLI_OUT_FILE_ONLY)
            return cli_usage_error("%s -: stdout holds tutti %s's results; give a file name", flag, cli_cmd);
        if (kind == CLI_OUT_BINARY && isatty(STDOUT_FILENO))
            return cli_usage_error("%s -: binary output to a terminal; redirect stdout (> FILE) or give a file name",
                                   flag);
        return CLI_RUN;
    }
    if (tutti_check_writable(path) < 0) return cli_error("%s", tutti_last_error());
    return CLI_RUN;
}

int cli_output_write(const char *path, tutti_write_fn produce, void *ctx) {
    if (!strcmp(path, "-")) { /* streamed: what was written before a failure stays written */
        int rc = produce(stdout, ctx);
        if (fflush(stdout) != 0 && rc == 0) rc = tutti_set_error("cannot write to stdout: %s", strerror(errno));
        return rc < 0 ? cli_error("%s", tutti_last_error()) : 0;
    }
    return tutti_write_atomic(path, produce, ctx) < 0 ? cli_error("%s", tutti_last_error()) : 0;
}

/* ---- Ctrl-C ---- */

static volatile sig_atomic_t g_sigint;

static void on_sigint(int sig) {
    (void)sig;
    g_sigint = 1;
}

void cli_catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends the process at once */
    sigaction(SIGINT, &sa, NULL);
}

bool cli_interrupted(void) { return g_sigint != 0; }

/* ---- progress ---- */

static struct {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool running, stop, printed, tty;
    char what[256];
} g_prog = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* The reporting interval: a second (TUTTI_PROGRESS_MS=N, 1..60000, sets
 * it: the tests' runs take less than a second on a quiet machine). */
static long progress_ms(void) {
    const char *e = getenv("TUTTI_PROGRESS_MS");
    const long v = e ? strtol(e, NULL, 10) : 0;
    return v >= 1 && v <= 60000 ? v : 1000;
}

static void *progress_main(void *arg) {
    (void)arg;
    double t0 = cli_now();
    const long ms = progress_ms();
    pthread_mutex_lock(&g_prog.mu);
    for (int tick = 1; !g_prog.stop; tick++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        while (!g_prog.stop && pthread_cond_timedwait(&g_prog.cv, &g_prog.mu, &ts) != ETIMEDOUT) {
        }
        if (g_prog.stop) break;
        if (g_prog.tty || tick == 1 || tick % 10 == 0) {
            fprintf(stderr, "%stutti %s: %s... %.0f s%s", g_prog.tty ? "\r" : "", cli_cmd, g_prog.what, cli_now() - t0,
                    g_prog.tty ? "" : "\n");
            fflush(stderr);
            g_prog.printed = true;
        }
    }
    pthread_mutex_unlock(&g_prog.mu);
    return NULL;
}

void cli_progress_start(const char *what) {
    if (cli_quiet || g_prog.running) return;
    snprintf(g_prog.what, sizeof g_prog.what, "%s", what);
    g_prog.stop = g_prog.printed = false;
    g_prog.tty = isatty(STDERR_FILENO);
    g_prog.running = pthread_create(&g_prog.th, NULL, progress_main, NULL) == 0;
}

void cli_progress_stop(void) {
    if (!g_prog.running) return;
    pthread_mutex_lock(&g_prog.mu);
    g_prog.stop = true;
    pthread_cond_signal(&g_prog.cv);
    pthread_mutex_unlock(&g_prog.mu);
    pthread_join(g_prog.th, NULL);
    g_prog.running = false;
    if (g_prog.printed && g_prog.tty) fprintf(stderr, "\n");
}

int cli_split_check(const char *counts, int32_t ubatch) {
    return tutti_mpi_split_check(counts, ubatch) < 0 ? cli_usage_error("%s", tutti_last_error()) : CLI_RUN;
}

int cli_split_experts_check(bool on, const char *counts, bool strict) {
    if (on && counts) return cli_usage_error("--split-experts and --split-layers exclude each other");
    return tutti_mpi_experts_members(on, strict) < 0 ? cli_usage_error("%s", tutti_last_error()) : CLI_RUN;
}
