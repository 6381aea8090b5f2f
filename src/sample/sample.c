/* Samplers on a distribution given as logits — the `sample` layer.
 *
 * The chain follows llama.cpp's common order so that the options mean what a
 * llama.cpp user expects:
 *   repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw.
 * temp <= 0 is greedy (argmax of the penalised logits, lowest id on ties).
 * The random generator is xoshiro256** seeded through splitmix64, so the
 * same seed gives the same draws on every machine.
 *
 * Cost: a fused distribution is sampled once per generated token, so the
 * logits are not copied unless the repetition penalty changes them, greedy
 * is a vectorised maximum, and top-k keeps a heap of the k best in one
 * vectorised pass.  Nothing sorts the vocabulary: with every filter off the
 * draw is an inverse CDF over the unsorted probabilities (block sums, then
 * one block), min-p is a threshold and top-p a binned selection over the
 * entries above a cut (top_p_select).  NaN and +inf logits are an error
 * (one vectorised check).  Measured on 151,669 logits (bench in
 * tests/test_sample.c, 2-core VM), us per sample before -> after: filters
 * off 21,275 -> 129, top-p 0.9 1,863 -> 677 (flat tail; 326 -> 356 with a
 * steep tail), min-p 0.05 178 -> 180, top-k 40 34 -> 46 (the NaN check). */
/* FP exception flags are never read here; without trapping math GCC
 * if-converts the clamps in tutti_fast_exp and vectorises the loops over the
 * vocabulary (as in fusion/rules.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tutti.h"
#include "util/error.h"
#include "util/fastmath.h"

struct tutti_sampler {
    tutti_sampler_params p;
    uint64_t s[4];    /* xoshiro256** state */
    int32_t *recent;  /* ring buffer of the last repeat_last_n accepted ids */
    int32_t n_recent; /* filled entries */
    int32_t head;     /* next write position */
    float *work;      /* penalised copy of the logits, grown on demand */
    void *cands;      /* candidates (struct cand), grown on demand */
    float *wts;       /* [cap_c] their unnormalised probabilities */
    double *bsum;     /* [cap_b] block sums of the unfiltered draw */
    int32_t cap;      /* capacity of work */
    int32_t cap_c;    /* capacity of cands and wts */
    int32_t cap_b;
    float *pbuf; /* [cap_p] the target distribution of tutti_sampler_sample_draft */
    int32_t cap_p;
};

tutti_sampler_params tutti_sampler_default_params(void) {
    tutti_sampler_params p = {
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .seed = 0,
    };
    return p;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double uniform01(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * (1.0 / 9007199254740992.0); }

tutti_sampler *tutti_sampler_new(const tutti_sampler_params *params) {
    tutti_sampler_params p = params ? *params : tutti_sampler_default_params();
    if (!(p.top_p > 0) || isnan(p.temp) || isnan(p.min_p) || !(p.repeat_penalty > 0)) {
        tutti_set_error("sampler: invalid parameters (need top_p > 0, repeat_penalty > 0, no NaN)");
        return NULL;
    }
    if (p.repeat_last_n < 0) p.repeat_last_n = 0;
    tutti_sampler *s = calloc(1, sizeof *s);
    if (!s) return tutti_set_error("sampler: out of memory"), NULL;
    s->p = p;
    uint64_t x = p.seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
    if (p.repeat_last_n > 0 && p.repeat_penalty != 1.0f) {
        s->recent = malloc(sizeof(int32_t) * (size_t)p.repeat_last_n);
        if (!s->recent) return free(s), tutti_set_error("sampler: out of memory"), NULL;
    }
    return s;
}

void tutti_sampler_free(tutti_sampler *s) {
    if (!s) return;
    free(s->recent);
    free(s->work);
    free(s->cands);
    free(s->wts);
    free(s->bsum);
    free(s->pbuf);
    free(s);
}

void tutti_sampler_accept(tutti_sampler *s, int32_t id) {
    if (!s || !s->recent) return;
    s->recent[s->head] = id;
    s->head = (s->head + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

typedef struct cand {
    float z;
    int32_t id;
} cand;

/* Descending by logit, lower id first on ties. */
static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->z > y->z) return -1;
    if (x->z < y->z) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

static inline bool cand_before(cand a, cand b) { return a.z > b.z || (a.z == b.z && a.id < b.id); }

/* Min-heap on cand_before (the root is the worst kept candidate). */
static void heap_down(cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_before(h[w], h[l])) w = l;
        if (r < n && cand_before(h[w], h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w], h[w] = t;
        i = w;
    }
}

static void heap_up(cand *h, int32_t i) {
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!cand_before(h[p], h[i])) return;
        cand t = h[i];
        h[i] = h[p], h[p] = t;
        i = p;
    }
}

#define SCAN 16 /* logits per vectorised test of the top-k scan (tutti_any_gt16) */

/* The k best finite entries of z[0..n) (k >= 1), in c[0..return) sorted by
 * cmp_cand, through a heap of the k best so far.  One pass: a block of SCAN
 * logits is skipped after one vector comparison when none of them beats
 * the worst kept candidate, so for a vocabulary of 151,669 and k = 40
 * almost every block costs a few vector instructions.  Ties: ids come in
 * ascending order, so an equal logit never displaces a kept one, as in a
 * stable sort. */
TUTTI_VEC_CLONES
static int32_t top_k_scan(const float *z, int32_t n, int32_t k, cand *c) {
    int32_t m = 0;
    float thr = -INFINITY; /* entries must be > thr to enter (-inf and NaN never do) */
    int32_t i = 0;
    for (; i < n; i += SCAN) {
        int32_t end = i + SCAN <= n ? i + SCAN : n;
        if (end - i == SCAN && !tutti_any_gt16(z + i, thr)) continue;
        for (int32_t j = i; j < end; j++) {
            if (!(z[j] > thr)) continue;
            cand x = {z[j], j};
            if (m < k) {
                c[m++] = x;
                heap_up(c, m - 1);
                if (m == k) thr = c[0].z;
            } else if (cand_before(x, c[0])) {
                c[0] = x;
                heap_down(c, m, 0);
                thr = c[0].z;
            }
        }
    }
    qsort(c, (size_t)m, sizeof *c, cmp_cand);
    return m;
}

/* Index of the largest entry, lowest id on ties; NaN is never the maximum
 * unless every entry is NaN (then 0). */
TUTTI_VEC_CLONES
static int32_t argmax(const float *z, int32_t n) {
    float mx = tutti_vec_max(z, n);
    int32_t i = 0;
    while (i + 16 <= n && !tutti_any_eq16(z + i, mx)) i += 16;
    for (; i < n; i++)
        if (z[i] == mx) return i;
    return 0;
}

/* Σ exp(z - mx) over z[0..n), NaN left out (vectorised; float blocks
 * summed in double). */
TUTTI_VEC_CLONES
static double sum_exp(const float *z, int32_t n, float mx) {
    double total = 0.0;
    for (int32_t i0 = 0; i0 < n; i0 += 1024) {
        int32_t i1 = i0 + 1024 < n ? i0 + 1024 : n, i = i0;
        float a[16] = {0};
        for (; i + 16 <= i1; i += 16)
            for (int k = 0; k < 16; k++) a[k] += z[i + k] == z[i + k] ? tutti_fast_exp(z[i + k] - mx) : 0.0f;
        for (; i < i1; i++) a[0] += z[i] == z[i] ? tutti_fast_exp(z[i] - mx) : 0.0f;
        float b = 0.0f;
        for (int k = 0; k < 16; k++) b += a[k];
        total += b;
    }
    return total;
}

/* Σ exp(z - mx) over the entries z >= t (t > -inf). */
TUTTI_VEC_CLONES
static double sum_exp_above(const float *z, int32_t n, float mx, float t) {
    double total = 0.0;
    for (int32_t i0 = 0; i0 < n; i0 += 1024) {
        int32_t i1 = i0 + 1024 < n ? i0 + 1024 : n, i = i0;
        float a[16] = {0};
        for (; i + 16 <= i1; i += 16)
            for (int k = 0; k < 16; k++) a[k] += z[i + k] >= t ? tutti_fast_exp(z[i + k] - mx) : 0.0f;
        for (; i < i1; i++) a[0] += z[i] >= t ? tutti_fast_exp(z[i] - mx) : 0.0f;
        float b = 0.0f;
        for (int k = 0; k < 16; k++) b += a[k];
        total += b;
    }
    return total;
}

/* Inverse-CDF draw over every entry of z in index order, at temperature
 * 1/inv_t (no filter: nothing needs sorting).  One vectorised pass forms
 * the sums of exp((z - mx)·inv_t) per block of DRAW_BLK entries; the
 * uniform draw picks a block from those sums and the entry inside it.  The
 * sums hold the same fast_exp values the final scan adds, so the scan
 * lands inside the chosen block. */
#define DRAW_BLK 1024
TUTTI_VEC_CLONES
static int32_t draw_all(const float *z, int32_t n, float mx, float inv_t, double *bsum, double u01) {
    int32_t nb = (n + DRAW_BLK - 1) / DRAW_BLK;
    double total = 0.0;
    for (int32_t b = 0; b < nb; b++) {
        int32_t i0 = b * DRAW_BLK, i1 = i0 + DRAW_BLK < n ? i0 + DRAW_BLK : n, i = i0;
        float a[16] = {0};
        for (; i + 16 <= i1; i += 16)
            for (int k = 0; k < 16; k++) a[k] += tutti_fast_exp((z[i + k] - mx) * inv_t);
        for (; i < i1; i++) a[0] += tutti_fast_exp((z[i] - mx) * inv_t);
        float t = 0.0f;
        for (int k = 0; k < 16; k++) t += a[k];
        bsum[b] = t;
        total += t;
    }
    double u = u01 * total, acc = 0.0;
    int32_t b = 0;
    while (b + 1 < nb && acc + bsum[b] <= u) acc += bsum[b++];
    while (b + 1 < nb && !(bsum[b] > 0)) b++; /* rounding at the very end: a block with mass */
    int32_t i0 = b * DRAW_BLK, i1 = i0 + DRAW_BLK < n ? i0 + DRAW_BLK : n, last = -1;
    float ub = (float)(u - acc), fa = 0.0f;
    for (int32_t i = i0; i < i1; i++) {
        float w = tutti_fast_exp((z[i] - mx) * inv_t);
        if (!(w > 0)) continue;
        fa += w, last = i;
        if (ub < fa) return i;
    }
    if (last >= 0) return last;
    /* only reachable through rounding: the last entry with any mass */
    for (int32_t i = n - 1; i >= 0; i--)
        if (tutti_fast_exp((z[i] - mx) * inv_t) > 0) return i;
    return argmax(z, n);
}

/* Top-p without sorting: c[0..m) holds candidates (any order), w[0..m)
 * their unnormalised probabilities exp(z - zmax).  Moves the shortest
 * prefix of the descending order (cmp_cand: larger logit first, lower id on
 * ties) whose mass reaches `need` to the front and returns its length.
 * The candidates are binned by logit; the bins above the one where the
 * cumulative mass crosses `need` are kept whole, and only that boundary
 * bin is refined (re-binned, sorted once it is small), so the cost is a
 * few linear passes.  Exactly the set the full sort's prefix gives, up to
 * the rounding of the mass sums. */
#define TP_BINS 256
/* Bin of a logit d nats below the top; clamped in float first (a float ->
 * int conversion out of range is undefined). */
static inline int32_t tp_bin(float d, float scale) {
    float f = d * scale;
    return f < 1.0f ? 0 : f >= (float)(TP_BINS - 1) ? TP_BINS - 1 : (int32_t)f;
}
static int32_t top_p_select(cand *c, float *w, int32_t m, float zhi, double need) {
    int32_t lo = 0, hi = m; /* [0, lo) kept; the answer ends inside [lo, hi) */
    float top = zhi;
    float bot = zhi;
    for (int32_t i = 0; i < m; i++) bot = c[i].z < bot ? c[i].z : bot;
    while (hi - lo > 64 && top > bot) {
        double mass[TP_BINS] = {0};
        int32_t cnt[TP_BINS] = {0};
        float scale = (float)TP_BINS / (top - bot);
        for (int32_t i = lo; i < hi; i++) {
            int32_t k = tp_bin(top - c[i].z, scale);
            mass[k] += w[i], cnt[k]++;
        }
        int32_t B = 0;
        double cum = 0;
        while (B + 1 < TP_BINS && cum + mass[B] < need) cum += mass[B++];
        /* order [lo, hi): bins < B, then bin B, then the rest */
        int32_t p = lo;
        for (int32_t pass = 0; pass < 2; pass++)
            for (int32_t i = p; i < hi; i++) {
                int32_t k = tp_bin(top - c[i].z, scale);
                if (pass == 0 ? k < B : k == B) {
                    cand tc = c[i];
                    float tw = w[i];
                    c[i] = c[p], w[i] = w[p];
                    c[p] = tc, w[p] = tw;
                    p++;
                }
            }
        int32_t n_above = 0;
        for (int32_t k = 0; k < B; k++) n_above += cnt[k];
        need -= cum;
        lo += n_above;
        hi = lo + cnt[B];
        float ntop = top - (float)B / scale, nbot = top - (float)(B + 1) / scale;
        if (!(ntop < top || nbot > bot)) break; /* float resolution reached */
        top = ntop, bot = nbot;
    }
    /* sort the boundary range and walk it */
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_cand);
    double acc = 0;
    for (int32_t i = lo; i < hi; i++) {
        acc += (double)tutti_fast_exp(c[i].z - zhi);
        if (acc >= need) return i + 1;
    }
    return hi;
}

TUTTI_VEC_CLONES
static int32_t first_nonfinite(const float *z, int32_t n) { return tutti_first_nonfinite(z, n); }

/* What a sampler draws from (select_dist): the argmax (temp <= 0), every
 * entry of z at temperature 1/inv_t (no filter: draw_all), or the
 * candidates c[0..m) with the weights w[0..m) (sum total). */
typedef enum { SEL_GREEDY, SEL_ALL, SEL_CANDS } sel_kind;
typedef struct sel {
    sel_kind kind;
    int32_t id;     /* SEL_GREEDY */
    const float *z; /* SEL_ALL: the (penalised) logits */
    float zmax;
    float inv_t;
    int32_t m; /* SEL_CANDS: s->cands[0..m), s->wts[0..m) */
    double total;
} sel;

/* The chain up to the draw: the repetition penalty, then greedy, or the
 * filters and the temperature.  0 or TUTTI_ERR. */
static int select_dist(tutti_sampler *s, const float *logits, int32_t n, sel *out) {
    if (!s || !logits || n <= 0) return tutti_set_error("sampler: no logits to sample from");
    /* NaN or +inf logits have no distribution: an error, never an id */
    int32_t bad = first_nonfinite(logits, n);
    if (bad >= 0)
        return tutti_set_error("sampler: logit %d is %s (broken weights or an overflow upstream)", bad,
                               isnan(logits[bad]) ? "NaN" : "+inf");
    bool penalty = s->recent && s->n_recent > 0;
    if (penalty && n > s->cap) {
        float *w = realloc(s->work, sizeof(float) * (size_t)n);
        if (!w) return tutti_set_error("sampler: out of memory");
        s->work = w, s->cap = n;
    }
    const float *z = logits;

    /* Repetition penalty (CTRL, Keskar et al. 2019, as llama.cpp applies it):
     * each distinct recent id once.  Only then are the logits copied. */
    if (penalty) {
        float *zw = s->work;
        memcpy(zw, logits, sizeof(float) * (size_t)n);
        for (int32_t i = 0; i < s->n_recent; i++) {
            int32_t id = s->recent[i];
            if (id < 0 || id >= n) continue;
            bool seen = false;
            for (int32_t j = 0; j < i; j++) seen |= s->recent[j] == id;
            if (seen) continue;
            zw[id] = zw[id] > 0 ? zw[id] / s->p.repeat_penalty : zw[id] * s->p.repeat_penalty;
        }
        z = zw;
    }
    static const char *const empty = "sampler: nothing to sample: every logit is -inf (every candidate is masked)";
    if (s->p.temp <= 0) {
        if (!(tutti_vec_max(z, n) > -INFINITY)) return tutti_set_error("%s", empty);
        *out = (sel){.kind = SEL_GREEDY, .id = argmax(z, n)};
        return 0;
    }
    bool top_k = s->p.top_k > 0 && s->p.top_k < n;
    bool top_p = s->p.top_p<1.0f, min_p = s->p.min_p> 0;
    double inv_t = 1.0 / s->p.temp;

    /* Every filter off: inverse CDF over the unsorted vocabulary. */
    if (!top_k && !top_p && !min_p) {
        float zmax = tutti_vec_max(z, n);
        if (!(zmax > -INFINITY)) return tutti_set_error("%s", empty);
        *out = (sel){.kind = SEL_ALL, .z = z, .zmax = zmax, .inv_t = (float)inv_t};
        return 0;
    }

    int32_t need_c = top_k ? s->p.top_k : n;
    if (need_c > s->cap_c) {
        void *c = realloc(s->cands, sizeof(cand) * (size_t)need_c);
        float *w = realloc(s->wts, sizeof(float) * (size_t)need_c);
        if (c) s->cands = c;
        if (w) s->wts = w;
        if (!c || !w) return tutti_set_error("sampler: out of memory");
        s->cap_c = need_c;
    }
    cand *c = s->cands;
    float *w = s->wts;
    int32_t m;
    double mx;
    if (top_k) {
        /* the top k, sorted (k is small): top-p and min-p are prefixes */
        m = top_k_scan(z, n, need_c, c);
        if (m == 0) return tutti_set_error("%s", empty);
        mx = c[0].z;
        if (top_p) {
            double sum = 0;
            for (int32_t i = 0; i < m; i++) sum += exp((double)c[i].z - mx);
            double cum = 0;
            int32_t keep = m;
            for (int32_t i = 0; i < m; i++) {
                cum += exp((double)c[i].z - mx) / sum;
                if (cum >= s->p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            m = keep;
        }
        if (min_p) {
            /* keep p_i >= min_p * p_max, i.e. z_i >= z_max + log(min_p) */
            double cut = mx + log((double)s->p.min_p);
            int32_t keep = 1;
            while (keep < m && c[keep].z >= cut) keep++;
            m = keep;
        }
    } else {
        /* top-k off: min-p is a threshold (z >= max + log(min_p)) and top-p
         * keeps the shortest prefix of the descending order holding top_p of
         * the mass; its cut is first narrowed to a threshold whose upper part
         * already holds that mass (steps of 8 nats below the maximum, one
         * vectorised pass each), then found by top_p_select — no sort of the
         * vocabulary.  Both are defined on the untempered distribution, as in
         * llama.cpp's chain where temperature comes last. */
        float zmax = tutti_vec_max(z, n);
        if (!(zmax > -INFINITY)) return tutti_set_error("%s", empty);
        mx = zmax;
        double cut = min_p ? (double)zmax + log((double)s->p.min_p) : -INFINITY;
        double sum_all = 0;
        if (top_p) {
            sum_all = sum_exp(z, n, zmax);
            /* the margin covers the float sums' rounding */
            for (float t = zmax - 8.0f; t > zmax - 80.0f && (double)t > cut; t -= 8.0f)
                if (sum_exp_above(z, n, zmax, t) >= (double)s->p.top_p * sum_all * (1.0 + 1e-5)) {
                    cut = t;
                    break;
                }
        }
        m = 0;
        for (int32_t i = 0; i < n; i++)
            if (z[i] > -INFINITY && (double)z[i] >= cut) c[m++] = (cand){z[i], i};
        if (top_p) {
            for (int32_t i = 0; i < m; i++) w[i] = tutti_fast_exp(c[i].z - zmax);
            /* (every candidate already passes min-p: the cut includes it) */
            m = top_p_select(c, w, m, zmax, (double)s->p.top_p * sum_all);
        }
    }

    /* Temperature: the candidates' weights. */
    double total = 0;
    for (int32_t i = 0; i < m; i++) total += (w[i] = tutti_fast_exp((float)(((double)c[i].z - mx) * inv_t)));
    *out = (sel){.kind = SEL_CANDS, .m = m, .total = total};
    return 0;
}

int32_t tutti_sampler_sample(tutti_sampler *s, const float *logits, int32_t n) {
    sel d = {0};
    if (select_dist(s, logits, n, &d) < 0) return TUTTI_ERR;
    if (d.kind == SEL_GREEDY) return d.id;
    if (d.kind == SEL_ALL) {
        int32_t nb = (n + DRAW_BLK - 1) / DRAW_BLK;
        if (nb > s->cap_b) {
            double *b = realloc(s->bsum, sizeof(double) * (size_t)nb);
            if (!b) return tutti_set_error("sampler: out of memory");
            s->bsum = b, s->cap_b = nb;
        }
        return draw_all(d.z, n, d.zmax, d.inv_t, s->bsum, uniform01(s->s));
    }
    /* inverse CDF over the kept candidates */
    const cand *c = s->cands;
    const float *w = s->wts;
    double u = uniform01(s->s) * d.total, acc = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < d.m; i++) {
        if (!(w[i] > 0)) continue;
        acc += w[i], last = i;
        if (u < acc) return c[i].id;
    }
    return c[last].id;
}

int tutti_sampler_probs(tutti_sampler *s, const float *logits, int32_t n, float *probs) {
    sel d = {0};
    if (!probs) return tutti_set_error("sampler: no output row");
    if (select_dist(s, logits, n, &d) < 0) return TUTTI_ERR;
    if (d.kind == SEL_ALL) {
        /* the weights draw_all adds, normalised */
        double total = 0;
        for (int32_t i = 0; i < n; i++) total += (probs[i] = tutti_fast_exp((d.z[i] - d.zmax) * d.inv_t));
        float inv = (float)(1.0 / total);
        for (int32_t i = 0; i < n; i++) probs[i] *= inv;
        return 0;
    }
    memset(probs, 0, sizeof(float) * (size_t)n);
    if (d.kind == SEL_GREEDY) {
        probs[d.id] = 1.0f;
        return 0;
    }
    const cand *c = s->cands;
    for (int32_t i = 0; i < d.m; i++) probs[c[i].id] = (float)(s->wts[i] / d.total);
    return 0;
}

int32_t tutti_sampler_draw(tutti_sampler *s, const float *probs, int32_t n) {
    if (!s || !probs || n <= 0) return tutti_set_error("sampler: no probabilities to draw from");
    double total = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++)
        if (probs[i] > 0) total += probs[i], last = i;
    if (last < 0) return tutti_set_error("sampler: nothing to draw: every probability is 0");
    double u = uniform01(s->s) * total, acc = 0;
    for (int32_t i = 0; i <= last; i++) {
        if (!(probs[i] > 0)) continue;
        acc += probs[i];
        if (u < acc) return i;
    }
    return last;
}

int32_t tutti_sampler_sample_draft(tutti_sampler *s, const float *logits, int32_t n, int32_t drafted, const float *q) {
    if (!q || drafted < 0 || drafted >= n) return tutti_set_error("sampler: no drafted token or draft distribution");
    if (s && n > s->cap_p) {
        float *p = realloc(s->pbuf, sizeof(float) * (size_t)n);
        if (!p) return tutti_set_error("sampler: out of memory");
        s->pbuf = p, s->cap_p = n;
    }
    if (tutti_sampler_probs(s, logits, n, s ? s->pbuf : NULL) < 0) return TUTTI_ERR;
    float *p = s->pbuf;
    /* accept the drafted token with probability min(1, p/q): no draw when
     * the ratio is 0 or at least 1, so greedy (one-hot p and q) uses no
     * random number and gives exactly the argmax */
    double pd = p[drafted], qd = q[drafted];
    if (pd > 0 && (pd >= qd || uniform01(s->s) * qd < pd)) return drafted;
    /* rejected: the normalised residual max(0, p - q), into p */
    double total = 0;
    for (int32_t i = 0; i < n; i++) total += p[i] > q[i] ? p[i] - q[i] : 0.0f;
    if (!(total > 0)) /* p <= q everywhere: p = q up to rounding; p itself */
        return tutti_sampler_draw(s, p, n);
    for (int32_t i = 0; i < n; i++) p[i] = p[i] > q[i] ? p[i] - q[i] : 0.0f;
    return tutti_sampler_draw(s, p, n);
}
