/* GGUF v3 writer — see gguf_write.h.
 *
 * Each metadata value is serialized at add time into a small blob (exactly
 * the bytes that follow the u32 value type in the file), so writing is a
 * plain concatenation.  Tensor data is borrowed and streamed at write time. */
#include "gguf/gguf_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "util/error.h"
#include "util/file.h"

typedef struct wkv {
    char *key;
    size_t key_len;
    gguf_type type;
    uint8_t *blob; /* serialized value */
    size_t blob_len;
} wkv;

typedef struct wtensor {
    char *name;
    size_t name_len;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    int type;
    uint64_t size;
    const void *data;
    gguf_tensor_fill_fn fill; /* when set, data is produced at write time */
    void *fill_ctx;
} wtensor;

static const char k_alignment[] = "general.alignment";

struct gguf_writer {
    uint32_t alignment;
    wkv *kvs;
    int64_t n_kv, cap_kv;
    wtensor *tensors;
    int64_t n_tensors, cap_tensors;
};

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) {
        tutti_set_error("gguf writer: out of memory");
        return NULL;
    }
    w->alignment = 32;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].blob);
    }
    for (int64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->kvs);
    free(w->tensors);
    free(w);
}

int gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) {
    if (!w) return tutti_set_error("gguf writer: NULL writer");
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        return tutti_set_error("gguf writer: alignment %u is not a nonzero power of two", alignment);
    /* keep the key and the layout in agreement: update or add the key */
    for (int64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, k_alignment) == 0) {
            memcpy(w->kvs[i].blob, &alignment, 4); /* add_kv ensured it is a u32 */
            w->alignment = alignment;
            return 0;
        }
    return gguf_writer_add_u32(w, k_alignment, alignment);
}

int64_t gguf_writer_n_kv(const gguf_writer *w) { return w ? w->n_kv : 0; }
int64_t gguf_writer_n_tensors(const gguf_writer *w) { return w ? w->n_tensors : 0; }

/* Takes ownership of blob (freed on failure too). */
static int add_kv(gguf_writer *w, const char *key, size_t key_len, gguf_type type, uint8_t *blob, size_t blob_len) {
    if (!w || !key) {
        free(blob);
        return tutti_set_error("gguf writer: NULL writer or key");
    }
    uint32_t new_alignment = w->alignment;
    if (key_len == sizeof k_alignment - 1 && memcmp(key, k_alignment, key_len) == 0) {
        /* the key decides the file layout: validate it like the reader does */
        uint32_t a = 0;
        if (type == GGUF_TYPE_UINT32) memcpy(&a, blob, 4);
        if (type != GGUF_TYPE_UINT32 || a == 0 || (a & (a - 1)) != 0) {
            free(blob);
            return tutti_set_error("gguf writer: general.alignment must be a u32 nonzero power "
                                   "of two");
        }
        new_alignment = a;
    }
    for (int64_t i = 0; i < w->n_kv; i++)
        if (w->kvs[i].key_len == key_len && memcmp(w->kvs[i].key, key, key_len) == 0) {
            free(blob);
            return tutti_set_error("gguf writer: key '%.*s': duplicate key", (int)key_len, key);
        }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        wkv *n = realloc(w->kvs, (size_t)cap * sizeof *n);
        if (!n) {
            free(blob);
            return tutti_set_error("gguf writer: out of memory");
        }
        w->kvs = n;
        w->cap_kv = cap;
    }
    char *k = malloc(key_len + 1);
    if (!k) {
        free(blob);
        return tutti_set_error("gguf writer: out of memory");
    }
    memcpy(k, key, key_len);
    k[key_len] = 0;
    w->kvs[w->n_kv++] = (wkv){k, key_len, type, blob, blob_len};
    w->alignment = new_alignment;
    return 0;
}

static int add_scalar(gguf_writer *w, const char *key, gguf_type t, const void *v) {
    size_t n = gguf_type_size(t);
    uint8_t *blob = malloc(n);
    if (!blob) return tutti_set_error("gguf writer: out of memory");
    memcpy(blob, v, n);
    return add_kv(w, key, key ? strlen(key) : 0, t, blob, n);
}

int gguf_writer_add_u8(gguf_writer *w, const char *k, uint8_t v) { return add_scalar(w, k, GGUF_TYPE_UINT8, &v); }
int gguf_writer_add_i8(gguf_writer *w, const char *k, int8_t v) { return add_scalar(w, k, GGUF_TYPE_INT8, &v); }
int gguf_writer_add_u16(gguf_writer *w, const char *k, uint16_t v) { return add_scalar(w, k, GGUF_TYPE_UINT16, &v); }
int gguf_writer_add_i16(gguf_writer *w, const char *k, int16_t v) { return add_scalar(w, k, GGUF_TYPE_INT16, &v); }
int gguf_writer_add_u32(gguf_writer *w, const char *k, uint32_t v) { return add_scalar(w, k, GGUF_TYPE_UINT32, &v); }
int gguf_writer_add_i32(gguf_writer *w, const char *k, int32_t v) { return add_scalar(w, k, GGUF_TYPE_INT32, &v); }
int gguf_writer_add_f32(gguf_writer *w, const char *k, float v) { return add_scalar(w, k, GGUF_TYPE_FLOAT32, &v); }
int gguf_writer_add_u64(gguf_writer *w, const char *k, uint64_t v) { return add_scalar(w, k, GGUF_TYPE_UINT64, &v); }
int gguf_writer_add_i64(gguf_writer *w, const char *k, int64_t v) { return add_scalar(w, k, GGUF_TYPE_INT64, &v); }
int gguf_writer_add_f64(gguf_writer *w, const char *k, double v) { return add_scalar(w, k, GGUF_TYPE_FLOAT64, &v); }
int gguf_writer_add_bool(gguf_writer *w, const char *k, bool v) {
    uint8_t b = v ? 1 : 0;
    return add_scalar(w, k, GGUF_TYPE_BOOL, &b);
}

static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

int gguf_writer_add_strn(gguf_writer *w, const char *key, const char *v, uint64_t len) {
    if (!v && len) return tutti_set_error("gguf writer: key '%s': NULL string", key ? key : "");
    if (len > SIZE_MAX - 8) return tutti_set_error("gguf writer: string too long");
    uint8_t *blob = malloc(8 + (size_t)len);
    if (!blob) return tutti_set_error("gguf writer: out of memory");
    put_u64(blob, len);
    if (len) memcpy(blob + 8, v, (size_t)len);
    return add_kv(w, key, key ? strlen(key) : 0, GGUF_TYPE_STRING, blob, 8 + (size_t)len);
}

int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v) {
    if (!v) return tutti_set_error("gguf writer: key '%s': NULL string", key ? key : "");
    return gguf_writer_add_strn(w, key, v, strlen(v));
}

static int add_arr_n(gguf_writer *w, const char *key, size_t key_len, gguf_type et, const void *data, uint64_t n) {
    size_t es = gguf_type_size(et);
    if (es == 0)
        return tutti_set_error("gguf writer: key '%.*s': element type %s is not a fixed-size "
                               "scalar (use the string array functions)",
                               (int)key_len, key ? key : "", gguf_type_name(et));
    if (n > (SIZE_MAX - 12) / es) return tutti_set_error("gguf writer: array too long");
    if (!data && n) return tutti_set_error("gguf writer: NULL array data");
    size_t len = 12 + (size_t)n * es;
    uint8_t *blob = malloc(len);
    if (!blob) return tutti_set_error("gguf writer: out of memory");
    put_u32(blob, (uint32_t)et);
    put_u64(blob + 4, n);
    if (n) memcpy(blob + 12, data, (size_t)n * es);
    return add_kv(w, key, key_len, GGUF_TYPE_ARRAY, blob, len);
}

int gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n) {
    return add_arr_n(w, key, key ? strlen(key) : 0, elem_type, data, n);
}

/* Serializes n strings given either as C strings or as counted strings. */
static int add_strs(gguf_writer *w, const char *key, size_t key_len, const char *const *cs, const gguf_str *gs,
                    uint64_t n) {
    size_t len = 12;
    for (uint64_t j = 0; j < n; j++) {
        const char *s = cs ? cs[j] : gs[j].data;
        if (!s && (cs || gs[j].len))
            return tutti_set_error("gguf writer: key '%.*s': element %llu is NULL", (int)key_len, key ? key : "",
                                   (unsigned long long)j);
        uint64_t sl = cs ? strlen(s) : gs[j].len;
        if (sl > SIZE_MAX - 8 - len) return tutti_set_error("gguf writer: array too long");
        len += 8 + (size_t)sl;
    }
    uint8_t *blob = malloc(len);
    if (!blob) return tutti_set_error("gguf writer: out of memory");
    put_u32(blob, GGUF_TYPE_STRING);
    put_u64(blob + 4, n);
    size_t pos = 12;
    for (uint64_t j = 0; j < n; j++) {
        const char *s = cs ? cs[j] : gs[j].data;
        uint64_t sl = cs ? strlen(s) : gs[j].len;
        put_u64(blob + pos, sl);
        if (sl) memcpy(blob + pos + 8, s, (size_t)sl);
        pos += 8 + (size_t)sl;
    }
    return add_kv(w, key, key_len, GGUF_TYPE_ARRAY, blob, len);
}

int gguf_writer_add_str_arr(gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (!strs && n) return tutti_set_error("gguf writer: NULL string array");
    return add_strs(w, key, key ? strlen(key) : 0, strs, NULL, n);
}

int gguf_writer_add_gstr_arr(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n) {
    if (!strs && n) return tutti_set_error("gguf writer: NULL string array");
    static const gguf_str none = {"", 0};
    return add_strs(w, key, key ? strlen(key) : 0, NULL, strs ? strs : &none, n);
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f, int64_t i) {
    if (!f || i < 0 || i >= gguf_n_kv(f))
        return tutti_set_error("gguf writer: copy_kv: index %lld out of range", (long long)i);
    gguf_str key = gguf_kv_key(f, i);
    gguf_type t = gguf_kv_type(f, i);
    if (t == GGUF_TYPE_STRING) {
        gguf_str s = gguf_kv_str(f, i, 0);
        uint8_t *blob = malloc(8 + (size_t)s.len);
        if (!blob) return tutti_set_error("gguf writer: out of memory");
        put_u64(blob, s.len);
        if (s.len) memcpy(blob + 8, s.data, (size_t)s.len);
        return add_kv(w, key.data, (size_t)key.len, t, blob, 8 + (size_t)s.len);
    }
    if (t == GGUF_TYPE_ARRAY) {
        gguf_type et = gguf_kv_arr_type(f, i);
        uint64_t n = gguf_kv_arr_n(f, i);
        if (et != GGUF_TYPE_STRING) return add_arr_n(w, key.data, (size_t)key.len, et, gguf_kv_data(f, i), n);
        gguf_str *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
        if (!tmp) return tutti_set_error("gguf writer: out of memory");
        for (uint64_t j = 0; j < n; j++) tmp[j] = gguf_kv_str(f, i, j);
        int rc = add_strs(w, key.data, (size_t)key.len, NULL, tmp, n);
        free(tmp);
        return rc;
    }
    size_t es = gguf_type_size(t);
    uint8_t *blob = malloc(es ? es : 1);
    if (!blob) return tutti_set_error("gguf writer: out of memory");
    memcpy(blob, gguf_kv_data(f, i), es);
    return add_kv(w, key.data, (size_t)key.len, t, blob, es);
}

static int add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims, const int64_t *ne, const void *data,
                      gguf_tensor_fill_fn fill, void *fill_ctx) {
    if (!w || !name || !ne) return tutti_set_error("gguf writer: NULL argument to add_tensor");
    size_t name_len = strlen(name);
    if (name_len == 0 || name_len > 63)
        return tutti_set_error("gguf writer: tensor '%s': name must have 1..63 bytes", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return tutti_set_error("gguf writer: tensor '%s': n_dims %u out of range 1..%d", name, n_dims, GGUF_MAX_DIMS);
    const tutti_type_traits *tt = tutti_type_get(type);
    if (!tt) return tutti_set_error("gguf writer: tensor '%s': unknown type id %d", name, type);
    uint64_t bytes = 0;
    for (uint32_t d = 0; d < n_dims; d++)
        if (ne[d] < 0)
            return tutti_set_error("gguf writer: tensor '%s': ne[%u] = %lld is negative", name, d, (long long)ne[d]);
    if (ne[0] % tt->block_size)
        return tutti_set_error("gguf writer: tensor '%s': ne[0] = %lld is not a multiple of the "
                               "%s block size %lld",
                               name, (long long)ne[0], tt->name, (long long)tt->block_size);
    bytes = (uint64_t)(ne[0] / tt->block_size) * tt->type_size;
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] && bytes > UINT64_MAX / (uint64_t)ne[d])
            return tutti_set_error("gguf writer: tensor '%s': size overflows", name);
        bytes *= (uint64_t)ne[d];
    }
    if (bytes && !data && !fill) return tutti_set_error("gguf writer: tensor '%s': NULL data", name);
    for (int64_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].name_len == name_len && memcmp(w->tensors[i].name, name, name_len) == 0)
            return tutti_set_error("gguf writer: tensor '%s': duplicate tensor name", name);
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 16;
        wtensor *n = realloc(w->tensors, (size_t)cap * sizeof *n);
        if (!n) return tutti_set_error("gguf writer: out of memory");
        w->tensors = n;
        w->cap_tensors = cap;
    }
    char *nm = malloc(name_len + 1);
    if (!nm) return tutti_set_error("gguf writer: out of memory");
    memcpy(nm, name, name_len + 1);
    wtensor *t = &w->tensors[w->n_tensors++];
    *t = (wtensor){nm, name_len, n_dims, {1, 1, 1, 1}, type, bytes, data, fill, fill_ctx};
    for (uint32_t d = 0; d < n_dims; d++) t->ne[d] = ne[d];
    return 0;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims, const int64_t *ne,
                           const void *data) {
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL);
}

int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, int type, uint32_t n_dims, const int64_t *ne,
                                gguf_tensor_fill_fn fill, void *ctx) {
    if (!fill) return tutti_set_error("gguf writer: tensor '%s': NULL fill function", name ? name : "");
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, ctx);
}

/* ------------------------------------------------------------------------ */

static bool wr(FILE *fp, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, fp) == n; }
static bool wr_u32(FILE *fp, uint32_t v) { return wr(fp, &v, 4); }
static bool wr_u64(FILE *fp, uint64_t v) { return wr(fp, &v, 8); }
static bool wr_pad(FILE *fp, uint64_t pos, uint32_t align) {
    static const uint8_t zeros[256];
    uint64_t pad = (align - pos % align) % align;
    while (pad) {
        size_t n = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
        if (!wr(fp, zeros, n)) return false;
        pad -= n;
    }
    return true;
}

static uint64_t align_up(uint64_t x, uint32_t a) { return x + (a - x % a) % a; }

int gguf_writer_write_stream(const gguf_writer *w, FILE *fp, const char *name) {
    if (!name) name = "<stream>";
    if (!w || !fp) return tutti_set_error("%s: gguf writer: NULL writer or stream", name);
    uint64_t pos = 0;
    bool ok = wr(fp, "GGUF", 4) && wr_u32(fp, 3) && wr_u64(fp, (uint64_t)w->n_tensors) && wr_u64(fp, (uint64_t)w->n_kv);
    pos += 24;
    for (int64_t i = 0; ok && i < w->n_kv; i++) {
        const wkv *kv = &w->kvs[i];
        ok = wr_u64(fp, kv->key_len) && wr(fp, kv->key, kv->key_len) && wr_u32(fp, (uint32_t)kv->type) &&
             wr(fp, kv->blob, kv->blob_len);
        pos += 8 + kv->key_len + 4 + kv->blob_len;
    }
    uint64_t off = 0;
    for (int64_t i = 0; ok && i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        ok = wr_u64(fp, t->name_len) && wr(fp, t->name, t->name_len) && wr_u32(fp, t->n_dims);
        for (uint32_t d = 0; ok && d < t->n_dims; d++) ok = wr_u64(fp, (uint64_t)t->ne[d]);
        ok = ok && wr_u32(fp, (uint32_t)t->type) && wr_u64(fp, off);
        pos += 8 + t->name_len + 4 + 8ull * t->n_dims + 4 + 8;
        off = align_up(off + t->size, w->alignment);
    }
    /* The data section starts aligned; each tensor is padded to the
     * alignment (also the last one, like ggml does). */
    if (w->n_tensors > 0) {
        ok = ok && wr_pad(fp, pos, w->alignment);
        for (int64_t i = 0; ok && i < w->n_tensors; i++) {
            const wtensor *t = &w->tensors[i];
            if (t->fill && t->size) {
                void *buf = malloc((size_t)t->size);
                if (!buf)
                    return tutti_set_error("%s: tensor '%s': out of memory (%llu bytes)", name, t->name,
                                           (unsigned long long)t->size);
                if (t->fill(t->fill_ctx, i, buf, t->size) != 0) {
                    free(buf);
                    return TUTTI_ERR; /* the producer said why */
                }
                ok = wr(fp, buf, (size_t)t->size);
                free(buf);
                ok = ok && wr_pad(fp, t->size, w->alignment);
                continue;
            }
            ok = wr(fp, t->data, (size_t)t->size) && wr_pad(fp, t->size, w->alignment);
        }
    }
    if (!ok || fflush(fp) != 0) return tutti_set_error("%s: write failed: %s", name, strerror(errno));
    return 0;
}

typedef struct stream_job {
    const gguf_writer *w;
    const char *path;
} stream_job;

static int write_job(FILE *fp, void *ctx) {
    const stream_job *j = ctx;
    return gguf_writer_write_stream(j->w, fp, j->path);
}

int gguf_writer_write(const gguf_writer *w, const char *path) {
    if (!path) return tutti_set_error("gguf writer: NULL path");
    /* never a half-written or truncated model: a temporary file renamed
     * into place when complete (util/file.h) */
    stream_job j = {w, path};
    return tutti_write_atomic(path, write_job, &j);
}

int gguf_writer_write_buffer(const gguf_writer *w, void **out_buf, size_t *out_size) {
    if (!out_buf || !out_size) return tutti_set_error("gguf writer: NULL output pointer");
    *out_buf = NULL;
    *out_size = 0;
    char *buf = NULL;
    size_t size = 0;
    FILE *fp = open_memstream(&buf, &size);
    if (!fp) return tutti_set_error("gguf writer: open_memstream failed: %s", strerror(errno));
    int rc = gguf_writer_write_stream(w, fp, "<buffer>");
    if (fclose(fp) != 0 && rc == 0) rc = tutti_set_error("gguf writer: out of memory");
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *out_buf = buf;
    *out_size = size;
    return 0;
}
