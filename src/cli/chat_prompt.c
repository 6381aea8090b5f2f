/* --chat: the prompt becomes a user message (plus an optional system
 * message) rendered with the model's own tokenizer.chat_template and
 * tokenized by tutti_chat_tokenize, which keeps the template's special-token
 * text apart from the messages by construction: the template's markers
 * become control tokens, the user's text never does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int32_t *cli_chat_tokens_with(const tutti_vocab *vocab, char *tmpl, const char *label, const char *system,
                              const char *user, int32_t *n_out) {
    /* messages name the model when there are several ("member 2 (b.gguf): ...") */
    char who[600];
    snprintf(who, sizeof who, "%s%s", label ? label : "", label ? ": " : "");
    if (!tmpl) {
        if (label)
            fprintf(stderr,
                    "tutti %s: --chat: %sthe model has no tokenizer.chat_template in its metadata; "
                    "every member needs one for --chat\n",
                    cli_cmd, who);
        else
            fprintf(stderr,
                    "tutti %s: --chat: the model has no tokenizer.chat_template in its metadata; "
                    "format the prompt yourself and use -p with --special\n",
                    cli_cmd);
        return NULL;
    }
    tutti_chat_message msgs[2];
    size_t n_msgs = 0;
    if (system) msgs[n_msgs++] = (tutti_chat_message){"system", system};
    msgs[n_msgs++] = (tutti_chat_message){"user", user};
    int32_t *ids = tutti_chat_tokenize(vocab, tmpl, msgs, n_msgs, true, n_out, NULL);
    free(tmpl);
    if (!ids)
        fprintf(stderr, "tutti %s: --chat: %scannot build the chat prompt: %s\n", cli_cmd, who, tutti_last_error());
    return ids;
}
