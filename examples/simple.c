/* The smallest program against libtutti: greedy generation with one model.
 * Build: cc simple.c $(pkg-config --cflags --libs tutti) -o simple
 * Run:   ./simple MODEL.gguf "Once upon a time" */
#include <stdio.h>
#include <string.h>
#include <tutti.h>

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: %s MODEL.gguf PROMPT\n", argv[0]), 2;
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *model = tutti_model_load(argv[1], &mp);
    if (!model) return fprintf(stderr, "%s\n", tutti_last_error()), 1;
    tutti_session_params sp = tutti_session_default_params();
    tutti_session *s = tutti_session_new(model, &sp);
    const tutti_vocab *vocab = tutti_model_vocab(model);
    int32_t ids[512];
    int32_t n = tutti_tokenize(vocab, argv[2], strlen(argv[2]), true, false, ids, 512);
    for (int i = 0; s && n > 0 && i < 32 && tutti_session_eval(s, ids, n, NULL) == TUTTI_OK; i++) {
        const float *logits = tutti_session_logits(s);
        int32_t best = 0;
        for (int32_t t = 1; t < tutti_model_n_vocab(model); t++) best = logits[t] > logits[best] ? t : best;
        if (tutti_vocab_is_eog(vocab, best)) break;
        char piece[64];
        int32_t len = tutti_token_to_piece(vocab, best, false, piece, sizeof piece);
        fwrite(piece, 1, len > 0 ? (size_t)len : 0, stdout);
        ids[0] = best, n = 1;
    }
    printf("\n");
    tutti_session_free(s);
    tutti_model_free(model);
    return 0;
}
