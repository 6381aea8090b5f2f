/* tutti — run several local language models at once and fuse them.
 *
 * This is the one public header: every front end (CLI, HTTP server, tools)
 * uses only what is declared here.  Handles are opaque.
 *
 * Conventions
 *   - Errors: functions return TUTTI_OK (0) or a negative status, or NULL;
 *     tutti_last_error() then gives a message a user can act on.  The message
 *     is per thread.
 *   - Ownership: whoever calls *_new / *_load owns the handle and frees it
 *     with the matching *_free.  Pointers returned by getters stay valid as
 *     long as the handle they came from.
 *   - Units: token ids are int32_t; logits are float32 natural-log-scale
 *     unnormalised scores, rows of n_vocab; text is raw bytes (UTF-8 expected
 *     but never assumed valid).
 *   - Thread safety: a tutti_model (weights + vocabulary) is read-only after
 *     loading and may be shared by several sessions on several threads; a
 *     tutti_session or tutti_sampler must be used by one thread at a time.
 */
#ifndef TUTTI_H
#define TUTTI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TUTTI_OK 0
#define TUTTI_ERR (-1)

/* Message describing the last error on this thread ("no error recorded" if
 * none).  Never NULL; valid until the next failing call on this thread. */
const char *tutti_last_error(void);

/* ------------------------------------------------------------------------ */
/* Vocabulary and tokenizer (SentencePiece "spm" and byte-level "bpe"),
 * read from GGUF metadata (tokenizer.ggml.*). */

typedef struct tutti_vocab tutti_vocab;

/* Loads only the tokenizer of a GGUF file (works on vocab-only files).
 * Returns NULL on error (unknown tokenizer.ggml.model or .pre, malformed
 * metadata).  Free with tutti_vocab_free. */
tutti_vocab *tutti_vocab_load(const char *gguf_path);
void tutti_vocab_free(tutti_vocab *vocab);

int32_t tutti_vocab_n_tokens(const tutti_vocab *vocab);
int32_t tutti_vocab_bos(const tutti_vocab *vocab); /* -1 if none */
int32_t tutti_vocab_eos(const tutti_vocab *vocab); /* -1 if none */
/* true when the model's metadata asks for BOS at the start of a prompt. */
bool tutti_vocab_add_bos(const tutti_vocab *vocab);
/* true for tokens that end generation (EOS, EOT, <|im_end|>, ...). */
bool tutti_vocab_is_eog(const tutti_vocab *vocab, int32_t id);
/* true for control tokens (never produced from user text unless
 * parse_special is set). */
bool tutti_vocab_is_control(const tutti_vocab *vocab, int32_t id);
/* Short name of the tokenizer: "spm" or "bpe", and the pre-tokenizer name
 * (tokenizer.ggml.pre, "default" when absent). */
const char *tutti_vocab_type(const tutti_vocab *vocab);
const char *tutti_vocab_pre(const tutti_vocab *vocab);

/* Tokenizes text[0..len).  add_bos prepends BOS (if the vocab has one);
 * parse_special lets control-token text such as "<|eot_id|>" become that
 * token (otherwise it is tokenized as plain text).  Writes at most n_max ids.
 * Returns the number of ids, or, if n_max is too small, minus the number
 * needed (call again with a bigger buffer).  Invalid UTF-8 is tokenized
 * byte by byte (byte tokens / byte fallback), never rejected. */
int32_t tutti_tokenize(const tutti_vocab *vocab, const char *text, size_t len, bool add_bos,
                       bool parse_special, int32_t *ids, int32_t n_max);

/* The exact bytes token `id` stands for in running text (SPM "▁" becomes a
 * space, byte tokens <0xNN> become that byte, byte-level BPE symbols are
 * mapped back to bytes; control tokens give their text only if
 * render_special).  Returns the byte count, minus the size needed if buf is
 * too small, or TUTTI_ERR for an id out of range.  Decoding a token sequence
 * is the concatenation of its pieces, except that SPM drops the one leading
 * space the tokenizer added: use tutti_detokenize for whole sequences. */
int32_t tutti_token_to_piece(const tutti_vocab *vocab, int32_t id, bool render_special, char *buf,
                             int32_t len);

/* Bytes of a whole id sequence (no BOS/EOS text, leading SPM space removed
 * when the tokenizer adds one).  Same return convention as above. */
int32_t tutti_detokenize(const tutti_vocab *vocab, const int32_t *ids, int32_t n_ids, char *buf,
                         int32_t len);

/* ------------------------------------------------------------------------ */
/* Models */

typedef struct tutti_model tutti_model;

typedef struct tutti_model_params {
    bool verbose; /* progress / summary to stderr while loading */
} tutti_model_params;

tutti_model_params tutti_model_default_params(void);

/* Memory-maps a GGUF file and prepares the weights (kept mapped, not
 * copied).  Returns NULL on error: unreadable or malformed file, unsupported
 * architecture or tensor type (the message names the tensor and the type). */
tutti_model *tutti_model_load(const char *path, const tutti_model_params *params);
void tutti_model_free(tutti_model *model);

/* The model's vocabulary; owned by the model. */
const tutti_vocab *tutti_model_vocab(const tutti_model *model);
int32_t tutti_model_n_vocab(const tutti_model *model);
int32_t tutti_model_n_ctx_train(const tutti_model *model);
const char *tutti_model_arch(const tutti_model *model);
/* Writes a human-readable description (architecture, hyper-parameters,
 * tensor types and sizes, tokenizer) to out. */
void tutti_model_describe(const tutti_model *model, FILE *out);

/* ------------------------------------------------------------------------ */
/* Sessions: one timeline of tokens with its own KV cache. */

typedef struct tutti_session tutti_session;

typedef struct tutti_session_params {
    int32_t n_ctx;     /* context length in tokens; 0 = min(n_ctx_train, 4096) */
    int32_t n_threads; /* worker threads; 0 = number of online CPUs */
} tutti_session_params;

tutti_session_params tutti_session_default_params(void);

tutti_session *tutti_session_new(const tutti_model *model, const tutti_session_params *params);
void tutti_session_free(tutti_session *session);

/* Runs the forward pass on ids[0..n) at positions n_past..n_past+n-1 in one
 * batch, appending them to the KV cache.  If logits is non-NULL it receives
 * all n rows, float32 [n][n_vocab]; the last row is always available from
 * tutti_session_logits.  Fails (nothing appended) if n_past + n would exceed
 * n_ctx or an id is out of range. */
int tutti_session_eval(tutti_session *session, const int32_t *ids, int32_t n, float *logits);

/* Logits of the last evaluated position, [n_vocab]; owned by the session,
 * valid until the next eval. NULL before the first eval. */
const float *tutti_session_logits(const tutti_session *session);

int32_t tutti_session_n_past(const tutti_session *session);
int32_t tutti_session_n_ctx(const tutti_session *session);

/* Forgets every position >= n_past (0 clears the cache).  The logits of the
 * last kept position are not recomputed. */
int tutti_session_rewind(tutti_session *session, int32_t n_past);

/* ------------------------------------------------------------------------ */
/* Sampling on a distribution given as logits (any unnormalised log-scale
 * scores, e.g. a fused distribution). */

typedef struct tutti_sampler tutti_sampler;

typedef struct tutti_sampler_params {
    float temp;            /* <= 0: greedy (argmax, lowest id wins ties) */
    int32_t top_k;         /* <= 0: off */
    float top_p;           /* >= 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off; CTRL-style: logit/penalty if > 0 else logit*penalty */
    int32_t repeat_last_n; /* tokens the penalty looks back over */
    uint64_t seed;         /* same seed, same draws */
} tutti_sampler_params;

tutti_sampler_params tutti_sampler_default_params(void);
tutti_sampler *tutti_sampler_new(const tutti_sampler_params *params);
void tutti_sampler_free(tutti_sampler *sampler);
/* Picks an index in [0, n) from logits (not modified). Returns -1 on error. */
int32_t tutti_sampler_sample(tutti_sampler *sampler, const float *logits, int32_t n);
/* Records a chosen id for the repetition penalty. */
void tutti_sampler_accept(tutti_sampler *sampler, int32_t id);

#ifdef __cplusplus
}
#endif
#endif
