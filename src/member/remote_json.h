/* Parsing of a model server's answers for remote members (remote_json.c,
 * used by remote.c), apart from the HTTP and the member, so that
 * fuzz/fuzz_remote.c can feed it any bytes.  Every answer is resp[0..n): the bytes as they came, NOT
 * NUL-terminated; nothing here reads past resp + n.  Errors name `where`
 * (the request's URL, e.g. "http://127.0.0.1:8080/completion"). */
#ifndef TUTTI_MEMBER_REMOTE_JSON_H
#define TUTTI_MEMBER_REMOTE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

/* The APIs (spec api=): llama-server's native /completion, OpenAI-style
 * /v1/completions. */
enum { FUSION_REMOTE_API_AUTO, FUSION_REMOTE_API_LLAMA, FUSION_REMOTE_API_OPENAI };

/* What reading a next-token answer needs of the member's vocabulary. */
typedef struct fusion_remote_vocab {
    const tutti_vocab *vocab; /* token texts, for answers that name tokens by text; NULL: no text matches */
    int32_t n_vocab;          /* ids are in [0, n_vocab) */
    uint8_t *seen;            /* [n_vocab] scratch: ids the last answer gave */
    /* ids sorted by piece, built at the first lookup by text */
    int32_t *by_piece;
    char *pieces;
    int64_t *piece_off; /* [n_vocab + 1] */
} fusion_remote_vocab;

/* vocab (may be NULL) must have n_vocab tokens.  0, or TUTTI_ERR (out of
 * memory).  Free with fusion_remote_vocab_free (also after a failed init). */
int fusion_remote_vocab_init(fusion_remote_vocab *rv, const tutti_vocab *vocab, int32_t n_vocab);
void fusion_remote_vocab_free(fusion_remote_vocab *rv);
/* The id whose piece (tutti_token_to_piece, special tokens rendered) is
 * exactly s[0..n); where several have it, the highest.  -1 when none (or
 * no vocabulary, or out of memory). */
int32_t fusion_remote_piece_id(fusion_remote_vocab *rv, const char *s, size_t n);

typedef struct fusion_remote_next {
    int32_t k;        /* entries read (tokens given a log-probability) */
    double mass;      /* their summed probability, exp(logprob) each */
    double server_ms; /* the server's timings.prompt_ms + predicted_ms (0 when not said) */
} fusion_remote_next;

/* Reads the next-token answer (HTTP status 200) of api (LLAMA: /completion's
 * completion_probabilities[0].top_logprobs[] by id; OPENAI:
 * choices[0].logprobs.content[0].top_logprobs[] by id, llama-server's /v1
 * form, or choices[0].logprobs.top_logprobs[0] {token text: logprob},
 * classic OpenAI's, texts looked up in rv) into out[rv->n_vocab]: each
 * given token's log-probability (clamped to <= 0), -inf for the others; the
 * given tokens are marked in rv->seen.  A token text the vocabulary lacks is
 * skipped (its mass counts as approximated).  scan (LLAMA only): try the
 * fast scanner first (fusion_remote_scan_llama), the full JSON parser when
 * it declines.  0, or TUTTI_ERR with an error naming where: not JSON, no
 * top log-probabilities, an entry without id or logprob, an id out of range
 * or listed twice, a logprob > 1e-3 or NaN, no token of the vocabulary. */
int fusion_remote_parse_next(fusion_remote_vocab *rv, int api, bool scan, const char *where, const char *resp, size_t n,
                             float *out, fusion_remote_next *info);
/* The answer read by fusion_remote_parse_next as a distribution: its
 * probabilities sum to 1 within FUSION_REMOTE_MASS_TOL when it gives every
 * token (k == n_vocab; else the answer is refused: a server whose numbers
 * sum to 512 is not giving probabilities), and to at most 1 within the
 * tolerance for a top-k answer; a top-k answer that sums to more is
 * renormalised (out[] shifted by -log(mass), info->mass then 1) and
 * *renormalised set, for the member to warn once.  0, or TUTTI_ERR naming
 * where. */
#define FUSION_REMOTE_MASS_TOL 1e-3
int fusion_remote_check_next(const fusion_remote_vocab *rv, const char *where, float *out, fusion_remote_next *info,
                             bool *renormalised);
/* The fast scanner of llama-server's /completion answer alone: 0 when it
 * read the answer (out, rv->seen and info as fusion_remote_parse_next; the
 * full parser gives the same for the same bytes), -1 when it declines
 * (anything unusual: the full parser then decides).  Sets no error. */
int fusion_remote_scan_llama(fusion_remote_vocab *rv, const char *resp, size_t n, float *out, fusion_remote_next *info);

/* A short, printable excerpt of resp[0..n) for error messages (at most 120
 * bytes, anything outside ASCII 32..126 as '.'), into out[cap]. */
void fusion_remote_excerpt(const char *resp, size_t n, char *out, size_t cap);

/* /tokenize's answer {"tokens": [id | {"id": id, ...}, ...]} compared with
 * want[0..n_want): 1 the same ids, 0 not (*n_got: how many it has),
 * TUTTI_ERR not JSON or no "tokens" array. */
int fusion_remote_parse_tokenize(const char *where, const char *resp, size_t n, const int32_t *want, int32_t n_want,
                                 int32_t *n_got);
/* /detokenize's answer {"content": "..."}: 1 when content ends with
 * text[0..len), 0 when not (or no content string), TUTTI_ERR not JSON. */
int fusion_remote_parse_detokenize(const char *where, const char *resp, size_t n, const char *text, size_t len);
/* /props: *llama true when it has llama-server's default_generation_settings
 * object, *n_ctx its n_ctx (0 when not said).  0, or -1 when not JSON (no
 * error set: the server is then no llama-server). */
int fusion_remote_parse_props(const char *resp, size_t n, bool *llama, int64_t *n_ctx);
/* /v1/models: meta.n_vocab and meta.n_ctx of the entry whose id is model (""
 * = the first entry); 0 each when not said.  0, or -1 when not JSON. */
int fusion_remote_parse_models(const char *resp, size_t n, const char *model, int64_t *n_vocab, int64_t *n_ctx);

#endif
