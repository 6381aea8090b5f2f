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
#include <unistd.h>

/* ../shared, or $TUTTI_SHARED_DIR when set (CI runs ctest -L core with it
 * pointing nowhere). */
static const char *shared_dir(void) {
    const char *d = getenv("TUTTI_SHARED_DIR");
    return d && *d ? d : TUTTI_SHARED_DIR;
}

const char *shared_path(const char *rel) {
    static char bufs[8][4096];
    static int k;
    char *b = bufs[k++ & 7];
    /* the repository's copies first: the quick start's four models in
     * models/, the core tests' references in tests/data/ (same names as in
     * ../shared; tests/data/copy_shared.sh) */
    static const char *const copies[] = {TUTTI_SOURCE_DIR, TUTTI_SOURCE_DIR "/tests/data"};
    for (int i = 0; i < 2; i++) {
        if (i == 0 && strncmp(rel, "models/", 7) != 0) continue;
        struct stat st;
        snprintf(b, sizeof bufs[0], "%s/%s", copies[i], rel);
        if (stat(b, &st) == 0 && S_ISREG(st.st_mode)) return b;
    }
    snprintf(b, sizeof bufs[0], "%s/%s", shared_dir(), rel);
    return b;
}

void require_shared(void) {
    struct stat st;
    char ref[4096];
    snprintf(ref, sizeof ref, "%s/ref", shared_dir());
    if (stat(ref, &st) != 0) {
        fail_msg("the shared reference data is missing: expected %s (the ../shared folder beside "
                 "the project, with models/ and ref/); these tests cannot run without it (ctest -L core "
                 "runs the ones that can)",
                 shared_dir());
    }
}

void test_select_part(void) {
    const char *part = getenv("TUTTI_TEST_PART");
    if (!part || !*part) return;
    if (!strcmp(part, "core")) cmocka_set_skip_filter(SHARED_TEST_PREFIX "*");
    else if (!strcmp(part, "shared")) cmocka_set_test_filter(SHARED_TEST_PREFIX "*");
    else fail_msg("TUTTI_TEST_PART=%s: expected core or shared", part);
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

/* ustar header fields (POSIX.1-1988): name[100] at 0, size (octal) at
 * 124, typeflag at 156, prefix[155] at 345, "ustar" at 257; 512-byte
 * blocks, data padded to a block; two zero blocks end the archive. */
static uint64_t tar_octal(const unsigned char *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n && p[i] >= '0' && p[i] <= '7'; i++) v = v * 8 + (uint64_t)(p[i] - '0');
    return v;
}

int pack_each(const char *path, pack_entry_fn fn, void *user) {
    size_t len = 0;
    unsigned char *t = (unsigned char *)read_file(path, &len);
    if (!t) fail_msg("cannot read %s", path);
    int n = 0;
    size_t off = 0;
    while (off + 512 <= len && t[off]) {
        const unsigned char *h = t + off;
        if (memcmp(h + 257, "ustar", 5) != 0) fail_msg("%s: entry %d is not a ustar header", path, n + 1);
        uint64_t size = tar_octal(h + 124, 12);
        char name[260];
        snprintf(name, sizeof name, "%.155s%s%.100s", (const char *)h + 345, h[345] ? "/" : "", (const char *)h);
        if ((h[156] != '0' && h[156] != 0) || strchr(name, '/'))
            fail_msg("%s: %s is not a plain file at the top (fuzz/corpus.sh packs those only)", path, name);
        if (size > len - off - 512) fail_msg("%s: %s runs past the end of the pack", path, name);
        uint8_t *exact = malloc(size ? size : 1);
        assert_non_null(exact);
        memcpy(exact, h + 512, size);
        fn(name, exact, size, user);
        free(exact);
        n++;
        off += 512 + (size + 511) / 512 * 512;
    }
    free(t);
    return n;
}

static char g_corpus_root[64];

static void remove_corpus_root(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_corpus_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_corpus_root);
}

static void write_entry(const char *name, const uint8_t *data, size_t size, void *user) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", (const char *)user, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size) fail_msg("cannot write %s", path);
    fclose(f);
}

const char *corpus_dir(const char *harness) {
    static char dirs[16][4096];
    static int n;
    if (!g_corpus_root[0]) {
        snprintf(g_corpus_root, sizeof g_corpus_root, "/tmp/tutti-corpus-%ld", (long)getpid());
        if (mkdir(g_corpus_root, 0700) != 0) fail_msg("cannot make %s", g_corpus_root);
        atexit(remove_corpus_root);
    }
    for (int i = 0; i < n; i++)
        if (!strcmp(strrchr(dirs[i], '/') + 1, harness)) return dirs[i];
    if (n == 16) fail_msg("corpus_dir: too many corpora");
    char *d = dirs[n++];
    snprintf(d, sizeof dirs[0], "%s/%s", g_corpus_root, harness);
    if (mkdir(d, 0700) != 0) fail_msg("cannot make %s", d);
    char pack[4096];
    snprintf(pack, sizeof pack, "%s/fuzz/corpus/%s.tar", TUTTI_SOURCE_DIR, harness);
    pack_each(pack, write_entry, d);
    return d;
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
        if (end == s) {
            s++;
            continue;
        }
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
    for (int i = 0; i < n; i++)
        if (z[i] > mx) mx = z[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)z[i] - mx);
    double lse = mx + log(s);
    for (int i = 0; i < n; i++) out[i] = (double)z[i] - lse;
}

void eval_prefix_then_steps(tutti_session *s, const int32_t *ids, int n_prefix, int n, int n_vocab, float *logits) {
    assert_int_equal(tutti_session_rewind(s, 0), TUTTI_OK);
    memset(logits, 0, sizeof(float) * (size_t)n * (size_t)n_vocab);
    assert_int_equal(tutti_session_eval(s, ids, n_prefix, logits), TUTTI_OK);
    for (int i = n_prefix; i < n; i++) {
        assert_int_equal(tutti_session_eval(s, ids + i, 1, NULL), TUTTI_OK);
        memcpy(logits + (size_t)i * (size_t)n_vocab, tutti_session_logits(s), sizeof(float) * (size_t)n_vocab);
    }
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

double max_logsoftmax_diff_every(const float *got, int first_pos, int n_pos, const float *ref, int every, int n_vocab) {
    double worst = 0;
    for (int p = (first_pos + every - 1) / every * every; p < first_pos + n_pos; p += every) {
        const double d = max_logsoftmax_diff(got + (size_t)(p - first_pos) * (size_t)n_vocab,
                                             ref + (size_t)(p / every) * (size_t)n_vocab, 1, n_vocab);
        if (!(d <= worst)) worst = d;
    }
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

void write_gguf_copy(const char *src, const char *path, void (*add)(struct gguf_writer *w, const void *arg),
                     const void *arg) {
    gguf_file *f = gguf_open(src);
    assert_non_null(f);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        if (gguf_str_eq(gguf_kv_key(f, i), "general.alignment")) continue;
        assert_int_equal(gguf_writer_copy_kv(w, f, i), 0);
    }
    add(w, arg);
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

static void add_template(gguf_writer *w, const void *tmpl) {
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.chat_template", tmpl), 0);
}

void write_with_template(const char *src, const char *tmpl, const char *path) {
    write_gguf_copy(src, path, add_template, tmpl);
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

int test_sink_cb(const char *bytes, size_t n, void *sink) {
    test_sink *s = sink;
    if (s->n + n < sizeof s->b) memcpy(s->b + s->n, bytes, n), s->n += n;
    s->b[s->n] = 0;
    return 0;
}

double test_chi2(const int *count, const double *want, int n_cells, int n, int *df, double *crit) {
    double chi2 = 0, pool_e = 0, pool_o = 0;
    int k = -1;
    for (int c = 0; c < n_cells; c++) {
        double ex = want[c] * n;
        if (ex < 5) {
            pool_e += ex, pool_o += count[c];
            continue;
        }
        chi2 += (count[c] - ex) * (count[c] - ex) / ex;
        k++;
    }
    if (pool_e > 0) chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, k++;
    double a = 2.0 / (9.0 * k);
    *df = k;
    *crit = k * pow(1 - a + 3.090 * sqrt(a), 3);
    return chi2;
}
