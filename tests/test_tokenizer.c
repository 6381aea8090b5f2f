/* Tokenizer layer tests.
 *
 * References (never our own output):
 *  - ref/tokenize/VOCAB.out: llama.cpp's ids for the 85 strings of
 *    ref/tokenize/tokenizer-tests.inp (no BOS, special tokens not parsed);
 *  - ref/models/MODEL.pN.jsonl: llama.cpp's prompt ids (BOS as the metadata
 *    says) and the text of its greedy continuation (concatenated pieces);
 *  - a few ids written below, produced with llama.cpp (Debian 0.7.0) in the
 *    oracle chroot (../shared/oracle): llama_tokenize(vocab, text, len, ids,
 *    n, add_special = false, parse_special = false / true) on the same
 *    vocab files;
 *  - facts of the GGUF metadata (ids of named tokens) and of the formats.
 */
#include "test_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "tokenizer/tokenizer.h"
#include "tutti.h"

/* the vocabularies the task requires, then the other tokenizer-only files */
static const char *const k_required[] = {"llama3",       "qwen3",  "gpt-2",     "llama-spm", "phi-3", "deepseek-coder",
                                         "deepseek-llm", "falcon", "starcoder", "refact",    "mpt"};
static const char *const k_extra_ok[] = {"baichuan", "gpt-neox"};
#define N_REQUIRED (sizeof k_required / sizeof k_required[0])
#define N_EXTRA (sizeof k_extra_ok / sizeof k_extra_ok[0])

static tutti_vocab *load_vocab(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/vocab/ggml-vocab-%s.gguf", name);
    tutti_vocab *v = tutti_vocab_load(shared_path(rel));
    if (!v) fail_msg("loading %s: %s", rel, tutti_last_error());
    return v;
}

/* ---- the test strings, split like shared/oracle/tokfile.c does ---- */

typedef struct strings {
    char *buf;
    const char *s[256];
    size_t len[256];
    int n;
} strings;

static void load_strings(strings *st) {
    size_t n;
    st->buf = read_file(shared_path("ref/tokenize/tokenizer-tests.inp"), &n);
    assert_non_null(st->buf);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = st->buf;
    if (!strncmp(p, "__ggml_vocab_test__\n", 20)) p += 20;
    st->n = 0;
    while (*p && st->n < 256) {
        char *e = strstr(p, sep);
        size_t len = e ? (size_t)(e - p) : strlen(p);
        st->s[st->n] = p;
        st->len[st->n] = len;
        st->n++;
        if (!e) break;
        p = e + strlen(sep);
    }
    assert_int_equal(st->n, 85);
}

/* Tokenizes into a malloc'd array (count in *n), checking the size protocol. */
static int32_t *tok(const tutti_vocab *v, const char *s, size_t len, bool bos, bool special, int *n) {
    int32_t need = tutti_tokenize(v, s, len, bos, special, NULL, 0);
    assert_true(need <= 0 && need != TUTTI_TOKENIZE_FAILED);
    int32_t *ids = malloc(sizeof *ids * (size_t)(-need + 1));
    assert_non_null(ids);
    int32_t got = tutti_tokenize(v, s, len, bos, special, ids, -need);
    assert_int_equal(got, -need);
    *n = got;
    return ids;
}

static char *detok(const tutti_vocab *v, const int32_t *ids, int n, int *len) {
    int32_t need = tutti_detokenize(v, ids, n, NULL, 0);
    assert_true(need <= 0);
    char *out = malloc((size_t)-need + 1);
    assert_non_null(out);
    int32_t got = tutti_detokenize(v, ids, n, out, -need);
    assert_int_equal(got, -need);
    *len = got;
    return out;
}

/* Compares the 85 strings against ref/tokenize/NAME.out; returns mismatches. */
static int check_reference(const char *name, const strings *st) {
    char rel[256];
    snprintf(rel, sizeof rel, "ref/tokenize/%s.out", name);
    char *ref = read_file(shared_path(rel), NULL);
    assert_non_null(ref);
    tutti_vocab *v = load_vocab(name);
    char *line = ref;
    int bad = 0;
    for (int i = 0; i < st->n; i++) {
        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = 0;
        int32_t want[4096];
        int nw = parse_ids(line, want, 4096);
        int n;
        int32_t *got = tok(v, st->s[i], st->len[i], false, false, &n);
        if (n != nw || memcmp(got, want, sizeof *got * (size_t)n)) {
            bad++;
            print_message("%s: string %d (%.40s...): %d ids, expected %d\n", name, i, st->s[i], n, nw);
        }
        free(got);
        line = eol + 1;
    }
    print_message("%-15s %d/%d strings match llama.cpp\n", name, st->n - bad, st->n);
    tutti_vocab_free(v);
    free(ref);
    return bad;
}

static void test_reference_vocabs(void **state) {
    (void)state;
    require_shared();
    strings st;
    load_strings(&st);
    int bad = 0;
    for (size_t k = 0; k < N_REQUIRED; k++) bad += check_reference(k_required[k], &st);
    for (size_t k = 0; k < N_EXTRA; k++) bad += check_reference(k_extra_ok[k], &st);
    free(st.buf);
    assert_int_equal(bad, 0);
}

/* bert-bge is a WordPiece ("bert") vocabulary, not implemented: it must be
 * refused with a message naming the field and the model. */
static void test_unsupported_vocab(void **state) {
    (void)state;
    require_shared();
    tutti_vocab *v = tutti_vocab_load(shared_path("models/vocab/ggml-vocab-bert-bge.gguf"));
    assert_null(v);
    assert_non_null(strstr(tutti_last_error(), "tokenizer.ggml.model"));
    assert_non_null(strstr(tutti_last_error(), "'bert'"));
}

/* ---- round trip ----
 *
 * detokenize(tokenize(s)) == s holds exactly when nothing in s is lost or
 * rewritten on the way in:
 *  - bpe: s is valid UTF-8 (llama.cpp turns every invalid byte into U+FFFD)
 *    and every byte of s has its byte-level token (falcon lacks 14 control
 *    bytes, which llama.cpp drops);
 *  - spm: s has no U+2581 (it reads back as a space), no user-defined token
 *    text (the text after it gets a space prefix, and Phi-3 strips the
 *    whitespace after it), and every character is a token or has byte tokens
 *    for all its bytes (else it becomes <unk>).
 * The test checks the predicate per string and requires the round trip for
 * every string that satisfies it, and the lossy cases separately below. */

static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t l;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0) l = 2, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) l = 3, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) l = 4, cp = c & 0x07;
        else return false;
        if (i + l > n) return false;
        for (size_t k = 1; k < l; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((l == 2 && cp < 0x80) || (l == 3 && cp < 0x800) || (l == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        i += l;
    }
    return true;
}

static bool contains(const char *s, size_t n, const char *t, size_t tn) {
    for (size_t i = 0; tn && i + tn <= n; i++)
        if (!memcmp(s + i, t, tn)) return true;
    return false;
}

/* GPT-2's byte -> code point map, from its definition (bytes_to_unicode). */
static void byte_symbol(unsigned b, char *out, size_t *len) {
    unsigned cp;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) cp = b;
    else if (b <= 0x20) cp = 0x100 + b;
    else if (b <= 0xA0) cp = 0x100 + 33 + (b - 0x7F);
    else cp = 0x100 + 67;
    if (cp < 0x80) {
        out[0] = (char)cp;
        *len = 1;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        *len = 2;
    }
}

static bool lossless_expected(const tutti_vocab *v, const char *s, size_t n) {
    bool spm = !strcmp(tutti_vocab_type(v), "spm");
    if (!spm) {
        if (!valid_utf8((const unsigned char *)s, n)) return false;
        for (size_t i = 0; i < n; i++) {
            char sym[2];
            size_t sl;
            byte_symbol((unsigned char)s[i], sym, &sl);
            if (tutti_vocab_find(v, sym, sl) < 0) return false;
        }
        return true;
    }
    if (contains(s, n, "\xe2\x96\x81", 3)) return false;
    for (int32_t id = 0; id < tutti_vocab_n_tokens(v); id++) {
        /* the tokens text is split on without parse_special */
        uint32_t a = tutti_vocab_token_attr(v, id);
        if (!(a & TUTTI_TOKEN_ATTR_USER_DEFINED) || (a & (TUTTI_TOKEN_ATTR_CONTROL | TUTTI_TOKEN_ATTR_UNKNOWN)))
            continue;
        size_t tl;
        const char *t = tutti_vocab_token_text(v, id, &tl);
        if (contains(s, n, t, tl)) return false;
    }
    for (size_t i = 0; i < n;) {
        unsigned c = (unsigned char)s[i];
        size_t l = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (l > n - i) l = n - i;
        char esc[16];
        size_t el = 0;
        if (c == ' ') memcpy(esc, "\xe2\x96\x81", 3), el = 3;
        else memcpy(esc, s + i, l), el = l;
        if (tutti_vocab_find(v, esc, el) < 0) {
            for (size_t k = 0; k < el; k++) {
                char hex[8];
                snprintf(hex, sizeof hex, "<0x%02X>", (unsigned char)esc[k]);
                if (tutti_vocab_find(v, hex, 6) < 0 && tutti_vocab_find(v, esc + k, 1) < 0) return false;
            }
        }
        i += l;
    }
    return true;
}

static void test_round_trip(void **state) {
    (void)state;
    require_shared();
    strings st;
    load_strings(&st);
    for (size_t k = 0; k < N_REQUIRED + N_EXTRA; k++) {
        const char *name = k < N_REQUIRED ? k_required[k] : k_extra_ok[k - N_REQUIRED];
        tutti_vocab *v = load_vocab(name);
        int expected = 0, exact = 0;
        for (int i = 0; i < st.n; i++) {
            int n, m;
            int32_t *ids = tok(v, st.s[i], st.len[i], tutti_vocab_add_bos(v), false, &n);
            char *back = detok(v, ids, n, &m);
            bool same = (size_t)m == st.len[i] && !memcmp(back, st.s[i], st.len[i]);
            if (lossless_expected(v, st.s[i], st.len[i])) {
                expected++;
                if (!same) print_message("%s: string %d does not round-trip\n", name, i);
                assert_true(same);
            }
            exact += same;
            free(ids);
            free(back);
        }
        print_message("%-15s round trip exact for %d/%d strings (%d required by the predicate)\n", name, exact, st.n,
                      expected);
        /* all 85 strings are valid UTF-8 without U+2581 or user-defined
         * token text, so the predicate must hold for every one of them */
        assert_int_equal(expected, st.n);
        tutti_vocab_free(v);
    }
    free(st.buf);
}

/* The lossy cases, as llama.cpp defines them. */
static void test_lossy_cases(void **state) {
    (void)state;
    require_shared();
    int n, m;
    /* bpe: an invalid byte is U+FFFD */
    tutti_vocab *v = load_vocab("gpt-2");
    int32_t *a = tok(v, "\xff", 1, false, false, &n);
    int na;
    int32_t *b = tok(v, "\xef\xbf\xbd", 3, false, false, &na);
    assert_int_equal(n, na);
    assert_memory_equal(a, b, sizeof *a * (size_t)n);
    char *back = detok(v, a, n, &m);
    assert_int_equal(m, 3);
    assert_memory_equal(back, "\xef\xbf\xbd", 3);
    free(a), free(b), free(back);
    tutti_vocab_free(v);
    /* spm: invalid bytes go through byte tokens unchanged; U+2581 reads back
     * as a space */
    v = load_vocab("llama-spm");
    a = tok(v, "\xff\xc3(", 3, false, false, &n);
    back = detok(v, a, n, &m);
    assert_int_equal(m, 3);
    assert_memory_equal(back, "\xff\xc3(", 3);
    free(a), free(back);
    a = tok(v,
            "a\xe2\x96\x81"
            "b",
            5, false, false, &n);
    back = detok(v, a, n, &m);
    assert_int_equal(m, 3);
    assert_memory_equal(back, "a b", 3);
    free(a), free(back);
    tutti_vocab_free(v);
}

/* ---- special tokens and invalid UTF-8: ids from llama.cpp (see top) ---- */

typedef struct oracle_case {
    const char *vocab;
    const char *text;
    size_t len;
    bool parse_special;
    int32_t ids[32];
    int n;
} oracle_case;

#define S(x) x, sizeof(x) - 1
static const oracle_case k_oracle[] = {
    {"llama3",
     S("<|begin_of_text|>Hello<|eot_id|>"),
     false,
     {27, 91, 7413, 3659, 4424, 91, 29, 9906, 27, 91, 68, 354, 851, 91, 29},
     15},
    {"llama3", S("<|begin_of_text|>Hello<|eot_id|>"), true, {128000, 9906, 128009}, 3},
    {"llama3", S("<|start_header_id|>user<|end_header_id|>\n\nhi"), true, {128006, 882, 128007, 271, 6151}, 5},
    {"qwen3",
     S("<|im_start|>user\nhi<|im_end|>\n"),
     false,
     {27, 91, 318, 4906, 91, 29, 872, 198, 6023, 27, 91, 318, 6213, 91, 397},
     15},
    {"qwen3", S("<|im_start|>user\nhi<|im_end|>\n"), true, {151644, 872, 198, 6023, 151645, 198}, 6},
    /* invalid UTF-8, overlong form, surrogate, value above U+10FFFF */
    {"qwen3",
     S("\xff a\xc0\x80"
       "b \xed\xa0\x80 \xf4\x90\x80\x80"),
     false,
     {5691, 264, 9973, 65, 10764, 63219, 59630},
     7},
    /* Phi-3: user-defined tokens are split off even without parse_special;
     * its special tokens strip the whitespace after them (RSTRIP) */
    {"phi-3", S("x <|user|>  y"), false, {921, 529, 29989, 1792, 29989, 29958, 29871, 343}, 8},
    {"phi-3", S("x <|user|>  y"), true, {921, 29871, 32010, 343}, 4},
    {"phi-3", S("<|user|>\nHello<|end|>\n<|assistant|>"), true, {32010, 15043, 32007, 32001}, 4},
    /* mpt: the whitespace-run tokens are user-defined */
    {"mpt", S("a    b\n\n\n   c"), false, {66, 50274, 67, 2756, 50275, 68}, 6},
    {"mpt", S("<|endoftext|>x"), false, {29, 93, 423, 1171, 1156, 49651, 89}, 7},
    {"mpt", S("<|endoftext|>x"), true, {0, 89}, 2},
    {"llama-spm", S("<s>hi</s> <unk>"), false, {529, 29879, 29958, 2918, 829, 29879, 29958, 529, 2960, 29958}, 10},
    {"llama-spm", S("<s>hi</s> <unk>"), true, {1, 7251, 2, 259, 0}, 5},
    {"llama-spm", S("\xff\xc3( \xe2\x96\x81x"), false, {29871, 258, 198, 43, 229, 153, 132, 921}, 8},
    {"gpt-2",
     S("a\xff"
       "b\xc0\x80"
       "c"),
     false,
     {64, 4210, 65, 6353, 66},
     5},
    {"gpt-2", S("<|endoftext|> ok"), false, {27, 91, 437, 1659, 5239, 91, 29, 12876}, 8},
    {"gpt-2", S("<|endoftext|> ok"), true, {50256, 12876}, 2},
};

static void test_oracle_cases(void **state) {
    (void)state;
    require_shared();
    for (size_t k = 0; k < sizeof k_oracle / sizeof k_oracle[0]; k++) {
        const oracle_case *c = &k_oracle[k];
        tutti_vocab *v = load_vocab(c->vocab);
        int n;
        int32_t *ids = tok(v, c->text, c->len, false, c->parse_special, &n);
        if (n != c->n || memcmp(ids, c->ids, sizeof *ids * (size_t)n)) {
            print_message("case %zu (%s, parse_special=%d): got", k, c->vocab, c->parse_special);
            for (int i = 0; i < n; i++) print_message(" %d", ids[i]);
            print_message("\n");
            fail();
        }
        free(ids);
        tutti_vocab_free(v);
    }
}

/* ---- the real models ---- */

static const struct {
    const char *gguf, *ref;
} k_models[] = {
    {"stories260K.gguf", "stories260K"},
    {"TinyStories-656K-Q8_0.gguf", "TinyStories-656K-Q8_0"},
    {"BabyLlama-tok105/babyllama-tok105.gguf", "babyllama-tok105"},
    {"BabyLlama-tok361/babyllama-tok361.gguf", "babyllama-tok361"},
    {"aidreams260K/aidreams260K.gguf", "aidreams260K"},
    {"zh-poem/zh-poem-750K.gguf", "zh-poem-750K"},
};

/* Decodes the JSON string value after key (the escapes dumplogits writes). */
static size_t json_text(const char *js, const char *key, char *out, size_t cap) {
    const char *p = strstr(js, key);
    assert_non_null(p);
    p += strlen(key);
    size_t n = 0;
    while (*p && *p != '"' && n + 1 < cap) {
        if (*p == '\\') {
            p++;
            if (*p == 'n') out[n++] = '\n';
            else if (*p == 'u') {
                out[n++] = (char)strtol((char[]){p[1], p[2], p[3], p[4], 0}, NULL, 16);
                p += 4;
            } else out[n++] = *p;
            p++;
        } else {
            out[n++] = *p++;
        }
    }
    return n;
}

static void test_real_models(void **state) {
    (void)state;
    require_shared();
    int checked = 0;
    for (size_t k = 0; k < sizeof k_models / sizeof k_models[0]; k++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/%s", k_models[k].gguf);
        tutti_vocab *v = tutti_vocab_load(shared_path(rel));
        if (!v) fail_msg("%s: %s", rel, tutti_last_error());
        bool zh = strstr(k_models[k].ref, "zh-poem") != NULL;
        for (int p = 1; p <= (zh ? 1 : 4); p++) {
            char prel[64], jrel[256];
            snprintf(prel, sizeof prel, zh ? "ref/models/zh1.txt" : "ref/models/p%d.txt", p);
            snprintf(jrel, sizeof jrel, zh ? "ref/models/%s.zh1.jsonl" : "ref/models/%s.p%d.jsonl", k_models[k].ref, p);
            size_t tl;
            char *text = read_file(shared_path(prel), &tl);
            char *js = read_file(shared_path(jrel), NULL);
            assert_non_null(text);
            assert_non_null(js);
            /* make_model_refs.sh passes the prompt as "$(cat zh1.txt)", and
             * command substitution drops trailing newlines */
            while (zh && tl && text[tl - 1] == '\n') tl--;
            int32_t want[1024];
            int nw = 0;
            for (const char *q = js; (q = strstr(q, "\"token\":")); q += 8) want[nw++] = atoi(q + 8);
            int n;
            int32_t *ids = tok(v, text, tl, tutti_vocab_add_bos(v), false, &n);
            if (n != nw || memcmp(ids, want, sizeof *ids * (size_t)n))
                fail_msg("%s prompt %d: %d ids, llama.cpp has %d", k_models[k].ref, p, n, nw);
            /* the prompt reads back from llama.cpp's ids */
            int m;
            char *back = detok(v, want, nw, &m);
            assert_int_equal(m, (int)tl);
            assert_memory_equal(back, text, tl);
            free(back);
            /* the greedy continuation: llama.cpp's text is the concatenation
             * of token_to_piece(special = false) of its ids */
            const char *g = strstr(js, "\"greedy\":[");
            assert_non_null(g);
            int32_t gid[256];
            const int ng = json_ids(g, "greedy", gid, 256);
            assert_true(ng >= 0);
            char want_text[8192], got_text[8192];
            size_t wl = json_text(g, "\"text\":\"", want_text, sizeof want_text), gl = 0;
            for (int i = 0; i < ng; i++) {
                int32_t r = tutti_token_to_piece(v, gid[i], false, got_text + gl, (int32_t)(sizeof got_text - gl));
                assert_true(r >= 0);
                gl += (size_t)r;
            }
            assert_int_equal(gl, wl);
            assert_memory_equal(got_text, want_text, wl);
            checked++;
            free(ids);
            free(text);
            free(js);
        }
        tutti_vocab_free(v);
    }
    assert_int_equal(checked, 21);
}

/* ---- metadata facts and API conventions ---- */

static void test_vocab_facts(void **state) {
    (void)state;
    require_shared();
    tutti_vocab *v = load_vocab("llama3");
    assert_string_equal(tutti_vocab_type(v), "bpe");
    assert_string_equal(tutti_vocab_pre(v), "llama-bpe");
    assert_int_equal(tutti_vocab_n_tokens(v), 128256);
    assert_int_equal(tutti_vocab_bos(v), 128000); /* <|begin_of_text|> */
    assert_int_equal(tutti_vocab_eos(v), 128001); /* <|end_of_text|> */
    assert_true(tutti_vocab_add_bos(v));
    assert_true(tutti_vocab_is_eog(v, 128001));
    assert_true(tutti_vocab_is_eog(v, 128009)); /* <|eot_id|> */
    assert_false(tutti_vocab_is_eog(v, 128000));
    assert_true(tutti_vocab_is_control(v, 128000));
    assert_false(tutti_vocab_is_control(v, 9906));
    char buf[64];
    /* control tokens have no bytes unless rendered */
    assert_int_equal(tutti_token_to_piece(v, 128009, false, buf, sizeof buf), 0);
    assert_int_equal(tutti_token_to_piece(v, 128009, true, buf, sizeof buf), 10);
    assert_memory_equal(buf, "<|eot_id|>", 10);
    /* "Hello" is 9906, " Hello" (byte-level "ĠHello") 22691 */
    assert_int_equal(tutti_token_to_piece(v, 22691, false, buf, sizeof buf), 6);
    assert_memory_equal(buf, " Hello", 6);
    assert_int_equal(tutti_token_to_piece(v, 22691, false, buf, 3), -6);
    assert_int_equal(tutti_token_to_piece(v, -1, false, buf, sizeof buf), TUTTI_ERR_SIZE);
    assert_int_equal(tutti_token_to_piece(v, 128256, false, buf, sizeof buf), TUTTI_ERR_SIZE);
    size_t len;
    const char *t = tutti_vocab_token_text(v, 22691, &len);
    assert_int_equal(len, 7);
    assert_memory_equal(t, "\xc4\xa0Hello", 7);
    assert_int_equal(tutti_vocab_find(v, "\xc4\xa0Hello", 7), 22691);
    assert_int_equal(tutti_vocab_token_type(v, 128000), TUTTI_TOKEN_TYPE_CONTROL);
    tutti_vocab_free(v);

    v = load_vocab("llama-spm");
    assert_string_equal(tutti_vocab_type(v), "spm");
    assert_int_equal(tutti_vocab_bos(v), 1);
    assert_int_equal(tutti_vocab_eos(v), 2);
    assert_true(tutti_vocab_add_space_prefix(v));
    assert_int_equal(tutti_vocab_nl(v), 13); /* <0x0A> */
    t = tutti_vocab_token_piece(v, 13, &len);
    assert_int_equal(len, 1);
    assert_int_equal(t[0], '\n');
    assert_int_equal(tutti_vocab_token_type(v, 13), TUTTI_TOKEN_TYPE_BYTE);
    /* BOS and a text: the leading space the tokenizer added is not read back */
    int n, m;
    int32_t *ids = tok(v, "Hello world", 11, true, false, &n);
    assert_int_equal(ids[0], 1);
    char *back = detok(v, ids, n, &m);
    assert_int_equal(m, 11);
    assert_memory_equal(back, "Hello world", 11);
    free(ids), free(back);
    tutti_vocab_free(v);

    v = load_vocab("gpt-neox");
    assert_string_equal(tutti_vocab_pre(v), "default"); /* no tokenizer.ggml.pre */
    tutti_vocab_free(v);
    v = load_vocab("qwen3");
    assert_false(tutti_vocab_add_bos(v));
    assert_true(tutti_vocab_is_eog(v, 151645)); /* <|im_end|> */
    assert_true(tutti_vocab_is_eog(v, 151643)); /* <|endoftext|> */
    tutti_vocab_free(v);
}

static void test_api_conventions(void **state) {
    (void)state;
    require_shared();
    tutti_vocab *v = load_vocab("gpt-2");
    int32_t ids[4];
    /* "Hello world" is 2 ids; too small a buffer gives minus the count */
    assert_int_equal(tutti_tokenize(v, "Hello world", 11, false, false, ids, 1), -2);
    assert_int_equal(tutti_tokenize(v, "Hello world", 11, false, false, NULL, 0), -2);
    assert_int_equal(tutti_tokenize(v, "Hello world", 11, false, false, ids, 4), 2);
    assert_int_equal(ids[0], 15496);
    assert_int_equal(ids[1], 995);
    assert_int_equal(tutti_tokenize(v, "", 0, false, false, ids, 4), 0);
    assert_int_equal(tutti_tokenize(v, NULL, 0, false, false, ids, 4), 0);
    assert_int_equal(tutti_tokenize(v, NULL, 3, false, false, ids, 4), TUTTI_TOKENIZE_FAILED);
    assert_int_equal(tutti_tokenize(NULL, "a", 1, false, false, ids, 4), TUTTI_TOKENIZE_FAILED);
    assert_int_equal(tutti_tokenize(v, "a", 1, false, false, NULL, 4), TUTTI_TOKENIZE_FAILED);
    char buf[4];
    int32_t two[2] = {15496, 995};
    assert_int_equal(tutti_detokenize(v, two, 2, buf, sizeof buf), -11);
    assert_int_equal(tutti_detokenize(v, two, 0, buf, sizeof buf), 0);
    int32_t bad[1] = {50257};
    assert_int_equal(tutti_detokenize(v, bad, 1, buf, sizeof buf), TUTTI_ERR_SIZE);
    assert_non_null(strstr(tutti_last_error(), "out of range"));
    tutti_vocab_free(v);
    tutti_vocab_free(NULL);
    assert_null(tutti_vocab_load(shared_path("no/such/file.gguf")));
    assert_int_equal(tutti_vocab_n_tokens(NULL), 0);
    assert_false(tutti_vocab_is_eog(NULL, 0));
}

/* Throughput on ~1 MB of text (printed; the bound only catches a blow-up). */
static void test_speed(void **state) {
    (void)state;
    require_shared();
    size_t n1, n2;
    char *a = read_file(shared_path("eval/stories-dev.txt"), &n1);
    char *b = read_file(shared_path("ref/tokenize/tokenizer-tests.inp"), &n2);
    assert_non_null(a);
    assert_non_null(b);
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    while (n + n1 + n2 <= cap) {
        memcpy(text + n, a, n1);
        memcpy(text + n + n1, b, n2);
        n += n1 + n2;
    }
    const char *names[] = {"qwen3", "llama3", "llama-spm", "deepseek-llm"};
    for (int k = 0; k < 4; k++) {
        tutti_vocab *v = load_vocab(names[k]);
        clock_t t0 = clock();
        int32_t r = tutti_tokenize(v, text, n, false, false, NULL, 0);
        double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
        assert_true(r < 0 && r != TUTTI_TOKENIZE_FAILED);
        print_message("%-13s %zu bytes -> %d tokens in %.2f s CPU (%.2f MB/s)\n", names[k], n, -r, s,
                      (double)n / 1e6 / (s > 0 ? s : 1e-9));
        assert_true(s < 60.0);
        tutti_vocab_free(v);
    }
    free(a), free(b), free(text);
}

/* ---- malformed metadata: clear errors naming the field ---- */

typedef enum {
    BAD_NO_MODEL,
    BAD_MODEL_BERT,
    BAD_PRE,
    BAD_NO_MERGES,
    BAD_SCORES_SHORT,
    BAD_TYPE_FLOAT,
    BAD_BOS_RANGE,
    BAD_DUPLICATE,
    BAD_TOKENS_SCALAR,
    BAD_ADD_BOS_TYPE,
    GOOD_SPM,
} variant;

static gguf_file *build(variant x, void **mem) {
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    const char *toks[] = {"<unk>",
                          "<s>",
                          "</s>",
                          "\xe2\x96\x81"
                          "a",
                          "b",
                          "\xe2\x96\x81"
                          "ab",
                          x == BAD_DUPLICATE ? "b" : "c"};
    float scores[] = {0, 0, 0, -1, -2, -0.5f, -3};
    int32_t types[] = {2, 3, 3, 1, 1, 1, 1};
    bool bpe = x == BAD_PRE || x == BAD_NO_MERGES;
    if (x != BAD_NO_MODEL)
        assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.model",
                                             x == BAD_MODEL_BERT ? "bert"
                                             : bpe               ? "gpt2"
                                                                 : "llama"),
                         0);
    if (x == BAD_PRE) assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.pre", "no-such-pre"), 0);
    if (x == BAD_TOKENS_SCALAR) assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.tokens", "a"), 0);
    else assert_int_equal(gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 7), 0);
    assert_int_equal(
        gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, x == BAD_SCORES_SHORT ? 6 : 7), 0);
    if (x == BAD_TYPE_FLOAT)
        assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_FLOAT32, scores, 7), 0);
    else assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 7), 0);
    if (x == BAD_BOS_RANGE) assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 7), 0);
    if (x == BAD_ADD_BOS_TYPE) assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.add_bos_token", 1), 0);
    size_t size;
    assert_int_equal(gguf_writer_write_buffer(w, mem, &size), 0);
    gguf_writer_free(w);
    gguf_file *f = gguf_open_buffer(*mem, size, "synthetic.gguf");
    assert_non_null(f);
    return f;
}

static void test_malformed_metadata(void **state) {
    (void)state;
    static const struct {
        variant x;
        const char *needle;
    } cases[] = {
        {BAD_NO_MODEL, "tokenizer.ggml.model"},
        {BAD_MODEL_BERT, "'bert'"},
        {BAD_PRE, "no-such-pre"},
        {BAD_NO_MERGES, "tokenizer.ggml.merges"},
        {BAD_SCORES_SHORT, "tokenizer.ggml.scores"},
        {BAD_TYPE_FLOAT, "tokenizer.ggml.token_type"},
        {BAD_BOS_RANGE, "tokenizer.ggml.bos_token_id"},
        {BAD_DUPLICATE, "duplicate"},
        {BAD_TOKENS_SCALAR, "tokenizer.ggml.tokens"},
        {BAD_ADD_BOS_TYPE, "tokenizer.ggml.add_bos_token"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        void *mem = NULL;
        gguf_file *f = build(cases[k].x, &mem);
        tutti_vocab *v = tutti_vocab_from_gguf(f);
        if (v) fail_msg("case %zu loaded", k);
        if (!strstr(tutti_last_error(), cases[k].needle))
            fail_msg("case %zu: message '%s' does not mention '%s'", k, tutti_last_error(), cases[k].needle);
        gguf_close(f);
        free(mem);
    }
    assert_null(tutti_vocab_from_gguf(NULL));
}

/* A hand-made SPM vocabulary, checked against the algorithm's definition:
 * "ab" -> escaped "▁ab"; the pairs "▁a" (-1) and "▁ab" (-0.5) exist, so "▁a"
 * then "▁ab" are merged: one token, 5.  "ba": "▁" has no token of its own
 * and "▁b" none, so "▁" falls back to its three bytes, which have no byte
 * tokens either: <unk> each; then "b" (4), "a" -> <unk>. */
static void test_synthetic_spm(void **state) {
    (void)state;
    void *mem = NULL;
    gguf_file *f = build(GOOD_SPM, &mem);
    tutti_vocab *v = tutti_vocab_from_gguf(f);
    gguf_close(f); /* the vocab copies what it needs */
    free(mem);
    assert_non_null(v);
    int n;
    int32_t *ids = tok(v, "ab", 2, false, false, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 5);
    free(ids);
    ids = tok(v, "ba", 2, true, false, &n);
    int32_t want[] = {1, 0, 0, 0, 4, 0};
    assert_int_equal(n, 6);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    /* <s> is control: only with parse_special */
    ids = tok(v, "<s>", 3, false, true, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    tutti_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        shared_unit_test(test_reference_vocabs),
        shared_unit_test(test_unsupported_vocab),
        shared_unit_test(test_round_trip),
        shared_unit_test(test_lossy_cases),
        shared_unit_test(test_oracle_cases),
        shared_unit_test(test_real_models),
        shared_unit_test(test_vocab_facts),
        shared_unit_test(test_api_conventions),
        cmocka_unit_test(test_malformed_metadata),
        cmocka_unit_test(test_synthetic_spm),
        shared_unit_test(test_speed),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
