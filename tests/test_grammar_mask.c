/* Token masks, fast paths against brute force: at every byte position of
 * sample texts of many grammars (counted repetitions, character classes,
 * unicode, nesting, JSON schemas, classes that overlap), the mask of
 * tutti_grammar_matcher_mask must equal the answer of feeding each token's
 * bytes one by one to a second matcher that has never computed a mask.
 * Vocabularies: qwen3's (151,669 real tokens, default thresholds) and a
 * synthetic one of random pieces (quotes, escapes, digits, multi-byte and
 * cut UTF-8) with the run path forced on every state that has a class.
 * The test also checks that the run path was taken (a test that only ever
 * met the trie scan would not check it). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grammar/constrain.h"
#include "grammar/grammar.h"
#include "test_common.h"
#include "tutti.h"

typedef struct gtext {
    const char *gbnf;   /* GBNF, or NULL: schema */
    const char *schema; /* JSON schema (when gbnf is NULL) */
    const char *text;   /* accepted by the grammar */
} gtext;

static const gtext k_texts[] = {
    {"root ::= \"\\\"\" [a-z]{2,5} \"\\\"\" | [0-9]{3}", NULL, "\"abcd\""},
    {"root ::= \"\\\"\" [^\"\\\\]{0,9} \"\\\"\" (\",\" root)?", NULL, "\"a b\xc3\xa9\",\"12345678\",\"\""},
    {"root ::= [^\\x00-\\x7F]{1,4} [a-z\\u00e9]* \"!\"", NULL,
     "\xe4\xb8\xad\xc3\xa9\xf0\x9f\x98\x80"
     "abc\xc3\xa9!"},
    {"root ::= ([a-z]+ | \"ab\" [0-9]) (\",\" root)?", NULL, "ab1,abc,ab2,x"},
    {"root ::= [a-c]{0,3} [b-d]{0,3} \"x\" [ \\t]{0,6} \"y\"", NULL, "abbcdx   \ty"},
    {"root ::= (\"{\" root \"}\" | [a-z ]{0,4}) (\";\" root)?", NULL, "{{ab;{c d}};x}"},
    /* a run that ends where a token's unfinished last character may still
     * belong to the class that follows */
    {"root ::= [\\u4e00-\\u4e1f]{0,2} [\\u4e20-\\u4e2f] \"!\"", NULL, "\xe4\xb8\x80\xe4\xb8\x80\xe4\xb8\xa0!"},
    {"root ::= \"k\" [0-9a-fA-F]{8} \"-\" [0-9]{1,3}", NULL, "k0123abCD-42"},
    /* a superset class ([a-z0-9]) that splits the run after its first
     * character: the class gets its own table after all */
    {"root ::= [a-z]+ \"!\" [a-z0-9]*", NULL, "abc!x9"},
    /* a byte outside the class, then a counted run of it: tokens whose
     * rest is pure in the class are allowed up to the count only (the
     * pure-suffix bitsets apply where the run loops, as after "!" above) */
    {"root ::= [x-z]+ \"-\" [x-z]{0,2} \";\" [x-z ]*", NULL, "xyz-zy;x z"},
    {NULL,
     "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":12},"
     "\"t\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4},\"maxItems\":3},"
     "\"d\":{\"type\":\"string\",\"format\":\"date-time\"},\"n\":{\"type\":\"integer\",\"minimum\":-40,\"maximum\":50}},"
     "\"required\":[\"s\",\"t\",\"d\",\"n\"],\"additionalProperties\":{\"type\":\"string\"}}",
     "{\"s\": \"h\\u00e9llo \\\"w\\\"\", \"t\": [\"ab\", \"cde\"], \"d\": \"2024-02-29T23:59:59Z\", \"n\": -17, "
     "\"sx\": \"z\"}"},
    /* a wide object with other names: the other-name keys' classes
     * ("string character minus the letters that continue a declared
     * name") are served from the string class's table */
    {NULL,
     "{\"type\":\"object\",\"properties\":{\"alpha\":{\"type\":\"integer\"},\"alps\":{\"type\":\"string\"},"
     "\"beta\":{\"type\":\"string\"},\"delta\":{\"type\":\"string\"},\"dog\":{\"type\":\"string\"},"
     "\"mode\":{\"type\":\"string\"},\"name\":{\"type\":\"string\"},\"note\":{\"type\":\"string\"},"
     "\"order\":{\"type\":\"string\"},\"x\":{\"type\":\"integer\"},\"\u00e9t\u00e9\":{\"type\":\"string\"},\"zeta\":{\"type\":\"string\"}},"
     "\"additionalProperties\":{\"type\":\"string\"}}",
     "{\"alpha\": 1, \"alx\": \"a\", \"dx\": \"\", \"do\": \"q\", \"nam\": \"r\", \"\u00e9x\": \"s\", "
     "\"b\u00e9ta\": \"t\", \"ordered\": \"u\", \"z\": \"v\", \"mode\": \"w\", \"x y\": \"z\"}"},
    /* ... with names whose first letters are rare in the synthetic
     * vocabulary (only "x" is one of its atoms) */
    {NULL,
     "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},\"quux\":{\"type\":\"string\"},"
     "\"what\":{\"type\":\"string\"}},\"additionalProperties\":{\"type\":\"string\"}}",
     "{\"x\": 3, \"xa\": \"b\", \"q\": \"\", \"a\": \"c\", \"xyz\":\"d\"}"},
    {NULL, NULL, "{\"a\": [1, -2.5e3, true, null, {\"b\": \"\\u4e2d \\\\ \\\" \xe4\xb8\xad\"}], \"c\": \"\"}"},
};

static int64_t s_n_pure; /* group results taken from a gpure bitset, over every check_vocab */

static tutti_grammar *make_grammar(const gtext *t) {
    if (t->gbnf) return tutti_grammar_parse(t->gbnf, strlen(t->gbnf));
    if (t->schema) return tutti_grammar_from_json_schema(t->schema, strlen(t->schema));
    return tutti_grammar_json();
}

/* Every position of every text: fast mask == brute force.  pieces[i] (len
 * lens[i]) and eog[i] describe gv's tokens. */
static void check_vocab(const tutti_grammar_vocab *gv, int32_t V, const char *const *pieces, const int32_t *lens,
                        const bool *eog, int64_t *n_run, int64_t *n_sub, int stride) {
    float *row = malloc(sizeof(float) * (size_t)V);
    uint32_t *bm = malloc(sizeof(uint32_t) * (size_t)((V + 31) / 32));
    assert_non_null(row);
    assert_non_null(bm);
    for (size_t c = 0; c < sizeof k_texts / sizeof k_texts[0]; c++) {
        tutti_grammar *g = make_grammar(&k_texts[c]);
        if (!g) fail_msg("case %zu: %s", c, tutti_last_error());
        tutti_grammar_matcher *m = tutti_grammar_matcher_new(g), *chk = tutti_grammar_matcher_new(g);
        assert_non_null(m);
        assert_non_null(chk);
        const char *text = k_texts[c].text;
        size_t n = strlen(text);
        for (size_t pos = 0; pos <= n; pos++) {
            if (pos % (size_t)stride && pos != n) {
                if (tutti_grammar_matcher_accept(m, text + pos, 1) < 0)
                    fail_msg("case %zu: the text is rejected at byte %zu: %s", c, pos, tutti_last_error());
                continue;
            }
            for (int32_t i = 0; i < V; i++) row[i] = (float)(i % 1000);
            /* the bitmask first, so that it computes the state's mask and
             * the row below (checked by brute force) comes from its cache;
             * then the two must say the same of every token */
            for (int32_t i = 0; i < (V + 31) / 32; i++) bm[i] = 0xa5a5a5a5u;
            int32_t nb = tutti_grammar_matcher_bitmask(m, gv, bm);
            int32_t na = tutti_grammar_matcher_mask(m, gv, row);
            assert_true(na >= 0);
            assert_int_equal(nb, na);
            for (int32_t i = 0; i < V; i++)
                if ((bm[i >> 5] >> (i & 31) & 1) != (row[i] != -INFINITY))
                    fail_msg("case %zu at byte %zu, token %d: bitmask %u, logits mask %d", c, pos, i,
                             bm[i >> 5] >> (i & 31) & 1, row[i] != -INFINITY);
            if (V & 31) assert_int_equal(bm[V >> 5] >> (V & 31), 0);
            tutti_grammar_matcher_reset(chk);
            assert_int_equal(tutti_grammar_matcher_accept(chk, text, pos), 0);
            int32_t here = tutti_grammar_matcher_state(chk), count = 0;
            bool complete = tutti_grammar_matcher_is_complete(chk);
            for (int32_t i = 0; i < V; i++) {
                bool want;
                if (eog[i]) want = complete;
                else if (lens[i] <= 0) want = false;
                else {
                    tutti_grammar_matcher_set_state(chk, here);
                    want = tutti_grammar_matcher_accept(chk, pieces[i], (size_t)lens[i]) == 0;
                }
                count += want;
                if (want != (row[i] != -INFINITY))
                    fail_msg("case %zu at byte %zu, token %d (%d bytes): mask %d, brute force %d", c, pos, i, lens[i],
                             row[i] != -INFINITY, want);
                if (want) assert_true(row[i] == (float)(i % 1000));
            }
            assert_int_equal(na, count);
            if (pos < n && tutti_grammar_matcher_accept(m, text + pos, 1) < 0)
                fail_msg("case %zu: the text is rejected at byte %zu: %s", c, pos, tutti_last_error());
        }
        assert_true(tutti_grammar_matcher_is_complete(m));
        *n_run += m->n_run;
        *n_sub += m->n_sub;
        s_n_pure += m->n_pure;
        tutti_grammar_matcher_free(m);
        tutti_grammar_matcher_free(chk);
        tutti_grammar_free(g);
    }
    free(row);
    free(bm);
}

static void test_qwen3_vocab(void **state) {
    (void)state;
    require_shared();
    tutti_vocab *v = tutti_vocab_load(shared_path("models/vocab/ggml-vocab-qwen3.gguf"));
    if (!v) fail_msg("%s", tutti_last_error());
    int32_t V = tutti_vocab_n_tokens(v);
    char **pieces = calloc((size_t)V, sizeof(char *));
    int32_t *lens = calloc((size_t)V, sizeof(int32_t));
    bool *eog = calloc((size_t)V, sizeof(bool));
    assert_non_null(pieces);
    for (int32_t i = 0; i < V; i++) {
        char buf[1024];
        int32_t k = tutti_token_to_piece(v, i, false, buf, sizeof buf);
        assert_true(k >= 0);
        pieces[i] = malloc((size_t)k + 1);
        memcpy(pieces[i], buf, (size_t)k);
        lens[i] = k;
        eog[i] = tutti_vocab_is_eog(v, i);
    }
    tutti_grammar_vocab *gv = tutti_grammar_vocab_new(v);
    assert_non_null(gv);
    int64_t n_run = 0, n_sub = 0;
    /* every 2nd position: 151k brute-force checks each */
    check_vocab(gv, V, (const char *const *)pieces, lens, eog, &n_run, &n_sub, 2);
    assert_true(n_run > 10);
    assert_true(n_sub > 0);
    for (int32_t i = 0; i < V; i++) free(pieces[i]);
    free(pieces), free(lens), free(eog);
    tutti_grammar_vocab_free(gv);
    tutti_vocab_free(v);
}

enum { SYN_V = 3000 };
static char syn_buf[SYN_V][64];
static const char *syn_pieces[SYN_V];
static int32_t syn_lens[SYN_V];
static bool syn_eog[SYN_V];

/* Random pieces over an alphabet that has every kind of byte the run path
 * treats apart (into syn_*). */
static void make_synthetic(void) {
    static const char *const atoms[] = {"a",
                                        "b",
                                        "c",
                                        "d",
                                        "x",
                                        "y",
                                        "z",
                                        "k",
                                        "0",
                                        "1",
                                        "2",
                                        "9",
                                        "A",
                                        "F",
                                        " ",
                                        "\t",
                                        "\n",
                                        "\"",
                                        "\\",
                                        ",",
                                        ";",
                                        "{",
                                        "}",
                                        "[",
                                        "]",
                                        ":",
                                        "-",
                                        "T",
                                        "!",
                                        "u",
                                        "e",
                                        "\xc3\xa9",
                                        "\xe4\xb8\xad",
                                        "\xf0\x9f\x98\x80",
                                        "\xc3",
                                        "\xe4",
                                        "\xe4\xb8",
                                        "\xa9",
                                        "\x80",
                                        "\xff"};
    const int n_atoms = (int)(sizeof atoms / sizeof atoms[0]);
    enum { V = SYN_V };
    char(*buf)[64] = syn_buf;
    const char **pieces = syn_pieces;
    int32_t *lens = syn_lens;
    bool *eog = syn_eog;
    memset(syn_eog, 0, sizeof syn_eog);
    uint32_t rng = 12345;
    for (int32_t i = 0; i < V; i++) {
        int len = 0, parts = 1 + (int)((rng = rng * 1664525u + 1013904223u) >> 28) % 8;
        /* runs of one atom (long class runs) for a third of the tokens */
        int same = ((rng >> 8) % 3) == 0;
        int a = (int)((rng >> 12) % (uint32_t)n_atoms);
        for (int p = 0; p < parts; p++) {
            if (!same) a = (int)((rng = rng * 1664525u + 1013904223u) >> 16) % n_atoms;
            size_t l = strlen(atoms[a]);
            if (len + (int)l >= 60) break;
            memcpy(buf[i] + len, atoms[a], l);
            len += (int)l;
        }
        pieces[i] = buf[i], lens[i] = len;
    }
    /* one-two characters of U+4E00.. then an unfinished one */
    static const char *const cut[] = {"\xe4\xb8\x80\xe4\xb8\x80\xe4\xb8", "\xe4\xb8\x80\xe4\xb8", "\xe4\xb8",
                                      "\xe4\xb8\x80\xe4\xb8\x80\xe4", "\xe4\xb8\x80"};
    for (int32_t i = 0; i < 5; i++) pieces[20 + i] = cut[i], lens[20 + i] = (int32_t)strlen(cut[i]);
    /* a declared name ("x", an integer) read as an other name (strings) */
    static const char *const named[] = {"x\":\"", "x\": \"", "x\":3"};
    for (int32_t i = 0; i < 3; i++) pieces[25 + i] = named[i], lens[25 + i] = (int32_t)strlen(named[i]);
    /* a class run, a byte outside it, then a pure rest longer or shorter
     * than the counted run after it ("[x-z]+ - [x-z]{0,2}") */
    static const char *const rest[] = {"-xyz", "y-zyx", "-xy", "z-x;y", "-z"};
    for (int32_t i = 0; i < 5; i++) pieces[28 + i] = rest[i], lens[28 + i] = (int32_t)strlen(rest[i]);
    lens[7] = 0;    /* a control token without bytes */
    eog[11] = true; /* end of generation */
}

static void test_synthetic_vocab(void **state) {
    (void)state;
    enum { V = SYN_V };
    make_synthetic();
    const char **pieces = syn_pieces;
    int32_t *lens = syn_lens;
    bool *eog = syn_eog;
    int32_t saved = gm_run_min_nodes, saved_big = gv_big_group, saved_bits = gv_pure_bits;
    gm_run_min_nodes = 0; /* the run path wherever it applies */
    gv_big_group = 2;     /* the pure suffixes of every group apart, */
    gv_pure_bits = 4;     /* as a list up to 3, else a bitset */
    tutti_grammar_vocab *gv = tutti_grammar_vocab_from_pieces(V, pieces, lens, eog);
    assert_non_null(gv);
    int64_t n_run = 0, n_sub = 0;
    s_n_pure = 0;
    check_vocab(gv, V, pieces, lens, eog, &n_run, &n_sub, 1);
    assert_true(n_run > 50);
    assert_true(n_sub > 5);
    printf("synthetic: %lld run masks, %lld from a superset, %lld pure groups\n", (long long)n_run, (long long)n_sub,
           (long long)s_n_pure);
    assert_true(s_n_pure > 5);
    gm_run_min_nodes = saved, gv_big_group = saved_big, gv_pure_bits = saved_bits;
    tutti_grammar_vocab_free(gv);
}

/* The trie and class tables are the vocabulary's: every constrained
 * generation over it after the first shares them (freed with it; the leak
 * check of the sanitizer build sees that). */
static void test_shared_vocab(void **state) {
    (void)state;
    require_shared();
    tutti_vocab *v = tutti_vocab_load(shared_path("models/vocab/ggml-vocab-qwen3.gguf"));
    if (!v) fail_msg("%s", tutti_last_error());
    tutti_grammar *g = tutti_grammar_json();
    gr_constraint a, b;
    assert_int_equal(gr_constraint_init(&a, g, v), 0);
    assert_int_equal(gr_constraint_init(&b, g, v), 0);
    assert_non_null(a.v);
    assert_ptr_equal(a.v, b.v);
    int32_t n_runs = a.v->n_runs;
    assert_true(n_runs > 0); /* the string class's table was built at init */
    gr_constraint_free(&a);
    assert_int_equal(gr_constraint_init(&a, g, v), 0);
    assert_int_equal(a.v->n_runs, n_runs); /* nothing rebuilt */
    gr_constraint_free(&a);
    gr_constraint_free(&b);
    tutti_grammar_free(g);
    tutti_vocab_free(v);
}

/* More distinct large classes than a vocabulary keeps tables for: the
 * rest get the trie scan, masks stay exact, set-up stays bounded. */
static void test_table_cap(void **state) {
    (void)state;
    make_synthetic();
    char gbnf[8192] = "root ::= \"a\" (";
    /* no class holds another (one that does is served from the larger's
     * table, see run_mask.c) */
    for (int i = 0; i < GV_MAX_RUNS + 8; i++)
        snprintf(gbnf + strlen(gbnf), sizeof gbnf - strlen(gbnf), "%s[\\u%04x-\\u%04x]+", i ? " | " : "", 0x21 + i,
                 0x121 + i);
    strcat(gbnf, ")");
    tutti_grammar *g = tutti_grammar_parse(gbnf, strlen(gbnf));
    if (!g) fail_msg("%s", tutti_last_error());
    int32_t saved = gm_run_min_nodes;
    gm_run_min_nodes = 0;
    tutti_grammar_vocab *gv = tutti_grammar_vocab_from_pieces(SYN_V, syn_pieces, syn_lens, syn_eog);
    assert_non_null(gv);
    assert_int_equal(tutti_grammar_vocab_prepare(gv, g), 0);
    assert_int_equal(gv->n_runs, GV_MAX_RUNS);
    tutti_grammar_matcher *m = tutti_grammar_matcher_new(g), *chk = tutti_grammar_matcher_new(g);
    const char *text = "a!!#$";
    float row[SYN_V];
    for (size_t pos = 0; pos <= strlen(text); pos++) {
        for (int32_t i = 0; i < SYN_V; i++) row[i] = 1;
        assert_true(tutti_grammar_matcher_mask(m, gv, row) >= 0);
        for (int32_t i = 0; i < SYN_V; i++) {
            tutti_grammar_matcher_reset(chk);
            assert_int_equal(tutti_grammar_matcher_accept(chk, text, pos), 0);
            bool want = syn_eog[i] ? tutti_grammar_matcher_is_complete(chk)
                                   : syn_lens[i] > 0 &&
                                         tutti_grammar_matcher_accept(chk, syn_pieces[i], (size_t)syn_lens[i]) == 0;
            if (want != (row[i] != -INFINITY))
                fail_msg("at byte %zu token %d: mask %d, brute force %d", pos, i, !want, want);
        }
        if (pos < strlen(text)) assert_int_equal(tutti_grammar_matcher_accept(m, text + pos, 1), 0);
    }
    gm_run_min_nodes = saved;
    tutti_grammar_matcher_free(m);
    tutti_grammar_matcher_free(chk);
    tutti_grammar_vocab_free(gv);
    tutti_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_vocab),
        shared_unit_test(test_qwen3_vocab),
        shared_unit_test(test_shared_vocab),
        cmocka_unit_test(test_table_cap),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
