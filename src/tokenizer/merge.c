/* The two merge algorithms, as llama.cpp runs them (src/llama-vocab.cpp):
 *
 * spm (llm_tokenizer_spm): the text is cut into UTF-8 characters; while some
 *   adjacent pair of symbols spells a vocabulary token, the pair whose token
 *   has the highest score (leftmost on ties) is merged.  Each final symbol is
 *   its token, or else one byte token per byte (<0xNN>, or the 1-byte token;
 *   the unknown token if the vocabulary has neither).
 *
 * bpe (llm_tokenizer_bpe): per pre-tokenized word, after GPT-2's byte to
 *   code point mapping: while some adjacent pair is listed in the merges, the
 *   pair with the lowest rank (leftmost on ties) is merged.  Each final symbol
 *   is its token, or else the 1-byte tokens of its bytes that exist.
 *
 * Both keep symbols in a linked list over one array and candidate pairs in a
 * binary heap; a popped pair is stale (skipped) when either side has been
 * merged away or has grown since it was pushed. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"
#include "util/error.h"

void id_push(id_buf *b, int32_t id) {
    if (b->oom) return;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        int32_t *p = realloc(b->ids, cap * sizeof *p);
        if (!p) {
            b->oom = true;
            return;
        }
        b->ids = p;
        b->cap = cap;
    }
    b->ids[b->n++] = id;
}

typedef struct symbol {
    int32_t prev, next; /* -1: none */
    uint32_t off, n;    /* bytes of the text; n == 0: merged away */
} symbol;

typedef struct bigram {
    int32_t left, right;
    float score;  /* spm: higher first */
    int32_t rank; /* bpe: lower first */
    uint32_t size;
} bigram;

typedef struct heap {
    bigram *v;
    size_t n, cap;
    bool spm;
    bool oom;
} heap;

/* true if a must come out before b */
static bool before(const heap *h, const bigram *a, const bigram *b) {
    if (h->spm) {
        if (a->score != b->score) return a->score > b->score;
    } else {
        if (a->rank != b->rank) return a->rank < b->rank;
    }
    return a->left < b->left;
}

static void heap_push(heap *h, bigram x) {
    if (h->oom) return;
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        bigram *p = realloc(h->v, cap * sizeof *p);
        if (!p) {
            h->oom = true;
            return;
        }
        h->v = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(h, &x, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = x;
}

static bigram heap_pop(heap *h) {
    bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(h, &h->v[c + 1], &h->v[c])) c++;
        if (!before(h, &h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

typedef struct sym_list {
    symbol *v;
    size_t n, cap;
    bool oom;
} sym_list;

static void sym_push(sym_list *l, symbol s) {
    if (l->oom) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        symbol *p = realloc(l->v, cap * sizeof *p);
        if (!p) {
            l->oom = true;
            return;
        }
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = s;
}

/* Cuts text[0..len) into UTF-8 characters (by lead byte, clipped at the
 * end) as one linked list. */
static void split_chars(const char *text, size_t len, sym_list *syms) {
    syms->n = 0;
    for (size_t off = 0; off < len;) {
        size_t n = utf8_len_from_lead((unsigned char)text[off]);
        if (n > len - off) n = len - off;
        int32_t idx = (int32_t)syms->n;
        symbol s = {idx - 1, off + n == len ? -1 : idx + 1, (uint32_t)off, (uint32_t)n};
        sym_push(syms, s);
        off += n;
    }
}

/* Merges left into right's place: the common part of both algorithms. */
static void merge_pair(sym_list *syms, const bigram *b) {
    symbol *l = &syms->v[b->left], *r = &syms->v[b->right];
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) syms->v[r->next].prev = b->left;
}

static bool stale(const sym_list *syms, const bigram *b) {
    const symbol *l = &syms->v[b->left], *r = &syms->v[b->right];
    return l->n == 0 || r->n == 0 || l->n + r->n != b->size;
}

/* ---- spm ---- */

static void spm_try_pair(const tutti_vocab *v, const char *text, const sym_list *syms, heap *h, int32_t left,
                         int32_t right) {
    if (left < 0 || right < 0) return;
    const symbol *l = &syms->v[left], *r = &syms->v[right];
    if (l->n + r->n > v->max_token_len) return; /* no such token: skip the hashing */
    int32_t id = vocab_find(v, text + l->off, l->n + r->n);
    if (id < 0) return;
    bigram b = {left, right, v->tokens[id].score, 0, l->n + r->n};
    heap_push(h, b);
}

void spm_tokenize(const tutti_vocab *v, const char *text, size_t len, id_buf *out) {
    sym_list syms = {0};
    heap h = {0};
    h.spm = true;
    split_chars(text, len, &syms);
    for (size_t i = 1; i < syms.n; i++) spm_try_pair(v, text, &syms, &h, (int32_t)i - 1, (int32_t)i);
    while (h.n && !h.oom && !syms.oom) {
        bigram b = heap_pop(&h);
        if (stale(&syms, &b)) continue;
        merge_pair(&syms, &b);
        spm_try_pair(v, text, &syms, &h, syms.v[b.left].prev, b.left);
        spm_try_pair(v, text, &syms, &h, b.left, syms.v[b.left].next);
    }
    if (h.oom || syms.oom) {
        out->oom = true;
    } else {
        for (int32_t i = syms.n ? 0 : -1; i != -1; i = syms.v[i].next) {
            const symbol *s = &syms.v[i];
            int32_t id = vocab_find(v, text + s->off, s->n);
            if (id >= 0) {
                id_push(out, id);
                continue;
            }
            /* byte fallback (llama.cpp throws when a byte has no token; we
             * use the unknown token then, or drop the byte if there is none) */
            for (uint32_t k = 0; k < s->n; k++) {
                int32_t bt = v->byte_tok[(unsigned char)text[s->off + k]];
                if (bt < 0) bt = v->unk;
                if (bt >= 0) id_push(out, bt);
            }
        }
    }
    free(syms.v);
    free(h.v);
}

/* ---- bpe ---- */

static void bpe_try_pair(const tutti_vocab *v, const char *word, const sym_list *syms, heap *h, int32_t left,
                         int32_t right) {
    if (left < 0 || right < 0) return;
    const symbol *l = &syms->v[left], *r = &syms->v[right];
    if (l->n + r->n > v->max_merge_len) return;
    int32_t rank = vocab_merge_rank(v, word + l->off, l->n, word + r->off, r->n);
    if (rank < 0) return;
    bigram b = {left, right, 0.0f, rank, l->n + r->n};
    heap_push(h, b);
}

/* Merges one byte-level encoded word and appends its tokens. */
static void bpe_word(const tutti_vocab *v, const char *word, size_t len, sym_list *syms, heap *h, id_buf *out) {
    if (v->ignore_merges) {
        int32_t id = vocab_find(v, word, len);
        if (id >= 0) {
            id_push(out, id);
            return;
        }
    }
    split_chars(word, len, syms);
    h->n = 0;
    for (size_t i = 1; i < syms->n; i++) bpe_try_pair(v, word, syms, h, (int32_t)i - 1, (int32_t)i);
    while (h->n && !h->oom && !syms->oom) {
        bigram b = heap_pop(h);
        if (stale(syms, &b)) continue;
        merge_pair(syms, &b);
        bpe_try_pair(v, word, syms, h, syms->v[b.left].prev, b.left);
        bpe_try_pair(v, word, syms, h, b.left, syms->v[b.left].next);
    }
    if (h->oom || syms->oom) {
        out->oom = true;
        return;
    }
    for (int32_t i = syms->n ? 0 : -1; i != -1; i = syms->v[i].next) {
        const symbol *s = &syms->v[i];
        int32_t id = vocab_find(v, word + s->off, s->n);
        if (id >= 0) {
            id_push(out, id);
            continue;
        }
        /* llama.cpp looks up each byte of the encoded symbol alone and skips
         * the ones that are not tokens */
        for (uint32_t k = 0; k < s->n; k++) {
            int32_t bt = vocab_find(v, word + s->off + k, 1);
            if (bt >= 0) id_push(out, bt);
        }
    }
}

bool bpe_tokenize(const tutti_vocab *v, const char *text, size_t len, id_buf *out) {
    const unsigned char *u = (const unsigned char *)text;
    uint32_t *cpts = malloc((len + 1) * sizeof *cpts);
    size_t *bytes_at = malloc((len + 2) * sizeof *bytes_at); /* start of cpt i in `bytes` */
    char *bytes = malloc(len * 4 + 4);
    char *word = NULL;
    size_t *lens = NULL, n_lens = 0, n = 0, nb = 0;
    sym_list syms = {0};
    heap h = {0};
    bool ok = false;
    if (!cpts || !bytes_at || !bytes) goto oom;

    /* Code points as llama.cpp decodes them, and the bytes each one stands
     * for afterwards: its UTF-8, so that every invalid byte becomes U+FFFD
     * (EF BF BD) as in llama.cpp. */
    for (size_t i = 0; i < len;) {
        uint32_t c = utf8_decode_lenient(u, len, &i);
        bytes_at[n] = nb;
        cpts[n++] = c;
        nb += utf8_encode(c, bytes + nb);
    }
    bytes_at[n] = nb;

    if (!pretok_split(v->pre, cpts, n, &lens, &n_lens)) goto fail;

    word = malloc(nb * 2 + 1); /* each byte -> at most 2 bytes of UTF-8 */
    if (!word) goto oom;
    h.spm = false;
    size_t c0 = 0;
    for (size_t w = 0; w < n_lens; w++) {
        size_t b0 = bytes_at[c0], b1 = bytes_at[c0 + lens[w]];
        size_t wl = 0;
        for (size_t b = b0; b < b1; b++) wl += utf8_encode(byte_to_ucp((uint8_t)bytes[b]), word + wl);
        bpe_word(v, word, wl, &syms, &h, out);
        c0 += lens[w];
    }
    if (out->oom) goto oom;
    ok = true;
    goto fail;
oom:
    tutti_set_error("tokenizer: out of memory on %zu bytes of text", len);
fail:
    free(cpts);
    free(bytes_at);
    free(bytes);
    free(word);
    free(lens);
    free(syms.v);
    free(h.v);
    return ok;
}
