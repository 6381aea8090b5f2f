/* Internals of the tokenizer layer (not for other layers: use tokenizer.h). */
#ifndef TUTTI_TOKENIZER_IMPL_H
#define TUTTI_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* ---- Unicode (unicode.c) ---- */

/* Code point classes, one bit each (general category major class), plus
 * White_Space.  Table generated from UnicodeData 15.1 (gen_unicode_flags.py),
 * the version llama.cpp's tables use. */
enum {
    UCP_UNASSIGNED = 0x001,
    UCP_NUMBER = 0x002,
    UCP_LETTER = 0x004,
    UCP_SEPARATOR = 0x008,
    UCP_MARK = 0x010,
    UCP_PUNCTUATION = 0x020,
    UCP_SYMBOL = 0x040,
    UCP_CONTROL = 0x080,
    UCP_WHITESPACE = 0x100,
};

/* Class bits of a code point (code points above U+10FFFF: UCP_UNASSIGNED). */
unsigned ucp_flags(uint32_t cpt);

/* Length of the UTF-8 sequence a lead byte announces (1 for continuation
 * and invalid bytes): llama.cpp's unicode_len_utf8, used to cut text into
 * symbols. */
static inline size_t utf8_len_from_lead(unsigned char c) {
    static const unsigned char lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[c >> 4];
}

/* Decodes one code point at s[*i] the way llama.cpp's unicode_cpts_from_utf8
 * does (checked against the Debian build: lead and continuation bytes,
 * overlong forms and values above U+10FFFF rejected, surrogates accepted);
 * an invalid sequence yields U+FFFD and consumes one byte.  Advances *i. */
uint32_t utf8_decode_lenient(const unsigned char *s, size_t n, size_t *i);

/* Encodes cpt (<= 0x10FFFF) as UTF-8 into out[4]; returns the length, 0 if
 * cpt is out of range. */
size_t utf8_encode(uint32_t cpt, char *out);

/* GPT-2 byte-level mapping (bytes_to_unicode): the code point standing for
 * byte b, and the inverse (-1 if cpt stands for no byte). */
uint32_t byte_to_ucp(uint8_t b);
int ucp_to_byte(uint32_t cpt);

/* ---- hash of strings to ids (vocab.c) ---- */

typedef struct str_map {
    int32_t *slots; /* -1 empty, else index into the caller's key arrays */
    uint32_t mask;
} str_map;

uint64_t tok_hash(const void *p, size_t n);

/* ---- pre-tokenizer (pretok.c) ---- */

typedef struct pretok pretok;

/* Compiles the regexes of pre-tokenizer `name` (a tokenizer.ggml.pre value).
 * NULL with an error if the name is unknown or PCRE2 fails. */
pretok *pretok_new(const char *name, const char *path);
void pretok_free(pretok *p);

/* Splits cpts[0..n) into words: writes the word lengths (in code points,
 * summing to n) to *lens (malloc'd, caller frees) and their count to *n_lens.
 * Returns false on error (message set). */
bool pretok_split(const pretok *p, const uint32_t *cpts, size_t n, size_t **lens, size_t *n_lens);

/* Names known to pretok_new, for messages. */
const char *pretok_known_names(void);

/* ---- the vocabulary (vocab.c) ---- */

enum tok_kind { TOK_SPM = 0, TOK_BPE = 1 };

typedef struct tok_entry {
    uint32_t text_off, text_len;   /* in vocab->arena */
    uint32_t piece_off, piece_len; /* bytes in running text (render_special=true) */
    float score;
    int32_t type; /* enum tutti_token_type as stored (unknown values kept) */
    uint32_t attr;
} tok_entry;

typedef struct bpe_merge {
    uint32_t off;       /* "left right" in vocab->arena */
    uint32_t left_len;  /* bytes of left */
    uint32_t right_len; /* bytes of right */
    int32_t rank;       /* index in tokenizer.ggml.merges: lower merges first */
} bpe_merge;

struct tutti_vocab {
    enum tok_kind kind;
    char pre_name[64];
    int32_t n_tokens;
    uint32_t max_token_len; /* bytes of the longest token text */
    uint32_t max_merge_len; /* bytes of the longest merge result */
    tok_entry *tokens;
    char *arena;
    size_t arena_len, arena_cap;

    str_map token_map; /* text -> id */

    bpe_merge *merges;
    int32_t n_merges;
    str_map merge_map; /* "left right" -> rank */

    pretok *pre;

    int32_t bos, eos, eot, eom, unk, sep, pad, mask, nl;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    uint8_t *is_eog; /* [n_tokens] */

    bool add_bos, add_eos, add_space_prefix, ignore_merges;

    int32_t *special; /* ids of control/user-defined/unknown tokens, longest text first */
    int32_t n_special;

    int32_t byte_tok[256]; /* SPM byte fallback: <0xNN>, else the 1-byte token, else -1 */

    /* what an upper layer derives from this vocabulary and keeps with it
     * (tok_vocab_attachment: the grammar layer's token trie and class
     * tables); freed with the vocabulary by the free function it gave */
    void *attachment;
    void (*attachment_free)(void *);
};

/* Lookups used by the tokenizers. */
int32_t vocab_find(const tutti_vocab *v, const char *s, size_t n);
/* Rank of merging left+right, or -1. */
int32_t vocab_merge_rank(const tutti_vocab *v, const char *l, size_t ln, const char *r, size_t rn);

/* ---- growable id buffer ---- */
typedef struct id_buf {
    int32_t *ids;
    size_t n, cap;
    bool oom;
} id_buf;

void id_push(id_buf *b, int32_t id);

/* ---- the tokenizers (spm.c, bpe.c) ---- */

/* Tokenizes one raw-text fragment (special tokens already split off), with
 * spaces escaped / prefix added by the caller for SPM. */
void spm_tokenize(const tutti_vocab *v, const char *text, size_t len, id_buf *out);
/* Returns false on a regex engine error (message set). */
bool bpe_tokenize(const tutti_vocab *v, const char *text, size_t len, id_buf *out);

#endif
