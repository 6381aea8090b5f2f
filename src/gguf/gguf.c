/* GGUF v2/v3 reader — see gguf.h for the format and the guarantees.
 *
 * The whole file is validated once in gguf_open*: every read is checked
 * against the bytes remaining before it happens, every count is bounded by
 * the bytes remaining divided by the smallest possible entry before anything
 * is allocated, so a hostile file can neither read out of bounds nor make us
 * allocate more than a small multiple of its own size.  Accessors afterwards
 * only index arrays built here, and tolerate bad indices. */
#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"
#include "util/error.h"
#include "util/mem.h"

#define GGUF_DEFAULT_ALIGNMENT 32u
/* ggml's GGML_MAX_NAME is 64 including the NUL: no file llama.cpp accepts has
 * a longer tensor name, and the model loader may rely on that bound. */
#define GGUF_MAX_TENSOR_NAME 63u
/* ggml's gguf.cpp refuses longer strings and arrays (GGUF_MAX_STRING_LENGTH,
 * GGUF_MAX_ARRAY_ELEMENTS), whatever the file size. */
#define GGUF_MAX_STRING_LENGTH (1ull << 30)
#define GGUF_MAX_ARRAY_ELEMENTS (1ull << 30)
/* ggml's GGML_TYPE_COUNT (ggml 0.27, the oracle): type ids below it that
 * tutti's quant layer does not know are either removed from ggml (block size
 * 0, refused by ggml too) or newer than tutti (accepted by ggml). */
#define GGUF_GGML_TYPE_COUNT 43
/* Smallest encodings, used to bound counts before allocating:
 * kv = key length (8) + type (4) + smallest value (1);
 * tensor info = name length (8) + an empty name + n_dims (4) + no ne (a
 *               scalar) + type (4) + offset (8). */
#define GGUF_MIN_KV_BYTES 13u
#define GGUF_MIN_TENSOR_INFO_BYTES 24u

typedef struct gguf_kv {
    gguf_str key;
    gguf_type type;
    gguf_type arr_type; /* GGUF_TYPE_COUNT unless type == ARRAY */
    uint64_t arr_n;
    const uint8_t *data; /* scalar value / first array element (non-string) */
    gguf_str str;        /* scalar string value */
    gguf_str *strs;      /* string array elements (owned), arr_n entries */
} gguf_kv;

/* Open-addressing hash index over names (keys or tensor names): slots hold
 * index + 1, 0 = empty.  Gives O(1) lookups and O(n) duplicate detection,
 * which matters for fuzzed files with many thousands of entries. */
typedef struct name_index {
    int64_t *slots;
    uint64_t mask;
} name_index;

struct gguf_file {
    char *path;
    const uint8_t *base;
    size_t size;
    void *map; /* non-NULL when we own an mmap of `size` bytes */
    dev_t dev; /* the mapped file (gguf_reread_small reopens path and checks it is the same) */
    ino_t ino;
    uint32_t version;
    uint32_t alignment;
    int64_t n_kv;
    gguf_kv *kvs;
    int64_t n_tensors;
    gguf_tensor_info *tensors;
    size_t data_offset;
    name_index kv_index;
    name_index tensor_index;
    /* a split model's parts 2..N (split.c): their tensors are in `tensors`,
     * their mappings stay open until gguf_close */
    gguf_file **parts;
    int n_parts;
};

/* ------------------------------------------------------------------------ */
/* small helpers                                                            */

size_t gguf_type_size(gguf_type t) {
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
    default: return 0; /* string, array: variable */
    }
}

const char *gguf_type_name(gguf_type t) {
    static const char *names[GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
    };
    if ((unsigned)t < GGUF_TYPE_COUNT) return names[t];
    return "invalid";
}

bool gguf_str_eq(gguf_str s, const char *c) {
    if (!c) return false;
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.data, c, n) == 0);
}

static uint64_t hash_bytes(const void *p, size_t n) {
    /* FNV-1a 64 */
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static bool index_init(name_index *ix, int64_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots != NULL;
}

/* Finds `name` among the entries already inserted; `get` maps index -> name. */
typedef gguf_str (*name_of_fn)(const gguf_file *f, int64_t i);

static int64_t index_find(const gguf_file *f, const name_index *ix, name_of_fn get, const void *name, size_t len) {
    if (!ix->slots) return -1;
    uint64_t h = hash_bytes(name, len) & ix->mask;
    for (;;) {
        int64_t s = ix->slots[h];
        if (s == 0) return -1;
        gguf_str cand = get(f, s - 1);
        if (cand.len == len && (len == 0 || memcmp(cand.data, name, len) == 0)) return s - 1;
        h = (h + 1) & ix->mask;
    }
}

static void index_insert(name_index *ix, const void *name, size_t len, int64_t i) {
    uint64_t h = hash_bytes(name, len) & ix->mask;
    while (ix->slots[h] != 0) h = (h + 1) & ix->mask;
    ix->slots[h] = i + 1;
}

static gguf_str kv_name(const gguf_file *f, int64_t i) { return f->kvs[i].key; }
static gguf_str tensor_name(const gguf_file *f, int64_t i) { return f->tensors[i].name; }

/* Printable prefix of a (possibly hostile) name for error messages. */
#define NAME_FMT "'%.*s'"
#define NAME_ARG(s) (int)((s).len > 96 ? 96 : (s).len), (s).data

/* ------------------------------------------------------------------------ */
/* bounded reader                                                           */

typedef struct reader {
    const uint8_t *base;
    size_t pos, size;
    const char *name; /* file name for messages */
} reader;

static size_t remaining(const reader *r) { return r->size - r->pos; }

/* what: the field being read, for the message. */
static bool rd_bytes(reader *r, void *out, size_t n, const char *what, const char *ctx) {
    if (n > remaining(r))
        return tutti_set_error("%s: %s%s%s: needs %zu bytes at offset %zu but only %zu remain "
                               "(file truncated?)",
                               r->name, ctx ? ctx : "", ctx ? ": " : "", what, n, r->pos, remaining(r)),
               false;
    memcpy(out, r->base + r->pos, n);
    r->pos += n;
    return true;
}

static bool rd_u32(reader *r, uint32_t *v, const char *what, const char *ctx) { return rd_bytes(r, v, 4, what, ctx); }
static bool rd_u64(reader *r, uint64_t *v, const char *what, const char *ctx) { return rd_bytes(r, v, 8, what, ctx); }

static bool rd_str(reader *r, gguf_str *s, const char *what, const char *ctx) {
    uint64_t len;
    if (!rd_u64(r, &len, what, ctx)) return false;
    if (len > GGUF_MAX_STRING_LENGTH)
        return tutti_set_error("%s: %s%s%s: string length %llu exceeds the maximum %llu", r->name, ctx ? ctx : "",
                               ctx ? ": " : "", what, (unsigned long long)len, GGUF_MAX_STRING_LENGTH),
               false;
    if (len > remaining(r))
        return tutti_set_error("%s: %s%s%s: string length %llu exceeds the %zu bytes remaining "
                               "at offset %zu",
                               r->name, ctx ? ctx : "", ctx ? ": " : "", what, (unsigned long long)len, remaining(r),
                               r->pos),
               false;
    s->data = (const char *)(r->base + r->pos);
    s->len = len;
    r->pos += (size_t)len;
    return true;
}

/* ------------------------------------------------------------------------ */
/* parsing                                                                  */

static bool parse_kv(gguf_file *f, reader *r, int64_t i) {
    gguf_kv *kv = &f->kvs[i];
    char ctx[160];
    snprintf(ctx, sizeof ctx, "kv[%lld]", (long long)i);
    if (!rd_str(r, &kv->key, "key", ctx)) return false;
    if (kv->key.len == 0) return tutti_set_error("%s: %s: key is empty", r->name, ctx), false;
    snprintf(ctx, sizeof ctx, "key '%.*s'", NAME_ARG(kv->key));
    /* llama.cpp looks keys up as C strings, so it would find this one under
     * its prefix: refused rather than read differently. */
    if (memchr(kv->key.data, 0, (size_t)kv->key.len))
        return tutti_set_error("%s: %s: key contains a NUL byte", r->name, ctx), false;

    if (index_find(f, &f->kv_index, kv_name, kv->key.data, (size_t)kv->key.len) >= 0)
        return tutti_set_error("%s: %s: duplicate key", r->name, ctx), false;

    uint32_t type;
    if (!rd_u32(r, &type, "value type", ctx)) return false;
    if (type >= GGUF_TYPE_COUNT)
        return tutti_set_error("%s: %s: unknown value type %u (valid: 0..%d)", r->name, ctx, type, GGUF_TYPE_COUNT - 1),
               false;
    kv->type = (gguf_type)type;
    kv->arr_type = GGUF_TYPE_COUNT;
    kv->arr_n = 0;

    if (kv->type == GGUF_TYPE_STRING) {
        if (!rd_str(r, &kv->str, "string value", ctx)) return false;
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        uint32_t et;
        uint64_t n;
        if (!rd_u32(r, &et, "array element type", ctx)) return false;
        if (et >= GGUF_TYPE_COUNT)
            return tutti_set_error("%s: %s: unknown array element type %u", r->name, ctx, et), false;
        if (et == GGUF_TYPE_ARRAY)
            return tutti_set_error("%s: %s: nested arrays are not supported", r->name, ctx), false;
        if (!rd_u64(r, &n, "array length", ctx)) return false;
        kv->arr_type = (gguf_type)et;
        kv->arr_n = n;
        if (n > GGUF_MAX_ARRAY_ELEMENTS)
            return tutti_set_error("%s: %s: array of %llu elements exceeds the maximum of %llu", r->name, ctx,
                                   (unsigned long long)n, GGUF_MAX_ARRAY_ELEMENTS),
                   false;
        if (et == GGUF_TYPE_STRING) {
            /* each element takes at least its 8-byte length */
            if (n > remaining(r) / 8)
                return tutti_set_error("%s: %s: string array of %llu elements cannot fit in the "
                                       "%zu bytes remaining",
                                       r->name, ctx, (unsigned long long)n, remaining(r)),
                       false;
            kv->strs = malloc((size_t)(n ? n : 1) * sizeof *kv->strs);
            if (!kv->strs) return tutti_set_error("%s: %s: out of memory", r->name, ctx), false;
            for (uint64_t j = 0; j < n; j++) {
                char ectx[200];
                snprintf(ectx, sizeof ectx, "%s: element %llu", ctx, (unsigned long long)j);
                if (!rd_str(r, &kv->strs[j], "string", ectx)) return false;
            }
        } else {
            size_t es = gguf_type_size(kv->arr_type);
            if (n > remaining(r) / es)
                return tutti_set_error("%s: %s: array of %llu %s elements exceeds the %zu bytes "
                                       "remaining",
                                       r->name, ctx, (unsigned long long)n, gguf_type_name(kv->arr_type), remaining(r)),
                       false;
            kv->data = r->base + r->pos;
            r->pos += (size_t)n * es;
        }
    } else {
        size_t es = gguf_type_size(kv->type);
        if (es > remaining(r))
            return tutti_set_error("%s: %s: %s value needs %zu bytes but only %zu remain", r->name, ctx,
                                   gguf_type_name(kv->type), es, remaining(r)),
                   false;
        kv->data = r->base + r->pos;
        r->pos += es;
    }
    index_insert(&f->kv_index, kv->key.data, (size_t)kv->key.len, i);
    return true;
}

/* The checks and their order follow ggml's gguf_init_from_file_impl (gguf.cpp),
 * so that every tensor info llama.cpp refuses is refused here, and every one
 * it accepts is accepted unless tutti cannot size it (a ggml type newer than
 * tutti's quant layer). */
static bool parse_tensor(gguf_file *f, reader *r, int64_t i) {
    gguf_tensor_info *t = &f->tensors[i];
    char ctx[160];
    snprintf(ctx, sizeof ctx, "tensor[%lld]", (long long)i);
    if (!rd_str(r, &t->name, "name", ctx)) return false;
    if (t->name.len > GGUF_MAX_TENSOR_NAME)
        return tutti_set_error("%s: %s: tensor name of %llu bytes is longer than %u", r->name, ctx,
                               (unsigned long long)t->name.len, GGUF_MAX_TENSOR_NAME),
               false;
    /* ggml keeps names as C strings (ggml_set_name): a name is what precedes
     * its first NUL, for lookups and for the duplicate check alike.  An empty
     * name is legal GGUF (a model loader then finds it unused). */
    const void *nul = memchr(t->name.data, 0, (size_t)t->name.len);
    if (nul) t->name.len = (uint64_t)((const char *)nul - t->name.data);
    snprintf(ctx, sizeof ctx, "tensor '%.*s'", NAME_ARG(t->name));
    int64_t dup = index_find(f, &f->tensor_index, tensor_name, t->name.data, (size_t)t->name.len);
    if (dup >= 0)
        return tutti_set_error("%s: %s: duplicate tensor name (tensors %lld and %lld)", r->name, ctx, (long long)dup,
                               (long long)i),
               false;

    if (!rd_u32(r, &t->n_dims, "n_dims", ctx)) return false;
    /* n_dims 0 is a scalar for ggml (every ne 1), not an error */
    if (t->n_dims > GGUF_MAX_DIMS)
        return tutti_set_error("%s: %s: n_dims %u is more than %d", r->name, ctx, t->n_dims, GGUF_MAX_DIMS), false;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if (!rd_u64(r, &ne, "ne", ctx)) return false;
        if (ne > (uint64_t)INT64_MAX)
            return tutti_set_error("%s: %s: ne[%u] = %lld is negative", r->name, ctx, d, (long long)(int64_t)ne), false;
        t->ne[d] = (int64_t)ne;
    }
    /* ggml: the element count and every partial product must stay below
     * INT64_MAX (checked with divisions, so nothing overflows here); a
     * tensor with a zero dimension has no elements and passes. */
    const int64_t *ne = t->ne;
    if (ne[0] > 0 && ne[1] > 0 && ne[2] > 0 && ne[3] > 0 &&
        (INT64_MAX / ne[1] <= ne[0] || INT64_MAX / ne[2] <= ne[0] * ne[1] ||
         INT64_MAX / ne[3] <= ne[0] * ne[1] * ne[2]))
        return tutti_set_error("%s: %s: element count of shape [%lld, %lld, %lld, %lld] "
                               "overflows int64",
                               r->name, ctx, (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3]),
               false;
    uint32_t type;
    if (!rd_u32(r, &type, "type", ctx)) return false;
    t->type = (int)type;
    const tutti_type_traits *tt = type < GGUF_GGML_TYPE_COUNT ? tutti_type_get((int)type) : NULL;
    if (!tt) {
        if (type >= GGUF_GGML_TYPE_COUNT)
            return tutti_set_error("%s: %s: invalid ggml type id %d (valid: 0..%d)", r->name, ctx, (int32_t)type,
                                   GGUF_GGML_TYPE_COUNT - 1),
                   false;
        static const uint8_t removed[GGUF_GGML_TYPE_COUNT] = {
            [4] = 1, [5] = 1, [31] = 1, [32] = 1, [33] = 1, [36] = 1, [37] = 1, [38] = 1};
        if (removed[type])
            return tutti_set_error("%s: %s: ggml type id %u was removed from ggml (block size 0)", r->name, ctx, type),
                   false;
        return tutti_set_error("%s: %s: ggml type id %u is newer than tutti (not supported)", r->name, ctx, type),
               false;
    }
    if (t->ne[0] % tt->block_size != 0)
        return tutti_set_error("%s: %s: ne[0] = %lld is not a multiple of the %s block size %lld", r->name, ctx,
                               (long long)t->ne[0], tt->name, (long long)tt->block_size),
               false;
    /* bytes = (ne[0] / block) * type_size * rows, overflow-checked */
    uint64_t row = (uint64_t)(t->ne[0] / tt->block_size);
    if (row != 0 && tt->type_size > UINT64_MAX / row)
        return tutti_set_error("%s: %s: byte size overflows", r->name, ctx), false;
    uint64_t bytes = row * tt->type_size;
    for (uint32_t d = 1; d < GGUF_MAX_DIMS; d++) {
        uint64_t n = (uint64_t)t->ne[d];
        if (n != 0 && bytes > UINT64_MAX / n)
            return tutti_set_error("%s: %s: byte size overflows", r->name, ctx), false;
        bytes *= n;
    }
    if (bytes > SIZE_MAX) return tutti_set_error("%s: %s: byte size overflows", r->name, ctx), false;
    t->size = bytes;
    if (!rd_u64(r, &t->offset, "offset", ctx)) return false;
    index_insert(&f->tensor_index, t->name.data, (size_t)t->name.len, i);
    return true;
}

static bool parse(gguf_file *f) {
    reader r = {f->base, 0, f->size, f->path};
    char magic[4];
    if (!rd_bytes(&r, magic, 4, "magic", "header")) return false;
    if (memcmp(magic, "GGUF", 4) != 0)
        return tutti_set_error("%s: header: bad magic %02x %02x %02x %02x (expected \"GGUF\"): "
                               "not a GGUF file",
                               f->path, (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]),
               false;
    if (!rd_u32(&r, &f->version, "version", "header")) return false;
    uint32_t v = f->version;
    if (v != 2 && v != 3) {
        uint32_t sw = __builtin_bswap32(v);
        if (sw >= 1 && sw <= 3)
            return tutti_set_error("%s: header: version field reads %u (= %u byte-swapped): a "
                                   "big-endian GGUF file, not supported (convert it to "
                                   "little-endian)",
                                   f->path, v, sw),
                   false;
        if (v == 1)
            return tutti_set_error("%s: header: GGUF version 1 is not supported (only 2 and 3); "
                                   "re-convert the model",
                                   f->path),
                   false;
        return tutti_set_error("%s: header: unsupported GGUF version %u (only 2 and 3)", f->path, v), false;
    }
    uint64_t n_tensors, n_kv;
    if (!rd_u64(&r, &n_tensors, "n_tensors", "header")) return false;
    if (!rd_u64(&r, &n_kv, "n_kv", "header")) return false;

    if (n_kv > remaining(&r) / GGUF_MIN_KV_BYTES)
        return tutti_set_error("%s: header: n_kv = %llu cannot fit in the %zu bytes remaining", f->path,
                               (unsigned long long)n_kv, remaining(&r)),
               false;
    /* tensor infos follow the kvs, so this is a loose bound here; the exact
     * one is checked again after the kvs are parsed */
    if (n_tensors > remaining(&r) / GGUF_MIN_TENSOR_INFO_BYTES)
        return tutti_set_error("%s: header: n_tensors = %llu cannot fit in the %zu bytes "
                               "remaining",
                               f->path, (unsigned long long)n_tensors, remaining(&r)),
               false;

    f->kvs = calloc((size_t)n_kv + 1, sizeof *f->kvs);
    if (!f->kvs || !index_init(&f->kv_index, (int64_t)n_kv))
        return tutti_set_error("%s: out of memory", f->path), false;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (!parse_kv(f, &r, (int64_t)i)) return false;
        f->n_kv = (int64_t)i + 1; /* so that close frees the parsed string arrays */
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = gguf_find_key(f, "general.alignment");
    if (ai >= 0) {
        const gguf_kv *kv = &f->kvs[ai];
        if (kv->type != GGUF_TYPE_UINT32)
            return tutti_set_error("%s: general.alignment: must be u32, found %s", f->path, gguf_type_name(kv->type)),
                   false;
        uint32_t a;
        memcpy(&a, kv->data, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return tutti_set_error("%s: general.alignment: %u is not a nonzero power of two", f->path, a), false;
        f->alignment = a;
    }

    if (n_tensors > remaining(&r) / GGUF_MIN_TENSOR_INFO_BYTES)
        return tutti_set_error("%s: header: n_tensors = %llu cannot fit in the %zu bytes "
                               "remaining after the metadata",
                               f->path, (unsigned long long)n_tensors, remaining(&r)),
               false;
    f->tensors = calloc((size_t)n_tensors + 1, sizeof *f->tensors);
    if (!f->tensors || !index_init(&f->tensor_index, (int64_t)n_tensors))
        return tutti_set_error("%s: out of memory", f->path), false;
    for (uint64_t i = 0; i < n_tensors; i++)
        if (!parse_tensor(f, &r, (int64_t)i)) return false;
    f->n_tensors = (int64_t)n_tensors;

    /* data section: after the tensor infos, padded to the alignment */
    size_t a = f->alignment;
    size_t pos = r.pos;
    size_t data_off = pos + (a - pos % a) % a;
    if (data_off < pos) return tutti_set_error("%s: data section offset overflows", f->path), false;
    if (f->n_tensors > 0 && data_off > f->size)
        return tutti_set_error("%s: data section: starts at offset %zu, past the end of the file "
                               "(%zu bytes; truncated?)",
                               f->path, data_off, f->size),
               false;
    f->data_offset = data_off;
    /* ggml requires the tensors' data in the order of their infos, each one
     * padded to the alignment: tensor i starts where tensor i-1's padded
     * bytes end (so no two overlap and every offset is aligned). */
    uint64_t expect = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor_info *t = &f->tensors[i];
        if (t->offset != expect)
            return tutti_set_error("%s: tensor '%.*s': data offset %llu, expected %llu (tensor "
                                   "data must follow the order of the tensor infos, each tensor "
                                   "padded to the alignment %zu)",
                                   f->path, NAME_ARG(t->name), (unsigned long long)t->offset,
                                   (unsigned long long)expect, a),
                   false;
        uint64_t padded = t->size + (a - t->size % a) % a;
        if (padded < t->size || padded > SIZE_MAX - expect)
            return tutti_set_error("%s: tensor '%.*s': data size %llu overflows after padding", f->path,
                                   NAME_ARG(t->name), (unsigned long long)t->size),
                   false;
        expect += padded;
    }
    /* llama.cpp's model loader: each tensor's unpadded bytes must be in the
     * file (the last tensor's padding may be missing) */
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor_info *t = &f->tensors[i];
        if (t->offset > f->size - data_off || t->size > f->size - data_off - t->offset)
            return tutti_set_error("%s: tensor '%.*s': data [%llu, +%llu) at data section offset "
                                   "%zu is not within the file bounds (%zu bytes; truncated?)",
                                   f->path, NAME_ARG(t->name), (unsigned long long)t->offset,
                                   (unsigned long long)t->size, data_off, f->size),
                   false;
        t->data = f->base + data_off + t->offset;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* open / close                                                             */

static gguf_file *open_common(const void *buf, size_t size, const char *name, void *map) {
    gguf_file *f = calloc(1, sizeof *f);
    const char *nm = name ? name : "<buffer>";
    char *path = malloc(strlen(nm) + 1);
    if (!f || !path) {
        free(f);
        free(path);
        if (map) munmap(map, size);
        tutti_set_error("%s: out of memory", nm);
        return NULL;
    }
    memcpy(path, nm, strlen(nm) + 1);
    f->path = path;
    f->base = buf;
    f->size = size;
    f->map = map;
    if (!parse(f)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name) {
    if (!buf && size) {
        tutti_set_error("%s: NULL buffer", name ? name : "<buffer>");
        return NULL;
    }
    static const uint8_t empty[1];
    return open_common(buf ? buf : empty, size, name, NULL);
}

gguf_file *gguf_open_one(const char *path) {
    if (!path) {
        tutti_set_error("gguf_open: path is NULL");
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tutti_set_error("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tutti_set_error("%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        tutti_set_error("%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    if (size == 0) {
        close(fd);
        tutti_set_error("%s: header: file is empty (expected a GGUF header)", path);
        return NULL;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd); /* the mapping stays valid */
    if (map == MAP_FAILED) {
        tutti_set_error("%s: cannot mmap %zu bytes: %s", path, size, strerror(err));
        return NULL;
    }
    /* before the first read: then readahead fills the page cache with 2 MiB
     * folios, which the mapping maps with 2 MiB entries (model weights are
     * read from there, src/model/load.c); advisory */
    (void)madvise(map, size, MADV_HUGEPAGE);
    gguf_file *f = open_common(map, size, path, map);
    if (f) f->dev = st.st_dev, f->ino = st.st_ino;
    return f;
}

size_t gguf_reread_small(const gguf_file *f) {
    size_t done = 0;
    for (int i = 0; f && i < f->n_parts; i++) done += gguf_reread_small(f->parts[i]);
    if (!f || !f->map) return done;
    /* the fd was closed at open (the mapping needs none); the path is opened
     * again and used only when it is still the mapped file */
    const int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return done;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_dev == f->dev && st.st_ino == f->ino && (size_t)st.st_size == f->size)
        done += tutti_mem_reread_small(f->map, f->size, fd);
    close(fd);
    return done;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kvs) {
        /* kvs has n_kv + 1 zeroed slots: when parsing failed at entry n_kv,
         * that entry may already own its string array */
        for (int64_t i = 0; i <= f->n_kv; i++) free(f->kvs[i].strs);
    }
    for (int i = 0; i < f->n_parts; i++) gguf_close(f->parts[i]);
    free(f->parts);
    free(f->kvs);
    free(f->tensors);
    free(f->kv_index.slots);
    free(f->tensor_index.slots);
    if (f->map) munmap(f->map, f->size);
    free(f->path);
    free(f);
}

int gguf_adopt_parts(gguf_file *f, gguf_file **parts, int n_parts) {
    int64_t total = f->n_tensors;
    for (int p = 0; p < n_parts; p++) {
        if (parts[p]->n_tensors > INT64_MAX / 4 - total) return tutti_set_error("%s: too many tensors", f->path);
        total += parts[p]->n_tensors;
    }
    gguf_tensor_info *t = calloc((size_t)total + 1, sizeof *t);
    name_index ix;
    if (!t || !index_init(&ix, total)) {
        free(t);
        return tutti_set_error("%s: out of memory", f->path);
    }
    int64_t n = 0;
    gguf_file merged = {.tensors = t}; /* index_find reads names through a gguf_file */
    for (int p = -1; p < n_parts; p++) {
        const gguf_file *g = p < 0 ? f : parts[p];
        for (int64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor_info *ti = &g->tensors[i];
            if (index_find(&merged, &ix, tensor_name, ti->name.data, (size_t)ti->name.len) >= 0) {
                free(t);
                free(ix.slots);
                return tutti_set_error("%s: tensor " NAME_FMT " is in two parts of the split model (the second: %s)",
                                       f->path, NAME_ARG(ti->name), g->path);
            }
            t[n] = *ti;
            index_insert(&ix, ti->name.data, (size_t)ti->name.len, n);
            n++;
        }
    }
    free(f->tensors);
    free(f->tensor_index.slots);
    f->tensors = t;
    f->tensor_index = ix;
    f->n_tensors = n;
    f->parts = parts;
    f->n_parts = n_parts;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* accessors                                                                */

const char *gguf_path(const gguf_file *f) { return f ? f->path : NULL; }
uint32_t gguf_version(const gguf_file *f) { return f ? f->version : 0; }
uint32_t gguf_alignment(const gguf_file *f) { return f ? f->alignment : 0; }
int64_t gguf_n_kv(const gguf_file *f) { return f ? f->n_kv : 0; }
int64_t gguf_n_tensors(const gguf_file *f) { return f ? f->n_tensors : 0; }

static const gguf_kv *kv_at(const gguf_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_kv) return NULL;
    return &f->kvs[i];
}

int64_t gguf_find_key(const gguf_file *f, const char *key) {
    if (!f || !key) return -1;
    return index_find(f, &f->kv_index, kv_name, key, strlen(key));
}

gguf_str gguf_kv_key(const gguf_file *f, int64_t i) {
    const gguf_kv *kv = kv_at(f, i);
    return kv ? kv->key : (gguf_str){"", 0};
}

gguf_type gguf_kv_type(const gguf_file *f, int64_t i) {
    const gguf_kv *kv = kv_at(f, i);
    return kv ? kv->type : GGUF_TYPE_COUNT;
}

gguf_type gguf_kv_arr_type(const gguf_file *f, int64_t i) {
    const gguf_kv *kv = kv_at(f, i);
    return kv ? kv->arr_type : GGUF_TYPE_COUNT;
}

uint64_t gguf_kv_arr_n(const gguf_file *f, int64_t i) {
    const gguf_kv *kv = kv_at(f, i);
    return kv ? kv->arr_n : 0;
}

const void *gguf_kv_data(const gguf_file *f, int64_t i) {
    const gguf_kv *kv = kv_at(f, i);
    return kv ? kv->data : NULL;
}

gguf_str gguf_kv_str(const gguf_file *f, int64_t i, uint64_t j) {
    const gguf_kv *kv = kv_at(f, i);
    if (kv && kv->type == GGUF_TYPE_STRING) return kv->str;
    if (kv && kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING && j < kv->arr_n) return kv->strs[j];
    return (gguf_str){"", 0};
}

/* Reads any integer scalar as a signed/unsigned pair; false if not integer. */
static bool kv_int(const gguf_kv *kv, int64_t *s, uint64_t *u, bool *is_unsigned) {
    const uint8_t *p = kv->data;
    *is_unsigned = false;
    switch (kv->type) {
    case GGUF_TYPE_UINT8:
        *u = p[0];
        *is_unsigned = true;
        return true;
    case GGUF_TYPE_INT8: {
        int8_t x;
        memcpy(&x, p, 1);
        *s = x;
        return true;
    }
    case GGUF_TYPE_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        *u = x;
        *is_unsigned = true;
        return true;
    }
    case GGUF_TYPE_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        *s = x;
        return true;
    }
    case GGUF_TYPE_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        *u = x;
        *is_unsigned = true;
        return true;
    }
    case GGUF_TYPE_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        *s = x;
        return true;
    }
    case GGUF_TYPE_UINT64: {
        memcpy(u, p, 8);
        *is_unsigned = true;
        return true;
    }
    case GGUF_TYPE_INT64: {
        memcpy(s, p, 8);
        return true;
    }
    default: return false;
    }
}

static const gguf_kv *find_kv(const gguf_file *f, const char *key) {
    int64_t i = gguf_find_key(f, key);
    return i >= 0 ? &f->kvs[i] : NULL;
}

static bool type_mismatch(const gguf_file *f, const gguf_kv *kv, const char *want) {
    if (kv->type == GGUF_TYPE_ARRAY)
        tutti_set_error("%s: %.*s: expected %s, found an array of %s", f->path, NAME_ARG(kv->key), want,
                        gguf_type_name(kv->arr_type));
    else tutti_set_error("%s: %.*s: expected %s, found %s", f->path, NAME_ARG(kv->key), want, gguf_type_name(kv->type));
    return false;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = find_kv(f, key);
    if (!kv) return false;
    int64_t s = 0;
    uint64_t u = 0;
    bool uns;
    if (!kv_int(kv, &s, &u, &uns)) return type_mismatch(f, kv, "an integer (u32)");
    if (uns ? u > UINT32_MAX : (s < 0 || s > (int64_t)UINT32_MAX)) {
        if (uns)
            tutti_set_error("%s: %.*s: value %llu does not fit in u32", f->path, NAME_ARG(kv->key),
                            (unsigned long long)u);
        else tutti_set_error("%s: %.*s: value %lld does not fit in u32", f->path, NAME_ARG(kv->key), (long long)s);
        return false;
    }
    *out = uns ? (uint32_t)u : (uint32_t)s;
    return true;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = find_kv(f, key);
    if (!kv) return false;
    int64_t s = 0;
    uint64_t u = 0;
    bool uns;
    if (!kv_int(kv, &s, &u, &uns)) return type_mismatch(f, kv, "an integer (i64)");
    if (uns && u > (uint64_t)INT64_MAX) {
        tutti_set_error("%s: %.*s: value %llu does not fit in i64", f->path, NAME_ARG(kv->key), (unsigned long long)u);
        return false;
    }
    *out = uns ? (int64_t)u : s;
    return true;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = find_kv(f, key);
    if (!kv) return false;
    if (kv->type == GGUF_TYPE_FLOAT32) {
        memcpy(out, kv->data, 4);
        return true;
    }
    if (kv->type == GGUF_TYPE_FLOAT64) {
        double d;
        memcpy(&d, kv->data, 8);
        *out = (float)d;
        return true;
    }
    return type_mismatch(f, kv, "f32 or f64");
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = find_kv(f, key);
    if (!kv) return false;
    if (kv->type != GGUF_TYPE_BOOL) return type_mismatch(f, kv, "bool");
    *out = kv->data[0] != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = find_kv(f, key);
    if (!kv) return false;
    if (kv->type != GGUF_TYPE_STRING) return type_mismatch(f, kv, "str");
    *out = kv->str;
    return true;
}

const gguf_tensor_info *gguf_tensor(const gguf_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_tensors) return NULL;
    return &f->tensors[i];
}

const gguf_tensor_info *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    /* during parsing n_tensors is 0, afterwards the index covers them all */
    int64_t i = index_find(f, &f->tensor_index, tensor_name, name, strlen(name));
    return i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}
