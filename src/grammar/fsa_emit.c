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

/* The escapes (after the backslash) of the code points of t: the short
 * ones, \uXXXX in either case (every BMP code point of a small set; of a
 * large one the control characters, which have no other spelling: a
 * pattern such as \S would otherwise write thousands of hex ranges), and
 * surrogate pairs when t holds every code point above U+FFFF.  Empty when t
 * has none. */
static void escape_body(sbuf *b, const tgt *t) {
    static const struct {
        uint32_t c;
        const char *lit;
    } k_short[] = {{'"', "\"\\\"\""}, {'\\', "\"\\\\\""}, {'/', "\"/\""},  {'\b', "\"b\""},
                   {'\f', "\"f\""},   {'\n', "\"n\""},    {'\r', "\"r\""}, {'\t', "\"t\""}};
    for (size_t k = 0; k < sizeof k_short / sizeof k_short[0]; k++)
        if (has(t, k_short[k].c)) sb_printf(b, "%s%s", b->n ? " | " : "", k_short[k].lit);
    uint64_t size = 0;
    for (int32_t i = 0; i < t->n; i++) size += (uint64_t)t->r[i].hi - t->r[i].lo + 1;
    bool all = size <= 256;
    bool any_u = false; /* one "u" ( range | range ... ) group */
    for (int32_t i = 0; i < t->n; i++) {
        uint32_t lo = t->r[i].lo, hi = t->r[i].hi;
        if (!all) {
            if (lo > 0x1F) continue;
            if (hi > 0x1F) hi = 0x1F;
        }
        if (lo > 0xFFFF) continue;
        if (hi > 0xFFFF) hi = 0xFFFF; /* surrogates are never in the set */
        sb_puts(b, any_u ? " | " : b->n ? " | \"u\" (" : "\"u\" (");
        hex4_range(b, lo, hi);
        any_u = true;
    }
    if (any_u) sb_puts(b, ")");
    bool whole = false;
    for (int32_t i = 0; i < t->n; i++) whole |= t->r[i].lo <= 0x10000 && t->r[i].hi >= FSA_MAX_CP;
    if (whole)
        sb_printf(b, "%s\"u\" [dD] [89abAB] [0-9a-fA-F] [0-9a-fA-F] \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F] [0-9a-fA-F]",
                  b->n ? " | " : "");
}

/* The canonical escapes (after the backslash) of the code points of t
 * that JSON cannot write raw: \" \\ and the short control escapes, else
 * \u00xx in lowercase, as json.dumps and llama.cpp write them. */
static void canon_escape_body(sbuf *b, const tgt *t) {
    static const char k_short[] = "\"\\\b\f\n\r\t", k_name[] = "\"\\bfnrt";
    for (uint32_t c = 0; c < 0x60; c++) {
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (!has(t, c)) continue;
        const char *k = c ? strchr(k_short, (int)c) : NULL;
        if (k && c != '"' && c != '\\') sb_printf(b, "%s\"%c\"", b->n ? " | " : "", k_name[k - k_short]);
        else if (c == '"') sb_printf(b, "%s\"\\\"\"", b->n ? " | " : "");
        else if (c == '\\') sb_printf(b, "%s\"\\\\\"", b->n ? " | " : "");
        else sb_printf(b, "%s\"u00%02x\"", b->n ? " | " : "", (unsigned)c);
    }
}

void fsa_shared_free(fsa_shared *sh) {
    for (int32_t i = 0; i < sh->n; i++) free(sh->sets[i]);
    free(sh->sets), free(sh->n_set);
    memset(sh, 0, sizeof *sh);
}

/* The shared rule of t's escapes (written to out when new) in name; false
 * when t has no escape or out of memory. */
static bool escape_rule(fsa_shared *sh, const tgt *t, sbuf *out, char *name, size_t cap) {
    int32_t k = 0;
    for (; k < sh->n; k++) {
        if (sh->n_set[k] != t->n) continue;
        int32_t i = 0;
        while (i < t->n && sh->sets[k][i].lo == t->r[i].lo && sh->sets[k][i].hi == t->r[i].hi) i++;
        if (i == t->n) break;
    }
    snprintf(name, cap, "%s-%d", sh->base, (int)k);
    if (k < sh->n) return sh->n_set[k] >= 0;
    sbuf body = {0};
    escape_body(&body, t);
    if (sh->n == sh->cap) {
        int32_t nc = sh->cap ? sh->cap * 2 : 16;
        fsa_edge **s2 = realloc(sh->sets, sizeof(fsa_edge *) * (size_t)nc);
        if (s2) sh->sets = s2;
        int32_t *n2 = s2 ? realloc(sh->n_set, sizeof(int32_t) * (size_t)nc) : NULL;
        if (!n2) return free(body.s), false;
        sh->n_set = n2, sh->cap = nc;
    }
    if (!(sh->sets[k] = malloc(sizeof(fsa_edge) * (size_t)(t->n ? t->n : 1)))) return free(body.s), false;
    memcpy(sh->sets[k], t->r, sizeof(fsa_edge) * (size_t)t->n);
    sh->n_set[k] = t->n, sh->n++;
    if (body.n) sb_printf(out, "%s ::= %s\n", name, body.s);
    else sh->n_set[k] = -1 - t->n; /* remembered as "no escapes" (never equal to a count) */
    bool any = body.n > 0;
    free(body.s);
    return any;
}

void fsa_emit(const fsa *a, int enc, const char *prefix, sbuf *out, char *start, size_t cap, fsa_shared *shared) {
    fsa_shared local = {0};
    fsa_shared *sh = shared ? shared : &local;
    if (!shared) snprintf(local.base, sizeof local.base, "%s--e", prefix);
    snprintf(start, cap, "%s--0", prefix);
    int32_t max_e = 1;
    for (int32_t q = 0; q < a->n; q++)
        if (a->e0[q + 1] - a->e0[q] > max_e) max_e = a->e0[q + 1] - a->e0[q];
    tgt *ts = malloc(sizeof(tgt) * (size_t)max_e);
    fsa_edge *pool = malloc(sizeof(fsa_edge) * (size_t)max_e * 2 + 4);
    fsa_edge *rawr = malloc(sizeof(fsa_edge) * (size_t)max_e * 3 + 4);
    sbuf line = {0};
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
        line.n = 0; /* the state's rule; shared rules go to out meanwhile */
        sb_printf(&line, "%s--%d ::= ", prefix, q);
        bool first = true;
        for (int32_t k = 0; k < nt; k++) {
            char target[160];
            snprintf(target, sizeof target, "%s--%d", prefix, ts[k].to);
            if (enc == FSA_RAW) {
                sb_puts(&line, first ? "" : " | ");
                fsa_class_text(&line, ts[k].r, ts[k].n);
                sb_printf(&line, " %s", target);
                first = false;
                continue;
            }
            int32_t nr = raw_part(&ts[k], rawr);
            if (nr) {
                sb_puts(&line, first ? "" : " | ");
                fsa_class_text(&line, rawr, nr);
                sb_printf(&line, " %s", target);
                first = false;
            }
            if (enc == FSA_JSON_CANON) {
                sbuf esc = {0};
                canon_escape_body(&esc, &ts[k]);
                if (esc.n) sb_printf(&line, "%s\"\\\\\" (%s) %s", first ? "" : " | ", esc.s, target), first = false;
                if (esc.oom) out->oom = true;
                free(esc.s);
                continue;
            }
            char en[64];
            if (escape_rule(sh, &ts[k], out, en, sizeof en)) {
                sb_printf(&line, "%s\"\\\\\" %s %s", first ? "" : " | ", en, target);
                first = false;
            }
        }
        if (a->acc[q]) {
            sb_printf(&line, "%s%s", first ? "" : " | ", enc != FSA_RAW ? "\"\\\"\"" : "\"\"");
            first = false;
        }
        if (first) sb_puts(&line, "[^\\x00-\\U0010FFFF]"); /* nothing: the empty language */
        sb_puts(&line, "\n");
        sb_putn(out, line.s, line.n);
        if (line.oom) out->oom = true;
    }
done:
    free(ts), free(pool), free(rawr), free(line.s);
    fsa_shared_free(&local);
}
