/* Tests of the gguf layer: the reader against llama.cpp's own Python reader
 * (gguf-py) on every GGUF file under ../shared, the writer (round trips, and
 * byte-identical re-serialization of files written by llama.cpp's tools), and
 * the validation of malformed files (each must be refused with a message
 * naming the field, never crash or read out of bounds: this test runs under
 * ASan in CI, and truncated inputs are exact-size heap copies). */
#include "test_common.h"

#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "quant/quant.h"
#include "tutti.h"
#include "util/error.h"
#include "util/file.h"

/* ------------------------------------------------------------------------ */
/* Facts about every GGUF file under ../shared, produced by gguf-py (the
 * `gguf` package of llama.cpp, Debian python3-gguf in the oracle chroot,
 * GGUFReader) — NOT by tutti.  kv_digest / tensor_digest are FNV-1a-64 over a
 * canonical serialization of what gguf-py parsed (the script at the end of
 * this file; canon_kv_digest below recomputes it), so they pin every key,
 * type, array length and value byte, and every tensor name, shape, type,
 * relative and absolute offset and byte size. */
typedef struct file_facts {
    const char *file;
    uint32_t version;
    int64_t n_kv, n_tensors;
    uint32_t alignment;
    uint64_t data_offset; /* absolute offset of the data section */
    uint64_t kv_digest, tensor_digest;
} file_facts;

static const file_facts g_facts[] = {
    {"models/BabyLlama-tok105/babyllama-tok105.gguf", 3, 21, 48, 32, 5568, 0x64c0f9412a23dd1dull,
     0x06d328ce0a89f8e9ull},
    {"models/BabyLlama-tok361/babyllama-tok361.gguf", 3, 21, 48, 32, 11200, 0x43d0e36ac1afe821ull,
     0x5dce723bf5c77e18ull},
    {"models/TinyStories-656K-Q8_0.gguf", 3, 34, 20, 32, 50848, 0x85e0ec99897ffdcbull, 0xe0aeeae50b29debaull},
    {"models/aidreams260K/aidreams260K.gguf", 3, 21, 39, 32, 13728, 0xb9593c15054f12aaull, 0x32fcad320a1f8bd3ull},
    {"models/stories260K.gguf", 3, 19, 48, 32, 14176, 0x2a70204cc889752eull, 0xa87a92fe875d4df4ull},
    {"models/vocab/ggml-vocab-baichuan.gguf", 3, 18, 0, 32, 1341024, 0x8fcf9a1a2e908d24ull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-bert-bge.gguf", 3, 20, 0, 32, 627552, 0xd6951af062889e7dull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-deepseek-coder.gguf", 3, 25, 0, 32, 1156096, 0xe80dc05536be0b7dull,
     0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-deepseek-llm.gguf", 3, 23, 0, 32, 3970176, 0x33a19ab0a9c68369ull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-falcon.gguf", 3, 18, 0, 32, 2287744, 0xe14d178b38cf4edcull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-gpt-2.gguf", 3, 16, 0, 32, 1766816, 0xa8051eed70405e4cull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-gpt-neox.gguf", 3, 17, 0, 32, 1771456, 0x603be7de381ffb74ull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-llama-spm.gguf", 3, 22, 0, 32, 723872, 0x491df497c0b14b22ull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-llama3.gguf", 3, 12, 0, 32, 7818208, 0xb64309c17a813597ull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-mpt.gguf", 3, 17, 0, 32, 1771424, 0x7f3f916a8c6ce039ull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-phi-3.gguf", 3, 26, 0, 32, 726048, 0x93d98b11be5ea754ull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-qwen3.gguf", 3, 12, 0, 32, 5926080, 0xd1882a92568f01f6ull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-refact.gguf", 3, 18, 0, 32, 1720736, 0xe5c56c90125a172cull, 0x14650fb0739d0383ull},
    {"models/vocab/ggml-vocab-starcoder.gguf", 3, 19, 0, 32, 1719360, 0xf245472714eb5990ull, 0x14650fb0739d0383ull},
    {"models/zh-poem/zh-poem-750K.gguf", 3, 22, 48, 32, 42656, 0xadb2b5a17b988b7eull, 0x693a77a8ab9073e0ull},
    {"ref/arch/gemma2-F16.gguf", 3, 25, 24, 32, 13024, 0xe698d6523e91fe53ull, 0x72729d6d646ea3aaull},
    {"ref/arch/gemma2-Q4_K_M.gguf", 3, 25, 24, 32, 13024, 0x26638ea59cab5bfdull, 0x371c30877c2378fbull},
    {"ref/arch/gemma2-Q8_0.gguf", 3, 25, 24, 32, 13024, 0x268e2e62eafd7775ull, 0x9714032e9522067bull},
    {"ref/arch/gemma3-F16.gguf", 3, 24, 93, 32, 17024, 0xe458b6028718cf97ull, 0xb676614c37450532ull},
    {"ref/arch/gemma3-Q4_K_M.gguf", 3, 24, 93, 32, 17024, 0x244e0e13338448b9ull, 0xcda27f983c487736ull},
    {"ref/arch/gemma3-Q8_0.gguf", 3, 24, 93, 32, 17024, 0x2478add081d66431ull, 0x9cc6838c0cd6fed2ull},
    {"ref/arch/llama-BF16.gguf", 3, 23, 21, 32, 12736, 0x6813592de80503b7ull, 0x0d0a23a663f808acull},
    {"ref/arch/llama-F16.gguf", 3, 23, 21, 32, 12736, 0xc76e2e305886d946ull, 0x1bb4fa456c196c16ull},
    {"ref/arch/llama-F32.gguf", 3, 21, 21, 32, 12640, 0x7bf836120065593aull, 0x13a26232100e9554ull},
    {"ref/arch/llama-IQ4_NL.gguf", 3, 23, 21, 32, 12736, 0xc6ee4ef86d9086deull, 0xa9bf22fd8afbf87aull},
    {"ref/arch/llama-IQ4_XS.gguf", 3, 23, 21, 32, 12736, 0xa708f2cebe83d809ull, 0x5a00e75d68003c58ull},
    {"ref/arch/llama-Q2_K.gguf", 3, 23, 21, 32, 12736, 0x2748e26ab3ff013dull, 0xa258d1c9b892cec5ull},
    {"ref/arch/llama-Q3_K_M.gguf", 3, 23, 21, 32, 12736, 0xe7538a5a0793881bull, 0x21c8b1fc38092bc3ull},
    {"ref/arch/llama-Q4_0.gguf", 3, 23, 21, 32, 12736, 0x2773822802511cb5ull, 0xaf901d07926b39a4ull},
    {"ref/arch/llama-Q4_1.gguf", 3, 23, 21, 32, 12736, 0x8778d61fac1b6024ull, 0x2cdb7a8668e65025ull},
    {"ref/arch/llama-Q4_K_M.gguf", 3, 23, 21, 32, 12736, 0x0763864104f25268ull, 0xa94c88fe4b31bbb6ull},
    {"ref/arch/llama-Q5_0.gguf", 3, 23, 21, 32, 12736, 0x673e3a7b606a7a5full, 0x7ffbf36074de66caull},
    {"ref/arch/llama-Q5_1.gguf", 3, 23, 21, 32, 12736, 0xc7438e730a34bdceull, 0xa17839fa78652373ull},
    {"ref/arch/llama-Q5_K_M.gguf", 3, 23, 21, 32, 12736, 0xc718eeb5bbe2a256ull, 0x6b652cebd6078277ull},
    {"ref/arch/llama-Q6_K.gguf", 3, 23, 21, 32, 12736, 0x271e42ad65ace5c5ull, 0x10c6bb99be1fd1eaull},
    {"ref/arch/llama-Q8_0.gguf", 3, 23, 21, 32, 12736, 0x078e25fe53446de0ull, 0xd227a1e37f36f6cbull},
    {"ref/arch/llama-ropefreqs-F16.gguf", 3, 23, 22, 32, 12768, 0xf4aec0d160a18be0ull, 0x3cbb2675b6d72edbull},
    {"ref/arch/llama-tied-F16.gguf", 3, 23, 20, 32, 12672, 0xb39131731f0ce11aull, 0x919a654f6a72fb50ull},
    {"ref/arch/phi3-F16.gguf", 3, 22, 15, 32, 12320, 0xb99184373a1c9c38ull, 0x94a4d0e9444303a2ull},
    {"ref/arch/phi3-Q4_K_M.gguf", 3, 22, 15, 32, 12320, 0x799c2c268db12316ull, 0x880c8afde085a620ull},
    {"ref/arch/phi3-Q8_0.gguf", 3, 22, 15, 32, 12320, 0x79718c693f5f079eull, 0xe1e62162c7d9107cull},
    {"ref/arch/qwen2-F16.gguf", 3, 22, 26, 32, 12928, 0xfb954847c7438148ull, 0x10e930a13be59495ull},
    {"ref/arch/qwen2-Q4_K_M.gguf", 3, 22, 26, 32, 12928, 0xbb9ff0371ad80826ull, 0x336d74aa26e82eb3ull},
    {"ref/arch/qwen2-Q8_0.gguf", 3, 22, 26, 32, 12928, 0xbb755079cc85ecaeull, 0x32bd89450d4500deull},
    {"ref/arch/qwen3-F16.gguf", 3, 22, 24, 32, 12864, 0x524b50821c85a64dull, 0x95b5621eff77c4f8ull},
    {"ref/arch/qwen3-Q4_K_M.gguf", 3, 22, 24, 32, 12864, 0x1280982ebe6c48a3ull, 0x8086d1e8c1035832ull},
    {"ref/arch/qwen3-Q8_0.gguf", 3, 22, 24, 32, 12864, 0x1255f871701a2d2bull, 0x84435bd2d0a05974ull},
};

#define N_FACTS (sizeof g_facts / sizeof g_facts[0])

/* ------------------------------------------------------------------------ */
/* canonical digests (must match facts.py, reproduced here):
 *   h = FNV-1a-64 offset basis
 *   for each kv in file order:
 *     h <- key bytes, 0x00, u32 type,
 *          [arrays: u32 element type, u64 element count],
 *          each value: strings as u64 length + bytes, scalars as their raw
 *          little-endian bytes
 *   for each tensor in file order (separate h):
 *     name bytes, 0x00, u32 n_dims, n_dims x u64 ne, u32 type,
 *     u64 relative offset, u64 absolute offset, u64 n_bytes */

typedef struct fnv {
    uint64_t h;
} fnv;
static void fnv_add(fnv *s, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        s->h ^= b[i];
        s->h *= 1099511628211ull;
    }
}
static void fnv_u32(fnv *s, uint32_t v) { fnv_add(s, &v, 4); }
static void fnv_u64(fnv *s, uint64_t v) { fnv_add(s, &v, 8); }

static size_t value_size(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static uint64_t canon_kv_digest(const gguf_file *f) {
    fnv s = {1469598103934665603ull};
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_kv_key(f, i);
        gguf_type t = gguf_kv_type(f, i);
        fnv_add(&s, k.data, (size_t)k.len);
        fnv_add(&s, "", 1);
        fnv_u32(&s, (uint32_t)t);
        if (t == GGUF_TYPE_ARRAY) {
            gguf_type et = gguf_kv_arr_type(f, i);
            uint64_t n = gguf_kv_arr_n(f, i);
            fnv_u32(&s, (uint32_t)et);
            fnv_u64(&s, n);
            if (et == GGUF_TYPE_STRING) {
                for (uint64_t j = 0; j < n; j++) {
                    gguf_str v = gguf_kv_str(f, i, j);
                    fnv_u64(&s, v.len);
                    fnv_add(&s, v.data, (size_t)v.len);
                }
            } else {
                fnv_add(&s, gguf_kv_data(f, i), (size_t)n * value_size(et));
            }
        } else if (t == GGUF_TYPE_STRING) {
            gguf_str v = gguf_kv_str(f, i, 0);
            fnv_u64(&s, v.len);
            fnv_add(&s, v.data, (size_t)v.len);
        } else {
            fnv_add(&s, gguf_kv_data(f, i), value_size(t));
        }
    }
    return s.h;
}

/* base: start of the bytes the file was opened from (absolute offsets). */
static uint64_t canon_tensor_digest(const gguf_file *f, const uint8_t *base) {
    fnv s = {1469598103934665603ull};
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        fnv_add(&s, t->name.data, (size_t)t->name.len);
        fnv_add(&s, "", 1);
        fnv_u32(&s, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) fnv_u64(&s, (uint64_t)t->ne[d]);
        fnv_u32(&s, (uint32_t)t->type);
        fnv_u64(&s, t->offset);
        fnv_u64(&s, (uint64_t)((const uint8_t *)t->data - base));
        fnv_u64(&s, t->size);
    }
    return s.h;
}

/* ------------------------------------------------------------------------ */

static void test_shared_files_match_gguf_py(void **state) {
    (void)state;
    require_shared();
    for (size_t k = 0; k < N_FACTS; k++) {
        const file_facts *e = &g_facts[k];
        const char *path = shared_path(e->file);
        size_t len = 0;
        char *buf = read_file(path, &len);
        if (!buf) fail_msg("%s: cannot read", path);
        gguf_file *f = gguf_open_buffer(buf, len, path);
        if (!f) fail_msg("%s: %s", path, tutti_last_error());
        assert_int_equal(gguf_version(f), e->version);
        assert_int_equal(gguf_n_kv(f), e->n_kv);
        assert_int_equal(gguf_n_tensors(f), e->n_tensors);
        assert_int_equal(gguf_alignment(f), e->alignment);
        if (canon_kv_digest(f) != e->kv_digest)
            fail_msg("%s: metadata differs from gguf-py's (digest %016llx, expected %016llx)", path,
                     (unsigned long long)canon_kv_digest(f), (unsigned long long)e->kv_digest);
        if (canon_tensor_digest(f, (const uint8_t *)buf) != e->tensor_digest)
            fail_msg("%s: tensor infos differ from gguf-py's", path);
        if (e->n_tensors > 0) {
            const gguf_tensor_info *t0 = gguf_tensor(f, 0);
            assert_int_equal((uint64_t)((const char *)t0->data - buf) - t0->offset, e->data_offset);
        }
        /* every key and tensor is found by name, at its own index */
        for (int64_t i = 0; i < gguf_n_kv(f); i++) {
            gguf_str key = gguf_kv_key(f, i);
            char name[512];
            if (key.len >= sizeof name) continue;
            memcpy(name, key.data, (size_t)key.len);
            name[key.len] = 0;
            assert_int_equal(gguf_find_key(f, name), i);
        }
        for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor_info *t = gguf_tensor(f, i);
            char name[128];
            memcpy(name, t->name.data, (size_t)t->name.len);
            name[t->name.len] = 0;
            assert_ptr_equal(gguf_find_tensor(f, name), t);
        }

        /* the mmap path sees the same file: same facts, same tensor bytes */
        gguf_file *m = gguf_open(path);
        if (!m) fail_msg("%s: %s", path, tutti_last_error());
        assert_string_equal(gguf_path(m), path);
        assert_int_equal(gguf_n_kv(m), e->n_kv);
        assert_int_equal(gguf_n_tensors(m), e->n_tensors);
        assert_true(canon_kv_digest(m) == e->kv_digest);
        for (int64_t i = 0; i < gguf_n_tensors(m); i++) {
            const gguf_tensor_info *a = gguf_tensor(m, i), *b = gguf_tensor(f, i);
            assert_int_equal(a->size, b->size);
            assert_memory_equal(a->data, b->data, (size_t)a->size);
        }
        gguf_close(m);
        gguf_close(f);
        free(buf);
    }
}

/* Typed values and tensor infos of four files, as printed by gguf-py. */
static void test_known_values(void **state) {
    (void)state;
    require_shared();
    uint32_t u;
    int64_t i64;
    float x;
    bool b;
    gguf_str s;

    gguf_file *f = gguf_open(shared_path("models/stories260K.gguf"));
    assert_non_null(f);
    assert_true(gguf_get_str(f, "general.architecture", &s) && gguf_str_eq(s, "llama"));
    assert_true(gguf_get_str(f, "tokenizer.ggml.model", &s) && gguf_str_eq(s, "llama"));
    assert_true(gguf_get_u32(f, "llama.context_length", &u) && u == 2048);
    assert_true(gguf_get_u32(f, "llama.embedding_length", &u) && u == 64);
    assert_true(gguf_get_u32(f, "llama.feed_forward_length", &u) && u == 172);
    assert_true(gguf_get_u32(f, "llama.attention.head_count_kv", &u) && u == 4);
    assert_true(gguf_get_u32(f, "tokenizer.ggml.seperator_token_id", &u) && u == 4294967295u);
    assert_true(gguf_get_i64(f, "llama.block_count", &i64) && i64 == 5);
    assert_true(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &x));
    assert_true(x == 9.999999747378752e-06f);
    int64_t ti = gguf_find_key(f, "tokenizer.ggml.tokens");
    assert_true(ti >= 0);
    assert_int_equal(gguf_kv_type(f, ti), GGUF_TYPE_ARRAY);
    assert_int_equal(gguf_kv_arr_type(f, ti), GGUF_TYPE_STRING);
    assert_int_equal(gguf_kv_arr_n(f, ti), 512);
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 0), "<unk>"));
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 1), "<s>"));
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 256), "<0xFD>"));
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 511), "\xe2\x80\x8a")); /* U+200A */
    int64_t si = gguf_find_key(f, "tokenizer.ggml.scores");
    assert_int_equal(gguf_kv_arr_type(f, si), GGUF_TYPE_FLOAT32);
    float sc;
    memcpy(&sc, (const char *)gguf_kv_data(f, si) + 4 * 511, 4);
    assert_true(sc == -252.0f);
    int64_t tt = gguf_find_key(f, "tokenizer.ggml.token_type");
    assert_int_equal(gguf_kv_arr_type(f, tt), GGUF_TYPE_INT32);
    int32_t ty[3];
    memcpy(&ty[0], (const char *)gguf_kv_data(f, tt) + 0, 4);
    memcpy(&ty[1], (const char *)gguf_kv_data(f, tt) + 4, 4);
    memcpy(&ty[2], (const char *)gguf_kv_data(f, tt) + 4 * 256, 4);
    assert_true(ty[0] == 2 && ty[1] == 3 && ty[2] == 6);
    const gguf_tensor_info *t = gguf_tensor(f, 0);
    assert_true(gguf_str_eq(t->name, "token_embd.weight"));
    assert_int_equal(t->type, TUTTI_TYPE_F32);
    assert_int_equal(t->n_dims, 2);
    assert_true(t->ne[0] == 64 && t->ne[1] == 512 && t->ne[2] == 1 && t->ne[3] == 1);
    assert_int_equal(t->offset, 0);
    assert_int_equal(t->size, 131072);
    t = gguf_find_tensor(f, "output.weight");
    assert_non_null(t);
    assert_int_equal(t->offset, 131328);
    t = gguf_tensor(f, gguf_n_tensors(f) - 1);
    assert_true(gguf_str_eq(t->name, "blk.4.ffn_norm.weight"));
    assert_int_equal(t->offset, 1170944);
    assert_null(gguf_find_tensor(f, "no.such.tensor"));
    assert_int_equal(gguf_find_key(f, "no.such.key"), -1);
    assert_false(gguf_get_u32(f, "no.such.key", &u));
    gguf_close(f);

    f = gguf_open(shared_path("models/TinyStories-656K-Q8_0.gguf"));
    assert_non_null(f);
    assert_true(gguf_get_str(f, "general.name", &s) && gguf_str_eq(s, "Raincandy U TinyStories 656K"));
    assert_true(gguf_get_str(f, "tokenizer.ggml.pre", &s) && gguf_str_eq(s, "default"));
    assert_true(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) && b);
    assert_true(gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b) && !b);
    assert_true(gguf_get_f32(f, "llama.rope.freq_base", &x) && x == 10000.0f);
    assert_true(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &x) && x == 1e-6f);
    assert_true(gguf_get_u32(f, "general.file_type", &u) && u == 7);
    ti = gguf_find_key(f, "tokenizer.ggml.tokens");
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 1), "<|start_story|>"));
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 1024), "they\xe2\x96\x81"
                                                      "all\xe2\x96\x81"));
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 2047), "dog\xe2\x96\x81named\xe2\x96\x81Max"));
    ti = gguf_find_key(f, "general.languages");
    assert_int_equal(gguf_kv_arr_n(f, ti), 1);
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 0), "en"));
    t = gguf_find_tensor(f, "token_embd.weight");
    assert_int_equal(t->type, TUTTI_TYPE_Q8_0);
    assert_true(t->ne[0] == 128 && t->ne[1] == 2048);
    assert_int_equal(t->offset, 512);
    assert_int_equal(t->size, 278528);
    t = gguf_find_tensor(f, "blk.1.ffn_up.weight");
    assert_true(t->ne[0] == 128 && t->ne[1] == 384 && t->offset == 646656 && t->size == 52224);
    /* typed getters refuse incompatible types and say which key */
    assert_false(gguf_get_u32(f, "general.name", &u));
    assert_non_null(strstr(tutti_last_error(), "general.name"));
    assert_false(gguf_get_str(f, "general.file_type", &s));
    assert_non_null(strstr(tutti_last_error(), "general.file_type"));
    assert_false(gguf_get_f32(f, "tokenizer.ggml.tokens", &x));
    assert_non_null(strstr(tutti_last_error(), "tokenizer.ggml.tokens"));
    assert_false(gguf_get_bool(f, "general.file_type", &b));
    gguf_close(f);

    f = gguf_open(shared_path("ref/arch/llama-Q4_K_M.gguf"));
    assert_non_null(f);
    assert_true(gguf_get_u32(f, "llama.attention.key_length", &u) && u == 64);
    assert_true(gguf_get_u32(f, "general.file_type", &u) && u == 15);
    t = gguf_tensor(f, 0);
    assert_true(gguf_str_eq(t->name, "output.weight") && t->type == TUTTI_TYPE_Q6_K);
    assert_true(t->ne[0] == 256 && t->ne[1] == 512 && t->offset == 0 && t->size == 107520);
    t = gguf_find_tensor(f, "token_embd.weight");
    assert_true(t->type == TUTTI_TYPE_Q4_K && t->offset == 108544 && t->size == 73728);
    gguf_close(f);

    f = gguf_open(shared_path("models/vocab/ggml-vocab-qwen3.gguf"));
    assert_non_null(f);
    assert_int_equal(gguf_n_tensors(f), 0);
    assert_true(gguf_get_u32(f, "llama.vocab_size", &u) && u == 151669);
    assert_true(gguf_get_str(f, "tokenizer.ggml.pre", &s) && gguf_str_eq(s, "qwen2"));
    assert_true(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u) && u == 151645);
    ti = gguf_find_key(f, "tokenizer.ggml.tokens");
    assert_int_equal(gguf_kv_arr_n(f, ti), 151669);
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 75834), "Republicans"));
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 151668), "</think>"));
    ti = gguf_find_key(f, "tokenizer.ggml.merges");
    assert_int_equal(gguf_kv_arr_n(f, ti), 151387);
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 0), "\xc4\xa0 \xc4\xa0"));
    assert_true(gguf_str_eq(gguf_kv_str(f, ti, 75693), "\xc4\xa0jou eur"));
    /* out-of-range indices are harmless */
    assert_int_equal(gguf_kv_str(f, ti, 151387).len, 0);
    assert_int_equal(gguf_kv_str(f, -1, 0).len, 0);
    assert_int_equal(gguf_kv_type(f, 1000000), GGUF_TYPE_COUNT);
    assert_null(gguf_tensor(f, 0));
    gguf_close(f);
}

/* ------------------------------------------------------------------------ */
/* writer */

static char g_tmpdir[256];

static int setup_tmpdir(void **state) {
    (void)state;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/tutti_test_gguf_XXXXXX");
    return mkdtemp(g_tmpdir) ? 0 : -1;
}

static int teardown_tmpdir(void **state) {
    (void)state;
    DIR *d = opendir(g_tmpdir);
    if (d) {
        struct dirent *de;
        char p[512];
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            snprintf(p, sizeof p, "%s/%s", g_tmpdir, de->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_tmpdir);
    return 0;
}

static const char *tmp_path(const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", g_tmpdir, name);
    return p;
}

static int write_text_fn(FILE *fp, void *ctx) {
    fputs(ctx, fp);
    return 0;
}

static int write_then_fail(FILE *fp, void *ctx) {
    (void)ctx;
    fputs("half of a file", fp);
    return tutti_set_error("the producer failed half-way");
}

static bool dir_holds(const char *needle) {
    DIR *d = opendir(g_tmpdir);
    assert_non_null(d);
    bool found = false;
    for (struct dirent *e; (e = readdir(d));) found |= strstr(e->d_name, needle) != NULL;
    closedir(d);
    return found;
}

/* util/file.h, the one way every output file is written (issue 21, item 1):
 * whole or not at all, a failed producer leaves the old file and no
 * temporary, permissions kept, a symlink followed (the link stays), a
 * device written in place, a directory or a missing folder refused; and
 * file identity by device and inode. */
static void test_write_atomic(void **state) {
    (void)state;
    char a[512], l[512], h[512], dangling[512];
    snprintf(a, sizeof a, "%s", tmp_path("atomic.txt"));
    snprintf(l, sizeof l, "%s", tmp_path("atomic-link.txt"));
    snprintf(h, sizeof h, "%s", tmp_path("atomic-hard.txt"));
    snprintf(dangling, sizeof dangling, "%s", tmp_path("dangling-link.txt"));
    assert_int_equal(tutti_write_atomic(a, write_text_fn, "first\n"), 0);
    assert_int_equal(chmod(a, 0640), 0);
    assert_int_equal(tutti_write_atomic(a, write_then_fail, NULL), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "half-way"));
    char *t = read_file(a, NULL);
    assert_string_equal(t, "first\n");
    free(t);
    assert_false(dir_holds(".tmp-"));
    assert_int_equal(tutti_write_atomic(a, write_text_fn, "second\n"), 0);
    struct stat st;
    assert_int_equal(stat(a, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    /* a symlink: the file it names is replaced, the link stays a link */
    assert_int_equal(symlink("atomic.txt", l), 0);
    assert_int_equal(tutti_write_atomic(l, write_text_fn, "third\n"), 0);
    assert_int_equal(lstat(l, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    t = read_file(a, NULL);
    assert_string_equal(t, "third\n");
    free(t);
    assert_int_equal(symlink("atomic-target.txt", dangling), 0);
    assert_int_equal(tutti_write_atomic(dangling, write_text_fn, "made\n"), 0);
    t = read_file(tmp_path("atomic-target.txt"), NULL);
    assert_string_equal(t, "made\n");
    free(t);
    /* identity: the link and a hard link are the file, a copy is not */
    assert_int_equal(link(a, h), 0);
    assert_true(tutti_same_file(a, l));
    assert_true(tutti_same_file(l, h));
    assert_false(tutti_same_file(a, dangling));
    assert_false(tutti_same_file(a, tmp_path("no-such-file")));
    /* a device is written in place (never replaced); a folder is refused */
    assert_int_equal(tutti_write_atomic("/dev/null", write_text_fn, "x"), 0);
    assert_int_equal(stat("/dev/null", &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    assert_int_equal(tutti_write_atomic(g_tmpdir, write_text_fn, "x"), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "directory"));
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/folder/x", g_tmpdir);
    assert_int_equal(tutti_write_atomic(missing, write_text_fn, "x"), TUTTI_ERR);
    assert_int_equal(tutti_check_writable(missing), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "does not exist"));
    assert_int_equal(tutti_check_writable(a), 0);
    unlink(l), unlink(h), unlink(dangling), unlink(a), unlink(tmp_path("atomic-target.txt"));
}

static void test_writer_roundtrip(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(gguf_writer_add_u8(w, "k.u8", 200), 0);
    assert_int_equal(gguf_writer_add_i8(w, "k.i8", -100), 0);
    assert_int_equal(gguf_writer_add_u16(w, "k.u16", 60000), 0);
    assert_int_equal(gguf_writer_add_i16(w, "k.i16", -30000), 0);
    assert_int_equal(gguf_writer_add_u32(w, "k.u32", 4000000000u), 0);
    assert_int_equal(gguf_writer_add_i32(w, "k.i32", -2000000000), 0);
    assert_int_equal(gguf_writer_add_f32(w, "k.f32", 1.5f), 0);
    assert_int_equal(gguf_writer_add_bool(w, "k.bool", true), 0);
    assert_int_equal(gguf_writer_add_u64(w, "k.u64", 18000000000000000000ull), 0);
    assert_int_equal(gguf_writer_add_i64(w, "k.i64", -9000000000000000000ll), 0);
    assert_int_equal(gguf_writer_add_f64(w, "k.f64", 0.1), 0);
    assert_int_equal(gguf_writer_add_str(w, "k.str", "hello"), 0);
    assert_int_equal(gguf_writer_add_strn(w, "k.strn", "a\0b", 3), 0);
    assert_int_equal(gguf_writer_add_str(w, "k.empty", ""), 0);
    const char *strs[] = {"x", "", "\xe4\xb8\xad"};
    assert_int_equal(gguf_writer_add_str_arr(w, "k.strs", strs, 3), 0);
    const int32_t ints[] = {1, -2, 3};
    assert_int_equal(gguf_writer_add_arr(w, "k.ints", GGUF_TYPE_INT32, ints, 3), 0);
    assert_int_equal(gguf_writer_add_arr(w, "k.none", GGUF_TYPE_FLOAT32, NULL, 0), 0);
    assert_int_equal(gguf_writer_set_alignment(w, 64), 0);
    /* refused: duplicates, bad types, bad shapes; writer unchanged */
    assert_int_equal(gguf_writer_add_u8(w, "k.u8", 1), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "k.u8"));
    assert_int_equal(gguf_writer_add_arr(w, "k.bad", GGUF_TYPE_STRING, ints, 1), TUTTI_ERR);
    assert_int_equal(gguf_writer_add_str(w, "general.alignment", "x"), TUTTI_ERR);
    assert_int_equal(gguf_writer_set_alignment(w, 48), TUTTI_ERR);

    float a[4 * 3];
    for (int i = 0; i < 12; i++) a[i] = (float)i * 0.25f;
    uint8_t q8[34 * 2];
    for (int i = 0; i < (int)sizeof q8; i++) q8[i] = (uint8_t)(i * 7);
    int64_t ne_a[2] = {4, 3}, ne_q[2] = {32, 2}, ne_bad[1] = {33}, ne_e[1] = {0};
    assert_int_equal(gguf_writer_add_tensor(w, "a", TUTTI_TYPE_F32, 2, ne_a, a), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "q", TUTTI_TYPE_Q8_0, 2, ne_q, q8), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "e", TUTTI_TYPE_F32, 1, ne_e, NULL), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "a", TUTTI_TYPE_F32, 2, ne_a, a), TUTTI_ERR);
    assert_int_equal(gguf_writer_add_tensor(w, "b", TUTTI_TYPE_Q8_0, 1, ne_bad, q8), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "block size"));
    assert_int_equal(gguf_writer_add_tensor(w, "c", 4, 1, ne_a, a), TUTTI_ERR);
    assert_int_equal(gguf_writer_add_tensor(w, "d", TUTTI_TYPE_F32, 5, ne_a, a), TUTTI_ERR);
    assert_int_equal(gguf_writer_n_kv(w), 18);
    assert_int_equal(gguf_writer_n_tensors(w), 3);

    void *buf;
    size_t size;
    assert_int_equal(gguf_writer_write_buffer(w, &buf, &size), 0);
    assert_int_equal(gguf_writer_write(w, tmp_path("rt.gguf")), 0);
    gguf_writer_free(w);

    size_t flen;
    char *fbuf = read_file(tmp_path("rt.gguf"), &flen);
    assert_non_null(fbuf);
    assert_int_equal(flen, size);
    assert_memory_equal(fbuf, buf, size);
    free(fbuf);
    assert_int_equal(size % 64, 0);

    for (int pass = 0; pass < 2; pass++) {
        gguf_file *f = pass ? gguf_open(tmp_path("rt.gguf")) : gguf_open_buffer(buf, size, "rt");
        if (!f) fail_msg("%s", tutti_last_error());
        assert_int_equal(gguf_version(f), 3);
        assert_int_equal(gguf_alignment(f), 64);
        assert_int_equal(gguf_n_kv(f), 18);
        uint32_t u;
        int64_t i64;
        float x;
        bool b;
        gguf_str s;
        assert_true(gguf_get_u32(f, "k.u8", &u) && u == 200);
        assert_true(gguf_get_i64(f, "k.i8", &i64) && i64 == -100);
        assert_false(gguf_get_u32(f, "k.i8", &u)); /* negative: not lossless */
        assert_true(gguf_get_u32(f, "k.u16", &u) && u == 60000);
        assert_true(gguf_get_i64(f, "k.i16", &i64) && i64 == -30000);
        assert_true(gguf_get_u32(f, "k.u32", &u) && u == 4000000000u);
        assert_true(gguf_get_i64(f, "k.i32", &i64) && i64 == -2000000000);
        assert_true(gguf_get_f32(f, "k.f32", &x) && x == 1.5f);
        assert_true(gguf_get_bool(f, "k.bool", &b) && b);
        assert_false(gguf_get_i64(f, "k.u64", &i64)); /* > INT64_MAX */
        assert_non_null(strstr(tutti_last_error(), "k.u64"));
        assert_false(gguf_get_u32(f, "k.u64", &u));
        uint64_t u64;
        memcpy(&u64, gguf_kv_data(f, gguf_find_key(f, "k.u64")), 8);
        assert_true(u64 == 18000000000000000000ull);
        assert_true(gguf_get_i64(f, "k.i64", &i64) && i64 == -9000000000000000000ll);
        assert_true(gguf_get_f32(f, "k.f64", &x) && x == 0.1f);
        assert_true(gguf_get_str(f, "k.str", &s) && gguf_str_eq(s, "hello"));
        assert_true(gguf_get_str(f, "k.strn", &s) && s.len == 3 && memcmp(s.data, "a\0b", 3) == 0);
        assert_true(gguf_get_str(f, "k.empty", &s) && s.len == 0);
        int64_t k = gguf_find_key(f, "k.strs");
        assert_int_equal(gguf_kv_arr_type(f, k), GGUF_TYPE_STRING);
        assert_int_equal(gguf_kv_arr_n(f, k), 3);
        assert_true(gguf_str_eq(gguf_kv_str(f, k, 0), "x"));
        assert_true(gguf_str_eq(gguf_kv_str(f, k, 1), ""));
        assert_true(gguf_str_eq(gguf_kv_str(f, k, 2), "\xe4\xb8\xad"));
        k = gguf_find_key(f, "k.ints");
        assert_int_equal(gguf_kv_arr_n(f, k), 3);
        assert_memory_equal(gguf_kv_data(f, k), ints, sizeof ints);
        k = gguf_find_key(f, "k.none");
        assert_int_equal(gguf_kv_arr_type(f, k), GGUF_TYPE_FLOAT32);
        assert_int_equal(gguf_kv_arr_n(f, k), 0);
        assert_true(gguf_get_u32(f, "general.alignment", &u) && u == 64);

        assert_int_equal(gguf_n_tensors(f), 3);
        const gguf_tensor_info *t = gguf_find_tensor(f, "a");
        assert_true(t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 3 && t->type == TUTTI_TYPE_F32);
        assert_int_equal(t->size, sizeof a);
        assert_memory_equal(t->data, a, sizeof a);
        t = gguf_find_tensor(f, "q");
        assert_int_equal(t->offset % 64, 0);
        assert_int_equal(t->offset, 64);
        assert_int_equal(t->size, sizeof q8);
        assert_memory_equal(t->data, q8, sizeof q8);
        t = gguf_find_tensor(f, "e");
        assert_int_equal(t->size, 0);
        assert_int_equal(t->offset, 192);
        gguf_close(f);
    }
    free(buf);
}

/* Copying every kv and tensor of a file written by llama.cpp's tools must
 * reproduce it byte for byte (same layout rules as ggml's gguf writer). */
static void test_writer_reproduces_llamacpp_files(void **state) {
    (void)state;
    require_shared();
    const char *files[] = {"models/stories260K.gguf", "models/TinyStories-656K-Q8_0.gguf", "ref/arch/llama-Q4_K_M.gguf",
                           "ref/arch/gemma3-Q8_0.gguf", "models/vocab/ggml-vocab-llama-spm.gguf"};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        size_t len;
        char *orig = read_file(shared_path(files[k]), &len);
        assert_non_null(orig);
        gguf_file *f = gguf_open_buffer(orig, len, files[k]);
        assert_non_null(f);
        gguf_writer *w = gguf_writer_new();
        for (int64_t i = 0; i < gguf_n_kv(f); i++) assert_int_equal(gguf_writer_copy_kv(w, f, i), 0);
        for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor_info *t = gguf_tensor(f, i);
            char name[64];
            memcpy(name, t->name.data, (size_t)t->name.len);
            name[t->name.len] = 0;
            assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data), 0);
        }
        void *buf;
        size_t size;
        assert_int_equal(gguf_writer_write_buffer(w, &buf, &size), 0);
        if (size != len || memcmp(buf, orig, len) != 0) {
            size_t d = 0;
            while (d < len && d < size && ((char *)buf)[d] == orig[d]) d++;
            fail_msg("%s: re-written file differs (sizes %zu vs %zu, first difference at %zu)", files[k], size, len, d);
        }
        free(buf);
        gguf_writer_free(w);
        gguf_close(f);
        free(orig);
    }
}

/* ------------------------------------------------------------------------ */
/* malformed files */

/* A small valid file (built with the writer) and the positions of its fields,
 * found by searching for the unique key / tensor names. */
typedef struct base_file {
    uint8_t *buf;
    size_t size;
    size_t end_of_data; /* end of the last tensor's bytes */
} base_file;

static base_file make_base(void) {
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(gguf_writer_add_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(gguf_writer_add_u32(w, "k.aaa", 7), 0);
    assert_int_equal(gguf_writer_add_u32(w, "k.aab", 8), 0);
    assert_int_equal(gguf_writer_add_str(w, "k.str", "hello"), 0);
    const char *strs[] = {"ab", "c"};
    assert_int_equal(gguf_writer_add_str_arr(w, "k.sar", strs, 2), 0);
    const uint16_t u16s[] = {1, 2, 3};
    assert_int_equal(gguf_writer_add_arr(w, "k.arr", GGUF_TYPE_UINT16, u16s, 3), 0);
    assert_int_equal(gguf_writer_add_u32(w, "general.alignment", 32), 0);
    static float a[8];
    static uint8_t q8[34 * 2];
    int64_t ne_a[2] = {4, 2}, ne_q[2] = {32, 2};
    assert_int_equal(gguf_writer_add_tensor(w, "t.aaa", TUTTI_TYPE_F32, 2, ne_a, a), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "t.aab", TUTTI_TYPE_Q8_0, 2, ne_q, q8), 0);
    base_file b;
    void *buf;
    assert_int_equal(gguf_writer_write_buffer(w, &buf, &b.size), 0);
    gguf_writer_free(w);
    b.buf = buf;
    gguf_file *f = gguf_open_buffer(b.buf, b.size, "base");
    assert_non_null(f);
    const gguf_tensor_info *t = gguf_tensor(f, 1);
    b.end_of_data = (size_t)((const uint8_t *)t->data - b.buf) + (size_t)t->size;
    gguf_close(f);
    return b;
}

/* Offset just past the first occurrence of the name `s` (its bytes). */
static size_t after(const base_file *b, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= b->size; i++)
        if (memcmp(b->buf + i, s, n) == 0) return i + n;
    fail_msg("pattern %s not found", s);
    return 0;
}

/* Patches a little-endian field at offset off of m (size bytes). */
static void put_n(uint8_t *m, size_t size, size_t off, const void *v, size_t n) {
    if (off > size || size - off < n) fail_msg("patch at %zu outside the %zu-byte file", off, size);
    memcpy(m + off, v, n);
}
static void put32(uint8_t *m, size_t size, size_t off, uint32_t v) { put_n(m, size, off, &v, 4); }
static void put64(uint8_t *m, size_t size, size_t off, uint64_t v) { put_n(m, size, off, &v, 8); }

/* TUTTI_GGUF_DUMP=dir writes every malformed (and hand-built valid) file of
 * these tests to dir/<what>.gguf: the files fed to llama.cpp to confirm that
 * it refuses them too (scripts/oracle_gguf_refusals.sh), and the seeds in
 * fuzz/corpus/gguf/. */
static const char *case_file(const char *prefix, const char *what) {
    static char name[160];
    size_t n = (size_t)snprintf(name, sizeof name, "%s-", prefix);
    for (const char *c = what; *c && n + 6 < sizeof name; c++)
        name[n++] = (char)((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' ? *c
                           : (*c >= 'A' && *c <= 'Z')                                        ? *c - 'A' + 'a'
                                                                                             : '-');
    memcpy(name + n, ".gguf", 6);
    return name;
}

/* llama.cpp's verdict on case `file` from tests/data/gguf_oracle/gguf_cases.txt
 * (written by run.sh in that folder): the lines after "== file: " up to the
 * next case, or NULL when the file has no such case. */
static const char *oracle_verdict(const char *file, char *out, size_t cap) {
    static char *text;
    if (!text) {
        size_t len;
        text = read_file(TUTTI_SOURCE_DIR "/tests/data/gguf_oracle/gguf_cases.txt", &len);
        if (!text) fail_msg("tests/data/gguf_oracle/gguf_cases.txt is missing");
    }
    char head[200];
    snprintf(head, sizeof head, "== %s: ", file);
    const char *p = strstr(text, head);
    if (!p) return NULL;
    const char *e = strstr(p + 1, "\n==");
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
    return out;
}

/* Refusals of the file itself (ggml's reader, or llama.cpp's checks of the
 * tensor data bounds and names), as opposed to a model-level refusal. */
static bool oracle_refuses_file(const char *v) {
    return strstr(v, "\n  gguf: ") || strstr(v, "data is not within the file bounds") || strstr(v, "is duplicated");
}

/* Files tutti refuses although ggml reads them (each one on purpose). */
static const char *const g_stricter_than_ggml[] = {
    "bad-key-with-nul.gguf", /* ggml would look the key up under its prefix */
};

static void dump_case(const uint8_t *buf, size_t size, const char *prefix, const char *what) {
    const char *file = case_file(prefix, what);
    const char *dir = getenv("TUTTI_GGUF_DUMP");
    if (dir) { /* writing the files for a new verdict: nothing to check against */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(buf, 1, size, fp), size);
        fclose(fp);
        return;
    }
    /* every case is checked against llama.cpp's recorded verdict */
    char v[2048];
    if (!oracle_verdict(file, v, sizeof v))
        fail_msg("%s: no llama.cpp verdict in tests/data/gguf_oracle/gguf_cases.txt (run run.sh there)", file);
    bool stricter = false;
    for (size_t i = 0; i < sizeof g_stricter_than_ggml / sizeof *g_stricter_than_ggml; i++)
        stricter = stricter || !strcmp(file, g_stricter_than_ggml[i]);
    if (prefix[0] == 'b' && !stricter && !oracle_refuses_file(v))
        fail_msg("%s: refused here, but llama.cpp reads it: %s", file, v);
    if (prefix[0] == 'b' && stricter && oracle_refuses_file(v))
        fail_msg("%s: listed as stricter than ggml, but llama.cpp refuses it too: %s", file, v);
    if (prefix[0] == 'o' && oracle_refuses_file(v))
        fail_msg("%s: accepted here, but llama.cpp refuses it: %s", file, v);
}

/* Opens an exact-size heap copy of buf (so ASan sees any overread) and
 * requires failure with a message containing every one of the needles. */
static void expect_fail_n(const uint8_t *buf, size_t size, const char *what, const char *n1, const char *n2) {
    if (n1 || n2) dump_case(buf, size, "bad", what); /* not the truncations */
    uint8_t *copy = malloc(size ? size : 1);
    assert_non_null(copy);
    memcpy(copy, buf, size);
    gguf_file *f = gguf_open_buffer(copy, size, "bad.gguf");
    if (f) {
        gguf_close(f);
        free(copy);
        fail_msg("%s: a malformed file was accepted", what);
    }
    const char *msg = tutti_last_error();
    if (strncmp(msg, "bad.gguf: ", 10) != 0 || (n1 && !strstr(msg, n1)) || (n2 && !strstr(msg, n2)))
        fail_msg("%s: message \"%s\" should start with the file name and mention \"%s\" \"%s\"", what, msg,
                 n1 ? n1 : "", n2 ? n2 : "");
    free(copy);
}

static void test_truncation_every_offset(void **state) {
    (void)state;
    base_file b = make_base();
    for (size_t k = 0; k < b.end_of_data; k++) expect_fail_n(b.buf, k, "truncated", NULL, NULL);
    /* the padding after the last tensor is optional */
    for (size_t k = b.end_of_data; k <= b.size; k++) {
        gguf_file *f = gguf_open_buffer(b.buf, k, "ok");
        if (!f) fail_msg("size %zu: %s", k, tutti_last_error());
        gguf_close(f);
    }
    free(b.buf);
}

static void test_malformed_header(void **state) {
    (void)state;
    base_file b = make_base();
    uint8_t *m = malloc(b.size);
#define RESET() memcpy(m, b.buf, b.size)
    RESET();
    m[0] = 'X';
    expect_fail_n(m, b.size, "bad magic", "header", "magic");
    RESET();
    put32(m, b.size, 4, 1);
    expect_fail_n(m, b.size, "version 1", "version", "1");
    RESET();
    put32(m, b.size, 4, 4);
    expect_fail_n(m, b.size, "version 4", "version", "4");
    RESET();
    put32(m, b.size, 4, 0);
    expect_fail_n(m, b.size, "version 0", "version", "0");
    RESET();
    put32(m, b.size, 4, 0x03000000u);
    expect_fail_n(m, b.size, "big-endian", "version", "big-endian");
    RESET();
    put64(m, b.size, 8, 1ull << 60);
    expect_fail_n(m, b.size, "huge n_tensors", "n_tensors", NULL);
    RESET();
    put64(m, b.size, 16, 1ull << 60);
    expect_fail_n(m, b.size, "huge n_kv", "n_kv", NULL);
    RESET();
    put64(m, b.size, 16, UINT64_MAX);
    expect_fail_n(m, b.size, "n_kv max", "n_kv", NULL);
    /* more tensors than the infos present: runs into the data section and
     * eventually off the end — must fail cleanly whatever it reads */
    RESET();
    put64(m, b.size, 8, 3);
    expect_fail_n(m, b.size, "n_tensors + 1", NULL, NULL);
    RESET();
    put64(m, b.size, 16, 8);
    expect_fail_n(m, b.size, "n_kv + 1", NULL, NULL);
    expect_fail_n(m, 0, "empty", "header", NULL);
    expect_fail_n(m, 3, "3 bytes", "magic", NULL);
#undef RESET
    free(m);
    free(b.buf);
}

static void test_malformed_kv(void **state) {
    (void)state;
    base_file b = make_base();
    uint8_t *m = malloc(b.size);
#define RESET() memcpy(m, b.buf, b.size)
    RESET();
    put32(m, b.size, after(&b, "k.aaa"), 13);
    expect_fail_n(m, b.size, "unknown value type", "k.aaa", "value type 13");
    RESET();
    put32(m, b.size, after(&b, "k.aaa"), 0xFFFFFFFFu);
    expect_fail_n(m, b.size, "value type -1", "k.aaa", "value type");
    RESET();
    put64(m, b.size, after(&b, "k.str") + 4, 1000);
    expect_fail_n(m, b.size, "string past end", "k.str", "string length 1000");
    RESET();
    put64(m, b.size, after(&b, "k.str") + 4, UINT64_MAX);
    expect_fail_n(m, b.size, "string length max", "k.str", "string length");
    RESET();
    put64(m, b.size, after(&b, "general.architecture") - 20 - 8, 1ull << 62); /* key length of kv 0 */
    expect_fail_n(m, b.size, "key length", "kv[0]", "key");
    RESET();
    put32(m, b.size, after(&b, "k.arr") + 4, 9);
    expect_fail_n(m, b.size, "nested array", "k.arr", "nested");
    RESET();
    put32(m, b.size, after(&b, "k.arr") + 4, 77);
    expect_fail_n(m, b.size, "bad array element type", "k.arr", "element type 77");
    RESET();
    put64(m, b.size, after(&b, "k.arr") + 8, 1ull << 61);
    expect_fail_n(m, b.size, "array too long", "k.arr", "array");
    RESET();
    put64(m, b.size, after(&b, "k.sar") + 8, 1ull << 29);
    expect_fail_n(m, b.size, "string array too long", "k.sar", "string array");
    /* ggml's limits, whatever the file size: 2^30 bytes, 2^30 elements */
    RESET();
    put64(m, b.size, after(&b, "k.sar") + 8, (1ull << 30) + 1);
    expect_fail_n(m, b.size, "string array max", "k.sar", "exceeds the maximum");
    RESET();
    put64(m, b.size, after(&b, "k.arr") + 8, (1ull << 30) + 1);
    expect_fail_n(m, b.size, "array max", "k.arr", "exceeds the maximum");
    RESET();
    put64(m, b.size, after(&b, "k.str") + 4, (1ull << 30) + 1);
    expect_fail_n(m, b.size, "string max", "k.str", "exceeds the maximum");
    RESET();
    put64(m, b.size, after(&b, "k.aaa") - 5 - 8, 0);
    expect_fail_n(m, b.size, "empty key", "kv[1]", "key is empty");
    RESET();
    put_n(m, b.size, after(&b, "k.aaa") - 2, "", 1);
    expect_fail_n(m, b.size, "key with NUL", "k.", "NUL");
    RESET();
    put64(m, b.size, after(&b, "k.sar") + 8 + 8, 1u << 20); /* first element's length */
    expect_fail_n(m, b.size, "array element past end", "k.sar", "element 0");
    RESET();
    memcpy(m + after(&b, "k.aab") - 5, "k.aaa", 5);
    expect_fail_n(m, b.size, "duplicate key", "k.aaa", "duplicate key");
    /* general.alignment: zero, not a power of two, wrong type */
    size_t al = after(&b, "general.alignment");
    RESET();
    put32(m, b.size, al + 4, 0);
    expect_fail_n(m, b.size, "alignment 0", "general.alignment", "power of two");
    RESET();
    put32(m, b.size, al + 4, 48);
    expect_fail_n(m, b.size, "alignment 48", "general.alignment", "power of two");
    RESET();
    put32(m, b.size, al, GGUF_TYPE_INT32);
    expect_fail_n(m, b.size, "alignment i32", "general.alignment", "u32");
#undef RESET
    free(m);
    free(b.buf);
}

static void test_malformed_tensors(void **state) {
    (void)state;
    base_file b = make_base();
    uint8_t *m = malloc(b.size);
    size_t ta = after(&b, "t.aaa"), tb = after(&b, "t.aab");
    /* layout after a name: u32 n_dims, n_dims x u64 ne, u32 type, u64 offset */
#define RESET() memcpy(m, b.buf, b.size)
    RESET();
    put32(m, b.size, ta, 5);
    expect_fail_n(m, b.size, "n_dims 5", "t.aaa", "n_dims 5");
    RESET();
    put32(m, b.size, ta, 0xFFFFFFFFu);
    expect_fail_n(m, b.size, "n_dims max", "t.aaa", "n_dims 4294967295");
    RESET();
    put64(m, b.size, ta + 4, 1ull << 40);
    put64(m, b.size, ta + 12, 1ull << 40);
    expect_fail_n(m, b.size, "ne overflow", "t.aaa", "overflow");
    RESET();
    put64(m, b.size, ta + 4, 1ull << 63);
    expect_fail_n(m, b.size, "ne negative", "t.aaa", "negative");
    RESET();
    put64(m, b.size, ta + 12, UINT64_MAX); /* ne[1] = -1 */
    expect_fail_n(m, b.size, "ne1 negative", "t.aaa", "ne[1] = -1 is negative");
    RESET();
    put64(m, b.size, ta + 4, INT64_MAX); /* one dimension reaching INT64_MAX */
    put64(m, b.size, ta + 12, 1);
    expect_fail_n(m, b.size, "ne int64 max", "t.aaa", "overflows int64");
    RESET();
    put64(m, b.size, tb + 4, 33);
    expect_fail_n(m, b.size, "ne[0] % block", "t.aab", "block size");
    RESET();
    put64(m, b.size, tb + 4, 1ull << 58); /* elements fit, bytes overflow */
    put64(m, b.size, tb + 12, 1ull << 4);
    expect_fail_n(m, b.size, "byte size overflow", "t.aab", NULL);
    RESET();
    put32(m, b.size, ta + 20, 4); /* id 4 was removed from ggml */
    expect_fail_n(m, b.size, "type id 4", "t.aaa", "type id 4");
    RESET();
    put32(m, b.size, ta + 20, 1000);
    expect_fail_n(m, b.size, "type id 1000", "t.aaa", "type id 1000");
    RESET();
    put32(m, b.size, ta + 20, 0xFFFFFFFFu);
    expect_fail_n(m, b.size, "type id -1", "t.aaa", "type id -1");
    RESET();
    put32(m, b.size, ta + 20, 36); /* IQ4_NL_4_4, removed */
    expect_fail_n(m, b.size, "type id 36", "t.aaa", "removed");
    /* ggml: tensor i's data starts where tensor i-1's padded data ends */
    RESET();
    put64(m, b.size, tb + 24, 33);
    expect_fail_n(m, b.size, "offset misaligned", "t.aab", "data offset 33, expected 32");
    RESET();
    put64(m, b.size, tb + 24, 64); /* aligned, but leaves a gap */
    expect_fail_n(m, b.size, "offset gap", "t.aab", "data offset 64, expected 32");
    RESET();
    put64(m, b.size, tb + 24, 0); /* overlaps t.aaa */
    expect_fail_n(m, b.size, "offset overlap", "t.aab", "data offset 0, expected 32");
    RESET();
    put64(m, b.size, ta + 24, 96); /* t.aab's data first */
    put64(m, b.size, tb + 24, 0);
    expect_fail_n(m, b.size, "offsets swapped", "t.aaa", "data offset 96, expected 0");
    RESET();
    put64(m, b.size, tb + 24, 1ull << 20);
    expect_fail_n(m, b.size, "offset past end", "t.aab", "expected 32");
    RESET();
    put64(m, b.size, tb + 24, UINT64_MAX - 31);
    expect_fail_n(m, b.size, "offset max", "t.aab", NULL);
    RESET();
    put64(m, b.size, ta + 12, 100); /* t.aaa grows: t.aab's offset is then wrong */
    expect_fail_n(m, b.size, "first tensor grows", "t.aab", "expected 1600");
    RESET();
    put64(m, b.size, tb + 12, 100); /* the last tensor's data runs past the end */
    expect_fail_n(m, b.size, "size past end", "t.aab", "not within the file bounds");
    RESET();
    memcpy(m + tb - 5, "t.aaa", 5);
    expect_fail_n(m, b.size, "duplicate tensor", "t.aaa", "duplicate tensor");
    /* names are C strings for ggml: "t.a\0a" and "t.a\0b" are both "t.a" */
    RESET();
    put_n(m, b.size, ta - 2, "", 1);
    put_n(m, b.size, tb - 2, "", 1);
    expect_fail_n(m, b.size, "duplicate after nul", "t.a", "duplicate tensor");
    RESET();
    put64(m, b.size, ta - 5 - 8, 64); /* name length 64 (the name runs into the next fields) */
    expect_fail_n(m, b.size, "name length 64", "tensor[0]", "longer than 63");
#undef RESET
    free(m);
    free(b.buf);
}

/* Hand-assembled files, for layouts the writer cannot produce. */
typedef struct raw {
    uint8_t b[1024];
    size_t n;
} raw;
static void raw_put(raw *r, const void *p, size_t n) {
    assert_true(r->n + n <= sizeof r->b);
    memcpy(r->b + r->n, p, n);
    r->n += n;
}
static void raw_u32(raw *r, uint32_t v) { raw_put(r, &v, 4); }
static void raw_u64(raw *r, uint64_t v) { raw_put(r, &v, 8); }
static void raw_str(raw *r, const char *s, size_t n) {
    raw_u64(r, n);
    raw_put(r, s, n);
}
static void raw_pad(raw *r, size_t a) {
    while (r->n % a) r->b[r->n++] = 0;
}
static void raw_header(raw *r, uint64_t n_tensors) {
    r->n = 0;
    raw_put(r, "GGUF", 4);
    raw_u32(r, 3);
    raw_u64(r, n_tensors);
    raw_u64(r, 1);
    raw_str(r, "general.architecture", 20); /* every model file's first key */
    raw_u32(r, GGUF_TYPE_STRING);
    raw_str(r, "llama", 5);
}
/* A tensor info: name (len bytes), n_dims, ne, F32, offset. */
static void raw_tensor(raw *r, const char *name, size_t len, uint32_t n_dims, const int64_t *ne, uint64_t offset) {
    raw_str(r, name, len);
    raw_u32(r, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) raw_u64(r, (uint64_t)ne[d]);
    raw_u32(r, TUTTI_TYPE_F32);
    raw_u64(r, offset);
}

static gguf_file *open_ok(const raw *r, const char *what) {
    dump_case(r->b, r->n, "ok", what);
    gguf_file *f = gguf_open_buffer(r->b, r->n, what);
    if (!f) fail_msg("%s: refused: %s", what, tutti_last_error());
    return f;
}

/* What ggml accepts and tutti must accept too: scalars (n_dims 0), empty
 * tensor names, names cut at a NUL; and the data section rules around them. */
static void test_layout_edge_cases(void **state) {
    (void)state;
    raw r;
    const int64_t ne3[1] = {3}, ne0[1] = {0};

    /* a scalar (n_dims 0: one element), an empty name, a name with a NUL */
    raw_header(&r, 3);
    raw_tensor(&r, "s", 1, 0, NULL, 0);
    raw_tensor(&r, "", 0, 1, ne3, 32);
    raw_tensor(&r, "v\0junk", 6, 1, ne3, 64);
    raw_pad(&r, 32);
    const float data[24] = {7.0f, [8] = 1.0f, 2.0f, 3.0f, [16] = 4.0f, 5.0f, 6.0f};
    raw_put(&r, data, sizeof data - 5 * 4); /* the last tensor's padding may be missing */
    gguf_file *f = open_ok(&r, "scalar-empty-nul-names");
    const gguf_tensor_info *t = gguf_tensor(f, 0);
    assert_int_equal(t->n_dims, 0);
    assert_true(t->ne[0] == 1 && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1);
    assert_int_equal(t->size, 4);
    assert_true(*(const float *)t->data == 7.0f);
    t = gguf_find_tensor(f, "");
    assert_ptr_equal(t, gguf_tensor(f, 1));
    assert_int_equal(t->size, 12);
    t = gguf_find_tensor(f, "v");
    assert_ptr_equal(t, gguf_tensor(f, 2));
    assert_int_equal(t->name.len, 1);
    assert_true(((const float *)t->data)[2] == 6.0f);
    gguf_close(f);

    /* zero-size tensors take no room: the next one starts at the same offset */
    raw_header(&r, 2);
    raw_tensor(&r, "e", 1, 1, ne0, 0);
    raw_tensor(&r, "v", 1, 1, ne3, 0);
    raw_pad(&r, 32);
    raw_put(&r, data, 12);
    f = open_ok(&r, "zero-size-tensor");
    assert_int_equal(gguf_tensor(f, 0)->size, 0);
    assert_ptr_equal(gguf_tensor(f, 0)->data, gguf_tensor(f, 1)->data);
    gguf_close(f);

    /* ...but the data section itself must start inside the file */
    raw_header(&r, 1);
    raw_tensor(&r, "e", 1, 1, ne0, 0);
    size_t infos_end = r.n;
    assert_true(infos_end % 32 != 0);
    expect_fail_n(r.b, infos_end, "data section past end", "data section", "past the end");
    /* a file without tensors needs no data section (vocabulary-only files) */
    raw_header(&r, 0);
    f = open_ok(&r, "no-tensors-no-padding");
    gguf_close(f);

    /* a zero-size tensor cannot hide a gap either */
    raw_header(&r, 2);
    raw_tensor(&r, "e", 1, 1, ne0, 32);
    raw_tensor(&r, "v", 1, 1, ne3, 32);
    raw_pad(&r, 32);
    raw_put(&r, data, sizeof data);
    expect_fail_n(r.b, r.n, "zero-size tensor offset", "'e'", "data offset 32, expected 0");
}

static void test_open_errors(void **state) {
    (void)state;
    assert_null(gguf_open(tmp_path("does-not-exist.gguf")));
    assert_non_null(strstr(tutti_last_error(), "does-not-exist.gguf"));
    assert_null(gguf_open(g_tmpdir));
    assert_non_null(strstr(tutti_last_error(), "not a regular file"));
    FILE *fp = fopen(tmp_path("empty.gguf"), "wb");
    assert_non_null(fp);
    fclose(fp);
    assert_null(gguf_open(tmp_path("empty.gguf")));
    assert_non_null(strstr(tutti_last_error(), "empty"));
    /* a malformed file through the mmap path */
    base_file b = make_base();
    put32(b.buf, b.size, 4, 1);
    fp = fopen(tmp_path("v1.gguf"), "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b.buf, 1, b.size, fp), b.size);
    fclose(fp);
    assert_null(gguf_open(tmp_path("v1.gguf")));
    assert_non_null(strstr(tutti_last_error(), "v1.gguf: header: GGUF version 1"));
    free(b.buf);
    assert_null(gguf_open(NULL));
    assert_null(gguf_open_buffer(NULL, 10, "x"));
    gguf_close(NULL);
}

/* The public GGUF API (tutti.h, "GGUF files"): stories260K's header as
 * ../shared/models/SOURCES.md describes it (GGUF v3, 48 tensors, 292,800
 * parameters counting the duplicated output matrix, llama with
 * context_length 2048, 512 tokens: <unk>, <s>, </s>, then the byte tokens). */
static void test_public_api(void **state) {
    (void)state;
    tutti_gguf *f = tutti_gguf_open(shared_path("models/stories260K.gguf"));
    assert_non_null(f);
    assert_int_equal(tutti_gguf_version(f), 3);
    assert_int_equal(tutti_gguf_n_tensors(f), 48);
    assert_true(tutti_gguf_n_params(f) == 292800.0);
    tutti_gguf_value v;
    int64_t k = tutti_gguf_find(f, "general.architecture");
    assert_true(k >= 0);
    size_t kl = 0;
    const char *key = tutti_gguf_key(f, k, &kl);
    assert_int_equal(kl, strlen("general.architecture"));
    assert_memory_equal(key, "general.architecture", kl);
    assert_int_equal(tutti_gguf_get(f, k, -1, &v), 0);
    assert_int_equal(v.kind, TUTTI_GGUF_STRING);
    assert_string_equal(v.type, "str");
    assert_int_equal(v.len, 5);
    assert_memory_equal(v.str, "llama", 5);
    assert_int_equal(tutti_gguf_get(f, tutti_gguf_find(f, "llama.context_length"), -1, &v), 0);
    assert_int_equal(v.kind, TUTTI_GGUF_NUMBER);
    assert_false(v.is_float);
    assert_true(v.number == 2048.0);
    assert_int_equal(tutti_gguf_get(f, tutti_gguf_find(f, "llama.attention.layer_norm_rms_epsilon"), -1, &v), 0);
    assert_true(v.is_float);
    assert_true(fabs(v.number - 1e-5) < 1e-9);
    k = tutti_gguf_find(f, "tokenizer.ggml.tokens");
    assert_int_equal(tutti_gguf_get(f, k, -1, &v), 0);
    assert_int_equal(v.kind, TUTTI_GGUF_ARRAY);
    assert_string_equal(v.elem_type, "str");
    assert_int_equal(v.n, 512);
    assert_int_equal(tutti_gguf_get(f, k, 1, &v), 0);
    assert_int_equal(v.kind, TUTTI_GGUF_STRING);
    assert_int_equal(v.len, 3);
    assert_memory_equal(v.str, "<s>", 3);
    /* out of range: errors, not reads past the array */
    assert_int_equal(tutti_gguf_get(f, k, 512, &v), TUTTI_ERR);
    assert_int_equal(tutti_gguf_get(f, tutti_gguf_n_kv(f), -1, &v), TUTTI_ERR);
    assert_int_equal(tutti_gguf_get(f, tutti_gguf_find(f, "llama.context_length"), 0, &v), TUTTI_ERR);
    assert_null(tutti_gguf_key(f, -1, &kl));
    assert_int_equal(tutti_gguf_find(f, "no.such.key"), -1);
    tutti_gguf_close(f);
    assert_null(tutti_gguf_open("/nonexistent.gguf"));
    assert_non_null(strstr(tutti_last_error(), "/nonexistent.gguf"));
}

/* ------------------------------------------------------------------------ */
/* Split models (llama.cpp's gguf-split): tests/data/hub/ holds
 * tests/data/moe/mixtral-b-Q8_0.gguf cut by llama-gguf-split into 3 parts
 * (tests/data/hub/make_split.sh).  Opened through its first part it must be
 * the whole file: the same metadata and every tensor with the same bytes. */
static const char *split_part(int k) {
    static char p[4][600];
    snprintf(p[k], sizeof p[k], "%s/tests/data/hub/mixtral-b-Q8_0-%05d-of-00003.gguf", TUTTI_SOURCE_DIR, k);
    return p[k];
}

static void test_split_model(void **state) {
    (void)state;
    gguf_file *w = gguf_open(TUTTI_SOURCE_DIR "/tests/data/moe/mixtral-b-Q8_0.gguf");
    gguf_file *s = gguf_open(split_part(1));
    assert_non_null(w);
    assert_non_null(s);
    assert_int_equal(gguf_n_tensors(s), gguf_n_tensors(w));
    assert_int_equal(gguf_n_tensors(s), 23);
    /* every key of the whole file, same type and bytes; plus the 3 split keys */
    assert_int_equal(gguf_n_kv(s), gguf_n_kv(w) + 3);
    for (int64_t i = 0; i < gguf_n_kv(w); i++) {
        gguf_str k = gguf_kv_key(w, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)k.len, k.data);
        int64_t j = gguf_find_key(s, key);
        assert_true(j >= 0);
        assert_int_equal(gguf_kv_type(s, j), gguf_kv_type(w, i));
        assert_int_equal(gguf_kv_arr_n(s, j), gguf_kv_arr_n(w, i));
    }
    for (int64_t i = 0; i < gguf_n_tensors(w); i++) {
        const gguf_tensor_info *a = gguf_tensor(w, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)a->name.len, a->name.data);
        const gguf_tensor_info *b = gguf_find_tensor(s, name);
        assert_non_null(b);
        assert_true(gguf_str_eq(gguf_tensor(s, i)->name, name)); /* part order = the whole file's order */
        assert_int_equal(b->type, a->type);
        assert_int_equal(b->n_dims, a->n_dims);
        for (int d = 0; d < GGUF_MAX_DIMS; d++) assert_int_equal(b->ne[d], a->ne[d]);
        assert_int_equal(b->size, a->size);
        assert_memory_equal(b->data, a->data, a->size);
    }
    gguf_close(s);
    gguf_close(w);
    /* a later part is refused, naming the first */
    assert_null(gguf_open(split_part(2)));
    assert_non_null(strstr(tutti_last_error(), "part 2 of a split model of 3 parts"));
    assert_non_null(strstr(tutti_last_error(), "mixtral-b-Q8_0-00001-of-00003.gguf"));
}

/* A part of a synthetic split: split.no, split.count, split.tensors.count as
 * llama-gguf-split writes them (u16, u16, i32), then the named 1-row F32
 * tensors. */
static void write_part(const char *name, int no, int count, int total, const char *const *tensors, int n) {
    static const float row[4] = {1, 2, 3, 4};
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    if (no == 0) assert_int_equal(gguf_writer_add_str(w, "general.architecture", "llama"), 0);
    if (no >= 0) assert_int_equal(gguf_writer_add_u16(w, "split.no", (uint16_t)no), 0);
    assert_int_equal(gguf_writer_add_u16(w, "split.count", (uint16_t)count), 0);
    assert_int_equal(gguf_writer_add_i32(w, "split.tensors.count", total), 0);
    const int64_t ne[1] = {4};
    for (int i = 0; i < n; i++) assert_int_equal(gguf_writer_add_tensor(w, tensors[i], TUTTI_TYPE_F32, 1, ne, row), 0);
    assert_int_equal(gguf_writer_write(w, tmp_path(name)), 0);
    gguf_writer_free(w);
}

static void expect_split_error(const char *first, const char *what) {
    gguf_file *f = gguf_open(tmp_path(first));
    if (f || !strstr(tutti_last_error(), what))
        fail_msg("expected an error with '%s', got %s", what, f ? "success" : tutti_last_error());
}

/* The rules of llama.cpp's loader for split models, each broken once. */
static void test_split_errors(void **state) {
    (void)state;
    const char *a[] = {"a", "b"}, *c[] = {"c"}, *dup[] = {"b"};
    write_part("s-00001-of-00002.gguf", 0, 2, 3, a, 2);
    write_part("s-00002-of-00002.gguf", 1, 2, 3, c, 1);
    gguf_file *f = gguf_open(tmp_path("s-00001-of-00002.gguf"));
    assert_non_null(f);
    assert_int_equal(gguf_n_tensors(f), 3);
    assert_non_null(gguf_find_tensor(f, "c"));
    gguf_close(f);
    /* the second part missing */
    unlink(tmp_path("s-00002-of-00002.gguf"));
    expect_split_error("s-00001-of-00002.gguf", "part 2 of 2");
    /* a tensor in two parts */
    write_part("s-00002-of-00002.gguf", 1, 2, 3, dup, 1);
    expect_split_error("s-00001-of-00002.gguf", "is in two parts");
    /* a part that says it is another part */
    write_part("s-00002-of-00002.gguf", 0, 2, 3, c, 1);
    expect_split_error("s-00001-of-00002.gguf", "expected part 2 of 2");
    /* split.no missing in a part */
    write_part("s-00002-of-00002.gguf", -1, 2, 3, c, 1);
    expect_split_error("s-00001-of-00002.gguf", "missing key split.no");
    /* the tensor total of split.tensors.count */
    write_part("s-00001-of-00002.gguf", 0, 2, 4, a, 2);
    write_part("s-00002-of-00002.gguf", 1, 2, 4, c, 1);
    expect_split_error("s-00001-of-00002.gguf", "split.tensors.count says 4 tensors");
    /* a first part whose name does not lead to the others */
    write_part("model.gguf", 0, 2, 3, a, 2);
    expect_split_error("model.gguf", "must be named PREFIX-00001-of-00002.gguf");
    /* a count the name does not give */
    write_part("t-00001-of-00002.gguf", 0, 3, 3, a, 2);
    expect_split_error("t-00001-of-00002.gguf", "PREFIX-00001-of-00003.gguf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        shared_unit_test(test_shared_files_match_gguf_py),
        shared_unit_test(test_known_values),
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_write_atomic),
        shared_unit_test(test_writer_reproduces_llamacpp_files),
        cmocka_unit_test(test_truncation_every_offset),
        cmocka_unit_test(test_malformed_header),
        cmocka_unit_test(test_malformed_kv),
        cmocka_unit_test(test_malformed_tensors),
        cmocka_unit_test(test_layout_edge_cases),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_public_api),
        cmocka_unit_test(test_split_model),
        cmocka_unit_test(test_split_errors),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, setup_tmpdir, teardown_tmpdir);
}

/* The script that produced g_facts (run in the oracle chroot on copies of
 * the ../shared files; one JSON line per file, turned into the table):
 *
 * # Runs gguf-py (llama.cpp's reader) over every file and prints per-file facts
 * # and FNV-1a-64 digests of the metadata and tensor infos in a canonical form
 * # that tests/test_gguf.c recomputes from tutti's reader.
 * import sys, os, struct, json
 * import numpy as np
 * from gguf import GGUFReader, GGUFValueType
 *
 * def fnv(h, b):
 *     for x in b:
 *         h ^= x
 *         h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
 *     return h
 *
 * root = sys.argv[1]
 * for rel in sys.argv[2:]:
 *     r = GGUFReader(os.path.join(root, rel))
 *     fields = list(r.fields.values())
 *     version = int(fields[0].parts[0][0]); n_t = int(fields[1].parts[0][0]); n_kv = int(fields[2].parts[0][0])
 *     kvs = fields[3:3 + n_kv]
 *     assert len(kvs) == n_kv
 *     h = 1469598103934665603
 *     for fld in kvs:
 *         s = fld.name.encode() + b"\0" + struct.pack("<I", int(fld.types[0]))
 *         et = fld.types[-1]
 *         if fld.types[0] == GGUFValueType.ARRAY:
 *             n = len(fld.data) if et == GGUFValueType.STRING else sum(int(fld.parts[i].size) for i in fld.data)
 *             s += struct.pack("<IQ", int(et), n)
 *         for idx in fld.data:
 *             b = fld.parts[idx].tobytes()
 *             if et == GGUFValueType.STRING:
 *                 s += struct.pack("<Q", len(b))
 *             s += b
 *         h = fnv(h, s)
 *     ht = 1469598103934665603
 *     for t in r.tensors:
 *         p = t.field.parts
 *         dims = [int(x) for x in p[3]]
 *         s = t.name.encode() + b"\0" + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
 *         s += struct.pack("<IQQQ", int(t.tensor_type), int(p[5][0]), int(t.data_offset), int(t.n_bytes))
 *         ht = fnv(ht, s)
 *     align = r.alignment
 *     print(json.dumps({"file": rel, "version": version, "n_kv": n_kv, "n_tensors": n_t, "alignment": int(align),
 *                       "data_offset": int(r.data_offset), "kv_digest": "0x%016x" % h, "tensor_digest": "0x%016x" % ht}))
 */
