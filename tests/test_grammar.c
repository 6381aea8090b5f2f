/* Grammar layer: GBNF parsing and errors, the byte matcher on a table of
 * grammars with accepted / rejected strings (the expectations are the
 * languages' definitions, written by hand), token masks against a
 * brute-force per-token check, JSON schema conversion errors.
 * Generation under grammars: test_grammar_gen.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tutti.h"

static tutti_grammar *parse(const char *g) {
    tutti_grammar *gr = tutti_grammar_parse(g, strlen(g));
    if (!gr) fprintf(stderr, "parse failed: %s\n%s\n", tutti_last_error(), g);
    return gr;
}

/* accepted: the whole string is a sentence */
static bool full_match(tutti_grammar *g, const char *s, size_t n) {
    tutti_grammar_matcher *m = tutti_grammar_matcher_new(g);
    assert_non_null(m);
    bool ok = tutti_grammar_matcher_accept(m, s, n) == 0 && tutti_grammar_matcher_is_complete(m);
    tutti_grammar_matcher_free(m);
    return ok;
}

typedef struct gcase {
    const char *name, *gbnf;
    const char *accept[12];
    const char *reject[12];
} gcase;

static const gcase k_cases[] = {
    {"literal", "root ::= \"yes\" | \"no\"", {"yes", "no"}, {"", "y", "yess", "noo", "Yes"}},
    {"arithmetic",
     "root ::= expr\n"
     "expr ::= term ((\"+\" | \"-\") term)*\n"
     "term ::= factor ((\"*\" | \"/\") factor)*\n"
     "factor ::= [0-9]+ | \"(\" expr \")\"\n",
     {"1", "1+2", "(1+2)*3", "((4))", "10/2-3*(7+8)"},
     {"", "+", "1+", "(1", "1)", "()", "1++2", "a"}},
    {"list",
     "root ::= \"[\" (item (\", \" item)*)? \"]\"\nitem ::= [a-z]+",
     {"[]", "[a]", "[ab, c, def]"},
     {"[", "[a,b]", "[a, ]", "[A]", "[a]]"}},
    {"nested brackets",
     "root ::= b*\nb ::= \"(\" b* \")\" | \"[\" b* \"]\"",
     {"", "()", "[]", "([])[]", "(((())))"},
     {"(", ")", "(]", "([)]", "(()"}},
    {"char classes",
     "root ::= [a-cx-z] [^a-z] [\\x41-\\x43] [\\-\\]] .",
     {"a1A-!", "zZC]z", "b B-\xc3\xa9"},
     {"d1A-!", "aaA-!", "a1D-!", "a1A+!", "a1A-"}},
    {"repetition bounds",
     "root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,} \"d\"{0,1} \"e\"{,2}",
     {"aabbc", "aaabbccccd", "aabbcdee", "aabbce"},
     {"abbc", "aaaabbc", "aabc", "aabbbc", "aabb", "aabbcdd", "aabbceee"}},
    {"unicode classes",
     "root ::= [\\u00e0-\\u00ff]+ [\\u4e00-\\u9fff] [^\\x00-\\x7f] \"\\U0001F600\"",
     {"\xc3\xa0\xc3\xbf\xe4\xb8\x80\xc3\xa9\xf0\x9f\x98\x80", "\xc3\xa9\xe9\xbf\xbf\xf0\x9f\x98\x81\xf0\x9f\x98\x80"},
     {"a\xe4\xb8\x80\xc3\xa9\xf0\x9f\x98\x80", "\xc3\xa0\xe3\x80\x80\xc3\xa9\xf0\x9f\x98\x80",
      "\xc3\xa0\xe4\xb8\x80"
      "a\xf0\x9f\x98\x80",
      "\xc3\xa0\xe4\xb8\x80\xc3\xa9\xf0\x9f\x98\x81",
      /* overlong and surrogate encodings are not characters */
      "\xc3\xa0\xe4\xb8\x80\xc0\xa9\xf0\x9f\x98\x80", "\xc3\xa0\xe4\xb8\x80\xed\xa0\x80\xf0\x9f\x98\x80"}},
    {"any char", "root ::= \".\" . \".\"", {".a.", ".\xe2\x82\xac.", ". ."}, {"..", ".ab.", ".\xe2\x82.", ".\xff."}},
    {"escapes",
     "root ::= \"\\x41\\u00e9\\t\\n\\r\\\\\\\"\\[\\]\"",
     {"A\xc3\xa9\t\n\r\\\"[]"},
     {"A\xc3\xa9\t\n\r\\\"[", ""}},
    {"comments and layout",
     "# a comment\nroot ::= a # trailing\n  | b\na ::= \"x\" (\n  \"y\" # inside a group\n  | \"z\"\n)\nb ::= \"w\"\n",
     {"xy", "xz", "w"},
     {"x", "wy"}},
    {"json (ready grammar)",
     NULL,
     {"{}", "[1, 2.5, -3e10, true, false, null]", "{\"a\": {\"b\": [\"c\\n\", \"\\u00e9\"]}}", "\"x\"", "0",
      " {\"k\" : 1}"},
     {"{", "{'a': 1}", "[1,]", "01", "\"\\x\"", "{\"a\" 1}", "\"a\nb\"", "nul"}},
    {"empty alternative", "root ::= \"a\" x\nx ::= \"b\" | ", {"a", "ab"}, {"", "abb"}},
    /* a user's rule may be called as a generated one would be ("root-1") */
    {"rule named like a group",
     "root ::= (\"a\") root-1 (\"c\")\nroot-1 ::= \"b\"\nroot-2 ::= \"d\"",
     {"abc"},
     {"ac", "adc", "a"}},
};

static void test_table(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        const gcase *c = &k_cases[k];
        tutti_grammar *g = c->gbnf ? parse(c->gbnf) : tutti_grammar_json();
        if (!g) fail_msg("case %s: %s", c->name, tutti_last_error());
        for (int i = 0; i < 12 && c->accept[i]; i++)
            if (!full_match(g, c->accept[i], strlen(c->accept[i])))
                fail_msg("case %s: \"%s\" should be accepted", c->name, c->accept[i]);
        for (int i = 0; i < 12 && c->reject[i]; i++)
            if (full_match(g, c->reject[i], strlen(c->reject[i])))
                fail_msg("case %s: \"%s\" should be rejected", c->name, c->reject[i]);
        tutti_grammar_free(g);
    }
}

/* Prefix semantics: accept() refuses the first byte no sentence can
 * continue with; allowed_bytes agrees with accept byte by byte. */
static void test_prefixes_and_bytes(void **state) {
    (void)state;
    tutti_grammar *g = parse("root ::= \"ab\" [0-9]* \"\\u00e9\"");
    tutti_grammar_matcher *m = tutti_grammar_matcher_new(g);
    assert_int_equal(tutti_grammar_matcher_accept(m, "ab12", 4), 0);
    assert_false(tutti_grammar_matcher_is_complete(m));
    int32_t s = tutti_grammar_matcher_state(m);
    assert_int_equal(tutti_grammar_matcher_accept(m, "x", 1), TUTTI_ERR);
    assert_int_equal(tutti_grammar_matcher_state(m), s); /* unchanged after a rejection */
    bool al[257];
    assert_int_equal(tutti_grammar_matcher_allowed_bytes(m, al), 0);
    for (int b = 0; b < 256; b++) assert_int_equal(al[b], (b >= '0' && b <= '9') || b == 0xC3);
    assert_false(al[256]);
    assert_int_equal(tutti_grammar_matcher_accept(m, "\xc3", 1), 0);
    assert_int_equal(tutti_grammar_matcher_allowed_bytes(m, al), 0);
    for (int b = 0; b < 256; b++) assert_int_equal(al[b], b == 0xA9);
    assert_int_equal(tutti_grammar_matcher_accept(m, "\xa9", 1), 0);
    assert_true(tutti_grammar_matcher_is_complete(m));
    assert_false(tutti_grammar_matcher_can_continue(m));
    assert_int_equal(tutti_grammar_matcher_allowed_bytes(m, al), 0);
    assert_true(al[256]);
    tutti_grammar_matcher_reset(m);
    assert_int_equal(tutti_grammar_matcher_accept_prefix(m, "ab9z", 4), 3);
    tutti_grammar_matcher_free(m);
    tutti_grammar_free(g);
}

typedef struct ecase {
    const char *gbnf, *msg;
} ecase;

static void test_errors(void **state) {
    (void)state;
    static const ecase k[] = {
        {"root ::= \"a\" foo", "line 1, column 14: undefined rule 'foo'"},
        {"root ::= \"abc", "line 1, column 10: unterminated literal"},
        {"a ::= \"x\"", "no 'root' rule"},
        {"root ::= [a-", "line 1, column 10: unterminated character class"},
        {"root ::= [z-a]", "line 1, column 11: character range with its end before its start"},
        {"root ::= \"a\"\n  x ::= y", "line 2, column 9: undefined rule 'y'"},
        {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
        {"root ::= e\ne ::= x e \"+\" | \"1\"\nx ::= \"\" | \"-\"", "rule 'e' is left-recursive"},
        {"root ::= \"\\q\"", "line 1, column 11: unknown escape"},
        {"root ::= ( \"a\" ", "line 1, column 10: unclosed '('"},
        {"root ::= \"a\" )", "line 1, column 14: unmatched ')'"},
        {"root ::= * \"a\"", "line 1, column 10: repetition operator without a preceding symbol"},
        {"root ::= \"a\"{3,2}", "line 1, column 13: repetition {m,n} with n < m"},
        {"root ::= \"a\"{20000}", "line 1, column 14: repetition bound above 10000"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
        {"root ::= [^\\x00-\\U0010FFFF]", "'root' admits no string"},
        {"root ::= x\nx ::= \"a\" x", "'root' admits no string"},
        {"root ::= \"a\" \xff", "line 1, column 14: unexpected character"},
        {"root ::= \"\\xZZ\"", "line 1, column 13: expected a hex digit"},
        {"root  \"a\"", "line 1, column 7: expected '::='"},
        /* what a group or repetition causes: the user's rule and where (issue 21) */
        {"root ::= (\"a\"?)*", "line 1, column 16: in rule 'root', the repeated part can match the empty string"},
        {"root ::= \"x\" item\nitem ::= (\"b\" | \"\")+ \"c\"", "line 2, column 20: in rule 'item'"},
        {"root ::= a\na ::= (b \"x\")\nb ::= a | \"y\"", "rule 'a' is left-recursive (a -> b -> a)"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        tutti_grammar *g = tutti_grammar_parse(k[i].gbnf, strlen(k[i].gbnf));
        if (g) fail_msg("grammar should be refused: %s", k[i].gbnf);
        if (!strstr(tutti_last_error(), k[i].msg))
            fail_msg("grammar %s: message \"%s\" lacks \"%s\"", k[i].gbnf, tutti_last_error(), k[i].msg);
        /* never a generated rule's name ("root-4") */
        const char *dash = strstr(tutti_last_error(), "-");
        if (dash && dash[1] >= '0' && dash[1] <= '9')
            fail_msg("grammar %s: message \"%s\" names a generated rule", k[i].gbnf, tutti_last_error());
    }
}

/* Token masks equal the brute-force answer: each token's bytes fed to a
 * fresh matcher copy of the state. */
static void test_token_mask_bruteforce(void **state) {
    (void)state;
    static const char *const pieces[] = {"{",    "}",    "\"",       "\"a",    "a\"",  ":",  " ",    ", ",
                                         "1",    "12",   "1.5",      "-",      "true", "tr", "ue",   "null",
                                         "\xc3", "\xa9", "\xc3\xa9", "\"\xc3", "",     "[",  "]",    "[]",
                                         "{\"",  "\":",  "\\n",      "\\",     "x",    "{}", "<eos>"};
    int32_t V = (int32_t)(sizeof pieces / sizeof pieces[0]);
    int32_t lens[64];
    bool eog[64] = {0};
    for (int32_t i = 0; i < V; i++) lens[i] = (int32_t)strlen(pieces[i]);
    eog[V - 1] = true;
    tutti_grammar_vocab *gv = tutti_grammar_vocab_from_pieces(V, pieces, lens, eog);
    assert_non_null(gv);
    tutti_grammar *g = tutti_grammar_json();
    tutti_grammar_matcher *m = tutti_grammar_matcher_new(g), *chk = tutti_grammar_matcher_new(g);
    const char *text = "{\"a\xc3\xa9\": [1.5, -12, true, null, {}], \"\\n\": \"x\"}";
    size_t n = strlen(text);
    for (size_t pos = 0; pos <= n; pos++) {
        float logits[64];
        for (int32_t i = 0; i < V; i++) logits[i] = (float)i;
        int32_t na = tutti_grammar_matcher_mask(m, gv, logits);
        int32_t count = 0;
        for (int32_t i = 0; i < V; i++) {
            bool want;
            if (eog[i]) want = tutti_grammar_matcher_is_complete(m);
            else if (!lens[i]) want = false;
            else {
                tutti_grammar_matcher_set_state(chk, tutti_grammar_matcher_state(m));
                /* chk shares no states with m: replay the text instead */
                tutti_grammar_matcher_reset(chk);
                want = tutti_grammar_matcher_accept(chk, text, pos) == 0 &&
                       tutti_grammar_matcher_accept(chk, pieces[i], (size_t)lens[i]) == 0;
            }
            count += want;
            if (want != (logits[i] != -INFINITY))
                fail_msg("at %zu token \"%s\": mask %d, expected %d", pos, pieces[i], logits[i] != -INFINITY, want);
            if (want) assert_true(logits[i] == (float)i); /* allowed values are kept */
        }
        assert_int_equal(na, count);
        if (pos < n) assert_int_equal(tutti_grammar_matcher_accept(m, text + pos, 1), 0);
    }
    assert_true(tutti_grammar_matcher_is_complete(m));
    tutti_grammar_matcher_free(m);
    tutti_grammar_matcher_free(chk);
    tutti_grammar_free(g);
    tutti_grammar_vocab_free(gv);
}

/* JSON schema conversion: accepted/rejected instances of a few schemas
 * (by definition of the keywords), and errors naming the keyword and path. */
typedef struct scase {
    const char *schema;
    const char *accept[12];
    const char *reject[12];
} scase;

static void test_schema_matcher(void **state) {
    (void)state;
    static const scase k[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"a\"]}",
         /* generation (the default, as llama.cpp): additionalProperties is
          * absent, so no other names; a few named properties in any order */
         {"{\"a\":1}", "{\"a\": -5, \"b\": \"x\"}", "{ \"a\":0 }", "{\"b\":\"x\",\"a\":1}"},
         {"{}", "{\"b\":\"x\"}", "{\"a\":1.5}", "{\"a\":01}", "{\"a\":1,\"c\":2}"}},
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}",
         {"-12", "-1", "0", "9", "10", "99", "100", "299", "305"},
         {"-13", "306", "310", "400", "1000", "-0x", "00"}},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":7}", {"8", "9", "10", "123456"}, {"7", "0", "-1"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":3}",
         {"[true]", "[true, false]", "[false,false,true]"},
         {"[]", "[true,true,true,true]", "[1]"}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"items\":false}",
         /* prefixItems does not ask for every item: ["x"] is valid */
         {"[\"x\", null]", "[\"x\"]", "[]"},
         {"[null, \"x\"]", "[\"x\", null, null]"}},
        {"{\"enum\":[\"red\",\"green\",3,null]}", {"\"red\"", "\"green\"", "3", "null"}, {"\"blue\"", "red", "4"}},
        {"{\"const\":{\"k\":[1,2]}}",
         {"{\"k\":[1,2]}", "{\"k\": [1, 2]}"},
         {"{\"k\":[1,2,3]}", "{\"k\":[1,2],\"j\":0}"}},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
         {"\"ab\"", "\"abc\"", "\"\\n\\t\""},
         {"\"a\"", "\"abcd\""}},
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}",
         {"\"AB-123\"", "\"QQ-000x\"", "\"ZZ-999yz\""},
         {"\"A-123\"", "\"AB-12\"", "\"ab-123\"", "\"AB-123y\""}},
        {"{\"type\":\"string\",\"format\":\"date-time\"}",
         {"\"2024-02-29T12:30:00Z\"", "\"1999-12-31T23:59:59.123+01:00\""},
         {"\"2024-13-01T00:00:00Z\"", "\"2024-01-01 00:00:00Z\""}},
        {"{\"type\":\"string\",\"format\":\"uuid\"}",
         {"\"123e4567-e89b-12d3-a456-426614174000\""},
         {"\"123e4567e89b12d3a456426614174000\""}},
        {"{\"type\":[\"string\",\"null\"]}", {"\"s\"", "null"}, {"1", "true"}},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}]}", {"1", "true"}, {"\"1\"", "null"}},
        {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}",
         {"{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}"},
         {"{\"v\":1}", "{\"v\":1,\"next\":{}}"}},
        {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},{\"properties\":{\"b\":{\"type\":\"integer\"}}}]}",
         {"{\"a\":1}", "{\"a\":1,\"b\":2}"},
         {"{\"b\":2}"}},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},\"additionalProperties\":{\"type\":\"integer\"}}",
         {"{}", "{\"x\":1.5}", "{\"x\":1.5,\"y\":2}", "{\"q\":2,\"r\":3}"},
         {"{\"y\":\"s\"}"}},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        tutti_grammar *g = tutti_grammar_from_json_schema(k[i].schema, strlen(k[i].schema));
        if (!g) fail_msg("schema %s: %s", k[i].schema, tutti_last_error());
        for (int j = 0; j < 12 && k[i].accept[j]; j++)
            if (!full_match(g, k[i].accept[j], strlen(k[i].accept[j])))
                fail_msg("schema %s: %s should be accepted", k[i].schema, k[i].accept[j]);
        for (int j = 0; j < 12 && k[i].reject[j]; j++)
            if (full_match(g, k[i].reject[j], strlen(k[i].reject[j])))
                fail_msg("schema %s: %s should be rejected", k[i].schema, k[i].reject[j]);
        tutti_grammar_free(g);
    }
}

static void test_schema_errors(void **state) {
    (void)state;
    static const ecase k[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"uniqueItems\":true}}}",
         "at /properties/a: keyword 'uniqueItems'"},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "at /format: keyword 'format': 'duration'"},
        {"{\"type\":\"string\",\"pattern\":\"^(?<=a)b$\"}",
         "at /pattern: keyword 'pattern': '^(?<=a)b$': pattern, offset 1: lookbehind"},
        {"{\"$ref\":\"#/$defs/missing\"}", "$ref '#/$defs/missing' points to nothing"},
        {"{\"$ref\":\"http://x/y.json\"}", "keyword '$ref': 'http://x/y.json' is not a local JSON pointer"},
        {"{\"type\":\"strin\"}", "unknown type 'strin'"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "admits no JSON value"},
        {"{\"type\":\"integer\",\"minimum\":\"5\"}", "minimum must be a number"},
        {"{\"type\": \"object\",, }", "not valid JSON near line 1, column 20"},
        {"false", "admits no JSON value"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char *g = tutti_json_schema_to_gbnf(k[i].gbnf, strlen(k[i].gbnf));
        if (g) fail_msg("schema should be refused: %s\n%s", k[i].gbnf, g);
        if (!strstr(tutti_last_error(), k[i].msg))
            fail_msg("schema %s: message \"%s\" lacks \"%s\"", k[i].gbnf, tutti_last_error(), k[i].msg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),          cmocka_unit_test(test_prefixes_and_bytes),
        cmocka_unit_test(test_errors),         cmocka_unit_test(test_token_mask_bruteforce),
        cmocka_unit_test(test_schema_matcher), cmocka_unit_test(test_schema_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
