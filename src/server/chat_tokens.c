/* Chat messages -> one member's prompt token ids.  All chat-to-ids work of
 * the server is here (server_chat_tokens) so that a new chat-rendering API
 * replaces one function: the model's tokenizer.chat_template (or the
 * --chat-template override) through tutti_chat_tokenize, as the CLI's
 * --chat does: the template's control-token text becomes control tokens,
 * message text never does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/fail.h"
#include "server/server.h"

/* tutti_tokenize with a growing buffer; malloc'd ids or NULL. */
int32_t *server_tokenize(const tutti_vocab *vocab, const char *text, size_t len, bool add_bos, bool special,
                         int32_t *n_out) {
    size_t c = len + 8;
    if (c > (size_t)INT32_MAX / 2) return NULL;
    int32_t cap = (int32_t)c;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t n = ids ? tutti_tokenize(vocab, text, len, add_bos, special, ids, cap) : TUTTI_ERR_SIZE;
    if (n < 0 && n != TUTTI_ERR_SIZE && ids) {
        cap = -n;
        free(ids);
        ids = malloc(sizeof(int32_t) * (size_t)cap);
        n = ids ? tutti_tokenize(vocab, text, len, add_bos, special, ids, cap) : TUTTI_ERR_SIZE;
    }
    if (n < 0) {
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

char *server_chat_template(const srv_file *f, const char *tmpl_override) {
    /* a remote member's template is not known here: the override serves it */
    return tmpl_override ? strdup(tmpl_override)
           : f->model    ? tutti_model_meta_str(f->model, "tokenizer.chat_template")
                         : NULL;
}

static char *need_template(const srv_file *f, const char *tmpl_override, char *err, size_t errlen) {
    char *tmpl = server_chat_template(f, tmpl_override);
    if (!tmpl)
        srv_fail(err, errlen,
                 "the model has no chat template (tokenizer.chat_template); use /v1/completions, or ask "
                 "the server's operator for a chat template");
    return tmpl;
}

int32_t *server_chat_tokens(const srv_file *f, const char *tmpl_override, const tutti_chat_message *msgs, size_t n_msgs,
                            int32_t *n_out, char *err, size_t errlen) {
    char *tmpl = need_template(f, tmpl_override, err, errlen);
    if (!tmpl) return NULL;
    /* the library renders and tokenizes so that no role or content can
     * become a control token (tutti_chat_tokenize: per-byte provenance) */
    int32_t *ids = tutti_chat_tokenize(f->vocab, tmpl, msgs, n_msgs, true, n_out, NULL);
    free(tmpl);
    if (!ids) srv_fail(err, errlen, "%s", tutti_last_error());
    return ids;
}

int32_t *server_chat_tokens_json(const srv_file *f, const char *tmpl_override, const char *ctx_json, int32_t *n_out,
                                 char *err, size_t errlen) {
    char *tmpl = need_template(f, tmpl_override, err, errlen);
    if (!tmpl) return NULL;
    int32_t *ids = tutti_chat_tokenize_json(f->vocab, tmpl, ctx_json, n_out, NULL);
    free(tmpl);
    if (!ids) srv_fail(err, errlen, "%s", tutti_last_error());
    return ids;
}
