#include "test_common.h"

#include <nettle/sha2.h>
#include "tutti.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

const char *shared_path(const char *rel) {
    static char bufs[8][4096];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, sizeof bufs[0], "%s/%s", TUTTI_SHARED_DIR, rel);
    return b;
}

void require_shared(void) {
    struct stat st;
    if (stat(TUTTI_SHARED_DIR "/ref", &st) != 0) {
        fail_msg("the shared reference data is missing: expected %s (the ../shared folder beside "
                 "the project, with models/ and ref/); these tests cannot run without it",
                 TUTTI_SHARED_DIR);
    }
}

char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

/* SHA-256 by Nettle (a library independent of the code under test). */
void sha256_hex(const void *data, size_t n, char out[65]) {
    struct sha256_ctx c;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    sha256_update(&c, n, data);
    sha256_digest(&c, sizeof d, d);
    for (int j = 0; j < SHA256_DIGEST_SIZE; j++) snprintf(out + 2 * j, 3, "%02x", d[j]);
}

char *run_cmd(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0, r;
    char *out = malloc(cap);
    while ((r = fread(out + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (n + 1 >= cap) out = realloc(out, cap *= 2);
    }
    out[n] = 0;
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

int parse_ids(const char *s, int32_t *ids, int n_max) {
    int n = 0;
    while (*s && n < n_max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) { s++; continue; }
        ids[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

int json_ids(const char *js, const char *key, int32_t *ids, int n_max) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":[", key);
    const char *p = strstr(js, pat);
    if (!p) return -1;
    p += strlen(pat);
    const char *end = strchr(p, ']');
    if (!end) return -1;
    int n = 0;
    while (p < end && n < n_max) {
        char *e;
        const long v = strtol(p, &e, 10);
        if (e == p) {
            p++;
            continue;
        }
        ids[n++] = (int32_t)v;
        p = e;
    }
    return n;
}

static void log_softmax_row(const float *z, double *out, int n) {
    double mx = -INFINITY;
    for (int i = 0; i < n; i++) if (z[i] > mx) mx = z[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)z[i] - mx);
    double lse = mx + log(s);
    for (int i = 0; i < n; i++) out[i] = (double)z[i] - lse;
}

double max_logsoftmax_diff(const float *a, const float *b, int n_rows, int n_vocab) {
    double *la = malloc(sizeof(double) * (size_t)n_vocab), *lb = malloc(sizeof(double) * (size_t)n_vocab);
    double worst = 0;
    for (int r = 0; r < n_rows; r++) {
        log_softmax_row(a + (size_t)r * n_vocab, la, n_vocab);
        log_softmax_row(b + (size_t)r * n_vocab, lb, n_vocab);
        for (int i = 0; i < n_vocab; i++) {
            double d = fabs(la[i] - lb[i]);
            if (!(d <= worst)) worst = d; /* NaN propagates as failure */
        }
    }
    free(la);
    free(lb);
    return worst;
}

tutti_ensemble *test_ensemble(const char *const *rel, int n, int align, int rule) {
    tutti_member_desc d[TUTTI_ENSEMBLE_MAX_MEMBERS];
    char *paths[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int i = 0; i < n; i++) {
        paths[i] = strdup(shared_path(rel[i])); /* shared_path rotates its buffers */
        d[i] = (tutti_member_desc){paths[i], NAN, NAN};
    }
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = d;
    p.n_members = n;
    p.align = (tutti_align)align;
    p.rule = (tutti_fusion_rule)rule;
    p.n_threads = 1;
    tutti_ensemble *e = tutti_ensemble_new(&p);
    if (!e) printf("ensemble: %s\n", tutti_last_error());
    for (int i = 0; i < n; i++) free(paths[i]);
    return e;
}

void write_with_template(const char *src, const char *tmpl, const char *path) {
    gguf_file *f = gguf_open(src);
    assert_non_null(f);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        if (gguf_str_eq(gguf_kv_key(f, i), "general.alignment")) continue;
        assert_int_equal(gguf_writer_copy_kv(w, f, i), 0);
    }
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.chat_template", tmpl), 0);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
        assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data), 0);
    }
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    gguf_close(f);
}

/* Σ log p(token_k | tokens_<k) over the tokenization of text from BOS, in
 * double, straight from the logits of one forward pass. */
double test_direct_ll(const char *model_path, const char *text) {
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(model_path, &mp);
    assert_non_null(m);
    const tutti_vocab *v = tutti_model_vocab(m);
    int32_t ids[4096];
    int32_t n = tutti_tokenize(v, text, strlen(text), tutti_vocab_add_bos(v), false, ids, 4096);
    assert_true(n >= 1);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_threads = 1;
    tutti_session *s = tutti_session_new(m, &sp);
    int32_t V = tutti_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)V);
    assert_int_equal(tutti_session_eval(s, ids, n, logits), 0);
    double ll = 0;
    for (int32_t k = 0; k + 1 < n; k++) {
        const float *row = logits + (size_t)k * (size_t)V;
        double mx = -INFINITY, z = 0;
        for (int32_t t = 0; t < V; t++) mx = row[t] > mx ? row[t] : mx;
        for (int32_t t = 0; t < V; t++) z += exp((double)row[t] - mx);
        ll += (double)row[ids[k + 1]] - mx - log(z);
    }
    free(logits);
    tutti_session_free(s);
    tutti_model_free(m);
    return ll;
}
