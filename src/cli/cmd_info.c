/* tutti info: what tutti reads from a GGUF file — its general.* metadata,
 * parameter count, tokenizer (special ids, add_bos, chat template) and, for
 * a full model, the hyper-parameters and tensors.  Works on vocabulary-only
 * files (the tokenizer part alone).  --json gives the same as one object,
 * written with cJSON. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* A scalar or string value as JSON (NULL for arrays). */
static cJSON *value_json(const tutti_gguf_value *v) {
    switch (v->kind) {
    case TUTTI_GGUF_NUMBER:
        return !v->is_float || isfinite(v->number) ? cJSON_CreateNumber(v->number) : cJSON_CreateNull();
    case TUTTI_GGUF_BOOL: return cJSON_CreateBool(v->number != 0);
    case TUTTI_GGUF_STRING: {
        /* metadata strings may hold NUL bytes: cut there, as tutti_model_meta_str */
        char *c = malloc(v->len + 1);
        if (!c) return cJSON_CreateNull();
        memcpy(c, v->str, v->len);
        c[v->len] = 0;
        cJSON *j = cJSON_CreateString(c);
        free(c);
        return j;
    }
    default: return NULL;
    }
}

/* Value i as JSON; arrays of more than 64 elements become {"array_of","n"}. */
static cJSON *kv_json(const tutti_gguf *f, int64_t i) {
    tutti_gguf_value v;
    if (tutti_gguf_get(f, i, -1, &v) < 0) return NULL;
    if (v.kind != TUTTI_GGUF_ARRAY) return value_json(&v);
    if (v.n > 64) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "array_of", v.elem_type);
        cJSON_AddNumberToObject(o, "n", (double)v.n);
        return o;
    }
    cJSON *a = cJSON_CreateArray();
    for (uint64_t j = 0; j < v.n; j++) {
        tutti_gguf_value e;
        cJSON_AddItemToArray(a, tutti_gguf_get(f, i, (int64_t)j, &e) == 0 ? value_json(&e) : cJSON_CreateNull());
    }
    return a;
}

/* The id and text of a special token. */
static void add_token(cJSON *o, const char *key, const tutti_vocab *v, int32_t id) {
    char k[32];
    snprintf(k, sizeof k, "%s_id", key);
    if (id < 0) {
        cJSON_AddNullToObject(o, k);
        cJSON_AddNullToObject(o, key);
        return;
    }
    cJSON_AddNumberToObject(o, k, id);
    char buf[256];
    int32_t n = tutti_token_to_piece(v, id, true, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    cJSON_AddStringToObject(o, key, buf);
}

/* Text form of a JSON value on one line (strings without quotes). */
static void print_value(const cJSON *j, FILE *out) {
    if (cJSON_IsString(j)) {
        fputs(j->valuestring, out);
        return;
    }
    char *s = cJSON_PrintUnformatted(j);
    if (s) fputs(s, out);
    free(s);
}

static cJSON *describe(const char *path, const tutti_gguf *f, const tutti_vocab *v, char *tmpl) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "file", path);
    cJSON_AddNumberToObject(root, "gguf_version", tutti_gguf_version(f));
    cJSON_AddNumberToObject(root, "n_tensors", (double)tutti_gguf_n_tensors(f));
    cJSON *gen = cJSON_AddObjectToObject(root, "general");
    for (int64_t i = 0; i < tutti_gguf_n_kv(f); i++) {
        size_t kl = 0;
        const char *k = tutti_gguf_key(f, i, &kl);
        if (kl < 8 || memcmp(k, "general.", 8) || kl > 255) continue;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kl, k);
        cJSON *val = kv_json(f, i);
        if (val) cJSON_AddItemToObject(gen, key, val);
    }
    cJSON_AddNumberToObject(root, "n_params", tutti_gguf_n_params(f));
    cJSON *tok = cJSON_AddObjectToObject(root, "tokenizer");
    if (v) {
        cJSON_AddStringToObject(tok, "type", tutti_vocab_type(v));
        cJSON_AddStringToObject(tok, "pre", tutti_vocab_pre(v));
        cJSON_AddNumberToObject(tok, "n_tokens", tutti_vocab_n_tokens(v));
        add_token(tok, "bos", v, tutti_vocab_bos(v));
        add_token(tok, "eos", v, tutti_vocab_eos(v));
        add_token(tok, "eot", v, tutti_vocab_eot(v));
        cJSON_AddBoolToObject(tok, "add_bos", tutti_vocab_add_bos(v));
    }
    if (tmpl) cJSON_AddStringToObject(root, "chat_template", tmpl);
    else cJSON_AddNullToObject(root, "chat_template");
    return root;
}

static void print_text(const cJSON *d, FILE *out) {
    fprintf(out, "file: %s (GGUF v%d, %d tensors)\n", cJSON_GetObjectItem(d, "file")->valuestring,
            (int)cJSON_GetObjectItem(d, "gguf_version")->valuedouble,
            (int)cJSON_GetObjectItem(d, "n_tensors")->valuedouble);
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(d, "general")) {
        fprintf(out, "%s: ", g->string);
        print_value(g, out);
        fputc('\n', out);
    }
    double np = cJSON_GetObjectItem(d, "n_params")->valuedouble;
    if (np > 0) fprintf(out, "parameters: %.0f (%.3g M)\n", np, np / 1e6);
    else fprintf(out, "parameters: none (vocabulary-only file)\n");
    const cJSON *t = cJSON_GetObjectItem(d, "tokenizer");
    if (cJSON_GetObjectItem(t, "error"))
        fprintf(out, "tokenizer: cannot be loaded (%s)\n", cJSON_GetObjectItem(t, "error")->valuestring);
    if (cJSON_GetObjectItem(t, "type")) {
        fprintf(out, "tokenizer: %s (pre-tokenizer %s), %d tokens\n", cJSON_GetObjectItem(t, "type")->valuestring,
                cJSON_GetObjectItem(t, "pre")->valuestring, (int)cJSON_GetObjectItem(t, "n_tokens")->valuedouble);
        const char *names[] = {"bos", "eos", "eot"};
        for (int i = 0; i < 3; i++) {
            char k[16];
            snprintf(k, sizeof k, "%s_id", names[i]);
            const cJSON *id = cJSON_GetObjectItem(t, k);
            if (cJSON_IsNumber(id))
                fprintf(out, "  %s: %d '%s'\n", names[i], (int)id->valuedouble,
                        cJSON_GetObjectItem(t, names[i])->valuestring);
            else fprintf(out, "  %s: none\n", names[i]);
        }
        fprintf(out, "  add_bos: %s\n", cJSON_IsTrue(cJSON_GetObjectItem(t, "add_bos")) ? "true" : "false");
    }
    const cJSON *ct = cJSON_GetObjectItem(d, "chat_template");
    if (cJSON_IsString(ct)) fprintf(out, "chat template (%zu bytes):\n%s\n", strlen(ct->valuestring), ct->valuestring);
    else fprintf(out, "chat template: none (no tokenizer.chat_template; --chat is refused)\n");
}

int cmd_info(int argc, char **argv) {
    const char *model_path = NULL;
    bool json = false;
    cli_opt opts[] = {
        {"-m,--model", "FILE", CLI_T_STR, 0, 0, &model_path, "GGUF model or vocabulary-only file", "none", NULL,
         CLI_ONCE},
        CLI_HF_OPTS(&model_path, CLI_T_STR, CLI_ONCE),
        CLI_FLAG("--json", &json, "one JSON object instead of text"),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "info",
        .usage = "(-m MODEL | -hf REPO[:QUANT]) [--json]",
        .description = "Prints a GGUF file's general.* metadata, parameter count, tokenizer (BOS/EOS/EOT ids,\n"
                       "add_bos, chat template or its absence) and, for a full model, every hyper-parameter\n"
                       "tutti uses, tensor types and sizes. Works on vocabulary-only files.",
        .opts = opts,
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if (!model_path) return cli_usage_error("need -m MODEL or -hf REPO[:QUANT]");
    if ((pr = cli_resolve_model(&model_path)) != CLI_RUN) return pr;
    tutti_gguf *f = tutti_gguf_open(model_path);
    if (!f) return cli_error("%s", tutti_last_error());
    tutti_model *model = NULL;
    tutti_vocab *vocab = NULL;
    char *tmpl = NULL;
    int rc = 1;
    if (tutti_gguf_n_tensors(f) > 0) {
        /* a model: load it (validates every tensor); metadata only, so no copy */
        tutti_model_params mp = tutti_model_default_params();
        mp.use_mmap = true;
        if (!(model = tutti_model_load(model_path, &mp))) {
            cli_error("%s", tutti_last_error());
            goto done;
        }
    }
    char vocab_err[1024] = "";
    if (!model && !(vocab = tutti_vocab_load(model_path)))
        /* still show the metadata; the tokenizer's problem is the error */
        snprintf(vocab_err, sizeof vocab_err, "%s", tutti_last_error());
    const tutti_vocab *v = model ? tutti_model_vocab(model) : vocab;
    tutti_gguf_value ts;
    int64_t kt = tutti_gguf_find(f, "tokenizer.chat_template");
    if (kt >= 0 && tutti_gguf_get(f, kt, -1, &ts) == 0 && ts.kind == TUTTI_GGUF_STRING && (tmpl = malloc(ts.len + 1))) {
        memcpy(tmpl, ts.str, ts.len);
        tmpl[ts.len] = 0;
    }
    cJSON *d = describe(model_path, f, v, tmpl);
    if (vocab_err[0]) cJSON_AddStringToObject(cJSON_GetObjectItem(d, "tokenizer"), "error", vocab_err);
    if (json) {
        if (model) {
            cJSON_AddStringToObject(d, "architecture", tutti_model_arch(model));
            cJSON_AddNumberToObject(d, "n_ctx_train", tutti_model_n_ctx_train(model));
            cJSON_AddNumberToObject(d, "n_vocab", tutti_model_n_vocab(model));
            cJSON_AddNumberToObject(d, "n_expert", tutti_model_n_expert(model));
            cJSON_AddNumberToObject(d, "n_expert_used", tutti_model_n_expert_used(model));
        }
        char *s = cJSON_PrintUnformatted(d);
        if (s) printf("%s\n", s);
        free(s);
    } else {
        print_text(d, stdout);
        if (model) {
            printf("\n");
            tutti_model_describe(model, stdout);
        }
    }
    cJSON_Delete(d);
    rc = fflush(stdout) == 0 ? 0 : cli_error("cannot write the output");
    if (vocab_err[0]) rc = cli_error("%s", vocab_err);
done:
    free(tmpl);
    tutti_vocab_free(vocab);
    tutti_model_free(model);
    tutti_gguf_close(f);
    return rc;
}
