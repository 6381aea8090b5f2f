/* quant layer: reference dequantizers, reference dot product, reference
 * quantizers.
 *
 * Expected values come from llama.cpp, never from tutti:
 *   - tests/data/quant/deq_*.f32: gguf-py's gguf.quants.dequantize of the
 *     first 1024 elements of a tensor of each type in ../shared/ref/arch
 *     (the generator also checks ggml's dequantize_row_* gives the same bits);
 *   - the quantized tensors of ../shared/ref/arch/llama-*.gguf, which
 *     llama-quantize made from llama-F32.gguf;
 *   - tests/data/quant/q_*.dat: ggml's quantize_row_*_ref (and gguf-py's
 *     quantize where it has one) of the synthetic rows quant_input.f32;
 *   - the compiler's _Float16 conversion for every half bit pattern.
 * tests/data/quant/make_expected.sh regenerates the data in the oracle
 * chroot; manifest.txt says which tensor and byte offset each case uses.
 * Tensors are located with tutti's gguf reader, which must agree with the
 * byte offsets gguf-py recorded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "test_common.h"

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "tutti.h"

#define DATA_DIR TUTTI_SOURCE_DIR "/tests/data/quant/"

typedef struct {
    char kind[16], type_name[16], file[128], tensor[128], expected[64], dst_file[128], input[64];
    int type;
    long long offset, dst_offset, n;
} qcase;

/* Reads manifest.txt (format documented in make_expected.py). */
static int load_manifest(qcase *cases, int max) {
    size_t len;
    char *text = read_file(DATA_DIR "manifest.txt", &len);
    assert_non_null(text);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || n >= max) continue;
        qcase *c = &cases[n];
        memset(c, 0, sizeof *c);
        int ok = 0;
        if (sscanf(line, "%15s", c->kind) != 1) continue;
        if (!strcmp(c->kind, "dequant"))
            ok = sscanf(line, "%*s %15s %d %127s %127s %lld %lld %63s", c->type_name, &c->type, c->file, c->tensor,
                        &c->offset, &c->n, c->expected) == 7;
        else if (!strcmp(c->kind, "quant_file"))
            ok = sscanf(line, "%*s %15s %d %127s %lld %127s %lld %lld %127s", c->type_name, &c->type, c->file,
                        &c->offset, c->dst_file, &c->dst_offset, &c->n, c->tensor) == 8;
        else if (!strcmp(c->kind, "quant")) {
            strcpy(c->input, "quant_input.f32");
            const int k =
                sscanf(line, "%*s %15s %d %lld %63s %63s", c->type_name, &c->type, &c->n, c->expected, c->input);
            ok = k >= 4;
            if (k == 5 && c->input[0] == '#') strcpy(c->input, "quant_input.f32"); /* a comment */
        } else if (!strcmp(c->kind, "dequant_raw"))
            ok = sscanf(line, "%*s %15s %d %127s %lld %63s", c->type_name, &c->type, c->file, &c->n, c->expected) == 5;
        if (!ok) fail_msg("manifest.txt: cannot parse line: %s", line);
        n++;
    }
    free(text);
    return n;
}

/* Whole shared file (freed by the caller); fails the test if unreadable. */
static uint8_t *shared_file(const char *rel, size_t *len) {
    uint8_t *b = (uint8_t *)read_file(shared_path(rel), len);
    if (!b) fail_msg("cannot read %s", shared_path(rel));
    return b;
}

/* The mapped data of `tensor` in the shared GGUF `rel`, checked against the
 * bytes gguf-py located at file offset `offset` (whole file in `raw`). */
static const uint8_t *tensor_data(gguf_file **gf, const char *rel, const char *tensor, int type, const uint8_t *raw,
                                  size_t raw_len, long long offset, size_t nbytes) {
    *gf = gguf_open(shared_path(rel));
    if (!*gf) fail_msg("gguf_open %s: %s", rel, tutti_last_error());
    const gguf_tensor_info *t = gguf_find_tensor(*gf, tensor);
    if (!t) fail_msg("%s: tensor %s not found by the gguf reader", rel, tensor);
    assert_int_equal(t->type, type);
    assert_true(nbytes <= t->size && (size_t)offset + nbytes <= raw_len);
    if (memcmp(t->data, raw + offset, nbytes))
        fail_msg("%s: gguf reader's data of %s is not at file offset %lld where gguf-py found it", rel, tensor, offset);
    return t->data;
}

static float *expected_floats(const char *name, long long n) {
    char path[512];
    snprintf(path, sizeof path, DATA_DIR "%s", name);
    size_t len;
    float *f = (float *)read_file(path, &len);
    if (!f) fail_msg("cannot read %s", path);
    if (len != (size_t)n * sizeof(float)) fail_msg("%s: %zu bytes, expected %lld floats", path, len, n);
    return f;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- dequantization ------------------------------------------------------- */

/* Every supported type dequantizes real GGUF data bit-exactly like gguf-py /
 * ggml, also from an odd (unaligned) address. */
static void test_dequant_matches_gguf_py(void **state) {
    (void)state;
    require_shared();
    qcase cases[64];
    int n_cases = load_manifest(cases, 64), n_deq = 0;
    for (int i = 0; i < n_cases; i++) {
        const qcase *c = &cases[i];
        if (strcmp(c->kind, "dequant")) continue;
        n_deq++;
        assert_true(tutti_type_supported(c->type));
        size_t flen;
        uint8_t *file = shared_file(c->file, &flen);
        const size_t nbytes = tutti_row_size(c->type, c->n);
        assert_true(nbytes > 0 && (size_t)c->offset + nbytes <= flen);
        gguf_file *gf;
        const uint8_t *mapped = tensor_data(&gf, c->file, c->tensor, c->type, file, flen, c->offset, nbytes);
        float *want = expected_floats(c->expected, c->n);
        float *got = malloc(sizeof(float) * (size_t)c->n);
        uint8_t *odd = malloc(nbytes + 1);
        assert_non_null(got);
        assert_non_null(odd);
        memcpy(odd + 1, file + c->offset, nbytes);
        for (int pass = 0; pass < 2; pass++) {
            const uint8_t *src = pass ? odd + 1 : mapped;
            memset(got, 0xff, sizeof(float) * (size_t)c->n);
            assert_true(tutti_dequantize_row(c->type, src, got, c->n));
            for (long long j = 0; j < c->n; j++) {
                if (bits(got[j]) != bits(want[j]))
                    fail_msg("%s (%s of %s, %s address): element %lld = %.9g, gguf-py says %.9g", c->type_name,
                             c->tensor, c->file, pass ? "unaligned" : "mapped", j, (double)got[j], (double)want[j]);
            }
        }
        print_message("dequant %-7s %lld elements bit-exact\n", c->type_name, c->n);
        gguf_close(gf);
        free(odd);
        free(got);
        free(want);
        free(file);
    }
    assert_int_equal(n_deq, 15);
}

/* Random blocks of the types without a file in ../shared (MXFP4, the
 * i-quants: every code, sign and grid index, scales of both signs) dequantize
 * like gguf-py / ggml, also from an odd address. */
static void test_dequant_random_blocks(void **state) {
    (void)state;
    qcase cases[64];
    int n_cases = load_manifest(cases, 64), n_raw = 0;
    for (int i = 0; i < n_cases; i++) {
        const qcase *c = &cases[i];
        if (strcmp(c->kind, "dequant_raw")) continue;
        assert_true(tutti_type_supported(c->type));
        n_raw++;
        char path[512];
        snprintf(path, sizeof path, DATA_DIR "%s", c->file);
        size_t len;
        uint8_t *raw = (uint8_t *)read_file(path, &len);
        if (!raw) fail_msg("cannot read %s", path);
        const size_t nbytes = tutti_row_size(c->type, c->n);
        assert_int_equal(len, nbytes);
        float *want = expected_floats(c->expected, c->n), *got = malloc(sizeof(float) * (size_t)c->n);
        uint8_t *odd = malloc(nbytes + 1);
        assert_true(got && odd);
        memcpy(odd + 1, raw, nbytes);
        for (int pass = 0; pass < 2; pass++) {
            memset(got, 0xff, sizeof(float) * (size_t)c->n);
            assert_true(tutti_dequantize_row(c->type, pass ? odd + 1 : raw, got, c->n));
            for (long long j = 0; j < c->n; j++)
                if (bits(got[j]) != bits(want[j]))
                    fail_msg("%s random block %lld, element %lld: %.9g, gguf-py says %.9g", c->type_name,
                             j / tutti_type_get(c->type)->block_size, j, (double)got[j], (double)want[j]);
        }
        print_message("dequant %-7s %lld random elements bit-exact\n", c->type_name, c->n);
        free(odd);
        free(got);
        free(want);
        free(raw);
    }
    assert_int_equal(n_raw, 8);
}

/* Files llama-quantize wrote in the new types (tests/data/quant/models, see
 * make_models.sh): every quantized tensor, opened with tutti's GGUF reader
 * and dequantized whole, has the sha256 of gguf-py's dequantization. */
static void test_dequant_model_files(void **state) {
    (void)state;
    size_t len;
    char *list = read_file(DATA_DIR "models/dequant.sha256", &len);
    assert_non_null(list);
    int n_checked = 0;
    char *save = NULL;
    for (char *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char file[128], tensor[128], type_name[16], want[65];
        long long n;
        if (sscanf(line, "%127s %127s %15s %lld %64s", file, tensor, type_name, &n, want) != 5)
            fail_msg("dequant.sha256: cannot parse: %s", line);
        char path[512];
        snprintf(path, sizeof path, DATA_DIR "models/%s", file);
        gguf_file *gf = gguf_open(path);
        if (!gf) fail_msg("gguf_open %s: %s", path, tutti_last_error());
        const gguf_tensor_info *t = gguf_find_tensor(gf, tensor);
        if (!t) fail_msg("%s: no tensor %s", file, tensor);
        if (strcasecmp(tutti_type_name(t->type), type_name))
            fail_msg("%s %s: type %s, not %s", file, tensor, tutti_type_name(t->type), type_name);
        assert_int_equal(t->size, tutti_row_size(t->type, n));
        float *got = malloc(sizeof(float) * (size_t)n);
        assert_non_null(got);
        assert_true(tutti_dequantize_row(t->type, t->data, got, n));
        char hex[65];
        sha256_hex(got, sizeof(float) * (size_t)n, hex);
        if (strcmp(hex, want))
            fail_msg("%s %s (%s): dequantized values differ from gguf-py's", file, tensor, type_name);
        n_checked++;
        free(got);
        gguf_close(gf);
    }
    free(list);
    print_message("dequant: %d tensors of llama-quantize files equal to gguf-py's\n", n_checked);
    assert_int_equal(n_checked, 72); /* 8 files of 9 quantized tensors */
}

/* F16 for all 65536 bit patterns against the compiler's own _Float16. */
static void test_dequant_f16_all_patterns(void **state) {
    (void)state;
#ifdef __FLT16_MAX__
    uint8_t raw[2 * 65536];
    static float got[65536];
    for (int i = 0; i < 65536; i++) {
        raw[2 * i] = (uint8_t)i;
        raw[2 * i + 1] = (uint8_t)(i >> 8);
    }
    assert_true(tutti_dequantize_row(TUTTI_TYPE_F16, raw, got, 65536));
    for (int i = 0; i < 65536; i++) {
        _Float16 h;
        uint16_t u = (uint16_t)i;
        memcpy(&h, &u, 2);
        const float want = (float)h;
        if (isnan(want)) {
            if (!isnan(got[i])) fail_msg("half 0x%04x: NaN expected, got %g", i, (double)got[i]);
        } else if (bits(got[i]) != bits(want)) {
            fail_msg("half 0x%04x: got %.9g, _Float16 says %.9g", i, (double)got[i], (double)want);
        }
    }
#else
    skip();
#endif
}

/* ---- dot product ---------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float rand_uniform(void) { /* [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* tutti_vec_dot_ref == a double-precision dot of the reference
 * dequantization (gguf-py's values) with random x, for awkward lengths.
 * Tolerance: the worst-case error of n float32 multiply-adds summed in
 * order, (n + 2) * 2^-24 * sum |w_i x_i| (Higham, recursive summation). */
static void test_vec_dot_ref(void **state) {
    (void)state;
    require_shared();
    qcase cases[64];
    int n_cases = load_manifest(cases, 64);
    for (int i = 0; i < n_cases; i++) {
        const qcase *c = &cases[i];
        const bool raw = !strcmp(c->kind, "dequant_raw");
        if (strcmp(c->kind, "dequant") && !raw) continue;
        size_t flen;
        char path[512];
        snprintf(path, sizeof path, DATA_DIR "%s", c->file);
        uint8_t *file = raw ? (uint8_t *)read_file(path, &flen) : shared_file(c->file, &flen);
        assert_non_null(file);
        const uint8_t *w = raw ? file : file + c->offset;
        float *want = expected_floats(c->expected, c->n);
        const tutti_type_traits *t = tutti_type_get(c->type);
        assert_non_null(t);
        const long long bs = t->block_size;
        const long long lens_1[] = {1, 7, 255, 256, 257, 1000, 1024};
        const long long lens_b[] = {1, 3, 7, 13, 1024 / bs}; /* in blocks; > 1024 elements skipped */
        double worst = 0;
        for (int k = 0; k < 7; k++) {
            const long long n = bs == 1 ? lens_1[k] : (k < 5 ? lens_b[k] * bs : 0);
            if (n <= 0 || n > c->n || n > 1024) continue;
            float x[1024];
            for (long long j = 0; j < n; j++) x[j] = rand_uniform();
            double exact = 0, mag = 0;
            for (long long j = 0; j < n; j++) {
                exact += (double)want[j] * (double)x[j];
                mag += fabs((double)want[j] * (double)x[j]);
            }
            if (!isfinite(mag)) continue; /* random MXFP4 scales reach inf */
            const float got = tutti_vec_dot_ref(c->type, w, x, n);
            const double tol = (double)(n + 2) * ldexp(1.0, -24) * mag;
            if (!(fabs((double)got - exact) <= tol))
                fail_msg("%s n=%lld: vec_dot_ref %.9g, exact %.9g, |diff| %.3g > tol %.3g", c->type_name, n,
                         (double)got, exact, fabs((double)got - exact), tol);
            if (mag > 0 && fabs((double)got - exact) / tol > worst) worst = fabs((double)got - exact) / tol;
        }
        print_message("vec_dot_ref %-7s worst |err|/tol = %.3f\n", c->type_name, worst);
        free(want);
        free(file);
    }
}

/* ---- quantization --------------------------------------------------------- */

static void compare_blocks(const char *what, int type, const uint8_t *got, const uint8_t *want, long long n) {
    const tutti_type_traits *t = tutti_type_get(type);
    const size_t bsz = t->type_size;
    const long long nb = n / t->block_size;
    long long n_bad = 0, first = -1;
    for (long long b = 0; b < nb; b++) {
        if (memcmp(got + b * bsz, want + b * bsz, bsz)) {
            if (first < 0) first = b;
            n_bad++;
        }
    }
    if (n_bad) {
        size_t byte = 0;
        while (got[first * bsz + byte] == want[first * bsz + byte]) byte++;
        fail_msg("%s: %lld of %lld %s blocks differ; first: block %lld byte %zu (got 0x%02x, want 0x%02x)", what, n_bad,
                 nb, t->name, first, byte, got[first * bsz + byte], want[first * bsz + byte]);
    }
}

/* Quantizing llama-F32.gguf's tensors gives the bytes llama-quantize wrote. */
static void test_quantize_matches_llama_quantize(void **state) {
    (void)state;
    require_shared();
    qcase cases[64];
    int n_cases = load_manifest(cases, 64), n_q = 0;
    for (int i = 0; i < n_cases; i++) {
        const qcase *c = &cases[i];
        if (strcmp(c->kind, "quant_file")) continue;
        n_q++;
        size_t slen, dlen;
        uint8_t *src = shared_file(c->file, &slen);
        uint8_t *dst = shared_file(c->dst_file, &dlen);
        const size_t nbytes = tutti_row_size(c->type, c->n);
        gguf_file *gsrc, *gdst;
        const uint8_t *src_data =
            tensor_data(&gsrc, c->file, c->tensor, TUTTI_TYPE_F32, src, slen, c->offset, 4 * (size_t)c->n);
        const uint8_t *want = tensor_data(&gdst, c->dst_file, c->tensor, c->type, dst, dlen, c->dst_offset, nbytes);
        float *x = malloc(4 * (size_t)c->n);
        uint8_t *got = malloc(nbytes);
        assert_non_null(x);
        assert_non_null(got);
        memcpy(x, src_data, 4 * (size_t)c->n);
        assert_true(tutti_quantize_row_ref(c->type, x, got, c->n));
        char what[300];
        snprintf(what, sizeof what, "%s of %s vs %s", c->tensor, c->file, c->dst_file);
        compare_blocks(what, c->type, got, want, c->n);
        print_message("quantize %-5s %s: %lld elements bit-exact with llama-quantize\n", c->type_name, c->tensor, c->n);
        gguf_close(gsrc);
        gguf_close(gdst);
        free(got);
        free(x);
        free(dst);
        free(src);
    }
    assert_int_equal(n_q, 8);
}

/* Edge cases (zeros, constants, all-positive, tiny, huge, ties) give the
 * bytes of ggml's quantize_row_*_ref (and gguf-py's quantize). */
static void test_quantize_edge_cases(void **state) {
    (void)state;
    qcase cases[64];
    int n_cases = load_manifest(cases, 64), n_q = 0;
    for (int i = 0; i < n_cases; i++) {
        const qcase *c = &cases[i];
        if (strcmp(c->kind, "quant")) continue;
        n_q++;
        char xpath[512];
        snprintf(xpath, sizeof xpath, DATA_DIR "%s", c->input);
        size_t xlen;
        float *x = (float *)read_file(xpath, &xlen);
        if (!x) fail_msg("cannot read %s", xpath);
        assert_true((size_t)c->n * 4 <= xlen);
        char path[512];
        snprintf(path, sizeof path, DATA_DIR "%s", c->expected);
        size_t wlen;
        uint8_t *want = (uint8_t *)read_file(path, &wlen);
        assert_non_null(want);
        const size_t nbytes = tutti_row_size(c->type, c->n);
        assert_int_equal(wlen, nbytes);
        uint8_t *got = malloc(nbytes + 1);
        assert_non_null(got);
        /* odd destination address: blocks are packed, nothing may assume alignment */
        assert_true(tutti_quantize_row_ref(c->type, x, got + 1, c->n));
        compare_blocks(c->expected, c->type, got + 1, want, c->n);
        print_message("quantize %-5s synthetic edge cases (%s) bit-exact with ggml\n", c->type_name, c->input);
        free(got);
        free(want);
        free(x);
    }
    assert_int_equal(n_q, 11);
}

/* Round trip error bounds that follow from each format's geometry (not from
 * measured output):
 *   Q8_0: |x - x^| <= d/2 + 127 d 2^-11 (f16 scale), d = amax/127
 *   Q8_K: |x - x^| <= d/2 (float32 scale) + float rounding
 *   Q4_0 / Q5_0: <= |d| (the element opposite the max clamps to level 7 / 15)
 *   Q4_1 / Q5_1: <= d/2 + (|min| + 31 d) 2^-11
 *   K-quants on Gaussian data: RMS error / sigma below twice the uniform
 *   quantizer's step/sqrt(12) with a range of 5 sigma per sub-block:
 *   Q4_K 2*(5/15)/3.46 = 0.19, Q5_K 0.093, Q6_K (symmetric, step
 *   2.5/32) 0.045. */
static void test_quantize_round_trip_bounds(void **state) {
    (void)state;
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N * 2];
    for (int i = 0; i < N; i++) {
        /* sum of uniforms ~ Gaussian, sigma 1 */
        float s = 0;
        for (int k = 0; k < 12; k++) s += rand_uniform() * 0.5f;
        x[i] = s;
    }
    const int legacy[] = {TUTTI_TYPE_Q8_0, TUTTI_TYPE_Q4_0, TUTTI_TYPE_Q5_0, TUTTI_TYPE_Q4_1, TUTTI_TYPE_Q5_1};
    for (int k = 0; k < 5; k++) {
        const int type = legacy[k];
        assert_true(tutti_quantize_row_ref(type, x, q, N));
        assert_true(tutti_dequantize_row(type, q, y, N));
        double worst = 0;
        for (int b = 0; b < N / 32; b++) {
            float amax = 0, mn = x[32 * b], mx = x[32 * b];
            for (int j = 0; j < 32; j++) {
                amax = fmaxf(amax, fabsf(x[32 * b + j]));
                mn = fminf(mn, x[32 * b + j]);
                mx = fmaxf(mx, x[32 * b + j]);
            }
            double bound;
            switch (type) {
            case TUTTI_TYPE_Q8_0: bound = amax / 127.0 * (0.5 + 127 * ldexp(1, -11)); break;
            case TUTTI_TYPE_Q4_0: bound = amax / 8.0 * (1 + 8 * ldexp(1, -11)); break;
            case TUTTI_TYPE_Q5_0: bound = amax / 16.0 * (1 + 16 * ldexp(1, -11)); break;
            case TUTTI_TYPE_Q4_1: {
                double d = (mx - mn) / 15.0;
                bound = d / 2 + (fabs(mn) + 15 * d) * ldexp(1, -11);
            } break;
            default: {
                double d = (mx - mn) / 31.0;
                bound = d / 2 + (fabs(mn) + 31 * d) * ldexp(1, -11);
            } break;
            }
            bound *= 1.0001;
            for (int j = 0; j < 32; j++) {
                const double e = fabs((double)x[32 * b + j] - y[32 * b + j]);
                if (e > bound)
                    fail_msg("%s block %d element %d: |x - x^| = %g > bound %g", tutti_type_name(type), b, j, e, bound);
                if (e / bound > worst) worst = e / bound;
            }
        }
        print_message("round trip %-5s max |err|/bound = %.3f\n", tutti_type_name(type), worst);
    }

    /* Q8_K: check the block struct directly (not a tensor type) */
    static tutti_block_q8_K blk[N / TUTTI_QK_K];
    assert_true(tutti_quantize_row_ref(TUTTI_TYPE_Q8_K, x, blk, N));
    for (int b = 0; b < N / TUTTI_QK_K; b++) {
        float amax = 0;
        for (int j = 0; j < TUTTI_QK_K; j++) amax = fmaxf(amax, fabsf(x[TUTTI_QK_K * b + j]));
        const double bound = amax / 127.0 * 0.5 * 1.0001;
        for (int j = 0; j < TUTTI_QK_K; j++) {
            const double e = fabs((double)x[TUTTI_QK_K * b + j] - (double)blk[b].d * blk[b].qs[j]);
            if (e > bound) fail_msg("q8_K block %d element %d: |err| %g > %g", b, j, e, bound);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += blk[b].qs[16 * g + j];
            assert_int_equal(blk[b].bsums[g], s);
        }
    }

    const int kq[] = {TUTTI_TYPE_Q4_K, TUTTI_TYPE_Q5_K, TUTTI_TYPE_Q6_K};
    const double max_rel[] = {0.19, 0.093, 0.045};
    for (int k = 0; k < 3; k++) {
        assert_true(tutti_quantize_row_ref(kq[k], x, q, N));
        assert_true(tutti_dequantize_row(kq[k], q, y, N));
        double se = 0, sx = 0;
        for (int i = 0; i < N; i++) {
            se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            sx += (double)x[i] * x[i];
        }
        const double rel = sqrt(se / sx);
        print_message("round trip %-5s rms err / rms x = %.4f (bound %.3f)\n", tutti_type_name(kq[k]), rel, max_rel[k]);
        assert_true(rel < max_rel[k]);
    }
}

/* ---- bad input ------------------------------------------------------------ */

static void test_bad_input(void **state) {
    (void)state;
    float f[64] = {0};
    uint8_t b[512] = {0};
    /* id 4 was never assigned by ggml; Q8_1 is known but not computable */
    assert_false(tutti_dequantize_row(4, b, f, 32));
    assert_non_null(strstr(tutti_last_error(), "not a ggml tensor type"));
    assert_false(tutti_dequantize_row(TUTTI_TYPE_Q8_1, b, f, 32));
    assert_non_null(strstr(tutti_last_error(), "q8_1"));
    assert_false(tutti_dequantize_row(TUTTI_TYPE_Q4_0, b, f, 33));
    assert_non_null(strstr(tutti_last_error(), "multiple of the block size 32"));
    assert_false(tutti_dequantize_row(TUTTI_TYPE_Q4_0, b, f, -32));
    assert_false(tutti_dequantize_row(TUTTI_TYPE_Q4_0, NULL, f, 32));
    assert_true(tutti_dequantize_row(TUTTI_TYPE_Q4_0, NULL, NULL, 0));
    assert_false(tutti_dequantize_row(-1, b, f, 32));
    assert_false(tutti_dequantize_row(1000, b, f, 32));

    assert_true(isnan(tutti_vec_dot_ref(TUTTI_TYPE_Q4_K, b, f, 32)));
    assert_non_null(strstr(tutti_last_error(), "256"));
    assert_true(isnan(tutti_vec_dot_ref(TUTTI_TYPE_TQ1_0, b, f, 256)));
    assert_true(tutti_vec_dot_ref(TUTTI_TYPE_Q8_0, b, f, 0) == 0.0f);

    f[3] = NAN;
    assert_false(tutti_quantize_row_ref(TUTTI_TYPE_Q8_0, f, b, 32));
    assert_non_null(strstr(tutti_last_error(), "element 3"));
    f[3] = INFINITY;
    assert_false(tutti_quantize_row_ref(TUTTI_TYPE_Q4_K, f, b, 32));
    f[3] = 0;
    assert_false(tutti_quantize_row_ref(TUTTI_TYPE_IQ4_NL, f, b, 32));
    assert_non_null(strstr(tutti_last_error(), "no quantizer"));
    assert_false(tutti_type_can_quantize(TUTTI_TYPE_Q2_K));
    assert_true(tutti_type_can_quantize(TUTTI_TYPE_Q8_K));
    assert_false(tutti_quantize_row_ref(TUTTI_TYPE_Q8_0, NULL, b, 32));
    /* a NaN given to a typed quantizer (no checks) must not crash either */
    f[0] = NAN;
    tutti_quantize_row_q8_0_ref(f, b, 32);
    tutti_quantize_row_q4_1_ref(f, b, 32);
    tutti_quantize_row_q8_K_ref((float[256]){NAN}, b, 256);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        shared_unit_test(test_dequant_matches_gguf_py),
        cmocka_unit_test(test_dequant_random_blocks),
        cmocka_unit_test(test_dequant_model_files),
        cmocka_unit_test(test_dequant_f16_all_patterns),
        shared_unit_test(test_vec_dot_ref),
        shared_unit_test(test_quantize_matches_llama_quantize),
        cmocka_unit_test(test_quantize_edge_cases),
        cmocka_unit_test(test_quantize_round_trip_bounds),
        cmocka_unit_test(test_bad_input),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
