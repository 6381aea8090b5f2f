/* Row kernels (RMSNorm, softmax, RoPE, gated activations, soft-capping) and
 * causal GQA attention over the F16 KV cache — scalar reference versions. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "kernels/kernels.h"
#include "quant/vecdot.h"
#include "util/fp16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define OPS_X86 1
#endif

/* ---- f16 helpers ---- */

static float g_f16_table[65536];
static pthread_once_t g_f16_once = PTHREAD_ONCE_INIT;

static void f16_table_init(void) {
    for (uint32_t i = 0; i < 65536; i++) g_f16_table[i] = tutti_fp16_to_f32((uint16_t)i);
}

float tutti_f16_lookup(uint16_t h) {
    pthread_once(&g_f16_once, f16_table_init);
    return g_f16_table[h];
}

void tutti_f32_to_f16_row(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = tutti_f32_to_fp16(x[i]);
}

/* ---- norms and activations ---- */

void tutti_rmsnorm(const float *x, const float *w, float *out, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n;
        float *o = out + r * n;
        /* float products summed in double, as ggml does (bit-compatible
         * norms keep 8-bit activation rounding in step with llama.cpp) */
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)(xr[i] * xr[i]);
        const float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
        if (w)
            for (int64_t i = 0; i < n; i++) o[i] = xr[i] * scale * w[i];
        else
            for (int64_t i = 0; i < n; i++) o[i] = xr[i] * scale;
    }
}

void tutti_softmax(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (mx == -INFINITY) {
        for (int64_t i = 0; i < n; i++) x[i] = 0;
        return;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float e = expf(x[i] - mx);
        x[i] = e;
        sum += e;
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void tutti_swiglu(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float a = gate[i];
        gate[i] = a / (1.0f + expf(-a)) * up[i];
    }
}

void tutti_geglu(float *gate, const float *up, int64_t n) {
    const float c = 0.79788456080286535588f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float a = gate[i];
        /* ggml evaluates GELU through a table indexed by the f16 input and
         * holding f16 results (0 below -10, identity above 10); doing the
         * same roundings keeps Gemma models in step with llama.cpp. */
        if (a <= -10.0f) {
            gate[i] = 0.0f;
            continue;
        }
        if (a >= 10.0f) {
            gate[i] = a * up[i];
            continue;
        }
        a = tutti_fp16_to_f32(tutti_f32_to_fp16(a));
        const float g = 0.5f * a * (1.0f + tanhf(c * (a + 0.044715f * a * a * a)));
        gate[i] = tutti_fp16_to_f32(tutti_f32_to_fp16(g)) * up[i];
    }
}

void tutti_softcap(float *x, int64_t n, float cap) {
    const float inv = 1.0f / cap; /* scale, tanh, scale: the same three roundings as llama.cpp */
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}

/* ---- RoPE ---- */

void tutti_rope(float *x, int64_t n_tok, int32_t n_heads, int32_t head_dim, int32_t n_rot,
                int32_t pos0, float freq_base, float freq_scale, const float *freq_factors,
                tutti_rope_mode mode) {
    const int32_t half = n_rot / 2;
    for (int64_t t = 0; t < n_tok; t++) {
        const double pos = (double)(pos0 + t);
        for (int32_t i = 0; i < half; i++) {
            /* angles in double: position × frequency loses precision in float at long contexts */
            double theta = pos * freq_scale * pow(freq_base, -2.0 * i / n_rot);
            if (freq_factors) theta /= freq_factors[i];
            const float c = (float)cos(theta), s = (float)sin(theta);
            for (int32_t h = 0; h < n_heads; h++) {
                float *xh = x + (t * n_heads + h) * (int64_t)head_dim;
                const int32_t a = mode == TUTTI_ROPE_NEOX ? i : 2 * i;
                const int32_t b = mode == TUTTI_ROPE_NEOX ? i + half : 2 * i + 1;
                const float x0 = xh[a], x1 = xh[b];
                xh[a] = x0 * c - x1 * s;
                xh[b] = x0 * s + x1 * c;
            }
        }
    }
}

/* ---- attention ---- */

/* The two inner loops of attention: a query row (already rounded to f16
 * values, held as float) dotted with an f16 key row, and an f16 value row
 * added with a weight into the output.  Scalar: float products summed in
 * double (ggml's scalar f16 dot).  AVX2 (used by the avx2 and avx512
 * paths): F16C conversion and float FMA in 16 lanes, as ggml's SIMD f16
 * dot sums in float lanes. */
typedef float (*attn_dot_fn)(const float *q, const uint16_t *k, int32_t n);
typedef void (*attn_axpy_fn)(float *o, float w, const uint16_t *v, int32_t n);

static float attn_dot_scalar(const float *q, const uint16_t *k, int32_t n) {
    double acc = 0;
    for (int32_t d = 0; d < n; d++) acc += (double)(q[d] * g_f16_table[k[d]]);
    return (float)acc;
}

static void attn_axpy_scalar(float *o, float w, const uint16_t *v, int32_t n) {
    for (int32_t d = 0; d < n; d++) o[d] += w * g_f16_table[v[d]];
}

#ifdef OPS_X86
__attribute__((target("avx2,fma,f16c"))) static float attn_dot_avx2(const float *q, const uint16_t *k, int32_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int32_t d = 0;
    for (; d + 16 <= n; d += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d))), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d + 8))), a1);
    }
    a0 = _mm256_add_ps(a0, a1);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    float r = _mm_cvtss_f32(s4);
    for (; d < n; d++) r += q[d] * g_f16_table[k[d]];
    return r;
}

__attribute__((target("avx2,fma,f16c"))) static void attn_axpy_avx2(float *o, float w, const uint16_t *v, int32_t n) {
    const __m256 wv = _mm256_set1_ps(w);
    int32_t d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(o + d, _mm256_fmadd_ps(wv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + d))),
                                                _mm256_loadu_ps(o + d)));
    for (; d < n; d++) o[d] += w * g_f16_table[v[d]];
}
#endif

typedef struct attn_job {
    const tutti_attn_params *p;
    attn_dot_fn dot;
    attn_axpy_fn axpy;
    atomic_int_fast64_t next; /* next (token, head) item to take */
} attn_job;

static void attn_worker(void *arg, int ith, int nth) {
    (void)nth;
    attn_job *job = arg;
    const tutti_attn_params *p = job->p;
    const int32_t group = p->n_head / p->n_head_kv;
    const int64_t kstride = (int64_t)p->n_head_kv * p->head_dim_k;
    const int64_t vstride = (int64_t)p->n_head_kv * p->head_dim_v;
    float *sc = p->scratch + (size_t)ith * (size_t)(p->pos0 + p->n_tok + p->head_dim_k);

    const int64_t n_items = (int64_t)p->n_tok * p->n_head;
    for (;;) {
        /* items from a shared counter: a thread slowed down by another
         * process does not hold up the rest (tutti_threadpool_run_dynamic) */
        const int64_t item = atomic_fetch_add(&job->next, 1);
        if (item >= n_items) break;
        const int32_t t = (int32_t)(item / p->n_head), h = (int32_t)(item % p->n_head);
        const int32_t kvh = h / group;
        const int32_t pos = p->pos0 + t;
        const int32_t j0 = p->n_swa > 0 && pos - p->n_swa + 1 > 0 ? pos - p->n_swa + 1 : 0;
        const int32_t n = pos + 1 - j0;
        const float *q = p->q + (int64_t)t * p->n_head * p->head_dim_k + (int64_t)h * p->head_dim_k;

        /* q is rounded to f16 before the dot with the f16 keys, and the
         * probabilities to f16 before weighting the f16 values, as ggml does
         * (its f16 dot products take both operands in f16): with these two
         * roundings F32 models match llama.cpp to ~3e-4 in log-softmax. */
        float *qr = sc + (p->pos0 + p->n_tok); /* scratch row has room: see tutti_attn_params */
        for (int32_t d = 0; d < p->head_dim_k; d++) qr[d] = g_f16_table[tutti_f32_to_fp16(q[d])];
        for (int32_t j = 0; j < n; j++) {
            const uint16_t *k = p->k + (int64_t)(j0 + j) * kstride + (int64_t)kvh * p->head_dim_k;
            float s = job->dot(qr, k, p->head_dim_k) * p->scale;
            if (p->softcap > 0) s = p->softcap * tanhf(s * (1.0f / p->softcap));
            sc[j] = s;
        }
        tutti_softmax(sc, n);

        float *o = p->out + (int64_t)t * p->n_head * p->head_dim_v + (int64_t)h * p->head_dim_v;
        for (int32_t d = 0; d < p->head_dim_v; d++) o[d] = 0;
        for (int32_t j = 0; j < n; j++) {
            const uint16_t *v = p->v + (int64_t)(j0 + j) * vstride + (int64_t)kvh * p->head_dim_v;
            const float w = g_f16_table[tutti_f32_to_fp16(sc[j])];
            job->axpy(o, w, v, p->head_dim_v);
        }
    }
}

void tutti_attention(tutti_threadpool *tp, const tutti_attn_params *p) {
    pthread_once(&g_f16_once, f16_table_init);
    attn_job job = {p, attn_dot_scalar, attn_axpy_scalar, 0};
    atomic_init(&job.next, 0);
#ifdef OPS_X86
    const tutti_simd path = tutti_simd_current();
    if (path == TUTTI_SIMD_AVX2 || path == TUTTI_SIMD_AVX512) {
        job.dot = attn_dot_avx2;
        job.axpy = attn_axpy_avx2;
    }
#endif
    tutti_threadpool_run_dynamic(tp, attn_worker, &job);
}
