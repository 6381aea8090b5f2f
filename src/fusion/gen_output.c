/* Output of a generation, shared by the alignments: the generated text and
 * its callback, stop strings, -n in member 1's tokens, the allowed /
 * forbidden mask (per text and over a token vocabulary), step reports and
 * the notices about members that leave or fill their context. */
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/ensemble_impl.h"
#include "util/buf.h"
#include "util/error.h"

/* ---- output, stop strings and mask ---- */

/* Length of the longest suffix of text that is a proper prefix of s. */
static size_t partial_suffix(const char *text, size_t n, const char *s) {
    size_t ls = strlen(s);
    for (size_t k = ls > 1 ? ls - 1 : 0; k > 0; k--)
        if (k <= n && memcmp(text + n - k, s, k) == 0) return k;
    return 0;
}

/* Bytes at the end of text that start an unfinished UTF-8 character. */
static size_t utf8_tail(const char *text, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        uint8_t c = (uint8_t)text[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

static int emit(gen_ctx *g, size_t upto) {
    if (upto <= g->n_emitted) return 0;
    if (g->cb && g->cb(g->text + g->n_emitted, upto - g->n_emitted, g->user)) g->stopped = true;
    g->n_emitted = upto;
    return 0;
}

/* Tokens of member 1's tokenizer in text[0..n) (-1 on error). */
static int32_t count_tokens(gen_ctx *g, size_t n) {
    if (g->cap_count < n + 8) {
        int32_t *ni = realloc(g->count_ids, sizeof(int32_t) * (n + 8) * 2);
        if (!ni) return -1;
        g->count_ids = ni, g->cap_count = (n + 8) * 2;
    }
    return tutti_tokenize(g->count_vocab, g->text, n, false, false, g->count_ids, (int32_t)g->cap_count);
}

/* -n in BYTE/SPAN alignment: once member 1 tokenizes the text into more
 * than max_tokens tokens, the text is cut back to the longest prefix ending
 * between two characters that it tokenizes into at most max_tokens, and
 * generation stops.  Counting starts when the text could hold that many
 * (a byte adds at most a token or two), so short outputs cost nothing. */
static void token_limit(gen_ctx *g) {
    if (g->max_tokens <= 0 || !g->count_vocab || g->n_text < g->next_check) return;
    if (utf8_tail(g->text, g->n_text)) return; /* count between characters only */
    int32_t c = count_tokens(g, g->n_text);
    if (c < 0) return;
    if (c <= g->max_tokens) {
        g->next_check = g->n_text + (size_t)(g->max_tokens - c) / 2;
        return;
    }
    size_t k = g->n_text;
    while (k > g->n_emitted) {
        k--;
        while (k > g->n_emitted && ((uint8_t)g->text[k] & 0xC0) == 0x80) k--; /* a character start */
        int32_t ck = count_tokens(g, k);
        if (ck >= 0 && ck <= g->max_tokens) break;
    }
    g->n_text = k;
    g->text[k] = 0;
    g->stopped = true;
    g->at_limit = true;
}

int gen_append(gen_ctx *g, const char *bytes, size_t n) {
    size_t old = g->n_text;
    if (tutti_buf_append(&g->text, &g->n_text, &g->cap_text, bytes, n) < 0)
        return tutti_set_error("generation: out of memory");
    token_limit(g);
    if (g->n_text < old) old = g->n_text;
    size_t hold = 0;
    if (g->mask)
        for (int32_t k = 0; k < g->mask->n_stop; k++) {
            const char *s = g->mask->stop[k];
            size_t ls = strlen(s);
            if (!ls) continue;
            /* a stop string that ends inside the new bytes */
            size_t from = old >= ls ? old - ls + 1 : 0;
            for (size_t p = from; p + ls <= g->n_text; p++)
                if (memcmp(g->text + p, s, ls) == 0) {
                    g->n_text = p;
                    g->text[p] = 0;
                    g->stopped = true;
                    emit(g, g->n_text > g->n_emitted ? g->n_text : g->n_emitted);
                    return 0;
                }
            size_t h = partial_suffix(g->text, g->n_text, s);
            if (h > hold) hold = h;
        }
    size_t u = utf8_tail(g->text, g->n_text);
    if (u > hold) hold = u;
    return emit(g, g->n_text - hold);
}

int ens_report_step(tutti_ensemble *e, gen_ctx *g, const float *dist, int32_t n, int32_t chosen, const char *bytes,
                    size_t n_bytes, const double *member_lp, const float *w) {
    if (!e->step_cb) return 0;
    if (e->step_cap < n) {
        float *nb = realloc(e->step_buf, sizeof(float) * (size_t)n);
        if (!nb) return tutti_set_error("generation: out of memory");
        e->step_buf = nb, e->step_cap = n;
    }
    /* log-sum-exp in double: the row may be raw logits (one member passed
     * through) or masked log-probabilities that no longer sum to 1 */
    double mx = -INFINITY, z = 0;
    for (int32_t x = 0; x < n; x++) mx = dist[x] > mx ? dist[x] : mx;
    for (int32_t x = 0; x < n; x++)
        if (dist[x] > -INFINITY) z += exp((double)dist[x] - mx);
    double lz = mx + log(z);
    for (int32_t x = 0; x < n; x++) e->step_buf[x] = dist[x] > -INFINITY ? (float)((double)dist[x] - lz) : -INFINITY;
    tutti_step st = {e->align, n,          e->step_buf,          chosen,    bytes,
                     n_bytes,  g->n_units, member_lp ? e->n : 0, member_lp, member_lp ? w : NULL};
    if (e->step_cb(&st, e->step_user)) g->stopped = true;
    return 0;
}

/* An incomplete UTF-8 character at the very end is never output. */
void gen_flush(gen_ctx *g) { emit(g, g->n_text - utf8_tail(g->text, g->n_text)); }

bool gen_text_ok(const gen_ctx *g, const char *bytes, size_t n, bool at_end) {
    const tutti_mask *m = g->mask;
    if (!m) return true;
    if (at_end && m->ignore_eos) return false;
    if (m->n_allowed > 0) {
        bool ok = false;
        for (int32_t k = 0; k < m->n_allowed && !ok; k++) {
            const char *a = m->allowed[k];
            size_t la = strlen(a);
            if (g->n_text + n > la) continue;
            if ((g->n_text && memcmp(a, g->text, g->n_text)) || (n && memcmp(a + g->n_text, bytes, n))) continue;
            if (at_end && g->n_text + n != la) continue;
            ok = true;
        }
        if (!ok) return false;
    }
    for (int32_t k = 0; k < m->n_forbidden; k++) {
        const char *f = m->forbidden[k];
        size_t lf = strlen(f);
        if (!lf || n == 0) continue;
        /* occurrences that end inside the new bytes */
        size_t tot = g->n_text + n;
        for (size_t end = g->n_text + 1; end <= tot; end++) {
            if (end < lf) continue;
            size_t st = end - lf, j = 0;
            for (; j < lf; j++) {
                size_t p = st + j;
                char c = p < g->n_text ? g->text[p] : bytes[p - g->n_text];
                if (c != f[j]) break;
            }
            if (j == lf) return false;
        }
    }
    return true;
}

/* ---- the mask over a token vocabulary ---- */

/* The same decisions as gen_text_ok for every token at once, through the
 * byte-sorted piece table: the tokens whose piece starts with a string are
 * one range of it.  allowed: a token may come when text·piece is a prefix
 * of an allowed string, i.e. its piece equals the first L bytes of an
 * allowed string's remainder (|remainder| lookups).  forbidden f: an
 * occurrence ending inside the piece lies either inside the piece (the
 * tokens containing f, listed once per generation) or straddles: the text
 * ends with f[0..j) and the piece starts with f[j..) (one range per j).
 * With allowed strings, tokens that write no bytes (control tokens) are
 * ruled out too: they cannot bring the text closer to an allowed string,
 * and would otherwise be drawn forever once the text is complete.
 * Cost per step: one pass over the vocabulary plus the ranges, instead of
 * one gen_text_ok call per token (4.4 ms per token on 151,669 tokens). */
void token_mask_free(token_mask *tm) {
    if (tm->contains)
        for (int32_t k = 0; k < tm->n_forbidden; k++) free(tm->contains[k]);
    free(tm->contains);
    free(tm->n_contains);
    free(tm->keep);
    memset(tm, 0, sizeof *tm);
}

static bool piece_contains(const char *p, int64_t lp, const char *f, size_t lf) {
    for (int64_t i = 0; i + (int64_t)lf <= lp; i++)
        if (p[i] == f[0] && !memcmp(p + i, f, lf)) return true;
    return false;
}

int token_mask_init(token_mask *tm, const fusion_trie *t, const tutti_mask *mask) {
    memset(tm, 0, sizeof *tm);
    tm->t = t;
    tm->mask = mask;
    tm->keep = malloc((size_t)t->n_vocab);
    if (!tm->keep) return tutti_set_error("generation: out of memory");
    if (!mask || mask->n_forbidden <= 0) return 0;
    tm->n_forbidden = mask->n_forbidden;
    tm->contains = calloc((size_t)mask->n_forbidden, sizeof(int32_t *));
    tm->n_contains = calloc((size_t)mask->n_forbidden, sizeof(int32_t));
    if (!tm->contains || !tm->n_contains) goto oom;
    for (int32_t k = 0; k < mask->n_forbidden; k++) {
        const char *f = mask->forbidden[k];
        size_t lf = strlen(f);
        if (!lf) continue;
        int32_t n = 0, cap = 16;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
        if (!ids) goto oom;
        for (int32_t id = 0; id < t->n_vocab; id++) {
            int64_t o = t->off[id], lp = t->off[id + 1] - o;
            if (!piece_contains(t->bytes + o, lp, f, lf)) continue;
            if (n == cap) {
                int32_t *ni = realloc(ids, sizeof(int32_t) * (size_t)(cap *= 2));
                if (!ni) {
                    free(ids);
                    goto oom;
                }
                ids = ni;
            }
            ids[n++] = id;
        }
        tm->contains[k] = ids;
        tm->n_contains[k] = n;
    }
    return 0;
oom:
    token_mask_free(tm);
    return tutti_set_error("generation: out of memory");
}

/* Trie node of the tokens whose piece starts with s[0..n), or -1. */
static int32_t trie_walk(const fusion_trie *t, const char *s, size_t n) {
    int32_t node = 0;
    for (size_t i = 0; i < n && node >= 0; i++) node = fusion_trie_child(t, node, (uint8_t)s[i]);
    return node;
}

void token_mask_apply(const token_mask *tm, const gen_ctx *g, float *dist) {
    const fusion_trie *t = tm->t;
    const tutti_mask *m = tm->mask;
    int32_t V = t->n_vocab;
    if (!m) return;
    if (m->ignore_eos)
        for (int32_t k = 0; k < t->n_eog; k++) dist[t->eog_ids[k]] = -INFINITY;
    if (m->n_allowed > 0) {
        /* keep[id]: the text tokens that may come */
        memset(tm->keep, 0, (size_t)V);
        bool equal = false;
        for (int32_t k = 0; k < m->n_allowed; k++) {
            const char *a = m->allowed[k];
            size_t la = strlen(a);
            if (la < g->n_text || (g->n_text && memcmp(a, g->text, g->n_text))) continue;
            equal |= la == g->n_text;
            int32_t node = 0;
            for (size_t l = g->n_text; l < la && node >= 0; l++) {
                node = fusion_trie_child(t, node, (uint8_t)a[l]);
                if (node < 0) break;
                const fusion_trie_node *nd = &t->node[node];
                for (int32_t r = nd->lo; r < nd->lo + nd->n_exact; r++) tm->keep[t->sorted[r]] = 1;
            }
        }
        for (int32_t id = 0; id < V; id++) {
            bool ok;
            if (t->is_eog[id]) ok = equal;
            else ok = tm->keep[id] != 0; /* tokens without bytes cannot lead to an allowed string */
            if (!ok) dist[id] = -INFINITY;
        }
    }
    for (int32_t k = 0; k < m->n_forbidden; k++) {
        const char *f = m->forbidden[k];
        size_t lf = strlen(f);
        if (!lf) continue;
        for (int32_t i = 0; i < tm->n_contains[k]; i++) dist[tm->contains[k][i]] = -INFINITY;
        for (size_t j = 1; j < lf; j++) {
            if (j > g->n_text || memcmp(g->text + g->n_text - j, f, j)) continue;
            int32_t node = trie_walk(t, f + j, lf - j);
            if (node < 0) continue;
            const fusion_trie_node *nd = &t->node[node];
            for (int32_t r = nd->lo; r < nd->hi; r++) dist[t->sorted[r]] = -INFINITY;
        }
    }
}

static void notice(tutti_ensemble *e, const char *fmt, ...) TUTTI_PRINTF(2, 3);
static void notice(tutti_ensemble *e, const char *fmt, ...) {
    if (!e->notice) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e->notice(msg, e->notice_user);
}

void ens_note_mix_fallback(tutti_ensemble *e, const char *why) {
    notice(e, "mixture sampling is not exact here (%s): every member runs every token", why);
}

void ens_note_ctx_full(tutti_ensemble *e, gen_ctx *g, int32_t i) {
    if (g->ctx_full >= 0) return;
    g->ctx_full = i;
    notice(e,
           "member %s: context full (%d tokens) after %zu generated bytes; generation stops here (raise -c "
           "for longer output)",
           e->m[i]->name, e->m[i]->n_ctx, g->n_text);
}

void ens_note_left(tutti_ensemble *e, gen_ctx *g, fusion_bytes *st, int32_t i, int b) {
    if (g->dead[i]) return;
    g->dead[i] = true;
    const fusion_trie *t = e->trie[i];
    bool has_byte = b < 0; /* b: -1 the prompt, -2 the text a span round chose */
    for (int64_t k = 0; !has_byte && k < t->off[t->n_vocab]; k++) has_byte = (uint8_t)t->bytes[k] == (uint8_t)b;
    /* pruned: some token holds the byte and hypotheses were dropped; the
     * kept boundary hypothesis (bytestate.c) makes this rare */
    bool pruned = b >= 0 && has_byte && st && fusion_bytes_pruned(st) > 0;
    g->left_why[i] = pruned ? TUTTI_LEFT_PRUNED : TUTTI_LEFT_SPELL;
    if (b == -1) notice(e, "member %s leaves the generation: its tokens cannot spell the prompt", e->m[i]->name);
    else if (b < 0)
        notice(e, "member %s leaves the generation after %zu bytes: its tokens cannot spell the chosen span",
               e->m[i]->name, g->n_text);
    else if (pruned)
        notice(e,
               "member %s leaves the generation after %zu bytes: pruning (--prune, --max-hyps) dropped every "
               "tokenization hypothesis that continues with byte 0x%02x",
               e->m[i]->name, g->n_text, b);
    else
        notice(e, "member %s leaves the generation after %zu bytes: its tokens cannot spell byte 0x%02x%s",
               e->m[i]->name, g->n_text, b, has_byte ? " here" : " (no token contains it)");
}
