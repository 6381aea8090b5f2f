/* llama-server's native endpoints in `tutti serve` (see native.h). */
#include "server/native.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "server/format.h"
#include "util/buf.h"

static int err_out(char *err, size_t cap, int status, const char *msg) {
    snprintf(err, cap, "%s", msg);
    return status;
}

/* a served file, not a remote member (whose distribution is another
 * server's to give) */
static int local_file(const srv_registry *reg, int fi, int *status, char *err, size_t cap) {
    if (!reg->files[fi].remote) return fi;
    *status = 400;
    snprintf(err, cap, "'%s' is a remote member (a model another server holds): ask that server", reg->files[fi].name);
    return -1;
}

int srv_native_model(const srv_registry *reg, const char *model, int *status, char *err, size_t cap) {
    const char *name = model && *model ? model : "default";
    int fi = srv_registry_file_index(reg, name);
    if (fi >= 0) return local_file(reg, fi, status, err, cap);
    const srv_spec *sp = srv_registry_find(reg, name);
    if (sp && sp->n == 1) return local_file(reg, sp->file[0], status, err, cap);
    if (sp) {
        *status = 400;
        snprintf(err, cap,
                 "'%s' is an ensemble: llama-server's endpoints serve single models (name one of "
                 "/v1/models' single models in \"model\")",
                 name);
        return -1;
    }
    if (!model || !*model) {
        if (reg->n_files == 1) return local_file(reg, 0, status, err, cap);
        *status = 400;
        snprintf(err, cap, "several models are loaded: name one in \"model\"");
        return -1;
    }
    *status = 404;
    snprintf(err, cap, "the model '%.200s' does not exist (see /v1/models)", name);
    return -1;
}

char *srv_native_props(const srv_server *s) {
    const srv_registry *reg = &s->reg;
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(o, "default_generation_settings");
    /* the default model's context (the only model, or member 1 of default) */
    int st;
    char err[256];
    int fi = srv_native_model(reg, NULL, &st, err, sizeof err);
    if (fi < 0) {
        const srv_spec *sp = srv_registry_find(reg, "default");
        fi = sp ? sp->file[0] : 0;
    }
    cJSON_AddNumberToObject(d, "n_ctx", reg->n_files ? reg->files[fi].n_ctx : 0);
    if (reg->n_files) cJSON_AddStringToObject(d, "model", reg->files[fi].name);
    cJSON_AddNumberToObject(o, "total_slots", s->n_slots);
    /* the file's name, not where the server keeps it */
    if (reg->n_files) {
        const char *p = reg->files[fi].path, *b = strrchr(p, '/');
        cJSON_AddStringToObject(o, "model_path", srv_is_url(p) ? reg->files[fi].name : b ? b + 1 : p);
    }
    char *r = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return r;
}

static cJSON *parse_body(const char *body, size_t n, int *status, char *err, size_t cap) {
    cJSON *j = srv_json_parse(body, n, err, cap); /* strict, as the OpenAI endpoints */
    if (!j) {
        *status = 400;
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        *status = 400;
        snprintf(err, cap, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

static int model_of(const srv_registry *reg, const cJSON *root, int *status, char *err, size_t cap) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (m && !cJSON_IsNull(m) && !cJSON_IsString(m)) {
        *status = 400;
        snprintf(err, cap, "'model' must be a string");
        return -1;
    }
    return srv_native_model(reg, cJSON_IsString(m) ? m->valuestring : NULL, status, err, cap);
}

static int get_flag(const cJSON *root, const char *k, bool dflt, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, k);
    if (!v || cJSON_IsNull(v)) return *out = dflt, 0;
    if (!cJSON_IsBool(v)) return -1;
    *out = cJSON_IsTrue(v);
    return 0;
}

/* ids of a JSON array (each an integer in [0, V)); malloc'd, or NULL */
static int32_t *id_array(const cJSON *a, int32_t V, int32_t *n, char *err, size_t cap) {
    int32_t k = cJSON_GetArraySize(a);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(k ? k : 1));
    if (!ids) return snprintf(err, cap, "out of memory"), NULL;
    *n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(d >= 0 && d < V) || d != floor(d)) {
            free(ids);
            snprintf(err, cap, "token %d: not a token id of the model (0..%d)", (int)*n, (int)V - 1);
            return NULL;
        }
        ids[(*n)++] = (int32_t)d;
    }
    return ids;
}

char *srv_native_tokenize(const srv_registry *reg, const char *body, size_t n, int *status, char *err, size_t cap) {
    cJSON *root = parse_body(body, n, status, err, cap), *out = NULL;
    char *r = NULL;
    int32_t *ids = NULL, nid = 0;
    if (!root) return NULL;
    int fi = model_of(reg, root, status, err, cap);
    if (fi < 0) goto done;
    if (srv_registry_acquire((srv_registry *)reg, &fi, 1, true, err, cap) < 0) { /* loaded on demand */
        *status = 500;
        fi = -1;
        goto done;
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content");
    bool add_special, pieces;
    if (!cJSON_IsString(c)) {
        *status = err_out(err, cap, 400, "'content' must be a string");
        goto done;
    }
    if (get_flag(root, "add_special", false, &add_special) < 0 || get_flag(root, "with_pieces", false, &pieces) < 0) {
        *status = err_out(err, cap, 400, "'add_special' and 'with_pieces' must be true or false");
        goto done;
    }
    const tutti_vocab *v = reg->files[fi].vocab;
    /* as llama-server: special-token text in content becomes those tokens */
    ids = server_tokenize(v, c->valuestring, strlen(c->valuestring), add_special && tutti_vocab_add_bos(v), true, &nid);
    if (!ids) {
        *status = err_out(err, cap, 400, "cannot tokenize the content");
        goto done;
    }
    out = cJSON_CreateObject();
    cJSON *t = cJSON_AddArrayToObject(out, "tokens");
    for (int32_t i = 0; i < nid; i++) {
        if (!pieces) {
            cJSON_AddItemToArray(t, cJSON_CreateNumber(ids[i]));
            continue;
        }
        /* llama-server: the piece as a string when it is valid UTF-8, else its bytes */
        char buf[512];
        int32_t k = tutti_token_to_piece(v, ids[i], true, buf, sizeof buf);
        if (k < 0) k = 0;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", ids[i]);
        char *clean = srv_utf8_clean(buf, (size_t)k);
        if (clean && strlen(clean) == (size_t)k && !memcmp(clean, buf, (size_t)k)) {
            cJSON_AddStringToObject(o, "piece", clean);
        } else {
            cJSON *b = cJSON_AddArrayToObject(o, "piece");
            for (int32_t x = 0; x < k; x++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)buf[x]));
        }
        free(clean);
        cJSON_AddItemToArray(t, o);
    }
    r = cJSON_PrintUnformatted(out);
done:
    if (fi >= 0) srv_registry_release((srv_registry *)reg, &fi, 1, true);
    free(ids);
    cJSON_Delete(out);
    cJSON_Delete(root);
    return r;
}

char *srv_native_detokenize(const srv_registry *reg, const char *body, size_t n, int *status, char *err, size_t cap) {
    cJSON *root = parse_body(body, n, status, err, cap);
    char *r = NULL, *text = NULL;
    int32_t *ids = NULL, nid = 0;
    if (!root) return NULL;
    int fi = model_of(reg, root, status, err, cap);
    if (fi < 0) goto done;
    if (srv_registry_acquire((srv_registry *)reg, &fi, 1, true, err, cap) < 0) { /* loaded on demand */
        *status = 500;
        fi = -1;
        goto done;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(t)) {
        *status = err_out(err, cap, 400, "'tokens' must be an array of token ids");
        goto done;
    }
    const tutti_vocab *v = reg->files[fi].vocab;
    if (!(ids = id_array(t, tutti_vocab_n_tokens(v), &nid, err, cap))) {
        *status = 400;
        goto done;
    }
    int32_t k = tutti_detokenize(v, ids, nid, NULL, 0);
    size_t need = k < 0 ? (size_t)(-(int64_t)k) : (size_t)k;
    text = k == TUTTI_ERR_SIZE ? NULL : malloc(need + 1);
    if (!text || (k = tutti_detokenize(v, ids, nid, text, (int32_t)need + 1)) < 0) {
        *status = err_out(err, cap, 500, "cannot detokenize");
        goto done;
    }
    char *clean = srv_utf8_clean(text, (size_t)k);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", clean ? clean : "");
    free(clean);
    r = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
done:
    if (fi >= 0) srv_registry_release((srv_registry *)reg, &fi, 1, true);
    free(ids);
    free(text);
    cJSON_Delete(root);
    return r;
}

int srv_native_parse_completion(const srv_registry *reg, const char *body, size_t n, srv_job *j, char *err,
                                size_t cap) {
    int status = 400;
    cJSON *root = parse_body(body, n, &status, err, cap);
    if (!root) return status;
    int fi = model_of(reg, root, &status, err, cap);
    if (fi < 0) goto fail;
    /* held until the job is freed: loaded on demand */
    if (srv_job_hold((srv_registry *)reg, j, &fi, 1, err, cap) < 0) {
        status = 500;
        goto fail;
    }
    const tutti_vocab *v = reg->files[fi].vocab;
    int32_t V = tutti_vocab_n_tokens(v);
    j->nat_file = fi;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsString(p)) {
        j->nat_ids =
            server_tokenize(v, p->valuestring, strlen(p->valuestring), tutti_vocab_add_bos(v), true, &j->n_nat_ids);
        if (!j->nat_ids) {
            err_out(err, cap, 400, "cannot tokenize the prompt");
            goto fail;
        }
    } else if (cJSON_IsArray(p)) {
        if (!(j->nat_ids = id_array(p, V, &j->n_nat_ids, err, cap))) goto fail;
    } else {
        err_out(err, cap, 400, "'prompt' must be a string or an array of token ids");
        goto fail;
    }
    if (j->n_nat_ids < 1) {
        err_out(err, cap, 400, "'prompt' is empty");
        goto fail;
    }
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "n_probs");
    const cJSON *npr = cJSON_GetObjectItemCaseSensitive(root, "n_predict");
    if (np && !cJSON_IsNull(np) &&
        (!cJSON_IsNumber(np) || np->valuedouble < 0 || np->valuedouble != floor(np->valuedouble))) {
        err_out(err, cap, 400, "'n_probs' must be an integer >= 0");
        goto fail;
    }
    j->n_probs = cJSON_IsNumber(np) ? (np->valuedouble > V ? V : (int32_t)np->valuedouble) : 0;
    if (npr && !cJSON_IsNull(npr) &&
        (!cJSON_IsNumber(npr) || (npr->valuedouble != 0 && npr->valuedouble != 1 && npr->valuedouble != -1))) {
        err_out(err, cap, 400,
                "'n_predict' must be 0 or 1 here: this endpoint gives the next token's distribution "
                "(generate text with /v1/completions)");
        goto fail;
    }
    j->n_predict = cJSON_IsNumber(npr) && npr->valuedouble == 0 ? 0 : 1;
    bool post, stream;
    if (get_flag(root, "post_sampling_probs", false, &post) < 0 || get_flag(root, "stream", false, &stream) < 0) {
        err_out(err, cap, 400, "'post_sampling_probs' and 'stream' must be true or false");
        goto fail;
    }
    if (post || stream) {
        err_out(err, cap, 400,
                "post_sampling_probs and stream are not supported here: the answer is the model's own "
                "distribution, in one response");
        goto fail;
    }
    if (j->n_nat_ids >= reg->files[fi].n_ctx) {
        snprintf(err, cap, "the prompt is %d tokens, the context holds %d", j->n_nat_ids, reg->files[fi].n_ctx);
        goto fail;
    }
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    return status;
}

/* ---- the answer ---- */

static pthread_mutex_t g_frag_mu = PTHREAD_MUTEX_INITIALIZER;

/* '"id":I,"token":"T","bytes":[..]' of every token, once per file: the
 * answer is then a copy and a number per entry */
static int build_frags(srv_file *f) {
    pthread_mutex_lock(&g_frag_mu);
    int rc = 0;
    if (f->nat_frag) goto out;
    const tutti_vocab *v = f->vocab;
    int32_t V = tutti_vocab_n_tokens(v);
    int64_t *off = malloc(sizeof(int64_t) * ((size_t)V + 1));
    size_t cap = (size_t)V * 64 + 64, n = 0;
    char *buf = malloc(cap);
    if (!off || !buf) goto oom;
    for (int32_t i = 0; i < V; i++) {
        char piece[512];
        int32_t k = tutti_token_to_piece(v, i, true, piece, sizeof piece);
        if (k < 0) k = 0;
        char *clean = srv_utf8_clean(piece, (size_t)k);
        cJSON *s = cJSON_CreateString(clean ? clean : "");
        char *js = s ? cJSON_PrintUnformatted(s) : NULL;
        cJSON_Delete(s);
        free(clean);
        if (!js) goto oom;
        size_t need = strlen(js) + 64 + 4 * (size_t)k; /* "id":I,"token": ,"bytes":[ ] and the bytes */
        if (n + need > cap) {
            while (n + need > cap) cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                cJSON_free(js);
                goto oom;
            }
            buf = nb;
        }
        off[i] = (int64_t)n;
        n += (size_t)sprintf(buf + n, "\"id\":%d,\"token\":%s,\"bytes\":[", i, js);
        cJSON_free(js);
        for (int32_t x = 0; x < k; x++) n += (size_t)sprintf(buf + n, x ? ",%u" : "%u", (unsigned char)piece[x]);
        buf[n++] = ']';
    }
    off[V] = (int64_t)n;
    f->nat_frag = buf, f->nat_off = off;
    goto out;
oom:
    free(off), free(buf);
    rc = -1;
out:
    pthread_mutex_unlock(&g_frag_mu);
    return rc;
}

typedef struct scored {
    float l;
    int32_t id;
} scored;

static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int put(char **b, size_t *n, size_t *cap, const char *s, size_t k) { return tutti_buf_append(b, n, cap, s, k); }

char *srv_native_completion_json(srv_file *f, const float *logits, int32_t n_probs, int32_t n_predict, int32_t n_prompt,
                                 int32_t n_eval, double eval_s) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (build_frags(f) < 0) return NULL;
    int32_t V = tutti_vocab_n_tokens(f->vocab);
    /* log-softmax in double (as the fusion layer reads it back) */
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int32_t i = 0; i < V; i++) z += exp((double)logits[i] - mx);
    double lz = mx + log(z);
    scored *sc = malloc(sizeof *sc * (size_t)V);
    if (!sc) return NULL;
    for (int32_t i = 0; i < V; i++) sc[i] = (scored){logits[i], i};
    int32_t k = n_probs > V ? V : n_probs;
    /* the top k: a full sort only when k is a large part of the vocabulary */
    if (k > 0 && (int64_t)k * 16 >= V) {
        qsort(sc, (size_t)V, sizeof *sc, cmp_scored);
    } else {
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (cmp_scored(&sc[i], &sc[best]) < 0) best = i;
        scored tmp = sc[0];
        sc[0] = sc[best], sc[best] = tmp;
        for (int32_t t = 1; t < k; t++) { /* selection: k small */
            int32_t b = t;
            for (int32_t i = t + 1; i < V; i++)
                if (cmp_scored(&sc[i], &sc[b]) < 0) b = i;
            tmp = sc[t], sc[t] = sc[b], sc[b] = tmp;
        }
    }
    int32_t top = sc[0].id;
    char *b = NULL, num[64];
    size_t n = 0, cap = (size_t)(f->nat_off[top + 1] - f->nat_off[top]) + (size_t)k * 64 + 1024;
    b = malloc(cap);
    if (!b) return free(sc), NULL;
    b[0] = 0;
    /* "content": the most likely token's text (greedy, as n_predict 1 with no samplers) */
    const char *ft = f->nat_frag + f->nat_off[top];
    const char *tok = strstr(ft, "\"token\":") + 8, *tok_end = strstr(tok, ",\"bytes\":");
    int rc = put(&b, &n, &cap, "{\"content\":", 11);
    if (n_predict) rc |= put(&b, &n, &cap, tok, (size_t)(tok_end - tok));
    else rc |= put(&b, &n, &cap, "\"\"", 2);
    rc |= put(&b, &n, &cap, ",\"completion_probabilities\":[", 29);
    if (n_predict) {
        rc |= put(&b, &n, &cap, "{", 1);
        rc |= put(&b, &n, &cap, ft, (size_t)(f->nat_off[top + 1] - f->nat_off[top]));
        int w = snprintf(num, sizeof num, ",\"logprob\":%.9g,\"top_logprobs\":[", (double)logits[top] - lz);
        rc |= put(&b, &n, &cap, num, (size_t)w);
        for (int32_t t = 0; t < k; t++) {
            int32_t id = sc[t].id;
            rc |= put(&b, &n, &cap, t ? ",{" : "{", t ? 2 : 1);
            rc |= put(&b, &n, &cap, f->nat_frag + f->nat_off[id], (size_t)(f->nat_off[id + 1] - f->nat_off[id]));
            w = snprintf(num, sizeof num, ",\"logprob\":%.9g}", (double)sc[t].l - lz);
            rc |= put(&b, &n, &cap, num, (size_t)w);
        }
        rc |= put(&b, &n, &cap, "]}", 2);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double pred_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    char tail[512];
    int w = snprintf(tail, sizeof tail,
                     "],\"stop\":true,\"stop_type\":\"limit\",\"tokens_predicted\":%d,"
                     "\"tokens_evaluated\":%d,\"tokens_cached\":%d,\"timings\":{\"prompt_n\":%d,\"prompt_ms\":%.6f,"
                     "\"predicted_n\":%d,\"predicted_ms\":%.6f}}",
                     n_predict, n_prompt, n_prompt - n_eval, n_eval, eval_s * 1e3, n_predict, pred_s * 1e3);
    rc |= put(&b, &n, &cap, tail, (size_t)w);
    free(sc);
    if (rc) return free(b), NULL;
    return b;
}
