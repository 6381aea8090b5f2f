/* Unicode helpers of the tokenizer: code point classes, the lenient UTF-8
 * decoder llama.cpp uses, and GPT-2's byte <-> code point mapping. */
#include "tokenizer/tok_impl.h"

typedef struct ucp_range {
    uint32_t first;
    uint16_t flags;
} ucp_range;

/* (first code point, flags) of every run of equal flags, ascending; a run
 * ends where the next begins, the last one at U+10FFFF. */
static const ucp_range k_ranges[] = {
#include "tokenizer/unicode_flags.inc"
};

unsigned ucp_flags(uint32_t cpt) {
    if (cpt >= 0x110000) return UCP_UNASSIGNED;
    /* binary search for the last range starting at or before cpt */
    size_t lo = 0, hi = sizeof k_ranges / sizeof k_ranges[0];
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (k_ranges[mid].first <= cpt) lo = mid;
        else hi = mid;
    }
    return k_ranges[lo].flags;
}

uint32_t utf8_decode_lenient(const unsigned char *s, size_t n, size_t *i) {
    size_t k = *i;
    unsigned c = s[k];
    uint32_t cpt = 0;
    size_t len = 0;
#define CONT(j) (k + (j) < n && (s[k + (j)] & 0xC0) == 0x80)
    if (!(c & 0x80)) {
        *i = k + 1;
        return c;
    }
    if ((c & 0xE0) == 0xC0) {
        if (CONT(1)) {
            cpt = ((c & 0x1Fu) << 6) | (s[k + 1] & 0x3Fu);
            len = cpt >= 0x80 ? 2 : 0;
        }
    } else if ((c & 0xF0) == 0xE0) {
        if (CONT(1) && CONT(2)) {
            cpt = ((c & 0x0Fu) << 12) | ((s[k + 1] & 0x3Fu) << 6) | (s[k + 2] & 0x3Fu);
            len = cpt >= 0x800 ? 3 : 0;
        }
    } else if ((c & 0xF8) == 0xF0) {
        if (CONT(1) && CONT(2) && CONT(3)) {
            cpt = ((c & 0x07u) << 18) | ((s[k + 1] & 0x3Fu) << 12) | ((s[k + 2] & 0x3Fu) << 6) | (s[k + 3] & 0x3Fu);
            len = cpt >= 0x10000 && cpt <= 0x10FFFF ? 4 : 0;
        }
    }
#undef CONT
    if (len) {
        *i = k + len;
        return cpt;
    }
    *i = k + 1;
    return 0xFFFD;
}

size_t utf8_encode(uint32_t cpt, char *out) {
    if (cpt <= 0x7F) {
        out[0] = (char)cpt;
        return 1;
    }
    if (cpt <= 0x7FF) {
        out[0] = (char)(0xC0 | (cpt >> 6));
        out[1] = (char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt <= 0xFFFF) {
        out[0] = (char)(0xE0 | (cpt >> 12));
        out[1] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    if (cpt <= 0x10FFFF) {
        out[0] = (char)(0xF0 | (cpt >> 18));
        out[1] = (char)(0x80 | ((cpt >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cpt & 0x3F));
        return 4;
    }
    return 0;
}

/* GPT-2 (openai/gpt-2 encoder.py, bytes_to_unicode): the printable bytes
 * '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68
 * bytes, in increasing order, get U+0100, U+0101, ... */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t byte_to_ucp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    /* non-printable bytes: 0x00..0x20 (33), 0x7F..0xA0 (34), 0xAD */
    if (b <= 0x20) return 0x100u + b;
    if (b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int ucp_to_byte(uint32_t cpt) {
    if (cpt < 0x100) return byte_is_printable(cpt) ? (int)cpt : -1;
    uint32_t n = cpt - 0x100;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7F + (n - 33));
    if (n == 67) return 0xAD;
    return -1;
}
