/* Remote members (remote.c): a fusion_member whose next-token
 * distribution comes from a model server over HTTP.
 *
 * Spec (where a model path goes: -m, ensemble files):
 *   URL#MODEL;vocab=PATH[;api=llama|openai][;top=K][;rest=uniform|renorm]
 *                      [;timeout=MS][;on_fail=stop|leave]
 * URL is http://host:port (or https); MODEL is the server's model name
 * (sent as "model" on the OpenAI API, may be empty); vocab=PATH is a GGUF
 * file with the server's tokenizer (the model itself or a vocab-only file),
 * checked against the server's /tokenize and /detokenize at start.  See
 * docs/remote-members.md. */
#ifndef TUTTI_MEMBER_REMOTE_H
#define TUTTI_MEMBER_REMOTE_H

#include "member/member.h"

/* true when path names a remote member (starts with http:// or https://). */
bool fusion_is_remote_spec(const char *path);

/* spec with a relative vocab=PATH made relative to dir (an ensemble
 * file's folder, "" = unchanged), into out[cap].  -1 + error if too long. */
int fusion_remote_spec_resolve(const char *spec, const char *dir, char *out, size_t cap);

/* Connects to the server of spec, loads and verifies the vocabulary.
 * n_ctx > 0 caps the context (never more tokens than that are sent), else
 * the server's context is used.  NULL + error naming the URL when the server
 * is down, answers garbage, or its tokenizer differs from vocab=PATH. */
fusion_member *fusion_member_remote_new(const char *spec, int32_t n_ctx);

/* A remote member (given on_fail=leave) that lost its server: it answers
 * uniform logits from then on and must get weight 0.  false for others. */
bool fusion_member_has_left(const fusion_member *m);

typedef struct fusion_remote_stats {
    int64_t n_requests;     /* next-token requests answered */
    double t_request_s;     /* wall time of those requests (ours: send, wait, parse) */
    double t_server_s;      /* the server's own compute for them (its "timings") */
    double t_client_s;      /* of t_request_s, in our code: writing the request, parsing the answer */
    double approx_mass;     /* summed mass not given by the server (1 - sum of top-k) */
    double approx_mass_max; /* largest of those */
    int32_t top_k;          /* probabilities asked per request */
} fusion_remote_stats;
/* Statistics of a remote member; -1 for other kinds. */
int fusion_member_remote_stats(const fusion_member *m, fusion_remote_stats *out);

/* The vocabulary hash of spec (fusion_member_vocab_hash): its vocab=PATH's
 * once the server agrees with it, else one of its own.  Asks the server
 * without a note on stderr.  TUTTI_ERR + error as fusion_member_remote_new. */
int fusion_member_remote_vocab_hash(const char *spec, uint64_t *out);

#endif
