/* The table-driven flag parser shared by every command (see opts.h). */
#include "cli/opts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

#ifndef TUTTI_VERSION
#define TUTTI_VERSION "0.1.0"
#endif

bool cli_quiet = false;

const char *cli_version(void) { return TUTTI_VERSION; }

/* ---- messages ---- */

/* Drops prefixes the caller's text (often a library message) already has,
 * so that no line reads "tutti run: tutti run: ..." or "error: error: ...". */
static const char *strip_prefixes(const char *s) {
    char mine[96];
    snprintf(mine, sizeof mine, "tutti %s: ", cli_cmd);
    for (bool again = true; again;) {
        again = false;
        const char *pre[] = {mine, "tutti: ", "error: ", "Error: "};
        for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
            size_t n = strlen(pre[i]);
            if (!strncmp(s, pre[i], n)) {
                s += n;
                again = true;
            }
        }
    }
    return s;
}

static void emit(const char *kind, const char *fmt, va_list ap) {
    char raw[8192], buf[8192];
    vsnprintf(raw, sizeof raw, fmt, ap);
    tutti_redact_urls(raw, buf, sizeof buf); /* a URL's credentials never reach the terminal */
    const char *s = strip_prefixes(buf);
    /* a message that starts on a fresh line after streamed text keeps it */
    const char *lead = "";
    if (*s == '\n') {
        lead = "\n";
        s = strip_prefixes(s + 1);
    }
    size_t n = strlen(s);
    fprintf(stderr, "%stutti%s%s: %s%s%s", lead, *cli_cmd ? " " : "", cli_cmd, kind, s,
            n && s[n - 1] == '\n' ? "" : "\n");
}

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit("", fmt, ap);
    va_end(ap);
    return 2;
}

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit("", fmt, ap);
    va_end(ap);
    return 1;
}

int cli_library_error(void) {
    int kind = tutti_last_error_kind();
    cli_error("%s", tutti_last_error());
    return kind == TUTTI_ERR_UNSUPPORTED ? 2 : 1;
}

int cli_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit("warning: ", fmt, ap);
    va_end(ap);
    return 0;
}

void cli_info(const char *fmt, ...) {
    if (cli_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    char raw[8192], buf[8192];
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    fputs(tutti_redact_urls(raw, buf, sizeof buf), stderr);
}

/* ---- the table ---- */

#define MAX_OPTS 128

typedef struct flat {
    const cli_opt *o[MAX_OPTS];
    int n;
} flat;

static void flatten(const cli_opt *t, flat *f, int depth) {
    for (; t && t->type != CLI_T_END && f->n < MAX_OPTS; t++) {
        if (t->type == CLI_T_INCLUDE) {
            if (depth < 8) flatten((const cli_opt *)t->dest, f, depth + 1);
        } else {
            f->o[f->n++] = t;
        }
    }
}

/* Does `arg` (up to len bytes) equal one of the comma-separated names? */
static bool has_name(const char *names, const char *arg, size_t len) {
    for (const char *p = names; p && *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == len && !strncmp(p, arg, len)) return true;
        p = e ? e + 1 : p + n;
    }
    return false;
}

/* The first name of the list that starts with "--" (or with "-"). */
static void name_of(const char *names, bool want_long, char *out, size_t cap) {
    out[0] = 0;
    for (const char *p = names; p && *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        bool is_long = n > 2 && p[1] == '-';
        if (is_long == want_long) {
            snprintf(out, cap, "%.*s", (int)n, p);
            return;
        }
        p = e ? e + 1 : p + n;
    }
}

static bool g_given[MAX_OPTS];
static flat g_flat;

bool cli_given(const char *name) {
    for (int i = 0; i < g_flat.n; i++)
        if (g_given[i] && has_name(g_flat.o[i]->names, name, strlen(name))) return true;
    return false;
}

static void fmt_default(const cli_opt *o, char *buf, size_t cap) {
    buf[0] = 0;
    if (o->def) {
        snprintf(buf, cap, "%s", o->def);
        return;
    }
    switch (o->type) {
    case CLI_T_FLAG:
        if (o->lo != 0) snprintf(buf, cap, "%s", *(bool *)o->dest ? "on" : "off");
        break;
    case CLI_T_STR: snprintf(buf, cap, "%s", *(const char **)o->dest ? *(const char **)o->dest : "none"); break;
    case CLI_T_INT: snprintf(buf, cap, "%d", (int)*(int32_t *)o->dest); break;
    case CLI_T_FLOAT: snprintf(buf, cap, "%g", (double)*(float *)o->dest); break;
    case CLI_T_DOUBLE: snprintf(buf, cap, "%g", *(double *)o->dest); break;
    case CLI_T_SEED: {
        uint64_t s = *(uint64_t *)o->dest;
        if (s == CLI_SEED_RANDOM) snprintf(buf, cap, "-1 = random");
        else snprintf(buf, cap, "%llu", (unsigned long long)s);
        break;
    }
    case CLI_T_CHOICE: {
        int k = *(int *)o->dest;
        if (k >= 0) snprintf(buf, cap, "%s", o->choices[k]);
        break;
    }
    default: break;
    }
}

static void print_help_with(const cli_spec *spec, FILE *out, char (*defs)[64]) {
    fprintf(out, "usage: tutti %s %s\n", spec->name, spec->usage ? spec->usage : "[options]");
    if (spec->description)
        fprintf(out, "%s%s", spec->description, spec->description[strlen(spec->description) - 1] == '\n' ? "" : "\n");
    fprintf(out, "\noptions:\n");
    for (int i = 0; i < g_flat.n; i++) {
        const cli_opt *o = g_flat.o[i];
        if (o->type == CLI_T_SECTION) {
            fprintf(out, "\n%s:\n", o->help);
            continue;
        }
        if (o->flags & CLI_HIDDEN) continue;
        char s[32], l[48], head[128];
        name_of(o->names, false, s, sizeof s);
        name_of(o->names, true, l, sizeof l);
        snprintf(head, sizeof head, "  %s%s%s%s%s", s[0] ? s : "   ", s[0] && l[0] ? ", " : (s[0] ? "" : " "), l,
                 o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(out, "%-30s", head);
        if (strlen(head) >= 30) fprintf(out, "\n%-30s", "");
        for (const char *p = o->help; *p; p++) {
            fputc(*p, out);
            if (*p == '\n') fprintf(out, "%-30s", "");
        }
        /* aliases: every name besides the two shown */
        char aliases[128] = "";
        for (const char *p = o->names; *p;) {
            const char *e = strchr(p, ',');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (!((strlen(s) == n && !strncmp(p, s, n)) || (strlen(l) == n && !strncmp(p, l, n))))
                snprintf(aliases + strlen(aliases), sizeof aliases - strlen(aliases), "%s%.*s", aliases[0] ? ", " : "",
                         (int)n, p);
            p = e ? e + 1 : p + n;
        }
        if (aliases[0]) fprintf(out, " (also %s)", aliases);
        if (defs[i][0]) fprintf(out, " (default: %s)", defs[i]);
        fputc('\n', out);
    }
    fprintf(out, "\n%-30s%s\n%-30s%s\n%-30s%s\n", "      --quiet", "no progress, timings or seed on stderr",
            "  -h, --help", "this text", "      --version", "print the version and exit");
    if (spec->epilog) fprintf(out, "\n%s%s", spec->epilog, spec->epilog[strlen(spec->epilog) - 1] == '\n' ? "" : "\n");
}

void cli_print_help(const cli_spec *spec, FILE *out) {
    static char defs[MAX_OPTS][64];
    g_flat.n = 0;
    flatten(spec->opts, &g_flat, 0);
    for (int i = 0; i < g_flat.n; i++) fmt_default(g_flat.o[i], defs[i], sizeof defs[i]);
    print_help_with(spec, out, defs);
}

/* ---- values ---- */

static bool parse_i64(const char *v, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end) return false;
    *out = x;
    return true;
}

static bool parse_num(const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) return false;
    *out = x;
    return true;
}

/* ---- -hf / --hf-file (CLI_HF, CLI_HF_FILE): model specs in command-line order ---- */

static char g_specs[CLI_MAX_STRS][1024]; /* the specs made, referenced by the destinations until exit */
static int g_n_specs;
static const char **g_hf_open; /* the slot of the last -hf spec without a file yet */
static const char *g_hf_file;  /* a --hf-file given before its -hf */

/* "hf://REPO[:QUANT]", or with file "hf://REPO/FILE" (the tag dropped). */
static const char *hf_spec(const char *flag, const char *repo, const char *file) {
    if (!strncmp(repo, "hf://", 5)) repo += 5;
    if (g_n_specs == CLI_MAX_STRS) return cli_usage_error("%s: at most %d models", flag, CLI_MAX_STRS), NULL;
    char *s = g_specs[g_n_specs];
    size_t rl = file ? strcspn(repo, ":") : strlen(repo);
    if ((size_t)snprintf(s, sizeof g_specs[0], "hf://%.*s%s%s", (int)rl, repo, file ? "/" : "", file ? file : "") >=
        sizeof g_specs[0])
        return cli_usage_error("%s: '%.200s' is too long", flag, repo), NULL;
    g_n_specs++;
    return s;
}

/* Stores value v of a -hf or --hf-file flag into slot (a -m destination). */
static int take_hf(const cli_opt *o, const char *flag, const char *v, const char **slot) {
    if (o->flags & CLI_HF_FILE) {
        if (g_hf_open) { /* the file of the -hf before */
            char repo[1024];
            snprintf(repo, sizeof repo, "%s", *g_hf_open);
            const char *s = hf_spec(flag, repo, v);
            if (!s) return 2;
            *g_hf_open = s;
            g_hf_open = NULL;
        } else {
            g_hf_file = v;
        }
        return 0;
    }
    const char *s = hf_spec(flag, v, g_hf_file);
    if (!s) return 2;
    *slot = s;
    g_hf_open = g_hf_file ? NULL : slot;
    g_hf_file = NULL;
    return 0;
}

static int take_value(const cli_opt *o, const char *flag, const char *v) {
    switch (o->type) {
    case CLI_T_STR:
        if (o->flags & (CLI_HF | CLI_HF_FILE)) return take_hf(o, flag, v, (const char **)o->dest);
        *(const char **)o->dest = v;
        return 0;
    case CLI_T_STRS: {
        cli_strs *s = o->dest;
        if (o->flags & CLI_HF_FILE) return take_hf(o, flag, v, NULL);
        if (s->n == CLI_MAX_STRS) return cli_usage_error("%s: at most %d values", flag, CLI_MAX_STRS);
        if (o->flags & CLI_HF) {
            int r = take_hf(o, flag, v, &s->v[s->n]);
            if (r == 0) s->n++;
            return r;
        }
        s->v[s->n++] = v;
        return 0;
    }
    case CLI_T_INT: {
        long long x;
        if (!parse_i64(v, &x) || x < (long long)o->lo || x > (long long)o->hi)
            return cli_usage_error("%s needs an integer in [%lld, %lld], got '%s'", flag, (long long)o->lo,
                                   (long long)o->hi, v);
        *(int32_t *)o->dest = (int32_t)x;
        return 0;
    }
    case CLI_T_FLOAT:
    case CLI_T_DOUBLE: {
        double x;
        if (!parse_num(v, &x) || x < o->lo || x > o->hi)
            return cli_usage_error("%s needs a number in [%g, %g], got '%s'", flag, o->lo, o->hi, v);
        if (o->type == CLI_T_FLOAT) *(float *)o->dest = (float)x;
        else *(double *)o->dest = x;
        return 0;
    }
    case CLI_T_SEED: {
        if (!strcmp(v, "-1")) {
            *(uint64_t *)o->dest = CLI_SEED_RANDOM;
            return 0;
        }
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-' || v[0] == '+' || x == CLI_SEED_RANDOM)
            return cli_usage_error("%s needs an integer in [0, %llu] or -1 (random), got '%s'", flag,
                                   (unsigned long long)(CLI_SEED_RANDOM - 1), v);
        *(uint64_t *)o->dest = x;
        return 0;
    }
    case CLI_T_CHOICE: {
        char list[256] = "";
        for (int k = 0; o->choices[k]; k++) {
            if (!strcmp(o->choices[k], v)) {
                *(int *)o->dest = k;
                return 0;
            }
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", o->choices[k]);
        }
        return cli_usage_error("%s: '%s' is not one of %s", flag, v, list);
    }
    case CLI_T_FLOATS: {
        cli_floats *f = o->dest;
        f->n = 0;
        for (const char *p = v;;) {
            char *e;
            errno = 0;
            double x = strtod(p, &e);
            if (e == p || errno || (*e && *e != ',') || !isfinite(x) || x < o->lo || x > o->hi)
                return cli_usage_error("%s needs a comma-separated list of numbers in [%g, %g], got '%s'", flag, o->lo,
                                       o->hi, v);
            if (f->n == CLI_MAX_FLOATS) return cli_usage_error("%s: at most %d values", flag, CLI_MAX_FLOATS);
            f->v[f->n++] = (float)x;
            if (!*e) break;
            p = e + 1;
        }
        return 0;
    }
    default: return 0;
    }
}

int cli_parse(const cli_spec *spec, int argc, char **argv) {
    static char defs[MAX_OPTS][64];
    cli_cmd = spec->name;
    g_flat.n = 0;
    flatten(spec->opts, &g_flat, 0);
    memset(g_given, 0, sizeof g_given);
    g_hf_open = NULL, g_hf_file = NULL;
    /* defaults as they are before any flag changes them, for --help */
    for (int i = 0; i < g_flat.n; i++) fmt_default(g_flat.o[i], defs[i], sizeof defs[i]);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_help_with(spec, stdout, defs);
            return 0;
        }
        if (!strcmp(a, "--version")) {
            printf("tutti %s\n", cli_version());
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            cli_quiet = true;
            continue;
        }
        if (a[0] != '-' || !a[1])
            return cli_usage_error("unexpected argument '%s' (flags start with -; see tutti %s --help)", a, spec->name);
        /* --name=value */
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int k = -1;
        for (int j = 0; j < g_flat.n && k < 0; j++)
            if (g_flat.o[j]->names && has_name(g_flat.o[j]->names, a, len)) k = j;
        if (k < 0) return cli_usage_error("unknown option '%.*s' (see tutti %s --help)", (int)len, a, spec->name);
        const cli_opt *o = g_flat.o[k];
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)len, a);
        if ((o->flags & CLI_ONCE) && g_given[k])
            return cli_usage_error("%s given twice (tutti %s takes one)", flag, spec->name);
        g_given[k] = true;
        /* -m and -hf of a one-model command fill the same destination */
        for (int j = 0; j < g_flat.n && o->type == CLI_T_STR && (o->flags & CLI_ONCE); j++)
            if (j != k && g_given[j] && g_flat.o[j]->dest == o->dest &&
                !((g_flat.o[j]->flags | o->flags) & CLI_HF_FILE))
                return cli_usage_error("%s and %.*s both name the model (tutti %s takes one)", flag,
                                       (int)strcspn(g_flat.o[j]->names, ","), g_flat.o[j]->names, spec->name);
        if (o->type == CLI_T_FLAG) {
            if (eq) return cli_usage_error("%s takes no value", flag);
            *(bool *)o->dest = o->lo != 0;
            continue;
        }
        const char *v;
        if (eq) {
            v = eq + 1;
        } else if ((o->flags & CLI_OPTVAL) && (i + 1 >= argc || argv[i + 1][0] == '-')) {
            v = ""; /* given without its optional value */
        } else {
            if (i + 1 >= argc) return cli_usage_error("%s needs a value (%s)", flag, o->metavar ? o->metavar : "VALUE");
            v = argv[++i];
        }
        int r = take_value(o, flag, v);
        if (r) return r;
    }
    if (g_hf_file) return cli_usage_error("--hf-file %s needs -hf REPO (the repository it is in)", g_hf_file);
    return CLI_RUN;
}
