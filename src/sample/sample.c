/* Samplers on a distribution given as logits — the `sample` layer.
 *
 * The chain follows llama.cpp's common order so that the options mean what a
 * llama.cpp user expects:
 *   repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw.
 * temp <= 0 is greedy (argmax of the penalised logits, lowest id on ties).
 * The random generator is xoshiro256** seeded through splitmix64, so the
 * same seed gives the same draws on every machine. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tutti.h"
#include "util/error.h"

struct tutti_sampler {
    tutti_sampler_params p;
    uint64_t s[4];     /* xoshiro256** state */
    int32_t *recent;   /* ring buffer of the last repeat_last_n accepted ids */
    int32_t n_recent;  /* filled entries */
    int32_t head;      /* next write position */
    float *work;       /* scratch logits, grown on demand */
    void *cands;       /* scratch candidates (struct cand), grown on demand */
    int32_t cap;       /* capacity of work/cands */
};

tutti_sampler_params tutti_sampler_default_params(void) {
    tutti_sampler_params p = {
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0,
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

/* Moves the k best of c[0..n) to the front, sorted; returns k.  For small k
 * an insertion into a sorted prefix (one pass over a 150k vocabulary); for
 * large k a full sort. */
static int32_t select_top(cand *c, int32_t n, int32_t k) {
    if (k > 64 || k >= n) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        return k < n ? k : n;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        cand x = c[i];
        if (m == k) {
            if (!cand_before(x, c[k - 1])) continue;
            m--;
        }
        int32_t j = m;
        while (j > 0 && cand_before(x, c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
        m++;
    }
    return m;
}

int32_t tutti_sampler_sample(tutti_sampler *s, const float *logits, int32_t n) {
    if (!s || !logits || n <= 0) return tutti_set_error("sampler: no logits to sample from");
    if (n > s->cap) {
        float *w = realloc(s->work, sizeof(float) * (size_t)n);
        if (w) s->work = w;
        void *c = realloc(s->cands, sizeof(cand) * (size_t)n);
        if (c) s->cands = c;
        if (!w || !c) return tutti_set_error("sampler: out of memory");
        s->cap = n;
    }
    float *z = s->work;
    memcpy(z, logits, sizeof(float) * (size_t)n);

    /* Repetition penalty (CTRL, Keskar et al. 2019, as llama.cpp applies it):
     * each distinct recent id once. */
    if (s->recent && s->n_recent > 0) {
        for (int32_t i = 0; i < s->n_recent; i++) {
            int32_t id = s->recent[i];
            if (id < 0 || id >= n) continue;
            bool seen = false;
            for (int32_t j = 0; j < i; j++) seen |= s->recent[j] == id;
            if (seen) continue;
            z[id] = z[id] > 0 ? z[id] / s->p.repeat_penalty : z[id] * s->p.repeat_penalty;
        }
    }

    if (s->p.temp <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (z[i] > z[best] || (isnan(z[best]) && !isnan(z[i]))) best = i;
        return best;
    }

    /* Candidates: drop -inf (masked) entries up front. */
    cand *c = s->cands;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (z[i] > -INFINITY) c[m++] = (cand){z[i], i};
    if (m == 0) return tutti_set_error("sampler: every candidate is masked (all logits are -inf)");

    int32_t k = s->p.top_k > 0 && s->p.top_k < m ? s->p.top_k : m;
    m = select_top(c, m, k);

    /* Probabilities of the kept candidates at temperature 1 (top-p and min-p
     * are defined on the untempered distribution, as in llama.cpp's chain
     * where temperature comes last). */
    double mx = c[0].z, sum = 0;
    for (int32_t i = 0; i < m; i++) sum += exp((double)c[i].z - mx);
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        int32_t keep = m;
        for (int32_t i = 0; i < m; i++) {
            cum += exp((double)c[i].z - mx) / sum;
            if (cum >= s->p.top_p) { keep = i + 1; break; }
        }
        m = keep;
    }
    if (s->p.min_p > 0) {
        /* keep p_i >= min_p * p_max, i.e. z_i >= z_max + log(min_p) */
        double cut = mx + log((double)s->p.min_p);
        int32_t keep = 1;
        while (keep < m && c[keep].z >= cut) keep++;
        m = keep;
    }

    /* Temperature, then draw by inverse CDF. */
    double inv_t = 1.0 / s->p.temp, total = 0;
    for (int32_t i = 0; i < m; i++) total += exp(((double)c[i].z - mx) * inv_t);
    double u = uniform01(s->s) * total, acc = 0;
    for (int32_t i = 0; i < m; i++) {
        acc += exp(((double)c[i].z - mx) * inv_t);
        if (u < acc) return c[i].id;
    }
    return c[m - 1].id;
}
