/* The tutti command-line front end: one file per subcommand, sharing the
 * flag helpers below.  Uses only the public header. */
#ifndef TUTTI_CLI_H
#define TUTTI_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/opts.h"
#include "tutti.h"

/* Each subcommand: argc/argv start after the subcommand name.  Returns the
 * process exit status (0 ok, 1 runtime error, 2 usage error). */
int cmd_generate(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_merge(int argc, char **argv);

/* Parses "1,2,3" (ids) into a malloc'd array; false on a malformed list. */
bool cli_ids(const char *s, int32_t **ids, int32_t *n);
/* Reads a whole file into a malloc'd buffer (NUL-terminated, size in *len);
 * NULL after printing why (cannot open, a directory, a read error). */
char *cli_read_file(const char *path, size_t *len);
/* Tokenizes with a growing buffer; malloc'd ids or NULL (error printed). */
int32_t *cli_tokenize(const tutti_vocab *vocab, const char *text, size_t len, bool add_bos,
                      bool parse_special, int32_t *n_out);
/* --chat: renders the model's chat template with an optional system
 * message and the user message (add_generation_prompt on) and tokenizes it:
 * special-token text of the template becomes special tokens, the messages'
 * text never does.  Returns malloc'd ids (count in *n_out), or NULL after
 * printing the reason. */
int32_t *cli_chat_tokens(const tutti_model *model, const char *system, const char *user, int32_t *n_out);
/* The same from a tokenizer and its template (tmpl: malloc'd, taken and
 * freed; NULL = the model has none), for one of several models (an
 * ensemble member): label (e.g. "member 2 (b.gguf)") goes in front of
 * every message; NULL = as above. */
int32_t *cli_chat_tokens_with(const tutti_vocab *vocab, char *tmpl, const char *label, const char *system,
                              const char *user, int32_t *n_out);
/* Seconds since an arbitrary epoch (monotonic). */
double cli_now(void);

/* Multiple-choice items of a JSON-lines file ({"context", "choices": [...],
 * "label"} a line; choice_file.c): items[n] borrow from the parsed lines. */
typedef struct cli_choice_file {
    struct cJSON **lines;
    tutti_choice_item *items;
    const char **choices; /* [n * TUTTI_MAX_CHOICES] */
    int n;
} cli_choice_file;
/* 0, or 1 after printing why (unreadable, a malformed line, no items). */
int cli_choice_file_read(const char *path, cli_choice_file *c);
void cli_choice_file_free(cli_choice_file *c);

/* ---- flag groups shared by several commands (same names, ranges, help) ---- */

/* Sampling (generate, run): sp holds the defaults (tutti_sampler_default_params
 * with seed = CLI_SEED_RANDOM). */
#define CLI_SAMPLING_OPTS(sp)                                                                                  \
    CLI_FLOAT("--temp", "T", &(sp)->temp, 0, 100, "temperature, 0 = greedy", NULL),                          \
    CLI_INT("--top-k", "K", &(sp)->top_k, 0, 1 << 30, "keep the K most likely tokens, 0 = off", NULL),       \
    CLI_FLOAT("--top-p", "P", &(sp)->top_p, 1e-6, 1, "nucleus sampling, 1 = off", NULL),                      \
    CLI_FLOAT("--min-p", "P", &(sp)->min_p, 0, 1, "drop tokens below P x the top probability, 0 = off", NULL), \
    CLI_FLOAT("--repeat-penalty", "R", &(sp)->repeat_penalty, 1e-3, 100,                                     \
              "penalise the last --repeat-last-n tokens, 1 = off", NULL),                                   \
    CLI_INT("--repeat-last-n", "N", &(sp)->repeat_last_n, 0, 1 << 20, "tokens the repeat penalty looks back over", \
            NULL),                                                                                           \
    CLI_SEED("-s,--seed", &(sp)->seed, "random seed; the one used is printed on stderr (\"seed: N\")")

/* -t/--threads into an int32_t (0 = all cores). */
#define CLI_THREADS_OPT(dest) \
    CLI_INT("-t,--threads", "N", (dest), 1, CLI_MAX_THREADS, "worker threads", "all cores")
/* -c/--ctx-size into an int32_t holding CLI_CTX_UNSET. */
#define CLI_CTX_OPT(dest, what)                                                                             \
    CLI_INT("-c,--ctx-size,--ctx", "N", (dest), 0, CLI_MAX_CTX,                                             \
            "context length in tokens" what "; 0 = the model's trained context\n(a warning when N exceeds it)", \
            "min(trained, 4096)")

/* A model split by layers over MPI ranks (src/mpi/tutti_mpi.h): counts
 * (const char *, NULL = not given, "" = by memory) and ubatch (int32_t, 0 =
 * auto); checked after parsing with cli_split_check.  what: the model(s). */
#define CLI_SPLIT_OPTS(counts, ubatch, what)                                                                   \
    {"--split-layers", "[N0,N1,...]", CLI_T_STR, 0, 0, (counts),                                            \
     "under mpirun -np K: split " what " by layers over the K ranks, rank r\n"                               \
     "computing N_r layers (no list: a split by weight bytes); the output is\n"                              \
     "that of one process, byte for byte",                                                                \
     "off", NULL, CLI_OPTVAL},                                                                             \
    CLI_INT("--split-ubatch", "N", (ubatch), 1, 512,                                                        \
            "prompt micro-batch of --split-layers in tokens, a multiple of 4 in [8, 512]", "about 4 per rank")
/* --split-layers / --split-ubatch as given: CLI_RUN, or 2 after the message
 * (bad counts or micro-batch, --split-ubatch alone, no MPI in this build). */
int cli_split_check(const char *counts, int32_t ubatch);

/* ---- behaviour shared by the commands (common.c) ---- */

/* The seed to use: `seed` as given, or for CLI_SEED_RANDOM one drawn from
 * getrandom(2) (the kernel's entropy pool).  Prints "seed: N" on stderr
 * (unless --quiet) so that a run can be repeated with --seed N. */
uint64_t cli_seed_resolve(uint64_t seed);

/* -c/--ctx-size: CLI_CTX_UNSET when not given (the session default,
 * min(trained, 4096)), 0 = the model's trained context, else N tokens. */
#define CLI_CTX_UNSET (-1)
#define CLI_MAX_CTX (1 << 22)
/* The n_ctx to pass to tutti_session_new for model; warns on stderr when N
 * exceeds the trained context (label names the model in the warning). */
int32_t cli_ctx_for(const tutti_model *model, int32_t n_ctx, const char *label);
/* The trained context length of a GGUF file from its metadata only
 * (<arch>.context_length), or 0 if unknown. */
int32_t cli_ctx_train_of_file(const char *path);

/* llama.cpp's prompt escapes (common's string_process_escapes, on by
 * default there and here): \n \r \t \' \" \\ and \xHH (two characters strtol
 * reads as hex), anything else after a backslash stays as it is.  In place;
 * returns the new length (never longer). */
size_t cli_process_escapes(char *s, size_t len);
/* The prompt of -p TEXT or -f FILE (exactly one may be non-NULL; both NULL
 * gives ""), as llama.cpp builds it: a file loses one trailing '\n', then
 * escapes are processed if `escape`.  Returns a malloc'd NUL-terminated copy
 * (length in *len) or NULL after printing why. */
char *cli_prompt_text(const char *prompt, const char *file, bool escape, size_t *len);
/* llama.cpp's warning for a prompt that starts with two BOS tokens (the
 * model adds one and the text, with --special, gives another). */
void cli_warn_double_bos(const tutti_vocab *vocab, const int32_t *ids, int32_t n);

/* Ctrl-C: the first SIGINT sets cli_interrupted (the generation finishes
 * its current token, prints the text so far and the timings, and the
 * command exits CLI_EXIT_INTERRUPTED); a second one kills the process. */
#define CLI_EXIT_INTERRUPTED 130
void cli_catch_sigint(void);
bool cli_interrupted(void);

/* Progress for long library calls without callbacks (eval, fit): after one
 * second a line "tutti CMD: WHAT... N s" on stderr, refreshed every second on
 * a terminal (every 10 s otherwise), cleared by cli_progress_stop.  Nothing
 * with --quiet. */
void cli_progress_start(const char *what);
void cli_progress_stop(void);

extern const char *cli_cmd; /* current subcommand name, for messages */

#endif
