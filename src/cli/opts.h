/* The one flag parser of every `tutti` command (generate, run, eval, fit,
 * bench, logits, tokenize, info, serve, ...).
 *
 * A command describes its flags in a table of cli_opt (name list, value
 * type, range, destination, help line), terminated by CLI_END, and calls
 *
 *     int r = cli_parse(&spec, argc, argv);
 *     if (r != CLI_RUN) return r;
 *
 * cli_parse writes each value into its destination (which holds the default
 * beforehand), and handles for every command alike:
 *   - `--name VALUE` and `--name=VALUE` (long names), `-x VALUE` (short);
 *     `--name` alone for a flag whose value is optional (CLI_OPTVAL);
 *   - -h/--help: prints the usage from the table, every flag with its
 *     default (the destination's value before parsing, or opt.def), and
 *     returns 0; --version prints "tutti VERSION" and returns 0;
 *   - errors (unknown flag, missing or malformed value, value out of range,
 *     a CLI_ONCE flag given twice, a bad choice): one line
 *     "tutti CMD: ..." on stderr, then it returns 2 (usage error).
 * Commands add their own consistency checks after parsing and report them
 * with cli_usage_error (exit 2); runtime failures use cli_error (exit 1).
 *
 * Tables nest: CLI_INCLUDE(table) splices another table in (e.g. the
 * ensemble flags of run/eval/fit, ens_args.h), CLI_SECTION("title") starts a
 * titled group in --help; cli.h has the groups every command shares
 * (CLI_SAMPLING_OPTS, CLI_THREADS_OPT, CLI_CTX_OPT).  Example (a server):
 *
 *     const char *model = NULL, *host = "127.0.0.1";
 *     int32_t port = 8080, n_ctx = CLI_CTX_UNSET, n_threads = 0;
 *     cli_opt opts[] = {
 *         {"-m,--model", "FILE", CLI_T_STR, 0, 0, &model, "GGUF model file", "none", NULL, CLI_ONCE},
 *         CLI_STR("--host", "ADDR", &host, "address to listen on", NULL),
 *         CLI_INT("--port", "N", &port, 1, 65535, "TCP port", NULL),
 *         CLI_THREADS_OPT(&n_threads),
 *         CLI_CTX_OPT(&n_ctx, " per slot"),
 *         CLI_END,
 *     };
 *     const cli_spec spec = {.name = "serve", .usage = "-m MODEL [options]",
 *                            .description = "An HTTP server ...", .opts = opts};
 *     int r = cli_parse(&spec, argc, argv);
 *     if (r != CLI_RUN) return r;
 *     if (!model) return cli_usage_error("need -m MODEL");
 *
 * Defaults shown by --help: opt.def when set, else the destination's value
 * (so initialise destinations before cli_parse). */
#ifndef TUTTI_CLI_OPTS_H
#define TUTTI_CLI_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* cli_parse's "go on" result (any other value is the exit status). */
#define CLI_RUN (-1)
/* Seed value meaning "draw one from the system's entropy" (--seed -1). */
#define CLI_SEED_RANDOM UINT64_MAX
/* Most values a CLI_STRS flag collects (--stop, --allow, ...). */
#define CLI_MAX_STRS 64
/* Largest -t the sessions accept (tutti_session_new refuses more). */
#define CLI_MAX_THREADS 512

typedef enum cli_opt_type {
    CLI_T_END = 0, /* end of a table */
    CLI_T_SECTION, /* help: a group title (help = title) */
    CLI_T_INCLUDE, /* splice the table at dest (const cli_opt *) */
    CLI_T_FLAG,    /* no value: *(bool *)dest = (bool)lo (1 = on, 0 = off, e.g. --no-escape) */
    CLI_T_STR,     /* *(const char **)dest = the value (borrowed from argv) */
    CLI_T_STRS,    /* repeatable: appended to *(cli_strs *)dest */
    CLI_T_INT,     /* *(int32_t *)dest, integer in [lo, hi] */
    CLI_T_FLOAT,   /* *(float *)dest, finite number in [lo, hi] */
    CLI_T_DOUBLE,  /* *(double *)dest, finite number in [lo, hi] */
    CLI_T_SEED,    /* *(uint64_t *)dest: 0 .. 2^64-2, or -1 = CLI_SEED_RANDOM */
    CLI_T_CHOICE,  /* *(int *)dest = index of the value in choices (NULL-terminated) */
    CLI_T_FLOATS,  /* "1,0.5,2": *(cli_floats *)dest, each finite and in [lo, hi] */
} cli_opt_type;

/* Option bits. */
#define CLI_ONCE 1u   /* giving the flag twice is an error ("-m given twice") */
#define CLI_HIDDEN 2u /* accepted but not listed in --help */
#define CLI_OPTVAL \
    4u /* CLI_T_STR whose value may be left out: `--name` alone stores "";
                         `--name VALUE` takes the next word only when it does not start with '-' */
#define CLI_HF \
    8u /* -hf: the value REPO[:QUANT] goes into the destination (CLI_T_STR or CLI_T_STRS, the
                          same as -m's) as the model spec "hf://REPO[:QUANT]", in command-line order */
#define CLI_HF_FILE \
    16u /* --hf-file FILE: the -hf before it (else the next one) becomes "hf://REPO/FILE"
                           (the file replaces the quant tag, as in llama.cpp) */

typedef struct cli_strs {
    const char *v[CLI_MAX_STRS];
    int n;
} cli_strs;

#define CLI_MAX_FLOATS 32
typedef struct cli_floats {
    float v[CLI_MAX_FLOATS];
    int n; /* 0 = not given */
} cli_floats;

typedef struct cli_opt {
    /* Comma-separated names, e.g. "-c,--ctx-size,--ctx": the first short and
     * the first long name are shown in --help, the rest are aliases kept for
     * old command lines (listed as such). */
    const char *names;
    const char *metavar; /* value placeholder in --help ("N", "FILE"); NULL for flags */
    cli_opt_type type;
    double lo, hi; /* range (INT, FLOAT, DOUBLE, FLOATS); FLAG: value stored */
    void *dest;
    const char *help;           /* one line (may contain '\n' for more) */
    const char *def;            /* default as shown in --help; NULL = the destination's value */
    const char *const *choices; /* CHOICE */
    unsigned flags;
} cli_opt;

/* Table-entry helpers. */
#define CLI_END \
    { NULL, NULL, CLI_T_END, 0, 0, NULL, NULL, NULL, NULL, 0 }
#define CLI_SECTION(title) \
    { NULL, NULL, CLI_T_SECTION, 0, 0, NULL, (title), NULL, NULL, 0 }
#define CLI_INCLUDE(table) \
    { NULL, NULL, CLI_T_INCLUDE, 0, 0, (void *)(table), NULL, NULL, NULL, 0 }
#define CLI_FLAG(names, dest, help) \
    { (names), NULL, CLI_T_FLAG, 1, 0, (dest), (help), NULL, NULL, 0 }
#define CLI_FLAG_OFF(names, dest, help) \
    { (names), NULL, CLI_T_FLAG, 0, 0, (dest), (help), NULL, NULL, 0 }
#define CLI_STR(names, meta, dest, help, def) \
    { (names), (meta), CLI_T_STR, 0, 0, (dest), (help), (def), NULL, 0 }
#define CLI_STRS(names, meta, dest, help) \
    { (names), (meta), CLI_T_STRS, 0, 0, (dest), (help), "none", NULL, 0 }
#define CLI_INT(names, meta, dest, lo, hi, help, def) \
    { (names), (meta), CLI_T_INT, (lo), (hi), (dest), (help), (def), NULL, 0 }
#define CLI_FLOAT(names, meta, dest, lo, hi, help, def) \
    { (names), (meta), CLI_T_FLOAT, (lo), (hi), (dest), (help), (def), NULL, 0 }
#define CLI_DOUBLE(names, meta, dest, lo, hi, help, def) \
    { (names), (meta), CLI_T_DOUBLE, (lo), (hi), (dest), (help), (def), NULL, 0 }
#define CLI_SEED(names, dest, help) \
    { (names), "N", CLI_T_SEED, 0, 0, (dest), (help), NULL, NULL, 0 }
#define CLI_CHOICE(names, meta, dest, choices, help, def) \
    { (names), (meta), CLI_T_CHOICE, 0, 0, (dest), (help), (def), (choices), 0 }
#define CLI_FLOATS(names, meta, dest, lo, hi, help, def) \
    { (names), (meta), CLI_T_FLOATS, (lo), (hi), (dest), (help), (def), NULL, 0 }

typedef struct cli_spec {
    const char *name;        /* the command ("generate"); also sets cli_cmd */
    const char *usage;       /* after "usage: tutti NAME ", e.g. "-m MODEL -p TEXT [options]" */
    const char *description; /* paragraph(s) printed under the usage line */
    const cli_opt *opts;     /* the table */
    const char *epilog;      /* printed after the flags (NULL = none) */
} cli_spec;

/* Parses argv[0..argc) (the words after the command name).  Returns CLI_RUN
 * to go on, 0 after --help/--version, 2 after printing a usage error. */
int cli_parse(const cli_spec *spec, int argc, char **argv);
/* Writes --help (usage, description, every flag with its default). */
void cli_print_help(const cli_spec *spec, FILE *out);
/* true when the flag called `name` (any of its names, e.g. "--seed") was
 * given on the command line of the last cli_parse call. */
bool cli_given(const char *name);

/* Messages: "tutti CMD: " + the formatted text + "\n" on stderr.  A prefix
 * the text already has ("tutti CMD: ", "tutti: ", "error: ") is not
 * repeated.  cli_usage_error returns 2, cli_error returns 1, cli_warn 0, so
 * a command can `return cli_usage_error("...")`. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A library call failed: its message (tutti_last_error) on stderr, and the
 * exit status its kind says: 2 when the caller's arguments caused it
 * (tutti_last_error_kind() == TUTTI_ERR_UNSUPPORTED: a flag value or a
 * combination of flags), else 1. */
int cli_library_error(void);
/* Informational line on stderr (progress, timings, "seed: N"), suppressed
 * by --quiet (cli_quiet). */
void cli_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern bool cli_quiet;

const char *cli_version(void);

#endif
