/* BPE pre-tokenizers: the regexes that cut text into words before the merges
 * run, selected by tokenizer.ggml.pre, evaluated with PCRE2.
 *
 * What is reproduced is llama.cpp's unicode_regex_split (src/unicode.cpp),
 * not an ideal Unicode regex engine, because the goal is the same token ids:
 *
 *  - A pre-tokenizer is a list of regexes applied in turn.  Each one splits
 *    every piece the previous ones produced; both its matches and the text
 *    between matches become pieces.
 *  - llama.cpp runs regexes that use \p{..} classes on a "collapsed" copy of
 *    the text where every non-ASCII code point is replaced by one stand-in
 *    per class (letter, number, punctuation, mark, symbol, other) and
 *    non-ASCII White_Space by U+000B, and rewrites \p{L} to "A-Za-z + the
 *    letter stand-in" and so on.  We do the same with private-use stand-ins
 *    (U+E000..U+E005) in PCRE2's UTF mode, so \p{..} means exactly llama.cpp's
 *    classes (Unicode 15.1 general categories, with its ASCII quirks such as
 *    '~' not being \p{S}), independent of PCRE2's own Unicode version.
 *  - Regexes without \p{..} run on the real code points (non-ASCII White_Space
 *    again replaced by U+000B).
 *  - \s is ECMAScript's [\t\n\v\f\r ] on that text.  $ is end of piece only.
 *  - llama.cpp has hand-written splitters for the GPT-2 and Llama-3 regexes;
 *    they behave exactly like the regexes (GPT-2's with a final "|\s+"
 *    alternative), which is what we compile.
 *
 * Patterns are compiled once per vocabulary (with JIT when available) and are
 * read-only afterwards; each split call makes its own match data, so one
 * vocabulary can be used from several threads. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"
#include "util/error.h"

#define MAX_REGEX 8

/* ---- the pre-tokenizers (regex text as in llama.cpp's llama-vocab.cpp,
 * which took them from the models' tokenizer.json).  Non-ASCII characters are
 * written as \x{..} escapes taken from the Debian llama.cpp build, because
 * copies of the source text tend to get Unicode-normalised (U+1F7D and U+2126
 * silently become U+03CE and U+03A9, which breaks the ranges). ---- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* llama.cpp's custom GPT-2 splitter also takes a lone whitespace run */
#define RE_GPT2_CUSTOM RE_GPT2 "|\\s+"
#define RE_LLAMA3                                                                              \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                               \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

typedef struct pretok_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *regex[MAX_REGEX];
} pretok_def;

static const pretok_def k_defs[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2_CUSTOM, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|dbrx|smaug-bpe|"
     "chatglm-bpe|glm4",
     {RE_LLAMA3}},
    {"deepseek-llm",
     {"[\r\n]",
      "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4"
      "}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x"
      "{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A"
      "}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{"
      "1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D"
      "9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}"
      "-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x"
      "{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1F"
      "DB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-"
      "\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{2"
      "12F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
      "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x"
      "{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB"
      "70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A"
      "}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x"
      "{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      /* llama.cpp: "\\s+$".  Same matches (a whitespace run reaching the end
       * of the piece, taken from its first character), but linear instead of
       * quadratic on long whitespace runs that do not reach the end. */
      "(?<!\\s)\\s++$", RE_CJK, "\\p{N}+"}},
    {"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"}},
    {"deepseek-v3",
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
      " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2_CUSTOM, "[0-9][0-9][0-9]"}},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2_CUSTOM}},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|jina-v1-en|"
     "jina-v2-code|roberta-bpe|exaone4|mpt|olmo|jais|trillion|granite-docling",
     {RE_GPT2_CUSTOM}},
    {"qwen2|deepseek-r1-qwen|megrez|stablelm2|hunyuan|solar-open", {RE_QWEN2}},
    {"poro-chat|bloom|gpt3-finnish", {RE_PORO}},
    {"viking", {RE_PORO, "\\p{N}"}},
    {"tekken",
     {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?"
      "=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/"
      "]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"gpt-4o|llama4",
     {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'["
      "vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-"
      "Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}"
      "]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"seed-coder",
     {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{"
      "1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
};

const char *pretok_known_names(void) {
    return "default, llama3 (llama-bpe, llama-v3, ...), deepseek-llm, deepseek-coder, deepseek-v3, "
           "falcon, starcoder, refact, gpt-2, mpt, qwen2, ... (see src/tokenizer/pretok.c)";
}

/* ---- compiling: llama.cpp regex text -> PCRE2 pattern ---- */

/* Stand-ins for non-ASCII code points in the collapsed text. */
enum {
    SUB_OTHER = 0xE000,
    SUB_NUMBER = 0xE001,
    SUB_LETTER = 0xE002,
    SUB_PUNCT = 0xE003,
    SUB_MARK = 0xE004,
    SUB_SYMBOL = 0xE005,
};

/* Class members of llama.cpp's collapsed categories (ASCII part as in its
 * k_ucat_map). */
#define CLS_WS "\\x{09}-\\x{0D}\\x{20}"
#define CLS_N "\\x{E001}0-9"
#define CLS_L "\\x{E002}A-Za-z"
#define CLS_P \
    "\\x{E003}\\x{21}-\\x{23}\\x{25}-\\x{2A}\\x{2C}-\\x{2F}\\x{3A}\\x{3B}\\x{3F}\\x{40}\\x{5B}-\\x{5D}\\x{5F}\\x{7B}\\x{7D}"
#define CLS_M "\\x{E004}"
#define CLS_S "\\x{E005}\\x{24}\\x{2B}\\x{3C}-\\x{3E}\\x{5E}\\x{60}\\x{7C}"

static const struct {
    const char *name;
    const char *members;
} k_ucat[] = {
    {"\\p{N}", CLS_N},  {"\\p{L}", CLS_L},  {"\\p{P}", CLS_P},  {"\\p{M}", CLS_M},  {"\\p{S}", CLS_S},
    {"\\p{Lu}", CLS_L}, {"\\p{Ll}", CLS_L}, {"\\p{Lt}", CLS_L}, {"\\p{Lm}", CLS_L}, {"\\p{Lo}", CLS_L},
};

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static bool sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}
static bool sb_str(sbuf *b, const char *s) { return sb_put(b, s, strlen(s)); }

static bool uses_categories(const char *re) {
    for (size_t k = 0; k < sizeof k_ucat / sizeof k_ucat[0]; k++)
        if (strstr(re, k_ucat[k].name)) return true;
    return false;
}

/* Rewrites \p{..}, \s, \S, \d, \w into explicit classes over the (collapsed
 * or raw) text; everything else is passed through (the syntax used by the
 * patterns above is common to ECMAScript and PCRE2).  Bracket tracking as in
 * llama.cpp: '[' not preceded by '\' opens, ']' not preceded by '\' closes. */
static bool translate(const char *re, sbuf *out) {
    bool inside = false;
    size_t n = strlen(re);
    for (size_t i = 0; i < n; i++) {
        char c = re[i];
        if (c == '[' && (i == 0 || re[i - 1] != '\\')) {
            inside = true;
            if (!sb_put(out, "[", 1)) return false;
            continue;
        }
        if (inside && c == ']' && re[i - 1] != '\\') {
            inside = false;
            if (!sb_put(out, "]", 1)) return false;
            continue;
        }
        if (c == '\\' && i + 1 < n) {
            char e = re[i + 1];
            if (e == 'p' && i + 2 < n && re[i + 2] == '{') {
                const char *close = strchr(re + i, '}');
                bool found = false;
                for (size_t k = 0; close && k < sizeof k_ucat / sizeof k_ucat[0]; k++) {
                    size_t len = (size_t)(close - (re + i)) + 1;
                    if (strlen(k_ucat[k].name) == len && !memcmp(re + i, k_ucat[k].name, len)) {
                        if (!(inside ? sb_str(out, k_ucat[k].members)
                                     : (sb_str(out, "[") && sb_str(out, k_ucat[k].members) && sb_str(out, "]"))))
                            return false;
                        i += len - 1;
                        found = true;
                        break;
                    }
                }
                if (found) continue;
                return false; /* unsupported property */
            }
            const char *cls = NULL;
            bool neg = false;
            switch (e) {
            case 's': cls = CLS_WS; break;
            case 'S':
                cls = CLS_WS;
                neg = true;
                break;
            case 'd': cls = "0-9"; break;
            case 'w': cls = "A-Za-z0-9_"; break;
            default: break;
            }
            if (cls) {
                if (inside && neg) return false; /* [\S] would need a class subtraction */
                bool ok =
                    inside ? sb_str(out, cls) : (sb_str(out, neg ? "[^" : "[") && sb_str(out, cls) && sb_str(out, "]"));
                if (!ok) return false;
                i++;
                continue;
            }
            /* any other escape: copy both characters */
            if (!sb_put(out, re + i, 2)) return false;
            i++;
            continue;
        }
        if (!sb_put(out, &c, 1)) return false;
    }
    return true;
}

typedef struct pretok_re {
    pcre2_code *code;
    bool collapsed;
} pretok_re;

struct pretok {
    pretok_re re[MAX_REGEX];
    int n;
};

static const pretok_def *find_def(const char *name) {
    size_t nl = strlen(name);
    for (size_t d = 0; d < sizeof k_defs / sizeof k_defs[0]; d++) {
        const char *s = k_defs[d].names;
        while (*s) {
            const char *e = strchr(s, '|');
            size_t len = e ? (size_t)(e - s) : strlen(s);
            if (len == nl && !memcmp(s, name, len)) return &k_defs[d];
            s += len + (e ? 1 : 0);
        }
    }
    return NULL;
}

void pretok_free(pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i].code);
    free(p);
}

pretok *pretok_new(const char *name, const char *path) {
    const pretok_def *def = find_def(name);
    if (!def) {
        tutti_set_error("%s: tokenizer.ggml.pre: unknown pre-tokenizer '%s' (known: %s)", path, name,
                        pretok_known_names());
        return NULL;
    }
    pretok *p = calloc(1, sizeof *p);
    if (!p) {
        tutti_set_error("%s: out of memory building the pre-tokenizer", path);
        return NULL;
    }
    for (int i = 0; i < MAX_REGEX && def->regex[i]; i++) {
        sbuf pat = {0};
        if (!translate(def->regex[i], &pat)) {
            free(pat.p);
            pretok_free(p);
            tutti_set_error("%s: pre-tokenizer '%s': cannot translate regex %d", path, name, i);
            return NULL;
        }
        int err;
        PCRE2_SIZE erroff;
        pcre2_code *code = pcre2_compile((PCRE2_SPTR)pat.p, pat.n,
                                         PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_AUTO_CAPTURE |
                                             PCRE2_NEVER_BACKSLASH_C,
                                         &err, &erroff, NULL);
        if (!code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            tutti_set_error("%s: pre-tokenizer '%s': PCRE2 cannot compile regex %d at offset %zu: %s", path, name, i,
                            (size_t)erroff, (const char *)msg);
            free(pat.p);
            pretok_free(p);
            return NULL;
        }
        free(pat.p);
        /* JIT is an optimisation only: without it pcre2_match interprets */
        (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
        p->re[p->n].code = code;
        p->re[p->n].collapsed = uses_categories(def->regex[i]);
        p->n++;
    }
    return p;
}

/* ---- splitting ---- */

/* The code point regex i sees in place of cpt. */
static uint32_t subject_cpt(uint32_t cpt, bool collapsed) {
    if (cpt < 0x80) return cpt;
    unsigned f = ucp_flags(cpt);
    if (f & UCP_WHITESPACE) return 0x0B;
    if (!collapsed) {
        /* surrogates and values above U+10FFFF cannot be UTF-8 for PCRE2;
         * no raw pattern mentions them, so any non-matching stand-in does */
        return (cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF ? SUB_OTHER : cpt;
    }
    switch (f & 0xFF) {
    case UCP_NUMBER: return SUB_NUMBER;
    case UCP_LETTER: return SUB_LETTER;
    case UCP_PUNCTUATION: return SUB_PUNCT;
    case UCP_MARK: return SUB_MARK;
    case UCP_SYMBOL: return SUB_SYMBOL;
    default: return SUB_OTHER;
    }
}

typedef struct len_list {
    size_t *v;
    size_t n, cap;
} len_list;

static bool ll_push(len_list *l, size_t x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        size_t *v = realloc(l->v, cap * sizeof *v);
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

/* Index of the code point starting at byte offset b (offs ascending, b is
 * always a code point boundary). */
static size_t cpt_at(const size_t *offs, size_t n, size_t b) {
    size_t lo = 0, hi = n; /* offs[n] is the end */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (offs[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

bool pretok_split(const pretok *p, const uint32_t *cpts, size_t n, size_t **lens_out, size_t *n_out) {
    len_list cur = {0}, next = {0};
    char *subj = NULL;
    size_t *offs = NULL;
    pcre2_match_data *md = NULL;
    bool ok = false;

    *lens_out = NULL;
    *n_out = 0;
    if (n == 0) return true;
    if (!ll_push(&cur, n)) goto oom;
    subj = malloc(4 * n + 1);
    offs = malloc((n + 1) * sizeof *offs);
    if (!subj || !offs) goto oom;

    for (int r = 0; r < p->n; r++) {
        const pretok_re *re = &p->re[r];
        /* subject text for this regex, and the byte offset of each code point */
        size_t nb = 0;
        for (size_t i = 0; i < n; i++) {
            offs[i] = nb;
            nb += utf8_encode(subject_cpt(cpts[i], re->collapsed), subj + nb);
        }
        offs[n] = nb;
        if (!md) md = pcre2_match_data_create(1, NULL);
        if (!md) goto oom;

        next.n = 0;
        size_t start = 0; /* first code point of the current piece */
        for (size_t k = 0; k < cur.n; k++) {
            size_t len = cur.v[k];
            const char *base = subj + offs[start];
            size_t blen = offs[start + len] - offs[start];
            size_t pos = 0, prev_end = 0; /* bytes, relative to base */
            while (pos <= blen) {
                uint32_t opts = PCRE2_NO_UTF_CHECK;
                int rc = pcre2_match(re->code, (PCRE2_SPTR)base, blen, pos, opts, md, NULL);
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                    rc = pcre2_match(re->code, (PCRE2_SPTR)base, blen, pos, opts | PCRE2_NO_JIT, md, NULL);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    PCRE2_UCHAR msg[256];
                    pcre2_get_error_message(rc, msg, sizeof msg);
                    tutti_set_error("pre-tokenizer regex %d failed on a %zu-byte piece: %s", r, blen,
                                    (const char *)msg);
                    goto fail;
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                size_t ms = ov[0], me = ov[1];
                if (me == ms) {
                    /* empty match (no pattern above produces one): step one code point */
                    if (ms >= blen) break;
                    size_t c = cpt_at(offs, n, offs[start] + ms);
                    pos = offs[c + 1] - offs[start];
                    continue;
                }
                size_t cms = cpt_at(offs, n, offs[start] + ms);
                size_t cme = cpt_at(offs, n, offs[start] + me);
                size_t cprev = cpt_at(offs, n, offs[start] + prev_end);
                if (cms > cprev && !ll_push(&next, cms - cprev)) goto oom;
                if (!ll_push(&next, cme - cms)) goto oom;
                prev_end = me;
                pos = me;
            }
            if (prev_end < blen) {
                size_t cprev = cpt_at(offs, n, offs[start] + prev_end);
                if (!ll_push(&next, start + len - cprev)) goto oom;
            }
            start += len;
        }
        len_list t = cur;
        cur = next;
        next = t;
    }
    *lens_out = cur.v;
    *n_out = cur.n;
    cur.v = NULL;
    ok = true;
    goto fail;
oom:
    tutti_set_error("pre-tokenizer: out of memory on %zu code points", n);
fail:
    pcre2_match_data_free(md);
    free(cur.v);
    free(next.v);
    free(subj);
    free(offs);
    return ok;
}
