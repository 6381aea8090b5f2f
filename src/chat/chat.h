/* Chat-template rendering, internal entry points (public: tutti_chat_render
 * in include/tutti.h). */
#ifndef TUTTI_CHAT_CHAT_H
#define TUTTI_CHAT_CHAT_H

#include <stddef.h>

/* Renders template tmpl[0..len) with the variables of a JSON object
 * (ctx_json, NUL-terminated; NULL = no variables): JSON objects become
 * dicts, arrays lists, numbers int or float, null none.  This is how callers
 * pass what tutti_chat_render cannot express (tools, content parts,
 * enable_thinking ...).  Returns malloc'd text or NULL + tutti_last_error. */
char *tutti_chat_render_json(const char *tmpl, size_t len, const char *ctx_json);

#endif
