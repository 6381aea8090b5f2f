/* Logprobs of the fused distribution for `tutti serve` (see logprobs.h). */
#include "server/logprobs.h"
#include "util/buf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

static bool utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || c == 0) return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

static int push_raw(srv_lp *lp, const char *b, size_t n) {
    return tutti_buf_append(&lp->raw, &lp->n_raw, &lp->cap_raw, b, n);
}

/* The top_n most likely outcomes of row[0..n) (finite only), most likely
 * first, ties by the smaller outcome. */
static int top_outcomes(const float *row, int32_t n, int top_n, int32_t *ids) {
    int k = 0;
    for (int32_t x = 0; x < n && top_n > 0; x++) {
        float v = row[x];
        if (!(v > -INFINITY)) continue;
        if (k == top_n && !(v > row[ids[k - 1]])) continue;
        int p = k < top_n ? k++ : k - 1;
        while (p > 0 && v > row[ids[p - 1]]) ids[p] = ids[p - 1], p--;
        ids[p] = x;
    }
    return k;
}

static int set_alts(srv_lp_entry *e, const tutti_step *st, const tutti_vocab *vocab, int top_n) {
    if (top_n <= 0) return 0;
    int32_t ids[64];
    if (top_n > 64) top_n = 64;
    int k = top_outcomes(st->logprobs, st->n_outcomes, top_n, ids);
    e->top = calloc((size_t)(k ? k : 1), sizeof *e->top);
    if (!e->top) return -1;
    for (int i = 0; i < k; i++) {
        srv_lp_alt *a = &e->top[i];
        a->lp = st->logprobs[ids[i]];
        char buf[512];
        int32_t nb;
        if (st->align == TUTTI_ALIGN_BYTE) {
            if (ids[i] >= 256) nb = -1; /* end of text */
            else buf[0] = (char)ids[i], nb = 1;
        } else {
            /* control tokens rendered (an end of turn shows as its text) */
            nb = vocab ? tutti_token_to_piece(vocab, ids[i], true, buf, (int32_t)sizeof buf) : -1;
            if (nb < 0) nb = 0;
        }
        if (nb >= 0) {
            a->bytes = malloc((size_t)nb + 1);
            if (!a->bytes) return e->n_top = i, -1;
            memcpy(a->bytes, buf, (size_t)nb);
            a->n = nb;
        }
        e->n_top = i + 1;
    }
    return 0;
}

static srv_lp_entry *new_entry(srv_lp *lp) {
    if (lp->n == lp->cap) {
        size_t c = lp->cap ? lp->cap * 2 : 64;
        srv_lp_entry *ne = realloc(lp->e, c * sizeof *ne);
        if (!ne) return NULL;
        lp->e = ne, lp->cap = c;
    }
    srv_lp_entry *e = &lp->e[lp->n++];
    memset(e, 0, sizeof *e);
    e->start = lp->n_raw;
    return e;
}

int srv_lp_unscored(srv_lp *lp, const char *b, size_t n) {
    srv_lp_entry *e = new_entry(lp);
    if (!e || push_raw(lp, b, n) < 0) return -1;
    e->len = n, e->lp = NAN, e->n_top = -1;
    return 0;
}

int srv_lp_whole(srv_lp *lp, const char *b, size_t n, double l) {
    srv_lp_entry *e = new_entry(lp);
    if (!e || push_raw(lp, b, n) < 0 || !(e->top = calloc(1, sizeof *e->top)) || !(e->top->bytes = malloc(n + 1)))
        return -1;
    memcpy(e->top->bytes, b, n);
    e->top->n = (int32_t)n, e->top->lp = (float)l;
    e->len = n, e->lp = l, e->n_top = 1;
    return 0;
}

void srv_lp_trim_front(srv_lp *lp, size_t k) {
    if (k > lp->n_raw) k = lp->n_raw;
    memmove(lp->raw, lp->raw + k, lp->n_raw - k);
    lp->n_raw -= k;
    for (size_t i = 0; i < lp->n; i++) {
        srv_lp_entry *e = &lp->e[i];
        size_t cut = e->start < k ? (k - e->start < e->len ? k - e->start : e->len) : 0;
        e->len -= cut;
        e->start = e->start >= k ? e->start - k : 0;
    }
}

static void set_members(srv_lp_entry *e, const tutti_step *st) {
    if (!st->member_logprobs || st->n_members < 1 || st->n_members > TUTTI_ENSEMBLE_MAX_MEMBERS) return;
    e->nm = st->n_members;
    for (int i = 0; i < e->nm; i++) {
        e->mlp[i] = st->member_logprobs[i];
        e->w[i] = st->member_weights ? st->member_weights[i] : 1.0f;
    }
}

int srv_lp_step(srv_lp *lp, const tutti_step *st, const tutti_vocab *vocab, int top_n, bool every) {
    if (st->n_bytes == 0 && !(every && st->align == TUTTI_ALIGN_TOKEN))
        return 0; /* end of text, or a token without text: nothing returned */
    double l = st->chosen >= 0 && st->chosen < st->n_outcomes ? (double)st->logprobs[st->chosen] : -INFINITY;
    if (st->align == TUTTI_ALIGN_BYTE) {
        unsigned char b = (unsigned char)st->bytes[0];
        srv_lp_entry *last = lp->n ? &lp->e[lp->n - 1] : NULL;
        if (last && last->need > 0 && (b & 0xC0) == 0x80) { /* next byte of the character */
            if (push_raw(lp, st->bytes, 1) < 0) return -1;
            last->len++, last->need--, last->lp += l;
            for (int i = 0; i < last->nm && i < st->n_members; i++) last->mlp[i] += st->member_logprobs[i];
            return 0;
        }
        if (last) last->need = 0; /* a broken character ends where it is */
        srv_lp_entry *e = new_entry(lp);
        if (!e || push_raw(lp, st->bytes, 1) < 0) return -1;
        e->len = 1, e->lp = l, e->need = utf8_len(b) - 1;
        set_members(e, st);
        return set_alts(e, st, vocab, top_n);
    }
    srv_lp_entry *e = new_entry(lp);
    if (!e || push_raw(lp, st->bytes, st->n_bytes) < 0) return -1;
    e->len = st->n_bytes, e->lp = l;
    set_members(e, st);
    return set_alts(e, st, vocab, top_n);
}

void srv_lp_free(srv_lp *lp) {
    for (size_t i = 0; i < lp->n; i++) {
        for (int k = 0; k < lp->e[i].n_top; k++) free(lp->e[i].top[k].bytes);
        free(lp->e[i].top);
    }
    free(lp->e);
    free(lp->raw);
    memset(lp, 0, sizeof *lp);
}

size_t srv_lp_ready(const srv_lp *lp, size_t text_len, bool final) {
    size_t i = lp->sent;
    while (i < lp->n) {
        const srv_lp_entry *e = &lp->e[i];
        bool whole = e->start + e->len <= text_len && (e->need == 0 || final);
        if (!whole && !(final && e->start < text_len)) break;
        i++;
    }
    return i;
}

/* The token text of bytes b[0..n): itself when valid UTF-8, else OpenAI's
 * "bytes:\xNN..." form (a token that is part of a character). */
static char *token_text(const char *b, size_t n) {
    if (utf8_valid(b, n)) {
        char *s = malloc(n + 1);
        if (s) memcpy(s, b, n), s[n] = 0;
        return s;
    }
    char *s = malloc(6 + 4 * n + 1);
    if (!s) return NULL;
    size_t k = (size_t)sprintf(s, "bytes:");
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(s + k, "\\x%02x", (unsigned char)b[i]);
    return s;
}

static cJSON *bytes_array(const char *b, size_t n) {
    if (!b) return cJSON_CreateNull();
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)b[i]));
    return a;
}

/* JSON has no -inf: a ruled-out outcome never appears, and a log-probability
 * too small for a float is reported as OpenAI does for those, -9999 */
static double finite_lp(double l) { return isfinite(l) ? l : -9999.0; }

static cJSON *chat_entry(const char *b, size_t n, double l, const srv_lp_alt *top, int n_top, bool alt_list) {
    cJSON *o = cJSON_CreateObject();
    char *t = b ? token_text(b, n) : NULL;
    cJSON_AddStringToObject(o, "token", b ? (t ? t : "") : "<|endoftext|>");
    free(t);
    if (isnan(l)) cJSON_AddNullToObject(o, "logprob");
    else cJSON_AddNumberToObject(o, "logprob", finite_lp(l));
    cJSON_AddItemToObject(o, "bytes", bytes_array(b, n));
    if (alt_list) {
        cJSON *a = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int k = 0; k < n_top; k++)
            cJSON_AddItemToArray(a, chat_entry(top[k].bytes, (size_t)top[k].n, top[k].lp, NULL, 0, false));
    }
    return o;
}

cJSON *srv_lp_json(const srv_lp *lp, size_t from, size_t to, size_t text_len, bool chat) {
    cJSON *o = cJSON_CreateObject();
    if (chat) {
        cJSON *c = cJSON_AddArrayToObject(o, "content");
        for (size_t i = from; i < to; i++) {
            const srv_lp_entry *e = &lp->e[i];
            size_t n = e->start + e->len <= text_len ? e->len : text_len - e->start;
            cJSON_AddItemToArray(c, chat_entry(lp->raw + e->start, n, e->lp, e->top, e->n_top, true));
        }
        return o;
    }
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *tlp = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs"), *off = cJSON_AddArrayToObject(o, "text_offset");
    /* characters before entry `from` */
    size_t chars = 0, pos = 0;
    for (size_t i = from; i < to; i++) {
        const srv_lp_entry *e = &lp->e[i];
        for (; pos < e->start; pos++) chars += ((unsigned char)lp->raw[pos] & 0xC0) != 0x80;
        size_t n = e->start + e->len <= text_len ? e->len : text_len - e->start;
        char *t = token_text(lp->raw + e->start, n);
        cJSON_AddItemToArray(toks, cJSON_CreateString(t ? t : ""));
        free(t);
        if (isnan(e->lp)) { /* an echoed prompt's first token: nothing to condition on */
            cJSON_AddItemToArray(tlp, cJSON_CreateNull());
            cJSON_AddItemToArray(top, cJSON_CreateNull());
            cJSON_AddItemToArray(off, cJSON_CreateNumber((double)chars));
            continue;
        }
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(finite_lp(e->lp)));
        cJSON *d = cJSON_CreateObject();
        for (int k = 0; k < e->n_top; k++) {
            const srv_lp_alt *a = &e->top[k];
            char *at = a->bytes ? token_text(a->bytes, (size_t)a->n) : NULL;
            const char *key = a->bytes ? (at ? at : "") : "<|endoftext|>";
            /* a dict: two tokens with the same text keep the likelier */
            if (!cJSON_GetObjectItemCaseSensitive(d, key)) cJSON_AddNumberToObject(d, key, finite_lp(a->lp));
            free(at);
        }
        cJSON_AddItemToArray(top, d);
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)chars));
    }
    return o;
}

cJSON *srv_lp_shares_json(const srv_lp *lp, size_t from, size_t to, size_t text_len) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = from; a && i < to; i++) {
        const srv_lp_entry *e = &lp->e[i];
        size_t n = e->start + e->len <= text_len ? e->len : text_len - e->start;
        cJSON *o = cJSON_CreateObject();
        char *t = token_text(lp->raw + e->start, n);
        cJSON_AddStringToObject(o, "text", t ? t : "");
        free(t);
        /* in the log domain from the largest term: a long character's
         * probabilities may underflow a double's exp */
        double mx = -INFINITY, z = 0;
        for (int k = 0; k < e->nm; k++)
            if (e->w[k] > 0 && e->mlp[k] + log(e->w[k]) > mx) mx = e->mlp[k] + log(e->w[k]);
        for (int k = 0; k < e->nm && mx > -INFINITY; k++)
            if (e->w[k] > 0) z += exp(e->mlp[k] + log(e->w[k]) - mx);
        if (!(z > 0) || !isfinite(mx)) {
            cJSON_AddNullToObject(o, "share");
        } else {
            cJSON *s = cJSON_AddArrayToObject(o, "share");
            for (int k = 0; k < e->nm; k++) {
                double v = e->w[k] > 0 ? exp(e->mlp[k] + log(e->w[k]) - mx) / z : 0;
                cJSON_AddItemToArray(s, cJSON_CreateNumber(round(v * 1e4) / 1e4));
            }
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}
