/* The ensemble file (tutti run/eval/serve -e FILE; tutti fit writes one):
 * one member per line, MODEL [WEIGHT [TEMP]], and the settings rule, align,
 * adapt and route.  The format is in src/cli/ens_args.h (--help) and the
 * README. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ensemble/ensemble.h"
#include "fusion/ensemble_impl.h"
#include "member/remote.h"
#include "util/error.h"

#define FIELD_MAX 4096

/* One line split into at most 3 fields (blanks between; "..." keeps
 * blanks).  Returns the count, or -1 + error. */
static int split_fields(char *p, char tok[3][FIELD_MAX], const char *path, int lineno) {
    int nt = 0;
    while (*p && nt < 3) {
        size_t k = 0;
        if (*p == '"') {
            p++;
            while (*p && *p != '"' && k < FIELD_MAX - 1) tok[nt][k++] = *p++;
            if (*p != '"') return tutti_set_error("ensemble file %s: line %d: unterminated quote", path, lineno);
            p++;
        } else {
            while (*p && *p != ' ' && *p != '\t' && k < FIELD_MAX - 1) tok[nt][k++] = *p++;
        }
        tok[nt++][k] = 0;
        while (*p == ' ' || *p == '\t') p++;
    }
    if (*p)
        return tutti_set_error("ensemble file %s: line %d: expected `MODEL [WEIGHT [TEMP]]`, found extra text \"%s\"",
                               path, lineno, p);
    return nt;
}

/* The line without its comment and surrounding blanks ("" when empty). */
static char *strip_line(char *line) {
    /* '#' starts a comment where a field could start (line start, after a
     * blank), so a remote member's URL#MODEL keeps its '#' */
    for (char *q = line; *q; q++)
        if (*q == '#' && (q == line || q[-1] == ' ' || q[-1] == '\t')) {
            *q = 0;
            break;
        }
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    char *end = p + strlen(p);
    while (end > p && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
    return p;
}

/* A setting line (route, adapt, rule, align): 1 when it was one, 0 when
 * the line is a member, -1 + error. */
static int read_setting(tutti_ensemble_file *ef, char tok[3][FIELD_MAX], int nt, const char *path, int lineno) {
    if (!strcmp(tok[0], "route") || !strcmp(tok[0], "adapt")) {
        bool route = tok[0][0] == 'r';
        char *e2 = NULL;
        double v = nt == 2 ? strtod(tok[1], &e2) : NAN;
        if (nt != 2 || e2 == tok[1] || *e2)
            return tutti_set_error("ensemble file %s: line %d: %s needs one number (%s)", path, lineno, tok[0],
                                   route ? "the temperature tau, nats per byte" : "the fixed-share alpha");
        if ((route ? tutti_check_route(v) : tutti_check_adapt(v)) < 0) {
            tutti_error_prefix("ensemble file %s: line %d", path, lineno);
            return TUTTI_ERR;
        }
        if (route) ef->route = v;
        else ef->adapt = v;
        return 1;
    }
    if (!strcmp(tok[0], "rule") || !strcmp(tok[0], "align")) {
        bool is_rule = tok[0][0] == 'r';
        int v = nt == 2 ? (is_rule ? tutti_rule_parse(tok[1]) : tutti_align_parse(tok[1])) : -1;
        if (v < 0)
            return tutti_set_error("ensemble file %s: line %d: %s must be one of %s", path, lineno, tok[0],
                                   is_rule ? "mix, product, gate, contrastive" : "auto, token, byte, span");
        if (is_rule) ef->rule = v;
        else ef->align = v;
        return 1;
    }
    return 0;
}

/* A member line: MODEL [WEIGHT [TEMP]], MODEL relative to dir. */
static int read_member(tutti_ensemble_file *ef, char tok[3][FIELD_MAX], int nt, const char *dir, const char *path,
                       int lineno) {
    if (ef->n_members == TUTTI_ENSEMBLE_MAX_MEMBERS)
        return tutti_set_error("ensemble file %s: line %d: more than %d members", path, lineno,
                               TUTTI_ENSEMBLE_MAX_MEMBERS);
    tutti_member_desc *m = &ef->members[ef->n_members];
    m->weight = NAN, m->temp = NAN;
    for (int k = 1; k < nt; k++) {
        char *e2;
        float v = strtof(tok[k], &e2);
        if (e2 == tok[k] || *e2 || !isfinite(v))
            return tutti_set_error("ensemble file %s: line %d: %s \"%s\" is not a finite number", path, lineno,
                                   k == 1 ? "weight" : "temperature", tok[k]);
        if (k == 2 && tutti_check_temp(ef->n_members + 1, v) < 0) {
            tutti_error_prefix("ensemble file %s: line %d", path, lineno);
            return TUTTI_ERR;
        }
        if (k == 1) m->weight = v;
        else m->temp = v;
    }
    char full[3 * FIELD_MAX];
    if (fusion_is_remote_spec(tok[0])) {
        if (fusion_remote_spec_resolve(tok[0], dir, full, sizeof full) < 0) {
            tutti_error_prefix("ensemble file %s: line %d", path, lineno);
            return TUTTI_ERR;
        }
    } else if (tok[0][0] != '/' && dir[0] && !tutti_is_hub_spec(tok[0])) {
        snprintf(full, sizeof full, "%s%s", dir, tok[0]);
    } else {
        snprintf(full, sizeof full, "%s", tok[0]);
    }
    if (!(m->model_path = strdup(full))) return tutti_set_error("ensemble file %s: out of memory", path);
    ef->n_members++;
    return 0;
}

static int read_lines(tutti_ensemble_file *ef, FILE *f, const char *path) {
    char dir[FIELD_MAX] = "";
    const char *slash = strrchr(path, '/');
    if (slash && (size_t)(slash - path) < sizeof dir - 1) {
        memcpy(dir, path, (size_t)(slash - path + 1));
        dir[slash - path + 1] = 0;
    }
    char line[FIELD_MAX], tok[3][FIELD_MAX];
    for (int lineno = 1; fgets(line, sizeof line, f); lineno++) {
        char *p = strip_line(line);
        if (!*p) continue;
        int nt = split_fields(p, tok, path, lineno), r = nt < 0 ? -1 : read_setting(ef, tok, nt, path, lineno);
        if (r < 0 || (r == 0 && read_member(ef, tok, nt, dir, path, lineno) < 0)) return TUTTI_ERR;
    }
    if (ef->n_members == 0)
        return tutti_set_error("ensemble file %s: no members (one line per member: MODEL WEIGHT TEMP)", path);
    return 0;
}

tutti_ensemble_file *tutti_ensemble_file_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return tutti_set_error("ensemble file %s: cannot open", path), NULL;
    tutti_ensemble_file *ef = calloc(1, sizeof *ef);
    if (ef) ef->members = calloc(TUTTI_ENSEMBLE_MAX_MEMBERS, sizeof(tutti_member_desc));
    if (!ef || !ef->members) {
        tutti_set_error("ensemble file %s: out of memory", path);
    } else {
        ef->rule = ef->align = -1;
        ef->adapt = -1;
        ef->route = -1;
        if (read_lines(ef, f, path) == 0) {
            fclose(f);
            return ef;
        }
    }
    fclose(f);
    tutti_ensemble_file_free(ef);
    return NULL;
}

void tutti_ensemble_file_free(tutti_ensemble_file *ef) {
    if (!ef) return;
    if (ef->members)
        for (int32_t i = 0; i < ef->n_members; i++) free((char *)ef->members[i].model_path);
    free(ef->members);
    free(ef);
}

int tutti_ensemble_file_write(const tutti_ensemble *e, FILE *out) {
    fprintf(out, "# tutti ensemble: MODEL WEIGHT TEMP per line\n");
    fprintf(out, "rule %s\nalign %s\n", tutti_rule_name(e->rule), tutti_align_name(e->align));
    if (e->adapt_on) fprintf(out, "adapt %.6g\n", e->adapt_alpha);
    if (e->route_tau > 0) fprintf(out, "route %.6g\n", e->route_tau);
    for (int32_t i = 0; i < e->n; i++) {
        /* Absolute paths: the reader resolves relative ones against the
         * file's folder, and the writer does not know where the file goes
         * (a FILE *), so a path relative to the working directory would
         * name another file (or none) once read back. */
        char abs[PATH_MAX];
        const char *p = e->path[i];
        /* absolute paths and remote members stay as they are (a model of
         * the hub's cache keeps its file's name, not its blob's) */
        char cwd[PATH_MAX];
        if (p[0] != '/' && !fusion_is_remote_spec(p) && !(p = realpath(e->path[i], abs)) && getcwd(cwd, sizeof cwd) &&
            (size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, e->path[i]) < sizeof abs)
            p = abs;
        if (!p) p = e->path[i];
        if (strchr(p, '"') || strchr(p, '\n'))
            return tutti_set_error("ensemble file: member %d's path %s cannot be written (it holds a quote or a "
                                   "newline)",
                                   i + 1, p);
        bool q = strpbrk(p, " \t#") != NULL;
        fprintf(out, "%s%s%s %.6g %.4g\n", q ? "\"" : "", p, q ? "\"" : "", (double)e->w[i], (double)e->temp[i]);
    }
    return ferror(out) ? tutti_set_error("ensemble file: write error") : 0;
}
