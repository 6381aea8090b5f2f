/* libFuzzer harness for the chat-template engine (src/chat/).
 *
 * Input: template bytes, optionally followed by a NUL byte and a JSON object
 * of variables.  Without the JSON part the template is rendered through the
 * public API with a fixed conversation (system/user/assistant/user), BOS/EOS
 * tokens and add_generation_prompt, which is how real templates are used.
 * The engine must return text or NULL + error for any input: crashes, leaks,
 * undefined behaviour and timeouts are the bugs this finds.
 *
 * Build (clang), with SRC the files src/chat/[a-z_]+.c and src/util/error.c:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *   fuzz/fuzz_chat.c $SRC -lm -o fuzz_chat
 * Run: ./fuzz_chat fuzz/corpus/chat -max_total_time=300 -max_len=8192 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "tutti.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    size_t tlen = strlen(buf); /* template ends at the first NUL */
    char *out;
    if (tlen < size) {
        out = tutti_chat_render_json(buf, tlen, buf + tlen + 1);
    } else {
        static const tutti_chat_message msgs[] = {
            {"system", "You are helpful."},
            {"user", "Hi <think>\n"},
            {"assistant", "<think>\nhm\n</think>\n\nHello!"},
            {"user", "Bye \xc3\xa9\xf0\x9f\x98\x80"},
        };
        out = tutti_chat_render(buf, msgs, 4, true, "<s>", "</s>");
    }
    if (out) {
        /* the result is a NUL-terminated string */
        volatile size_t n = strlen(out);
        (void)n;
    } else {
        const char *e = tutti_last_error();
        if (!e || !*e)
            abort(); /* every failure must carry a message */
    }
    free(out);
    free(buf);
    return 0;
}
