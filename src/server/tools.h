/* Tool calling, the model side (tools.c): formats, the chat template's
 * variables, the grammar of a call, the calls read back. */
#ifndef TUTTI_SERVER_TOOLS_H
#define TUTTI_SERVER_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "server/request.h"

enum { SRV_TF_HERMES, SRV_TF_LLAMA3, SRV_TF_MISTRAL, SRV_TF_GENERIC };

/* The format a chat template (NULL: none) speaks, and its name. */
int srv_tools_format(const char *tmpl);
const char *srv_tools_format_name(int fmt);
/* true when the conversation needs the JSON form of the template's
 * variables (tools in use, or a message with tool fields). */
bool srv_tools_in_chat(const srv_request *r);
/* The template's variables as JSON (tutti_chat_tokenize_json): messages
 * with their tool fields, tools (unless tool_choice is "none"; the generic
 * format describes them in a system message instead),
 * add_generation_prompt; malloc'd, NULL when out of memory. */
char *srv_tools_ctx_json(const srv_request *r, int fmt);
/* The grammar of the answer for tools in use (see tools.c), NULL with err. */
tutti_grammar *srv_tools_grammar(const srv_tools *t, int fmt, char *err, size_t cap);
/* Reads the calls from a generated text: 1 with *calls_json (OpenAI's
 * tool_calls array: id, type, function.name, function.arguments as JSON
 * text) and *content (the text beside them, or NULL); 0 when the text is no
 * call (*content: the text); -1 out of memory.  Both malloc'd. */
/* true once the first bytes of an answer show it is text, not a call
 * (the grammar's "auto" text starts with another byte than a call). */
bool srv_tools_is_text(int fmt, const char *text, size_t n);
int srv_tools_answer(const char *text, size_t n, int fmt, const srv_tools *t, char **calls_json, char **content);

#endif
