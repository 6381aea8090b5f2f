/* CMA-ES, the covariance matrix adaptation evolution strategy — the
 * optimizer of evolutionary model merging (mergekit-evolve; Akiba et al.
 * 2024, "Evolutionary Optimization of Model Merging Recipes",
 * arXiv:2403.13187).
 *
 * Written from N. Hansen, "The CMA Evolution Strategy: A Tutorial"
 * (arXiv:1604.00772), the (mu/mu_w, lambda)-CMA-ES of its Appendix A with
 * the default parameters of its Table 1 (positive recombination weights,
 * mu = lambda / 2): sample lambda points x_k = m + sigma B D z_k, z_k ~
 * N(0, I); rank them; move the mean to their weighted mean; update the
 * evolution paths p_sigma, p_c, the covariance C (rank-one + rank-mu) and
 * the step size sigma (cumulative step-size adaptation); C = B D^2 B^T by
 * Jacobi rotations every generation (dimensions here are small).
 *
 * Minimizes.  Deterministic: the normal samples come from a seeded
 * splitmix64 generator (Box-Muller), so one seed gives one sequence of
 * candidates for one sequence of fitness values. */
#ifndef TUTTI_CMAES_H
#define TUTTI_CMAES_H

#include <stdint.h>

typedef struct cmaes cmaes;

/* n >= 1 dimensions, start mean x0[n], step size sigma0 > 0; lambda = 0:
 * the default 4 + floor(3 ln n).  NULL when out of memory. */
cmaes *cmaes_new(int n, const double *x0, double sigma0, int lambda, uint64_t seed);
void cmaes_free(cmaes *c);

int cmaes_lambda(const cmaes *c);
/* Samples the next generation; candidate k (k < lambda) is then
 * cmaes_candidate(c, k), n doubles owned by c until the next ask. */
void cmaes_ask(cmaes *c);
const double *cmaes_candidate(const cmaes *c, int k);
/* Ranks the generation by f[lambda] (lower is better) and updates. */
void cmaes_tell(cmaes *c, const double *f);

const double *cmaes_mean(const cmaes *c);
double cmaes_sigma(const cmaes *c);

/* Eigen-decomposition of the symmetric n x n matrix a (row-major, read
 * only): eigenvalues into w[n], eigenvectors into the columns of v[n x n]
 * (cyclic Jacobi rotations).  Also used for the condition number of
 * mergekit-moe's router vectors. */
void cmaes_eigen_sym(int n, const double *a, double *w, double *v);

#endif
