/* Chat messages -> one member's prompt token ids.  All chat-to-ids work of
 * the server is here (server_chat_tokens) so that a new chat-rendering API
 * replaces one function.  For now: the model's tokenizer.chat_template (or
 * the --chat-template override) rendered by tutti_chat_render, then
 * tokenized so that the template's special-token text becomes special
 * tokens while message text never does (the same scheme as the CLI's
 * --chat, src/cli/chat_prompt.c, for any number of messages). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

static void set_err(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

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

static void token_text(const tutti_vocab *vocab, int32_t id, char *buf, int32_t cap) {
    buf[0] = 0;
    if (id < 0) return;
    int32_t n = tutti_token_to_piece(vocab, id, true, buf, cap - 1);
    buf[n > 0 ? n : 0] = 0;
}

static bool has_control_text(const tutti_vocab *vocab, const char *s) {
    int32_t n = 0, *ids = server_tokenize(vocab, s, strlen(s), false, true, &n);
    bool found = false;
    for (int32_t i = 0; ids && i < n; i++) found |= tutti_vocab_is_control(vocab, ids[i]);
    free(ids);
    return found;
}

static bool append_ids(const tutti_vocab *vocab, int32_t **out, int32_t *n_out, const char *text, size_t len,
                       bool special) {
    int32_t n = 0, *ids = server_tokenize(vocab, text, len, false, special, &n);
    if (!ids) return false;
    int32_t *o = realloc(*out, sizeof(int32_t) * (size_t)(*n_out + n + 1));
    if (!o) return free(ids), false;
    memcpy(o + *n_out, ids, sizeof(int32_t) * (size_t)n);
    *out = o;
    *n_out += n;
    free(ids);
    return true;
}

/* Private-use marks around message text (no template rewrites them, no
 * vocabulary treats them as special). */
#define MARK_OPEN "\xee\x80\x80"
#define MARK_CLOSE "\xee\x80\x81"

int32_t *server_chat_tokens(const tutti_model *model, const char *tmpl_override, const tutti_chat_message *msgs,
                            size_t n_msgs, int32_t *n_out, char *err, size_t errlen) {
    char *tmpl = tmpl_override ? strdup(tmpl_override) : tutti_model_meta_str(model, "tokenizer.chat_template");
    if (!tmpl) {
        set_err(err, errlen, "the model has no tokenizer.chat_template in its metadata (start the server with "
                             "--chat-template FILE, or use /v1/completions)");
        return NULL;
    }
    const tutti_vocab *vocab = tutti_model_vocab(model);
    char bos[256], eos[256];
    token_text(vocab, tutti_vocab_bos(vocab), bos, sizeof bos);
    token_text(vocab, tutti_vocab_eos(vocab), eos, sizeof eos);
    bool unsafe = false;
    for (size_t i = 0; i < n_msgs; i++) unsafe |= msgs[i].content && has_control_text(vocab, msgs[i].content);
    tutti_chat_message *m = calloc(n_msgs ? n_msgs : 1, sizeof *m);
    char **wrapped = calloc(n_msgs ? n_msgs : 1, sizeof *wrapped);
    char *text = NULL;
    int32_t *ids = NULL, n = 0;
    bool ok = m && wrapped;
    for (size_t i = 0; ok && i < n_msgs; i++) {
        m[i] = msgs[i];
        if (!unsafe || !msgs[i].content) continue;
        size_t len = strlen(msgs[i].content);
        if (!(wrapped[i] = malloc(len + 7))) {
            ok = false;
            break;
        }
        memcpy(wrapped[i], MARK_OPEN, 3);
        memcpy(wrapped[i] + 3, msgs[i].content, len);
        memcpy(wrapped[i] + 3 + len, MARK_CLOSE, 4);
        m[i].content = wrapped[i];
    }
    if (!ok) {
        set_err(err, errlen, "out of memory");
        goto done;
    }
    text = tutti_chat_render(tmpl, m, n_msgs, true, bos, eos);
    if (!text) {
        set_err(err, errlen, "cannot render the chat template: %s", tutti_last_error());
        ok = false;
        goto done;
    }
    /* templates that write {{ bos_token }} themselves get no second BOS */
    bool add_bos = tutti_vocab_add_bos(vocab) && !(bos[0] && !strncmp(text, bos, strlen(bos)));
    if (!unsafe) {
        ok = (ids = server_tokenize(vocab, text, strlen(text), add_bos, true, &n)) != NULL;
    } else {
        if (add_bos && (ok = (ids = malloc(sizeof *ids)) != NULL)) ids[n++] = tutti_vocab_bos(vocab);
        const char *p = text;
        while (ok && *p) {
            const char *open = strstr(p, MARK_OPEN);
            const char *end = open ? open : p + strlen(p);
            if (end > p) ok = append_ids(vocab, &ids, &n, p, (size_t)(end - p), true);
            if (!ok || !open) break;
            const char *close = strstr(open + 3, MARK_CLOSE);
            if (!close) {
                set_err(err, errlen, "the chat template rewrote the message text; cannot keep control-token text "
                                     "in it from being parsed");
                ok = false;
                goto done;
            }
            if (close > open + 3) ok = append_ids(vocab, &ids, &n, open + 3, (size_t)(close - open - 3), false);
            p = close + 3;
        }
    }
    if (!ok) set_err(err, errlen, "tokenizing the chat prompt failed: %s", tutti_last_error());
    else if (n < 1) {
        set_err(err, errlen, "the chat template rendered an empty prompt");
        ok = false;
    }
done:
    for (size_t i = 0; wrapped && i < n_msgs; i++) free(wrapped[i]);
    free(wrapped);
    free(m);
    free(text);
    free(tmpl);
    if (!ok) {
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}
