/* Tokens of a growing text, re-tokenizing only its tail (retok.h). */
#include <stdlib.h>
#include <string.h>

#include "fusion/retok.h"
#include "util/error.h"

/* Bytes kept unchanged before the first changed byte: a change can alter
 * the tokens of the word it is in, and a word's tokens never reach back
 * further than its start, which the cut is placed at. */
enum { RETOK_MARGIN = 32 };

static int32_t piece_len(const tutti_vocab *v, int32_t id) {
    char b[256];
    int32_t len = tutti_token_to_piece(v, id, false, b, (int32_t)sizeof b);
    return len == TUTTI_ERR_SIZE ? 0 : len < 0 ? -len : len;
}

static int grow(fusion_retok *r, int32_t n_ids, int32_t n_text) {
    if (n_ids > r->cap) {
        int32_t cap = n_ids + n_ids / 2 + 16;
        int32_t *ids = realloc(r->ids, sizeof(int32_t) * (size_t)cap);
        if (!ids) return -1;
        r->ids = ids;
        int32_t *end = realloc(r->end, sizeof(int32_t) * (size_t)cap);
        if (!end) return -1;
        r->end = end, r->cap = cap;
    }
    if (n_text > r->cap_text) {
        int32_t cap = n_text + n_text / 2 + 64;
        char *t = realloc(r->text, (size_t)cap);
        if (!t) return -1;
        r->text = t, r->cap_text = cap;
    }
    return 0;
}

/* Tokenizes text[0..len) into r->ids + at (room grown as needed); returns
 * the count, 0 where it does not tokenize, or TUTTI_ERR. */
static int32_t tokenize_at(fusion_retok *r, int32_t at, const tutti_vocab *v, bool add_bos, const char *text,
                           int32_t len) {
    int32_t room = len + 8;
    if (grow(r, at + room, 0)) return tutti_set_error("draft: out of memory");
    int32_t n = tutti_tokenize(v, text, (size_t)len, add_bos, false, r->ids + at, room);
    return n < 0 ? 0 : n;
}

/* The byte ends of ids[at..at + m), spelling text from byte `from` on: the
 * pieces' running sum, less the one leading space an SPM tokenizer adds
 * (shift: the pieces' total minus the bytes they stand for). */
static void set_ends(fusion_retok *r, const tutti_vocab *v, int32_t at, int32_t m, int32_t from, int32_t shift) {
    int32_t acc = 0;
    for (int32_t i = at; i < at + m; i++) {
        acc += piece_len(v, r->ids[i]);
        int32_t e = acc - shift;
        r->end[i] = from + (e > 0 ? e : 0);
    }
}

static int32_t pieces_total(const tutti_vocab *v, const int32_t *ids, int32_t m) {
    int32_t s = 0;
    for (int32_t i = 0; i < m; i++) s += piece_len(v, ids[i]);
    return s;
}

static int32_t full(fusion_retok *r, const tutti_vocab *v, bool add_bos, const char *text, int32_t len) {
    r->n_full++;
    int32_t m = tokenize_at(r, 0, v, add_bos, text, len);
    if (m <= 0) return r->n = 0, m;
    int32_t shift = pieces_total(v, r->ids, m) - len;
    set_ends(r, v, 0, m, 0, shift > 0 ? shift : 0);
    return r->n = m;
}

/* Re-tokenizes text[c..len) after r's tokens [0..k) (which end at c) into
 * the tokens after them; 1 if the tail spells its bytes and agrees with the
 * old tokens [k..) over the unchanged words of text[c..same) (a tokenizer that
 * adds a leading space is handed the tail without the space it starts
 * with), 0 if not, TUTTI_ERR. */
static int32_t splice(fusion_retok *r, const tutti_vocab *v, int32_t k, int32_t c, int32_t same, const char *text,
                      int32_t len) {
    int32_t old_n = r->n;
    /* the old tokens past the cut, for the comparison (the tail overwrites them) */
    int32_t keep = 0;
    while (k + keep < old_n && r->end[k + keep] <= same) keep++;
    /* only whole words before the changed byte: the changed word's tokens may differ */
    int32_t w = same;
    while (w > c && !(text[w] == ' ' && text[w - 1] != ' ')) w--;
    while (keep > 0 && r->end[k + keep - 1] > w) keep--;
    int32_t *old = malloc(sizeof(int32_t) * (size_t)(keep + 1));
    if (!old) return tutti_set_error("draft: out of memory");
    memcpy(old, r->ids + k, sizeof(int32_t) * (size_t)keep);
    int32_t ok = 0;
    for (int skip = 0; skip < 2 && !ok; skip++) {
        if (skip && text[c] != ' ') break;
        int32_t m = tokenize_at(r, k, v, false, text + c + skip, len - c - skip);
        if (m < 0) {
            free(old);
            return m;
        }
        if (m == 0 || pieces_total(v, r->ids + k, m) != len - c) continue;
        set_ends(r, v, k, m, c, 0);
        int32_t i = 0;
        while (i < keep && i < m && r->ids[k + i] == old[i]) i++;
        /* the tail spelled otherwise over unchanged words (not a word start
         * for this tokenizer), or no whole word to compare (text without
         * spaces): the whole text */
        if (keep == 0 || i < keep) continue;
        r->n = k + m;
        ok = 1;
    }
    free(old);
    return ok;
}

int32_t fusion_retok_update(fusion_retok *r, const tutti_vocab *v, bool add_bos, const char *text, int32_t len) {
    if (len < 0) return 0;
    int32_t same = 0, lim = len < r->len ? len : r->len;
    while (same < lim && r->text[same] == text[same]) same++;
    int32_t got = -1;
    /* the last token end at a word start (a space after a non-space) at
     * least RETOK_MARGIN bytes before the first changed byte */
    int32_t k = r->n;
    while (k > 1 && r->end[k - 1] > same - RETOK_MARGIN) k--;
    for (; k > 1; k--) {
        int32_t c = r->end[k - 1];
        if (c <= 0) break;
        if (c < len && text[c] == ' ' && text[c - 1] != ' ' && r->end[k - 2] < c) break;
    }
    if (k > 1 && r->end[k - 1] > 0 && r->end[k - 1] <= same - RETOK_MARGIN) {
        int32_t c = r->end[k - 1];
        int32_t s = splice(r, v, k, c, same, text, len);
        if (s < 0) return s;
        if (s > 0) r->n_tail++, got = r->n;
    }
    if (got < 0) {
        int32_t f = full(r, v, add_bos, text, len);
        if (f <= 0) return r->len = 0, f;
        got = f;
    }
    if (grow(r, 0, len)) return tutti_set_error("draft: out of memory");
    memcpy(r->text, text, (size_t)len);
    r->len = len;
    return got;
}

void fusion_retok_free(fusion_retok *r) {
    free(r->text), free(r->ids), free(r->end);
    memset(r, 0, sizeof *r);
}
