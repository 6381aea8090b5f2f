/* tutti tokenize: token ids of a text (or of every string of a test file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void print_ids(const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) printf(" %d", ids[i]);
    putchar('\n');
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL, *inp = NULL;
    bool no_bos = false, special = false, escape = true;
    cli_opt opts[] = {
        {"-m,--model", "FILE", CLI_T_STR, 0, 0, &model_path, "GGUF model or vocabulary-only file", "none", NULL,
         CLI_ONCE},
        CLI_HF_OPTS(&model_path, CLI_T_STR, CLI_ONCE),
        CLI_STR("-p,--prompt", "TEXT", &prompt, "text to tokenize (BOS as the model's metadata says)", "none"),
        CLI_STR("-f,--file", "FILE", &prompt_file, "tokenize the text of FILE (one trailing newline is dropped)",
                "none"),
        CLI_FLAG("-e,--escape", &escape, "process escapes (\\n \\t \\xHH ...) in -p/-f text"),
        CLI_FLAG_OFF("--no-escape", &escape, "take the -p/-f text literally"),
        CLI_STR("--inp", "FILE", &inp,
                "strings separated by \"\\n__ggml_vocab_test__\\n\" (llama.cpp's tokenizer\n"
                "tests): one line per string, no BOS, no special tokens, no escapes",
                "none"),
        CLI_FLAG("--no-bos", &no_bos, "never add BOS"),
        CLI_FLAG("--special", &special, "parse control-token text (e.g. <|eot_id|>) as those tokens"),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "tokenize",
        .usage = "(-m MODEL | -hf REPO[:QUANT]) (-p TEXT | -f FILE | --inp FILE) [options]",
        .description = "Prints token ids: of -p/-f text on one line; of every --inp string one line each,\n"
                       "each id preceded by a space. MODEL may be a vocabulary-only GGUF.",
        .opts = opts,
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if (!model_path || (!!prompt + !!prompt_file + !!inp) != 1)
        return cli_usage_error("need -m MODEL (or -hf REPO) and exactly one of -p TEXT, -f FILE or --inp FILE");
    if ((pr = cli_resolve_model(&model_path)) != CLI_RUN) return pr;
    tutti_vocab *vocab = tutti_vocab_load(model_path);
    if (!vocab) {
        return cli_error("%s", tutti_last_error());
    }
    int rc = 0;
    if (!inp) {
        size_t len;
        char *text = cli_prompt_text(prompt, prompt_file, escape, &len);
        int32_t n,
            *ids = text ? cli_tokenize(vocab, text, len, !no_bos && tutti_vocab_add_bos(vocab), special, &n) : NULL;
        if (ids) {
            if (!no_bos) cli_warn_double_bos(vocab, ids, n);
            print_ids(ids, n);
        } else {
            rc = 1;
        }
        free(ids);
        free(text);
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
                if (!memcmp(text + i, sep, sep_len)) {
                    hit = text + i;
                    break;
                }
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
