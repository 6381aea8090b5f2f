/* Lexer: template text -> tokens.
 *
 * Whitespace handling follows Jinja2 with the options transformers uses for
 * chat templates:
 *   - one trailing "\n" of the template is dropped (keep_trailing_newline off);
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag, "-%}", "-}}",
 *     "-#}" all whitespace after it;
 *   - trim_blocks: the first "\n" after a block or comment tag is removed;
 *   - lstrip_blocks: spaces and tabs from the start of a line up to a block or
 *     comment tag are removed ("{%+" turns this off for one tag).
 * Text is passed through byte for byte otherwise (chat.c has already turned
 * \r\n and \r into \n, as Jinja2's lexer does). */
#include <ctype.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "chat/jinja.h"

typedef struct lexer {
    jctx *c;
    const char *s;
    size_t n, i;
    /* incremental line/column tracking */
    size_t lc_off;
    int line, col;
} lexer;

static void pos_at(lexer *L, size_t off, int *line, int *col) {
    if (off < L->lc_off) { /* never happens in a forward scan, but be safe */
        L->lc_off = 0;
        L->line = 1;
        L->col = 1;
    }
    while (L->lc_off < off) {
        if (L->s[L->lc_off] == '\n') {
            L->line++;
            L->col = 1;
        } else {
            L->col++;
        }
        L->lc_off++;
    }
    *line = L->line;
    *col = L->col;
}

static jtok *push(lexer *L, jtok_type t, size_t off) {
    jctx *c = L->c;
    if (c->n_toks == c->cap_toks) {
        size_t cap = c->cap_toks ? c->cap_toks * 2 : 256;
        jtok *nt = jalloc(c, cap * sizeof *nt);
        if (c->n_toks) memcpy(nt, c->toks, c->n_toks * sizeof *nt);
        c->toks = nt;
        c->cap_toks = cap;
    }
    jtok *t0 = &c->toks[c->n_toks++];
    memset(t0, 0, sizeof *t0);
    t0->t = t;
    pos_at(L, off, &t0->line, &t0->col);
    return t0;
}

static _Noreturn void lex_fail(lexer *L, size_t off, const char *msg) {
    int line, col;
    pos_at(L, off, &line, &col);
    jctx_fail(L->c, line, col, "%s", msg);
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f'; }

/* Appends UTF-8 of code point cp (declared in jinja.h). */
void jinja_put_utf8(jctx *c, struct jbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    jbuf_put(c, b, u, n);
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* String literal with Python escapes; unknown escapes keep the backslash
 * (as Python does). */
static void lex_string(lexer *L) {
    size_t start = L->i;
    char q = L->s[L->i++];
    struct jbuf b = {0};
    for (;;) {
        if (L->i >= L->n) lex_fail(L, start, "unterminated string literal");
        char ch = L->s[L->i++];
        if (ch == q) break;
        if (ch != '\\') {
            jbuf_put(L->c, &b, &ch, 1);
            continue;
        }
        if (L->i >= L->n) lex_fail(L, start, "unterminated string literal");
        char e = L->s[L->i++];
        const char *rep = NULL;
        switch (e) {
        case 'n': rep = "\n"; break;
        case 't': rep = "\t"; break;
        case 'r': rep = "\r"; break;
        case 'b': rep = "\b"; break;
        case 'f': rep = "\f"; break;
        case 'v': rep = "\v"; break;
        case '0': jbuf_put(L->c, &b, "", 1); continue;
        case '\\': rep = "\\"; break;
        case '\'': rep = "'"; break;
        case '"': rep = "\""; break;
        case '\n': continue; /* line continuation */
        case 'x':
        case 'u':
        case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            if (L->i + (size_t)nd > L->n) lex_fail(L, L->i - 2, "truncated \\x/\\u escape in string literal");
            for (int k = 0; k < nd; k++) {
                int h = hexval(L->s[L->i + (size_t)k]);
                if (h < 0) lex_fail(L, L->i - 2, "bad hex digit in \\x/\\u escape");
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF) lex_fail(L, L->i - 2, "\\U escape beyond U+10FFFF");
            L->i += (size_t)nd;
            jinja_put_utf8(L->c, &b, cp);
            continue;
        }
        default: {
            char two[2] = {'\\', e};
            jbuf_put(L->c, &b, two, 2);
            continue;
        }
        }
        jbuf_put(L->c, &b, rep, strlen(rep));
    }
    jtok *t = push(L, JT_STRING, start);
    t->s = jbuf_take(L->c, &b);
}

static void lex_number(lexer *L) {
    size_t start = L->i;
    char buf[64];
    size_t bn = 0;
    bool is_float = false;
    while (L->i < L->n) {
        char ch = L->s[L->i];
        if (isdigit((unsigned char)ch)) {
            /* digits */
        } else if (ch == '_' && bn > 0) {
            L->i++;
            continue;
        } else if (ch == '.' && !is_float && L->i + 1 < L->n && isdigit((unsigned char)L->s[L->i + 1])) {
            is_float = true;
        } else if ((ch == 'e' || ch == 'E') && L->i + 1 < L->n &&
                   (isdigit((unsigned char)L->s[L->i + 1]) ||
                    ((L->s[L->i + 1] == '+' || L->s[L->i + 1] == '-') && L->i + 2 < L->n &&
                     isdigit((unsigned char)L->s[L->i + 2])))) {
            is_float = true;
            if (bn < sizeof buf - 2) buf[bn++] = ch;
            L->i++;
            ch = L->s[L->i];
        } else {
            break;
        }
        if (bn >= sizeof buf - 1) lex_fail(L, start, "numeric literal too long");
        buf[bn++] = ch;
        L->i++;
    }
    buf[bn] = 0;
    if (is_float) {
        jtok *t = push(L, JT_FLOAT, start);
        t->f = strtod(buf, NULL);
    } else {
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (bn > 19 || v > (unsigned long long)INT64_MAX) lex_fail(L, start, "integer literal out of range");
        jtok *t = push(L, JT_INT, start);
        t->i = (int64_t)v;
    }
}

/* Lexes the inside of a {{ }} or {% %} tag, from L->i, up to and including
 * the end marker.  Returns true when the end marker had a "-" (strip the
 * whitespace that follows). */
static bool lex_tag(lexer *L, bool is_block, size_t tag_start, bool *plus_end) {
    static const char *ops2[] = {"**", "//", "==", "!=", "<=", ">="};
    const char endch = is_block ? '%' : '}';
    int depth = 0; /* open '{' of dict literals */
    *plus_end = false;
    for (;;) {
        while (L->i < L->n && is_ws(L->s[L->i])) L->i++;
        if (L->i >= L->n)
            lex_fail(L, tag_start,
                     is_block ? "unclosed block tag: '{%' without '%}'" : "unclosed expression: '{{' without '}}'");
        const char *p = L->s + L->i;
        size_t left = L->n - L->i;
        /* "%}" always ends a block tag; "}}" ends an expression unless a
         * dict literal's "{" is open ({{ {'a': {'b': 1}} }}). */
        if (is_block || depth == 0) {
            bool minus = p[0] == '-', plus = p[0] == '+';
            size_t o = (minus || plus) ? 1 : 0;
            if (left >= o + 2 && p[o] == endch && p[o + 1] == '}') {
                push(L, is_block ? JT_BLOCK_END : JT_VAR_END, L->i);
                L->i += o + 2;
                *plus_end = plus;
                return minus;
            }
        }
        char ch = p[0];
        if (ch == '\'' || ch == '"') {
            lex_string(L);
            continue;
        }
        if (isdigit((unsigned char)ch)) {
            lex_number(L);
            continue;
        }
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t st = L->i;
            while (L->i < L->n && (isalnum((unsigned char)L->s[L->i]) || L->s[L->i] == '_')) L->i++;
            jtok *t = push(L, JT_NAME, st);
            t->s = (jstr){L->s + st, L->i - st, NULL};
            continue;
        }
        size_t len = 0;
        for (size_t k = 0; k < sizeof ops2 / sizeof ops2[0]; k++)
            if (left >= 2 && p[0] == ops2[k][0] && p[1] == ops2[k][1]) len = 2;
        if (!len && strchr("+-*/%~<>=()[]{},.:|", ch) && ch != 0) len = 1;
        if (!len) {
            char msg[64];
            if ((unsigned char)ch >= 0x20 && (unsigned char)ch < 0x7f)
                snprintf(msg, sizeof msg, "unexpected character '%c' in tag", ch);
            else snprintf(msg, sizeof msg, "unexpected byte 0x%02x in tag", (unsigned char)ch);
            lex_fail(L, L->i, msg);
        }
        if (ch == '{') depth++;
        else if (ch == '}' && depth > 0) depth--;
        jtok *t = push(L, JT_OP, L->i);
        t->s = (jstr){p, len, NULL};
        L->i += len;
    }
}

/* Is the block tag starting at `at` ("{%" plus optional "-"/"+") the word `w`
 * alone (e.g. raw / endraw)?  Returns the offset just after "%}" or 0. */
static size_t simple_block(lexer *L, size_t at, const char *w, bool *strip_before, bool *strip_after) {
    size_t i = at + 2;
    *strip_before = *strip_after = false;
    if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) {
        *strip_before = L->s[i] == '-';
        i++;
    }
    while (i < L->n && is_ws(L->s[i])) i++;
    size_t wl = strlen(w);
    if (i + wl > L->n || memcmp(L->s + i, w, wl) != 0) return 0;
    i += wl;
    while (i < L->n && is_ws(L->s[i])) i++;
    if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) {
        *strip_after = L->s[i] == '-';
        i++;
    }
    if (i + 2 <= L->n && L->s[i] == '%' && L->s[i + 1] == '}') return i + 2;
    return 0;
}

static void emit_text(lexer *L, size_t a, size_t b, bool lstrip_all, bool rstrip_all) {
    if (lstrip_all)
        while (a < b && is_ws(L->s[a])) a++;
    if (rstrip_all)
        while (b > a && is_ws(L->s[b - 1])) b--;
    if (b > a) {
        jtok *t = push(L, JT_TEXT, a);
        t->s = (jstr){L->s + a, b - a, NULL};
    }
}

/* Start of the lstrip_blocks region before a tag at `at`: the offset of the
 * first space/tab that begins the line, or `at` if other text precedes. */
static size_t lstrip_start(lexer *L, size_t at, size_t text_start) {
    size_t k = at;
    while (k > text_start && (L->s[k - 1] == ' ' || L->s[k - 1] == '\t')) k--;
    /* Only whitespace between the start of the line and the tag? */
    size_t j = k;
    while (j > 0 && (L->s[j - 1] == ' ' || L->s[j - 1] == '\t')) j--;
    if (j == 0 || L->s[j - 1] == '\n') return k;
    return at;
}

void jinja_lex(jctx *c, const char *src, size_t len) {
    lexer L = {.c = c, .s = src, .n = len, .i = 0, .lc_off = 0, .line = 1, .col = 1};
    if (L.n > 0 && L.s[L.n - 1] == '\n') L.n--;
    bool lstrip_next = false;
    while (L.i < L.n) {
        /* find the next tag */
        size_t j = L.i;
        int kind = 0; /* '{', '%', '#' */
        while (j + 1 < L.n) {
            if (L.s[j] == '{' && (L.s[j + 1] == '{' || L.s[j + 1] == '%' || L.s[j + 1] == '#')) {
                kind = L.s[j + 1];
                break;
            }
            j++;
        }
        if (!kind) {
            emit_text(&L, L.i, L.n, lstrip_next, false);
            L.i = L.n;
            break;
        }
        char mod = j + 2 < L.n ? L.s[j + 2] : 0;
        size_t text_end = j;
        if ((kind == '%' || kind == '#') && mod != '+' && mod != '-') text_end = lstrip_start(&L, j, L.i);
        emit_text(&L, L.i, text_end, lstrip_next, mod == '-');
        lstrip_next = false;
        size_t tag_start = j;
        L.i = j + 2 + ((mod == '-' || mod == '+') ? 1 : 0);

        if (kind == '#') {
            size_t k = L.i;
            while (k + 1 < L.n && !(L.s[k] == '#' && L.s[k + 1] == '}')) k++;
            if (k + 1 >= L.n) lex_fail(&L, tag_start, "unclosed comment: '{#' without '#}'");
            bool minus = k > L.i && L.s[k - 1] == '-';
            bool plus = k > L.i && L.s[k - 1] == '+';
            L.i = k + 2;
            if (minus) lstrip_next = true;
            else if (!plus && L.i < L.n && L.s[L.i] == '\n') L.i++; /* trim_blocks */
            continue;
        }
        if (kind == '%') {
            bool sb, sa;
            size_t after = simple_block(&L, tag_start, "raw", &sb, &sa);
            if (after) {
                /* {% raw %}: everything up to {% endraw %} is text */
                size_t k = after, end = 0;
                bool eb = false, ea = false;
                for (; k + 1 < L.n; k++)
                    if (L.s[k] == '{' && L.s[k + 1] == '%' && (end = simple_block(&L, k, "endraw", &eb, &ea)) != 0)
                        break;
                if (!end) lex_fail(&L, tag_start, "unclosed {% raw %}: no {% endraw %}");
                size_t body = after;
                if (!sa && body < L.n && L.s[body] == '\n') body++;
                emit_text(&L, body, k, sa, eb);
                L.i = end;
                if (ea) lstrip_next = true;
                else if (L.i < L.n && L.s[L.i] == '\n') L.i++;
                continue;
            }
            push(&L, JT_BLOCK_BEGIN, tag_start);
            bool plus_end;
            bool minus = lex_tag(&L, true, tag_start, &plus_end);
            if (minus) lstrip_next = true;
            else if (!plus_end && L.i < L.n && L.s[L.i] == '\n') L.i++; /* trim_blocks */
        } else {
            push(&L, JT_VAR_BEGIN, tag_start);
            bool plus_end;
            if (lex_tag(&L, false, tag_start, &plus_end)) lstrip_next = true;
        }
    }
    push(&L, JT_EOF, L.n);
}
