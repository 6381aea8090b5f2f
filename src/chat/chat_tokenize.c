/* Conversation -> prompt token ids with template scaffolding and caller data
 * kept apart by construction: the renderer marks every byte that came from
 * the caller (tutti_chat_render_marked), and the tokenizer reads control
 * tokens only out of unmarked bytes (tutti_tokenize_marked).  There is no
 * in-band marker a message could contain to end its data span early, and
 * the text is tokenized in one piece, so segmentation across message
 * boundaries is the tokenizer's own (identical to parsing the whole
 * rendering with special tokens when no message holds control-token text). */
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "util/error.h"

/* Text of a control token (BOS/EOS) for the template variables; false if the
 * vocabulary has none. */
static bool token_text(const tutti_vocab *vocab, int32_t id, char *buf, int32_t cap) {
    buf[0] = 0;
    if (id < 0) return false;
    int32_t n = tutti_token_to_piece(vocab, id, true, buf, cap - 1);
    if (n < 0) return false; /* longer than any real BOS/EOS text: leave it undefined */
    buf[n] = 0;
    return true;
}

static int32_t *tokenize_rendering(const tutti_vocab *vocab, char *text, size_t len, uint8_t *marks, int32_t *n_ids,
                                   char **rendered) {
    int32_t *ids = NULL;
    int32_t need = tutti_tokenize_marked(vocab, text, len, false, marks, NULL, 0);
    if (need == TUTTI_ERR_SIZE) goto fail;
    int32_t n = -need; /* 0 or minus the count */
    ids = malloc(sizeof *ids * ((size_t)n + 1));
    if (!ids) {
        tutti_set_error("chat tokenize: out of memory for %d ids", n);
        goto fail;
    }
    int32_t bos = tutti_vocab_bos(vocab);
    /* Templates that write {{ bos_token }} themselves get no second BOS. */
    int32_t off = tutti_vocab_add_bos(vocab) && bos >= 0 ? 1 : 0;
    if (n && tutti_tokenize_marked(vocab, text, len, false, marks, ids + off, n) != n) goto fail;
    if (off) {
        if (n && ids[1] == bos) memmove(ids, ids + 1, sizeof *ids * (size_t)n);
        else ids[0] = bos, n++;
    }
    free(marks);
    if (rendered) *rendered = text;
    else free(text);
    *n_ids = n;
    return ids;
fail:
    free(ids);
    free(text);
    free(marks);
    return NULL;
}

static bool check_args(const tutti_vocab *vocab, const char *tmpl, int32_t *n_ids, char **rendered) {
    if (rendered) *rendered = NULL;
    if (!vocab || !tmpl || !n_ids) {
        tutti_set_error("chat tokenize: invalid arguments (vocab %s, template %s, n_ids %s)", vocab ? "set" : "NULL",
                        tmpl ? "set" : "NULL", n_ids ? "set" : "NULL");
        return false;
    }
    *n_ids = 0;
    return true;
}

int32_t *tutti_chat_tokenize(const tutti_vocab *vocab, const char *tmpl, const tutti_chat_message *msgs, size_t n_msgs,
                             bool add_generation_prompt, int32_t *n_ids, char **rendered) {
    if (!check_args(vocab, tmpl, n_ids, rendered)) return NULL;
    char bos[512], eos[512];
    bool has_bos = token_text(vocab, tutti_vocab_bos(vocab), bos, sizeof bos);
    bool has_eos = token_text(vocab, tutti_vocab_eos(vocab), eos, sizeof eos);
    size_t len = 0;
    uint8_t *marks = NULL;
    char *text = tutti_chat_render_marked(tmpl, msgs, n_msgs, add_generation_prompt, has_bos ? bos : "",
                                          has_eos ? eos : "", &len, &marks);
    if (!text) return NULL;
    return tokenize_rendering(vocab, text, len, marks, n_ids, rendered);
}

int32_t *tutti_chat_tokenize_json(const tutti_vocab *vocab, const char *tmpl, const char *ctx_json, int32_t *n_ids,
                                  char **rendered) {
    if (!check_args(vocab, tmpl, n_ids, rendered)) return NULL;
    char bos[512], eos[512];
    bool has_bos = token_text(vocab, tutti_vocab_bos(vocab), bos, sizeof bos);
    bool has_eos = token_text(vocab, tutti_vocab_eos(vocab), eos, sizeof eos);
    size_t len = 0;
    uint8_t *marks = NULL;
    char *text = tutti_chat_render_json_marked(tmpl, strlen(tmpl), ctx_json, has_bos ? bos : "", has_eos ? eos : "",
                                               &len, &marks);
    if (!text) return NULL;
    return tokenize_rendering(vocab, text, len, marks, n_ids, rendered);
}
