/* Fuzz harness of the chat-template engine (src/chat/); see fuzz/README.md
 * for the pattern.
 *
 * Input: template bytes, optionally followed by a NUL byte and a JSON object
 * of variables.  Without the JSON part the template is rendered through the
 * public API with a fixed conversation (system/user/assistant/user, with
 * think tags and non-ASCII text), BOS/EOS tokens and add_generation_prompt,
 * which is how real templates are used.  Promises checked (trap when broken):
 * the engine returns NUL-terminated text or NULL with a non-empty
 * "chat template: ..." message, and rendering twice gives the same result
 * (no hidden state).  Crashes, leaks, undefined behaviour and timeouts are
 * the other findings. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "tutti.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

static char *render(const char *buf, size_t tlen, size_t size)
{
    if (tlen < size)
        return tutti_chat_render_json(buf, tlen, buf + tlen + 1);
    static const tutti_chat_message msgs[] = {
        {"system", "You are helpful."},
        {"user", "Hi <think>\n"},
        {"assistant", "<think>\nhm\n</think>\n\nHello!"},
        {"user", "Bye \xc3\xa9\xf0\x9f\x98\x80"},
    };
    return tutti_chat_render(buf, msgs, 4, true, "<s>", "</s>");
}

int tutti_fuzz_chat_one(const uint8_t *data, size_t size)
{
    /* NUL-terminated copy: the template ends at the first NUL, the optional
     * JSON variables follow it */
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    buf[size] = 0;
    size_t tlen = strlen(buf);
    char *out = render(buf, tlen, size);
    if (out) {
        char *again = render(buf, tlen, size);
        /* templates may call strftime_now(), the only non-deterministic input */
        CHECK(again != NULL);
        if (!strstr(buf, "strftime_now"))
            CHECK(strcmp(out, again) == 0);
        free(again);
    } else {
        const char *e = tutti_last_error();
        CHECK(e && strncmp(e, "chat template: ", 15) == 0 && e[15] != 0);
    }
    free(out);
    free(buf);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tutti_fuzz_chat_one(data, size);
    return 0;
}
#endif
