/* llama-server's native API in `tutti serve` (native.c), so that a tutti
 * serve can be a remote member of another tutti (src/fusion/member_remote.c
 * speaks it) or of anything written for llama-server:
 *   GET  /props        {"default_generation_settings": {"n_ctx": N, ...}, ...}
 *   POST /tokenize     {"content", "add_special", "with_pieces", "model"} -> {"tokens": [...]}
 *   POST /detokenize   {"tokens": [...], "model"} -> {"content": "..."}
 *   POST /completion   {"prompt": ids or text, "n_probs": K, "n_predict": 0|1, "model"}
 *                      -> {"content", "completion_probabilities": [{id, token, bytes, logprob,
 *                          top_logprobs: [{id, token, bytes, logprob}] }], "timings": {...}, ...}
 * The distribution is the model's own (log-softmax of its logits, no
 * samplers: llama-server's post_sampling_probs false); n_predict is at most
 * 1 (this endpoint serves the next token's distribution: a remote member's
 * step); "model" names a single served model (default: the only one, or a
 * one-member "default"). */
#ifndef TUTTI_SERVER_NATIVE_H
#define TUTTI_SERVER_NATIVE_H

#include "server/server.h"

/* The file index of a request's "model" (NULL: the default), or -1 with a
 * message (404 in *status when unknown, 400 when an ensemble). */
int srv_native_model(const srv_registry *reg, const char *model, int *status, char *err, size_t cap);
/* /props, /tokenize, /detokenize bodies: malloc'd JSON, or NULL with
 * *status and err (and *param). */
char *srv_native_props(const srv_server *s);
char *srv_native_tokenize(const srv_registry *reg, const char *body, size_t n, int *status, char *err, size_t cap);
char *srv_native_detokenize(const srv_registry *reg, const char *body, size_t n, int *status, char *err, size_t cap);
/* Parses a /completion body into j (nat_file, nat_ids, n_probs).  0 or a
 * status with err. */
int srv_native_parse_completion(const srv_registry *reg, const char *body, size_t n, srv_job *j, char *err, size_t cap);
/* The /completion answer for the next-token logits[n_vocab] of file f after
 * n_prompt tokens (n_eval of them evaluated now, in eval_s seconds). */
char *srv_native_completion_json(srv_file *f, const float *logits, int32_t n_probs, int32_t n_predict, int32_t n_prompt,
                                 int32_t n_eval, double eval_s);

#endif
