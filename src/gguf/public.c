/* The GGUF section of include/tutti.h: a file's metadata and tensor
 * directory for front ends (tutti info), over this layer's reader. */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tutti.h"
#include "util/error.h"

/* The public handle is the reader's file. */
struct tutti_gguf {
    gguf_file *f;
};

tutti_gguf *tutti_gguf_open(const char *path) {
    if (!path) return tutti_set_error("gguf: no path"), NULL;
    gguf_file *f = gguf_open(path);
    if (!f) return NULL;
    tutti_gguf *g = malloc(sizeof *g);
    if (!g) {
        gguf_close(f);
        return tutti_set_error("%s: out of memory", path), NULL;
    }
    g->f = f;
    return g;
}

void tutti_gguf_close(tutti_gguf *g) {
    if (!g) return;
    gguf_close(g->f);
    free(g);
}

uint32_t tutti_gguf_version(const tutti_gguf *g) { return gguf_version(g->f); }
int64_t tutti_gguf_n_tensors(const tutti_gguf *g) { return gguf_n_tensors(g->f); }
int64_t tutti_gguf_n_kv(const tutti_gguf *g) { return gguf_n_kv(g->f); }
int64_t tutti_gguf_find(const tutti_gguf *g, const char *key) { return key ? gguf_find_key(g->f, key) : -1; }

double tutti_gguf_n_params(const tutti_gguf *g) {
    double n = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g->f); i++) {
        const gguf_tensor_info *t = gguf_tensor(g->f, i);
        double e = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) e *= (double)t->ne[d];
        n += e;
    }
    return n;
}

const char *tutti_gguf_key(const tutti_gguf *g, int64_t i, size_t *len) {
    if (i < 0 || i >= gguf_n_kv(g->f)) return NULL;
    gguf_str k = gguf_kv_key(g->f, i);
    if (len) *len = (size_t)k.len;
    return k.data;
}

/* A scalar of type t at p (unaligned) into out. */
static void scalar(gguf_type t, const void *p, tutti_gguf_value *out) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } v;
    memcpy(&v, p, gguf_type_size(t));
    out->kind = TUTTI_GGUF_NUMBER;
    switch (t) {
    case GGUF_TYPE_UINT8: out->number = v.u8; break;
    case GGUF_TYPE_INT8: out->number = v.i8; break;
    case GGUF_TYPE_UINT16: out->number = v.u16; break;
    case GGUF_TYPE_INT16: out->number = v.i16; break;
    case GGUF_TYPE_UINT32: out->number = v.u32; break;
    case GGUF_TYPE_INT32: out->number = v.i32; break;
    case GGUF_TYPE_UINT64: out->number = (double)v.u64; break;
    case GGUF_TYPE_INT64: out->number = (double)v.i64; break;
    case GGUF_TYPE_FLOAT32: out->number = v.f32, out->is_float = true; break;
    case GGUF_TYPE_FLOAT64: out->number = v.f64, out->is_float = true; break;
    default: out->kind = TUTTI_GGUF_BOOL, out->number = v.u8 != 0; break; /* GGUF_TYPE_BOOL: one byte */
    }
}

int tutti_gguf_get(const tutti_gguf *g, int64_t i, int64_t elem, tutti_gguf_value *out) {
    memset(out, 0, sizeof *out);
    if (i < 0 || i >= gguf_n_kv(g->f)) return tutti_set_error("gguf: no metadata entry %lld", (long long)i);
    gguf_type t = gguf_kv_type(g->f, i);
    if (elem >= 0) {
        if (t != GGUF_TYPE_ARRAY || (uint64_t)elem >= gguf_kv_arr_n(g->f, i))
            return tutti_set_error("gguf: metadata entry %lld has no element %lld", (long long)i, (long long)elem);
        t = gguf_kv_arr_type(g->f, i); /* never an array: the reader refuses nested arrays */
    }
    out->type = gguf_type_name(t);
    if (t == GGUF_TYPE_STRING) {
        gguf_str s = gguf_kv_str(g->f, i, elem >= 0 ? (uint64_t)elem : 0);
        out->kind = TUTTI_GGUF_STRING;
        out->str = s.data, out->len = (size_t)s.len;
    } else if (t == GGUF_TYPE_ARRAY) {
        out->kind = TUTTI_GGUF_ARRAY;
        out->elem_type = gguf_type_name(gguf_kv_arr_type(g->f, i));
        out->n = gguf_kv_arr_n(g->f, i);
    } else {
        const char *base = gguf_kv_data(g->f, i);
        scalar(t, base + (elem >= 0 ? (size_t)elem * gguf_type_size(t) : 0), out);
    }
    return 0;
}
