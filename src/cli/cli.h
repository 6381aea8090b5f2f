/* The tutti command-line front end: one file per subcommand, sharing the
 * flag helpers below.  Uses only the public header. */
#ifndef TUTTI_CLI_H
#define TUTTI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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
int32_t *cli_tokenize(const tutti_vocab *vocab, const char *text, size_t len, bool add_bos, bool parse_special,
                      int32_t *n_out);
/* --verbose-prompt: "LABEL prompt ids: 1 2 3" on stderr. */
void cli_print_prompt_ids(const char *label, const int32_t *ids, int32_t n);
/* --chat: renders a model's chat template (tmpl: malloc'd, taken and
 * freed; NULL = the model has none) with an optional system message and the
 * user message (add_generation_prompt on) and tokenizes it with vocab:
 * special-token text of the template becomes special tokens, the messages'
 * text never does.  label (e.g. "member 2 (b.gguf)", for one of several
 * models; NULL for one) goes in front of every message.  Returns malloc'd
 * ids (count in *n_out), or NULL after printing the reason. */
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

/* The sampling flags of every generating command (generate, run): one set,
 * one table, so each takes all of them with the same names, ranges and
 * defaults.  cli_sampling_init gives the defaults
 * (tutti_sampler_default_params, seed CLI_SEED_RANDOM, end of text
 * allowed). */
typedef struct cli_sampling {
    tutti_sampler_params sp;
    bool ignore_eos; /* --ignore-eos: end of text is never drawn */
} cli_sampling;
void cli_sampling_init(cli_sampling *s);
#define CLI_SAMPLING_OPTS(cs)                                                                                         \
    CLI_FLOAT("--temp", "T", &(cs)->sp.temp, 0, 100, "temperature, 0 = greedy", NULL),                                \
        CLI_INT("--top-k", "K", &(cs)->sp.top_k, 0, 1 << 30, "keep the K most likely tokens, 0 = off", NULL),         \
        CLI_FLOAT("--top-p", "P", &(cs)->sp.top_p, 1e-6, 1, "nucleus sampling, 1 = off", NULL),                       \
        CLI_FLOAT("--min-p", "P", &(cs)->sp.min_p, 0, 1, "drop tokens below P x the top probability, 0 = off", NULL), \
        CLI_FLOAT("--repeat-penalty", "R", &(cs)->sp.repeat_penalty, 1e-3, 100,                                       \
                  "penalise the last --repeat-last-n tokens, 1 = off", NULL),                                         \
        CLI_INT("--repeat-last-n", "N", &(cs)->sp.repeat_last_n, 0, 1 << 20,                                          \
                "tokens the repeat penalty looks back over", NULL),                                                   \
        CLI_SEED("-s,--seed", &(cs)->sp.seed, "random seed; the one used is printed on stderr (\"seed: N\")"),        \
        CLI_FLAG("--ignore-eos", &(cs)->ignore_eos,                                                                   \
                 "never end the text: end-of-generation tokens (byte/span alignment: the\n"                           \
                 "end of text) are never drawn, so all -n tokens are generated")

/* llama.cpp's context shift (generate, run): a context that fills slides
 * its window instead of ending the generation; see tutti_session_params. */
#define CLI_CTX_SHIFT_OPTS(on, keep, what)                                                      \
    CLI_FLAG("--context-shift", (on),                                                           \
             "when a context is full, keep its first tokens (BOS, --keep), drop the\n"          \
             "oldest half of the rest and go on (llama.cpp's context shift; not with -n -1)"),  \
        CLI_FLAG_OFF("--no-context-shift", (on), "stop the generation when a context is full"), \
        CLI_INT("--keep", "N", (keep), -1, CLI_MAX_CTX, "tokens kept by a context shift after BOS: " what, NULL)

/* -t/--threads into an int32_t (0 = all cores). */
#define CLI_THREADS_OPT(dest) CLI_INT("-t,--threads", "N", (dest), 1, CLI_MAX_THREADS, "worker threads", "all cores")
/* -c/--ctx-size into an int32_t holding CLI_CTX_UNSET. */
#define CLI_CTX_OPT(dest, what)                                                                                 \
    CLI_INT("-c,--ctx-size,--ctx", "N", (dest), 0, CLI_MAX_CTX,                                                 \
            "context length in tokens" what "; 0 = the model's trained context\n(a warning when N exceeds it)", \
            "min(trained, 4096)")

/* A model split by layers over MPI ranks (src/mpi/tutti_mpi.h): counts
 * (const char *, NULL = not given, "" = by memory) and ubatch (int32_t, 0 =
 * auto); checked after parsing with cli_split_check.  what: the model(s). */
#define CLI_SPLIT_OPTS(counts, ubatch, what)                                    \
    {"--split-layers",                                                          \
     "[N0,N1,...]",                                                             \
     CLI_T_STR,                                                                 \
     0,                                                                         \
     0,                                                                         \
     (counts),                                                                  \
     "under mpirun -np K: split " what " by layers over the K ranks, rank r\n"  \
     "computing N_r layers (no list: a split by weight bytes); the output is\n" \
     "that of one process, byte for byte",                                      \
     "off",                                                                     \
     NULL,                                                                      \
     CLI_OPTVAL},                                                               \
        CLI_INT("--split-ubatch", "N", (ubatch), 1, 512,                        \
                "prompt micro-batch of --split-layers in tokens, a multiple of 4 in [8, 512]", "about 4 per rank")
/* --split-experts (bool): the routed experts over MPI ranks (tutti_mpi.h). */
#define CLI_SPLIT_EXPERTS_OPT(on)                                                   \
    CLI_FLAG("--split-experts", (on),                                               \
             "under mpirun -np K: every rank loads the model and computes 1/K of\n" \
             "each MoE layer's routed experts (rows go out, outputs come back);\n"  \
             "the output is that of one process, byte for byte")
/* --split-layers / --split-ubatch as given: CLI_RUN, or 2 after the message
 * (bad counts or micro-batch, --split-ubatch alone, no MPI in this build). */
int cli_split_check(const char *counts, int32_t ubatch);
/* --split-experts for ensemble members (on; strict: a model without
 * experts is an error) beside --split-layers (counts, NULL = not given):
 * CLI_RUN, or 2 after the message (both splits, --place, no MPI). */
int cli_split_experts_check(bool on, const char *counts, bool strict);

/* Models by name (hub_args.c, README "Models by name"): -hf into the same
 * destination as the command's -m (dest: a cli_strs for CLI_T_STRS, a
 * const char * for CLI_T_STR with once = CLI_ONCE), --hf-file, --hf-token,
 * --offline.  After cli_parse, cli_resolve_model(s) turns the specs into the
 * cached files' paths (downloading them). */
extern const char *cli_hf_token;
extern bool cli_offline;
#define CLI_HF_OPTS(dest, type, once)                                                                           \
    {"-hf,-hfr,--hf-repo",                                                                                      \
     "REPO[:QUANT]",                                                                                            \
     (type),                                                                                                    \
     0,                                                                                                         \
     0,                                                                                                         \
     (dest),                                                                                                    \
     "a GGUF model from the Hugging Face hub, USER/MODEL[:QUANT] (QUANT in any case;\n"                         \
     "default Q4_K_M, else Q8_0, else the first), downloaded once into the cache\n"                             \
     "(tutti models lists it; a split model's parts all come)",                                                 \
     "none",                                                                                                    \
     NULL,                                                                                                      \
     CLI_HF | (once)},                                                                                          \
        {"-hff,--hf-file",                                                                                      \
         "FILE",                                                                                                \
         (type),                                                                                                \
         0,                                                                                                     \
         0,                                                                                                     \
         (dest),                                                                                                \
         "the file of the -hf repository before it (instead of :QUANT)",                                        \
         "none",                                                                                                \
         NULL,                                                                                                  \
         CLI_HF_FILE},                                                                                          \
        CLI_STR("-hft,--hf-token", "TOKEN", &cli_hf_token, "Hugging Face access token (private, gated models)", \
                "$HF_TOKEN"),                                                                                   \
        CLI_FLAG("--offline", &cli_offline, "models from the cache only, no network (also LLAMA_OFFLINE=1)")
/* *path as given, or for a model spec its cached file (held until exit).
 * CLI_RUN, 2 for a malformed spec, 1 when it cannot be had (message printed). */
int cli_resolve_model(const char **path);
int cli_resolve_models(cli_strs *paths);
/* The same for a malloc'd path (an ensemble file's member): replaced, the old freed. */
int cli_resolve_owned(char **path);

/* Drafting (draft_args.c; tutti_ensemble_set_draft): llama.cpp's flags,
 * -md/--model-draft FILE or -hfd REPO[:QUANT] (resolved as -hf), the draft
 * lengths, its confidence cut and threads.  cli_draft_init before the table,
 * cli_draft_check after cli_parse (CLI_RUN, 2 for bad usage, 1 when a -hfd
 * model cannot be had), cli_draft_apply once the ensemble is made (CLI_RUN,
 * or 1 after the message), cli_draft_report after the generation (a line on
 * stderr: rounds, drafted and accepted units -- tokens, or bytes in byte
 * alignment, unit -- acceptance, mean drafted length). */
typedef struct cli_draft {
    const char *model;
    int32_t n_max, n_min, n_threads;
    float p_min;
    int spec_type;            /* --spec-type: 0 none (a -md model drafts), 1 draft-simple, 2 ngram-simple */
    int32_t ngram_n, ngram_m; /* --spec-ngram-simple-size-n/-m */
} cli_draft;
extern const char *const cli_spec_types[];
/* the library's parameters of a checked cli_draft (all 0: no draft) */
tutti_draft_params cli_draft_params(const cli_draft *d);
#define CLI_DRAFT_OPTS(d)                                                                                          \
    {"-md,--model-draft",                                                                                          \
     "FILE",                                                                                                       \
     CLI_T_STR,                                                                                                    \
     0,                                                                                                            \
     0,                                                                                                            \
     &(d)->model,                                                                                                  \
     "draft model for speculative decoding (another tokenizer: its text\n"                                         \
     "is re-spelled in the model's tokens): it proposes tokens, the model(s)\n"                                    \
     "verify them in one pass (greedy output identical, sampled output\n"                                          \
     "distributed as without it); in byte alignment (run --align byte) it\n"                                       \
     "proposes the bytes of its tokens, any tokenizer, and each member\n"                                          \
     "verifies its hypotheses over them",                                                                          \
     "none",                                                                                                       \
     NULL,                                                                                                         \
     CLI_ONCE},                                                                                                    \
        {"-hfd,-hfrd,--hf-repo-draft",                                                                             \
         "REPO[:QUANT]",                                                                                           \
         CLI_T_STR,                                                                                                \
         0,                                                                                                        \
         0,                                                                                                        \
         &(d)->model,                                                                                              \
         "the draft model from the Hugging Face hub (as -hf)",                                                     \
         "none",                                                                                                   \
         NULL,                                                                                                     \
         CLI_HF | CLI_ONCE},                                                                                       \
        CLI_INT("--draft-max,--draft,--draft-n,--spec-draft-n-max", "N", &(d)->n_max, 1, 1024,                     \
                "tokens drafted per round at most (the draft's tokens)", "16, llama.cpp's common default"),        \
        CLI_INT("--draft-min,--draft-n-min,--spec-draft-n-min", "N", &(d)->n_min, 0, 1024,                         \
                "a round that drafts fewer tokens is dropped (a plain step)", "0, as llama.cpp"),                  \
        CLI_FLOAT("--draft-p-min,--spec-draft-p-min", "P", &(d)->p_min, 0, 1,                                      \
                  "drafting stops where the draft's most likely token has probability < P\n"                       \
                  "(at temperature 1)",                                                                            \
                  "0.75, llama.cpp's common default"),                                                             \
        CLI_INT("-td,--threads-draft", "N", &(d)->n_threads, 1, 1024, "the draft model's threads", "as -t"),       \
        CLI_CHOICE("--spec-type", "TYPE", &(d)->spec_type, cli_spec_types,                                         \
                   "none | draft-simple (the -md model drafts) | ngram-simple (no draft model:\n"                  \
                   "prompt lookup, the tokens that followed the latest earlier occurrence of the\n"                \
                   "last N tokens are the draft)",                                                                 \
                   "draft-simple with -md, else none"),                                                            \
        CLI_INT("--spec-ngram-simple-size-n", "N", &(d)->ngram_n, 1, 1024, "ngram-simple: the n-gram looked up",   \
                "12, as llama.cpp"),                                                                               \
        CLI_INT("--spec-ngram-simple-size-m", "M", &(d)->ngram_m, 1, 1024, "ngram-simple: tokens drafted at most", \
                "48, as llama.cpp")
void cli_draft_init(cli_draft *d);
int cli_draft_check(cli_draft *d);
int cli_draft_apply(tutti_ensemble *e, const cli_draft *d);
void cli_draft_report(const char *cmd, const cli_draft *d, const tutti_ensemble_stats *st, const char *unit);

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
/* The same for a model whose trained context is train (0: unknown). */
int32_t cli_ctx_for_train(int32_t train, int32_t n_ctx, const char *label);
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

/* Output files (merge -o, fit -o, logits -o, eval --plot): "-" is stdout,
 * streamed, where the command's stdout is free for it; any other name is
 * written atomically (util/file.h: a temporary file renamed into place when
 * complete, never a truncated or half-written file, never a file named
 * "-"). */
typedef enum cli_out_kind {
    CLI_OUT_TEXT,      /* "-" allowed */
    CLI_OUT_BINARY,    /* "-" allowed unless stdout is a terminal */
    CLI_OUT_FILE_ONLY, /* "-" refused: stdout holds the command's results */
} cli_out_kind;
/* Before the work: CLI_RUN, 2 after the message for an empty name or a "-"
 * this output cannot take, 1 when the file cannot be written (a missing or
 * read-only folder, a directory).  NULL path: CLI_RUN. */
int cli_output_check(const char *flag, const char *path, cli_out_kind kind);
/* Writes path ("-": stdout) with produce (util/file.h's tutti_write_fn):
 * 0, or 1 after the message. */
int cli_output_write(const char *path, int (*produce)(FILE *fp, void *ctx), void *ctx);

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
