/* The tutti command-line front end: one file per subcommand, sharing the
 * flag helpers below.  Uses only the public header. */
#ifndef TUTTI_CLI_H
#define TUTTI_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "tutti.h"

/* Each subcommand: argc/argv start after the subcommand name.  Returns the
 * process exit status (0 ok, 1 runtime error, 2 usage error). */
int cmd_generate(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_merge(int argc, char **argv);

/* Flag helpers: argv[*i] is the flag; they consume its value (argv[*i + 1]),
 * advance *i and return false after printing "tutti CMD: FLAG needs ..." to
 * stderr when the value is missing or malformed. */
bool cli_str(int argc, char **argv, int *i, const char **out);
/* Largest -t the sessions accept (tutti_session_new refuses more). */
#define CLI_MAX_THREADS 512
bool cli_int(int argc, char **argv, int *i, int64_t lo, int64_t hi, int32_t *out);
bool cli_u64(int argc, char **argv, int *i, uint64_t *out);
bool cli_float(int argc, char **argv, int *i, float lo, float hi, float *out);
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
/* The same for one of several models (an ensemble member): label (e.g.
 * "member 2 (b.gguf)") goes in front of every message; NULL = as above. */
int32_t *cli_chat_tokens_of(const tutti_model *model, const char *label, const char *system, const char *user,
                            int32_t *n_out);
/* Seconds since an arbitrary epoch (monotonic). */
double cli_now(void);

extern const char *cli_cmd; /* current subcommand name, for messages */

#endif
