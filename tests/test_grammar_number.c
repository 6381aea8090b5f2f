/* Number languages (src/grammar/js_number.c) against python-jsonschema:
 * minimum / maximum / exclusive bounds (integer and float literals, tiny,
 * huge, negative, zero, values beyond 2^53), integer multipleOf and
 * integer vs number, on texts drawn from the automata, doubles next to the
 * bounds, integers next to them, the midpoints where Python's rounding
 * flips, and mutations.  Promise: a text the automaton accepts is valid
 * (tests/data/grammar/number_oracle.py), and on the accepted spellings
 * (js_number.h) it accepts exactly the valid ones. */
#include <float.h>
#include <math.h>
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

#include "grammar/fsa.h"
#include "grammar/js_number.h"
#include "grammar/regex.h"
#include "test_common.h"
#include "tutti.h"

#define DATA TUTTI_SOURCE_DIR "/tests/data/grammar/"
#define N_TEXT 64

static const char *const k_bounds[] = {"0",
                                       "-0",
                                       "1",
                                       "-1",
                                       "0.5",
                                       "-0.5",
                                       "1.5",
                                       "100",
                                       "1e2",
                                       "1e-5",
                                       "0.1",
                                       "-0.1",
                                       "0.30000000000000004",
                                       "2.5",
                                       "1.7976931348623157e308",
                                       "-1.7976931348623157e308",
                                       "5e-324",
                                       "-5e-324",
                                       "2.2250738585072014e-308",
                                       "9007199254740993",
                                       "-9007199254740993",
                                       "123456789012345678901234567890",
                                       "1e22",
                                       "1e-7",
                                       "99.99",
                                       "-273.15",
                                       "1000000",
                                       "3",
                                       "7",
                                       "0.0",
                                       "9007199254740992",
                                       "9007199254740993.0",
                                       "9007199254740995",
                                       "-9007199254740995"};
#define N_BOUNDS (int)(sizeof k_bounds / sizeof k_bounds[0])

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return n ? (uint32_t)(g_rng % n) : 0;
}

typedef struct ncase {
    const char *lo, *hi, *mult;
    bool lo_strict, hi_strict, integer;
    fsa *a;
    char *t[N_TEXT];
} ncase;

static void walk(const fsa *a, char *out, size_t cap) {
    size_t k = 0;
    int32_t q = 0;
    for (int step = 0; step < 30 && k + 2 < cap; step++) {
        int32_t ne = a->e0[q + 1] - a->e0[q];
        if (a->acc[q] && (ne == 0 || rnd(5) == 0)) break;
        if (!ne) break;
        const fsa_edge *e = &a->edges[a->e0[q] + (int32_t)rnd((uint32_t)ne)];
        out[k++] = (char)(e->lo + rnd(e->hi - e->lo + 1));
        q = e->to;
    }
    out[k] = 0;
}

static void mutate(const char *in, char *out, size_t cap) {
    static const char *const ins[] = {"0", "9", "1", "5", "-", ".", "e", "E", "+", "00", "e-", "4"};
    size_t n = strlen(in), at = rnd((uint32_t)n + 1);
    const char *x = ins[rnd(12)];
    size_t skip = rnd(2) && at < n ? 1 : 0;
    snprintf(out, cap, "%.*s%s%s", (int)at, in, rnd(4) ? x : "", in + at + skip);
}

/* Texts near a bound: doubles a few ulps away, integers around it, the
 * midpoints' neighbourhoods in long decimals. */
static int near(const char *b, char **out, int max) {
    int k = 0;
    char buf[128];
    double d = strtod(b, NULL);
    double x = d;
    for (int i = 0; i < 3 && k < max; i++) x = nextafter(x, -INFINITY);
    for (int i = 0; i < 7 && k < max; i++, x = nextafter(x, INFINITY)) {
        snprintf(buf, sizeof buf, "%.17g", x);
        out[k++] = strdup(buf);
        /* the midpoint to the next double, where Python's rounding ties
         * (exact in long double; short enough to be an accepted spelling
         * near 2^53) */
        long double mid = ((long double)x + (long double)nextafter(x, INFINITY)) / 2;
        if (k < max && fabsl(mid) > 1e15L && fabsl(mid) < 1e17L)
            snprintf(buf, sizeof buf, "%.1Lf", mid), out[k++] = strdup(buf);
        if (k < max) snprintf(buf, sizeof buf, "%.25f", x), out[k++] = strdup(buf);
        if (k < max) snprintf(buf, sizeof buf, "%.16e", x), out[k++] = strdup(buf);
    }
    if (fabs(d) < 1e15 && k + 3 <= max) {
        long long n = (long long)floor(d);
        for (long long j = n - 1; j <= n + 1; j++) snprintf(buf, sizeof buf, "%lld", j), out[k++] = strdup(buf);
    }
    return k;
}

static void test_ranges_against_jsonschema(void **state) {
    (void)state;
    int cap = 2048, n = 0;
    ncase *cs = calloc((size_t)cap, sizeof *cs);
    for (int i = 0; i < N_BOUNDS; i++)
        for (int v = 0; v < 8; v++) {
            ncase c = {0};
            c.integer = v & 1;
            const char *other = k_bounds[rnd(N_BOUNDS)];
            switch (v >> 1) {
            case 0: c.lo = k_bounds[i]; break;
            case 1: c.hi = k_bounds[i]; break;
            case 2: c.lo = k_bounds[i], c.lo_strict = true, c.hi = other; break;
            default: c.hi = k_bounds[i], c.hi_strict = true, c.lo = other; break;
            }
            cs[n++] = c;
        }
    static const char *const mults[] = {"1", "2", "3", "7", "10", "25", "1000"};
    for (int i = 0; i < 7; i++) cs[n++] = (ncase){.mult = mults[i], .integer = true};
    cs[n++] = (ncase){.mult = "5", .integer = true, .lo = "-12", .hi = "100"};
    cJSON *all = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        ncase *c = &cs[i];
        if (c->mult) {
            c->a = num_multiple_of(c->mult);
            if (c->a && (c->lo || c->hi)) {
                fsa *r = num_range(true, (num_bound){c->lo, c->lo_strict}, (num_bound){c->hi, c->hi_strict});
                fsa *x = r ? fsa_and(c->a, r) : NULL;
                fsa_free(c->a), fsa_free(r);
                c->a = x;
            }
        } else {
            c->a = num_range(c->integer, (num_bound){c->lo, c->lo_strict}, (num_bound){c->hi, c->hi_strict});
        }
        if (!c->a) fail_msg("case %d (lo %s hi %s): %s", i, c->lo, c->hi, tutti_last_error());
        int k = 0;
        char buf[256];
        if (c->lo) k += near(c->lo, c->t + k, N_TEXT / 3);
        if (c->hi) k += near(c->hi, c->t + k, N_TEXT / 3);
        for (int w = 0; k < N_TEXT; w++) {
            if (w < 10) walk(c->a, buf, sizeof buf);
            else mutate(c->t[rnd((uint32_t)k)], buf, sizeof buf);
            c->t[k++] = strdup(buf);
        }
        cJSON *pair = cJSON_CreateArray(), *o = cJSON_CreateObject(), *ts = cJSON_CreateArray();
        cJSON_AddItemToObject(o, "lo", c->lo ? cJSON_CreateString(c->lo) : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "hi", c->hi ? cJSON_CreateString(c->hi) : cJSON_CreateNull());
        cJSON_AddBoolToObject(o, "lo_strict", c->lo_strict);
        cJSON_AddBoolToObject(o, "hi_strict", c->hi_strict);
        cJSON_AddBoolToObject(o, "integer", c->integer);
        cJSON_AddItemToObject(o, "multiple", c->mult ? cJSON_CreateString(c->mult) : cJSON_CreateNull());
        for (int j = 0; j < N_TEXT; j++) cJSON_AddItemToArray(ts, cJSON_CreateString(c->t[j]));
        cJSON_AddItemToArray(pair, o);
        cJSON_AddItemToArray(pair, ts);
        cJSON_AddItemToArray(all, pair);
    }
    char path[] = "/tmp/tutti_number_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char *txt = cJSON_PrintUnformatted(all);
    FILE *f = fdopen(fd, "w");
    fputs(txt, f);
    fclose(f);
    free(txt);
    cJSON_Delete(all);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 %snumber_oracle.py %s", DATA, path);
    int st;
    char *out = run_cmd(cmd, &st);
    unlink(path);
    assert_non_null(out);
    assert_int_equal(st, 0);
    /* the accepted spellings */
    const char *in = "^-?(?:0|[1-9][0-9]*)$";
    fsa *syn_int = rx_compile(in, strlen(in), RX_SUBSET);
    const char *fl = "^-?(?:(?:0|[1-9][0-9]*)(?:\\.[0-9]{1,24})?|[1-9](?:\\.[0-9]{1,16})?[eE][+-]?[0-9]+)$";
    fsa *syn_num = rx_compile(fl, strlen(fl), RX_SUBSET);
    int i = 0, n_exact = 0, n_texts = 0;
    for (char *l = strtok(out, "\n"); l && i < n; l = strtok(NULL, "\n"), i++) {
        cJSON *r = cJSON_Parse(l);
        assert_true(cJSON_IsArray(r));
        ncase *c = &cs[i];
        for (int j = 0; j < N_TEXT; j++) {
            bool ok = cJSON_IsTrue(cJSON_GetArrayItem(r, j));
            bool acc = fsa_accepts_utf8(c->a, c->t[j], strlen(c->t[j]));
            bool in_syntax = fsa_accepts_utf8(c->integer ? syn_int : syn_num, c->t[j], strlen(c->t[j]));
            if (acc && !ok)
                fail_msg("lo %s%s hi %s%s %s mult %s: accepts \"%s\", python-jsonschema says invalid", c->lo,
                         c->lo_strict ? " (exclusive)" : "", c->hi, c->hi_strict ? " (exclusive)" : "",
                         c->integer ? "integer" : "number", c->mult, c->t[j]);
            if (in_syntax && ok && !acc)
                fail_msg("lo %s%s hi %s%s %s mult %s: rejects \"%s\", python-jsonschema says valid", c->lo,
                         c->lo_strict ? " (exclusive)" : "", c->hi, c->hi_strict ? " (exclusive)" : "",
                         c->integer ? "integer" : "number", c->mult, c->t[j]);
            n_texts++;
            n_exact += acc == ok;
        }
        cJSON_Delete(r);
    }
    assert_int_equal(i, n);
    printf("  %d ranges, %d texts: no invalid one accepted, every valid one in the accepted spellings accepted "
           "(%d agree in all)\n",
           n, n_texts, n_exact);
    fsa_free(syn_int), fsa_free(syn_num);
    for (int k = 0; k < n; k++) {
        fsa_free(cs[k].a);
        for (int j = 0; j < N_TEXT; j++) free(cs[k].t[j]);
    }
    free(cs), free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranges_against_jsonschema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
