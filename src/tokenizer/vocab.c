/* Loading the vocabulary from GGUF metadata (tokenizer.ggml.*), following
 * llama.cpp's llama_vocab::impl::load (src/llama-vocab.cpp): defaults per
 * tokenizer model and pre-tokenizer, special token ids, token attributes and
 * the adjustments llama.cpp makes by token text (end-of-generation tokens,
 * FIM tokens, Phi-3's RSTRIP, ...), the special-token list used to split
 * text, and the per-token piece cache used for detokenizing. */
#include <ctype.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"
#include "util/error.h"

/* ---- hashing ---- */

uint64_t tok_hash(const void *p, size_t n) {
    /* FNV-1a, 64 bit */
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static bool map_init(str_map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 1) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return false;
    memset(m->slots, 0xFF, cap * sizeof *m->slots); /* -1 */
    m->mask = (uint32_t)(cap - 1);
    return true;
}

int32_t vocab_find(const tutti_vocab *v, const char *s, size_t n) {
    if (!v->token_map.slots) return -1;
    for (uint32_t i = (uint32_t)tok_hash(s, n) & v->token_map.mask;; i = (i + 1) & v->token_map.mask) {
        int32_t id = v->token_map.slots[i];
        if (id < 0) return -1;
        const tok_entry *t = &v->tokens[id];
        if (t->text_len == n && !memcmp(v->arena + t->text_off, s, n)) return id;
    }
}

/* Inserts id unless its text is already present; returns the id holding
 * the text. */
static int32_t token_map_insert(tutti_vocab *v, int32_t id) {
    const tok_entry *t = &v->tokens[id];
    const char *s = v->arena + t->text_off;
    for (uint32_t i = (uint32_t)tok_hash(s, t->text_len) & v->token_map.mask;; i = (i + 1) & v->token_map.mask) {
        int32_t o = v->token_map.slots[i];
        if (o < 0) {
            v->token_map.slots[i] = id;
            return id;
        }
        const tok_entry *u = &v->tokens[o];
        if (u->text_len == t->text_len && !memcmp(v->arena + u->text_off, s, t->text_len)) return o;
    }
}

static uint64_t merge_hash(const char *l, size_t ln, const char *r, size_t rn) {
    /* hash of "l r" without building it */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < ln; i++) h = (h ^ (unsigned char)l[i]) * 0x100000001b3ull;
    h = (h ^ ' ') * 0x100000001b3ull;
    for (size_t i = 0; i < rn; i++) h = (h ^ (unsigned char)r[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

int32_t vocab_merge_rank(const tutti_vocab *v, const char *l, size_t ln, const char *r, size_t rn) {
    if (!v->merge_map.slots) return -1;
    for (uint32_t i = (uint32_t)merge_hash(l, ln, r, rn) & v->merge_map.mask;; i = (i + 1) & v->merge_map.mask) {
        int32_t k = v->merge_map.slots[i];
        if (k < 0) return -1;
        const bpe_merge *m = &v->merges[k];
        const char *s = v->arena + m->off;
        if (m->left_len == ln && m->right_len == rn && !memcmp(s, l, ln) && !memcmp(s + ln + 1, r, rn)) return m->rank;
    }
}

/* ---- arena ---- */

/* Appends n bytes plus a NUL; returns the offset or UINT32_MAX on failure. */
static uint32_t arena_add(tutti_vocab *v, const void *p, size_t n) {
    if (v->arena_len + n + 1 > v->arena_cap) {
        size_t cap = v->arena_cap ? v->arena_cap : 1 << 16;
        while (cap < v->arena_len + n + 1) cap *= 2;
        if (cap > UINT32_MAX) return UINT32_MAX;
        char *a = realloc(v->arena, cap);
        if (!a) return UINT32_MAX;
        v->arena = a;
        v->arena_cap = cap;
    }
    uint32_t off = (uint32_t)v->arena_len;
    if (n) memcpy(v->arena + off, p, n);
    v->arena[off + n] = 0;
    v->arena_len += n + 1;
    return off;
}

/* ---- metadata helpers ---- */

#define KEY(k) "tokenizer.ggml." k

static const char *fpath(const gguf_file *f) {
    const char *p = gguf_path(f);
    return p ? p : "(gguf)";
}

/* Array key of the given element type: index, or -1 if absent; -2 (error
 * set) if present with another type. */
static int64_t find_array(const gguf_file *f, const char *key, gguf_type elem, gguf_type elem2) {
    int64_t i = gguf_find_key(f, key);
    if (i < 0) return -1;
    gguf_type t = gguf_kv_type(f, i), at = gguf_kv_arr_type(f, i);
    if (t != GGUF_TYPE_ARRAY || (at != elem && at != elem2)) {
        if (t == GGUF_TYPE_ARRAY)
            tutti_set_error("%s: %s: expected an array of %s, found an array of %s", fpath(f), key,
                            gguf_type_name(elem), gguf_type_name(at));
        else
            tutti_set_error("%s: %s: expected an array of %s, found %s", fpath(f), key, gguf_type_name(elem),
                            gguf_type_name(t));
        return -2;
    }
    return i;
}

/* Optional bool; false (error set) if present with another type. */
static bool opt_bool(const gguf_file *f, const char *key, bool *out) {
    bool b;
    if (gguf_get_bool(f, key, &b)) {
        *out = b;
        return true;
    }
    return gguf_find_key(f, key) < 0;
}

/* ---- loading ---- */

static const char *const k_eot_texts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "<|end_of_text|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "<\xef\xbd\x9c"
                                          "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                          "<end_of_utterance>",
                                          NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre_texts[] = {"<|fim_prefix|>",
                                              "<fim-prefix>",
                                              "<fim_prefix>",
                                              "<\xef\xbd\x9c"
                                              "fim\xe2\x96\x81"
                                              "begin\xef\xbd\x9c>",
                                              "<PRE>",
                                              "\xe2\x96\x81<PRE>",
                                              "<|code_prefix|>",
                                              "<|prefix|>",
                                              NULL};
static const char *const k_fim_suf_texts[] = {"<|fim_suffix|>",
                                              "<fim-suffix>",
                                              "<fim_suffix>",
                                              "<\xef\xbd\x9c"
                                              "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                              "<SUF>",
                                              "\xe2\x96\x81<SUF>",
                                              "<|code_suffix|>",
                                              "<|suffix|>",
                                              NULL};
static const char *const k_fim_mid_texts[] = {"<|fim_middle|>",
                                              "<fim-middle>",
                                              "<fim_middle>",
                                              "<\xef\xbd\x9c"
                                              "fim\xe2\x96\x81"
                                              "end\xef\xbd\x9c>",
                                              "<MID>",
                                              "\xe2\x96\x81<MID>",
                                              "<|code_middle|>",
                                              "<|middle|>",
                                              NULL};
static const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>",       "<reponame>",    NULL};
static const char *const k_fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const k_eog_texts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>",
                                          "<\xef\xbd\x9c"
                                          "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                          "[e~[",
                                          NULL};

static bool text_in(const tutti_vocab *v, int32_t id, const char *const *list) {
    const tok_entry *t = &v->tokens[id];
    for (; *list; list++)
        if (strlen(*list) == t->text_len && !memcmp(*list, v->arena + t->text_off, t->text_len)) return true;
    return false;
}

static int32_t find_cstr(const tutti_vocab *v, const char *s) { return vocab_find(v, s, strlen(s)); }

static uint32_t attr_of_type(int32_t type) {
    switch (type) {
    case TUTTI_TOKEN_TYPE_NORMAL: return TUTTI_TOKEN_ATTR_NORMAL;
    case TUTTI_TOKEN_TYPE_UNKNOWN: return TUTTI_TOKEN_ATTR_UNKNOWN;
    case TUTTI_TOKEN_TYPE_CONTROL: return TUTTI_TOKEN_ATTR_CONTROL;
    case TUTTI_TOKEN_TYPE_USER_DEFINED: return TUTTI_TOKEN_ATTR_USER_DEFINED;
    case TUTTI_TOKEN_TYPE_UNUSED: return TUTTI_TOKEN_ATTR_UNUSED;
    case TUTTI_TOKEN_TYPE_BYTE: return TUTTI_TOKEN_ATTR_BYTE;
    default: return TUTTI_TOKEN_ATTR_UNDEFINED;
    }
}

/* "<0xHH>" -> 0..255, else -1 */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        int c = (unsigned char)s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Bytes of token id in running text, with render_special = true (the piece
 * cache; control/unknown tokens are filtered out by the callers). */
static bool build_piece(tutti_vocab *v, int32_t id, char *scratch) {
    tok_entry *t = &v->tokens[id];
    const char *s = v->arena + t->text_off;
    size_t n = t->text_len, m = 0;
    uint32_t a = t->attr;
    if (a & (TUTTI_TOKEN_ATTR_UNKNOWN | TUTTI_TOKEN_ATTR_CONTROL | TUTTI_TOKEN_ATTR_USER_DEFINED)) {
        memcpy(scratch, s, n);
        m = n;
    } else if (a & TUTTI_TOKEN_ATTR_NORMAL) {
        if (v->kind == TOK_SPM) {
            /* U+2581 -> ' ' */
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
                    scratch[m++] = ' ';
                    i += 3;
                } else {
                    scratch[m++] = s[i++];
                }
            }
        } else {
            /* byte-level: each code point stands for one byte.  A code point
             * outside the mapping (only in hand-added tokens) is kept as its
             * UTF-8 bytes; llama.cpp writes an "[UNK_BYTE_0x..]" marker. */
            const unsigned char *u = (const unsigned char *)s;
            for (size_t i = 0; i < n;) {
                size_t i0 = i;
                uint32_t c = utf8_decode_lenient(u, n, &i);
                int b = ucp_to_byte(c);
                if (b >= 0) {
                    scratch[m++] = (char)b;
                } else {
                    memcpy(scratch + m, s + i0, i - i0);
                    m += i - i0;
                }
            }
        }
    } else if (a & TUTTI_TOKEN_ATTR_BYTE) {
        int b = parse_byte_token(s, n);
        if (b >= 0) {
            scratch[m++] = (char)b;
        } else {
            memcpy(scratch, s, n);
            m = n;
        }
    }
    uint32_t off = arena_add(v, scratch, m);
    if (off == UINT32_MAX) return false;
    t->piece_off = off;
    t->piece_len = (uint32_t)m;
    return true;
}

static int cmp_special(const void *a, const void *b, void *ctx);

/* qsort_r is not C11; a small merge sort keeps ties in id order too. */
static void sort_special(tutti_vocab *v, int32_t *ids, int32_t *tmp, int32_t n) {
    if (n < 2) return;
    int32_t h = n / 2;
    sort_special(v, ids, tmp, h);
    sort_special(v, ids + h, tmp, n - h);
    int32_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp_special(&ids[j], &ids[i], v) < 0 ? ids[j++] : ids[i++];
    while (i < h) tmp[k++] = ids[i++];
    while (j < n) tmp[k++] = ids[j++];
    memcpy(ids, tmp, (size_t)n * sizeof *ids);
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const tutti_vocab *v = ctx;
    uint32_t la = v->tokens[*(const int32_t *)a].text_len, lb = v->tokens[*(const int32_t *)b].text_len;
    return la > lb ? -1 : la < lb ? 1 : 0; /* longest first */
}

void tutti_vocab_free(tutti_vocab *v) {
    if (!v) return;
    pretok_free(v->pre);
    free(v->tokens);
    free(v->arena);
    free(v->token_map.slots);
    free(v->merges);
    free(v->merge_map.slots);
    free(v->is_eog);
    free(v->special);
    if (v->attachment_free) v->attachment_free(v->attachment);
    free(v);
}

void *tok_vocab_attachment(const tutti_vocab *vocab, void *(*make)(const tutti_vocab *), void (*free_fn)(void *)) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    /* the slot is the only thing written in a loaded vocabulary, which is
     * otherwise immutable and shared (members of one ensemble, server
     * requests), hence the lock */
    tutti_vocab *v = (tutti_vocab *)vocab;
    pthread_mutex_lock(&lock);
    if (!v->attachment && (v->attachment = make(vocab))) v->attachment_free = free_fn;
    void *a = v->attachment;
    pthread_mutex_unlock(&lock);
    return a;
}

static bool is_llama3_family(const char *pre) {
    static const char *const names[] = {"llama3",  "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                        "pixtral", "midm-2.0", "lfm2",      NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(pre, names[i])) return true;
    return false;
}

/* Reads a special token id key.  strict: out of range is an error (the ids
 * the tokenizer and generation use); otherwise it is ignored like llama.cpp
 * does (the default stays). */
static bool read_special_id(tutti_vocab *v, const gguf_file *f, const char *key, int32_t *id, bool strict) {
    int64_t x;
    if (!gguf_get_i64(f, key, &x)) {
        if (gguf_find_key(f, key) >= 0) {
            tutti_error_prefix("tokenizer");
            return false;
        }
        return true;
    }
    if (x < 0) {
        *id = -1;
        return true;
    }
    if (x >= v->n_tokens) {
        if (strict) {
            tutti_set_error("%s: %s: token id %lld is out of range (the vocabulary has %d tokens)", fpath(f), key,
                            (long long)x, v->n_tokens);
            return false;
        }
        return true;
    }
    *id = (int32_t)x;
    return true;
}

static int vocab_oom(const gguf_file *f) {
    return tutti_set_error("%s: out of memory loading the vocabulary", fpath(f));
}

/* The tokenizer model and pre-tokenizer, and llama.cpp's defaults for
 * them. */
static int read_model(tutti_vocab *v, const gguf_file *f) {
    const char *path = fpath(f);
    gguf_str model;
    if (!gguf_get_str(f, KEY("model"), &model)) {
        if (gguf_find_key(f, KEY("model")) < 0)
            tutti_set_error("%s: %s is missing: the file has no tokenizer", path, KEY("model"));
        return TUTTI_ERR;
    }
    if (gguf_str_eq(model, "llama")) {
        v->kind = TOK_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        v->kind = TOK_BPE;
    } else {
        return tutti_set_error("%s: %s: unsupported tokenizer '%.*s' (supported: 'llama' = SentencePiece, "
                               "'gpt2' = byte-level BPE)",
                               path, KEY("model"), (int)(model.len > 64 ? 64 : model.len), model.data);
    }
    gguf_str pre;
    if (gguf_get_str(f, KEY("pre"), &pre)) {
        if (pre.len == 0 || pre.len >= sizeof v->pre_name || memchr(pre.data, 0, pre.len))
            return tutti_set_error("%s: %s: invalid pre-tokenizer name (%llu bytes)", path, KEY("pre"),
                                   (unsigned long long)pre.len);
        memcpy(v->pre_name, pre.data, pre.len);
        v->pre_name[pre.len] = 0;
    } else if (gguf_find_key(f, KEY("pre")) >= 0) {
        return TUTTI_ERR;
    } else {
        strcpy(v->pre_name, "default");
    }
    /* defaults (llama.cpp) */
    if (v->kind == TOK_SPM) {
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_space_prefix = true;
        v->add_bos = true;
    } else {
        v->bos = 11;
        v->eos = 11;
        v->unk = -1;
        v->add_space_prefix = false;
        v->add_bos = false;
        if (is_llama3_family(v->pre_name)) {
            v->ignore_merges = true;
            v->add_bos = true;
        } else if (!strcmp(v->pre_name, "tekken")) {
            v->ignore_merges = true;
            v->add_bos = true;
        } else if (!strcmp(v->pre_name, "chatglm-bpe") || !strcmp(v->pre_name, "glm4")) {
            v->bos = -1;
        }
        v->pre = pretok_new(v->pre_name, path);
        if (!v->pre) return TUTTI_ERR;
    }
    v->eot = v->eom = v->sep = v->pad = v->mask = v->nl = -1;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;
    return opt_bool(f, KEY("add_space_prefix"), &v->add_space_prefix) ? 0 : TUTTI_ERR;
}

/* Array key of n entries or more (optional: -1 when absent), or -2 + error. */
static int64_t per_token_array(const gguf_file *f, const char *key, gguf_type t1, gguf_type t2, uint64_t n) {
    int64_t k = find_array(f, key, t1, t2);
    if (k >= 0 && gguf_kv_arr_n(f, k) < n) {
        tutti_set_error("%s: %s has %llu entries for %llu tokens", fpath(f), key,
                        (unsigned long long)gguf_kv_arr_n(f, k), (unsigned long long)n);
        return -2;
    }
    return k;
}

/* The tokens' texts, scores and types; *max_len: the longest text, at
 * least 16. */
static int read_tokens(tutti_vocab *v, const gguf_file *f, size_t *max_len) {
    const char *path = fpath(f);
    int64_t ti = find_array(f, KEY("tokens"), GGUF_TYPE_STRING, GGUF_TYPE_STRING);
    if (ti == -1) tutti_set_error("%s: %s is missing: the file has no vocabulary", path, KEY("tokens"));
    if (ti < 0) return TUTTI_ERR;
    uint64_t n_tokens = gguf_kv_arr_n(f, ti);
    if (n_tokens == 0 || n_tokens > INT32_MAX / 2)
        return tutti_set_error("%s: %s: %llu tokens is not a usable vocabulary size", path, KEY("tokens"),
                               (unsigned long long)n_tokens);
    v->n_tokens = (int32_t)n_tokens;
    int64_t si = per_token_array(f, KEY("scores"), GGUF_TYPE_FLOAT32, GGUF_TYPE_INT32, n_tokens);
    int64_t yi = si == -2 ? -2 : per_token_array(f, KEY("token_type"), GGUF_TYPE_INT32, GGUF_TYPE_INT32, n_tokens);
    if (si == -2 || yi == -2) return TUTTI_ERR;
    v->tokens = calloc(n_tokens, sizeof *v->tokens);
    v->is_eog = calloc(n_tokens, 1);
    if (!v->tokens || !v->is_eog || !map_init(&v->token_map, n_tokens)) return vocab_oom(f);
    *max_len = 16;
    const unsigned char *scores = si >= 0 ? gguf_kv_data(f, si) : NULL;
    bool int_scores = si >= 0 && gguf_kv_arr_type(f, si) == GGUF_TYPE_INT32;
    const unsigned char *types = yi >= 0 ? gguf_kv_data(f, yi) : NULL;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        gguf_str s = gguf_kv_str(f, ti, (uint64_t)i);
        tok_entry *t = &v->tokens[i];
        char empty[32];
        const char *text = s.data;
        size_t len = s.len;
        if (len == 0) { /* llama.cpp names empty tokens so that they stay distinct */
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            text = empty;
        }
        if (len > UINT32_MAX / 4)
            return tutti_set_error("%s: %s: token %d is %zu bytes long", path, KEY("tokens"), i, len);
        uint32_t off = arena_add(v, text, len);
        if (off == UINT32_MAX) return vocab_oom(f);
        t->text_off = off;
        t->text_len = (uint32_t)len;
        if (len > *max_len) *max_len = len;
        if (len > v->max_token_len) v->max_token_len = (uint32_t)len;
        if (scores) {
            if (int_scores) {
                int32_t x;
                memcpy(&x, scores + 4 * (size_t)i, 4);
                t->score = (float)x;
            } else {
                memcpy(&t->score, scores + 4 * (size_t)i, 4);
            }
        }
        t->type = TUTTI_TOKEN_TYPE_NORMAL;
        if (types) memcpy(&t->type, types + 4 * (size_t)i, 4);
        t->attr = attr_of_type(t->type);
        int32_t o = token_map_insert(v, i);
        if (o != i)
            return tutti_set_error("%s: %s: duplicate token text '%.*s' at ids %d and %d", path, KEY("tokens"),
                                   (int)(len > 40 ? 40 : len), text, o, i);
    }
    return 0;
}

/* BPE merges "left right", ranked by their index in the file. */
static int read_merges(tutti_vocab *v, const gguf_file *f) {
    const char *path = fpath(f);
    int64_t mi = find_array(f, KEY("merges"), GGUF_TYPE_STRING, GGUF_TYPE_STRING);
    if (mi == -1) tutti_set_error("%s: %s is missing (needed by the 'gpt2' tokenizer)", path, KEY("merges"));
    if (mi < 0) return TUTTI_ERR;
    uint64_t nm = gguf_kv_arr_n(f, mi);
    if (nm > INT32_MAX / 2)
        return tutti_set_error("%s: %s: too many merges (%llu)", path, KEY("merges"), (unsigned long long)nm);
    v->merges = calloc(nm ? nm : 1, sizeof *v->merges);
    if (!v->merges || !map_init(&v->merge_map, nm)) return vocab_oom(f);
    for (uint64_t k = 0; k < nm; k++) {
        gguf_str s = gguf_kv_str(f, mi, k);
        /* "left right", split at the first space after the first byte; an
         * entry without one can never match (llama.cpp: empty pair) */
        const char *sp = s.len > 1 ? memchr(s.data + 1, ' ', s.len - 1) : NULL;
        if (!sp) continue;
        size_t ln = (size_t)(sp - s.data), rn = s.len - ln - 1;
        uint32_t off = arena_add(v, s.data, s.len);
        if (off == UINT32_MAX) return vocab_oom(f);
        bpe_merge *m = &v->merges[v->n_merges];
        m->off = off;
        m->left_len = (uint32_t)ln;
        m->right_len = (uint32_t)rn;
        m->rank = (int32_t)k; /* the index in the file; the first of duplicates wins */
        if (ln + rn > v->max_merge_len) v->max_merge_len = (uint32_t)(ln + rn);
        if (vocab_merge_rank(v, s.data, ln, sp + 1, rn) >= 0) continue;
        uint32_t i = (uint32_t)merge_hash(s.data, ln, sp + 1, rn) & v->merge_map.mask;
        while (v->merge_map.slots[i] >= 0) i = (i + 1) & v->merge_map.mask;
        v->merge_map.slots[i] = v->n_merges;
        v->n_merges++;
    }
    return 0;
}

/* The special ids the file sets, add_bos/add_eos. */
static int read_special_ids(tutti_vocab *v, const gguf_file *f) {
    const char *path = fpath(f);
    if (v->bos >= v->n_tokens) v->bos = -1;
    if (v->eos >= v->n_tokens) v->eos = -1;
    if (v->unk >= v->n_tokens) v->unk = -1;
    struct {
        const char *key;
        int32_t *id;
        bool strict;
    } keys[] = {
        {KEY("bos_token_id"), &v->bos, true},          {KEY("eos_token_id"), &v->eos, true},
        {KEY("eot_token_id"), &v->eot, true},          {KEY("eom_token_id"), &v->eom, true},
        {KEY("unknown_token_id"), &v->unk, true},      {KEY("seperator_token_id"), &v->sep, false},
        {KEY("padding_token_id"), &v->pad, false},     {KEY("mask_token_id"), &v->mask, false},
        {KEY("fim_pre_token_id"), &v->fim_pre, false}, {KEY("fim_suf_token_id"), &v->fim_suf, false},
        {KEY("fim_mid_token_id"), &v->fim_mid, false}, {KEY("fim_pad_token_id"), &v->fim_pad, false},
        {KEY("fim_rep_token_id"), &v->fim_rep, false}, {KEY("fim_sep_token_id"), &v->fim_sep, false},
        {KEY("prefix_token_id"), &v->fim_pre, false},  {KEY("suffix_token_id"), &v->fim_suf, false},
        {KEY("middle_token_id"), &v->fim_mid, false},
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (!read_special_id(v, f, keys[k].key, keys[k].id, keys[k].strict)) return TUTTI_ERR;
    if (!opt_bool(f, KEY("add_bos_token"), &v->add_bos)) return TUTTI_ERR;
    if (!opt_bool(f, KEY("add_eos_token"), &v->add_eos)) return TUTTI_ERR;
    if (v->add_bos && v->bos < 0)
        return tutti_set_error("%s: %s is true but %s is not set", path, KEY("add_bos_token"), KEY("bos_token_id"));
    if (v->add_eos && v->eos < 0)
        return tutti_set_error("%s: %s is true but %s is not set", path, KEY("add_eos_token"), KEY("eos_token_id"));
    return 0;
}

/* Special tokens found by their text (llama.cpp does this because
 * converters do not always set the ids); such tokens become CONTROL.
 * llama.cpp walks a hash map, so with several candidates the pick depends
 * on it; the Debian build picks the earliest text of each list (checked on
 * llama3, phi-3, qwen3), which is what we do. */
static void find_special_by_text(tutti_vocab *v) {
    struct {
        int32_t *id;
        const char *const *texts;
    } by_text[] = {
        {&v->eot, k_eot_texts},         {&v->eom, k_eom_texts},         {&v->fim_pre, k_fim_pre_texts},
        {&v->fim_suf, k_fim_suf_texts}, {&v->fim_mid, k_fim_mid_texts}, {&v->fim_pad, k_fim_pad_texts},
        {&v->fim_rep, k_fim_rep_texts}, {&v->fim_sep, k_fim_sep_texts},
    };
    for (size_t k = 0; k < sizeof by_text / sizeof by_text[0]; k++) {
        if (*by_text[k].id >= 0) continue;
        for (const char *const *t = by_text[k].texts; *t; t++) {
            int32_t i = find_cstr(v, *t);
            if (i >= 0) {
                *by_text[k].id = i;
                v->tokens[i].attr |= TUTTI_TOKEN_ATTR_CONTROL;
                break;
            }
        }
    }
    /* control tokens named "unused" are unused */
    for (int32_t i = 0; i < v->n_tokens; i++) {
        tok_entry *t = &v->tokens[i];
        if ((t->attr & TUTTI_TOKEN_ATTR_CONTROL) && strstr(v->arena + t->text_off, "unused"))
            t->attr |= TUTTI_TOKEN_ATTR_UNUSED;
    }
}

/* End-of-generation tokens, as llama.cpp decides them. */
static void mark_eog(tutti_vocab *v) {
    if (v->fim_pad >= 0) v->is_eog[v->fim_pad] = 1;
    if (v->fim_rep >= 0) v->is_eog[v->fim_rep] = 1;
    if (v->fim_sep >= 0) v->is_eog[v->fim_sep] = 1;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if (text_in(v, i, k_eog_texts)) {
            v->is_eog[i] = 1;
            v->tokens[i].attr |= TUTTI_TOKEN_ATTR_CONTROL;
        }
    }
    /* gpt-oss: these are always rendered */
    static const char *const ud[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t k = 0; k < 4; k++) {
        int32_t id = find_cstr(v, ud[k]);
        if (id >= 0) v->tokens[id].attr = TUTTI_TOKEN_ATTR_USER_DEFINED;
    }
    if (v->eos >= 0) v->is_eog[v->eos] = 1;
    if (v->eot >= 0) v->is_eog[v->eot] = 1;
    if (v->eom >= 0) v->is_eog[v->eom] = 1;
    /* o200k_harmony / solar-open: "<|end|>" is not the end there */
    int32_t ret = find_cstr(v, "<|return|>"), call = find_cstr(v, "<|call|>"), calls = find_cstr(v, "<|calls|>"),
            flush = find_cstr(v, "<|flush|>"), end = find_cstr(v, "<|end|>");
    bool has_ret = ret >= 0 && v->is_eog[ret];
    bool has_call = (call >= 0 && v->is_eog[call]) || (calls >= 0 && v->is_eog[calls]);
    bool has_flush = flush >= 0 && v->is_eog[flush];
    if (end >= 0 && v->is_eog[end] && ((has_ret && has_call) || (has_call && has_flush))) {
        v->is_eog[end] = 0;
        v->tokens[end].attr = TUTTI_TOKEN_ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: "</s>" is not the end there */
    int32_t tr = find_cstr(v, "<|tool_response>"), s = find_cstr(v, "</s>");
    if (tr >= 0 && v->is_eog[tr] && s >= 0 && v->is_eog[s]) {
        v->is_eog[s] = 0;
        v->tokens[s].attr = TUTTI_TOKEN_ATTR_NORMAL;
    }
}

/* The special tokens, longest text first (text is split on them). */
static int collect_special(tutti_vocab *v, const gguf_file *f) {
    v->special = malloc((size_t)v->n_tokens * sizeof *v->special);
    int32_t *tmp = malloc((size_t)v->n_tokens * sizeof *tmp);
    if (!v->special || !tmp) {
        free(tmp);
        return vocab_oom(f);
    }
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->tokens[i].attr & (TUTTI_TOKEN_ATTR_CONTROL | TUTTI_TOKEN_ATTR_USER_DEFINED | TUTTI_TOKEN_ATTR_UNKNOWN))
            v->special[v->n_special++] = i;
    sort_special(v, v->special, tmp, v->n_special);
    free(tmp);
    return 0;
}

/* Attributes llama.cpp sets by model name. */
static void attrs_by_name(tutti_vocab *v, const gguf_file *f) {
    gguf_str name = {"", 0}, arch = {"", 0};
    char lname[256];
    if (!gguf_get_str(f, "general.name", &name)) name = (gguf_str){"", 0};
    if (!gguf_get_str(f, "general.architecture", &arch)) arch = (gguf_str){"", 0};
    size_t nl = name.len < sizeof lname - 1 ? name.len : sizeof lname - 1;
    for (size_t k = 0; k < nl; k++) lname[k] = (char)tolower((unsigned char)name.data[k]);
    lname[nl] = 0;
    if (strstr(v->pre_name, "jina-v2-de") || strstr(v->pre_name, "jina-v2-es") || strstr(v->pre_name, "jina-v2-code") ||
        gguf_str_eq(arch, "nomic-bert-moe") || gguf_str_eq(arch, "jina-bert-v3")) {
        int32_t id = find_cstr(v, "<mask>");
        if (id >= 0) v->tokens[id].attr |= TUTTI_TOKEN_ATTR_LSTRIP;
    } else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (int32_t k = 0; k < v->n_special; k++) v->tokens[v->special[k]].attr |= TUTTI_TOKEN_ATTR_RSTRIP;
        int32_t id = find_cstr(v, "</s>");
        if (id >= 0) v->tokens[id].attr |= TUTTI_TOKEN_ATTR_RSTRIP;
        static const char *const off[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t k = 0; k < 3; k++) {
            id = find_cstr(v, off[k]);
            if (id >= 0) v->tokens[id].attr &= ~(uint32_t)TUTTI_TOKEN_ATTR_RSTRIP;
        }
    } else if (strstr(lname, "modern-bert")) {
        int32_t id = find_cstr(v, "[MASK]");
        if (id >= 0) v->tokens[id].attr |= TUTTI_TOKEN_ATTR_LSTRIP;
    }
}

/* The piece cache, the byte-fallback tokens and the newline token. */
static int build_pieces(tutti_vocab *v, const gguf_file *f, size_t max_len) {
    char *scratch = malloc(max_len * 2 + 16);
    if (!scratch) return vocab_oom(f);
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (!build_piece(v, i, scratch)) {
            free(scratch);
            return vocab_oom(f);
        }
    free(scratch);
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = find_cstr(v, hex);
        if (id < 0) {
            char c = (char)b;
            id = vocab_find(v, &c, 1);
        }
        v->byte_tok[b] = id;
    }
    if (v->kind == TOK_SPM) {
        v->nl = v->byte_tok['\n'] >= 0 ? v->byte_tok['\n'] : v->pad;
    } else {
        int32_t ids[8];
        int32_t n = tutti_tokenize(v, "\n", 1, false, false, ids, 8);
        v->nl = n > 0 ? ids[0] : v->pad;
    }
    return 0;
}

tutti_vocab *tutti_vocab_from_gguf(const gguf_file *f) {
    if (!f) {
        tutti_set_error("tutti_vocab_from_gguf: no GGUF file");
        return NULL;
    }
    tutti_vocab *v = calloc(1, sizeof *v);
    if (!v) return vocab_oom(f), NULL;
    size_t max_len = 16;
    if (read_model(v, f) < 0 || read_tokens(v, f, &max_len) < 0 || (v->kind == TOK_BPE && read_merges(v, f) < 0) ||
        read_special_ids(v, f) < 0) {
        tutti_vocab_free(v);
        return NULL;
    }
    find_special_by_text(v);
    mark_eog(v);
    if (collect_special(v, f) < 0) {
        tutti_vocab_free(v);
        return NULL;
    }
    attrs_by_name(v, f);
    if (build_pieces(v, f, max_len) < 0) {
        tutti_vocab_free(v);
        return NULL;
    }
    return v;
}

tutti_vocab *tutti_vocab_load(const char *gguf_path) {
    if (!gguf_path) {
        tutti_set_error("tutti_vocab_load: no path");
        return NULL;
    }
    char *local = tutti_hub_resolve(gguf_path); /* a model spec (src/hub): its cached file */
    gguf_file *f = local ? gguf_open(local) : NULL;
    free(local);
    if (!f) return NULL;
    tutti_vocab *v = tutti_vocab_from_gguf(f);
    gguf_close(f);
    return v;
}

/* ---- accessors ---- */

int32_t tutti_vocab_n_tokens(const tutti_vocab *v) { return v ? v->n_tokens : 0; }
int32_t tutti_vocab_bos(const tutti_vocab *v) { return v ? v->bos : -1; }
int32_t tutti_vocab_eos(const tutti_vocab *v) { return v ? v->eos : -1; }
int32_t tutti_vocab_eot(const tutti_vocab *v) { return v ? v->eot : -1; }
int32_t tutti_vocab_nl(const tutti_vocab *v) { return v ? v->nl : -1; }
bool tutti_vocab_add_bos(const tutti_vocab *v) { return v && v->add_bos; }
bool tutti_vocab_add_space_prefix(const tutti_vocab *v) { return v && v->add_space_prefix; }

static bool in_range(const tutti_vocab *v, int32_t id) { return v && id >= 0 && id < v->n_tokens; }

bool tutti_vocab_is_eog(const tutti_vocab *v, int32_t id) { return in_range(v, id) && v->is_eog[id]; }
bool tutti_vocab_is_control(const tutti_vocab *v, int32_t id) {
    return in_range(v, id) && (v->tokens[id].attr & TUTTI_TOKEN_ATTR_CONTROL);
}
const char *tutti_vocab_type(const tutti_vocab *v) { return !v ? "" : v->kind == TOK_SPM ? "spm" : "bpe"; }
const char *tutti_vocab_pre(const tutti_vocab *v) { return v ? v->pre_name : ""; }

const char *tutti_vocab_token_text(const tutti_vocab *v, int32_t id, size_t *len) {
    if (!in_range(v, id)) {
        if (len) *len = 0;
        return "";
    }
    if (len) *len = v->tokens[id].text_len;
    return v->arena + v->tokens[id].text_off;
}
enum tutti_token_type tutti_vocab_token_type(const tutti_vocab *v, int32_t id) {
    return in_range(v, id) ? (enum tutti_token_type)v->tokens[id].type : TUTTI_TOKEN_TYPE_UNDEFINED;
}
uint32_t tutti_vocab_token_attr(const tutti_vocab *v, int32_t id) { return in_range(v, id) ? v->tokens[id].attr : 0; }
const char *tutti_vocab_token_piece(const tutti_vocab *v, int32_t id, size_t *len) {
    if (!in_range(v, id) || (v->tokens[id].attr & (TUTTI_TOKEN_ATTR_UNKNOWN | TUTTI_TOKEN_ATTR_CONTROL))) {
        if (len) *len = 0;
        return "";
    }
    if (len) *len = v->tokens[id].piece_len;
    return v->arena + v->tokens[id].piece_off;
}
int32_t tutti_vocab_find(const tutti_vocab *v, const char *text, size_t len) {
    return v && (text || !len) ? vocab_find(v, text ? text : "", len) : -1;
}
