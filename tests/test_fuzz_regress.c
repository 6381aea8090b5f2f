/* Fuzz regression: replays every input of fuzz/corpus/<harness>.tar (or of
 * the folder fuzz/corpus/<harness>/, for a corpus too big to pack; see
 * fuzz/corpus.sh) through the harness function tutti_fuzz_<harness>_one()
 * (the fuzz/fuzz_*.c files are linked into this test without libFuzzer, see
 * tests/CMakeLists.txt).
 * Crashes, sanitizer reports (ASan/UBSan CI builds) and the harnesses' own
 * invariant traps fail the test.  Every corpus must have a harness in
 * the table below, and every registered harness that is linked must have a
 * non-empty corpus, so neither side can silently drop out. */
#include "test_common.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef TUTTI_FUZZ_CORPUS_DIR
#define TUTTI_FUZZ_CORPUS_DIR TUTTI_SOURCE_DIR "/fuzz/corpus"
#endif

typedef int (*fuzz_one_fn)(const uint8_t *data, size_t size);

/* Weak, so that a harness registered here before its fuzz/fuzz_<name>.c
 * exists leaves a NULL entry instead of a link error.  Register a new
 * harness by adding its declaration and a table row. */
int tutti_fuzz_gguf_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_tokenizer_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_chat_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_grammar_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_model_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_merge_yaml_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_http_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_remote_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_native_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_ensemble_file_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_hub_one(const uint8_t *data, size_t size) __attribute__((weak));
int tutti_fuzz_pipeline_one(const uint8_t *data, size_t size) __attribute__((weak));

static const struct {
    const char *name;
    fuzz_one_fn fn;
} g_harnesses[] = {
    {"gguf", tutti_fuzz_gguf_one},     {"tokenizer", tutti_fuzz_tokenizer_one},
    {"chat", tutti_fuzz_chat_one},     {"grammar", tutti_fuzz_grammar_one},
    {"model", tutti_fuzz_model_one},   {"merge_yaml", tutti_fuzz_merge_yaml_one},
    {"http", tutti_fuzz_http_one},     {"remote", tutti_fuzz_remote_one},
    {"native", tutti_fuzz_native_one}, {"ensemble_file", tutti_fuzz_ensemble_file_one},
    {"hub", tutti_fuzz_hub_one},       {"pipeline", tutti_fuzz_pipeline_one},
};
#define N_HARNESSES (sizeof g_harnesses / sizeof g_harnesses[0])

/* Harnesses whose inputs need ../shared (the tokenizer's reference
 * vocabularies): their corpora replay in test_fuzz_regress_shared. */
static bool needs_shared(const char *name) { return !strcmp(name, "tokenizer"); }

static fuzz_one_fn find_harness(const char *name, bool *registered) {
    for (size_t i = 0; i < N_HARNESSES; i++)
        if (strcmp(g_harnesses[i].name, name) == 0) {
            *registered = true;
            return g_harnesses[i].fn;
        }
    *registered = false;
    return NULL;
}

static void replay_one(const char *name, const uint8_t *data, size_t size, void *user) {
    (void)name;
    ((fuzz_one_fn)user)(data, size);
}

/* Runs every regular file of dir through fn (a corpus kept as a folder:
 * fuzz/corpus.sh packs none whose pack would pass 2 MB); returns how many. */
static int replay_dir(const char *dir, fuzz_one_fn fn) {
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        size_t len = 0;
        char *buf = read_file(path, &len);
        if (!buf) fail_msg("cannot read %s", path);
        /* exact-size copy so that ASan sees reads past the input's end */
        uint8_t *exact = malloc(len ? len : 1);
        assert_non_null(exact);
        memcpy(exact, buf, len);
        free(buf);
        fn(exact, len);
        free(exact);
        n++;
    }
    closedir(d);
    return n;
}

/* The corpus entry de of fuzz/corpus/ (NAME.tar or the folder NAME): its
 * harness name into name[cap]; false for anything else. */
static bool corpus_entry(const struct dirent *de, char *name, size_t cap, bool *is_pack) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", TUTTI_FUZZ_CORPUS_DIR, de->d_name);
    struct stat st;
    if (de->d_name[0] == '.' || stat(path, &st) != 0) return false;
    size_t n = strlen(de->d_name);
    *is_pack = S_ISREG(st.st_mode) && n > 4 && !strcmp(de->d_name + n - 4, ".tar");
    if (!*is_pack && !S_ISDIR(st.st_mode)) return false;
    snprintf(name, cap, "%.*s", (int)(*is_pack ? n - 4 : n), de->d_name);
    return true;
}

/* Replays the corpora of the harnesses that need ../shared (shared true)
 * or of the others. */
static void replay_corpora(bool shared) {
    DIR *d = opendir(TUTTI_FUZZ_CORPUS_DIR);
    if (!d) fail_msg("fuzz corpus folder %s is missing", TUTTI_FUZZ_CORPUS_DIR);
    struct dirent *de;
    int total = 0, corpora = 0;
    while ((de = readdir(d))) {
        char name[256], path[4096];
        bool is_pack;
        if (!corpus_entry(de, name, sizeof name, &is_pack)) continue;
        bool registered;
        fuzz_one_fn fn = find_harness(name, &registered);
        if (!registered || !fn) {
            closedir(d); /* fail_msg does not return */
            if (!registered) fail_msg("fuzz/corpus/%s has no harness registered in tests/test_fuzz_regress.c", name);
            fail_msg("fuzz/corpus/%s: tutti_fuzz_%s_one is not linked: fuzz/fuzz_%s.c must "
                     "define it (and LLVMFuzzerTestOneInput only under #ifdef TUTTI_LIBFUZZER), "
                     "see fuzz/README.md",
                     name, name, name);
        }
        if (needs_shared(name) != shared) continue;
        snprintf(path, sizeof path, "%s/%s", TUTTI_FUZZ_CORPUS_DIR, de->d_name);
        int n = is_pack ? pack_each(path, replay_one, (void *)fn) : replay_dir(path, fn);
        print_message("fuzz/corpus/%s: %d inputs replayed\n", de->d_name, n);
        total += n;
        corpora++;
    }
    closedir(d);
    assert_true(corpora > 0);
    assert_true(total > 0);
}

static void test_replay_corpora(void **state) {
    (void)state;
    replay_corpora(false);
}

static void test_replay_shared_corpora(void **state) {
    (void)state;
    require_shared();
    replay_corpora(true);
}

static void count_entry(const char *name, const uint8_t *data, size_t size, void *user) {
    (void)name, (void)data, (void)size;
    ++*(int *)user;
}

static void test_linked_harnesses_have_corpora(void **state) {
    (void)state;
    for (size_t i = 0; i < N_HARNESSES; i++) {
        if (!g_harnesses[i].fn) continue;
        char path[4096];
        int n = 0;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s.tar", TUTTI_FUZZ_CORPUS_DIR, g_harnesses[i].name);
        if (stat(path, &st) == 0) pack_each(path, count_entry, &n);
        snprintf(path, sizeof path, "%s/%s", TUTTI_FUZZ_CORPUS_DIR, g_harnesses[i].name);
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d)))
            if (de->d_name[0] != '.') n++;
        if (d) closedir(d);
        if (n == 0)
            fail_msg("harness %s is linked but fuzz/corpus/%s.tar is missing or empty", g_harnesses[i].name,
                     g_harnesses[i].name);
    }
    /* the empty input and a lone magic must be handled by every harness */
    static const uint8_t magic[4] = {'G', 'G', 'U', 'F'};
    for (size_t i = 0; i < N_HARNESSES; i++) {
        if (!g_harnesses[i].fn) continue;
        uint8_t *e = malloc(1);
        g_harnesses[i].fn(e, 0);
        free(e);
        uint8_t *m = malloc(sizeof magic);
        memcpy(m, magic, sizeof magic);
        g_harnesses[i].fn(m, sizeof magic);
        free(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_corpora),
        shared_unit_test(test_replay_shared_corpora),
        cmocka_unit_test(test_linked_harnesses_have_corpora),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
