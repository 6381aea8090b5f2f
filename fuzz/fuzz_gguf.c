/* Fuzz harness of the GGUF reader (see fuzz/README.md for the pattern).
 *
 * Opens the input with gguf_open_buffer and, when it is accepted, walks every
 * accessor: every key, type, array and string, every typed getter, every
 * tensor info, every byte of every tensor's data (so ASan proves the ranges
 * are inside the input), and lookups by name.  It also checks the reader's
 * promises and traps when one is broken, so that logic errors are findings
 * too, not only memory errors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

/* Reads every byte (through a volatile sink so it is not optimized away). */
static void touch(const void *p, uint64_t n) {
    volatile uint8_t sink = 0;
    const uint8_t *b = p;
    for (uint64_t i = 0; i < n; i++) sink ^= b[i];
    (void)sink;
}

/* NUL-terminated copy of a name; NULL when it has an embedded NUL (the
 * reader promises none: see the CHECKs) or when out of memory. */
static char *cname(gguf_str s) {
    if (memchr(s.data, 0, (size_t)s.len)) return NULL;
    char *c = malloc((size_t)s.len + 1);
    if (!c) return NULL;
    memcpy(c, s.data, (size_t)s.len);
    c[s.len] = 0;
    return c;
}

int tutti_fuzz_gguf_one(const uint8_t *data, size_t size) {
    gguf_file *f = gguf_open_buffer(data, size, "fuzz");
    if (!f) return 0;
    CHECK(gguf_version(f) == 2 || gguf_version(f) == 3);
    uint32_t a = gguf_alignment(f);
    CHECK(a != 0 && (a & (a - 1)) == 0);

    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str key = gguf_kv_key(f, i);
        touch(key.data, key.len);
        /* keys are non-empty C strings (as ggml requires) */
        CHECK(key.len > 0 && !memchr(key.data, 0, (size_t)key.len));
        gguf_type t = gguf_kv_type(f, i);
        CHECK((unsigned)t < GGUF_TYPE_COUNT);
        (void)gguf_type_name(t);
        if (t == GGUF_TYPE_ARRAY) {
            gguf_type et = gguf_kv_arr_type(f, i);
            uint64_t n = gguf_kv_arr_n(f, i);
            CHECK((unsigned)et < GGUF_TYPE_COUNT && et != GGUF_TYPE_ARRAY);
            if (et == GGUF_TYPE_STRING) {
                for (uint64_t j = 0; j < n; j++) {
                    gguf_str s = gguf_kv_str(f, i, j);
                    touch(s.data, s.len);
                }
                CHECK(gguf_kv_str(f, i, n).len == 0);
            } else {
                touch(gguf_kv_data(f, i), n * gguf_type_size(et));
            }
        } else if (t == GGUF_TYPE_STRING) {
            gguf_str s = gguf_kv_str(f, i, 0);
            touch(s.data, s.len);
        } else {
            touch(gguf_kv_data(f, i), gguf_type_size(t));
        }
        char *k = cname(key);
        if (k) {
            CHECK(gguf_find_key(f, k) == i);
            uint32_t u;
            int64_t s64;
            float x;
            bool b;
            gguf_str s;
            (void)gguf_get_u32(f, k, &u);
            (void)gguf_get_i64(f, k, &s64);
            (void)gguf_get_f32(f, k, &x);
            (void)gguf_get_bool(f, k, &b);
            CHECK(gguf_get_str(f, k, &s) == (t == GGUF_TYPE_STRING));
            free(k);
        }
    }
    (void)gguf_kv_key(f, gguf_n_kv(f));
    (void)gguf_kv_type(f, -1);

    uint64_t expect = 0; /* ggml's layout: each tensor where the previous padded one ends */
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        CHECK(t != NULL);
        touch(t->name.data, t->name.len);
        CHECK(t->name.len < 64 && !memchr(t->name.data, 0, (size_t)t->name.len));
        CHECK(t->n_dims <= GGUF_MAX_DIMS); /* 0: a scalar */
        for (uint32_t d = t->n_dims; d < GGUF_MAX_DIMS; d++) CHECK(t->ne[d] == 1);
        const tutti_type_traits *tt = tutti_type_get(t->type);
        CHECK(tt != NULL);
        uint64_t rows = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            CHECK(t->ne[d] >= 0);
            if (d > 0) rows *= (uint64_t)t->ne[d]; /* cannot overflow: size did not */
        }
        CHECK(t->ne[0] % tt->block_size == 0);
        CHECK(t->size == (uint64_t)(t->ne[0] / tt->block_size) * tt->type_size * rows);
        CHECK(t->offset % a == 0);
        CHECK(t->offset == expect);
        expect += (t->size + a - 1) / a * a;
        CHECK((const uint8_t *)t->data >= data && (uint64_t)((const uint8_t *)t->data - data) + t->size <= size);
        touch(t->data, t->size);
        char *n = cname(t->name);
        if (n) {
            CHECK(gguf_find_tensor(f, n) == t);
            free(n);
        }
    }
    CHECK(gguf_tensor(f, gguf_n_tensors(f)) == NULL);
    gguf_close(f);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_gguf_one(data, size);
    return 0;
}
#endif
