/* The ensemble file's lines for context weights and selective fusion (the
 * format: tutti.h at tutti_ensemble_file, docs/commands.md "Ensemble files"):
 *
 *   context entropy top loss agree     features, in the order of the coefficients
 *   context-halflife 16                LOSS's half-life in units (default 16)
 *   context-coef 1 -0.5 0.2 1.3 0      member 1's b, one per feature
 *   select 0.05                        fuse where the disagreement >= 0.05 nats
 *
 * Files without these lines read as before; readers before them refuse the
 * lines (an unknown member file), never misread them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/ctxweights.h"
#include "ensemble/ensemble.h"
#include "util/error.h"

/* The next blank-separated word of *p into w[cap] ("" at the end). */
static const char *next_word(const char **p, char *w, size_t cap) {
    const char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    size_t k = 0;
    while (*s && *s != ' ' && *s != '\t') {
        if (k + 1 < cap) w[k++] = *s;
        s++;
    }
    w[k] = 0;
    *p = s;
    return w;
}

static bool parse_num(const char *w, double *v) {
    char *end;
    *v = strtod(w, &end);
    return *w && !*end && isfinite(*v);
}

int ens_file_weights_line(tutti_ensemble_file *ef, const char *line, int32_t *max_member) {
    char kw[32], w[64];
    const char *p = line;
    next_word(&p, kw, sizeof kw);
    tutti_context_weights *cw = &ef->context;
    double v;
    if (!strcmp(kw, "select")) {
        if (!parse_num(next_word(&p, w, sizeof w), &v) || *next_word(&p, w, sizeof w) || v < 0)
            return tutti_set_error("select needs one disagreement threshold >= 0 (nats)");
        if (tutti_check_select(v) < 0) return TUTTI_ERR;
        ef->select = v;
        return 1;
    }
    if (!strcmp(kw, "context")) {
        if (cw->n_features > 0) return tutti_set_error("context is given twice");
        while (*next_word(&p, w, sizeof w)) {
            int f = tutti_feature_parse(w);
            if (f < 0) return tutti_set_error("context: unknown feature \"%s\" (entropy, top, loss, agree)", w);
            if (cw->n_features == TUTTI_N_FEATURES)
                return tutti_set_error("context: more than %d features", TUTTI_N_FEATURES);
            cw->features[cw->n_features++] = f;
        }
        if (cw->n_features == 0)
            return tutti_set_error("context needs one or more features (entropy, top, loss, agree)");
        if (!(cw->halflife > 0)) cw->halflife = 16;
        return tutti_check_context(cw, 0) < 0 ? TUTTI_ERR : 1;
    }
    if (!strcmp(kw, "context-halflife")) {
        if (!parse_num(next_word(&p, w, sizeof w), &v) || *next_word(&p, w, sizeof w) || !(v >= TUTTI_HALFLIFE_MIN) ||
            !(v <= TUTTI_HALFLIFE_MAX))
            return tutti_set_error("context-halflife needs one half-life in [%g, %g] units", TUTTI_HALFLIFE_MIN,
                                   TUTTI_HALFLIFE_MAX);
        cw->halflife = v;
        return 1;
    }
    if (!strcmp(kw, "context-coef")) {
        if (cw->n_features == 0)
            return tutti_set_error("context-coef comes after the context line that names the features");
        if (!parse_num(next_word(&p, w, sizeof w), &v) || v != floor(v) || v < 1 || v > TUTTI_ENSEMBLE_MAX_MEMBERS)
            return tutti_set_error("context-coef needs a member number in [1, %d] first", TUTTI_ENSEMBLE_MAX_MEMBERS);
        int32_t m = (int32_t)v - 1;
        for (int32_t k = 0; k < cw->n_features; k++) {
            if (!parse_num(next_word(&p, w, sizeof w), &v) || fabs(v) > TUTTI_COEF_MAX)
                return tutti_set_error("context-coef %d needs %d coefficients (one per feature of the context line), "
                                       "each finite with |b| <= %g",
                                       m + 1, cw->n_features, TUTTI_COEF_MAX);
            cw->coef[m][k] = (float)v;
        }
        if (*next_word(&p, w, sizeof w))
            return tutti_set_error("context-coef %d: more than %d coefficients (one per feature of the context line)",
                                   m + 1, cw->n_features);
        if (m + 1 > *max_member) *max_member = m + 1;
        return 1;
    }
    return 0;
}

int ens_file_weights_done(const tutti_ensemble_file *ef, int32_t max_member) {
    if (max_member > ef->n_members)
        return tutti_set_error("context-coef for member %d, but the file has %d member%s", max_member, ef->n_members,
                               ef->n_members == 1 ? "" : "s");
    return 0;
}

int ens_file_weights_write(const tutti_ensemble *e, FILE *out) {
    if (e->select >= 0) fprintf(out, "select %.6g\n", e->select);
    const tutti_context_weights *cw = &e->ctx;
    if (cw->n_features == 0) return 0;
    fprintf(out, "context");
    for (int32_t k = 0; k < cw->n_features; k++)
        fprintf(out, " %s", tutti_feature_name((tutti_feature)cw->features[k]));
    fprintf(out, "\ncontext-halflife %.6g\n", cw->halflife);
    for (int32_t i = 0; i < e->n; i++) {
        fprintf(out, "context-coef %d", i + 1);
        for (int32_t k = 0; k < cw->n_features; k++)
            fprintf(out, " %.9g", (double)cw->coef[i][k]); /* float round trip */
        fprintf(out, "\n");
    }
    return 0;
}
