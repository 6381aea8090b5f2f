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
/* A request these inputs cannot be given (a combination of options the
 * function cannot do, e.g. bits per byte of the contrastive rule): the
 * caller's usage, where TUTTI_ERR is a failure at run time.  The CLI exits
 * 2 for it. */
#define TUTTI_ERR_UNSUPPORTED (-2)
/* Error return of the size-returning tokenizer calls (tutti_tokenize,
 * tutti_token_to_piece, tutti_detokenize), where every other negative value
 * -n means "n needed": INT32_MIN can never be a needed size. */
#define TUTTI_ERR_SIZE INT32_MIN

/* Message describing the last error on this thread ("no error recorded" if
 * none).  Never NULL; valid until the next failing call on this thread. */
const char *tutti_last_error(void);
/* What the last error on this thread was: TUTTI_ERR_UNSUPPORTED when the
 * caller's arguments caused it (a value out of range, a combination the
 * function cannot do, an option the given models do not allow: the fix is
 * a different argument; the CLI exits 2), TUTTI_ERR otherwise (a file, the
 * data, the system).  For the calls that report failure by NULL. */
int tutti_last_error_kind(void);
/* text with every URL's credentials hidden: the user information
 * ("user:password@" before the host) becomes "***@", and the values of query parameters whose names
 * hold key, token, secret, pass, pwd, auth, sig or cred -> "***".  Writes
 * at most cap bytes (NUL included) into out and returns out.  Every library
 * message (tutti_last_error) is already redacted this way. */
char *tutti_redact_urls(const char *text, char *out, size_t cap);
/* Records this thread's last error (printf-style message) for a function
 * the library calls back, such as a tutti_write_fn, that reports a failure
 * through tutti_last_error.  Returns TUTTI_ERR. */
int tutti_set_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ------------------------------------------------------------------------ */
/* Files written safely (every command that writes one: merge, fit -o,
 * logits -o, eval --plot; details in src/util/file.h): the bytes go to a
 * temporary file in the destination's folder, fsync'd and renamed onto it
 * once complete, so no reader sees a partial file and a failure destroys
 * nothing (a symlink at the destination is followed; an existing file keeps
 * its permission bits). */

/* Writes the file's whole content to fp; 0, or TUTTI_ERR with
 * tutti_last_error() set (the write is then abandoned). */
typedef int (*tutti_write_fn)(FILE *fp, void *ctx);
/* Creates or replaces path with what produce(fp, ctx) writes.  0, or
 * TUTTI_ERR with tutti_last_error() naming path and the cause. */
int tutti_write_atomic(const char *path, tutti_write_fn produce, void *ctx);
/* true when a and b name the same existing file (device and inode after
 * following symbolic links); false when either does not exist. */
bool tutti_same_file(const char *a, const char *b);
/* Whether tutti_write_atomic(path) can be expected to succeed, checked
 * before long work: path is not a directory and its folder exists and is
 * writable.  0, or TUTTI_ERR with the reason. */
int tutti_check_writable(const char *path);

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
int32_t tutti_vocab_eot(const tutti_vocab *vocab); /* end of turn, -1 if none */
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
 * needed (call again with a bigger buffer), or TUTTI_ERR_SIZE on error.
 * Invalid UTF-8 is never rejected: spm tokenizes it byte by byte (byte
 * fallback); bpe first turns each invalid byte into U+FFFD, as llama.cpp does. */
int32_t tutti_tokenize(const tutti_vocab *vocab, const char *text, size_t len, bool add_bos, bool parse_special,
                       int32_t *ids, int32_t n_max);

/* As tutti_tokenize with parse_special on, except that a control or unknown
 * token is read from its text only where that text lies entirely in bytes
 * with is_data[i] == 0 (is_data: [len] bytes, borrowed; NULL = no data
 * bytes, i.e. tutti_tokenize with parse_special).  Elsewhere the text is
 * tokenized as plain text, exactly as parse_special off would, and
 * user-defined tokens are found everywhere, as always.  The text is still
 * partitioned and tokenized as one piece (llama.cpp's order), so where no
 * control-token text lies in data bytes the ids equal tutti_tokenize's with
 * parse_special.  Made for tutti_chat_render_marked's output: template
 * scaffolding gives control tokens, message text never does. */
int32_t tutti_tokenize_marked(const tutti_vocab *vocab, const char *text, size_t len, bool add_bos,
                              const uint8_t *is_data, int32_t *ids, int32_t n_max);

/* The exact bytes token `id` stands for in running text (SPM "▁" becomes a
 * space, byte tokens <0xNN> become that byte, byte-level BPE symbols are
 * mapped back to bytes; control tokens give their text only if
 * render_special).  Returns the byte count, minus the size needed if buf is
 * too small, or TUTTI_ERR_SIZE for an id out of range.  Decoding a token
 * sequence is the concatenation of its pieces, except that SPM drops the one
 * leading space the tokenizer added: use tutti_detokenize for whole
 * sequences. */
int32_t tutti_token_to_piece(const tutti_vocab *vocab, int32_t id, bool render_special, char *buf, int32_t len);

/* Bytes of a whole id sequence (no BOS/EOS text, leading SPM space removed
 * when the tokenizer adds one).  Same return convention as above. */
int32_t tutti_detokenize(const tutti_vocab *vocab, const int32_t *ids, int32_t n_ids, char *buf, int32_t len);

/* ------------------------------------------------------------------------ */
/* Models */

typedef struct tutti_model tutti_model;

typedef struct tutti_model_params {
    bool verbose;  /* progress / summary to stderr while loading */
    bool use_mmap; /* true: the weights stay in the file mapping (instant load, pages read on
                      first use, no repacking: slower generation); default false */
} tutti_model_params;

tutti_model_params tutti_model_default_params(void);

/* Memory-maps a GGUF file and prepares the weights (unless params->use_mmap):
 * the file is read into the page cache (as llama.cpp's MAP_POPULATE does);
 * where Linux maps it with 2 MiB pages (a page cache of 2 MiB folios, which
 * this mapping's readahead makes) the weights are read there, with no copy;
 * else they are copied, with all cores, into huge-page memory owned by the
 * model and the file's pages released, so resident memory stays about the
 * file's size.  Weights of a type the CPU's kernels have an interleaved
 * layout for are repacked into that memory either way.  If the memory
 * cannot be had, the weights stay mapped.  Returns NULL on error: unreadable or
 * malformed file, unsupported architecture or tensor type (the message
 * names the tensor and the type). */
tutti_model *tutti_model_load(const char *path, const tutti_model_params *params);
void tutti_model_free(tutti_model *model);

/* The model's vocabulary; owned by the model. */
const tutti_vocab *tutti_model_vocab(const tutti_model *model);
int32_t tutti_model_n_vocab(const tutti_model *model);
int32_t tutti_model_n_ctx_train(const tutti_model *model);
const char *tutti_model_arch(const tutti_model *model);
/* A mixture of experts' routed experts per layer (expert_count) and how
 * many of them each token goes through (expert_used_count); 0 and 0 for a
 * dense model. */
int32_t tutti_model_n_expert(const tutti_model *model);
int32_t tutti_model_n_expert_used(const tutti_model *model);
/* String metadata of the model's GGUF file (e.g. "tokenizer.chat_template",
 * "general.name") as a malloc'd NUL-terminated copy the caller frees; NULL
 * when the key is absent or not a string (not an error).  A value holding a
 * NUL byte is cut there. */
char *tutti_model_meta_str(const tutti_model *model, const char *key);
/* The same from a GGUF file on disk, without loading the model (only its
 * header is read and validated); NULL when the key is absent, or on error
 * (tutti_last_error: the file cannot be opened or is not valid GGUF). */
char *tutti_file_meta_str(const char *path, const char *key);
/* Writes a human-readable description (architecture, hyper-parameters,
 * tensor types and sizes, tokenizer) to out. */
void tutti_model_describe(const tutti_model *model, FILE *out);

/* ------------------------------------------------------------------------ */
/* GGUF files: metadata and tensor directory without loading a model
 * (tutti info).  Format: github.com/ggml-org/ggml docs/gguf.md, versions 2
 * and 3; a file is validated as tutti_model_load does before any call
 * returns it. */

typedef struct tutti_gguf tutti_gguf;

typedef enum tutti_gguf_kind {
    TUTTI_GGUF_NUMBER, /* an integer or floating-point type */
    TUTTI_GGUF_BOOL,
    TUTTI_GGUF_STRING,
    TUTTI_GGUF_ARRAY,
} tutti_gguf_kind;

/* One metadata value; pointers are into the file, valid until it is closed. */
typedef struct tutti_gguf_value {
    tutti_gguf_kind kind;
    const char *type;      /* GGUF's type name: "u8" "i8" "u16" "i16" "u32" "i32" "u64" "i64" "f32" "f64"
                              "bool" "str" "arr" */
    double number;         /* NUMBER: the value (a 64-bit integer rounded to the nearest double; a float
                              may be NaN or infinite); BOOL: 0 or 1 */
    bool is_float;         /* NUMBER: f32 or f64 */
    const char *str;       /* STRING: its bytes, not NUL-terminated (they may hold NUL) */
    size_t len;            /* STRING: their count */
    const char *elem_type; /* ARRAY: the GGUF type name of its elements (never "arr") */
    uint64_t n;            /* ARRAY: its element count */
} tutti_gguf_value;

/* Opens and validates path's header (memory-mapped).  NULL + error naming
 * the file and what is wrong with it. */
tutti_gguf *tutti_gguf_open(const char *path);
void tutti_gguf_close(tutti_gguf *f);
uint32_t tutti_gguf_version(const tutti_gguf *f);
int64_t tutti_gguf_n_tensors(const tutti_gguf *f);
/* Sum over the tensors of their element counts (the parameter count; 0 for
 * a vocabulary-only file). */
double tutti_gguf_n_params(const tutti_gguf *f);
int64_t tutti_gguf_n_kv(const tutti_gguf *f);
/* Key i's bytes (not NUL-terminated), length in *len; NULL when i is out of
 * [0, n_kv). */
const char *tutti_gguf_key(const tutti_gguf *f, int64_t i, size_t *len);
/* Index of key (NUL-terminated), or -1 when the file has none. */
int64_t tutti_gguf_find(const tutti_gguf *f, const char *key);
/* Entry i's value (elem < 0), or element elem of the array entry i.  0, or
 * TUTTI_ERR + error when i or elem is out of range. */
int tutti_gguf_get(const tutti_gguf *f, int64_t i, int64_t elem, tutti_gguf_value *out);

/* ------------------------------------------------------------------------ */
/* The machine (tutti bench) */

typedef struct tutti_system_info {
    const char *kernels; /* the matrix-vector kernels in use: "scalar", "avx2", "avx512" or "neon" (the best
                            this CPU runs, or the environment's TUTTI_KERNELS) */
    int32_t n_cpus;      /* online CPUs, the default thread count */
    bool mpi;            /* built with MPI: ensembles over ranks (mpirun -np K tutti ...) */
} tutti_system_info;

/* Fills *out.  0, or TUTTI_ERR when TUTTI_KERNELS names a path that is
 * unknown or that this CPU cannot run (the message lists the ones it can). */
int tutti_system_info_get(tutti_system_info *out);

/* ------------------------------------------------------------------------ */
/* Sessions: one timeline of tokens with its own KV cache. */

typedef struct tutti_session tutti_session;

typedef struct tutti_session_params {
    int32_t n_ctx;     /* context length in tokens; 0 = min(n_ctx_train, 4096) */
    int32_t n_threads; /* worker threads; 0 = number of online CPUs */
    /* llama.cpp's context shift (its --context-shift, as llama-cli and
     * llama-server do it): false (the default) = an eval that would pass
     * n_ctx fails.  true = whenever a token is about to be evaluated with
     * n_past = n_ctx - 1, the first n_keep positions stay, the next
     * n_discard = (n_past - n_keep) / 2 are dropped and the rest move down
     * (tutti_session_shift), so evals never fail for a full context.  A
     * batch is split at those points, so the cache after any sequence of
     * evals is a function of the timeline's tokens alone, as if they had
     * come one at a time.  Not for a model split over MPI ranks. */
    bool ctx_shift;
    int32_t n_keep; /* with ctx_shift: positions kept at the start (1 = BOS; at most n_ctx - 4, as
                       llama-server caps it) */
} tutti_session_params;

tutti_session_params tutti_session_default_params(void);

tutti_session *tutti_session_new(const tutti_model *model, const tutti_session_params *params);
void tutti_session_free(tutti_session *session);

/* Runs the forward pass on ids[0..n) at positions n_past..n_past+n-1 in one
 * batch, appending them to the KV cache.  If logits is non-NULL it receives
 * all n rows, float32 [n][n_vocab]; the last row is always available from
 * tutti_session_logits.  Fails (nothing appended) if an id is out of range
 * or, without ctx_shift, if n_past + n would exceed n_ctx (with it, the
 * context shifts where needed: see tutti_session_params). */
int tutti_session_eval(tutti_session *session, const int32_t *ids, int32_t n, float *logits);

/* Logits of the last evaluated position, [n_vocab]; owned by the session,
 * valid until the next eval. NULL before the first eval. */
const float *tutti_session_logits(const tutti_session *session);

int32_t tutti_session_n_past(const tutti_session *session);
int32_t tutti_session_n_ctx(const tutti_session *session);

/* Embeddings: runs ids[0..n) at positions n_past.. as tutti_session_eval
 * does (appending them to the KV cache) and writes each position's hidden
 * state after the model's output norm, the vector the output head reads,
 * to rows, float32 [n][tutti_model_n_embd] (llama.cpp's embeddings of a
 * decoder, before pooling).  No logits are computed: tutti_session_logits
 * is NULL afterwards until the next eval.  Same failures as
 * tutti_session_eval. */
int tutti_session_embed(tutti_session *session, const int32_t *ids, int32_t n, float *rows);
int32_t tutti_model_n_embd(const tutti_model *model);
/* The GGUF's {arch}.pooling_type (llama.cpp's numbering below), or -1
 * when the file does not say. */
enum { TUTTI_POOL_NONE = 0, TUTTI_POOL_MEAN = 1, TUTTI_POOL_CLS = 2, TUTTI_POOL_LAST = 3, TUTTI_POOL_RANK = 4 };
int tutti_model_pooling(const tutti_model *model);

/* Forgets every position >= n_past (0 clears the cache).  The logits of the
 * last kept position are not recomputed. */
int tutti_session_rewind(tutti_session *session, int32_t n_past);

/* Context shift (llama.cpp's llama_memory_seq_rm(n_keep, n_keep + n_discard)
 * followed by llama_memory_seq_add(n_keep + n_discard, n_past, -n_discard),
 * with its K-shift): drops positions [n_keep, n_keep + n_discard) and moves
 * positions [n_keep + n_discard, n_past) down by n_discard, the keys rotated
 * back by n_discard positions (RoPE rotations compose: a key computed at
 * position p then turned by -n_discard is the key at p - n_discard, up to
 * float rounding and the cache's f16); values move as they are.  The rows
 * that stay keep what they attended to when they were computed.  n_past
 * drops by n_discard; the logits stay those of the last eval.  0, or
 * TUTTI_ERR for a range outside [0, n_past] or a split model. */
int tutti_session_shift(tutti_session *session, int32_t n_keep, int32_t n_discard);
/* Tokens of the session's timeline: n_past plus every token a context shift
 * dropped (0 after tutti_session_rewind to 0). */
int32_t tutti_session_n_tokens(const tutti_session *session);
/* The shortest timeline length tutti_session_rewind_tokens can go back to
 * without starting over: the length at the last context shift (0 if none). */
int32_t tutti_session_rewind_floor(const tutti_session *session);
/* Back to the state after the first n_tokens tokens of the timeline
 * (n_tokens <= tutti_session_n_tokens): kept when n_tokens >=
 * tutti_session_rewind_floor (the cache then holds exactly that state);
 * otherwise the session is emptied, since a shift has dropped rows that
 * state needs, and the caller evaluates the tokens again from the start.
 * Returns the tokens kept (n_tokens or 0), or TUTTI_ERR. */
int32_t tutti_session_rewind_tokens(tutti_session *session, int32_t n_tokens);

/* ------------------------------------------------------------------------ */
/* Continuous batching: one forward pass per model and step for every
 * session's pending tokens (a server's slots, each with its own sessions).
 *
 * A batch owns one thread pool and an executor thread.  Sessions made with
 * tutti_session_new_batched (of any models; their KV caches stay their own)
 * hand their tutti_session_eval and tutti_session_eval_multi calls to it:
 * the calling thread waits while the executor runs steps.  A step is one
 * forward pass per model over the pending tokens of all its sessions, each
 * at its own positions over its own cache (tutti_forward_segments, as byte
 * alignment's hypotheses share a pass): short requests (a generated token,
 * a hypothesis's few tokens) go in whole, the rest of the n_ubatch tokens
 * goes to long ones (prompts) in arrival order, a chunk at a time, so a
 * long prompt holds the others' next token back by at most one chunk.
 * Threads that post requests join the batch (tutti_batch_join) while they
 * run a generation: a step then waits until every joined thread has posted
 * (or waits elsewhere), at most as long as the last step took (no less
 * than 0.2 ms, no more than max_wait_ms), so the slots' tokens share one
 * pass instead of taking turns.  The logits are those of an unbatched
 * session bit for bit for F32, F16, BF16 and Q8_0 weights, whose kernels
 * give a token's row whatever the other rows of the call; with the other
 * types a token's row also depends on whether its pass holds 8 or more
 * tokens (the K-quant panels, the 4 x 8 tiles), in the last bits (README
 * "Continuous batching").
 * Thread safety: a batch is shared by any number of threads; each batched
 * session is used by one thread at a time, as any session. */

typedef struct tutti_batch tutti_batch;

typedef struct tutti_batch_params {
    int32_t n_threads;  /* threads of the passes; 0 = online CPUs */
    int32_t n_ubatch;   /* tokens per forward pass (llama.cpp's n_ubatch); 0 = 512 */
    double max_wait_ms; /* longest a step waits for joined threads; 0 = 50 */
} tutti_batch_params;

tutti_batch_params tutti_batch_default_params(void);
/* NULL + error (bad parameters, no thread). */
tutti_batch *tutti_batch_new(const tutti_batch_params *params);
/* After every session made on it is freed. */
void tutti_batch_free(tutti_batch *batch);
/* A session whose passes run in batch (params->n_threads is ignored).
 * NULL + error. */
tutti_session *tutti_session_new_batched(const tutti_model *model, const tutti_session_params *params,
                                         tutti_batch *batch);
/* The calling thread will post passes (join) or is done (leave); calls
 * nest.  Only joined threads are waited for. */
void tutti_batch_join(tutti_batch *batch);
void tutti_batch_leave(tutti_batch *batch);

typedef struct tutti_batch_stats {
    int64_t n_steps;    /* steps run */
    int64_t n_passes;   /* forward passes (a step runs one per model with work) */
    int64_t n_tokens;   /* tokens through them */
    int64_t n_segments; /* sessions' pieces through them (a generated token is one) */
    int64_t n_requests; /* eval calls answered */
    int32_t max_tokens; /* the largest pass */
    int32_t n_joined;   /* threads joined now */
    int32_t n_working;  /* of them, those not waiting on a request now (a step waits for them) */
} tutti_batch_stats;
void tutti_batch_get_stats(tutti_batch *batch, tutti_batch_stats *out);

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
/* Picks an index in [0, n) from logits (not modified; -inf = masked out).
 * Returns -1 with an error for NaN or +inf logits and when nothing is left
 * to draw (every logit -inf), never an arbitrary id.  Cost: no sort of the
 * vocabulary on any path (top-k: a heap; top-p: a binned selection; every
 * filter off: an inverse CDF over the unsorted probabilities). */
int32_t tutti_sampler_sample(tutti_sampler *sampler, const float *logits, int32_t n);
/* Records a chosen id for the repetition penalty. */
void tutti_sampler_accept(tutti_sampler *sampler, int32_t id);
/* The distribution tutti_sampler_sample draws from for these logits (the
 * penalty, the filters and the temperature applied), written to
 * probs[n]: sums to 1, 0 outside the kept candidates; greedy (temp <= 0) a
 * one-hot row at the argmax.  The sampler's state is not changed.  0 or
 * TUTTI_ERR (as tutti_sampler_sample). */
int tutti_sampler_probs(tutti_sampler *sampler, const float *logits, int32_t n, float *probs);
/* Draws an index from probs[n] (>= 0, any positive sum) with the sampler's
 * random generator; -1 + error when every entry is 0. */
int32_t tutti_sampler_draw(tutti_sampler *sampler, const float *probs, int32_t n);
/* Speculative sampling (Leviathan et al. 2023, "Fast Inference from
 * Transformers via Speculative Decoding"; Chen et al. 2023): `drafted` was
 * drawn from a draft model's distribution q[n]; p is the distribution
 * tutti_sampler_sample would draw from for logits.  Returns drafted with
 * probability min(1, p(drafted)/q(drafted)), else a draw from the residual
 * max(0, p - q) normalised: the result is distributed exactly as
 * tutti_sampler_sample's (with other random numbers, so a seed gives
 * another text than without a draft).  Greedy: the argmax, whether or not
 * it is the drafted token, without a random draw.  Does not accept the
 * result (tutti_sampler_accept).  -1 + error as tutti_sampler_sample. */
int32_t tutti_sampler_sample_draft(tutti_sampler *sampler, const float *logits, int32_t n, int32_t drafted,
                                   const float *q);

/* ------------------------------------------------------------------------ */
/* Grammars: constrained generation (the `grammar` layer).
 *
 * A grammar is GBNF, llama.cpp's format:
 *   name ::= alternatives     rules (names [a-zA-Z0-9_-]+); the start rule is `root`
 *   a | b   ( ... )           alternatives, groups
 *   "lit"  [a-z]  [^"\\]  .   literals, character classes (ranges, negation), any character
 *   x*  x+  x?  x{m}  x{m,}  x{m,n}   repetition
 *   # comment; escapes \xhh \uhhhh \Uhhhhhhhh \t \n \r \\ \" \[ \] \- \^ \/
 * Classes hold Unicode code points: the text is matched as UTF-8 bytes and
 * only valid UTF-8 is accepted.  Generation under a grammar produces text
 * the grammar accepts, ending exactly when the grammar is complete and the
 * distribution picks the end, or when nothing can follow. */

typedef struct tutti_grammar tutti_grammar;

/* Parses GBNF text[0..len).  NULL + error "grammar: line L, column C:
 * reason" on a syntax error or an undefined rule; also refused: no `root`
 * rule, a rule defined twice, left recursion (the message names the rule
 * chain), repetition bounds above 10000, and a root that admits no string
 * at all.  Free with tutti_grammar_free.  Immutable: one grammar may serve
 * several matchers on several threads. */
tutti_grammar *tutti_grammar_parse(const char *text, size_t len);
void tutti_grammar_free(tutti_grammar *g);

/* JSON schema text[0..len) (parsed with cJSON) -> GBNF, the rule shapes of
 * llama.cpp's json-schema-to-grammar (same whitespace rule, same
 * primitives; object properties in schema order).  Covers type (also lists),
 * properties / required / additionalProperties, items / prefixItems /
 * minItems / maxItems, enum / const, minLength / maxLength / pattern
 * (regex subset: literals, . [] [^] classes, \d \w \s, groups, |, * + ?
 * {m,n}, anchored ^...$) / format (date, time, date-time, uuid), integer
 * minimum / maximum / exclusiveMinimum / exclusiveMaximum, anyOf / oneOf /
 * allOf (of objects), $ref to #/$defs/... or #/definitions/...; also
 * accepted and ignored like llama.cpp: title, description, $schema, $id,
 * $comment, default, examples.  Any other keyword is an error naming it and
 * its JSON pointer, never silently ignored.  Returns malloc'd NUL-terminated
 * GBNF (the caller frees it) or NULL + error. */
char *tutti_json_schema_to_gbnf(const char *schema, size_t len);
/* The same, parsed: NULL + error. */
tutti_grammar *tutti_grammar_from_json_schema(const char *schema, size_t len);
/* Options of the JSON schema conversion. */
typedef struct tutti_json_schema_params {
    /* false (default): a keyword that constrains the value but cannot be
     * enforced exactly is an error naming its schema path and keyword.
     * true: it is dropped (the grammar then accepts more than the schema)
     * with a warning naming it. */
    bool lenient;
    /* The defaults are for generation, as llama.cpp's json-schema-to-grammar
     * generates: a `const`/`enum` string only in its canonical spelling
     * (raw UTF-8; \" \\ \b \f \n \r \t; \u00xx for the other control
     * characters), and an object with `properties` or `patternProperties`
     * but no `additionalProperties` takes no other names.  For checking
     * documents against the schema as the specification reads it (every
     * spelling of a string; other names admitted), set both: */
    bool all_spellings; /* true: every JSON spelling of a const/enum string */
    bool open_objects;  /* true: additionalProperties absent admits any other name */
    /* out: NULL, or the warnings, one per line ("json schema: at PATH:
     * keyword 'K' ... dropped"), malloc'd: the caller frees it.  Set by
     * the calls below, also when they fail. */
    char *warnings;
} tutti_json_schema_params;
tutti_json_schema_params tutti_json_schema_default_params(void);
/* tutti_json_schema_to_gbnf / tutti_grammar_from_json_schema with options
 * (params NULL: the defaults). */
char *tutti_json_schema_to_gbnf_params(const char *schema, size_t len, tutti_json_schema_params *params);
tutti_grammar *tutti_grammar_from_json_schema_params(const char *schema, size_t len, tutti_json_schema_params *params);
/* A grammar for any JSON value (llama.cpp's grammars/json.gbnf shape, any
 * top-level value, whitespace between tokens). */
tutti_grammar *tutti_grammar_json(void);
/* Its GBNF text (static). */
const char *tutti_grammar_json_gbnf(void);

/* A grammar's position in a text: the state after the bytes accepted so
 * far, plus the memoised automaton (its states and transitions, built as
 * they are first needed) and the cached token masks.  One thread at a
 * time. */
typedef struct tutti_grammar_matcher tutti_grammar_matcher;

tutti_grammar_matcher *tutti_grammar_matcher_new(const tutti_grammar *g); /* g borrowed, must outlive it */
void tutti_grammar_matcher_free(tutti_grammar_matcher *m);
/* Back to the start of the text. */
void tutti_grammar_matcher_reset(tutti_grammar_matcher *m);
/* Accepts bytes[0..n): 0, or TUTTI_ERR naming the first rejected byte's
 * offset (the state is then unchanged). */
int tutti_grammar_matcher_accept(tutti_grammar_matcher *m, const char *bytes, size_t n);
/* Accepts the longest accepted prefix of bytes[0..n) and returns its length. */
size_t tutti_grammar_matcher_accept_prefix(tutti_grammar_matcher *m, const char *bytes, size_t n);
/* true when the text so far is a complete sentence of the grammar. */
bool tutti_grammar_matcher_is_complete(const tutti_grammar_matcher *m);
/* true when some byte may follow. */
bool tutti_grammar_matcher_can_continue(tutti_grammar_matcher *m);
/* allowed[257]: allowed[b] for each next byte b, allowed[256] = the text may
 * end here (is_complete).  0 or TUTTI_ERR (out of memory). */
int tutti_grammar_matcher_allowed_bytes(tutti_grammar_matcher *m, bool *allowed);
/* The current state as a number (valid for this matcher only) and back:
 * to try text and return. */
int32_t tutti_grammar_matcher_state(const tutti_grammar_matcher *m);
int tutti_grammar_matcher_set_state(tutti_grammar_matcher *m, int32_t state);
/* States built so far (automaton size). */
int32_t tutti_grammar_matcher_n_states(const tutti_grammar_matcher *m);

/* A vocabulary's token pieces (tutti_token_to_piece without control text)
 * as a byte trie, for token masks.  Share it between matchers, grammars and
 * threads: besides the trie it keeps, per character class met (made on
 * first use, under a lock), the tokens made only of that class's
 * characters as bitsets by character count (~19 KB per count for 151k
 * tokens; at most 32 classes, the rest use the trie), which make the mask of a state inside a string or a counted
 * repetition a bitset copy plus a few tokens checked byte by byte. */
typedef struct tutti_grammar_vocab tutti_grammar_vocab;
tutti_grammar_vocab *tutti_grammar_vocab_new(const tutti_vocab *vocab);
/* From raw pieces: pieces[i][0..lens[i]) for token i, eog[i] marks
 * end-of-generation tokens (NULL: none).  Copies nothing: the pieces are
 * read during the call only. */
tutti_grammar_vocab *tutti_grammar_vocab_from_pieces(int32_t n_vocab, const char *const *pieces, const int32_t *lens,
                                                     const bool *eog);
void tutti_grammar_vocab_free(tutti_grammar_vocab *v);
int32_t tutti_grammar_vocab_n_tokens(const tutti_grammar_vocab *v);
/* Builds now the per-class tables g's masks will use (otherwise built by
 * the first mask that needs each; a few ms per class for 151k tokens, once
 * per vocabulary and class whatever the grammar).  0 or TUTTI_ERR (out of
 * memory). */
int tutti_grammar_vocab_prepare(tutti_grammar_vocab *v, const tutti_grammar *g);
/* Sets logits[id] = -inf ([n_vocab] row, in place) for every token the
 * grammar rejects next: a token is allowed when the grammar accepts all of
 * its bytes from the current state; end-of-generation tokens exactly when
 * the text is complete; tokens without bytes never.  Returns the number of
 * allowed tokens (0: nothing can follow), or TUTTI_ERR.  The matcher caches
 * the mask per state (for one vocabulary at a time). */
int32_t tutti_grammar_matcher_mask(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, float *logits);
/* The same mask as a bitset: bit (id % 32) of bits[id / 32] is 1 for
 * every allowed token, 0 otherwise, [(n_vocab + 31) / 32] words written
 * (the layout of llguidance's and XGrammar's token bitmasks, for samplers
 * that apply the mask themselves, e.g. on another device).  Shares the
 * matcher's per-state cache with tutti_grammar_matcher_mask.  Returns the
 * number of allowed tokens, or TUTTI_ERR. */
int32_t tutti_grammar_matcher_bitmask(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, uint32_t *bits);

/* ------------------------------------------------------------------------ */
/* Ensembles: several models, one generation (the `fusion` layer).
 *
 * Every member is a loaded model with its own tokenizer and KV cache, a
 * weight w_i and a temperature tau_i (p_i = softmax(logits_i / tau_i)).
 * Alignment says what the members' distributions are fused over:
 *   TOKEN  members with the same vocabulary (same token list, merges, scores
 *          and token types; detected from the GGUF tokenizer metadata, never
 *          from names) fuse per token id.
 *   BYTE   any vocabularies: each member's next-token distribution becomes
 *          the exact distribution of the next byte given all committed bytes,
 *          summing over the tokenizations that cover the text (Phan et al.
 *          2024, "Exact Byte-Level Probabilities from Tokenized Language
 *          Models for FIM-Tasks and Model Ensembles"; ByteSampler, Hayase et
 *          al. 2025).  257 outcomes: 256 bytes and end of text.  A member
 *          runs a forward pass only when a committed byte completes one of
 *          its tokens.  Output is valid UTF-8.
 *   SPAN   every member drafts up to the next word end, every member scores
 *          every draft through its own tokenizer, the draft with the best
 *          weighted log-likelihood per byte is committed (Cool-Fusion /
 *          SweetSpan style).
 *   AUTO   TOKEN when all vocabularies are equal, else BYTE.
 * Rules (applied per step to the aligned distributions):
 *   MIX          linear pool  p = Σ w_i p_i / Σ w_i
 *   PRODUCT      log-linear pool  log p ∝ Σ w_i log p_i / Σ w_i
 *   GATE         the member with the lowest entropy this step
 *   CONTRASTIVE  log p ∝ Σ w_i log p_i restricted to {x: p_1(x) >= beta max p_1}
 *                (Li et al. 2023); member 1 is the expert (w_1 > 0), the
 *                others amateurs with negative weights (default -0.5).
 * Weights must be >= 0 except in CONTRASTIVE; default: uniform. */

#define TUTTI_ENSEMBLE_MAX_MEMBERS 16

typedef enum tutti_fusion_rule {
    TUTTI_RULE_MIX = 0,
    TUTTI_RULE_PRODUCT = 1,
    TUTTI_RULE_GATE = 2,
    TUTTI_RULE_CONTRASTIVE = 3,
} tutti_fusion_rule;

typedef enum tutti_align {
    TUTTI_ALIGN_AUTO = 0,
    TUTTI_ALIGN_TOKEN = 1,
    TUTTI_ALIGN_BYTE = 2,
    TUTTI_ALIGN_SPAN = 3,
} tutti_align;

/* Names ("mix", "byte", ...) <-> values; parse functions return -1 for an
 * unknown name. */
const char *tutti_rule_name(tutti_fusion_rule rule);
const char *tutti_align_name(tutti_align align);
int tutti_rule_parse(const char *name);
int tutti_align_parse(const char *name);

typedef struct tutti_member_desc {
    const char *
        model_path; /* GGUF file, or a remote member "http://HOST:PORT#MODEL;vocab=PATH[;...]" (docs/remote-members.md) */
    float weight;   /* NAN = default (uniform; contrastive: 1 for member 1, -0.5 for the others) */
    float temp;     /* tau_i in [TUTTI_TEMP_MIN, TUTTI_TEMP_MAX]; NAN = 1 (0 is refused) */
} tutti_member_desc;

typedef struct tutti_ensemble_params {
    const tutti_member_desc *members; /* [n_members], 1 <= n <= TUTTI_ENSEMBLE_MAX_MEMBERS; borrowed */
    int32_t n_members;
    tutti_fusion_rule rule;
    tutti_align align;
    float beta;        /* contrastive plausibility cut (default 0.1) */
    int32_t n_ctx;     /* per-member context in tokens; 0 = min(n_ctx_train, 4096) */
    int32_t n_threads; /* total worker threads; 0 = online CPUs */
    int32_t parallel;  /* 0 = default (measured faster: see fusion/ensemble.c), 1 = sequential
                          members with all threads each, 2 = one thread per member, concurrently */
    double prune;      /* byte alignment: drop tokenization hypotheses below this share of the
                          live mass (default 1e-4; 0 = exact) */
    int32_t max_hyps;  /* byte alignment: at most this many hypotheses per member (default 8) */
    bool verbose;      /* load summaries to stderr */
    /* Optional, borrowed: models[i] is member i's model, already loaded from
     * members[i].model_path with tutti_model_load (an entry may be NULL: that
     * member's file is loaded).  The ensemble then uses it instead of loading
     * the file again, so several ensembles (e.g. one per server slot) share
     * one read-only copy of the weights, each with its own sessions and KV
     * caches.  Every given model must outlive the ensemble.  NULL = load all. */
    const tutti_model *const *models;
    /* Optional, borrowed: the local members' sessions are batched in it
     * (tutti_session_new_batched), so the forward passes of several
     * ensembles sharing the batch (a server's slots) go through one pass
     * per model and step; the members then run one after the other (the
     * batch's threads do every pass; parallel and n_threads are ignored
     * for them).  Must outlive the ensemble.  NULL = none. */
    tutti_batch *batch;
    /* llama.cpp's context shift for the members' contexts (tutti run's
     * default; false = a member's full context ends the generation with
     * finish LENGTH): a local member whose window fills keeps its BOS and
     * the n_keep tokens after it, drops the oldest half of the rest and goes
     * on (tutti_session_params.ctx_shift).  Remote, MPI and split members
     * keep their hard limit.  The prompt must still fit every context. */
    bool ctx_shift;
    int32_t n_keep;
} tutti_ensemble_params;

tutti_ensemble_params tutti_ensemble_default_params(void);

/* Checking ensemble settings: the one validator.  tutti_ensemble_new, the
 * weight, adapt and route setters, ensemble files, the command line and
 * `tutti serve` (its flags, --config ensembles and a request's inline
 * ensemble) all call these, so a value is refused everywhere with the same
 * message.  Each returns 0, or TUTTI_ERR with a message naming the member
 * (1-based) and the value, never a path or where the value came from (the
 * caller prefixes that: a flag, a file's line, a JSON field).
 *   temperature  NAN = the default 1; else in [TUTTI_TEMP_MIN, TUTTI_TEMP_MAX]
 *                (0 is refused, not read as 1)
 *   weights      [n_members], NAN = the rule's default (tutti_default_weight);
 *                finite; >= 0 except in CONTRASTIVE, whose member 1 (the
 *                expert) must be > 0; not all 0; MIX and PRODUCT: sum > 0.
 *                Also checks n_members (1..16, CONTRASTIVE 2..16) and rule.
 *   adapt        alpha in [0, 1] (the rule is checked when it is set: MIX,
 *                or SPAN alignment)
 *   route        tau in [TUTTI_ROUTE_TAU_MIN, TUTTI_ROUTE_TAU_MAX] nats per
 *                byte (the rule: MIX or PRODUCT, checked when it is set)
 *   context      context weights (tutti_check_context, below at
 *                tutti_context_weights), select the selective-fusion
 *                threshold (tutti_check_select, at tutti_ensemble_set_select)
 *   params       all of a tutti_ensemble_params' settings (members' weights
 *                and temperatures, rule, align, beta, prune, max_hyps), no file
 *                opened */
#define TUTTI_TEMP_MIN 1e-6
#define TUTTI_TEMP_MAX 1e6
#define TUTTI_ROUTE_TAU_MIN 1e-6
#define TUTTI_ROUTE_TAU_MAX 1e6
int tutti_check_temp(int32_t member, float temp);
int tutti_check_weights(const float *weights, int32_t n_members, tutti_fusion_rule rule);
int tutti_check_adapt(double alpha);
int tutti_check_route(double tau);
int tutti_ensemble_params_check(const tutti_ensemble_params *params);
/* Member's (1-based) default weight: uniform 1/n; CONTRASTIVE: 1 for
 * member 1, -0.5/(n-1) for the others. */
float tutti_default_weight(int32_t member, int32_t n_members, tutti_fusion_rule rule);

typedef struct tutti_ensemble tutti_ensemble;

/* Loads every member (all stay resident).  NULL + error when a file is
 * missing or malformed, TOKEN alignment is asked for members whose
 * vocabularies differ, weights are negative outside CONTRASTIVE or all zero,
 * a temperature is not positive, or the member count is out of range. */
tutti_ensemble *tutti_ensemble_new(const tutti_ensemble_params *params);
void tutti_ensemble_free(tutti_ensemble *ens);

int32_t tutti_ensemble_n_members(const tutti_ensemble *ens);
/* The alignment in use (AUTO resolved). */
tutti_align tutti_ensemble_align(const tutti_ensemble *ens);
tutti_fusion_rule tutti_ensemble_rule(const tutti_ensemble *ens);
/* Member i's model (owned by the ensemble), weight and temperature. */
const tutti_model *tutti_ensemble_member_model(const tutti_ensemble *ens, int32_t i);
const char *tutti_ensemble_member_path(const tutti_ensemble *ens, int32_t i);
/* Member i's tokenizer, also for a member whose model is elsewhere (an MPI
 * rank, a split member, a tutti server): owned by the ensemble; NULL out of
 * range. */
const tutti_vocab *tutti_ensemble_member_vocab(const tutti_ensemble *ens, int32_t i);
/* The longest token sequence member i conditions on (its context: -c, or
 * the model's default); 0 out of range. */
int32_t tutti_ensemble_member_n_ctx(const tutti_ensemble *ens, int32_t i);
/* A string of member i's GGUF metadata (e.g. "tokenizer.chat_template") as
 * a malloc'd copy the caller frees: from the loaded model, else from the
 * member's file (members on other ranks); NULL when absent or for a URL
 * member. */
char *tutti_ensemble_member_meta_str(const tutti_ensemble *ens, int32_t i, const char *key);
float tutti_ensemble_member_weight(const tutti_ensemble *ens, int32_t i);
float tutti_ensemble_member_temp(const tutti_ensemble *ens, int32_t i);
/* Replaces weights and/or temperatures (either may be NULL), [n_members];
 * same checks as tutti_ensemble_new. */
int tutti_ensemble_set_weights(tutti_ensemble *ens, const float *weights, const float *temps);
/* Changes the rule (the alignment is fixed at creation). */
int tutti_ensemble_set_rule(tutti_ensemble *ens, tutti_fusion_rule rule);

/* Weights that follow the text (MIX, or SPAN alignment's span mixture):
 * after every committed unit (token, byte or span) each member's weight
 * becomes its posterior given the probability it gave that unit (the exact
 * mixture of whole sequences), then a share alpha in [0, 1] goes back to the
 * given weights (fixed share, Herbster and Warmuth 1998): alpha 0 is Bayes'
 * rule, alpha 1 the static weights every step, a small alpha (1e-3..1e-2)
 * lets the ensemble move to the member that knows the current subject.
 * The share is paid before each unit among the members present at it; a
 * member with no distribution at a unit (context full, cannot spell the
 * text) sleeps: its weight stays as it was until it is back (with alpha 0
 * the exact mixture of the members, each completed by the mixture where it
 * is gone).  The weights are kept as logarithms, so a member far behind is
 * never rounded to 0: only a member that gave the text probability 0 is
 * out under alpha 0.  alpha < 0 turns it off (the default).  In generation
 * and in eval (where the weights carry over from chunk to chunk: the text
 * is one stream).  Error for another rule or an alpha above 1. */
int tutti_ensemble_set_adapt(tutti_ensemble *ens, double alpha);
/* The alpha in use, or -1 when off. */
double tutti_ensemble_adapt(const tutti_ensemble *ens);

/* Routing (PackLLM-sim: Mavromatis, Karypis and Karypis 2024, "Pack of
 * LLMs: Model Fusion at Test-Time via Perplexity Optimization",
 * arXiv:2404.11531): at the start of every generation (and for every
 * choice item, the context being the prompt) the weights are set once from
 * each member's perplexity on the prompt,
 *
 *   w_i = w0_i exp(-l_i / tau) / sum_j w0_j exp(-l_j / tau)
 *
 * l_i = member i's negative log-likelihood of the prompt in nats per UTF-8
 * byte (its own canonical tokenization from BOS, at its temperature: the
 * members' tokens differ, so the paper's mean per token becomes a mean per
 * byte), w0 the given or fitted weights (uniform: the paper's softmax; a
 * member with weight 0 stays at 0).  At tau = 1/n_bytes this is the
 * Bayesian posterior after the prompt; a fixed tau does not sharpen with
 * the prompt's length (meant for long prompts).  The given weights come
 * back after the generation.  Cost: one forward pass over the prompt per
 * member.  tau > 0 (finite) turns it on, tau < 0 off (the default); error
 * for tau = 0 or a rule other than MIX and PRODUCT. */
int tutti_ensemble_set_route(tutti_ensemble *ens, double tau);
/* The tau in use, or -1 when off. */
double tutti_ensemble_route(const tutti_ensemble *ens);
/* The routing weights for prompt[0..len) (UTF-8, no NUL) at temperature tau
 * (> 0, nats per byte) from the ensemble's current weights, whether or not
 * routing is on: weights[n_members] (sum 1) and, when nll_per_byte is not
 * NULL, each member's l_i [n_members] (NAN: the prompt is longer than its
 * context; that member gets weight 0; an empty prompt: 0 for all, the given
 * weights).  Returns 0, or TUTTI_ERR (bad tau, a member failing, no member
 * with weight > 0 able to score the prompt). */
int tutti_ensemble_route_weights(tutti_ensemble *ens, const char *prompt, size_t len, double tau, float *weights,
                                 double *nll_per_byte);

/* Context-dependent weights (docs/fusion-study.md "Context weights"; `tutti fit
 * --context`): at every unit t (token, byte or span) member i's weight is
 *
 *   w_i(t) = W_i exp(Σ_k b_ik f_ik(t)) / Σ_j W_j exp(Σ_k b_jk f_jk(t))
 *
 * over the members present at t (W: the given, fitted or routed weights;
 * b = 0 is the static ensemble), under MIX or PRODUCT, in every alignment,
 * in generation, eval and fit.  The features of member i at unit t are what
 * the members show before the unit is drawn (SPAN: their next-byte
 * distributions at the span's first byte):
 *   ENTROPY  entropy of its next-unit distribution / log(n outcomes), in [0, 1]
 *   TOP      its largest next-unit probability, in [0, 1]
 *   LOSS     its recent log-loss: the mean of min(-ln p_i(unit), 30) nats
 *            (SPAN: per byte of the span) over the units so far, unit u
 *            weighted by 2^-(t-1-u)/halflife; 0 at the first unit.  The
 *            units so far start at a generation's first generated unit (the
 *            prompt is not scored) and at an eval chunk's BOS.
 *   AGREE    agreement with the others: Σ_x p_i(x) q_i(x), q_i the mean
 *            distribution of the other members present (0 alone), in [0, 1]
 * With adapt on, the fixed share goes to w(t) instead of the static prior:
 * weights(t) = (1 - alpha) posterior(t-1) + alpha w(t). */
typedef enum tutti_feature {
    TUTTI_FEAT_ENTROPY = 0,
    TUTTI_FEAT_TOP = 1,
    TUTTI_FEAT_LOSS = 2,
    TUTTI_FEAT_AGREE = 3,
} tutti_feature;
#define TUTTI_N_FEATURES 4
#define TUTTI_HALFLIFE_MIN 0.5
#define TUTTI_HALFLIFE_MAX 1e6
#define TUTTI_COEF_MAX 1e4
/* "entropy", "top", "loss", "agree" <-> values (parse: -1 if unknown). */
const char *tutti_feature_name(tutti_feature f);
int tutti_feature_parse(const char *name);

typedef struct tutti_context_weights {
    int32_t n_features;                                       /* 0 = off (static weights) */
    int32_t features[TUTTI_N_FEATURES];                       /* distinct TUTTI_FEAT_* */
    double halflife;                                          /* of LOSS, in units: [TUTTI_HALFLIFE_MIN, _MAX] */
    float coef[TUTTI_ENSEMBLE_MAX_MEMBERS][TUTTI_N_FEATURES]; /* b_ik for features[k]: finite,
                                                                 |b| <= TUTTI_COEF_MAX */
} tutti_context_weights;

/* The validator of context weights for n_members members (0 or TUTTI_ERR
 * with a message naming the member and the value). */
int tutti_check_context(const tutti_context_weights *cw, int32_t n_members);
/* Sets (copies) the context weights of later generations and evaluations;
 * NULL or n_features 0 turns them off.  Error: an invalid setting, or a rule
 * other than MIX and PRODUCT. */
int tutti_ensemble_set_context(tutti_ensemble *ens, const tutti_context_weights *cw);
/* Copies the setting in use into out (n_features 0: off); returns n_features. */
int32_t tutti_ensemble_context(const tutti_ensemble *ens, tutti_context_weights *out);

/* Selective fusion (SAFE, "fuse only where the members disagree"): a unit is
 * fused only where the members' disagreement, the generalised Jensen-Shannon
 * divergence under this unit's weights,
 *
 *   D(t) = H(Σ_i w_i p_i) - Σ_i w_i H(p_i)   (nats, >= 0),
 *
 * is at least the threshold; elsewhere the member with the largest weight
 * at this unit gives its own distribution.  TOKEN and BYTE alignment (a SPAN
 * draft is already one member's).  threshold < 0 turns it off (the
 * default: every unit fused); 0 fuses every unit too.  How often it fused:
 * tutti_ensemble_stats.n_fused, tutti_bpb_result.fused_share; `tutti fit
 * --select-share S` measures the threshold that fuses a share S of the
 * dev text's units. */
#define TUTTI_SELECT_MAX 100.0
int tutti_check_select(double threshold);
int tutti_ensemble_set_select(tutti_ensemble *ens, double threshold);
/* The threshold in use, or -1 when off. */
double tutti_ensemble_select(const tutti_ensemble *ens);

/* One mask for the whole ensemble, applied to the fused distribution (per
 * token in TOKEN alignment, per byte in BYTE and SPAN alignment).  All
 * pointers borrowed; NULL/0 = off. */
typedef struct tutti_mask {
    const char *const *allowed; /* non-empty: the output must be a prefix of one of these,
                                   and may end only when it equals one */
    int32_t n_allowed;
    const char *const *forbidden; /* the output never contains any of these */
    int32_t n_forbidden;
    const char *const *stop; /* generation stops after one of these; it is not output */
    int32_t n_stop;
    int32_t max_len;              /* generated units (tokens in TOKEN, bytes in BYTE/SPAN); <= 0: n_ctx */
    const tutti_grammar *grammar; /* NULL = off; else the output is accepted by it (TOKEN: tokens whose
                                     bytes it accepts; BYTE: allowed next bytes; SPAN: drafts cut at the
                                     first rejected byte), renormalised after the fusion rule, and ends
                                     only where it is complete (or nothing can follow) */
    int32_t max_tokens;           /* > 0: at most this many tokens of member 1's tokenizer, in every
                                     alignment: TOKEN counts generated ids; BYTE and SPAN stop with the
                                     longest generated text that member 1 tokenizes (on its own, no BOS, as
                                     tutti_tokenize) into at most max_tokens tokens, ending between two
                                     UTF-8 characters */
    bool ignore_eos;              /* the text never ends by itself (tutti generate --ignore-eos): TOKEN
                                     end-of-generation tokens, BYTE the end-of-text outcome, SPAN drafts'
                                     end-of-generation tokens are ruled out; it ends at max_len /
                                     max_tokens, a stop string or a full context */
    /* OpenAI's logit_bias: bias[k] is added to the fused log-probability of
     * token bias_ids[k] (an id of member 1's vocabulary) every step, after
     * the rule and before the mask, the grammar and the sampler (which
     * renormalises); -INFINITY bans the token.  TOKEN alignment only: BYTE
     * and SPAN fuse over bytes and drafts, which have no token ids (error).
     * Ids in [0, n_vocab), biases finite or -INFINITY; n_bias 0 = none. */
    const int32_t *bias_ids;
    const float *bias;
    int32_t n_bias;
} tutti_mask;

/* Why a generation ended, in the OpenAI API's terms (finish_reason). */
typedef enum tutti_finish {
    TUTTI_FINISH_STOP = 0,   /* "stop": end of text, a stop string, the grammar complete (nothing may
                                follow), or the text callback asked to stop */
    TUTTI_FINISH_LENGTH = 1, /* "length": mask->max_len / max_tokens reached, or a member's full
                                context ended it (ctx_full_member), in every alignment */
} tutti_finish;

typedef struct tutti_ensemble_stats {
    int32_t n_units;    /* tokens (TOKEN) or bytes (BYTE, SPAN) generated */
    int32_t n_bytes;    /* bytes output */
    double t_total_s;   /* wall time of the generation (prompt included) */
    double t_prompt_s;  /* of t_total_s, up to the first fused distribution (the prompt's forward passes) */
    double t_forward_s; /* wall time during which members ran forward passes */
    double t_fusion_s;  /* t_total_s - t_forward_s: alignment, fusion, mask, sampling */
    double t_member_s[TUTTI_ENSEMBLE_MAX_MEMBERS];       /* forward time per member */
    int64_t n_member_tokens[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* tokens each member ran */
    int64_t n_member_passes[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* forward passes each member ran (BYTE: all
                                                            hypotheses evaluated at one byte are one pass) */
    /* BYTE and SPAN alignment: member i left the generation (weight 0 from
     * then on, the others renormalised) because its tokens cannot spell the
     * prompt or the drawn text (TUTTI_LEFT_SPELL), or because pruning
     * (tutti_ensemble_params.prune / max_hyps) dropped every tokenization
     * hypothesis that could (TUTTI_LEFT_PRUNED); 0 = stayed. */
    bool member_left[TUTTI_ENSEMBLE_MAX_MEMBERS];
    /* Prompt tokens member i ran through its forward pass in this generation
     * (the count up to its first next-token distribution; SPAN: up to the
     * end of the first draft).  An ensemble keeps its members' KV caches
     * between generations and reuses the longest common prefix of token ids,
     * so a prompt that extends the previous generation's (a chat growing by
     * one turn) evaluates only the new tokens. */
    int64_t n_prompt_evaluated[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t member_left_reason[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* TUTTI_LEFT_*, 0 = stayed */
    /* The member whose full context ended the generation (0-based), -1 if
     * none did.  NaN/+inf logits are not a stop but an error. */
    int32_t ctx_full_member;
    /* The generation ended at mask->max_len or mask->max_tokens, not at end
     * of text, a stop string or a full context. */
    bool at_limit;
    /* Units whose members' distributions were fused (n_units without
     * selective fusion, tutti_ensemble_set_select; SPAN: n_units). */
    int32_t n_fused;
    /* LENGTH when at_limit or ctx_full_member >= 0, else STOP. */
    tutti_finish finish;
    /* Drafting (tutti_ensemble_set_draft; all 0 without a draft): rounds in
     * which the draft proposed tokens, the tokens it proposed (the members
     * verified each round's tokens in one forward pass), those the fused
     * distribution accepted, and the draft model's own forward passes
     * (BYTE alignment: n_drafted and n_draft_accepted count bytes). */
    int32_t n_draft_rounds;
    int64_t n_drafted;
    int64_t n_draft_accepted;
    int64_t n_draft_tokens; /* tokens the draft model ran */
    double t_draft_s;       /* the draft model's forward time (part of t_forward_s) */
    /* Tokens drawn by mixture sampling (tutti_ensemble_set_mix_sample;
     * 0 when it is off or was not exact for the generation's settings). */
    int32_t n_mix_sampled;
} tutti_ensemble_stats;

#define TUTTI_LEFT_SPELL 1
#define TUTTI_LEFT_PRUNED 2

/* Drafting (speculative decoding, Leviathan et al. 2023; Chen et al. 2023):
 * a small draft model with the same vocabulary as the members (or another:
 * re-spelled) proposes up to n_max tokens, greedily under greedy sampling and otherwise from its
 * own distribution under the generation's sampler settings; every member
 * scores all of them in one batched forward pass (as a prompt), and the
 * fused distribution accepts or rejects them one by one
 * (tutti_sampler_sample_draft; the mask, grammar and logit bias apply
 * as without a draft).  Greedy output is identical to the plain run's,
 * sampled output is distributed exactly as the plain run's (not the same
 * text for a seed).  Rejected tokens leave the members' and the draft's KV
 * caches by rewinding them to the accepted prefix.  BYTE alignment: the
 * draft (any tokenizer) proposes the bytes of up to n_max of its tokens
 * (greedily, while confident: a deterministic proposal, one-hot q); every
 * member computes the distributions along its tokenization of the drafted
 * text in one pass, and each drafted byte is accepted or rejected by the
 * fused byte row of that step; n_drafted and n_draft_accepted count bytes.
 * Not for SPAN alignment. */
typedef struct tutti_draft_params {
    const char *model_path; /* the draft's GGUF file (or a model spec, as a member's) */
    int32_t n_max;          /* tokens drafted per round at most (llama.cpp's --draft-max; default 16) */
    int32_t n_min;          /* a round that drafts fewer is dropped: a plain step instead (default 0) */
    float p_min;            /* drafting stops at a token the draft gives less than this probability
                               (at temperature 1, before the sampler's filters; default 0.75) */
    int32_t n_threads;      /* the draft's threads; 0 = the ensemble's */
    /* Without a draft model (model_path NULL or empty) and lookup_n > 0:
     * prompt lookup (llama.cpp's ngram-simple): the last lookup_n tokens of
     * the sequence (prompt and generated) are searched for earlier in it,
     * latest match first, and the up to n_max tokens that followed that
     * match are the draft (a deterministic proposal: q is one-hot, so a
     * drafted token x is accepted with probability p(x), else the token is
     * drawn from p without x; exact as above).  p_min does not apply. */
    int32_t lookup_n;
} tutti_draft_params;
tutti_draft_params tutti_draft_default_params(void);
/* Loads the draft for later generations (replacing any earlier one; NULL,
 * or no model_path and lookup_n 0: no draft).  TUTTI_ERR when the ensemble is in
 * SPAN alignment (or BYTE with prompt lookup), the draft's vocabulary differs from member 1's
 * and member 1 has no tokenizer to re-spell it, the file
 * cannot be loaded, or n_max < 1, n_min > n_max, p_min outside [0, 1]. */
int tutti_ensemble_set_draft(tutti_ensemble *ens, const tutti_draft_params *params);

/* Mixture sampling (off by default): a sampled step of the mix rule draws
 * a member i with probability w_i and then the token from member i's own
 * distribution, which is a draw from Σ w_i p_i, so the step needs only
 * member i's forward pass; a member runs the tokens it missed in one pass
 * when it is drawn next.  With weights that follow the text
 * (tutti_ensemble_set_adapt) the member is a Markov chain (fixed share:
 * it stays with probability 1 - alpha, else a fresh draw from the prior),
 * exact as well.  Taken only where the fused distribution the sampler
 * draws from is exactly the mixture: TOKEN alignment, mix rule, sampler
 * temperature 1 (the members' own temperatures may be anything), top-k,
 * top-p, min-p and the repetition penalty off, no logit bias, mask
 * strings, ignore_eos or grammar, no draft, no context weights or
 * selective fusion, local members only.  Otherwise a generation takes the
 * ordinary step, with a notice (tutti_ensemble_set_notice) saying why.
 * With a step receiver (tutti_ensemble_set_step_cb) every member still
 * runs every token to report the fused row (no gain; the same text).  The
 * member choices and the draws use the generation's seed: a seed gives a
 * reproducible text, not the one the ordinary step gives for it, with the
 * same distribution.  tutti_ensemble_stats.n_mix_sampled counts the tokens
 * drawn this way (n_prompt_evaluated and t_prompt_s then count the first
 * token's member only).  One member runs per token, so members in turn
 * (tutti_ensemble_params.parallel 1) give it all the threads.  0 or
 * TUTTI_ERR (no ensemble). */
int tutti_ensemble_set_mix_sample(tutti_ensemble *ens, bool on);
bool tutti_ensemble_mix_sample(const tutti_ensemble *ens);

/* Receives one line of text (no newline) about a generation as it happens:
 * a member leaving (and why) or a member's context filling up. */
typedef void (*tutti_notice_cb)(const char *msg, void *user);
/* Sets the notice receiver of later generations (NULL: none). */
void tutti_ensemble_set_notice(tutti_ensemble *ens, tutti_notice_cb cb, void *user);

/* One sampling step of a fused generation, as a step receiver sees it
 * (tutti_ensemble_set_step_cb): the fused distribution the sampler drew
 * from and what was drawn.  This is what OpenAI-style `logprobs` report.
 *   align       TUTTI_ALIGN_TOKEN: outcomes are member 1's token ids;
 *               TUTTI_ALIGN_BYTE: 257 outcomes, bytes 0..255 and 256 = end
 *               of text.  SPAN alignment reports no steps.
 *   n_outcomes  member 1's n_vocab, or 257.
 *   logprobs    [n_outcomes] natural-log probabilities of the fused
 *               distribution after the rule, the mask, the grammar and (in
 *               BYTE) the UTF-8 validity rule, renormalised to sum to 1 over
 *               what remains (-INFINITY: ruled out).  Before the sampler's
 *               own temperature, penalties and top-k/top-p/min-p filters, as
 *               OpenAI's logprobs are independent of temperature.  Borrowed,
 *               valid during the call only.
 *   chosen      the outcome drawn.
 *   bytes       what the step commits to the text (the token's piece without
 *               rendering control tokens, one byte, or nothing at the end),
 *               before stop strings are applied; n_bytes of them.
 *   unit        0-based index of the step in this generation.
 *   n_members, member_logprobs, member_weights
 *               with tutti_ensemble_set_step_members on (else 0, NULL,
 *               NULL; and in tutti_ensemble_score): each member's natural-log
 *               probability of the chosen outcome under its own
 *               distribution (TOKEN: its row at its temperature; BYTE: its
 *               byte marginal; -INFINITY: none, or the member left) and the
 *               step's weights, so that a member's share of the outcome is
 *               w_i p_i / sum_k w_k p_k (the responsibility of the mix). */
typedef struct tutti_step {
    tutti_align align;
    int32_t n_outcomes;
    const float *logprobs;
    int32_t chosen;
    const char *bytes;
    size_t n_bytes;
    int32_t unit;
    int32_t n_members;
    const double *member_logprobs;
    const float *member_weights;
} tutti_step;
/* Receives every step of later generations, before its bytes reach the text
 * callback; the end-of-generation step (chosen = an end-of-generation token
 * or 256) is reported too, with n_bytes 0.  Return non-zero to stop the
 * generation after this step. */
typedef int (*tutti_step_cb)(const tutti_step *step, void *user);
/* Sets the step receiver of later generations (NULL: none, which costs
 * nothing; with one, each step pays one pass over the fused row). */
void tutti_ensemble_set_step_cb(tutti_ensemble *ens, tutti_step_cb cb, void *user);
/* Steps of later generations carry each member's probability of the chosen
 * outcome (tutti_step.member_logprobs; off by default: TOKEN alignment pays
 * one pass over every member's row per step). */
void tutti_ensemble_set_step_members(tutti_ensemble *ens, bool on);

/* Scores a known text: the fused distribution at every unit of it, as
 * generation would have drawn the text (OpenAI's echo with logprobs, hence
 * lm-evaluation-harness's loglikelihood requests), given to cb as steps
 * (tutti_step; logprobs renormalised as there).  TOKEN alignment: the ids
 * ids[0..n_ids) of member 1's (the shared) vocabulary, or when ids is NULL
 * text[0..len) tokenized by member 1 (BOS as its vocabulary asks); one step
 * per token after the first: the distribution after the tokens before it,
 * chosen = the token, bytes its piece (control tokens not rendered), unit
 * its position.  BYTE alignment: text (ids: their text by member 1's
 * tokenizer), one step per byte, each member from BOS through its byte
 * marginals, the UTF-8 rule applied as in generation.  Static weights
 * (adapt and route do not apply).  The members' KV caches keep the text,
 * so a generation after it reuses them.  cb returning non-zero stops.
 * Returns 0, TUTTI_ERR, or TUTTI_ERR_UNSUPPORTED for SPAN alignment (it
 * selects drafts: no distribution per unit). */
int tutti_ensemble_score(tutti_ensemble *ens, const char *text, size_t len, const int32_t *ids, int32_t n_ids,
                         tutti_step_cb cb, void *user);

/* Receives output bytes as they are committed (never splits a UTF-8
 * character: an incomplete character is held back, and one left incomplete
 * at the end of generation is not output); return non-zero to stop. */
typedef int (*tutti_text_cb)(const char *bytes, size_t n, void *user);

/* Generates a fused continuation of prompt[0..prompt_len) (raw text; each
 * member tokenizes it itself, BOS added as its vocabulary asks), sampling on
 * the fused distribution with sampler params sp (NULL = defaults; the same
 * options as single-model generation).  Stops at end of text, a stop string,
 * mask->max_len, a full context (any member's) or when cb returns non-zero.
 * In BYTE and SPAN alignment a member whose tokens cannot spell the text
 * drawn from the fused distribution (possible under MIX, e.g. a character
 * vocabulary without that character) leaves the generation, the others'
 * weights renormalised.  stats may be NULL.  Returns 0 or TUTTI_ERR (a
 * prompt longer than a member's context, a member failing, everything
 * masked out, NaN/+inf logits: "member 2 (b.gguf): logits contain NaN at
 * position P").  A context that fills up mid-way is a clean stop
 * (stats->ctx_full_member, and a notice). */
int tutti_ensemble_generate(tutti_ensemble *ens, const char *prompt, size_t prompt_len, const tutti_sampler_params *sp,
                            const tutti_mask *mask, tutti_text_cb cb, void *user, tutti_ensemble_stats *stats);

/* As tutti_ensemble_generate, with the prompt given to each member as token
 * ids of its own vocabulary: prompt_ids[i][0..n_prompt_ids[i]) for member i
 * ([n_members], n >= 1, ids in range; used as given: BOS is not added), e.g.
 * every member's own chat prompt (tutti_chat_tokenize).  The continuation is shared: in TOKEN alignment its
 * token ids follow every member's prompt; in BYTE and SPAN alignment its
 * bytes follow each member's last prompt token directly (no tokenizer space
 * prefix is put in front of them).
 * End of turn: TOKEN stops when the fused distribution draws an
 * end-of-generation token (EOS, end of turn such as <|end|> or <|im_end|>;
 * tutti_vocab_is_eog); BYTE stops when it draws the end-of-text outcome,
 * whose probability is each member's mass on its end-of-generation tokens
 * after a complete tokenization of the text, fused like any byte; SPAN stops
 * when the winning draft ends with its member's end-of-generation token.
 * The repetition penalty looks back over member 1's prompt (its ids in
 * TOKEN alignment, the bytes of its non-control tokens otherwise).
 * Returns 0 or TUTTI_ERR (also for a prompt longer than a member's
 * context). */
int tutti_ensemble_generate_ids(tutti_ensemble *ens, const int32_t *const *prompt_ids, const int32_t *n_prompt_ids,
                                const tutti_sampler_params *sp, const tutti_mask *mask, tutti_text_cb cb, void *user,
                                tutti_ensemble_stats *stats);

/* Bits per byte of text: every member alone (token level, over its
 * canonical tokenization, like llama.cpp perplexity) and the ensemble
 * under its rule, alignment, weights and temperatures.  The text is split
 * into sentence-aligned chunks of at most 200 bytes, each scored from BOS
 * (../shared/oracle/bpb.py).  bits per byte = Σ -log2 p / Σ chunk bytes.
 * Returns 0, TUTTI_ERR, or TUTTI_ERR_UNSUPPORTED for what has no
 * likelihood to score: the contrastive rule (a decoding rule: the true text
 * may lie outside its plausibility set, infinitely many bits) and SPAN
 * alignment with a rule other than mix (span selection scores drafts, it
 * defines a distribution only as the span-level mixture). */
typedef struct tutti_bpb_result {
    int32_t n_members;
    int32_t n_chunks;
    int64_t n_bytes;
    double member_bpb[TUTTI_ENSEMBLE_MAX_MEMBERS];      /* token level, tau_i = 1 */
    double member_byte_bpb[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* BYTE/SPAN: the member alone through the
                                                           byte marginals at its tau_i; else NAN */
    double ensemble_bpb;
    double fused_share; /* share of the scored units that were fused (1 without selective fusion) */
} tutti_bpb_result;

int tutti_ensemble_eval_bpb(tutti_ensemble *ens, const char *text, size_t len, tutti_bpb_result *out);

/* Multiple-choice accuracy with lm-evaluation-harness's multiple_choice
 * semantics: for each item the log-likelihood of every choice given the
 * context, LL(choice) = LL(context + choice) - LL(context), each text scored
 * from BOS (every member alone at token level over its canonical
 * tokenization, the ensemble through its alignment, rule, weights and
 * temperatures).  acc counts items whose label has the highest LL, acc_norm
 * those whose label has the highest LL per UTF-8 byte of the choice (ties go
 * to the lower index, as numpy's argmax).  Items: context and choices are
 * NUL-terminated UTF-8 (borrowed), 2 <= n_choices <= TUTTI_MAX_CHOICES, label
 * in [0, n_choices). */
#define TUTTI_MAX_CHOICES 16

typedef struct tutti_choice_item {
    const char *context;
    const char *const *choices; /* [n_choices] */
    int32_t n_choices;
    int32_t label;
} tutti_choice_item;

typedef struct tutti_choices_result {
    int32_t n_members;
    int32_t n_items;
    double member_acc[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double member_acc_norm[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double ensemble_acc;
    double ensemble_acc_norm;
} tutti_choices_result;

/* Scores items[0..n_items) into out.  ll (may be NULL) receives every
 * log-likelihood in nats: ll[(item * TUTTI_MAX_CHOICES + choice) *
 * (n_members + 1) + k], k < n_members a member alone, k = n_members the
 * ensemble; caller-allocated with n_items * TUTTI_MAX_CHOICES * (n_members +
 * 1) doubles.  progress (may be NULL) is called after each item.  Returns 0
 * or TUTTI_ERR (a malformed item, naming it; a member failing). */
int tutti_ensemble_eval_choices(tutti_ensemble *ens, const tutti_choice_item *items, int32_t n_items,
                                tutti_choices_result *out, double *ll,
                                void (*progress)(int32_t done, int32_t total, void *user), void *user);

/* Finds weights (and temperatures from a grid) minimising the ensemble's
 * bits per byte on text under the current rule and alignment, and sets them
 * on the ensemble.  temps: grid of candidate temperatures ([n_temps]; NULL =
 * {1}).  Rules MIX and PRODUCT (and SPAN, which fits a span-level mixture);
 * GATE has no weights to fit (they only switch members on/off) and
 * CONTRASTIVE is refused (both TUTTI_ERR_UNSUPPORTED).  With adapt on, the
 * weights fitted statically become the prior (none set to 0: a prior of 0
 * would keep its member out for good) and the fixed-share alpha is
 * fitted too (a log grid from 0 to 1) and set.  out (may be NULL) receives the bits per byte of
 * uniform weights (tau = 1) and of the fitted setting. */
typedef struct tutti_fit_result {
    double uniform_bpb;
    double fitted_bpb;  /* the fitted setting (with adapt: the fitted alpha) */
    double static_bpb;  /* the fitted weights and temperatures without adapt */
    double adapt_alpha; /* fixed-share alpha fitted when adapt was on (tutti_ensemble_set_adapt), else -1 */
    float weights[TUTTI_ENSEMBLE_MAX_MEMBERS];
    float temps[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double context_bpb;      /* with context weights (tutti_fit_params.n_context), before adapt; else NAN */
    double heldout_bpb;      /* context weights: on the held-out quarter that stopped the gradient; else NAN */
    double select_threshold; /* measured for tutti_fit_params.select_share, else -1 */
    double fused_share;      /* share of the text's units fused at that threshold (1 without) */
    /* tutti_ensemble_fit_choices: the fitted setting's accuracy on the items
     * and the fitted loss per item (nats; the bits-per-byte fields are NAN) */
    double acc, acc_norm, choice_loss;
    /* tutti_ensemble_fit_auto: what it chose, e.g. "product + context" */
    char chosen[96];
} tutti_fit_result;

int tutti_ensemble_fit(tutti_ensemble *ens, const char *text, size_t len, const float *temps, int32_t n_temps,
                       tutti_fit_result *out);

/* What to fit beyond weights and temperatures (tutti_ensemble_fit_with,
 * _fit_auto, _fit_choices).  All fields optional (zero = off). */
typedef struct tutti_fit_params {
    const float *temps; /* candidate temperatures [n_temps]; NULL = {1} */
    int32_t n_temps;
    /* Context weights (tutti_ensemble_set_context) over these features:
     * after the static fit, the coefficients b (and the members' log-weights)
     * by Adam on the log-loss of three quarters of the text's chunks, stopped
     * where the last quarter's log-loss is lowest, for each half-life of
     * the LOSS feature in {4, 16, 64} (the best on the held-out quarter). */
    int32_t context[TUTTI_N_FEATURES];
    int32_t n_context;
    /* (0, 1]: sets the selective-fusion threshold (tutti_ensemble_set_select)
     * to the one that fuses this share of the text's units under the fitted
     * setting (measured: the (1 - share) quantile of D(t)). */
    double select_share;
    /* tutti_ensemble_fit_auto: one line per candidate (its held-out figure)
     * and one for the choice; NULL = silent. */
    void (*report)(const char *line, void *user);
    void *user;
} tutti_fit_params;

/* tutti_ensemble_fit with the settings of p (NULL = weights only). */
int tutti_ensemble_fit_with(tutti_ensemble *ens, const char *text, size_t len, const tutti_fit_params *p,
                            tutti_fit_result *out);
/* Chooses the rule: the text's chunks are split into a fitting part (two
 * chunks of every three) and a held-out part (the third); every candidate
 * the alignment can score (mix, mix + adapt, product, gate, mix + context,
 * mix + context + adapt, product + context; context weights over p's
 * features, all four when p names none) is fitted on the fitting part and
 * scored on the held-out part (p->report gets each figure), and the best is
 * fitted again on the whole text and set on the ensemble (out->chosen names
 * it).  TUTTI_ERR when no candidate can be scored. */
int tutti_ensemble_fit_auto(tutti_ensemble *ens, const char *text, size_t len, const tutti_fit_params *p,
                            tutti_fit_result *out);
/* Fits the weights (and temperatures from p's grid; context weights are
 * left as they are) for multiple-choice accuracy on items, scored as
 * tutti_ensemble_eval_choices scores them (MIX: the posterior after the
 * context unless adapt is set to a positive alpha, which is refused here;
 * PRODUCT: static weights per unit): minimises the mean over items of
 * -log softmax_c(LL_c / bytes_c / s)[label], acc_norm's normalisation, with
 * the scale s fitted too.  out->acc/acc_norm: the fitted setting's
 * accuracy on the items. */
int tutti_ensemble_fit_choices(tutti_ensemble *ens, const tutti_choice_item *items, int32_t n_items,
                               const tutti_fit_params *p, tutti_fit_result *out);

/* Ensemble files: one member per line, `MODEL_PATH WEIGHT TEMP` (weight and
 * temperature optional; a path with spaces goes in double quotes; relative
 * paths are relative to the file's folder; tutti_ensemble_file_write writes
 * absolute paths, so a file means the same models wherever it is put), plus
 * optional lines `rule NAME`, `align NAME`, `adapt ALPHA`, `route TAU`,
 * `select D` and the context weights' `context FEATURE...`,
 * `context-halflife H` and `context-coef MEMBER B1 B2 ...` (MEMBER 1-based in
 * file order, one coefficient per feature of the `context` line, which comes
 * first; members without a line have b = 0); `#` starts a comment. */
typedef struct tutti_ensemble_file {
    tutti_member_desc *members; /* [n_members], paths owned by this struct */
    int32_t n_members;
    int rule;     /* tutti_fusion_rule, or -1 if the file does not say */
    int align;    /* tutti_align, or -1 */
    double adapt; /* fixed-share alpha of a line `adapt ALPHA` (tutti_ensemble_set_adapt), or -1 */
    double route; /* tau of a line `route TAU` (tutti_ensemble_set_route), or -1 */
    /* lines `context FEATURE...`, `context-halflife H`, `context-coef I B...`
     * (tutti_ensemble_set_context; n_features 0 when absent) */
    tutti_context_weights context;
    double select; /* threshold of a line `select D` (tutti_ensemble_set_select), or -1 */
} tutti_ensemble_file;

/* NULL + error (naming the line) on a malformed file. */
tutti_ensemble_file *tutti_ensemble_file_read(const char *path);
void tutti_ensemble_file_free(tutti_ensemble_file *f);
/* Writes the ensemble (its members, weights, temperatures, rule and
 * alignment) in the file format above. */
int tutti_ensemble_file_write(const tutti_ensemble *ens, FILE *out);

/* ------------------------------------------------------------------------ */
/* Chat templates: a model's tokenizer.chat_template (GGUF metadata, Jinja2
 * syntax) rendered into the prompt text, as Hugging Face transformers'
 * apply_chat_template does (trim_blocks and lstrip_blocks on).  The Jinja
 * subset covers the templates of Llama 3.x, Qwen2.5/3, Gemma 2/3, Phi-3,
 * Mistral and SmolLM: {{ }}, {% if/elif/else %}, {% for %} with loop.* and
 * else, {% set %} (also namespace() attributes and set blocks), {% macro %},
 * {% call %}, {% filter %}, break/continue, whitespace control, the usual
 * expressions, filters, tests and str/dict methods, raise_exception(),
 * strftime_now().  Values print as Python prints them (True, None, 1e-05,
 * ['a', 1]) and tojson is json.dumps (ensure_ascii, indent, separators,
 * sort_keys), as transformers renders; upper/lower/title map ASCII only.
 * Untrusted templates are safe: nesting, loop steps, memory and output size
 * are bounded, and every failure is an error, never a crash. */

typedef struct tutti_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool" ...; not NULL */
    const char *content; /* UTF-8 text; NULL makes content none */
} tutti_chat_message;

/* Renders template `tmpl` (NUL-terminated) with the variables
 *   messages              list of {role, content} from msgs[0..n_msgs)
 *   add_generation_prompt add_generation_prompt
 *   bos_token, eos_token  the given strings (NULL: the variable is undefined)
 * Returns the prompt text, malloc'd and NUL-terminated (the caller frees it),
 * or NULL with tutti_last_error() set to "chat template: line L, column C:
 * reason" for a syntax error, an unsupported construct, a runtime error
 * (e.g. a raise_exception() call: "template raised an exception: MSG") or a
 * resource limit.  Thread-safe: no global state.
 * Do not tokenize this text with parse_special: message text holding
 * "<|im_end|>" would become that control token.  Prompts for a model come
 * from tutti_chat_tokenize, which keeps message text out of control tokens. */
char *tutti_chat_render(const char *tmpl, const tutti_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                        const char *bos_token, const char *eos_token);

/* As tutti_chat_render, and says where each byte of the text came from.
 * len (may be NULL) receives the text's length.  is_data (may be NULL)
 * receives a malloc'd array of *len bytes (the caller frees it; non-NULL
 * also for empty text): 1 where the byte came from the caller's data (a
 * message's role or content), 0 where the template wrote it (its literals,
 * bos_token/eos_token, numbers and other values it prints).  Data stays
 * data through every filter, method and operator: slicing, concatenation,
 * trim/split/replace keep each byte's mark; a transformation the engine
 * cannot follow byte by byte (the quoted form in tojson or a printed list)
 * marks its whole output as data.  No character of the data can change
 * where data ends: there are no in-band markers.  On error: NULL, *is_data
 * NULL. */
char *tutti_chat_render_marked(const char *tmpl, const tutti_chat_message *msgs, size_t n_msgs,
                               bool add_generation_prompt, const char *bos_token, const char *eos_token, size_t *len,
                               uint8_t **is_data);

/* The prompt of a conversation as token ids of `vocab`: tmpl rendered with
 * msgs (bos_token/eos_token = the texts of the vocabulary's BOS/EOS tokens,
 * when it has them), then tokenized with tutti_tokenize_marked, so that the
 * template's own control-token text ("<|im_start|>", "<|eot_id|>" ...)
 * becomes control tokens while no role or content ever does, whatever bytes
 * it holds.  BOS is put in front when the vocabulary asks for it and the
 * template did not write it.  Returns malloc'd ids (*n_ids of them; the
 * caller frees them), or NULL with tutti_last_error() set (the template's
 * errors as tutti_chat_render's, "chat tokenize: ..." for the rest).
 * rendered (may be NULL) receives the malloc'd rendering, for display. */
int32_t *tutti_chat_tokenize(const tutti_vocab *vocab, const char *tmpl, const tutti_chat_message *msgs, size_t n_msgs,
                             bool add_generation_prompt, int32_t *n_ids, char **rendered);

/* As tutti_chat_tokenize, with the template's variables given as a JSON
 * object (ctx_json, NUL-terminated: messages with any fields, tools,
 * add_generation_prompt, enable_thinking ...; objects become dicts, arrays
 * lists).  Every string in it, keys included, is caller data.  bos_token and
 * eos_token are the vocabulary's unless ctx_json sets them (then they are
 * data too). */
int32_t *tutti_chat_tokenize_json(const tutti_vocab *vocab, const char *tmpl, const char *ctx_json, int32_t *n_ids,
                                  char **rendered);

/* ------------------------------------------------------------------------ */
/* Model merging (src/merge/): mergekit's methods on GGUF files.
 *
 * A merge configuration is mergekit's YAML format: merge_method, base_model,
 * models (each `model: PATH` with optional `parameters:`) or slices
 * (`sources:` of `model` + `layer_range: [lo, hi)`), global `parameters:`,
 * dtype / out_dtype.  A parameter is a number or bool, a list of numbers (a
 * gradient: interpolated at t = layer / (n_layers - 1); the token embedding
 * gets t = 0, the final norm and output t = 1), or a list of
 * `{filter: S, value: V}` whose first entry with S a substring of the
 * tensor's Hugging Face name (self_attn, mlp, input_layernorm, q_proj, ...;
 * the GGUF name also matches) applies.  Lookup order: the source's
 * parameters, the slice's, the global ones (mergekit's ConfigReader).
 *
 * Methods and their parameters (mergekit's names, defaults and semantics):
 *   linear (weight; normalize = true), slerp (t; two models, base_model is
 *   the t = 0 end; lerp when the normalized tensors are (anti)colinear,
 *   |cos| > 0.9995; t = 0 and t = 1 give the endpoints exactly), nuslerp
 *   (weight; nuslerp_flatten = true, nuslerp_row_wise = false; optional
 *   base_model: slerp of the task vectors), task_arithmetic (weight; lambda,
 *   normalize = false), ties (density, weight; normalize = true: magnitude
 *   trim, sign election by the sum, disjoint mean), dare_linear, dare_ties
 *   (density, weight; rescale = true: L1 norm of the task vector restored),
 *   della, della_linear (density, epsilon = 0.15, lambda), breadcrumbs,
 *   breadcrumbs_ties (density, gamma = 0.01), model_stock (filter_wise =
 *   false; base + >= 2 models), passthrough (slices; scale).
 * Random masks are reproducible: same seed, same file.
 *
 * Every input tensor type tutti reads is dequantized to float32 one tensor at
 * a time; the result is written in out_type through tutti's quantizers (the
 * same bytes llama-quantize --pure writes from the float32 merge) while the
 * file is streamed: peak memory is a few float32 tensors.  Checked before any
 * work, each a clear error: architectures, tensor sets and shapes, token
 * lists (vocabularies) must agree; a tied output (no output.weight) counts as
 * the token embedding.  The output keeps the base model's metadata (the
 * first model's without a base), with general.name, block_count rewritten
 * for passthrough, and the merge recorded in tutti.merge.method,
 * tutti.merge.models and tutti.merge.config. */

typedef struct tutti_merge_config tutti_merge_config;

/* Parses a mergekit YAML configuration (len bytes of text; untrusted: every
 * malformed, unknown or out-of-range entry is an error naming the line).
 * Model paths are used as written.  NULL on error (tutti_last_error). */
tutti_merge_config *tutti_merge_config_parse(const char *yaml, size_t len);
/* An empty configuration for `method` (the command-line form), to be filled
 * with the calls below.  NULL for an unknown method. */
tutti_merge_config *tutti_merge_config_new(const char *method);
/* Appends a model; weight is its `weight` parameter (NAN: none). */
int tutti_merge_config_add_model(tutti_merge_config *c, const char *path, double weight);
int tutti_merge_config_set_base(tutti_merge_config *c, const char *path);
/* A global numeric parameter (t, density, lambda, epsilon, gamma, normalize
 * as 0/1, ...).  0 or TUTTI_ERR for an unknown name. */
int tutti_merge_config_set_param(tutti_merge_config *c, const char *name, double value);
void tutti_merge_config_free(tutti_merge_config *c);

typedef struct tutti_merge_params {
    const char *type; /* type of the 2-D weights: "F32", "F16", "BF16", "Q8_0", "Q4_0",
                          "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K" (any case); NULL:
                          the configuration's out_dtype / dtype, else F16.  Vectors (norms,
                          biases) stay F32; rows a block size does not divide fall back as
                          in llama-quantize (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, else F16) */
    uint64_t seed;    /* of the random masks (dare_*, della*) */
    const char *name; /* general.name of the output; NULL: "merge of ..." */
    bool verbose;     /* one line per tensor on stderr */
    /* Receives a line worth telling the user (NULL: none): the tensors
     * written in a fallback type (rows the output type's blocks do not
     * divide), once per merge, as llama-quantize warns of them. */
    tutti_notice_cb notice;
    void *notice_user;
} tutti_merge_params;

tutti_merge_params tutti_merge_default_params(void); /* type NULL, seed 0 */

/* Merges into out_path.  Refused before any work when out_path is one of
 * the inputs (the same file: device and inode after following symlinks, so
 * also another spelling, a symlink or a hard link) or cannot be written.
 * The file is written atomically: a temporary file in its folder, renamed
 * onto out_path when complete; on failure out_path is left as it was (an
 * input that is mapped is never truncated).  0 or TUTTI_ERR with
 * tutti_last_error() saying which check or tensor failed. */
int tutti_merge(const tutti_merge_config *c, const char *out_path, const tutti_merge_params *p);
/* The same GGUF file streamed to out (binary, sequential: a pipe will do),
 * e.g. stdout; a failure leaves a partial stream. */
int tutti_merge_stream(const tutti_merge_config *c, FILE *out, const tutti_merge_params *p);

/* ------------------------------------------------------------------------ */
/* Runs over MPI ranks (src/mpi/tutti_mpi.h has the design).
 *
 *   mpirun -np K tutti run -m A.gguf -m B.gguf ... [--place 0,1,1]
 *   mpirun -np K tutti generate --split-layers [N0,N1,...] -m M.gguf ...
 *   mpirun -np K tutti generate --split-experts -m MOE.gguf ...
 *
 * Without an MPI library at build time (tutti_system_info_get: mpi false)
 * every member is local and the split flags are refused with a message. */

/* Called first by main(): removes --place LIST from argv, initialises MPI
 * (MPI_THREAD_MULTIPLE) when the process was started by mpirun.  Returns -1
 * on rank 0 or without MPI (go on with the command); otherwise the exit
 * status for main to return (a member rank that served until rank 0
 * finished, or 2 for bad usage). */
int tutti_mpi_start(int *argc, char **argv);
/* Called by main() with the command's exit status on rank 0: releases the
 * member ranks and finalises MPI (skipped after a fault: a dead peer would
 * hang MPI_Finalize).  Returns the status to exit with. */
int tutti_mpi_stop(int rc);
/* On rank 0: a member rank seen dead (a failed or timed-out wait, or its
 * process gone from this host), with its members' names in members[cap]
 * (may be NULL); 0 when every rank is alive as far as rank 0 knows (and
 * without MPI).  For `tutti serve`'s /health. */
int tutti_mpi_dead_rank(char *members, size_t cap);

/* Checks the split flags as parsed (--split-layers [N0,N1,...] and
 * --split-ubatch N, cli.h CLI_SPLIT_OPTS): counts NULL = not given, "" =
 * by memory; ubatch 0 = auto.  TUTTI_OK, or TUTTI_ERR with the error set
 * (bad usage: exit 2; also any split flag in a build without MPI). */
int tutti_mpi_split_check(const char *counts, int32_t ubatch);
/* Plans the split of path over the ranks (counts or by memory; printed on
 * stderr) and loads rank 0's part.  NULL with the error set. */
tutti_model *tutti_mpi_split_load(const char *path, const tutti_model_params *params, const char *counts);
/* Loads the other ranks' parts with s's context size and n_threads each,
 * then routes s's evaluations through the ring (s owns the pipeline; freed
 * with s).  A rank that cannot load its part is an error naming it.  Does
 * nothing on one rank.  0 or TUTTI_ERR. */
int tutti_mpi_split_attach(tutti_session *s, int32_t n_threads, int32_t ubatch);

/* Ensemble members split by layers (tutti run/eval/fit/serve
 * --split-layers [COUNTS] [--split-ubatch N] [--split-member I,J]): the
 * member files to split (paths[0..n_paths); n_paths 0 = every member),
 * counts (NULL or "" = by memory) and ubatch (0 = auto) for all of them.
 * A split member occupies every rank, so --place cannot be combined
 * (the other members are placed round robin as always).  TUTTI_OK, or
 * TUTTI_ERR with the error set (bad usage: exit 2). */
int tutti_mpi_split_members(const char *counts, int32_t ubatch, const char *const *paths, int32_t n_paths);

/* Routed experts split over the ranks (--split-experts, src/mpi/experts.c):
 * every rank maps the whole file and rank r computes (and holds) experts
 * [r E / K, (r + 1) E / K) of every MoE layer; rank 0 sends each rank the
 * rows routed to its experts and sums every token's experts in rank order,
 * so the logits are the single process's bits.
 * tutti_mpi_experts_attach: session s (of the model at path) from here on;
 * the other ranks load path and serve with s's thread count (freed with
 * s).  A model without experts, more ranks than experts, or a rank that
 * cannot load: an error naming it.  Nothing to do on one rank.  0 or
 * TUTTI_ERR. */
int tutti_mpi_experts_attach(tutti_session *s, const char *path);
/* tutti_model_load for rank 0 of such a split: of the routed experts only
 * rank 0's share is placed (copied out of the mapping), the other ranks'
 * stay mapped and are never read (each rank r > 0 likewise places only
 * its share and none of the other weights), so no rank holds more than its
 * part of the experts.  Without MPI or on one rank: tutti_model_load. */
tutti_model *tutti_mpi_experts_load(const char *path, const tutti_model_params *params);
/* Ensemble members (tutti run/eval/fit/serve/generate --split-experts): on
 * keeps every member in rank 0's process and splits the experts of each
 * MoE member over all ranks (strict: a member without experts is an error,
 * else a plain local member).  --place cannot be combined (TUTTI_ERR, bad
 * usage), nor can a build without MPI. */
int tutti_mpi_experts_members(bool on, bool strict);

/* ------------------------------------------------------------------------ */
/* Models by name: the Hugging Face hub, as llama.cpp's -hf (README "Models
 * by name").  A model spec "hf://USER/MODEL[:QUANT]" or "hf://USER/MODEL/FILE"
 * may stand wherever a GGUF path does: tutti_model_load, tutti_vocab_load,
 * tutti_file_meta_str, ensemble members (tutti_ensemble_new, ensemble files),
 * merge configurations.  It is resolved to a file of the local cache,
 * downloading what is missing (src/hub/hub.h has the protocol and the cache
 * layout); each spec is resolved once per process. */

typedef struct tutti_hub_params {
    const char *endpoint;  /* NULL: $MODEL_ENDPOINT, else $HF_ENDPOINT, else https://huggingface.co/ */
    const char *token;     /* NULL: $HF_TOKEN; sent as "Authorization: Bearer", never printed */
    const char *cache_dir; /* NULL: $LLAMA_CACHE, $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub,
                              $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub */
    bool offline;          /* the cache only, no network (also $LLAMA_OFFLINE or $HF_HUB_OFFLINE = 1) */
    bool progress;         /* download progress on stderr (default true) */
} tutti_hub_params;

tutti_hub_params tutti_hub_default_params(void);
/* Settings for every later resolution in this process (strings copied);
 * NULL restores the defaults.  Forgets what was resolved so far. */
int tutti_hub_configure(const tutti_hub_params *params);
/* true for "hf://..." */
bool tutti_is_hub_spec(const char *s);
/* 0 when s is a well-formed spec (hf://REPO, hf://REPO:QUANT, hf://REPO/FILE;
 * also without "hf://"), else TUTTI_ERR with an error saying the form (a
 * command line's usage error).  Asks nothing of the network. */
int tutti_hub_spec_check(const char *s);
/* The local path of a spec's file (a split model: its first part, every part
 * beside it), as a malloc'd string the caller frees; anything that is not a
 * spec is returned as a copy.  QUANT: the file whose path holds the tag
 * followed by '.' or '-', in any case; none: Q4_K_M, else Q8_0, else the
 * first model file.  Online: the repository's listing, then each missing
 * file downloaded (resumed with HTTP Range after a cut, its sha256 checked
 * before it is used, renamed into place when complete; one process at a time
 * per file).  Offline, or when the hub cannot be reached (a warning says
 * so): the cache.  NULL on error: a malformed spec, 401/403 (set HF_TOKEN),
 * 404, a quant tag the repository lacks (the message lists its tags), a
 * corrupted download, nothing cached while offline. */
char *tutti_hub_resolve(const char *spec);

/* The cache folder in force (params, else the variables above) into buf;
 * 0, or TUTTI_ERR when it does not fit or there is none. */
int tutti_hub_cache_dir(char *buf, size_t cap);

/* One file of the cache. */
typedef struct tutti_hub_entry {
    char repo[260];   /* USER/MODEL */
    char file[516];   /* its path in the repository */
    char tag[68];     /* quant tag from the name, upper case ("" none) */
    char commit[44];  /* the snapshot */
    char path[4608];  /* on disk (the snapshot's link) */
    int64_t size;     /* bytes */
    int64_t last_use; /* Unix seconds: the last resolution that used it (or its download) */
    bool current;     /* in the snapshot refs/main names */
} tutti_hub_entry;

/* Every file of the cache, by repository then path (*entries malloc'd, the
 * caller frees; an absent cache is an empty list).  0 or TUTTI_ERR. */
int tutti_hub_list(tutti_hub_entry **entries, int32_t *n);
/* Removes "USER/MODEL" (the whole repository), "USER/MODEL:QUANT" (its files
 * of that tag) or a FILE (a path as listed, its base name, or USER/MODEL/FILE;
 * a split model's part removes all its parts), then the blobs nothing links
 * to any more.  *n_removed: files removed; TUTTI_ERR when nothing matches. */
int tutti_hub_remove(const char *what, int32_t *n_removed);

/* Evolutionary merge (tutti merge --search; mergekit-evolve, Akiba et al.
 * 2024, arXiv:2403.13187): CMA-ES (Hansen's tutorial, arXiv:1604.00772)
 * over the method's parameters per model and per layer group — weight
 * (and density for ties, dare_*, breadcrumbs*, della*) of every model,
 * slerp's t, sce's select_topk or nearswap's t per group — each candidate
 * merged in memory and scored, as a one-member ensemble, by
 * tutti_ensemble_eval_bpb on text (bits per byte, lower is better) or
 * tutti_ensemble_eval_choices on items (accuracy).  Nothing is written.
 * Layer group g of G holds layers [g L / G, (g + 1) L / G); the token
 * embedding takes group 0's values, the final norm and output the last's.
 * Weights range over [0, 1], densities over [0, 1] (della: [0.2, 0.8]),
 * slerp's t and select_topk over [0, 1], nearswap's t over [0, 0.1]; values
 * have 4 decimals.  Deterministic: one seed, one result.  Random masks
 * (dare_*, della*) use tutti_merge's default seed 0, so the configuration
 * alone reproduces the merge. */
/* The objectives over several texts: each text's bits per byte divided by
 * the start point's on it (RATIO) or by the lowest of the input models'
 * (base and -m) on it (BEST: how far the candidate is from the best
 * specialist of that text), then the mean or the max over the texts. */
enum { TUTTI_SEARCH_MEAN_RATIO = 0, TUTTI_SEARCH_MAX_RATIO = 1, TUTTI_SEARCH_MEAN_BEST = 2, TUTTI_SEARCH_MAX_BEST = 3 };
typedef struct tutti_merge_search_params {
    const char *method;        /* mergekit method (default task_arithmetic) */
    const char *base;          /* base_model, or NULL (linear, nuslerp, multislerp only) */
    const char *const *models; /* [n_models] the other models (1..16), paths as written */
    int32_t n_models;
    int32_t layer_groups; /* G (default 1; at most the layer count) */
    int32_t evals;        /* candidates scored, the start point included (default 100) */
    uint64_t seed;        /* of CMA-ES's samples */
    const char *text;     /* score: bits per byte on text[0..text_len), or */
    size_t text_len;
    /* several texts (text NULL), each a task: the score is the mean (or the
     * max, objective) over the texts of the candidate's bits per byte
     * divided by the start point's (or the best input model's) on that
     * text, so that each text weighs the same whatever its length and its
     * scale; with RATIO, 1 at the start point */
    const char *const *texts; /* [n_texts] (2..16) */
    const size_t *text_lens;
    int32_t n_texts;
    int32_t objective;              /* TUTTI_SEARCH_MEAN_RATIO (default), _MAX_RATIO, _MEAN_BEST, _MAX_BEST */
    double *ref_bpb;                /* out, may be NULL: [n_texts] the best input model's (*_BEST only) */
    double *best_bpb;               /* out, may be NULL: [n_texts] the best candidate's bits per byte */
    double *start_bpb;              /* out, may be NULL: [n_texts] the start point's */
    const tutti_choice_item *items; /* accuracy on items[0..n_items) (text NULL) */
    int32_t n_items;
    const char *type;  /* output type: "F32", "F16" (default) or "BF16" (out_dtype) */
    int32_t n_threads; /* 0 = online CPUs */
    /* one line per generation (progress and the best score so far); may be NULL */
    void (*progress)(const char *line, void *user);
    void *progress_user;
} tutti_merge_search_params;

tutti_merge_search_params tutti_merge_search_default_params(void);

/* Runs the search; returns the best candidate as a mergekit YAML
 * configuration (malloc'd, NUL-terminated: merge_method, base_model,
 * out_dtype and one slice per layer group with every source's layer_range
 * and parameters), which tutti_merge_config_parse + tutti_merge turn into
 * the model that was scored, and its score in *best_score (bits per byte,
 * the mean or max ratio over several texts, or accuracy).  NULL with tutti_last_error() on an error (bad parameters, a
 * method without searchable parameters, a merge or evaluation failing). */
char *tutti_merge_search(const tutti_merge_search_params *p, double *best_score);

#ifdef __cplusplus
}
#endif
#endif
