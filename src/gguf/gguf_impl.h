/* Internal to the gguf layer: what split.c needs of gguf.c. */
#ifndef TUTTI_GGUF_IMPL_H
#define TUTTI_GGUF_IMPL_H

#include "gguf/gguf.h"

/* gguf_open of one file, without following a split (gguf.c). */
gguf_file *gguf_open_one(const char *path);
/* Appends the tensors of parts[0..n_parts) (each an opened part of f's split
 * model) to f's, in order; f then owns the parts and their array (closed by
 * gguf_close).  A tensor name in two parts is an error (f unchanged, the
 * parts still the caller's). */
int gguf_adopt_parts(gguf_file *f, gguf_file **parts, int n_parts);

#endif
