/* Response bodies of `tutti serve` (format.c). All return malloc'd JSON. */
#ifndef TUTTI_SERVER_FORMAT_H
#define TUTTI_SERVER_FORMAT_H

#include "server/server.h"

/* s[0..n) as valid UTF-8 (each invalid byte and NUL -> U+FFFD), NUL-terminated. */
char *srv_utf8_clean(const char *s, size_t n);
/* OpenAI's error object {"error": {message, type, param, code}}. */
char *srv_error_json(int status, const char *message, const char *param, const char *code);
/* One streamed chunk of choice `choice`: text (may be NULL), finish_reason
 * (NULL: null), role: the chat delta carries role "assistant"; with
 * logprobs, the choice's entries from lp.sent to lp_to (lp.sent is then
 * advanced: the chunk is the one that carries them). */
char *srv_chunk_json(srv_job *j, int choice, const char *text, size_t n, const char *finish, bool role, size_t lp_to);
char *srv_usage_chunk_json(const srv_job *j);
/* A chunk with choice c's tool calls (j->tool_calls[c]) as OpenAI's
 * deltas: each call whole with its index, id, name and arguments. */
char *srv_tool_chunk_json(const srv_job *j, int c, bool role);
/* The whole (non-streamed) response. */
char *srv_final_json(const srv_job *j);

#endif
