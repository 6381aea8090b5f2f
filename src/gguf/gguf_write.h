/* GGUF v3 writer — the `gguf` layer.
 *
 * Builds a GGUF v3 file (format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):
 * header, key/value metadata in insertion order, tensor infos in insertion
 * order, padding to the alignment, then each tensor's data padded to the
 * alignment.  Metadata values are copied at add time; tensor data is only
 * borrowed (the pointer must stay valid until gguf_writer_write*) and is
 * streamed to the file, so writing a model does not hold a second copy.
 *
 * All functions returning int give 0 on success and TUTTI_ERR (-1) with
 * tutti_last_error() set on failure (duplicate key or tensor name, unknown
 * type, ne[0] not a multiple of the block size, I/O error, out of memory).
 * A failed add leaves the writer unchanged. */
#ifndef TUTTI_GGUF_WRITE_H
#define TUTTI_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/gguf.h"

typedef struct gguf_writer gguf_writer;

/* NULL when out of memory. */
gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);

/* Tensor data alignment (nonzero power of two, default 32).  Sets (adds or
 * updates) the u32 key general.alignment, which is what tells readers the
 * alignment; adding that key directly (add_u32, copy_kv) has the same
 * effect, and any other type for it is refused. */
int gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment);

/* Scalar metadata. */
int gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v);
int gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v);
int gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v);
int gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v);
int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_add_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v);
int gguf_writer_add_f64(gguf_writer *w, const char *key, double v);
/* NUL-terminated string value. */
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
/* String value of len bytes (may contain NULs). */
int gguf_writer_add_strn(gguf_writer *w, const char *key, const char *v, uint64_t len);

/* Array of n fixed-size elements of elem_type (any scalar type: not STRING,
 * not ARRAY), read from data (n * element size bytes, little-endian). */
int gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n);
/* Array of n NUL-terminated strings. */
int gguf_writer_add_str_arr(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Array of n counted strings (e.g. taken from a gguf_file). */
int gguf_writer_add_gstr_arr(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n);

/* Copies metadata entry i of an open file under the same key (merging). */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f, int64_t i);

/* Tensor `name` of ggml type id `type` with n_dims (1..4) dims ne[0..n_dims)
 * (ne[0] contiguous).  data: tutti_row_size(type, ne[0]) * ne[1] * ... bytes,
 * borrowed until the file is written (may be NULL only if that is 0). */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims, const int64_t *ne,
                           const void *data);

/* The same, with the data produced at write time instead of borrowed:
 * fill(ctx, index, buf, size) must write the tensor's `size` bytes into buf
 * (a writer-owned buffer of exactly that size, freed right after) and return
 * 0, or TUTTI_ERR with tutti_last_error set to abort the write.  index is the
 * tensor's position among this writer's tensors.  Tensors are filled one at a
 * time in insertion order, so a caller can stream a model whose tensors are
 * computed one by one (tutti merge) with one tensor's bytes in memory. */
typedef int (*gguf_tensor_fill_fn)(void *ctx, int64_t index, void *buf, uint64_t size);
int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, int type, uint32_t n_dims, const int64_t *ne,
                                gguf_tensor_fill_fn fill, void *ctx);

int64_t gguf_writer_n_kv(const gguf_writer *w);
int64_t gguf_writer_n_tensors(const gguf_writer *w);

/* Writes the file to an open stream (binary), to a path, or into a
 * malloc'ed buffer that the caller frees (*out_buf, *out_size).  A path is
 * written atomically (util/file.h: a temporary file in its folder, renamed
 * onto it when complete; on failure the old file, if any, is untouched). */
int gguf_writer_write_stream(const gguf_writer *w, FILE *fp, const char *name);
int gguf_writer_write(const gguf_writer *w, const char *path);
int gguf_writer_write_buffer(const gguf_writer *w, void **out_buf, size_t *out_size);

#endif
