/* Tokenizer layer: the vocabulary of a GGUF model (tokenizer.ggml.*) and
 * the two tokenizers llama.cpp implements for it, reproduced exactly:
 *
 *   spm  (tokenizer.ggml.model = "llama"): SentencePiece-style BPE over the
 *        scores of the vocabulary (llama.cpp's llm_tokenizer_spm): spaces
 *        escaped as U+2581, optional space prefix, greedy merge of the
 *        best-scoring adjacent pair, byte fallback <0xNN>.
 *   bpe  (tokenizer.ggml.model = "gpt2"): GPT-2 byte-level BPE: a regex
 *        pre-tokenizer chosen by tokenizer.ggml.pre (compiled with PCRE2),
 *        bytes mapped to printable code points (bytes_to_unicode), merges
 *        applied by rank (tokenizer.ggml.merges).
 *
 * Before either runs, text is partitioned on the text of special tokens
 * (llama.cpp's tokenizer_st_partition): user-defined tokens always, control
 * and unknown tokens only with parse_special.
 *
 * The public part of the API is in include/tutti.h; this header adds what
 * other layers need: building a vocabulary from an already-open GGUF file
 * and read access to every token (text, score, type, the bytes it stands
 * for), e.g. for the fusion layer's byte tries.
 *
 * A tutti_vocab is immutable after loading and may be used from several
 * threads at once. */
#ifndef TUTTI_TOKENIZER_H
#define TUTTI_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "tutti.h"

/* Token types as stored in tokenizer.ggml.token_type (GGUF / llama.cpp's
 * llama_token_type). */
enum tutti_token_type {
    TUTTI_TOKEN_TYPE_UNDEFINED = 0,
    TUTTI_TOKEN_TYPE_NORMAL = 1,
    TUTTI_TOKEN_TYPE_UNKNOWN = 2,
    TUTTI_TOKEN_TYPE_CONTROL = 3,
    TUTTI_TOKEN_TYPE_USER_DEFINED = 4,
    TUTTI_TOKEN_TYPE_UNUSED = 5,
    TUTTI_TOKEN_TYPE_BYTE = 6,
};

/* Token attributes (bit set, llama.cpp's llama_token_attr): derived from the
 * type, then adjusted at load time the way llama.cpp does (end-of-generation
 * texts such as "<|im_end|>" forced to CONTROL, "unused" control tokens,
 * RSTRIP on the special tokens of Phi-3 models, ...). */
enum tutti_token_attr {
    TUTTI_TOKEN_ATTR_UNDEFINED = 0,
    TUTTI_TOKEN_ATTR_UNKNOWN = 1 << 0,
    TUTTI_TOKEN_ATTR_UNUSED = 1 << 1,
    TUTTI_TOKEN_ATTR_NORMAL = 1 << 2,
    TUTTI_TOKEN_ATTR_CONTROL = 1 << 3,
    TUTTI_TOKEN_ATTR_USER_DEFINED = 1 << 4,
    TUTTI_TOKEN_ATTR_BYTE = 1 << 5,
    TUTTI_TOKEN_ATTR_LSTRIP = 1 << 7, /* whitespace before it is dropped when matched in text */
    TUTTI_TOKEN_ATTR_RSTRIP = 1 << 8, /* whitespace after it is dropped when matched in text */
};

/* Builds the vocabulary from the tokenizer.ggml.* metadata of an open GGUF
 * file.  Everything needed is copied: f may be closed afterwards.  Returns
 * NULL on error with a message naming the file and the field (unknown
 * tokenizer model or pre-tokenizer, missing/mistyped arrays, lengths that do
 * not match, special token ids out of range, duplicate token texts).  Free
 * with tutti_vocab_free. */
tutti_vocab *tutti_vocab_from_gguf(const gguf_file *f);

/* Per-token read access.  id must be in [0, n_tokens); out-of-range ids give
 * an empty string / 0 / TUTTI_TOKEN_TYPE_UNDEFINED.  Returned pointers live as
 * long as the vocab.  Texts are raw bytes, not NUL-terminated in general
 * (*len is the length); they are NUL-terminated in practice but may contain
 * NUL bytes. */
const char *tutti_vocab_token_text(const tutti_vocab *vocab, int32_t id, size_t *len);
enum tutti_token_type tutti_vocab_token_type(const tutti_vocab *vocab, int32_t id);
uint32_t tutti_vocab_token_attr(const tutti_vocab *vocab, int32_t id);
/* The exact bytes token id contributes to running text, as
 * tutti_token_to_piece(..., render_special = false) gives them: empty for
 * control and unknown tokens (and unused/undefined ones). */
const char *tutti_vocab_token_piece(const tutti_vocab *vocab, int32_t id, size_t *len);

/* What an upper layer derives from a vocabulary and keeps with it (the
 * grammar layer's token trie and class tables): made by make(vocab) at the
 * first call (under a lock: a loaded vocabulary is shared between threads)
 * and freed by free_fn(attachment) with the vocabulary.  One slot per
 * vocabulary, the grammar layer's; NULL when make failed (the next call
 * tries again). */
void *tok_vocab_attachment(const tutti_vocab *vocab, void *(*make)(const tutti_vocab *), void (*free_fn)(void *));

/* The id whose text is exactly text[0..len), or -1. */
int32_t tutti_vocab_find(const tutti_vocab *vocab, const char *text, size_t len);

/* The token of "\n" (SPM: <0x0A>; BPE: first token of "\n"), or -1. */
int32_t tutti_vocab_nl(const tutti_vocab *vocab);
/* SPM: a space is put in front of the first text fragment (and of every text
 * fragment that follows a special token). */
bool tutti_vocab_add_space_prefix(const tutti_vocab *vocab);

/* tutti_tokenize returns this (and sets the error message) on an internal
 * failure (out of memory, regex engine error) or bad arguments; it cannot be
 * confused with "minus the number of ids needed". */
#define TUTTI_TOKENIZE_FAILED TUTTI_ERR_SIZE

#endif
