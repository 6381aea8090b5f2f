/* Models by name (-hf, src/hub/): against tests/fake_hub.py, a stand-in for
 * the Hugging Face hub on loopback that serves the story models of
 * ../shared/models in the hub's HTTP layout (refs and tree API, resolve URLs
 * redirected to a CDN path, ETag, Range), and fails on demand.
 *
 * References: file contents are compared with the served files byte for
 * byte, digests with Python's hashlib (the fake's listing) and NIST's test
 * vectors, a split model's logits with llama.cpp's (../shared/ref), the
 * choice of file with llama.cpp's documented rules (common/download.cpp:
 * the tag followed by '.' or '-', any case; Q4_K_M, then Q8_0, then the
 * first model file; a split model by its first part). */
#include "test_common.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hub/hub.h"
#include "hub/sha256.h"
#include "tutti.h"

#define TOKEN "hf_TuttiTestToken0123456789abcdefghijk"

static char g_tmp[256];

static const char *tmp(const char *rel) {
    static char b[8][1024];
    static int k;
    char *p = b[k++ & 7];
    snprintf(p, sizeof b[0], "%s/%s", g_tmp, rel);
    return p;
}

static const char *src_file(const char *rel) {
    static char b[4][1024];
    static int k;
    char *p = b[k++ & 3];
    snprintf(p, sizeof b[0], "%s/%s", TUTTI_SOURCE_DIR, rel);
    return p;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tutti_test_hub_XXXXXX");
    hub_retry_delay_s = 0.05; /* the in-process retries; the CLI's wait 1 s */
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    int st;
    free(run_cmd(cmd, &st));
    tutti_hub_configure(NULL);
    return 0;
}

/* ---- the fake hub ---- */

typedef struct hub {
    pid_t pid;
    int port;
    char log[512], endpoint[64];
} hub;

/* Starts tests/fake_hub.py with its repositories and extra arguments. */
static hub hub_start(const char *const *extra) {
    static int n_started;
    hub h = {0};
    char pf[512];
    snprintf(pf, sizeof pf, "%s/port.%d", g_tmp, n_started);
    snprintf(h.log, sizeof h.log, "%s/log.%d", g_tmp, n_started++);
    static char repos[4][4096];
    snprintf(repos[0], sizeof repos[0],
             "tt/stories-GGUF=stories260K-F32.gguf:%s,TinyStories-656K-Q8_0.gguf:%s,"
             /* F32 weights under a Q4_K_M name: only the name decides the choice */
             "babyllama-tok361-Q4_K_M.gguf:%s",
             shared_path("models/stories260K.gguf"), shared_path("models/TinyStories-656K-Q8_0.gguf"),
             shared_path("models/BabyLlama-tok361/babyllama-tok361.gguf"));
    int o = snprintf(repos[1], sizeof repos[1], "tt/split-GGUF=");
    for (int k = 1; k <= 3; k++)
        o += snprintf(repos[1] + o, sizeof repos[1] - (size_t)o, "%sQ8_0/mixtral-b-Q8_0-%05d-of-00003.gguf:%s",
                      k > 1 ? "," : "", k,
                      src_file(k == 1   ? "tests/data/hub/mixtral-b-Q8_0-00001-of-00003.gguf"
                               : k == 2 ? "tests/data/hub/mixtral-b-Q8_0-00002-of-00003.gguf"
                                        : "tests/data/hub/mixtral-b-Q8_0-00003-of-00003.gguf"));
    snprintf(repos[2], sizeof repos[2], "tt/private-GGUF=stories260K-F32.gguf:%s",
             shared_path("models/stories260K.gguf"));
    /* the merge repository needs a fine-tune of ../shared (only
     * test_models_and_configs, a shared case, asks for it) */
    const char *dreams = shared_path("models/stories260K-ft/stories260K-dreams.gguf");
    snprintf(repos[3], sizeof repos[3], "tt/merge-GGUF=stories260K-F32.gguf:%s%s%s",
             shared_path("models/stories260K.gguf"), access(dreams, R_OK) == 0 ? ",stories260K-dreams-F32.gguf:" : "",
             access(dreams, R_OK) == 0 ? dreams : "");
    const char *argv[48];
    int k = 0;
    static char script[512];
    snprintf(script, sizeof script, "%s/tests/fake_hub.py", TUTTI_SOURCE_DIR);
    argv[k++] = "/usr/bin/python3";
    argv[k++] = script;
    argv[k++] = "--port-file";
    argv[k++] = pf;
    argv[k++] = "--log";
    argv[k++] = h.log;
    for (int r = 0; r < 4; r++) argv[k++] = "--repo", argv[k++] = repos[r];
    argv[k++] = "--private";
    argv[k++] = "tt/private-GGUF";
    argv[k++] = "--token";
    argv[k++] = TOKEN;
    for (int i = 0; extra && extra[i] && k < 46; i++) argv[k++] = extra[i];
    argv[k] = NULL;
    h.pid = fork();
    assert_true(h.pid >= 0);
    if (h.pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(127);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int t = 0; t < 1000 && h.port <= 0; t++) { /* up to 20 s */
        FILE *f = fopen(pf, "r");
        if (f) {
            if (fscanf(f, "%d", &h.port) != 1) h.port = 0;
            fclose(f);
        }
        if (h.port <= 0) usleep(20000);
    }
    assert_true(h.port > 0);
    snprintf(h.endpoint, sizeof h.endpoint, "http://127.0.0.1:%d", h.port);
    return h;
}

static void hub_stop(hub *h) {
    if (h->pid > 0) {
        kill(h->pid, SIGTERM);
        waitpid(h->pid, NULL, 0);
        h->pid = 0;
    }
}

/* In-process resolution against h (NULL: a port nothing listens on) with its own cache. */
static void use_hub(const hub *h, const char *cache, bool offline) {
    tutti_hub_params p = tutti_hub_default_params();
    p.endpoint = h ? h->endpoint : "http://127.0.0.1:9";
    p.cache_dir = tmp(cache);
    p.offline = offline;
    p.progress = false;
    p.token = "";
    assert_int_equal(tutti_hub_configure(&p), 0);
}

/* `tutti ARGS` against h with cache; stdout and stderr together. */
static char *cli(const hub *h, const char *cache, const char *env, const char *args, int *status) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "env -u HF_TOKEN HF_ENDPOINT=%s LLAMA_CACHE=%s %s %s %s 2>&1",
             h ? h->endpoint : "http://127.0.0.1:9", tmp(cache), env ? env : "", TUTTI_CLI, args);
    return run_cmd(cmd, status);
}

/* `tutti ARGS` must exit with status and print every needle (NULL-terminated)
 * and none of the secrets; returns its output (malloc'd). */
static char *expect_cli(const hub *h, const char *cache, const char *env, const char *args, int status,
                        const char *const *needles, const char *const *secrets) {
    int st;
    char *o = cli(h, cache, env, args, &st);
    if (st != status) fail_msg("tutti %s: exit status %d, expected %d:\n%s", args, st, status, o);
    for (int i = 0; needles && needles[i]; i++)
        if (!strstr(o, needles[i])) fail_msg("tutti %s: no '%s' in:\n%s", args, needles[i], o);
    for (int i = 0; secrets && secrets[i]; i++)
        if (strstr(o, secrets[i])) fail_msg("tutti %s: '%s' is printed:\n%s", args, secrets[i], o);
    return o;
}
#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Lines of the request log holding every needle (NULL-terminated). */
static int log_count(const hub *h, const char *const *needles) {
    size_t n;
    char *s = read_file(h->log, &n);
    if (!s) return 0;
    int c = 0;
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        bool all = true;
        for (int i = 0; needles[i] && all; i++) all = strstr(line, needles[i]) != NULL;
        c += all;
    }
    free(s);
    return c;
}

static bool same_bytes(const char *a, const char *b) {
    size_t na, nb;
    char *x = read_file(a, &na), *y = read_file(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x), free(y);
    return same;
}

/* Python's hashlib of a file: an implementation not ours. */
static void py_sha256(const char *path, char out[65]) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())\" '%s'",
             path);
    int st;
    char *o = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    snprintf(out, 65, "%.64s", o);
    free(o);
}

static bool exists(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0;
}

/* ---- unit: digests, names, listings, the choice of file ---- */

static void test_sha256(void **state) {
    (void)state;
    static const struct {
        const char *msg, *hex;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    char hex[65];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        hub_sha256 s;
        hub_sha256_init(&s);
        for (const char *p = v[i].msg; *p; p++) hub_sha256_update(&s, p, 1); /* byte by byte: every buffer path */
        hub_sha256_hex(&s, hex);
        assert_string_equal(hex, v[i].hex);
    }
    /* one million 'a' (FIPS 180-2, appendix B.3), in uneven pieces */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    hub_sha256 s;
    hub_sha256_init(&s);
    for (size_t o = 0, k = 1; o < 1000000; o += k, k = k * 3 % 997 + 1)
        hub_sha256_update(&s, a + o, o + k > 1000000 ? 1000000 - o : k);
    hub_sha256_hex(&s, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
    /* a real file against hashlib */
    char want[65];
    py_sha256(shared_path("models/stories260K.gguf"), want);
    assert_int_equal(hub_sha256_file(shared_path("models/stories260K.gguf"), hex), 0);
    assert_string_equal(hex, want);
}

static void test_names(void **state) {
    (void)state;
    hub_spec sp;
    assert_int_equal(hub_spec_parse("hf://bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M", &sp), 0);
    assert_string_equal(sp.repo, "bartowski/Qwen2.5-0.5B-Instruct-GGUF");
    assert_string_equal(sp.tag, "Q4_K_M");
    assert_int_equal(hub_spec_parse("unsloth/phi-4-GGUF:UD-Q4_K_XL", &sp), 0);
    assert_string_equal(sp.tag, "UD-Q4_K_XL");
    assert_int_equal(hub_spec_parse("hf://a/b/sub/dir/m-Q8_0.gguf", &sp), 0);
    assert_string_equal(sp.repo, "a/b");
    assert_string_equal(sp.file, "sub/dir/m-Q8_0.gguf");
    assert_int_equal(hub_spec_parse("hf://a_1/b.c", &sp), 0);
    assert_string_equal(sp.tag, "");
    static const char *const bad[] = {"hf://noslash",  "hf://a:b/c",    "hf://-a/b",   "hf://a./b",   "hf://a/b:",
                                      "hf://a/b:Q4 K", "hf://a/b/../x", "hf://a/b//x", "hf://a/b/x/", "hf://a b/c",
                                      "hf:///a/b",     "hf://a/b:Q/4",  "hf://a/b/..", "hf://a/b\\c", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (hub_spec_parse(bad[i], &sp) == 0)
            fail_msg("'%s' was accepted: %s / %s / %s", bad[i], sp.repo, sp.tag, sp.file);
    assert_true(hub_path_valid("a/b.gguf", 8));
    assert_true(hub_path_valid(".gitattributes", 14));
    static const char *const bad_paths[] = {"../x", "a/../b", "/etc/x", "a//b", "a/", "./a", "a\\b", "a\tb", ".."};
    for (size_t i = 0; i < sizeof bad_paths / sizeof bad_paths[0]; i++)
        assert_false(hub_path_valid(bad_paths[i], strlen(bad_paths[i])));
    char deep[128] = "", longp[600];
    for (int i = 0; i < 17; i++) strcat(deep, i ? "/d" : "d");
    assert_false(hub_path_valid(deep, strlen(deep)));
    memset(longp, 'x', sizeof longp - 1);
    longp[sizeof longp - 1] = 0;
    assert_false(hub_path_valid(longp, strlen(longp)));
    char repo[300];
    assert_true(hub_repo_from_dir("models--tt--stories-GGUF", repo, sizeof repo));
    assert_string_equal(repo, "tt/stories-GGUF");
    assert_false(hub_repo_from_dir("datasets--a--b", repo, sizeof repo));
    assert_false(hub_repo_from_dir("models--a--b--c", repo, sizeof repo));
}

/* The tree API's JSON with hostile entries: only valid files are kept. */
static void test_listing(void **state) {
    (void)state;
    const char *js =
        "[{\"type\":\"file\",\"path\":\"../../evil.gguf\",\"size\":1,\"lfs\":{\"oid\":\""
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"size\":1}},"
        "{\"type\":\"file\",\"path\":\"/abs.gguf\"},{\"type\":\"file\",\"path\":\"a\\\\..\\\\b.gguf\"},"
        "{\"type\":\"file\",\"path\":\"ok-Q8_0.gguf\",\"size\":5,\"oid\":\"0123456789abcdef0123456789abcdef01234567\","
        "\"lfs\":{\"oid\":\"ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789\",\"size\":7}},"
        "{\"type\":\"file\",\"path\":\"bad-sha.gguf\",\"lfs\":{\"oid\":\"xyz\"}},"
        "{\"type\":\"file\",\"path\":\"neg.gguf\",\"size\":-1},{\"type\":\"file\",\"path\":\"frac.gguf\",\"size\":1.5},"
        "{\"type\":\"directory\",\"path\":\"Q8_0\"},7,\"str\",{\"path\":\"no-type.gguf\"},"
        "{\"type\":\"file\",\"path\":\"README.md\",\"size\":3,\"oid\":\"0123456789abcdef0123456789abcdef01234567\"}]";
    hub_listing l;
    assert_int_equal(hub_tree_parse(js, strlen(js), &l), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.files[0].path, "ok-Q8_0.gguf");
    assert_int_equal(l.files[0].size, 7); /* the LFS size is the file's */
    assert_string_equal(l.files[0].sha256, "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789");
    assert_string_equal(l.files[0].oid, l.files[0].sha256);
    assert_string_equal(l.files[1].oid, "0123456789abcdef0123456789abcdef01234567");
    assert_string_equal(l.files[1].sha256, "");
    assert_int_equal(l.n_rejected, 9); /* the directory entry is skipped, not rejected */
    hub_listing_free(&l);
    assert_int_equal(hub_tree_parse("{\"a\":1}", 7, &l), -1);
    assert_int_equal(hub_tree_parse("[1,", 3, &l), -1);
    char c[41];
    const char *refs =
        "{\"branches\":[{\"name\":\"dev\",\"targetCommit\":\"1111111111111111111111111111111111111111\"},"
        "{\"name\":\"../x\",\"targetCommit\":\"2222222222222222222222222222222222222222\"},"
        "{\"name\":\"main\",\"targetCommit\":\"3333333333333333333333333333333333333333\"}]}";
    assert_int_equal(hub_refs_parse(refs, strlen(refs), c), 0);
    assert_string_equal(c, "3333333333333333333333333333333333333333");
    const char *nomain =
        "{\"branches\":[{\"name\":\"dev\",\"targetCommit\":\"1111111111111111111111111111111111111111\"}]}";
    assert_int_equal(hub_refs_parse(nomain, strlen(nomain), c), 0);
    assert_string_equal(c, "1111111111111111111111111111111111111111");
    assert_int_equal(hub_refs_parse("{\"branches\":[{\"name\":\"main\",\"targetCommit\":\"zz\"}]}", 49, c), -1);
}

static void listing_of(hub_listing *l, const char *const *paths) {
    memset(l, 0, sizeof *l);
    for (int i = 0; paths[i]; i++) assert_int_equal(hub_listing_add(l, paths[i], 1, NULL, NULL), 0);
}

/* The file a spec picks (its first selected path) or NULL on error. */
static const char *pick(const char *const *paths, const char *spec, int *n_sel) {
    static char out[600];
    hub_listing l;
    hub_spec sp;
    listing_of(&l, paths);
    assert_int_equal(hub_spec_parse(spec, &sp), 0);
    int sel[16], n = 0;
    const char *r = NULL;
    if (hub_select(&l, &sp, sel, 16, &n) == 0) {
        snprintf(out, sizeof out, "%s", l.files[sel[0]].path);
        for (int i = 1; i < n; i++) /* the parts follow in order */
            snprintf(out + strlen(out), sizeof out - strlen(out), "|%s", l.files[sel[i]].path);
        r = out;
    }
    if (n_sel) *n_sel = n;
    hub_listing_free(&l);
    return r;
}

/* llama.cpp's rules (common/download.cpp find_best_model, get_split_files). */
static void test_select(void **state) {
    (void)state;
    const char *const repo[] = {"README.md",     "m-F16.gguf",    "m-Q8_0.gguf",  "mmproj-m-Q4_K_M.gguf",
                                "m-q4_k_m.gguf", "m-Q4_K_S.gguf", "imatrix.gguf", NULL};
    assert_string_equal(pick(repo, "a/b", NULL), "m-q4_k_m.gguf"); /* default Q4_K_M, any case; mmproj is not a model */
    assert_string_equal(pick(repo, "a/b:Q8_0", NULL), "m-Q8_0.gguf");
    assert_string_equal(pick(repo, "a/b:q4_k_s", NULL), "m-Q4_K_S.gguf");
    assert_string_equal(pick(repo, "a/b:f16", NULL), "m-F16.gguf");
    assert_null(pick(repo, "a/b:Q4_K", NULL)); /* "Q4_K" must be followed by '.' or '-' */
    assert_non_null(strstr(tutti_last_error(), "its tags: F16, Q8_0, Q4_K_M, Q4_K_S"));
    assert_string_equal(pick(repo, "a/b/M-q8_0.GGUF", NULL), "m-Q8_0.gguf"); /* --hf-file: any case */
    assert_null(pick(repo, "a/b/none.gguf", NULL));
    assert_non_null(strstr(tutti_last_error(), "has no file none.gguf"));
    const char *const q8[] = {"x-F16.gguf", "x-Q8_0.gguf", NULL};
    assert_string_equal(pick(q8, "a/b", NULL), "x-Q8_0.gguf"); /* no Q4_K_M: Q8_0 */
    const char *const first[] = {"notes.txt", "y-F32.gguf", "x-F16.gguf", NULL};
    assert_string_equal(pick(first, "a/b", NULL), "y-F32.gguf"); /* neither: the first model file */
    const char *const none[] = {"mmproj-F16.gguf", "README.md", NULL};
    assert_null(pick(none, "a/b", NULL));
    /* a split model: chosen by its first part, every part in order */
    const char *const split[] = {"Q4_K_M/m-Q4_K_M-00002-of-00003.gguf",     "Q4_K_M/m-Q4_K_M-00003-of-00003.gguf",
                                 "Q4_K_M/m-Q4_K_M-00001-of-00003.gguf",     "m-Q8_0.gguf",
                                 "Q4_K_M/other-Q4_K_M-00001-of-00002.gguf", NULL};
    int n = 0;
    assert_string_equal(pick(split, "a/b:Q4_K_M", &n),
                        "Q4_K_M/m-Q4_K_M-00001-of-00003.gguf|Q4_K_M/m-Q4_K_M-00002-of-00003.gguf|"
                        "Q4_K_M/m-Q4_K_M-00003-of-00003.gguf");
    assert_int_equal(n, 3);
    const char *const broken[] = {"m-Q8_0-00001-of-00003.gguf", "m-Q8_0-00003-of-00003.gguf", NULL};
    assert_null(pick(broken, "a/b", NULL));
    assert_non_null(strstr(tutti_last_error(), "part 2 of the 3 parts"));
    hub_split s;
    assert_true(hub_split_info("d/m-Q4_K_M-00002-OF-00010.gguf", &s));
    assert_true(s.index == 2 && s.count == 10 && !strcmp(s.tag, "Q4_K_M") && s.prefix_len == 10);
    assert_true(hub_split_info("Qwen2.5-0.5B-Instruct-q5_k_m.gguf", &s) && !strcmp(s.tag, "Q5_K_M"));
    assert_true(hub_split_info("model.gguf", &s) && s.tag[0] == 0);
    assert_false(hub_split_info("model.bin", &s));
}

/* ---- against the fake hub ---- */

/* Downloads by tag; the cache's layout is the hub's. */
static void test_download_layout(void **state) {
    (void)state;
    hub h = hub_start(NULL);
    use_hub(&h, "c1", false);
    char *p = tutti_hub_resolve("hf://tt/stories-GGUF:q8_0");
    assert_non_null(p);
    assert_true(same_bytes(p, shared_path("models/TinyStories-656K-Q8_0.gguf")));
    char sha[65], want[200], link[600];
    py_sha256(shared_path("models/TinyStories-656K-Q8_0.gguf"), sha);
    /* snapshots/{commit}/FILE -> ../../blobs/{sha256} and refs/main = {commit} */
    char *ref = read_file(tmp("c1/models--tt--stories-GGUF/refs/main"), NULL);
    assert_non_null(ref);
    assert_int_equal(strlen(ref), 40);
    char expect[700];
    snprintf(expect, sizeof expect, "%s/models--tt--stories-GGUF/snapshots/%s/TinyStories-656K-Q8_0.gguf", tmp("c1"),
             ref);
    assert_string_equal(p, expect);
    ssize_t k = readlink(p, link, sizeof link - 1);
    assert_true(k > 0);
    link[k] = 0;
    snprintf(want, sizeof want, "../../blobs/%s", sha);
    assert_string_equal(link, want);
    free(ref);
    free(p);
    /* no tag: Q4_K_M (a name of the listing), then the same again from the process's memory */
    p = tutti_hub_resolve("hf://tt/stories-GGUF");
    assert_non_null(p);
    assert_true(same_bytes(p, shared_path("models/BabyLlama-tok361/babyllama-tok361.gguf")));
    int before = log_count(&h, (const char *const[]){"GET", NULL});
    char *p2 = tutti_hub_resolve("hf://tt/stories-GGUF");
    assert_string_equal(p, p2);
    assert_int_equal(log_count(&h, (const char *const[]){"GET", NULL}), before);
    free(p2);
    free(p);
    /* the library's entry points take specs */
    tutti_model *m = tutti_model_load("hf://tt/stories-GGUF/stories260K-F32.gguf", NULL);
    assert_non_null(m);
    assert_int_equal(tutti_model_n_vocab(m), 512);
    tutti_model_free(m);
    char *name = tutti_file_meta_str("hf://tt/stories-GGUF:Q8_0", "general.name");
    assert_non_null(name);
    assert_string_equal(name, "Raincandy U TinyStories 656K");
    free(name);
    hub_stop(&h);
}

/* The CLI: -hf beside -m gives the same text; --hf-file; a wrong tag and an
 * unknown repository; 401 without a token, then with HF_TOKEN. */
static void test_cli_messages(void **state) {
    (void)state;
    hub h = hub_start(NULL);
    char args[1200];
    snprintf(args, sizeof args, "generate -m %s -p 'Once upon a time' -n 12 --temp 0 --quiet",
             shared_path("models/TinyStories-656K-Q8_0.gguf"));
    char *local = expect_cli(&h, "c2", NULL, args, 0, NULL, NULL);
    static const char *const by_name[] = {
        "generate -hf tt/stories-GGUF:Q8_0 -p 'Once upon a time' -n 12 --temp 0 --quiet",
        "generate --hf-file TinyStories-656K-Q8_0.gguf -hf tt/stories-GGUF -p 'Once upon a time' -n 12 --temp 0 --quiet",
    };
    for (int i = 0; i < 2; i++) {
        char *o = expect_cli(&h, "c2", NULL, by_name[i], 0, NULL, NULL);
        assert_string_equal(o, local);
        free(o);
    }
    free(local);
    /* -hfd: the draft model by name, resolved as -hf (here the model itself: every draft accepted) */
    snprintf(args, sizeof args, "generate -m %s -p 'Once upon a time' -n 24 --temp 0 --quiet",
             shared_path("models/stories260K.gguf"));
    local = expect_cli(&h, "c2", NULL, args, 0, NULL, NULL);
    snprintf(args, sizeof args, "generate -m %s -hfd tt/stories-GGUF:F32 -p 'Once upon a time' -n 24 --temp 0 --quiet",
             shared_path("models/stories260K.gguf"));
    char *o = expect_cli(&h, "c2", NULL, args, 0, NULL, NULL);
    assert_string_equal(o, local);
    free(o), free(local);
    snprintf(args, sizeof args, "generate -m %s -hfd tt/stories-GGUF:F32 -p 'Once upon a time' -n 24 --temp 0",
             shared_path("models/stories260K.gguf"));
    free(expect_cli(&h, "c2", NULL, args, 0, NEEDLES("draft ", "stories260K-F32.gguf", "accepted (100.0%)"), NULL));
    static const struct {
        const char *env, *args;
        int status;
        const char *needle[3];
    } cases[] = {
        {NULL,
         "generate -hf tt/stories-GGUF:Q5_K_M -p x -n 1",
         1,
         {"no model file with the quantisation tag Q5_K_M; its tags: F32, Q8_0, Q4_K_M"}},
        {NULL, "generate -hf tt/nothing-GGUF -p x -n 1", 1, {"tt/nothing-GGUF: no such repository", "404"}},
        {NULL, "generate -hf tt/private-GGUF -p x -n 1", 1, {"401", "set HF_TOKEN"}},
        {NULL,
         "generate -hf tt/private-GGUF -p x -n 1 --hf-token hf_NotTheRightToken",
         1,
         {"403 forbidden", "cannot read this repository"}},
        {"HF_TOKEN=" TOKEN, "generate -hf tt/private-GGUF -p 'Once' -n 4 --temp 0 --quiet", 0, {NULL}},
        /* malformed specs and flags: usage errors */
        {NULL, "generate -hf 'tt/../x' -p x", 2, {"is not a Hugging Face repository"}},
        {NULL, "generate -m a.gguf -hf tt/stories-GGUF -p x", 2, {"both name the model"}},
        {NULL, "generate --hf-file x.gguf -p x", 2, {"--hf-file x.gguf needs -hf REPO"}},
        {NULL, "generate -m a.gguf -md b.gguf -hfd tt/stories-GGUF -p x", 2, {"both name"}},
        {NULL, "generate -m a.gguf -hfd tt/nothing-GGUF -p x -n 1", 1, {"tt/nothing-GGUF: no such repository"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        free(expect_cli(&h, "c2", cases[i].env, cases[i].args, cases[i].status, cases[i].needle,
                        NEEDLES(TOKEN, "hf_NotTheRightToken")));
    assert_int_equal(log_count(&h, NEEDLES("private-GGUF/resolve", "\"auth\": true")), 1);
    hub_stop(&h);
}

/* Offline: --offline and a hub that cannot be reached use the cache; a repo
 * that was never fetched is an error saying so. */
static void test_offline(void **state) {
    (void)state;
    hub h = hub_start(NULL);
    int st;
    char *o = cli(&h, "c3", NULL, "tokenize -hf tt/stories-GGUF:F32 -p 'Once upon a time' --quiet", &st);
    assert_int_equal(st, 0);
    /* progress on a stderr that is not a terminal: lines, no carriage returns */
    char *prog = cli(&h, "c3", NULL, "info -hf tt/stories-GGUF:Q8_0", &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(prog, "tutti: tt/stories-GGUF/TinyStories-656K-Q8_0.gguf: 732 KiB in "));
    assert_null(strchr(prog, '\r'));
    free(prog);
    int gets = log_count(&h, (const char *const[]){"GET", NULL});
    char *off = cli(&h, "c3", NULL, "tokenize -hf tt/stories-GGUF:F32 -p 'Once upon a time' --offline --quiet", &st);
    assert_int_equal(st, 0);
    assert_string_equal(off, o);
    assert_int_equal(log_count(&h, (const char *const[]){"GET", NULL}), gets); /* no request at all */
    free(off);
    hub_stop(&h);
    /* the network down: a warning, then the cache */
    char *down = cli(NULL, "c3", NULL, "tokenize -hf tt/stories-GGUF:F32 -p 'Once upon a time'", &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(down, "using the cached copy"));
    assert_non_null(strstr(down, o)); /* the ids follow the warning */
    free(down);
    free(o);
    o = cli(NULL, "c3", NULL, "tokenize -hf tt/split-GGUF -p x", &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(o, "is not in the cache"));
    free(o);
    o = cli(NULL, "c3", NULL, "tokenize -hf tt/stories-GGUF:Q4_K_M -p x --offline", &st);
    assert_int_equal(st, 1); /* cached repository, but not that file: the tags of the cached files */
    assert_non_null(strstr(o, "its tags: Q8_0, F32")); /* path order: TinyStories-... < stories260K-... */
    free(o);
}

/* A connection cut half-way is resumed with Range; a partial file left by
 * an earlier process too. */
static void test_resume(void **state) {
    (void)state;
    hub h = hub_start((const char *const[]){"--cut-once", "TinyStories-656K-Q8_0.gguf", NULL});
    use_hub(&h, "c4", false);
    char *p = tutti_hub_resolve("hf://tt/stories-GGUF:Q8_0");
    assert_non_null(p);
    assert_true(same_bytes(p, shared_path("models/TinyStories-656K-Q8_0.gguf")));
    free(p);
    const int half = 749728 / 2;
    char range[64];
    snprintf(range, sizeof range, "\"range\": \"bytes=%d-\", \"status\": 206", half);
    assert_int_equal(log_count(&h, (const char *const[]){"/cdn/", "\"range\": null", "\"status\": 200", NULL}), 1);
    assert_int_equal(log_count(&h, (const char *const[]){"/cdn/", range, NULL}), 1);
    /* a partial blob from before: only the rest is asked for */
    char sha[65], part[1024];
    py_sha256(shared_path("models/stories260K.gguf"), sha);
    snprintf(part, sizeof part, "%s/blobs/%s.incomplete", tmp("c4/models--tt--stories-GGUF"), sha);
    size_t n;
    char *bytes = read_file(shared_path("models/stories260K.gguf"), &n);
    FILE *f = fopen(part, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, 1000, f), 1000);
    fclose(f);
    free(bytes);
    p = tutti_hub_resolve("hf://tt/stories-GGUF:F32");
    assert_non_null(p);
    assert_true(same_bytes(p, shared_path("models/stories260K.gguf")));
    free(p);
    assert_int_equal(log_count(&h, (const char *const[]){"/cdn/", "bytes=1000-", "206", NULL}), 1);
    assert_false(exists(part));
    hub_stop(&h);
}

/* A corrupted transfer is caught by its sha256 and never used. */
static void test_corrupted(void **state) {
    (void)state;
    hub h = hub_start((const char *const[]){"--corrupt", "stories260K-F32.gguf", NULL});
    use_hub(&h, "c5", false);
    assert_null(tutti_hub_resolve("hf://tt/stories-GGUF:F32"));
    assert_non_null(strstr(tutti_last_error(), "corrupted: its sha256 is"));
    char sha[65], blob[1024];
    py_sha256(shared_path("models/stories260K.gguf"), sha);
    assert_non_null(strstr(tutti_last_error(), sha)); /* "the hub gives" the true one */
    snprintf(blob, sizeof blob, "%s/blobs/%s", tmp("c5/models--tt--stories-GGUF"), sha);
    assert_false(exists(blob));
    strcat(blob, ".incomplete");
    assert_false(exists(blob));
    /* and nothing that looks like a model is in the snapshot */
    char *ref = read_file(tmp("c5/models--tt--stories-GGUF/refs/main"), NULL);
    char snap[1024];
    snprintf(snap, sizeof snap, "%s/snapshots/%s/stories260K-F32.gguf", tmp("c5/models--tt--stories-GGUF"),
             ref ? ref : "");
    assert_false(exists(snap));
    free(ref);
    assert_int_equal(log_count(&h, (const char *const[]){"/cdn/", NULL}), 3); /* 3 attempts */
    hub_stop(&h);
}

/* A split model: every part downloaded, the first opened, logits as
 * llama.cpp's for the whole file. */
static void test_split(void **state) {
    (void)state;
    hub h = hub_start(NULL);
    use_hub(&h, "c6", false);
    char *p = tutti_hub_resolve("hf://tt/split-GGUF:Q8_0");
    assert_non_null(p);
    assert_non_null(strstr(p, "/Q8_0/mixtral-b-Q8_0-00001-of-00003.gguf"));
    for (int k = 1; k <= 3; k++) {
        char part[1024], src[256];
        snprintf(part, sizeof part, "%.*s%05d-of-00003.gguf", (int)(strlen(p) - strlen("00001-of-00003.gguf")), p, k);
        snprintf(src, sizeof src, "tests/data/hub/mixtral-b-Q8_0-%05d-of-00003.gguf", k);
        assert_true(same_bytes(part, src_file(src)));
    }
    /* llama.cpp's logits of the whole file (tests/data/moe/make_refs.sh) for
     * the ids of tests/data/moe/input.ids */
    size_t n;
    char *txt = read_file(src_file("tests/data/moe/input.ids"), &n);
    assert_non_null(txt);
    int32_t ids[256];
    int n_ids = 0;
    for (char *q = txt; *q && n_ids < 256;) {
        char *end;
        long v = strtol(q, &end, 10);
        if (end == q) {
            q++;
            continue;
        }
        ids[n_ids++] = (int32_t)v;
        q = end;
    }
    free(txt);
    assert_true(n_ids > 1);
    enum { N_VOCAB = 105 };
    /* (the reference keeps positions 0, 2, 4, ...) */
    float *ref = (float *)read_file(src_file("tests/data/moe/mixtral-b-Q8_0.logits.f32"), &n);
    assert_int_equal(n, sizeof(float) * N_VOCAB * (size_t)((n_ids + 1) / 2));
    tutti_model *m = tutti_model_load(p, NULL);
    assert_non_null(m);
    tutti_session *s = tutti_session_new(m, NULL);
    assert_non_null(s);
    float *got = malloc(sizeof(float) * N_VOCAB * (size_t)n_ids);
    assert_int_equal(tutti_session_eval(s, ids, n_ids, got), 0);
    double d = max_logsoftmax_diff_every(got, 0, n_ids, ref, 2, N_VOCAB);
    assert_true(d < 0.15);
    free(got), free(ref);
    tutti_session_free(s);
    tutti_model_free(m);
    free(p);
    hub_stop(&h);
}

/* Two processes fetching the same file at once: one downloads, the other
 * waits on the lock and finds it done; the file is whole. */
static void test_concurrent(void **state) {
    (void)state;
    hub h = hub_start((const char *const[]){"--slow", "TinyStories-656K-Q8_0.gguf", NULL});
    char cmd[4096];
    snprintf(
        cmd, sizeof cmd,
        "cd %s && for k in 1 2; do env HF_ENDPOINT=%s LLAMA_CACHE=%s %s info -hf tt/stories-GGUF:Q8_0 > out.$k 2>&1 "
        "& done; wait; cat out.1 out.2 | grep -c 'model: '",
        g_tmp, h.endpoint, tmp("c7"), TUTTI_CLI);
    int st;
    char *o = run_cmd(cmd, &st);
    assert_int_equal(atoi(o), 2); /* both loaded it */
    free(o);
    assert_int_equal(log_count(&h, (const char *const[]){"/cdn/", "\"status\": 200", NULL}), 1);
    use_hub(&h, "c7", true);
    char *p = tutti_hub_resolve("hf://tt/stories-GGUF:Q8_0");
    assert_non_null(p);
    assert_true(same_bytes(p, shared_path("models/TinyStories-656K-Q8_0.gguf")));
    free(p);
    /* on a terminal (script(1) gives one) the progress line is redrawn: bytes, share, rate, time left */
    snprintf(cmd, sizeof cmd,
             "script -qec 'env HF_ENDPOINT=%s LLAMA_CACHE=%s %s info -hf tt/stories-GGUF:Q8_0' /dev/null", h.endpoint,
             tmp("c7b"), TUTTI_CLI);
    o = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    if (!strstr(o, "\rtutti: tt/stories-GGUF/TinyStories-656K-Q8_0.gguf: ") || !strstr(o, " / 732 KiB (") ||
        !strstr(o, "/s, ") || !strstr(o, " s left"))
        fail_msg("no progress line in:\n%s", o);
    free(o);
    hub_stop(&h);
}

/* The hub's listing and redirects are untrusted. */
static void test_hostile_hub(void **state) {
    (void)state;
    hub h = hub_start((const char *const[]){"--evil", NULL});
    use_hub(&h, "c8", false);
    char *p = tutti_hub_resolve("hf://tt/stories-GGUF");
    assert_non_null(p); /* the evil entries (listed first, with Q4_K_M names) are dropped */
    assert_true(same_bytes(p, shared_path("models/BabyLlama-tok361/babyllama-tok361.gguf")));
    free(p);
    int st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "find %s / -maxdepth 2 -name 'evil*' 2>/dev/null | wc -l", g_tmp);
    char *o = run_cmd(cmd, &st);
    assert_int_equal(atoi(o), 0);
    free(o);
    hub_stop(&h);
    h = hub_start((const char *const[]){"--redirect-loop", NULL});
    use_hub(&h, "c9", false);
    assert_null(tutti_hub_resolve("hf://tt/stories-GGUF:F32"));
    assert_non_null(strstr(tutti_last_error(), "redirects"));
    hub_stop(&h);
}

/* `tutti models`, and specs in ensemble files, merge configurations and the
 * server's --config. */
static void test_models_and_configs(void **state) {
    (void)state;
    require_shared();
    hub h = hub_start(NULL);
    int st;
    FILE *f = fopen(tmp("ens.txt"), "w");
    assert_non_null(f);
    fprintf(f, "align byte\nhf://tt/stories-GGUF:F32 0.5\nhf://tt/stories-GGUF/TinyStories-656K-Q8_0.gguf 0.5\n");
    fclose(f);
    char args[2048];
    snprintf(args, sizeof args, "run -e %s -p 'Once upon a time' -n 8 --temp 0 --quiet", tmp("ens.txt"));
    char *o = cli(&h, "c10", NULL, args, &st);
    assert_int_equal(st, 0);
    free(o);
    f = fopen(tmp("merge.yaml"), "w");
    assert_non_null(f);
    fprintf(f, "merge_method: linear\nmodels:\n  - model: hf://tt/merge-GGUF:F32\n    parameters: {weight: 0.5}\n"
               "  - model: hf://tt/merge-GGUF/stories260K-dreams-F32.gguf\n    parameters: {weight: 0.5}\n");
    fclose(f);
    snprintf(args, sizeof args, "merge --config %s -o %s --type F32", tmp("merge.yaml"), tmp("merged.gguf"));
    o = cli(&h, "c10", NULL, args, &st);
    if (st != 0) fail_msg("%s", o);
    free(o);
    assert_true(exists(tmp("merged.gguf")));
    /* tutti serve --config with a spec: served under the file's given name */
    f = fopen(tmp("serve.json"), "w");
    assert_non_null(f);
    fprintf(f, "{\"models\": [{\"path\": \"hf://tt/stories-GGUF:F32\", \"name\": \"small\"}]}\n");
    fclose(f);
    char cmd[4096];
    snprintf(
        cmd, sizeof cmd,
        "cd %s && { env HF_ENDPOINT=%s LLAMA_CACHE=%s %s serve --config serve.json --port 0 -t 1 > serve.log 2>&1 & "
        "P=$!; for i in $(seq 100); do grep -q 'listening on' serve.log && break; sleep 0.1; done; "
        "curl -s $(sed -n 's/.*listening on \\(http[^ ]*\\).*/\\1/p' serve.log)/v1/models; kill $P; wait $P; }",
        g_tmp, h.endpoint, tmp("c10"), TUTTI_CLI);
    o = run_cmd(cmd, &st);
    assert_non_null(strstr(o, "\"id\":\"small\""));
    free(o);
    /* fit's ensemble file names the cached files (their links, not their blobs), and runs */
    f = fopen(tmp("text.txt"), "w");
    assert_non_null(f);
    fprintf(f, "Once upon a time, there was a little girl named Lily. She loved to play outside.\n");
    fclose(f);
    snprintf(args, sizeof args,
             "fit --text %s -hf tt/stories-GGUF:F32 -hf tt/stories-GGUF:Q8_0 --temp-grid 1 -o %s --quiet",
             tmp("text.txt"), tmp("fit.txt"));
    free(expect_cli(&h, "c10", NULL, args, 0, NULL, NULL));
    char *fit = read_file(tmp("fit.txt"), NULL);
    assert_non_null(fit);
    if (!strstr(fit, "/snapshots/") || !strstr(fit, "/stories260K-F32.gguf ") || strstr(fit, "/blobs/"))
        fail_msg("fit wrote:\n%s", fit);
    free(fit);
    snprintf(args, sizeof args, "run -e %s -p 'Once upon a time' -n 4 --temp 0 --quiet --offline", tmp("fit.txt"));
    free(expect_cli(&h, "c10", NULL, args, 0, NULL, NULL));
    /* the list: every file fetched, with its size */
    o = cli(&h, "c10", NULL, "models --json", &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(o, "\"repo\":\t\"tt/stories-GGUF\""));
    assert_non_null(strstr(o, "\"file\":\t\"stories260K-F32.gguf\""));
    assert_non_null(strstr(o, "\"size\":\t1185376"));
    assert_non_null(strstr(o, "\"file\":\t\"stories260K-dreams-F32.gguf\""));
    free(o);
    o = cli(&h, "c10", NULL, "models rm tt/stories-GGUF:q8_0", &st);
    assert_int_equal(st, 0);
    free(o);
    char sha[65], blob[1024];
    py_sha256(shared_path("models/TinyStories-656K-Q8_0.gguf"), sha);
    snprintf(blob, sizeof blob, "%s/blobs/%s", tmp("c10/models--tt--stories-GGUF"), sha);
    assert_false(exists(blob)); /* its blob went with it */
    o = cli(&h, "c10", NULL, "models", &st);
    assert_non_null(strstr(o, "stories260K-F32.gguf"));
    assert_null(strstr(o, "TinyStories-656K-Q8_0.gguf"));
    free(o);
    o = cli(&h, "c10", NULL, "models rm stories260K-dreams-F32.gguf", &st);
    assert_int_equal(st, 0);
    free(o);
    o = cli(&h, "c10", NULL, "models rm tt/stories-GGUF", &st);
    assert_int_equal(st, 0);
    free(o);
    assert_false(exists(tmp("c10/models--tt--stories-GGUF")));
    o = cli(&h, "c10", NULL, "models rm tt/stories-GGUF", &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(o, "nothing in the cache"));
    free(o);
    o = cli(&h, "c10", NULL, "models", &st);
    assert_null(strstr(o, "dreams"));
    assert_non_null(strstr(o, "tt/merge-GGUF"));
    free(o);
    hub_stop(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_listing),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_download_layout),
        cmocka_unit_test(test_cli_messages),
        cmocka_unit_test(test_offline),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_corrupted),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_concurrent),
        cmocka_unit_test(test_hostile_hub),
        shared_unit_test(test_models_and_configs),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, setup, teardown);
}
