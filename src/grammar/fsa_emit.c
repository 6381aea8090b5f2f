/* GBNF of an automaton (fsa.h): one right-linear rule per state, so the
 * matcher's stacks stay one element deep inside the language (a rule's
 * last element is a tail call) and a loop such as [a-z]* comes back to the
 * same matcher state, which the token masks' run path relies on.
 *
 * FSA_JSON writes a JSON string's body over the decoded code points: a
 * code point may appear raw where JSON allows it (not '"', '\\' or a
 * control character) or as any of its escapes, so every spelling of an
 * allowed string is accepted and no spelling of another one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/fsa.h"

static void cp_text(sbuf *b, uint32_t c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) sb_printf(b, "%c", (char)c);
    else if (c < 0x100) sb_printf(b, "\\x%02X", (unsigned)c);
    else if (c < 0x10000) sb_printf(b, "\\u%04X", (unsigned)c);
    else sb_printf(b, "\\U%08X", (unsigned)c);
}

void fsa_class_text(sbuf *b, const fsa_edge *r, int32_t n) {
    sb_puts(b, "[");
    for (int32_t i = 0; i < n; i++) {
        cp_text(b, r[i].lo);
        if (r[i].hi != r[i].lo) sb_puts(b, "-"), cp_text(b, r[i].hi);
    }
    sb_puts(b, "]");
}

/* ---- \uXXXX escapes of a range of BMP code points ---- */

/* A class of hex digits with values [a, b] in either case. */
static void hex_class(sbuf *out, int a, int b) {
    static const char up[] = "0123456789ABCDEF", lo[] = "0123456789abcdef";
    sb_puts(out, "[");
    if (a <= 9) sb_printf(out, "%c-%c", up[a], up[b < 9 ? b : 9]);
    if (b >= 10) {
        int x = a > 10 ? a : 10;
        sb_printf(out, "%c-%c%c-%c", lo[x], lo[b], up[x], up[b]);
    }
    sb_puts(out, "]");
}

/* Digit strings of length len from a[] to z[] (digit values, a <= z). */
static void hex_digits_range(sbuf *out, const int *a, const int *z, int len) {
    if (len == 0) return;
    if (a[0] == z[0]) {
        hex_class(out, a[0], a[0]);
        if (len > 1) {
            sb_puts(out, " (");
            hex_digits_range(out, a + 1, z + 1, len - 1);
            sb_puts(out, ")");
        }
        return;
    }
    bool a_min = true, z_max = true;
    for (int i = 1; i < len; i++) a_min &= a[i] == 0, z_max &= z[i] == 15;
    int lo = a_min ? a[0] : a[0] + 1, hi = z_max ? z[0] : z[0] - 1;
    static const int zeros[4] = {0, 0, 0, 0}, fs[4] = {15, 15, 15, 15};
    bool first = true;
    sb_puts(out, "(");
    if (!a_min) {
        hex_class(out, a[0], a[0]);
        sb_puts(out, " (");
        hex_digits_range(out, a + 1, fs, len - 1);
        sb_puts(out, ")");
        first = false;
    }
    if (lo <= hi) {
        if (!first) sb_puts(out, " | ");
        hex_class(out, lo, hi);
        for (int i = 1; i < len; i++) sb_puts(out, " "), hex_class(out, 0, 15);
        first = false;
    }
    if (!z_max) {
        if (!first) sb_puts(out, " | ");
        hex_class(out, z[0], z[0]);
        sb_puts(out, " (");
        hex_digits_range(out, zeros, z + 1, len - 1);
        sb_puts(out, ")");
    }
    sb_puts(out, ")");
}

static void hex4_range(sbuf *out, uint32_t lo, uint32_t hi) {
    int a[4], z[4];
    for (int i = 0; i < 4; i++) a[i] = (int)((lo >> (12 - 4 * i)) & 15), z[i] = (int)((hi >> (12 - 4 * i)) & 15);
    hex_digits_range(out, a, z, 4);
}

/* ---- per state ---- */

typedef struct tgt {
    int32_t to;
    fsa_edge *r; /* its ranges (to unused) */
    int32_t n;
} tgt;

static bool has(const tgt *t, uint32_t c) {
    for (int32_t i = 0; i < t->n; i++)
        if (t->r[i].lo <= c && c <= t->r[i].hi) return true;
    return false;
}

/* The ranges of t that JSON writes raw (no '"', '\\', controls) into out. */
static int32_t raw_part(const tgt *t, fsa_edge *out) {
    int32_t k = 0;
    static const uint32_t cut[][2] = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (int32_t i = 0; i < t->n; i++) {
        uint32_t lo = t->r[i].lo, hi = t->r[i].hi;
        for (int c = 0; c < 3 && lo <= hi; c++) {
            if (cut[c][1] < lo || cut[c][0] > hi) continue;
            if (cut[c][0] > lo) out[k++] = (fsa_edge){lo, cut[c][0] - 1, 0};
            lo = cut[c][1] + 1;
        }
        if (lo <= hi) out[k++] = (fsa_edge){lo, hi, 0};
    }
    return k;
}

/* The escape alternatives (after the backslash) of target t; returns
 * whether there was any. */
static bool escapes(sbuf *b, const tgt *t, const char *target, bool first) {
    static const struct {
        uint32_t c;
        const char *lit;
    } k_short[] = {{'"', "\"\\\"\""}, {'\\', "\"\\\\\""}, {'/', "\"/\""}, {'\b', "\"b\""},
                   {'\f', "\"f\""},   {'\n', "\"n\""},    {'\r', "\"r\""},  {'\t', "\"t\""}};
    bool any = false;
    for (size_t k = 0; k < sizeof k_short / sizeof k_short[0]; k++)
        if (has(t, k_short[k].c)) {
            sb_printf(b, "%s%s %s", first && !any ? "" : " | ", k_short[k].lit, target);
            any = true;
        }
    /* \uXXXX: every BMP code point of the set (few ranges), or at least its
     * control characters, which have no other spelling */
    bool few = t->n <= 16;
    for (int32_t i = 0; i < t->n; i++) {
        uint32_t lo = t->r[i].lo, hi = t->r[i].hi;
        if (!few) {
            if (lo > 0x1F) continue;
            if (hi > 0x1F) hi = 0x1F;
        }
        if (lo > 0xFFFF) continue;
        if (hi > 0xFFFF) hi = 0xFFFF; /* surrogates are never in the set */
        sb_puts(b, first && !any ? "\"u\" " : " | \"u\" ");
        hex4_range(b, lo, hi);
        sb_printf(b, " %s", target);
        any = true;
    }
    if (has(t, 0x10000) && has(t, FSA_MAX_CP)) {
        bool whole = false;
        for (int32_t i = 0; i < t->n; i++) whole |= t->r[i].lo <= 0x10000 && t->r[i].hi >= FSA_MAX_CP;
        if (whole) {
            sb_printf(b, "%s\"u\" [dD] [89abAB] [0-9a-fA-F] [0-9a-fA-F] \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F] "
                         "[0-9a-fA-F] %s",
                      first && !any ? "" : " | ", target);
            any = true;
        }
    }
    return any;
}

void fsa_emit(const fsa *a, int enc, const char *prefix, sbuf *out, char *start, size_t cap) {
    snprintf(start, cap, "%s-0", prefix);
    int32_t max_e = 1;
    for (int32_t q = 0; q < a->n; q++)
        if (a->e0[q + 1] - a->e0[q] > max_e) max_e = a->e0[q + 1] - a->e0[q];
    tgt *ts = malloc(sizeof(tgt) * (size_t)max_e);
    fsa_edge *pool = malloc(sizeof(fsa_edge) * (size_t)max_e * 2 + 4);
    fsa_edge *rawr = malloc(sizeof(fsa_edge) * (size_t)max_e * 3 + 4);
    sbuf esc = {0};
    if (!ts || !pool || !rawr) {
        out->oom = true;
        goto done;
    }
    for (int32_t q = 0; q < a->n; q++) {
        /* group the ranges by target, in order of first appearance */
        int32_t nt = 0, np = 0;
        for (int32_t i = a->e0[q]; i < a->e0[q + 1]; i++) {
            int32_t k = 0;
            while (k < nt && ts[k].to != a->edges[i].to) k++;
            if (k == nt) ts[nt++] = (tgt){a->edges[i].to, NULL, 0};
        }
        for (int32_t k = 0; k < nt; k++) {
            ts[k].r = pool + np;
            for (int32_t i = a->e0[q]; i < a->e0[q + 1]; i++)
                if (a->edges[i].to == ts[k].to) pool[np++] = a->edges[i], ts[k].n++;
        }
        sb_printf(out, "%s-%d ::= ", prefix, q);
        bool first = true;
        esc.n = 0;
        if (esc.s) esc.s[0] = 0;
        bool any_esc = false;
        for (int32_t k = 0; k < nt; k++) {
            char target[160];
            snprintf(target, sizeof target, "%s-%d", prefix, ts[k].to);
            if (enc == FSA_RAW) {
                sb_puts(out, first ? "" : " | ");
                fsa_class_text(out, ts[k].r, ts[k].n);
                sb_printf(out, " %s", target);
                first = false;
                continue;
            }
            int32_t nr = raw_part(&ts[k], rawr);
            if (nr) {
                sb_puts(out, first ? "" : " | ");
                fsa_class_text(out, rawr, nr);
                sb_printf(out, " %s", target);
                first = false;
            }
            if (escapes(&esc, &ts[k], target, !any_esc)) any_esc = true;
        }
        if (any_esc) {
            sb_printf(out, "%s\"\\\\\" %s-%de", first ? "" : " | ", prefix, q);
            first = false;
        }
        if (a->acc[q]) {
            sb_printf(out, "%s%s", first ? "" : " | ", enc == FSA_JSON ? "\"\\\"\"" : "\"\"");
            first = false;
        }
        if (first) sb_puts(out, "[^\\x00-\\U0010FFFF]"); /* nothing: the empty language */
        sb_puts(out, "\n");
        if (any_esc) sb_printf(out, "%s-%de ::= %s\n", prefix, q, esc.s);
        if (esc.oom) out->oom = true;
    }
done:
    free(ts), free(pool), free(rawr), free(esc.s);
}
