/* tutti tokenize: token ids of a text (or of every string of a test file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tutti tokenize -m MODEL (-p TEXT | --inp FILE) [--no-bos] [--special]\n"
            "With -p: prints the ids of TEXT on one line (BOS as the model's metadata says).\n"
            "With --inp: FILE holds strings separated by \"\\n__ggml_vocab_test__\\n\"; prints one\n"
            "line per string, each id preceded by a space, without BOS and without special-token\n"
            "parsing (the format of llama.cpp's tokenizer tests).\n"
            "MODEL may be a vocabulary-only GGUF.\n");
}

static void print_ids(const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) printf(" %d", ids[i]);
    putchar('\n');
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *inp = NULL;
    bool no_bos = false, special = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = cli_str(argc, argv, &i, &model_path);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) ok = cli_str(argc, argv, &i, &prompt);
        else if (!strcmp(a, "--inp")) ok = cli_str(argc, argv, &i, &inp);
        else if (!strcmp(a, "--no-bos")) no_bos = true;
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "tutti tokenize: unknown option '%s' (see tutti tokenize --help)\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!model_path || (!prompt == !inp)) {
        fprintf(stderr, "tutti tokenize: need -m MODEL and exactly one of -p TEXT or --inp FILE\n");
        return 2;
    }
    tutti_vocab *vocab = tutti_vocab_load(model_path);
    if (!vocab) {
        fprintf(stderr, "tutti tokenize: %s\n", tutti_last_error());
        return 1;
    }
    int rc = 0;
    if (prompt) {
        int32_t n, *ids = cli_tokenize(vocab, prompt, strlen(prompt), !no_bos && tutti_vocab_add_bos(vocab), special, &n);
        if (ids) print_ids(ids, n);
        else rc = 1;
        free(ids);
    } else {
        size_t len;
        char *text = cli_read_file(inp, &len);
        if (!text) {
            tutti_vocab_free(vocab);
            return 1;
        }
        static const char sep[] = "\n__ggml_vocab_test__\n";
        const size_t sep_len = sizeof sep - 1;
        size_t start = 0;
        while (start <= len && rc == 0) {
            const char *hit = NULL;
            for (size_t i = start; i + sep_len <= len; i++)
                if (!memcmp(text + i, sep, sep_len)) { hit = text + i; break; }
            size_t end = hit ? (size_t)(hit - text) : len;
            if (!hit && end == start) break; /* trailing separator: no empty last string */
            int32_t n, *ids = cli_tokenize(vocab, text + start, end - start, false, false, &n);
            if (ids) print_ids(ids, n);
            else rc = 1;
            free(ids);
            if (!hit) break;
            start = end + sep_len;
        }
        free(text);
    }
    tutti_vocab_free(vocab);
    return rc;
}
