/* `format` as automata of the strings it admits, each a subset of what its
 * RFC and python-jsonschema's checker accept (so a grammar never admits a
 * string a validator rejects):
 *   date       RFC 3339 full-date: real days only (30 days hath September,
 *              February 29 in leap years: divisible by 4, centuries by
 *              400), years 0001-9999 (Python's date has no year 0)
 *   time       RFC 3339 partial-time with a required offset (Z, z, +hh:mm),
 *              as python-jsonschema checks it (rfc3339-validator)
 *   date-time  date "T" time (t accepted as Python upper-cases first)
 *   uuid       8-4-4-4-12 hex digits
 *   ipv4       dotted quad, 0-255, no leading zeros (Python's ipaddress)
 *   ipv6       RFC 4291 text forms: 8 groups, "::" once, an IPv4 tail
 *   hostname   RFC 1123 labels of letters, digits and inner hyphens; at
 *              most 8 labels of at most 30 characters (the RFC's 63 per
 *              label and 253 in all, without counting to 253)
 *   email      dot-atom local part "@" a hostname
 *   uri, iri   RFC 3986 absolute URI (scheme ":" hier-part [? query]
 *              [# fragment]); uri-reference, iri-reference also relative
 *              references; hosts as registered names or IPv4
 *   json-pointer, relative-json-pointer   RFC 6901 and its draft
 *   regex      strings without regex syntax characters (always a valid
 *              regex)
 * Formats a validator checks but that are not here (duration,
 * uri-template, idn-hostname) are refused; other names are annotations
 * (the JSON Schema specification: unknown formats are ignored). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/js_format.h"
#include "grammar/regex.h"

#define DAY31 "(?:0[1-9]|[12][0-9]|3[01])"
#define DAY30 "(?:0[1-9]|[12][0-9]|30)"
#define DAY28 "(?:0[1-9]|1[0-9]|2[0-8])"
#define MONTH_DAY "(?:(?:0[13578]|1[02])-" DAY31 "|(?:0[469]|11)-" DAY30 "|02-" DAY28 ")"
#define LEAP "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
#define YEAR "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
#define DATE "(?:" YEAR "-" MONTH_DAY "|" LEAP "-02-29)"
#define TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define OCT "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#define IPV4 "(?:" OCT "\\." OCT "\\." OCT "\\." OCT ")"
#define LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,28}[A-Za-z0-9])?"
#define HOST "(?:" LABEL "(?:\\." LABEL "){0,7}\\.?)"
#define ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
/* RFC 3986 */
#define PCT "%[0-9A-Fa-f]{2}"
#define UNRES "A-Za-z0-9._~\\-"
#define SUBD "!$&'()*+,;="
#define PCHAR "(?:[" UNRES SUBD ":@]|" PCT ")"
#define SCHEME "[A-Za-z][A-Za-z0-9+.-]*"
#define USERINFO "(?:[" UNRES SUBD ":]|" PCT ")*"
#define REGNAME "(?:[" UNRES SUBD "]|" PCT ")*"
#define AUTHORITY "(?:" USERINFO "@)?" REGNAME "(?::[0-9]*)?"
#define PATH_ABEMPTY "(?:/" PCHAR "*)*"
#define PATH_ABS "/(?:" PCHAR "+(?:/" PCHAR "*)*)?"
#define PATH_ROOTLESS PCHAR "+(?:/" PCHAR "*)*"
#define PATH_NOSCHEME "(?:[" UNRES SUBD "@]|" PCT ")+(?:/" PCHAR "*)*"
#define QUERY "(?:\\?(?:" PCHAR "|[/?])*)?"
#define FRAG "(?:#(?:" PCHAR "|[/?])*)?"
#define URI SCHEME ":(?://" AUTHORITY PATH_ABEMPTY "|" PATH_ABS "|" PATH_ROOTLESS "|)" QUERY FRAG
#define RELREF "(?://" AUTHORITY PATH_ABEMPTY "|" PATH_ABS "|" PATH_NOSCHEME "|)" QUERY FRAG

static fsa *ipv6(void) {
    /* G groups, "::" once replacing at least one group, or an IPv4 tail */
    const char *g = "[0-9A-Fa-f]{1,4}";
    sbuf b = {0};
    sb_printf(&b, "^(?:(?:%s:){7}%s|(?:%s:){6}" IPV4, g, g, g);
    for (int tail = 0; tail < 2; tail++) {
        int groups = tail ? 6 : 8; /* the IPv4 tail stands for two groups */
        for (int l = 0; l < groups; l++)
            for (int r = 0; l + r < groups; r++) {
                /* l groups, "::", r groups (then the tail) */
                sb_puts(&b, "|");
                for (int k = 0; k < l; k++) sb_printf(&b, "%s%s", g, k + 1 < l ? ":" : "");
                sb_puts(&b, "::");
                for (int k = 0; k < r; k++) sb_printf(&b, "%s%s", g, k + 1 < r || tail ? ":" : "");
                if (tail) sb_puts(&b, IPV4);
            }
    }
    sb_puts(&b, ")$");
    fsa *a = b.oom ? NULL : rx_compile(b.s, b.n, RX_SUBSET);
    free(b.s);
    return a;
}

typedef struct fmt {
    const char *name, *re;
} fmt;

static const fmt k_formats[] = {
    {"date", "^" DATE "$"},
    {"time", "^" TIME "$"},
    {"date-time", "^" DATE "[Tt]" TIME "$"},
    {"uuid", "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"},
    {"ipv4", "^" IPV4 "$"},
    {"hostname", "^" HOST "$"},
    {"email", "^" ATEXT "+(?:\\." ATEXT "+)*@" HOST "$"},
    {"idn-email", "^" ATEXT "+(?:\\." ATEXT "+)*@" HOST "$"},
    {"uri", "^" URI "$"},
    {"iri", "^" URI "$"},
    {"uri-reference", "^(?:" URI "|" RELREF ")$"},
    {"iri-reference", "^(?:" URI "|" RELREF ")$"},
    {"json-pointer", "^(?:/(?:[^~/]|~[01])*)*$"},
    {"relative-json-pointer", "^(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)$"},
    {"regex", "^[^\\\\^$.|?*+()\\[\\]{}]*$"},
};

static const char *const k_refused[] = {"duration", "uri-template", "idn-hostname", NULL};

int js_format(const char *name, fsa **out) {
    *out = NULL;
    if (!strcmp(name, "ipv6")) {
        *out = ipv6();
        return *out ? 1 : TUTTI_ERR;
    }
    for (size_t i = 0; i < sizeof k_formats / sizeof k_formats[0]; i++)
        if (!strcmp(name, k_formats[i].name)) {
            *out = rx_compile(k_formats[i].re, strlen(k_formats[i].re), RX_SUBSET);
            return *out ? 1 : TUTTI_ERR;
        }
    for (int i = 0; k_refused[i]; i++)
        if (!strcmp(name, k_refused[i])) return -2;
    return 0;
}
