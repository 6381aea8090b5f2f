/* Chat-template rendering, internal entry points (public: tutti_chat_render
 * in include/tutti.h). */
#ifndef TUTTI_CHAT_CHAT_H
#define TUTTI_CHAT_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

/* Renders template tmpl[0..len) with the variables of a JSON object
 * (ctx_json, NUL-terminated; NULL = no variables): JSON objects become
 * dicts, arrays lists, numbers int or float, null none.  This is how callers
 * pass what tutti_chat_render cannot express (tools, content parts,
 * enable_thinking ...).  Returns malloc'd text or NULL + tutti_last_error. */
char *tutti_chat_render_json(const char *tmpl, size_t len, const char *ctx_json);

/* As tutti_chat_render_json, with bos_token/eos_token set first as template
 * text (NULL: not set; a key of the JSON overrides them, as data) and the
 * data marks of tutti_chat_render_marked: every string of the JSON (values
 * and keys) is caller data.  *out_len receives the text's length (it may
 * hold NUL bytes from "\u0000"). */
char *tutti_chat_render_json_marked(const char *tmpl, size_t len, const char *ctx_json, const char *bos_token,
                                    const char *eos_token, size_t *out_len, uint8_t **is_data);

#endif
