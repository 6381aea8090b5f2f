/* JSON schemas to grammars (src/grammar/js_*.c), judged by
 * python-jsonschema with its format checker
 * (tests/data/grammar/schema_oracle.py), never by tutti's own code.
 *
 * Per schema: hand-written valid instances (json.dumps's spelling) must be
 * accepted and invalid ones rejected (the labels themselves checked by the
 * validator first); 150 random walks of the grammar's own automaton and
 * mutations of them must be valid whenever the grammar accepts them.  The
 * schemas cover each keyword the compiler enforces, the cases of issue 21
 * (allOf items with $ref plus their own properties/required, oneOf as
 * exactly one, date-time with February 30 and leap years) and issue 25.
 * Refused schemas must name their schema path and keyword; lenient mode
 * drops the keyword with a warning naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "test_common.h"
#include "tutti.h"

#define DATA TUTTI_SOURCE_DIR "/tests/data/grammar/"
#define N_WALKS 150

typedef struct scase {
    const char *name, *schema;
    const char *valid[8], *invalid[10];
} scase;

static const scase k_cases[] = {
    {"allOf: $ref items plus their own properties/required (issue 21)",
     "{\"$defs\": {\"base\": {\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}}, \"required\": [\"id\"]}},"
     " \"allOf\": [{\"$ref\": \"#/$defs/base\", \"properties\": {\"name\": {\"type\": \"string\"}}, \"required\": [\"name\"]},"
     " {\"properties\": {\"tag\": {\"enum\": [\"a\", \"b\"]}}}]}",
     {"{\"id\": 1, \"name\": \"x\"}", "{\"id\": 1, \"name\": \"x\", \"tag\": \"a\"}"},
     {"{\"id\": 1}", "{\"name\": \"x\"}", "{\"id\": \"1\", \"name\": \"x\"}", "{\"id\": 1, \"name\": 2}",
      "{\"id\": 1, \"name\": \"x\", \"tag\": \"c\"}"}},
    {"$ref next to other keywords",
     "{\"$ref\": \"#/definitions/a\", \"required\": [\"b\"], \"definitions\": {\"a\": {\"properties\": {\"b\": {\"type\": "
     "\"number\", \"maximum\": 3}}}}}",
     {"{\"b\": 2.5}", "{\"b\": 3, \"c\": null}"},
     {"{}", "{\"b\": 3.5}", "{\"b\": \"x\"}"}},
    {"oneOf of types",
     "{\"oneOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}",
     {"\"x\"", "3", "-0"},
     {"3.5", "null", "[]"}},
    {"oneOf with overlapping branches: exactly one (issue 21)",
     "{\"oneOf\": [{\"type\": \"integer\"}, {\"type\": \"number\", \"minimum\": 0}]}",
     {"-3", "2.5", "0.001"},
     {"3", "0", "-2.5", "\"x\""}},
    {"oneOf of objects told apart by required properties",
     "{\"oneOf\": [{\"type\": \"object\", \"required\": [\"a\"]}, {\"type\": \"object\", \"required\": [\"b\"]}]}",
     {"{\"a\": 1}", "{\"b\": 2, \"c\": 3}"},
     {"{\"a\": 1, \"b\": 2}", "{}", "{\"c\": 1}"}},
    {"oneOf of objects with a const discriminator",
     "{\"oneOf\": [{\"properties\": {\"kind\": {\"const\": \"a\"}, \"x\": {\"type\": \"integer\"}}, \"required\": "
     "[\"kind\"]}, {\"properties\": {\"kind\": {\"const\": \"b\"}}, \"required\": [\"kind\"]}], \"type\": \"object\"}",
     {"{\"kind\": \"a\", \"x\": 1}", "{\"kind\": \"b\", \"x\": \"y\"}"},
     {"{\"kind\": \"c\"}", "{\"kind\": \"a\", \"x\": \"y\"}", "{}"}},
    {"date-time: real days, leap years (issue 21)",
     "{\"type\": \"string\", \"format\": \"date-time\"}",
     {"\"2024-02-29T12:00:00Z\"", "\"2000-02-29T00:00:00+05:30\"", "\"2023-12-31T23:59:59.123-01:00\"",
      "\"1999-04-30T01:02:03z\""},
     {"\"2023-02-29T00:00:00Z\"", "\"2024-02-30T00:00:00Z\"", "\"2100-02-29T00:00:00Z\"", "\"2024-04-31T00:00:00Z\"",
      "\"2024-13-01T00:00:00Z\"", "\"0000-01-01T00:00:00Z\"", "\"2024-01-01T24:00:00Z\"", "\"2024-01-01 00:00:00Z\"",
      "\"2024-01-01T00:00:00\""}},
    {"date",
     "{\"format\": \"date\"}",
     {"\"2024-02-29\"", "\"1600-02-29\"", "\"2023-11-30\"", "7"},
     {"\"1900-02-29\"", "\"2023-02-30\"", "\"2023-9-01\"", "\"2023-06-31\""}},
    {"time",
     "{\"type\": \"string\", \"format\": \"time\"}",
     {"\"23:59:59Z\"", "\"00:00:00.5+01:00\""},
     {"\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:00\""}},
    {"uuid, ipv4, ipv6",
     "{\"type\": \"array\", \"prefixItems\": [{\"format\": \"uuid\"}, {\"format\": \"ipv4\"}, {\"format\": \"ipv6\"}], "
     "\"items\": false}",
     {"[\"123e4567-e89b-12d3-a456-426614174000\", \"192.168.0.1\", \"::1\"]",
      "[\"00000000-0000-0000-0000-000000000000\", \"255.255.255.255\", \"2001:db8::8a2e:370:7334\"]",
      "[\"00000000-0000-0000-0000-000000000000\", \"0.0.0.0\", \"::ffff:192.0.2.128\"]"},
     {"[\"123e4567e89b12d3a456426614174000\", \"1.1.1.1\", \"::1\"]",
      "[\"123e4567-e89b-12d3-a456-426614174000\", "
      "\"256.1.1.1\", \"::1\"]",
      "[\"123e4567-e89b-12d3-a456-426614174000\", \"01.1.1.1\", \"::1\"]",
      "[\"123e4567-e89b-12d3-a456-426614174000\", \"1.1.1.1\", \"1::2::3\"]"}},
    {"email, hostname, uri",
     "{\"type\": \"object\", \"properties\": {\"e\": {\"format\": \"email\"}, \"h\": {\"format\": \"hostname\"}, \"u\": "
     "{\"format\": \"uri\"}}, \"additionalProperties\": false}",
     {"{\"e\": \"john.doe@example.com\", \"h\": \"mail.example.co.uk\", \"u\": \"https://example.com/a?b=c#d\"}",
      "{\"u\": \"urn:isbn:0451450523\"}"},
     {"{\"e\": \"not an email\"}", "{\"x\": 1}"}},
    {"number bounds on floats",
     "{\"type\": \"number\", \"minimum\": 0.5, \"exclusiveMaximum\": 10}",
     {"0.5", "9.99", "5", "7.5", "1e0", "9.999999999999998"},
     {"0.4", "10", "10.0", "1e1", "-1", "0.49999999999999994"}},
    {"integers: multipleOf and bounds",
     "{\"type\": \"integer\", \"multipleOf\": 3, \"minimum\": -10, \"maximum\": 10}",
     {"-9", "0", "9", "3"},
     {"10", "-12", "4", "12", "-3.5"}},
    {"integers past 2^53",
     "{\"type\": \"integer\", \"minimum\": 9007199254740993}",
     {"9007199254740993", "123456789012345678901234567890"},
     {"9007199254740992", "-9007199254740993"}},
    {"numbers as Python writes them",
     "{\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": 1e300}",
     {"1e-05", "0.1", "1.5e+20", "1e+16", "123456789012345678901234567890"},
     {"0", "0.0", "-1e-05", "1e301"}},
    {"enum of every kind",
     "{\"enum\": [\"a\", 1, null, true, {\"x\": [1, 2]}, [1, \"b\"], 2.5]}",
     {"\"a\"", "1", "null", "true", "{\"x\": [1, 2]}", "[1, \"b\"]", "2.5", "1.0"},
     {"\"b\"", "2", "false", "{\"x\": [1]}", "[1]", "{\"x\": [1, 2], \"y\": 1}", "2.4"}},
    {"const",
     "{\"const\": {\"a\": [1, {\"b\": null}], \"c\": \"\\u00e9\"}}",
     {"{\"a\": [1, {\"b\": null}], \"c\": \"\xc3\xa9\"}"},
     {"{\"a\": [1, {\"b\": null}]}", "{\"a\": [1, {\"b\": 0}], \"c\": \"\xc3\xa9\"}"}},
    {"patternProperties with additionalProperties false",
     "{\"type\": \"object\", \"patternProperties\": {\"^x-\": {\"type\": \"integer\"}, \"^y\": {\"type\": \"string\"}, "
     "\"a$\": {\"minimum\": 0}}, \"additionalProperties\": false, \"properties\": {\"name\": {\"type\": \"string\"}}}",
     {"{\"name\": \"n\", \"x-a\": 1, \"yb\": \"s\"}", "{\"ya\": \"s\", \"x-a\": 0}", "{}"},
     {"{\"x-a\": \"s\"}", "{\"z\": 1}", "{\"x-a\": -1}", "{\"name\": 1}", "{\"yz\": 1}"}},
    {"additionalProperties as a schema",
     "{\"properties\": {\"a\": {}}, \"additionalProperties\": {\"type\": \"boolean\"}}",
     {"{\"a\": \"x\", \"b\": true}", "{\"b\": false, \"a\": [1]}"},
     {"{\"b\": 1}", "{\"a\": 1, \"c\": null}"}},
    {"propertyNames",
     "{\"type\": \"object\", \"propertyNames\": {\"pattern\": \"^[a-z]+$\", \"maxLength\": 3}, \"properties\": "
     "{\"abcd\": {}}}",
     {"{\"ab\": 1}", "{}"},
     {"{\"abcd\": 1}", "{\"A\": 1}", "{\"\": 1}"}},
    {"minProperties, maxProperties",
     "{\"type\": \"object\", \"minProperties\": 1, \"maxProperties\": 2, \"properties\": {\"a\": {\"type\": \"integer\"}}}",
     {"{\"a\": 1}", "{\"a\": 1, \"b\": 2}", "{\"c\": 1}"},
     {"{}", "{\"a\": 1, \"b\": 2, \"c\": 3}", "{\"a\": \"x\"}"}},
    {"dependentRequired and dependentSchemas",
     "{\"properties\": {\"card\": {\"type\": \"string\"}, \"billing\": {\"type\": \"string\"}}, \"dependentRequired\": "
     "{\"card\": [\"billing\"]}, \"dependentSchemas\": {\"billing\": {\"properties\": {\"zip\": {\"type\": \"integer\"}}, "
     "\"required\": [\"zip\"]}}}",
     {"{}", "{\"billing\": \"b\", \"zip\": 1}", "{\"card\": \"c\", \"billing\": \"b\", \"zip\": 2}"},
     {"{\"card\": \"c\"}", "{\"billing\": \"b\"}", "{\"card\": \"c\", \"billing\": \"b\", \"zip\": \"2\"}"}},
    {"draft-07 dependencies",
     "{\"$schema\": \"http://json-schema.org/draft-07/schema#\", \"dependencies\": {\"a\": [\"b\"], \"c\": {\"required\": "
     "[\"d\"]}}}",
     {"{}", "{\"a\": 1, \"b\": 2}", "{\"c\": 1, \"d\": 2}", "[]"},
     {"{\"a\": 1}", "{\"c\": 1}", "{\"c\": 1, \"a\": 2, \"d\": 3}"}},
    {"if / then / else",
     "{\"if\": {\"properties\": {\"kind\": {\"const\": \"num\"}}, \"required\": [\"kind\"]}, \"then\": {\"properties\": "
     "{\"v\": {\"type\": \"number\"}}}, \"else\": {\"properties\": {\"v\": {\"type\": \"string\"}}}}",
     {"{\"kind\": \"num\", \"v\": 1}", "{\"kind\": \"str\", \"v\": \"x\"}", "{\"v\": \"x\"}", "3"},
     {"{\"kind\": \"num\", \"v\": \"x\"}", "{\"kind\": \"x\", \"v\": 1}", "{\"v\": 1}"}},
    {"not",
     "{\"type\": [\"string\", \"integer\"], \"not\": {\"anyOf\": [{\"enum\": [\"a\", \"b\"]}, {\"type\": \"integer\", \"multipleOf\": 2}]}}",
     {"\"c\"", "3", "\"\""},
     {"\"a\"", "4", "0", "null"}},
    {"contains",
     "{\"type\": \"array\", \"contains\": {\"const\": 5}, \"items\": {\"type\": \"integer\"}}",
     {"[5]", "[1, 5, 2]", "[5, 5]"},
     {"[]", "[1, 2]", "[5, \"x\"]"}},
    {"prefixItems, items false",
     "{\"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}], \"items\": false}",
     {"[\"a\", 1]", "[\"a\"]", "[]"},
     {"[\"a\", \"b\"]", "[\"a\", 1, 2]", "[1]"}},
    {"draft-07 tuple with additionalItems",
     "{\"$schema\": \"http://json-schema.org/draft-07/schema#\", \"items\": [{\"type\": \"string\"}], "
     "\"additionalItems\": {\"type\": \"boolean\"}, \"minItems\": 2}",
     {"[\"a\", true]", "[\"a\", false, true]"},
     {"[\"a\"]", "[\"a\", 1]", "[1, true]"}},
    {"string pattern with lengths",
     "{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 4, \"pattern\": \"^[a-c]+$\"}",
     {"\"ab\"", "\"abca\""},
     {"\"a\"", "\"abcab\"", "\"ad\""}},
    {"an unanchored pattern", "{\"pattern\": \"fo+\"}", {"\"xfooy\"", "\"fo\"", "1"}, {"\"f\"", "\"of\""}},
    {"lengths count code points",
     "{\"type\": \"string\", \"maxLength\": 2, \"minLength\": 2}",
     {"\"\xc3\xa9\xf0\x9f\x98\x80\"", "\"\\n\\u0000\""},
     {"\"abc\"", "\"a\""}},
    {"a recursive tree",
     "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, \"kids\": {\"type\": "
     "\"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}}, \"required\": [\"v\"], \"additionalProperties\": false}}, "
     "\"$ref\": \"#/$defs/node\"}",
     {"{\"v\": 1}", "{\"v\": 1, \"kids\": [{\"v\": 2, \"kids\": []}]}"},
     {"{\"v\": 1, \"kids\": [{}]}", "{\"kids\": []}"}},
    {"draft-04 exclusiveMinimum",
     "{\"$schema\": \"http://json-schema.org/draft-04/schema#\", \"type\": \"number\", \"minimum\": 5, "
     "\"exclusiveMinimum\": true}",
     {"5.5", "6"},
     {"5", "5.0", "4"}},
    {"unknown keywords and annotations are ignored",
     "{\"type\": \"string\", \"x-foo\": 1, \"readonly\": true, \"example\": \"x\", \"id\": \"x\", \"format\": \"int32\", "
     "\"$comment\": \"c\"}",
     {"\"abc\""},
     {"1"}},
    {"types with their keywords",
     "{\"type\": [\"string\", \"null\"], \"minLength\": 1}",
     {"null", "\"a\""},
     {"\"\"", "1"}},
    {"allOf of arrays",
     "{\"allOf\": [{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}, {\"minItems\": 2, "
     "\"items\": {\"minimum\": 0}}]}",
     {"[0, 1]", "[3, 4, 5]"},
     {"[1]", "[-1, 2]", "[1.5, 2]"}},
    {"names the generated rules also take (MaskBench BFCL_javascript_14: hints cut at 40 characters)",
     "{\"type\": \"object\", \"properties\": {\"chartDataAccessorFactory\": {\"type\": \"object\", \"properties\": {\"chart\": {\"type\": "
     "\"object\", \"properties\": {\"nm\": {\"type\": \"string\"}}, \"required\": [\"nm\"], \"additionalProperties\": "
     "false}, \"library\": {}, \"configObject\": {\"type\": \"string\"}}, \"required\": [\"chart\", \"library\"], "
     "\"additionalProperties\": false}}, \"required\": [\"chartDataAccessorFactory\"], \"additionalProperties\": false}",
     {"{\"chartDataAccessorFactory\": {\"chart\": {\"nm\": \"a\"}, \"library\": [1], \"configObject\": \"c\"}}",
      "{\"chartDataAccessorFactory\": {\"chart\": {\"nm\": \"\"}, \"library\": null}}"},
     {"{\"chartDataAccessorFactory\": {\"chart\": {}, \"library\": 1}}",
      "{\"chartDataAccessorFactory\": {\"chart\": {\"nm\": \"a\"}}}",
      "{\"chartDataAccessorFactory\": {\"chart\": {\"nm\": \"a\"}, \"library\": 1, \"x\": 2}}", "{\"g\": 1}"}},
    {"a few properties in any order (objects are unordered)",
     "{\"properties\": {\"dimensions\": {\"type\": \"object\", \"properties\": {\"r\": {\"type\": \"integer\"}, \"w\": "
     "{\"type\": \"integer\"}, \"h\": {\"type\": \"integer\"}}, \"required\": [\"w\", \"h\"], \"additionalProperties\": "
     "false}, \"shape\": {\"enum\": [\"box\", \"b\"]}}, \"required\": [\"shape\", \"dimensions\"], \"type\": \"object\", "
     "\"additionalProperties\": false}",
     {"{\"shape\": \"box\", \"dimensions\": {\"h\": 2, \"w\": 1}}",
      "{\"dimensions\": {\"w\": 1, \"r\": 0, \"h\": 2}, \"shape\": \"b\"}",
      "{\"dimensions\": {\"r\": 1, \"h\": 1, \"w\": 2}, \"shape\": \"b\"}"},
     {"{\"shape\": \"box\"}", "{\"shape\": \"box\", \"dimensions\": {\"h\": 2}}",
      "{\"dimensions\": {\"w\": 1, \"h\": \"2\"}, \"shape\": \"b\"}",
      "{\"shape\": \"b\", \"dimensions\": {\"h\": 2, \"w\": 1, \"s\": 3}}",
      "{\"shape\": \"c\", \"dimensions\": {\"h\": 2, \"w\": 1}}"}},
    {"length bounds every string of a pattern or format meets (MaskBench: maxLength 255 on a date)",
     "{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\", \"format\": \"date\", \"maxLength\": 255}, {\"type\": "
     "\"string\", \"pattern\": \"^[0-9]{3}-[0-9]{4}$\", \"minLength\": 5, \"maxLength\": 1000}, {\"type\": \"string\", "
     "\"pattern\": \"^[0-9]{3}(-[0-9]{4})?$\", \"minLength\": 4, \"maxLength\": 1000}], \"items\": false}",
     {"[\"2024-02-29\", \"123-4567\", \"123-4567\"]", "[\"2023-12-31\"]"},
     {"[\"2023-02-29\"]", "[\"2024-01-01\", \"123-456\"]", "[\"2024-01-01\", \"1234567\"]",
      "[\"2024-01-01\", \"123-4567\", \"123\"]"}},
    {"a wide object as validators read it: any order, the required ones tracked",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"string\"}, \"c\": "
     "{\"type\": \"boolean\"}, \"d\": {\"type\": \"null\"}, \"e\": {\"enum\": [1, 2]}, \"f\": {\"type\": \"integer\"}, "
     "\"g\": {\"type\": \"string\"}}, \"required\": [\"f\", \"b\"], \"additionalProperties\": {\"type\": \"number\"}}",
     {"{\"b\": \"x\", \"f\": 1}", "{\"g\": \"y\", \"f\": 2, \"a\": 3, \"b\": \"x\", \"e\": 2}",
      "{\"e\": 1, \"d\": null, \"c\": true, \"b\": \"\", \"a\": 0, \"f\": 5, \"z\": 1.5}",
      "{\"f\": 1, \"q\": 2, \"b\": \"x\"}"},
     {"{\"b\": \"x\"}", "{\"f\": 1, \"a\": 3}", "{\"b\": \"x\", \"f\": 1, \"e\": 3}",
      "{\"b\": \"x\", \"f\": 1, \"z\": \"s\"}", "{\"c\": 1, \"b\": \"x\", \"f\": 1}", "{}"}},
    {"a wide object with many required properties (schema order for those)",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"integer\"}, \"c\": "
     "{\"type\": \"integer\"}, \"d\": {\"type\": \"integer\"}, \"e\": {\"type\": \"integer\"}, \"f\": {\"type\": \"integer\"}, "
     "\"o\": {\"type\": \"string\"}}, \"required\": [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\"], \"additionalProperties\": false}",
     {"{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5, \"f\": 6}", "{\"o\": \"s\", \"a\": 1, \"b\": 2, \"c\": 3, "
                                                                      "\"d\": 4, \"e\": 5, \"f\": 6}"},
     {"{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5}",
      "{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5, \"f\": \"6\"}",
      "{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5, \"f\": 6, \"o\": 1}"}},
    {"uniqueItems over a few enum values: the set used so far, by value whatever the spelling",
     "{\"type\": \"array\", \"items\": {\"enum\": [\"a\", \"b\xc3\xa9\", null, true]}, \"uniqueItems\": true, \"minItems\": 1, "
     "\"maxItems\": 3}",
     {"[\"a\"]", "[\"b\xc3\xa9\", \"a\"]", "[null, true, \"a\"]", "[\"\\u0061\", \"b\\u00e9\"]", "[true]"},
     {"[]", "[\"a\", \"a\"]", "[\"a\", \"\\u0061\"]", "[null, null]", "[\"a\", \"b\xc3\xa9\", null, true]", "[\"c\"]",
      "[1]", "[true, true]"}},
    {"multipleOf a power of two below 1 (exact in Python's floating point too)",
     "{\"type\": \"array\", \"prefixItems\": [{\"type\": \"number\", \"multipleOf\": 0.25, \"maximum\": 10}, {\"type\": "
     "\"integer\", \"multipleOf\": 0.5}, {\"multipleOf\": 0.125}]}",
     {"[0.25, 3]", "[-1.5]", "[2.750, -4, 0.375]", "[10, 0, 1]", "[0]", "[0, 1, 12345678901234567890.75]",
      "[0.5, 2, \"s\"]"},
     {"[0.1]", "[1.3]", "[10.25]", "[0.125]", "[1, 3.5]", "[1, 2, 0.1]", "[0.2500001]"}},
    {"whitespace as JSON allows",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}}",
     {"{\"a\": [1, 2]}", "{\n  \"a\" : [ 1 ,2 ]\n}", " {}"},
     {"{\"a\": 1}"}},
};
#define N_CASES (int)(sizeof k_cases / sizeof k_cases[0])

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return n ? (uint32_t)(g_rng % n) : 0;
}

/* The sampling vocabulary of a schema: single characters, JSON tokens, and
 * every string of the schema (quoted, bare, as a key), so that random
 * generations reach named properties and enum values as a model would. */
typedef struct svocab {
    char **p;
    int32_t *len;
    bool *eog;
    int32_t n, cap;
} svocab;

static void piece(svocab *v, const char *s, size_t n, bool eog) {
    if (n > 60) return;
    if (v->n == v->cap) {
        v->cap = v->cap * 2 + 64;
        v->p = realloc(v->p, sizeof(char *) * (size_t)v->cap);
        v->len = realloc(v->len, sizeof(int32_t) * (size_t)v->cap);
        v->eog = realloc(v->eog, sizeof(bool) * (size_t)v->cap);
    }
    v->p[v->n] = strndup(s, n), v->len[v->n] = (int32_t)n, v->eog[v->n] = eog;
    v->n++;
}

static void schema_strings(svocab *v, const cJSON *x) {
    for (; x; x = x->next) {
        const char *s = x->string ? x->string : NULL;
        for (int k = 0; k < 2; k++, s = cJSON_IsString(x) ? x->valuestring : NULL) {
            if (!s) continue;
            char q[80];
            size_t n = strlen(s);
            if (n > 40) continue;
            piece(v, s, n, false);
            snprintf(q, sizeof q, "\"%s\"", s), piece(v, q, strlen(q), false);
            snprintf(q, sizeof q, "\"%s\": ", s), piece(v, q, strlen(q), false);
        }
        if (x->child) schema_strings(v, x->child);
    }
}

static svocab make_vocab(const char *schema) {
    svocab v = {0};
    piece(&v, "", 0, true); /* end of generation */
    for (int b = 0x20; b < 0x7F; b++) {
        char ch = (char)b;
        piece(&v, &ch, 1, false);
    }
    static const char *const k_tok[] = {"\n",         "\t",         "\xc3\xa9",     "\xe4\xb8\xad", "\xf0\x9f\x98\x80",
                                        ", ",         ": ",         "true",         "false",        "null",
                                        "12",         "0.5",        "-3",           "1e-05",        "2024-02-29",
                                        "T12:00:00Z", "2023-02-30", "@example.com", "192.168.",     "::",
                                        "https://",   "\\n",        "\\u00e9"};
    for (size_t i = 0; i < sizeof k_tok / sizeof k_tok[0]; i++) piece(&v, k_tok[i], strlen(k_tok[i]), false);
    cJSON *j = cJSON_Parse(schema);
    schema_strings(&v, j);
    cJSON_Delete(j);
    return v;
}

static void free_vocab(svocab *v) {
    for (int32_t i = 0; i < v->n; i++) free(v->p[i]);
    free(v->p), free(v->len), free(v->eog);
}

/* A random generation of the grammar over the vocabulary (NULL when it
 * runs long): token masks as a model's sampler would see them. */
static char *walk(tutti_grammar_matcher *m, const tutti_grammar_vocab *gv, const svocab *v) {
    char buf[4096];
    size_t k = 0;
    float *row = malloc(sizeof(float) * (size_t)v->n);
    int32_t *ok = malloc(sizeof(int32_t) * (size_t)v->n);
    tutti_grammar_matcher_reset(m);
    for (int step = 0; step < 160; step++) {
        for (int32_t i = 0; i < v->n; i++) row[i] = 0;
        if (tutti_grammar_matcher_mask(m, gv, row) <= 0) break;
        int32_t na = 0;
        bool end = false;
        for (int32_t i = 0; i < v->n; i++)
            if (row[i] == 0) {
                if (v->eog[i]) end = true;
                else ok[na++] = i;
            }
        if (end && (rnd(3) == 0 || step > 100 || !na)) {
            buf[k] = 0;
            free(row), free(ok);
            return strdup(buf);
        }
        if (!na) break;
        int32_t pick = ok[rnd((uint32_t)na)];
        if (step > 80) /* long: close what is open */
            for (int32_t i = 0; i < na; i++)
                if (v->len[ok[i]] == 1 && strchr("}]\"0", v->p[ok[i]][0])) pick = ok[i];
        if (k + (size_t)v->len[pick] + 1 >= sizeof buf) break;
        memcpy(buf + k, v->p[pick], (size_t)v->len[pick]);
        k += (size_t)v->len[pick];
        if (tutti_grammar_matcher_accept(m, v->p[pick], (size_t)v->len[pick]) < 0) break;
    }
    free(row), free(ok);
    return NULL;
}

static bool accepts(tutti_grammar_matcher *m, const char *t) {
    tutti_grammar_matcher_reset(m);
    return tutti_grammar_matcher_accept(m, t, strlen(t)) == 0 && tutti_grammar_matcher_is_complete(m);
}

static bool utf8_ok(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
        if (!n) return false;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xC0) != 0x80) return false;
        p += n;
    }
    return true;
}

static void mutate(const char *in, char *out, size_t cap) {
    static const char *const ins[] = {"0", "1", "-", ".", "e", "\"", "a", ",", "}", "]", "null", "2", "9", "x", " "};
    size_t n = strlen(in), at = rnd((uint32_t)n + 1);
    snprintf(out, cap, "%.*s%s%s", (int)at, in, rnd(3) ? ins[rnd(15)] : "", at < n ? in + at + 1 : "");
}

typedef struct text {
    int schema;
    char *t;
    int want; /* 1 valid, 0 invalid, -1 drawn */
} text;

static void test_schemas_against_jsonschema(void **state) {
    (void)state;
    int cap = N_CASES * (N_WALKS * 2 + 20), n = 0;
    text *ts = calloc((size_t)cap, sizeof *ts);
    tutti_grammar *gs[N_CASES];
    cJSON *doc = cJSON_CreateObject(), *schemas = cJSON_AddArrayToObject(doc, "schemas"),
          *texts = cJSON_AddArrayToObject(doc, "texts");
    /* these cases read the schema as the specification does (every
     * spelling, other names where additionalProperties is absent) */
    tutti_json_schema_params spec = tutti_json_schema_default_params();
    spec.all_spellings = spec.open_objects = true;
    for (int i = 0; i < N_CASES; i++) {
        const scase *c = &k_cases[i];
        gs[i] = tutti_grammar_from_json_schema_params(c->schema, strlen(c->schema), &spec);
        if (!gs[i]) fail_msg("%s: %s", c->name, tutti_last_error());
        cJSON_AddItemToArray(schemas, cJSON_CreateString(c->schema)); /* as text: cJSON would round big numbers */
        for (int k = 0; k < 8 && c->valid[k]; k++) ts[n++] = (text){i, strdup(c->valid[k]), 1};
        for (int k = 0; k < 10 && c->invalid[k]; k++) ts[n++] = (text){i, strdup(c->invalid[k]), 0};
        tutti_grammar_matcher *m = tutti_grammar_matcher_new(gs[i]);
        svocab sv = make_vocab(c->schema);
        tutti_grammar_vocab *gv = tutti_grammar_vocab_from_pieces(sv.n, (const char *const *)sv.p, sv.len, sv.eog);
        assert_non_null(gv);
        int drawn = 0;
        for (int w = 0; w < N_WALKS * 3 && drawn < N_WALKS; w++) {
            char *t = walk(m, gv, &sv);
            if (!t) continue;
            ts[n++] = (text){i, t, -1};
            char mu[4200];
            mutate(t, mu, sizeof mu);
            if (utf8_ok(mu)) ts[n++] = (text){i, strdup(mu), -2};
            drawn++;
        }
        if (drawn < N_WALKS / 3) fail_msg("%s: only %d of the random walks ended", c->name, drawn);
        tutti_grammar_matcher_free(m);
        tutti_grammar_vocab_free(gv);
        free_vocab(&sv);
    }
    for (int k = 0; k < n; k++) {
        cJSON *p = cJSON_CreateArray();
        cJSON_AddItemToArray(p, cJSON_CreateNumber(ts[k].schema));
        cJSON_AddItemToArray(p, cJSON_CreateString(ts[k].t));
        cJSON_AddItemToArray(texts, p);
    }
    char path[] = "/tmp/tutti_schema_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char *js = cJSON_PrintUnformatted(doc);
    FILE *f = fdopen(fd, "w");
    fputs(js, f);
    fclose(f);
    free(js);
    cJSON_Delete(doc);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 %sschema_oracle.py %s", DATA, path);
    int st;
    char *out = run_cmd(cmd, &st);
    unlink(path);
    assert_non_null(out);
    assert_int_equal(st, 0);
    int k = 0, n_drawn = 0, n_mut_acc = 0;
    for (char *l = strtok(out, "\n"); l && k < n; l = strtok(NULL, "\n"), k++) {
        text *t = &ts[k];
        const scase *c = &k_cases[t->schema];
        bool valid = l[0] == '1';
        tutti_grammar_matcher *m = tutti_grammar_matcher_new(gs[t->schema]);
        bool acc = accepts(m, t->t);
        tutti_grammar_matcher_free(m);
        if (t->want >= 0 && valid != (t->want == 1))
            fail_msg("%s: the test labels %s %s but python-jsonschema disagrees", c->name, t->t,
                     t->want ? "valid" : "invalid");
        if (acc && !valid) fail_msg("%s: the grammar accepts %s, which is invalid", c->name, t->t);
        if (t->want == 1 && !acc) fail_msg("%s: the grammar rejects the valid %s", c->name, t->t);
        n_drawn += t->want == -1;
        n_mut_acc += t->want == -2 && acc;
    }
    assert_int_equal(k, n);
    printf("  %d schemas: %d drawn texts and %d accepted mutations valid; every hand-written label met\n", N_CASES,
           n_drawn, n_mut_acc);
    for (int i = 0; i < n; i++) free(ts[i].t);
    for (int i = 0; i < N_CASES; i++) tutti_grammar_free(gs[i]);
    free(ts), free(out);
}

/* Refusals name the schema path and keyword (and a pattern's offset);
 * lenient mode drops the keyword with a warning that names it. */
static void test_refusals_name_path_and_keyword(void **state) {
    (void)state;
    static const struct {
        const char *schema, *want[3];
    } k_refused[] = {
        {"{\"type\": \"array\", \"items\": {\"type\": \"array\", \"uniqueItems\": true}}", {"/items", "uniqueItems"}},
        {"{\"properties\": {\"a\": {\"type\": \"number\", \"multipleOf\": 0.1}}}",
         {"/properties/a/multipleOf", "multipleOf"}},
        {"{\"properties\": {\"p\": {\"type\": \"string\", \"pattern\": \"^(a)\\\\1$\"}}}",
         {"/properties/p/pattern", "pattern", "offset 4"}},
        {"{\"pattern\": \"^a{3,2}$\"}", {"pattern", "offset 2", "n < m"}},
        {"{\"type\": \"string\", \"format\": \"duration\"}", {"/format", "format"}},
        {"{\"oneOf\": [{\"type\": \"string\"}, {\"type\": \"string\", \"format\": \"email\"}]}", {"/oneOf/1", "oneOf"}},
        {"{\"$ref\": \"other.json#/a\"}", {"$ref", "other.json"}},
        {"{\"definitions\": {\"a\": {\"$ref\": \"#/definitions/b\"}, \"b\": {\"$ref\": \"#/definitions/a\"}}, "
         "\"$ref\": \"#/definitions/a\"}",
         {"refers to itself"}},
    };
    for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++) {
        const char *s = k_refused[i].schema;
        tutti_grammar *g = tutti_grammar_from_json_schema(s, strlen(s));
        if (g) fail_msg("%s: compiled, expected a refusal", s);
        const char *e = tutti_last_error();
        if (strncmp(e, "json schema: at ", 16)) fail_msg("%s: the error does not start with its path: %s", s, e);
        for (int k = 0; k < 3 && k_refused[i].want[k]; k++)
            if (!strstr(e, k_refused[i].want[k])) fail_msg("%s: the error lacks '%s': %s", s, k_refused[i].want[k], e);
        /* lenient: dropped with a warning naming the keyword, where a keyword is the reason */
        if (i < 6) {
            tutti_json_schema_params p = tutti_json_schema_default_params();
            p.lenient = true;
            g = tutti_grammar_from_json_schema_params(s, strlen(s), &p);
            if (!g) fail_msg("%s: lenient: %s", s, tutti_last_error());
            if (!p.warnings || !strstr(p.warnings, k_refused[i].want[1]))
                fail_msg("%s: lenient: no warning naming '%s' (%s)", s, k_refused[i].want[1],
                         p.warnings ? p.warnings : "none");
            free(p.warnings);
            tutti_grammar_free(g);
        }
    }
}

/* The generation defaults (llama.cpp's json-schema-to-grammar): a
 * const/enum string only in its canonical spelling, no names beyond the
 * schema's when additionalProperties is absent.  Judged by python-jsonschema
 * against the schema with "additionalProperties": false written out
 * (`closed`) plus, where every string is a const/enum, a canonical-spelling
 * check of each (json.dumps, ensure_ascii=False); `reject` texts are valid for the schema itself (so
 * the restriction is a choice, checked as such) yet refused. */
typedef struct gcase {
    bool canon; /* check the spelling (the schema's strings are all const/enum) */
    const char *schema, *closed;
    const char *accept[6], *reject[8];
} gcase;

static const gcase k_gen[] = {
    {true,
     "{\"type\": \"object\", \"properties\": {\"kind\": {\"enum\": [\"caf\xc3\xa9\", \"a\\\"b\", \"x/y\", \"tab\\t\", \"\\u001f\"]}, "
     "\"n\": {\"const\": \"\xc3\xa9\\n\"}}, \"required\": [\"kind\"]}",
     "{\"type\": \"object\", \"properties\": {\"kind\": {\"enum\": [\"caf\xc3\xa9\", \"a\\\"b\", \"x/y\", \"tab\\t\", \"\\u001f\"]}, "
     "\"n\": {\"const\": \"\xc3\xa9\\n\"}}, \"required\": [\"kind\"], \"additionalProperties\": false}",
     {"{\"kind\": \"caf\xc3\xa9\"}", "{\"kind\": \"a\\\"b\", \"n\": \"\xc3\xa9\\n\"}",
      "{\"n\": \"\xc3\xa9\\n\", \"kind\": \"x/y\"}", "{\"kind\": \"tab\\t\"}", "{\"kind\": \"\\u001f\"}"},
     {"{\"kind\": \"caf\\u00e9\"}", "{\"kind\": \"x\\/y\"}", "{\"kind\": \"tab\\u0009\"}", "{\"kind\": \"a\\u0022b\"}",
      "{\"kind\": \"\\u001F\"}", "{\"kind\": \"\\u0063af\xc3\xa9\"}", "{\"kind\": \"caf\xc3\xa9\", \"other\": 1}"}},
    {true,
     "{\"type\": \"object\", \"allOf\": [{\"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]}, {\"properties\": {\"b\": "
     "{\"const\": true}}}]}",
     "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"const\": true}}, \"required\": [\"a\"], "
     "\"additionalProperties\": false}",
     {"{\"a\": 1}", "{\"a\": -2, \"b\": true}", "{\"b\": true, \"a\": 3}"},
     {"{\"a\": 1, \"c\": 2}", "{\"a\": 1, \"b\": true, \"a2\": null}"}},
    {false,
     "{\"properties\": {\"id\": {\"const\": 1}}, \"patternProperties\": {\"^x-\": {\"type\": \"integer\"}}}",
     "{\"properties\": {\"id\": {\"const\": 1}}, \"patternProperties\": {\"^x-\": {\"type\": \"integer\"}}, "
     "\"additionalProperties\": false}",
     {"{\"id\": 1}", "{\"id\": 1, \"x-a\": 2}", "{\"x-\": 0}"},
     {"{\"id\": 1, \"y\": 2}", "{\"ix\": 1}"}},
    {false,
     "{\"properties\": {\"a\": {\"type\": \"null\"}}, \"additionalProperties\": true}",
     "{\"properties\": {\"a\": {\"type\": \"null\"}}, \"additionalProperties\": true}",
     {"{\"a\": null, \"z\": 1}", "{\"q\": true}"},
     {NULL}},
    {false, "{\"type\": \"object\"}", "{\"type\": \"object\"}", {"{\"q\": [1]}", "{}"}, {NULL}},
};
#define N_GEN (int)(sizeof k_gen / sizeof k_gen[0])

static void test_generation_defaults(void **state) {
    (void)state;
    int cap = N_GEN * (N_WALKS + 16), n = 0;
    text *ts = calloc((size_t)cap, sizeof *ts);
    tutti_grammar *gs[N_GEN];
    cJSON *doc = cJSON_CreateObject(), *schemas = cJSON_AddArrayToObject(doc, "schemas"),
          *texts = cJSON_AddArrayToObject(doc, "texts");
    for (int i = 0; i < N_GEN; i++) {
        const gcase *c = &k_gen[i];
        gs[i] = tutti_grammar_from_json_schema(c->schema, strlen(c->schema));
        if (!gs[i]) fail_msg("%s: %s", c->schema, tutti_last_error());
        cJSON_AddItemToArray(schemas, cJSON_CreateString(c->closed)); /* index 2i: the walks' reference */
        cJSON_AddItemToArray(schemas, cJSON_CreateString(c->schema)); /* 2i + 1: the schema itself */
        for (int k = 0; k < 6 && c->accept[k]; k++) ts[n++] = (text){i, strdup(c->accept[k]), 1};
        for (int k = 0; k < 8 && c->reject[k]; k++) ts[n++] = (text){i, strdup(c->reject[k]), 0};
        tutti_grammar_matcher *m = tutti_grammar_matcher_new(gs[i]);
        svocab sv = make_vocab(c->schema);
        tutti_grammar_vocab *gv = tutti_grammar_vocab_from_pieces(sv.n, (const char *const *)sv.p, sv.len, sv.eog);
        assert_non_null(gv);
        for (int w = 0, drawn = 0; w < N_WALKS * 3 && drawn < N_WALKS; w++) {
            char *t = walk(m, gv, &sv);
            if (t) ts[n++] = (text){i, t, -1}, drawn++;
        }
        tutti_grammar_matcher_free(m);
        tutti_grammar_vocab_free(gv);
        free_vocab(&sv);
    }
    for (int k = 0; k < n; k++) {
        /* accepted and drawn texts: valid for the closed schema and
         * canonical; the rejected ones: valid for the schema itself */
        cJSON *p = cJSON_CreateArray();
        cJSON_AddItemToArray(p, cJSON_CreateNumber(2 * ts[k].schema + (ts[k].want == 0)));
        cJSON_AddItemToArray(p, cJSON_CreateString(ts[k].t));
        cJSON_AddItemToArray(p, cJSON_CreateBool(ts[k].want != 0 && k_gen[ts[k].schema].canon));
        cJSON_AddItemToArray(texts, p);
    }
    char path[] = "/tmp/tutti_schema_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char *js = cJSON_PrintUnformatted(doc);
    FILE *f = fdopen(fd, "w");
    fputs(js, f);
    fclose(f);
    free(js);
    cJSON_Delete(doc);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 %sschema_oracle.py %s", DATA, path);
    int st, k = 0, n_drawn = 0;
    char *out = run_cmd(cmd, &st);
    unlink(path);
    assert_non_null(out);
    assert_int_equal(st, 0);
    for (char *l = strtok(out, "\n"); l && k < n; l = strtok(NULL, "\n"), k++) {
        text *t = &ts[k];
        const char *sc = k_gen[t->schema].schema;
        tutti_grammar_matcher *m = tutti_grammar_matcher_new(gs[t->schema]);
        bool acc = accepts(m, t->t), ok = l[0] == '1';
        tutti_grammar_matcher_free(m);
        if (t->want == 0 && !ok)
            fail_msg("%s: %s is meant valid for the schema, python-jsonschema disagrees", sc, t->t);
        if (t->want == 0 && acc) fail_msg("%s: generation accepts %s (not canonical or not named)", sc, t->t);
        if (t->want != 0 && !ok) fail_msg("%s: %s is not valid+canonical for the closed schema", sc, t->t);
        if (t->want == 1 && !acc) fail_msg("%s: generation rejects %s", sc, t->t);
        n_drawn += t->want == -1;
    }
    assert_int_equal(k, n);
    printf("  %d schemas: %d drawn texts canonical and closed\n", N_GEN, n_drawn);
    for (int i = 0; i < n; i++) free(ts[i].t);
    for (int i = 0; i < N_GEN; i++) tutti_grammar_free(gs[i]);
    free(ts), free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schemas_against_jsonschema),
        cmocka_unit_test(test_generation_defaults),
        cmocka_unit_test(test_refusals_name_path_and_keyword),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
