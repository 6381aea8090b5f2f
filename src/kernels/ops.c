/* Row kernels (RMSNorm, softmax, RoPE, gated activations, soft-capping) and
 * causal GQA attention over the F16 KV cache — scalar reference versions. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

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

/* The row kernels below have an AVX2 (F16C, FMA) version used on the avx2
 * and avx512 kernel paths; the scalar code is the reference
 * (TUTTI_KERNELS=scalar). */
#ifdef OPS_X86
static bool use_avx2(void) {
    const tutti_simd path = tutti_simd_current();
    return path == TUTTI_SIMD_AVX2 || path == TUTTI_SIMD_AVX512;
}

#define AVX2_FN __attribute__((target("avx2,fma,f16c")))

/* e^x for 8 floats: x = n ln2 + r (Cody-Waite split of ln2, |r| <= ln2/2),
 * e^r by its Taylor polynomial to degree 7 (truncation < 6e-9 relative), times
 * 2^n built in the exponent bits.  Within 2 ulp of expf over
 * [-87.33, 88.37]; 0 below (no denormals), +inf from 88.38 on. */
AVX2_FN static inline __m256 exp8_avx2(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.38f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n =
        _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

AVX2_FN static void f32_to_f16_avx2(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = tutti_f32_to_fp16(x[i]);
}

AVX2_FN static void softmax_avx2(float *x, int64_t n, float mx, float sink) {
    const __m256 m = _mm256_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    double sum = 0;
    for (int k = 0; k < 8; k++) sum += lanes[k];
    for (; i < n; i++) sum += (x[i] = expf(x[i] - mx));
    if (sink > -INFINITY) sum += expf(sink - mx);
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++) x[i] *= (float)(1.0 / sum);
}

/* The tail goes through the same vector formula (zero-padded), never
 * through expf: the caller passes n_tok rows of n_ff as one array, so an
 * element's place relative to the 8-lane grid depends on the batch, and
 * its value must not (a token gets the same bits alone or batched). */
AVX2_FN static void swiglu_avx2(float *gate, const float *up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_loadu_ps(gate + i);
        const __m256 e = exp8_avx2(_mm256_xor_ps(a, neg));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(a, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        const __m256 a = _mm256_loadu_ps(g);
        const __m256 e = exp8_avx2(_mm256_xor_ps(a, neg));
        _mm256_storeu_ps(g, _mm256_mul_ps(_mm256_div_ps(a, _mm256_add_ps(one, e)), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, sizeof(float) * (size_t)(n - i));
    }
}
#endif

void tutti_f32_to_f16_row(const float *x, uint16_t *y, int64_t n) {
#ifdef OPS_X86
    if (use_avx2()) {
        f32_to_f16_avx2(x, y, n);
        return;
    }
#endif
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

/* Softmax whose denominator also counts e^sink (sink = -INFINITY: none),
 * as ggml's soft_max with sinks: the maximum includes the sink. */
static void softmax_sink(float *x, int64_t n, float sink) {
    float mx = sink;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (mx == -INFINITY) {
        for (int64_t i = 0; i < n; i++) x[i] = 0;
        return;
    }
#ifdef OPS_X86
    if (use_avx2()) {
        softmax_avx2(x, n, mx, sink);
        return;
    }
#endif
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float e = expf(x[i] - mx);
        x[i] = e;
        sum += e;
    }
    if (sink > -INFINITY) sum += expf(sink - mx);
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void tutti_softmax(float *x, int64_t n) { softmax_sink(x, n, -INFINITY); }

void tutti_swiglu(float *gate, const float *up, int64_t n) {
#ifdef OPS_X86
    if (use_avx2()) {
        swiglu_avx2(gate, up, n);
        return;
    }
#endif
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

void tutti_swiglu_oai(float *gate, const float *up, int64_t n, float alpha, float limit) {
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i] < limit ? gate[i] : limit;
        const float y = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        gate[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
    }
}

void tutti_softcap(float *x, int64_t n, float cap) {
    const float inv = 1.0f / cap; /* scale, tanh, scale: the same three roundings as llama.cpp */
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}

/* ---- RoPE ---- */

void tutti_rope(float *x, int64_t n_tok, int32_t n_heads, int32_t head_dim, int32_t n_rot, int32_t pos0,
                float freq_base, float freq_scale, const float *freq_factors, tutti_rope_mode mode) {
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

/* ---- attention ----
 *
 * Work item = one KV head and a block of up to ATTN_TB query tokens: its
 * rows are those tokens x the n_head / n_head_kv query heads that read the
 * KV head (GQA), so every key and value row converted from f16 serves all
 * of them.  Keys are taken in chunks of ATTN_KC, converted to float once per
 * item into the thread's scratch, then
 *   1. scores of every row against the chunk (8 keys per pass, no
 *      horizontal sum per key), into the row's score buffer;
 *   2. per row: scale, soft-cap, softmax, probabilities rounded to f16;
 *   3. the value chunk, converted likewise, accumulated into the rows'
 *      outputs (the output block stays in registers across the chunk).
 * Items go from the last token block to the first (the largest first), so
 * the threads finish together under the causal mask. */
#define ATTN_TB 8
#define ATTN_KC 64

typedef struct attn_fns {
    void (*to_f32)(const uint16_t *x, float *y, int32_t n);             /* f16 -> float */
    void (*round_f16)(float *x, int32_t n);                             /* x = f16(x) as float */
    void (*dot8)(const float *q, const float *k, int32_t hd, float *s); /* s[i] = q . k[i*hd], i < 8 */
    float (*dot1)(const float *q, const float *k, int32_t hd);
    void (*acc)(float *o, const float *p, const float *v, int32_t n, int32_t hd); /* o += sum p[j] v[j*hd] */
} attn_fns;

static void to_f32_scalar(const uint16_t *x, float *y, int32_t n) {
    for (int32_t i = 0; i < n; i++) y[i] = g_f16_table[x[i]];
}
static void round_f16_scalar(float *x, int32_t n) {
    for (int32_t i = 0; i < n; i++) x[i] = g_f16_table[tutti_f32_to_fp16(x[i])];
}
static float dot1_scalar(const float *q, const float *k, int32_t hd) {
    float s = 0;
    for (int32_t d = 0; d < hd; d++) s += q[d] * k[d];
    return s;
}
static void dot8_scalar(const float *q, const float *k, int32_t hd, float *s) {
    for (int i = 0; i < 8; i++) s[i] = dot1_scalar(q, k + (int64_t)i * hd, hd);
}
static void acc_scalar(float *o, const float *p, const float *v, int32_t n, int32_t hd) {
    for (int32_t j = 0; j < n; j++)
        for (int32_t d = 0; d < hd; d++) o[d] += p[j] * v[(int64_t)j * hd + d];
}
static const attn_fns g_attn_scalar = {to_f32_scalar, round_f16_scalar, dot8_scalar, dot1_scalar, acc_scalar};

#ifdef OPS_X86
/* The vector paths need head_dim % 8 == 0 (every model we know: 64, 128, 256). */
AVX2_FN static void to_f32_avx2(const uint16_t *x, float *y, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = g_f16_table[x[i]];
}
AVX2_FN static void round_f16_avx2(float *x, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) x[i] = g_f16_table[tutti_f32_to_fp16(x[i])];
}
AVX2_FN static float dot1_avx2(const float *q, const float *k, int32_t hd) {
    __m256 a = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), a);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}
AVX2_FN static void dot8_avx2(const float *q, const float *k, int32_t hd, float *s) {
    __m256 a[8];
    for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + (int64_t)i * hd + d), a[i]);
    }
    /* 8 vectors -> one vector of their 8 sums */
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20), hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    _mm256_storeu_ps(s, _mm256_add_ps(lo, hi));
}
AVX2_FN static void acc_avx2(float *o, const float *p, const float *v, int32_t n, int32_t hd) {
    for (int32_t d0 = 0; d0 < hd; d0 += 64) { /* 8 registers of the output at a time */
        const int nv = hd - d0 >= 64 ? 8 : (hd - d0) / 8;
        __m256 a[8];
        for (int i = 0; i < nv; i++) a[i] = _mm256_loadu_ps(o + d0 + 8 * i);
        for (int32_t j = 0; j < n; j++) {
            const __m256 pj = _mm256_set1_ps(p[j]);
            const float *vj = v + (int64_t)j * hd + d0;
            for (int i = 0; i < nv; i++) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * i), a[i]);
        }
        for (int i = 0; i < nv; i++) _mm256_storeu_ps(o + d0 + 8 * i, a[i]);
    }
}
static const attn_fns g_attn_avx2 = {to_f32_avx2, round_f16_avx2, dot8_avx2, dot1_avx2, acc_avx2};
#endif

size_t tutti_attn_scratch_floats(int32_t n_ctx, int32_t n_head, int32_t n_head_kv, int32_t head_dim_k,
                                 int32_t head_dim_v) {
    const size_t rows = (size_t)ATTN_TB * (size_t)(n_head / n_head_kv);
    return rows * ((size_t)n_ctx + (size_t)head_dim_k) + (size_t)ATTN_KC * ((size_t)head_dim_k + (size_t)head_dim_v);
}

typedef struct attn_job {
    const tutti_attn_params *p;
    const attn_fns *f;
    size_t scratch_floats; /* per thread */
    int32_t n_blocks;
    atomic_int_fast64_t next; /* next item to take */
} attn_job;

static int32_t attn_first_key(const tutti_attn_params *p, int32_t pos) {
    return p->n_swa > 0 && pos - p->n_swa + 1 > 0 ? pos - p->n_swa + 1 : 0;
}

/* Cache rows c0 .. c0 + nc - 1 of KV head kvh (hd values each) as float. */
static void attn_load_chunk(const attn_fns *f, const uint16_t *cache, int64_t stride, int32_t kvh, int32_t hd,
                            int32_t c0, int32_t nc, float *dst) {
    for (int32_t j = 0; j < nc; j++)
        f->to_f32(cache + (int64_t)(c0 + j) * stride + (int64_t)kvh * hd, dst + (int64_t)j * hd, hd);
}

/* The keys of chunk [c0, c0 + nc) that the query at position pos sees: [*a, *b) (empty when *b <= *a). */
static void attn_chunk_keys(const tutti_attn_params *p, int32_t pos, int32_t c0, int32_t nc, int32_t *a, int32_t *b) {
    const int32_t first = attn_first_key(p, pos);
    *a = first > c0 ? first : c0;
    *b = pos + 1 < c0 + nc ? pos + 1 : c0 + nc;
}

static void attn_worker(void *arg, int ith, int nth) {
    (void)nth;
    attn_job *job = arg;
    const tutti_attn_params *p = job->p;
    const attn_fns *f = job->f;
    const int32_t group = p->n_head / p->n_head_kv, hdk = p->head_dim_k, hdv = p->head_dim_v;
    const int64_t kstride = (int64_t)p->n_head_kv * hdk;
    const int64_t vstride = p->v_stride > 0 ? p->v_stride : (int64_t)p->n_head_kv * hdv;
    const int64_t n_keys_max = (int64_t)p->pos0 + p->n_tok;
    float *scr = p->scratch + (size_t)ith * job->scratch_floats;
    float *S = scr;                                      /* [rows][n_keys_max] scores, then probabilities */
    float *Q = S + (size_t)ATTN_TB * group * n_keys_max; /* [rows][hdk] rounded queries */
    float *KV = Q + (size_t)ATTN_TB * group * hdk;       /* [ATTN_KC][hdk or hdv] converted chunk */

    const int64_t n_items = (int64_t)p->n_head_kv * job->n_blocks;
    for (;;) {
        const int64_t item = atomic_fetch_add(&job->next, 1);
        if (item >= n_items) break;
        const int32_t blk = job->n_blocks - 1 - (int32_t)(item / p->n_head_kv), kvh = (int32_t)(item % p->n_head_kv);
        const int32_t t0 = blk * ATTN_TB, tb = p->n_tok - t0 < ATTN_TB ? p->n_tok - t0 : ATTN_TB;
        const int32_t rows = tb * group;
        /* keys any row of the item sees: [jlo, jhi) */
        const int32_t jlo = attn_first_key(p, p->pos0 + t0), jhi = p->pos0 + t0 + tb;
        const int64_t lds = jhi - jlo;
        /* row r = (token t0 + r / group, head kvh * group + r % group) */
        for (int32_t r = 0; r < rows; r++) {
            const int32_t t = t0 + r / group, h = kvh * group + r % group;
            float *qr = Q + (int64_t)r * hdk;
            memcpy(qr, p->q + ((int64_t)t * p->n_head + h) * hdk, sizeof(float) * (size_t)hdk);
            /* q rounded to f16 before the dot with the f16 keys, as ggml does */
            f->round_f16(qr, hdk);
        }
        /* 1. scores */
        for (int32_t c0 = jlo; c0 < jhi; c0 += ATTN_KC) {
            const int32_t nc = jhi - c0 < ATTN_KC ? jhi - c0 : ATTN_KC;
            attn_load_chunk(f, p->k, kstride, kvh, hdk, c0, nc, KV);
            for (int32_t r = 0; r < rows; r++) {
                int32_t a, b;
                attn_chunk_keys(p, p->pos0 + t0 + r / group, c0, nc, &a, &b);
                const float *qr = Q + (int64_t)r * hdk;
                float *sr = S + (int64_t)r * lds - jlo;
                int32_t j = a;
                for (; j + 8 <= b; j += 8) f->dot8(qr, KV + (int64_t)(j - c0) * hdk, hdk, sr + j);
                for (; j < b; j++) sr[j] = f->dot1(qr, KV + (int64_t)(j - c0) * hdk, hdk);
            }
        }
        /* 2. probabilities */
        for (int32_t r = 0; r < rows; r++) {
            const int32_t pos = p->pos0 + t0 + r / group, a = attn_first_key(p, pos);
            float *sr = S + (int64_t)r * lds - jlo + a;
            const int32_t n = pos + 1 - a;
            for (int32_t j = 0; j < n; j++) {
                float s = sr[j] * p->scale;
                if (p->softcap > 0) s = p->softcap * tanhf(s * (1.0f / p->softcap));
                sr[j] = s;
            }
            softmax_sink(sr, n, p->sinks ? p->sinks[kvh * group + r % group] : -INFINITY);
            f->round_f16(sr, n); /* probabilities in f16 before the f16 values, as ggml */
            float *o = p->out + ((int64_t)(t0 + r / group) * p->n_head + kvh * group + r % group) * hdv;
            memset(o, 0, sizeof(float) * (size_t)hdv);
        }
        /* 3. values */
        for (int32_t c0 = jlo; c0 < jhi; c0 += ATTN_KC) {
            const int32_t nc = jhi - c0 < ATTN_KC ? jhi - c0 : ATTN_KC;
            attn_load_chunk(f, p->v, vstride, kvh, hdv, c0, nc, KV);
            for (int32_t r = 0; r < rows; r++) {
                int32_t a, b;
                attn_chunk_keys(p, p->pos0 + t0 + r / group, c0, nc, &a, &b);
                if (b <= a) continue;
                float *o = p->out + ((int64_t)(t0 + r / group) * p->n_head + kvh * group + r % group) * hdv;
                f->acc(o, S + (int64_t)r * lds - jlo + a, KV + (int64_t)(a - c0) * hdv, b - a, hdv);
            }
        }
    }
}

void tutti_attention(tutti_threadpool *tp, const tutti_attn_params *p) {
    pthread_once(&g_f16_once, f16_table_init);
    attn_job job = {
        .p = p,
        .f = &g_attn_scalar,
        .scratch_floats = tutti_attn_scratch_floats(p->n_ctx, p->n_head, p->n_head_kv, p->head_dim_k, p->head_dim_v),
        .n_blocks = (p->n_tok + ATTN_TB - 1) / ATTN_TB,
    };
    atomic_init(&job.next, 0);
#ifdef OPS_X86
    const tutti_simd path = tutti_simd_current();
    if ((path == TUTTI_SIMD_AVX2 || path == TUTTI_SIMD_AVX512) && p->head_dim_k % 8 == 0 && p->head_dim_v % 8 == 0)
        job.f = &g_attn_avx2;
#endif
    tutti_threadpool_run_dynamic(tp, attn_worker, &job);
}
