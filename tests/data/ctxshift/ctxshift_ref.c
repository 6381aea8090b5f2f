// Reference for tutti's context shift (tests/test_ctx_shift.c): llama.cpp's
// own, as llama-completion --context-shift does it (tools/main: before a
// token is evaluated with n_past + 1 >= n_ctx, keep n_keep positions, drop
// n_discard = (n_past - n_keep) / 2 with llama_memory_seq_rm and move the
// rest down with llama_memory_seq_add, whose K-shift re-rotates the keys).
// Greedy decoding (argmax of the raw logits, end-of-generation tokens left
// out as --ignore-eos does) from a prompt with BOS.
// Writes OUT.ids (the prompt's and the generated ids, comma-separated, and a
// line with the steps whose logits follow) and OUT.logits.f32 (float32
// [n_rows][n_vocab], the logits of each listed step: row s = the logits the
// s-th generated token was drawn from).
// Built and run by make_refs.sh inside the oracle chroot.
#include <llama.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level l, const char *t, void *u) {
    (void)l;
    (void)t;
    (void)u;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: ctxshift_ref MODEL PROMPT N_CTX N_GEN STEPS(a,b,c) OUT\n");
        return 2;
    }
    const char *model_path = argv[1], *prompt = argv[2], *out = argv[6];
    int n_ctx = atoi(argv[3]), n_gen = atoi(argv[4]);
    int steps[256], n_steps = 0;
    for (char *s = strtok(argv[5], ","); s && n_steps < 256; s = strtok(NULL, ",")) steps[n_steps++] = atoi(s);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_ubatch = n_ctx;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx || (int)llama_n_ctx(ctx) != n_ctx) {
        fprintf(stderr, "context of %d tokens not available (llama.cpp pads to 256)\n", n_ctx);
        return 1;
    }
    llama_memory_t mem = llama_get_memory(ctx);
    int *ids = malloc(sizeof(int) * (size_t)(n_ctx + n_gen));
    int n = llama_tokenize(vocab, prompt, (int)strlen(prompt), ids, n_ctx, true, false);
    if (n <= 0 || n > n_ctx - 4) return 1;
    const int n_keep = 1; /* llama-completion's --keep 0 plus BOS */
    int n_past = 0, n_prompt = n;
    FILE *fl = fopen(strcat(strcpy(malloc(strlen(out) + 16), out), ".logits.f32"), "wb");
    llama_token *batch = malloc(sizeof(llama_token) * (size_t)(n_ctx + n_gen));
    for (int i = 0; i < n; i++) batch[i] = ids[i];
    int n_batch = n;
    for (int g = 0; g < n_gen; g++) {
        if (n_past + n_batch >= n_ctx) { /* the context shift */
            const int n_left = n_past - n_keep, n_discard = n_left / 2;
            llama_memory_seq_rm(mem, 0, n_keep, n_keep + n_discard);
            llama_memory_seq_add(mem, 0, n_keep + n_discard, n_past, -n_discard);
            n_past -= n_discard;
        }
        if (llama_decode(ctx, llama_batch_get_one(batch, n_batch))) return 1;
        n_past += n_batch;
        const float *lg = llama_get_logits_ith(ctx, -1);
        for (int k = 0; k < n_steps; k++)
            if (steps[k] == g) fwrite(lg, sizeof(float), (size_t)n_vocab, fl);
        int best = -1; /* as llama-completion --ignore-eos: never an end-of-generation token */
        for (int v = 0; v < n_vocab; v++)
            if (!llama_vocab_is_eog(vocab, v) && (best < 0 || lg[v] > lg[best])) best = v;
        ids[n++] = best;
        batch[0] = best;
        n_batch = 1;
    }
    fclose(fl);
    FILE *fi = fopen(strcat(strcpy(malloc(strlen(out) + 16), out), ".ids"), "w");
    for (int i = 0; i < n; i++) fprintf(fi, "%s%d", i ? "," : "", ids[i]);
    fprintf(fi, "\nprompt %d\nsteps", n_prompt);
    for (int k = 0; k < n_steps; k++) fprintf(fi, "%s%d", k ? "," : " ", steps[k]);
    fprintf(fi, "\n");
    fclose(fi);
    return 0;
}
