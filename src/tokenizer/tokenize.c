/* Tokenizing and detokenizing whole texts: the special-token partition
 * (llama.cpp's tokenizer_st_partition), the per-fragment drivers of the two
 * tokenizers, and the public entry points of include/tutti.h. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"
#include "util/error.h"

typedef struct frag {
    int32_t tok;     /* >= 0: a special token; -1: raw text */
    size_t off, len; /* raw text: bytes of the input */
} frag;

typedef struct frag_list {
    frag *v;
    size_t n, cap;
} frag_list;

static bool fl_push(frag_list *l, frag f) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        frag *p = realloc(l->v, cap * sizeof *p);
        if (!p) return false;
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = f;
    return true;
}

/* First occurrence of needle (nl >= 1) in hay[0..hl) (memmem is not C11). */
static const char *find_bytes(const char *hay, size_t hl, const char *needle, size_t nl) {
    while (hl >= nl) {
        const char *p = memchr(hay, needle[0], hl - nl + 1);
        if (!p) return NULL;
        if (!memcmp(p, needle, nl)) return p;
        hl -= (size_t)(p - hay) + 1;
        hay = p + 1;
    }
    return NULL;
}

/* C-locale isspace, as llama.cpp's LSTRIP/RSTRIP use. */
static bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* true when any of data[off..off+n) is set. */
static bool any_data(const uint8_t *data, size_t off, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (data[off + i]) return true;
    return false;
}

/* Splits text on the special tokens, longest first: every occurrence of a
 * token's text in a raw fragment becomes that token, the text around it stays
 * raw (minus whitespace next to it for LSTRIP/RSTRIP tokens).  Control and
 * unknown tokens take part only with parse_special, and, when a data mask is
 * given, only where their text lies entirely in bytes with data[i] == 0 (an
 * occurrence touching a data byte stays raw text, and the search goes on
 * from its next byte, so a later occurrence can still match); user-defined
 * tokens always do (as in Hugging Face tokenizers' added tokens).  Fragments
 * keep offsets into text, so the mask needs no bookkeeping of its own. */
static bool partition(const tutti_vocab *v, const char *text, size_t len, bool parse_special, const uint8_t *data,
                      frag_list *out) {
    frag_list a = {0}, b = {0};
    if (len && !fl_push(&a, (frag){-1, 0, len})) goto oom;
    for (int32_t k = 0; k < v->n_special; k++) {
        int32_t id = v->special[k];
        const tok_entry *t = &v->tokens[id];
        bool restricted = (t->attr & (TUTTI_TOKEN_ATTR_CONTROL | TUTTI_TOKEN_ATTR_UNKNOWN)) != 0;
        if (!parse_special && restricted) continue;
        const char *tt = v->arena + t->text_off;
        size_t tl = t->text_len;
        b.n = 0;
        for (size_t i = 0; i < a.n; i++) {
            frag f = a.v[i];
            if (f.tok >= 0 || f.len < tl) {
                if (!fl_push(&b, f)) goto oom;
                continue;
            }
            size_t base = f.off, end = f.off + f.len, from = base;
            for (;;) {
                const char *m = end - from >= tl ? find_bytes(text + from, end - from, tt, tl) : NULL;
                if (!m) {
                    if (end > base && !fl_push(&b, (frag){-1, base, end - base})) goto oom;
                    break;
                }
                size_t mpos = (size_t)(m - text);
                if (restricted && data && any_data(data, mpos, tl)) {
                    from = mpos + 1; /* data: plain text here */
                    continue;
                }
                if (mpos > base) {
                    size_t ll = mpos - base;
                    if (t->attr & TUTTI_TOKEN_ATTR_LSTRIP)
                        while (ll > 0 && is_space((unsigned char)text[base + ll - 1])) ll--;
                    if (ll && !fl_push(&b, (frag){-1, base, ll})) goto oom;
                }
                if (!fl_push(&b, (frag){id, 0, 0})) goto oom;
                size_t roff = mpos + tl;
                if (t->attr & TUTTI_TOKEN_ATTR_RSTRIP)
                    while (roff < end && is_space((unsigned char)text[roff])) roff++;
                base = from = roff;
                if (base == end) break;
            }
        }
        frag_list t2 = a;
        a = b;
        b = t2;
    }
    free(b.v);
    *out = a;
    return true;
oom:
    free(a.v);
    free(b.v);
    tutti_set_error("tokenizer: out of memory splitting special tokens");
    return false;
}

/* Tokenizes into buf; false on error (message set). */
static bool tokenize_all(const tutti_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                         const uint8_t *data, id_buf *out) {
    frag_list fl = {0};
    if (!partition(v, text, len, parse_special, data, &fl)) return false;
    bool ok = true;
    if (add_bos && v->bos >= 0) id_push(out, v->bos);
    if (v->kind == TOK_SPM) {
        /* SPM: ' ' -> U+2581, and a space in front of text that starts the
         * input or follows a special token */
        bool prev_special = true;
        char *buf = NULL;
        size_t cap = 0;
        for (size_t i = 0; i < fl.n && ok; i++) {
            const frag *f = &fl.v[i];
            if (f->tok >= 0) {
                id_push(out, f->tok);
                prev_special = true;
                continue;
            }
            size_t need = 3 * (f->len + 1);
            if (need > cap) {
                char *p = realloc(buf, need);
                if (!p) {
                    ok = false;
                    tutti_set_error("tokenizer: out of memory on %zu bytes of text", f->len);
                    break;
                }
                buf = p;
                cap = need;
            }
            size_t m = 0;
            if (v->add_space_prefix && prev_special) {
                memcpy(buf, "\xe2\x96\x81", 3);
                m = 3;
            }
            for (size_t k = 0; k < f->len; k++) {
                char c = text[f->off + k];
                if (c == ' ') {
                    memcpy(buf + m, "\xe2\x96\x81", 3);
                    m += 3;
                } else {
                    buf[m++] = c;
                }
            }
            spm_tokenize(v, buf, m, out);
            prev_special = false;
        }
        free(buf);
    } else {
        for (size_t i = 0; i < fl.n && ok; i++) {
            const frag *f = &fl.v[i];
            if (f->tok >= 0) id_push(out, f->tok);
            else ok = bpe_tokenize(v, text + f->off, f->len, out);
        }
    }
    free(fl.v);
    if (ok && out->oom) {
        tutti_set_error("tokenizer: out of memory on %zu bytes of text", len);
        ok = false;
    }
    return ok;
}

static int32_t tokenize_api(const char *fn, const tutti_vocab *v, const char *text, size_t len, bool add_bos,
                            bool parse_special, const uint8_t *data, int32_t *ids, int32_t n_max) {
    if (!v || (!text && len) || n_max < 0 || (!ids && n_max > 0)) {
        tutti_set_error("%s: invalid arguments (vocab %s, text %s, n_max %d)", fn, v ? "set" : "NULL",
                        text ? "set" : "NULL", n_max);
        return TUTTI_TOKENIZE_FAILED;
    }
    id_buf out = {0};
    if (!tokenize_all(v, text ? text : "", len, add_bos, parse_special, len ? data : NULL, &out)) {
        free(out.ids);
        return TUTTI_TOKENIZE_FAILED;
    }
    if (out.n > (size_t)INT32_MAX) {
        free(out.ids);
        tutti_set_error("%s: %zu tokens do not fit in an int32_t count", fn, out.n);
        return TUTTI_TOKENIZE_FAILED;
    }
    int32_t n = (int32_t)out.n;
    if (n > n_max) {
        free(out.ids);
        return -n;
    }
    if (n) memcpy(ids, out.ids, (size_t)n * sizeof *ids);
    free(out.ids);
    return n;
}

int32_t tutti_tokenize(const tutti_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                       int32_t *ids, int32_t n_max) {
    return tokenize_api("tutti_tokenize", v, text, len, add_bos, parse_special, NULL, ids, n_max);
}

int32_t tutti_tokenize_marked(const tutti_vocab *v, const char *text, size_t len, bool add_bos, const uint8_t *is_data,
                              int32_t *ids, int32_t n_max) {
    return tokenize_api("tutti_tokenize_marked", v, text, len, add_bos, true, is_data, ids, n_max);
}

int32_t tutti_token_to_piece(const tutti_vocab *v, int32_t id, bool render_special, char *buf, int32_t len) {
    if (!v || id < 0 || id >= v->n_tokens) {
        tutti_set_error("tutti_token_to_piece: token id %d is out of range (vocabulary of %d)", id,
                        v ? v->n_tokens : 0);
        return TUTTI_ERR_SIZE;
    }
    const tok_entry *t = &v->tokens[id];
    if (!render_special && (t->attr & (TUTTI_TOKEN_ATTR_UNKNOWN | TUTTI_TOKEN_ATTR_CONTROL))) return 0;
    int32_t n = (int32_t)t->piece_len;
    if (len < n || (!buf && n > 0)) return -n;
    if (n) memcpy(buf, v->arena + t->piece_off, (size_t)n);
    return n;
}

int32_t tutti_detokenize(const tutti_vocab *v, const int32_t *ids, int32_t n_ids, char *buf, int32_t len) {
    if (!v || n_ids < 0 || (!ids && n_ids > 0) || len < 0) {
        tutti_set_error("tutti_detokenize: invalid arguments");
        return TUTTI_ERR_SIZE;
    }
    int64_t total = 0;
    bool strip = v->add_space_prefix; /* the space the tokenizer put in front */
    for (int32_t i = 0; i < n_ids; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= v->n_tokens) {
            tutti_set_error("tutti_detokenize: token id %d at position %d is out of range (vocabulary "
                            "of %d)",
                            id, i, v->n_tokens);
            return TUTTI_ERR_SIZE;
        }
        size_t pl;
        const char *p = tutti_vocab_token_piece(v, id, &pl);
        if (pl == 0) continue;
        if (strip) {
            strip = false;
            if (p[0] == ' ') {
                p++;
                pl--;
            }
        }
        if (buf && total + (int64_t)pl <= len) memcpy(buf + total, p, pl);
        total += (int64_t)pl;
        if (total > INT32_MAX) {
            tutti_set_error("tutti_detokenize: text longer than 2 GiB");
            return TUTTI_ERR_SIZE;
        }
    }
    return total <= len && (buf || total == 0) ? (int32_t)total : -(int32_t)total;
}
