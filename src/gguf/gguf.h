/* GGUF v2/v3 reader (memory-mapped) — the `gguf` layer.
 *
 * Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
 *   magic "GGUF", u32 version (2 or 3), u64 n_tensors, u64 n_kv,
 *   n_kv × (string key, u32 type, value), n_tensors × (string name,
 *   u32 n_dims, n_dims × u64 ne, u32 ggml type, u64 offset),
 *   padding to general.alignment (default 32), tensor data.
 *   Strings are u64 length + bytes (not NUL-terminated). Little-endian only.
 *
 * gguf_open validates everything against the file size before returning,
 * with (at least) the rules of ggml's reader, gguf.cpp, so that a file
 * llama.cpp refuses is refused here: version 2 or 3 (big-endian files show
 * up as an absurd version and are refused with a message saying so); keys
 * non-empty, unique and without NUL bytes; known value types, no nested
 * arrays; strings and arrays at most 2^30 bytes / elements and inside the
 * file; general.alignment a u32 nonzero power of two; tensor names shorter
 * than 64 bytes (a name ends at its first NUL, as in ggml) and unique; at
 * most 4 dimensions (0 = a scalar), each >= 0, element count below
 * INT64_MAX; a ggml type id, ne[0] a multiple of its block size; the data of
 * tensor i at offset (sum of the sizes of tensors 0..i-1, each padded to the
 * alignment), i.e. in info order without gaps, and inside the file.  After a
 * successful open no accessor can read out of bounds.  Errors name the file,
 * the key or tensor, and the problem.
 *
 * Tensor element types are ggml type ids (enum tutti_type in quant/quant.h);
 * the reader only needs their block sizes to compute byte sizes and refuses
 * a type id it does not know (naming the tensor). */
#ifndef TUTTI_GGUF_H
#define TUTTI_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

/* A string inside the mapping: `len` bytes at `data`, not NUL-terminated. */
typedef struct gguf_str {
    const char *data;
    uint64_t len;
} gguf_str;

#define GGUF_MAX_DIMS 4

typedef struct gguf_tensor_info {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] = elements per row (contiguous), unused dims = 1 */
    int type;                  /* ggml type id (enum tutti_type) */
    uint64_t offset;           /* relative to the start of the data section */
    uint64_t size;             /* bytes */
    const void *data;          /* pointer into the mapping */
} gguf_tensor_info;

typedef struct gguf_file gguf_file;

/* Opens and validates path (mmap, read-only). NULL on error (tutti_last_error).
 * The first part of a split model (PREFIX-00001-of-0000N.gguf, llama.cpp's
 * gguf-split: src/gguf/split.c) opens all N parts as one file: the first
 * part's metadata, every part's tensors; opening another part is an error
 * naming the first. */
gguf_file *gguf_open(const char *path);
/* Same, over a caller-owned buffer (used by the fuzzer and tests); the buffer
 * must outlive the handle.  name is used in error messages. */
gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name);
void gguf_close(gguf_file *f);
/* Re-reads into 2 MiB folios the resident pages of f's mappings (a split
 * model's parts too) that the page cache holds in small folios, so that
 * they can be mapped by 2 MiB entries (tutti_mem_reread_small,
 * src/util/mem.h): for a loader that has faulted in what it will read.
 * Returns the bytes re-read (0 for a buffer, or when the path no longer
 * names the mapped file). */
size_t gguf_reread_small(const gguf_file *f);

const char *gguf_path(const gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);

/* ---- metadata ---- */
int64_t gguf_n_kv(const gguf_file *f);
/* Index of key, or -1. */
int64_t gguf_find_key(const gguf_file *f, const char *key);
gguf_str gguf_kv_key(const gguf_file *f, int64_t i);
gguf_type gguf_kv_type(const gguf_file *f, int64_t i);
/* For arrays: element type and count (else GGUF_TYPE_COUNT / 0). */
gguf_type gguf_kv_arr_type(const gguf_file *f, int64_t i);
uint64_t gguf_kv_arr_n(const gguf_file *f, int64_t i);
/* Raw pointer to a scalar value or to the first element of a non-string
 * array (unaligned: copy with memcpy). */
const void *gguf_kv_data(const gguf_file *f, int64_t i);
/* Element j of a string array, or a string value (j ignored). */
gguf_str gguf_kv_str(const gguf_file *f, int64_t i, uint64_t j);

/* Typed lookups by key.  Return true and set *out when the key exists and
 * its value converts losslessly (any integer type to the requested integer
 * type if in range; f32/f64 to float); false if absent.  A key present with
 * an incompatible type also returns false and records an error naming it. */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* ---- tensors ---- */
int64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor_info *gguf_tensor(const gguf_file *f, int64_t i);
/* By name, or NULL. */
const gguf_tensor_info *gguf_find_tensor(const gguf_file *f, const char *name);

/* Helpers */
bool gguf_str_eq(gguf_str s, const char *c);
const char *gguf_type_name(gguf_type t);
/* Bytes of one value of a fixed-size type; 0 for STRING and ARRAY. */
size_t gguf_type_size(gguf_type t);

#endif
