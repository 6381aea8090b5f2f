/* Fuzz harness of the tokenizer layer (src/tokenizer/); see fuzz/README.md
 * for the pattern.
 *
 * Input: byte 0 chooses the vocabulary and the flags, the rest is the text.
 *   bit 0: 0 = spm, 1 = bpe (TUTTI_FUZZ_TOKENIZER=spm|bpe in the environment
 *          forces one kind, to give each kind its own fuzzing run)
 *   bit 1: spm: phi-3 (user-defined tokens, RSTRIP) / llama-spm;
 *          bpe: qwen3 (collapsed-class regex, 151k tokens) / deepseek-llm
 *          (six regexes, raw code point classes)
 *   bit 2: add BOS
 * The vocabularies are read once from $TUTTI_SHARED_DIR/models/vocab, else
 * the TUTTI_SHARED_DIR of the test build, else ../shared beside the source
 * tree (from __FILE__); they never change afterwards.  Without them the
 * harness does nothing.
 *
 * Promises checked (trap when broken), for parse_special false and true:
 *  - the size protocol: a 0-sized call returns minus the count, the real
 *    call returns the count and the same ids; tokenizing twice gives the same
 *    ids;
 *  - every id is in range; without parse_special no control token comes out
 *    of the text (only the BOS we asked for);
 *  - every piece has the size tutti_vocab_token_piece reports;
 *  - detokenize follows the size protocol and, without parse_special, gives
 *    back the input: for bpe after llama.cpp's UTF-8 repair (each invalid
 *    byte becomes U+FFFD); for spm exactly what spm_expected() derives from
 *    the input (identical for valid UTF-8 without U+2581), when the input
 *    has no user-defined token text (after which SentencePiece adds a space).
 * Crashes, leaks, undefined behaviour and timeouts are the other findings. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/tokenizer.h"
#include "tutti.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static const char *const k_names[4] = {"phi-3", "qwen3", "llama-spm", "deepseek-llm"};
static tutti_vocab *g_vocab[4];
static bool g_tried[4];

static tutti_vocab *get_vocab(int k) {
    if (!g_tried[k]) {
        g_tried[k] = true;
        char path[4096], rel[256];
        snprintf(rel, sizeof rel, "models/vocab/ggml-vocab-%s.gguf", k_names[k]);
        fuzz_shared_path(rel, path, sizeof path);
        g_vocab[k] = tutti_vocab_load(path);
    }
    return g_vocab[k];
}

/* llama.cpp's UTF-8 repair: valid sequences stay (surrogates included), every
 * byte that does not start one becomes U+FFFD.  Written independently of the
 * library's decoder, from the rules. */
static size_t repair_utf8(const uint8_t *s, size_t n, char *out) {
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t l = 0;
        uint32_t cp = 0, min = 0;
        if (c < 0x80) l = 1, cp = c;
        else if (c >= 0xC0 && c < 0xE0) l = 2, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c < 0xF0) l = 3, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c < 0xF8) l = 4, cp = c & 0x07, min = 0x10000;
        bool ok = l > 0 && i + l <= n;
        for (size_t k = 1; ok && k < l; k++) {
            ok = (s[i + k] & 0xC0) == 0x80;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (ok && l > 1 && (cp < min || cp > 0x10FFFF)) ok = false;
        if (ok) {
            memcpy(out + m, s + i, l);
            m += l;
            i += l;
        } else {
            memcpy(out + m, "\xef\xbf\xbd", 3);
            m += 3;
            i += 1;
        }
    }
    return m;
}

/* What SentencePiece gives back for text (no user-defined token text in
 * it): the tokenizer escapes ' ' as U+2581 and cuts the text into symbols by
 * the length their lead byte announces; a symbol that is one valid UTF-8
 * character comes back as itself (U+2581 as a space), any other symbol
 * through byte tokens as its raw bytes (so an escaped space swallowed by an
 * invalid sequence stays E2 96 81).  The space put in front is not given
 * back.  Needs U+2581 and all <0xNN> to be tokens (phi-3, llama-spm). */
static size_t spm_expected(const uint8_t *s, size_t n, char *out) {
    size_t en = 0, m = 0;
    char *e = malloc(3 * n + 1);
    CHECK(e);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') memcpy(e + en, "\xe2\x96\x81", 3), en += 3;
        else e[en++] = (char)s[i];
    }
    for (size_t i = 0; i < en;) {
        unsigned c = (unsigned char)e[i];
        size_t l = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (l > en - i) l = en - i;
        char one[16]; /* up to 4 bytes, each may become U+FFFD */
        size_t ol = repair_utf8((const uint8_t *)e + i, l, one);
        bool valid = ol == l && !memcmp(one, e + i, l) && (l == 1 || (c >= 0xC0 && c < 0xF8));
        /* valid: a single character (repair leaves it unchanged) */
        if (valid && l == 3 && !memcmp(e + i, "\xe2\x96\x81", 3)) out[m++] = ' ';
        else memcpy(out + m, e + i, l), m += l;
        i += l;
    }
    free(e);
    return m;
}

static bool contains(const uint8_t *s, size_t n, const char *t, size_t tn) {
    if (!tn || tn > n) return false;
    for (size_t i = 0; i + tn <= n; i++) {
        size_t k = 0; /* no memcmp: libFuzzer hooks every call */
        while (k < tn && s[i + k] == (uint8_t)t[k]) k++;
        if (k == tn) return true;
    }
    return false;
}

/* Ids of the user-defined tokens that split text without parse_special,
 * per vocabulary (computed once). */
static int32_t *g_ud[4];
static int32_t g_n_ud[4];

static void collect_user_defined(int k, const tutti_vocab *v) {
    if (g_ud[k]) return;
    g_ud[k] = malloc(sizeof *g_ud[k] * (size_t)tutti_vocab_n_tokens(v));
    CHECK(g_ud[k]);
    for (int32_t id = 0; id < tutti_vocab_n_tokens(v); id++) {
        uint32_t a = tutti_vocab_token_attr(v, id);
        if ((a & TUTTI_TOKEN_ATTR_USER_DEFINED) && !(a & (TUTTI_TOKEN_ATTR_CONTROL | TUTTI_TOKEN_ATTR_UNKNOWN)))
            g_ud[k][g_n_ud[k]++] = id;
    }
}

/* Texts SentencePiece rewrites: U+2581 and user-defined token texts (a space
 * prefix follows them; Phi-3 also strips the whitespace after them). */
static bool spm_rewrites(int k, const tutti_vocab *v, const uint8_t *s, size_t n) {
    if (contains(s, n, "\xe2\x96\x81", 3)) return true;
    for (int32_t i = 0; i < g_n_ud[k]; i++) {
        size_t tl;
        const char *t = tutti_vocab_token_text(v, g_ud[k][i], &tl);
        if (contains(s, n, t, tl)) return true;
    }
    return false;
}

static void run(int k, const tutti_vocab *v, bool spm, const uint8_t *text, size_t n, bool bos, bool special) {
    const char *t = (const char *)text;
    int32_t need = tutti_tokenize(v, t, n, bos, special, NULL, 0);
    CHECK(need <= 0 && need != TUTTI_TOKENIZE_FAILED);
    int32_t count = -need;
    int32_t *ids = malloc(sizeof *ids * (size_t)(count + 1));
    int32_t *ids2 = malloc(sizeof *ids2 * (size_t)(count + 1));
    CHECK(ids && ids2);
    CHECK(tutti_tokenize(v, t, n, bos, special, ids, count) == count);
    CHECK(tutti_tokenize(v, t, n, bos, special, ids2, count + 1) == count);
    CHECK(!memcmp(ids, ids2, sizeof *ids * (size_t)count));
    int32_t nv = tutti_vocab_n_tokens(v);
    size_t total = 0;
    for (int32_t i = 0; i < count; i++) {
        CHECK(ids[i] >= 0 && ids[i] < nv);
        if (!special && !(bos && i == 0)) CHECK(!tutti_vocab_is_control(v, ids[i]));
        size_t pl;
        tutti_vocab_token_piece(v, ids[i], &pl);
        char small[1];
        int32_t r = tutti_token_to_piece(v, ids[i], false, small, 0);
        CHECK(r == -(int32_t)pl || (pl == 0 && r == 0));
        total += pl;
    }
    if (bos) CHECK(count > 0 && ids[0] == tutti_vocab_bos(v));

    int32_t dneed = tutti_detokenize(v, ids, count, NULL, 0);
    CHECK(dneed <= 0);
    CHECK((size_t)-dneed <= total);
    char *back = malloc((size_t)-dneed + 1);
    CHECK(back);
    CHECK(tutti_detokenize(v, ids, count, back, -dneed) == -dneed);
    free(back);
    if (!special) {
        /* the text alone (qwen3's BOS is a normal token, ",") */
        int32_t skip = bos ? 1 : 0;
        dneed = tutti_detokenize(v, ids + skip, count - skip, NULL, 0);
        back = malloc((size_t)-dneed + 1);
        char *want = malloc(3 * n + 1);
        CHECK(back && want && tutti_detokenize(v, ids + skip, count - skip, back, -dneed) == -dneed);
        if (!spm) {
            size_t wl = repair_utf8(text, n, want);
            CHECK((size_t)-dneed == wl && !memcmp(back, want, wl));
        } else if (!spm_rewrites(k, v, text, n)) {
            size_t wl = spm_expected(text, n, want);
            CHECK((size_t)-dneed == wl && !memcmp(back, want, wl));
        }
        free(want);
        free(back);
    }
    free(ids);
    free(ids2);
}

int tutti_fuzz_tokenizer_one(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned sel = data[0];
    const char *force = getenv("TUTTI_FUZZ_TOKENIZER");
    bool bpe = (sel & 1) != 0;
    if (force && !strcmp(force, "spm")) bpe = false;
    if (force && !strcmp(force, "bpe")) bpe = true;
    int k = (bpe ? 1 : 0) + ((sel & 2) ? 2 : 0);
    tutti_vocab *v = get_vocab(k);
    if (!v) return 0;
    collect_user_defined(k, v);
    bool bos = (sel & 4) != 0;
    run(k, v, !bpe, data + 1, size - 1, bos, false);
    run(k, v, !bpe, data + 1, size - 1, bos, true);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_tokenizer_one(data, size);
    return 0;
}
#endif
