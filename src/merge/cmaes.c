/* CMA-ES (see cmaes.h): Hansen's tutorial, arXiv:1604.00772, Appendix A
 * and Table 1.  Notation as there: n dimensions, lambda samples, mu parents,
 * weights w_i, mu_eff, c_sigma, d_sigma, c_c, c_1, c_mu, chi_n = E||N(0, I)||. */
#include "merge/cmaes.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct cmaes {
    int n, lambda, mu;
    double *w; /* [mu] recombination weights, sum 1 */
    double mu_eff, c_sigma, d_sigma, c_c, c_1, c_mu, chi_n;
    double sigma;
    double *m, *p_sigma, *p_c; /* [n] */
    double *C, *B, *D;         /* [n x n], [n x n] eigenvectors (columns), [n] sqrt of eigenvalues */
    double *x, *y;             /* [lambda x n] candidates and their steps (x - m) / sigma */
    double *tmp;               /* [n] */
    int *order;                /* [lambda] */
    const double *f_sort;      /* fitness of the generation being ranked */
    long gen;
    uint64_t rng;
    bool have_spare;
    double spare;
};

static double uniform01(cmaes *c) { /* (0, 1] from splitmix64 */
    uint64_t z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)((z >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static double normal(cmaes *c) { /* Box-Muller, both values used */
    if (c->have_spare) {
        c->have_spare = false;
        return c->spare;
    }
    double r = sqrt(-2.0 * log(uniform01(c))), a = 2.0 * M_PI * uniform01(c);
    c->spare = r * sin(a);
    c->have_spare = true;
    return r * cos(a);
}

void cmaes_eigen_sym(int n, const double *a, double *w, double *v) {
    double *A = malloc(sizeof(double) * (size_t)n * (size_t)n);
    if (!A) return;
    memcpy(A, a, sizeof(double) * (size_t)n * (size_t)n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) v[i * n + j] = i == j;
    double total = 0;
    for (int i = 0; i < n * n; i++) total += A[i] * A[i];
    for (int sweep = 0; sweep < 64; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) off += A[p * n + q] * A[p * n + q];
        if (off <= 1e-30 * total || off == 0) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = A[p * n + q];
                if (apq == 0) continue;
                /* the rotation in the (p, q) plane that zeroes A[p][q] */
                double theta = (A[q * n + q] - A[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
                double cs = 1 / sqrt(t * t + 1), sn = t * cs;
                double app = A[p * n + p], aqq = A[q * n + q];
                for (int k = 0; k < n; k++) {
                    if (k == p || k == q) continue;
                    double akp = A[k * n + p], akq = A[k * n + q];
                    A[k * n + p] = A[p * n + k] = cs * akp - sn * akq;
                    A[k * n + q] = A[q * n + k] = sn * akp + cs * akq;
                }
                A[p * n + p] = cs * cs * app - 2 * cs * sn * apq + sn * sn * aqq;
                A[q * n + q] = sn * sn * app + 2 * cs * sn * apq + cs * cs * aqq;
                A[p * n + q] = A[q * n + p] = 0;
                for (int k = 0; k < n; k++) {
                    double vkp = v[k * n + p], vkq = v[k * n + q];
                    v[k * n + p] = cs * vkp - sn * vkq;
                    v[k * n + q] = sn * vkp + cs * vkq;
                }
            }
    }
    for (int i = 0; i < n; i++) w[i] = A[i * n + i];
    free(A);
}

void cmaes_free(cmaes *c) {
    if (!c) return;
    free(c->w), free(c->m), free(c->p_sigma), free(c->p_c), free(c->C), free(c->B), free(c->D);
    free(c->x), free(c->y), free(c->tmp), free(c->order);
    free(c);
}

cmaes *cmaes_new(int n, const double *x0, double sigma0, int lambda, uint64_t seed) {
    if (n < 1 || !(sigma0 > 0)) return NULL;
    cmaes *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->n = n;
    c->lambda = lambda > 1 ? lambda : 4 + (int)floor(3 * log((double)n));
    c->mu = c->lambda / 2;
    c->sigma = sigma0;
    c->rng = seed * 0x2545F4914F6CDD1Dull + 0x1234567ull;
    size_t nn = (size_t)n * (size_t)n, ln = (size_t)c->lambda * (size_t)n;
    c->w = malloc(sizeof(double) * (size_t)c->mu);
    c->m = malloc(sizeof(double) * (size_t)n);
    c->p_sigma = calloc((size_t)n, sizeof(double));
    c->p_c = calloc((size_t)n, sizeof(double));
    c->C = calloc(nn, sizeof(double));
    c->B = calloc(nn, sizeof(double));
    c->D = malloc(sizeof(double) * (size_t)n);
    c->x = malloc(sizeof(double) * ln);
    c->y = malloc(sizeof(double) * ln);
    c->tmp = malloc(sizeof(double) * (size_t)n);
    c->order = malloc(sizeof(int) * (size_t)c->lambda);
    if (!c->w || !c->m || !c->p_sigma || !c->p_c || !c->C || !c->B || !c->D || !c->x || !c->y || !c->tmp || !c->order) {
        cmaes_free(c);
        return NULL;
    }
    memcpy(c->m, x0, sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) c->C[i * n + i] = c->B[i * n + i] = c->D[i] = 1;
    /* Table 1: w'_i = ln((lambda + 1) / 2) - ln i, i = 1..mu, normalized */
    double ws = 0, ws2 = 0;
    for (int i = 0; i < c->mu; i++) ws += c->w[i] = log((c->lambda + 1) / 2.0) - log(i + 1.0);
    for (int i = 0; i < c->mu; i++) c->w[i] /= ws, ws2 += c->w[i] * c->w[i];
    double me = c->mu_eff = 1 / ws2, dn = n;
    c->c_sigma = (me + 2) / (dn + me + 5);
    c->d_sigma = 1 + 2 * fmax(0, sqrt((me - 1) / (dn + 1)) - 1) + c->c_sigma;
    c->c_c = (4 + me / dn) / (dn + 4 + 2 * me / dn);
    c->c_1 = 2 / ((dn + 1.3) * (dn + 1.3) + me);
    c->c_mu = fmin(1 - c->c_1, 2 * (me - 2 + 1 / me) / ((dn + 2) * (dn + 2) + me));
    c->chi_n = sqrt(dn) * (1 - 1 / (4 * dn) + 1 / (21 * dn * dn));
    return c;
}

int cmaes_lambda(const cmaes *c) { return c->lambda; }
const double *cmaes_candidate(const cmaes *c, int k) { return c->x + (size_t)k * (size_t)c->n; }
const double *cmaes_mean(const cmaes *c) { return c->m; }
double cmaes_sigma(const cmaes *c) { return c->sigma; }

void cmaes_ask(cmaes *c) {
    int n = c->n;
    for (int k = 0; k < c->lambda; k++) {
        double *y = c->y + (size_t)k * (size_t)n, *x = c->x + (size_t)k * (size_t)n;
        for (int i = 0; i < n; i++) c->tmp[i] = c->D[i] * normal(c); /* D z */
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int j = 0; j < n; j++) s += c->B[i * n + j] * c->tmp[j]; /* B D z */
            y[i] = s;
            x[i] = c->m[i] + c->sigma * s;
        }
    }
}

static int cmp_fit(const void *a, const void *b, void *ctx) {
    const double *f = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    if (f[i] != f[j]) return f[i] < f[j] ? -1 : 1;
    return i - j; /* ties: the earlier sample */
}

/* insertion sort of order by f (stable, deterministic; lambda is small) */
static void rank(int *order, int lambda, const double *f) {
    for (int k = 0; k < lambda; k++) order[k] = k;
    for (int k = 1; k < lambda; k++) {
        int v = order[k], j = k - 1;
        while (j >= 0 && cmp_fit(&order[j], &v, (void *)f) > 0) order[j + 1] = order[j], j--;
        order[j + 1] = v;
    }
}

void cmaes_tell(cmaes *c, const double *f) {
    int n = c->n;
    rank(c->order, c->lambda, f);
    /* y_w = sum_i w_i y_(i:lambda); m += sigma y_w */
    double *yw = c->tmp;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < c->mu; k++) s += c->w[k] * c->y[(size_t)c->order[k] * (size_t)n + (size_t)i];
        yw[i] = s;
        c->m[i] += c->sigma * s;
    }
    /* p_sigma with C^(-1/2) y_w = B D^-1 B^T y_w */
    double *btw = malloc(sizeof(double) * (size_t)n);
    if (!btw) return;
    for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += c->B[i * n + j] * yw[i];
        btw[j] = s / c->D[j];
    }
    double ps_norm = 0, k_sigma = sqrt(c->c_sigma * (2 - c->c_sigma) * c->mu_eff);
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += c->B[i * n + j] * btw[j];
        c->p_sigma[i] = (1 - c->c_sigma) * c->p_sigma[i] + k_sigma * s;
        ps_norm += c->p_sigma[i] * c->p_sigma[i];
    }
    free(btw);
    ps_norm = sqrt(ps_norm);
    c->gen++;
    double hs_lim = (1.4 + 2 / (n + 1.0)) * c->chi_n * sqrt(1 - pow(1 - c->c_sigma, 2.0 * (double)c->gen));
    int h_sigma = ps_norm < hs_lim;
    double k_c = sqrt(c->c_c * (2 - c->c_c) * c->mu_eff);
    for (int i = 0; i < n; i++) c->p_c[i] = (1 - c->c_c) * c->p_c[i] + h_sigma * k_c * yw[i];
    /* C = (1 + c_1 delta(h) - c_1 - c_mu) C + c_1 p_c p_c^T + c_mu sum_i w_i y_i y_i^T */
    double delta = (1 - h_sigma) * c->c_c * (2 - c->c_c);
    double keep = 1 + c->c_1 * delta - c->c_1 - c->c_mu;
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double rank_mu = 0;
            for (int k = 0; k < c->mu; k++) {
                const double *y = c->y + (size_t)c->order[k] * (size_t)n;
                rank_mu += c->w[k] * y[i] * y[j];
            }
            double v = keep * c->C[i * n + j] + c->c_1 * c->p_c[i] * c->p_c[j] + c->c_mu * rank_mu;
            c->C[i * n + j] = c->C[j * n + i] = v;
        }
    c->sigma *= exp((c->c_sigma / c->d_sigma) * (ps_norm / c->chi_n - 1));
    /* C = B D^2 B^T; eigenvalues clamped positive against rounding */
    cmaes_eigen_sym(n, c->C, c->D, c->B);
    for (int i = 0; i < n; i++) c->D[i] = sqrt(fmax(c->D[i], 1e-20));
}
