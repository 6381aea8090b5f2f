/* Fuzz harness of the grammar layer (src/grammar/); see fuzz/README.md for
 * the pattern.
 *
 * Input: one mode byte (even: GBNF, odd: JSON schema), the grammar text up
 * to a NUL byte, then text fed to the matcher.  Promises checked (trap when
 * broken): parsing gives a grammar or NULL with a "grammar: ..." / "json
 * schema: ..." message; the matcher accepts a prefix of the text; in the
 * state reached, allowed_bytes agrees with accepting each byte alone, and
 * the token mask over a small fixed vocabulary agrees with accepting each
 * piece, with the default thresholds (trie scans) and with the run path
 * forced wherever it applies (src/grammar/run_mask.c).  Crashes, leaks, undefined behaviour and timeouts are the other
 * findings. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "tutti.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static const char *const k_pieces[] = {"a",
                                       "ab",
                                       "{",
                                       "\"",
                                       "\"a",
                                       " ",
                                       "1",
                                       "12",
                                       "\xc3",
                                       "\xa9",
                                       "\xc3\xa9",
                                       "-",
                                       ":",
                                       ",",
                                       "[",
                                       "]",
                                       "}",
                                       "\\",
                                       "\n",
                                       "x\"",
                                       "\xe4\xb8\xad",
                                       "aaaa",
                                       "abcab",
                                       "    ",
                                       "1234",
                                       "\"\"",
                                       "a\",",
                                       "\xc3\xa9\xc3",
                                       "\xe4\xb8",
                                       "a\xe4\xb8\xad\xe4",
                                       "\\n",
                                       "\\\"",
                                       "aaaaaaaaaaaa",
                                       ""};
#define N_PIECES (int32_t)(sizeof k_pieces / sizeof k_pieces[0])

int tutti_fuzz_grammar_one(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    bool schema = data[0] & 1;
    const char *txt = (const char *)data + 1;
    size_t n = size - 1;
    const char *nul = memchr(txt, 0, n);
    size_t glen = nul ? (size_t)(nul - txt) : n;
    const char *feed = nul ? nul + 1 : txt + n;
    size_t flen = nul ? n - glen - 1 : 0;
    tutti_grammar *g = schema ? tutti_grammar_from_json_schema(txt, glen) : tutti_grammar_parse(txt, glen);
    if (!g) {
        const char *e = tutti_last_error();
        CHECK(!strncmp(e, "grammar", 7) || !strncmp(e, "json schema", 11));
        return 0;
    }
    tutti_grammar_matcher *m = tutti_grammar_matcher_new(g), *c = tutti_grammar_matcher_new(g);
    if (m && c) {
        size_t k = tutti_grammar_matcher_accept_prefix(m, feed, flen);
        CHECK(k <= flen);
        bool al[257];
        if (tutti_grammar_matcher_allowed_bytes(m, al) == 0) {
            CHECK(al[256] == tutti_grammar_matcher_is_complete(m));
            bool any = false;
            for (int b = 0; b < 256; b++) {
                tutti_grammar_matcher_reset(c);
                char ch = (char)b;
                bool ok = tutti_grammar_matcher_accept(c, feed, k) == 0 && tutti_grammar_matcher_accept(c, &ch, 1) == 0;
                CHECK(ok == al[b]);
                any |= ok;
            }
            CHECK(any == tutti_grammar_matcher_can_continue(m));
        }
        int32_t lens[N_PIECES];
        bool eog[N_PIECES] = {0};
        for (int32_t i = 0; i < N_PIECES; i++) lens[i] = (int32_t)strlen(k_pieces[i]);
        eog[N_PIECES - 1] = true;
        tutti_grammar_vocab *gv = tutti_grammar_vocab_from_pieces(N_PIECES, k_pieces, lens, eog);
        int32_t saved = gm_run_min_nodes;
        for (int pass = 0; pass < 2 && gv; pass++) {
            /* pass 1: the run path wherever a state has a class, on a fresh
             * matcher (m has its masks cached) */
            tutti_grammar_matcher *mm = m;
            if (pass == 1) {
                gm_run_min_nodes = 0;
                mm = tutti_grammar_matcher_new(g);
                if (!mm) break;
                CHECK(tutti_grammar_matcher_accept_prefix(mm, feed, k) == k);
            }
            float row[N_PIECES];
            for (int32_t i = 0; i < N_PIECES; i++) row[i] = 0;
            if (tutti_grammar_matcher_mask(mm, gv, row) >= 0)
                for (int32_t i = 0; i < N_PIECES; i++) {
                    bool want;
                    if (eog[i]) want = tutti_grammar_matcher_is_complete(m);
                    else {
                        tutti_grammar_matcher_reset(c);
                        want = tutti_grammar_matcher_accept(c, feed, k) == 0 &&
                               tutti_grammar_matcher_accept(c, k_pieces[i], (size_t)lens[i]) == 0;
                    }
                    CHECK(want == (row[i] > -INFINITY));
                }
            if (mm != m) tutti_grammar_matcher_free(mm);
        }
        gm_run_min_nodes = saved;
        tutti_grammar_vocab_free(gv);
    }
    tutti_grammar_matcher_free(m);
    tutti_grammar_matcher_free(c);
    tutti_grammar_free(g);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return tutti_fuzz_grammar_one(data, size); }
#endif
