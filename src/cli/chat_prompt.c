/* --chat: the prompt becomes a user message (plus an optional system
 * message) rendered with the model's own tokenizer.chat_template, then
 * tokenized so that the template's special-token text becomes special tokens
 * while the user's text never does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* Text of a control token (BOS/EOS) for the template variables; "" if none. */
static void token_text(const tutti_vocab *vocab, int32_t id, char *buf, int32_t cap) {
    buf[0] = 0;
    if (id < 0) return;
    int32_t n = tutti_token_to_piece(vocab, id, true, buf, cap - 1);
    buf[n > 0 ? n : 0] = 0;
}

/* true if parsing `s` with special tokens on would produce a control token. */
static bool has_control_text(const tutti_vocab *vocab, const char *s) {
    int32_t n, *ids = cli_tokenize(vocab, s, strlen(s), false, true, &n);
    bool found = false;
    for (int32_t i = 0; ids && i < n; i++) found |= tutti_vocab_is_control(vocab, ids[i]);
    free(ids);
    return found;
}

/* Tokenizes text[0..len) and appends the ids to *out (capacity grows). */
static bool append_text(const tutti_vocab *vocab, int32_t **out, int32_t *n_out, const char *text, size_t len,
                        bool parse_special) {
    int32_t n, *ids = cli_tokenize(vocab, text, len, false, parse_special, &n);
    if (!ids) return false;
    int32_t *o = realloc(*out, sizeof(int32_t) * (size_t)(*n_out + n + 1));
    if (!o) return free(ids), false;
    memcpy(o + *n_out, ids, sizeof(int32_t) * (size_t)n);
    *out = o;
    *n_out += n;
    free(ids);
    return true;
}

/* Marks around message contents, from Unicode's private use area: no chat
 * template trims or rewrites them, and no vocabulary treats them as special. */
#define MARK_OPEN "\xee\x80\x80"  /* U+E000 */
#define MARK_CLOSE "\xee\x80\x81" /* U+E001 */

int32_t *cli_chat_tokens(const tutti_model *model, const char *system, const char *user, int32_t *n_out) {
    return cli_chat_tokens_of(model, NULL, system, user, n_out);
}

int32_t *cli_chat_tokens_of(const tutti_model *model, const char *label, const char *system, const char *user,
                            int32_t *n_out) {
    /* messages name the model when there are several ("member 2 (b.gguf): ...") */
    char who[600];
    snprintf(who, sizeof who, "%s%s", label ? label : "", label ? ": " : "");
    char *tmpl = tutti_model_meta_str(model, "tokenizer.chat_template");
    if (!tmpl) {
        if (label)
            fprintf(stderr, "tutti %s: --chat: %sthe model has no tokenizer.chat_template in its metadata; "
                            "every member needs one for --chat\n", cli_cmd, who);
        else
            fprintf(stderr, "tutti %s: --chat: the model has no tokenizer.chat_template in its metadata; "
                            "format the prompt yourself and use -p with --special\n", cli_cmd);
        return NULL;
    }
    const tutti_vocab *vocab = tutti_model_vocab(model);
    char bos[256], eos[256];
    token_text(vocab, tutti_vocab_bos(vocab), bos, sizeof bos);
    token_text(vocab, tutti_vocab_eos(vocab), eos, sizeof eos);
    tutti_chat_message msgs[2];
    size_t n_msgs = 0;
    if (system) msgs[n_msgs++] = (tutti_chat_message){"system", system};
    msgs[n_msgs++] = (tutti_chat_message){"user", user};
    bool unsafe = false;
    for (size_t i = 0; i < n_msgs; i++) unsafe |= has_control_text(vocab, msgs[i].content);

    /* Common case: the user's text holds no control-token text, so parsing
     * the whole rendering with special tokens on is exactly right and keeps
     * the tokenizer's own segmentation across message boundaries. */
    char *wrapped[2] = {NULL, NULL};
    if (unsafe) {
        for (size_t i = 0; i < n_msgs; i++) {
            size_t len = strlen(msgs[i].content);
            wrapped[i] = malloc(len + 7);
            if (!wrapped[i]) break;
            memcpy(wrapped[i], MARK_OPEN, 3);
            memcpy(wrapped[i] + 3, msgs[i].content, len);
            memcpy(wrapped[i] + 3 + len, MARK_CLOSE, 4);
            msgs[i].content = wrapped[i];
        }
    }
    char *text = tutti_chat_render(tmpl, msgs, n_msgs, true, bos, eos);
    free(tmpl);
    free(wrapped[0]);
    free(wrapped[1]);
    if (!text) {
        fprintf(stderr, "tutti %s: --chat: %scannot render the model's chat template: %s\n", cli_cmd, who,
                tutti_last_error());
        return NULL;
    }
    /* Templates that write {{ bos_token }} themselves must not get a second
     * BOS from the tokenizer. */
    bool add_bos = tutti_vocab_add_bos(vocab) && !(bos[0] && !strncmp(text, bos, strlen(bos)));
    int32_t *ids = NULL, n = 0;
    bool ok = true;
    if (!unsafe) {
        ids = cli_tokenize(vocab, text, strlen(text), add_bos, true, &n);
        ok = ids != NULL;
    } else {
        /* Template text with special tokens, message text without. */
        if (add_bos && (ok = (ids = malloc(sizeof *ids)) != NULL)) ids[n++] = tutti_vocab_bos(vocab);
        const char *p = text;
        while (ok && *p) {
            const char *open = strstr(p, MARK_OPEN);
            const char *end = open ? open : p + strlen(p);
            if (end > p) ok = append_text(vocab, &ids, &n, p, (size_t)(end - p), true);
            if (!ok || !open) break;
            const char *close = strstr(open + 3, MARK_CLOSE);
            if (!close) {
                fprintf(stderr, "tutti %s: --chat: %sthe chat template rewrote the message text; cannot "
                                "keep control-token text in it from being parsed\n", cli_cmd, who);
                ok = false;
                break;
            }
            if (close > open + 3)
                ok = append_text(vocab, &ids, &n, open + 3, (size_t)(close - open - 3), false);
            p = close + 3;
        }
    }
    free(text);
    if (!ok) {
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}
