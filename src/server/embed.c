/* POST /v1/embeddings (OpenAI's API, as llama-server --embeddings answers
 * it): one vector per input of a single served model.
 *
 * Request: {"model", "input": a string, an array of strings, an array of
 * token ids or an array of arrays of ids, "encoding_format": "float" |
 * "base64" (little-endian float32, the openai clients' default),
 * "dimensions": n_embd only, "user": ignored}; strict JSON (request.c's
 * parser).  Strings are tokenized with BOS as the model's vocabulary asks;
 * ids are used as given.
 *
 * Vector: every position's hidden state after the output norm
 * (tutti_session_embed), pooled as the GGUF's {arch}.pooling_type says
 * (mean when it says nothing or "none": llama-server needs a pooling to
 * answer this API and is run with --pooling mean for such files; cls: the
 * first position, last: the last one; rank is refused), then divided by its
 * Euclidean norm (llama-server's default --embd-normalize 2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/server.h"

#define SRV_MAX_EMBD_INPUTS 2048

void srv_embd_free(srv_embd *e) {
    for (int i = 0; i < e->n; i++) free(e->ids[i]);
    free(e->ids), free(e->n_ids), free(e->out);
    memset(e, 0, sizeof *e);
}

static int fail(char *err, size_t cap, const char **param, const char *p, int status, const char *msg) {
    snprintf(err, cap, "%s", msg);
    *param = p;
    return status;
}

/* one input: text (tokenized) or token ids */
static int add_input(srv_embd *e, const srv_file *f, const cJSON *it, char *err, size_t cap, const char **param) {
    int k = e->n;
    if (cJSON_IsString(it)) {
        e->ids[k] = server_tokenize(f->vocab, it->valuestring, strlen(it->valuestring), tutti_vocab_add_bos(f->vocab),
                                    false, &e->n_ids[k]);
        if (!e->ids[k]) return fail(err, cap, param, "input", 400, "an input cannot be tokenized");
    } else if (cJSON_IsArray(it)) {
        int n = cJSON_GetArraySize(it);
        int32_t V = tutti_vocab_n_tokens(f->vocab);
        if (!(e->ids[k] = malloc(sizeof(int32_t) * (size_t)(n ? n : 1))))
            return fail(err, cap, param, NULL, 500, "out of memory");
        const cJSON *t;
        cJSON_ArrayForEach(t, it) {
            double d = cJSON_IsNumber(t) ? t->valuedouble : NAN;
            if (!(d >= 0 && d < V) || d != floor(d)) {
                e->n++; /* freed with the rest */
                snprintf(err, cap, "input %d: item %d (%.17g) is not a token id of model %s (0 to %d)", k, e->n_ids[k],
                         d, f->name, V - 1);
                *param = "input";
                return 400;
            }
            e->ids[k][e->n_ids[k]++] = (int32_t)d;
        }
    } else {
        return fail(err, cap, param, "input", 400,
                    "'input' must be a string, an array of strings, an array of token ids or an array of arrays of "
                    "token ids");
    }
    e->n++;
    if (e->n_ids[k] < 1)
        return fail(err, cap, param, "input", 400, "an input has no tokens (and the vocabulary adds no BOS)");
    if (e->n_ids[k] > f->n_ctx) {
        snprintf(err, cap, "input %d is %d tokens for model %s, whose context holds %d", k, e->n_ids[k], f->name,
                 f->n_ctx);
        *param = "input";
        return 400;
    }
    e->n_tokens += e->n_ids[k];
    return 0;
}

/* the served single model of "model" (default: 'default' when it is one) */
static int resolve(srv_server *s, const cJSON *m, srv_job *j, char *err, size_t cap, const char **param) {
    const char *name = cJSON_IsString(m) && m->valuestring[0] ? m->valuestring : "default";
    if (m && !cJSON_IsString(m)) return fail(err, cap, param, "model", 400, "'model' must be a string");
    snprintf(j->model_name, sizeof j->model_name, "%s", name);
    const srv_spec *sp = srv_registry_find(&s->reg, name);
    if (!sp) {
        snprintf(err, cap, "the model '%.200s' does not exist (see /v1/models)", name);
        *param = "model";
        return 404;
    }
    if (sp->n != 1) {
        snprintf(err, cap,
                 "'%.200s' is an ensemble of %d models: embeddings come from one model (name one of "
                 "/v1/models' single models)",
                 name, sp->n);
        *param = "model";
        return 400;
    }
    const srv_file *f = &s->reg.files[sp->file[0]];
    if (!f->remote && srv_job_hold(&s->reg, j, sp->file, 1, err, cap) < 0) return 500; /* loaded on demand */
    if (!f->model)
        return fail(err, cap, param, "model", 400, "a remote member gives no embeddings here (ask its server)");
    int pool = s->opts.pooling >= 0 ? s->opts.pooling : tutti_model_pooling(f->model);
    if (pool == TUTTI_POOL_RANK)
        return fail(err, cap, param, "model", 400, "this model ranks (pooling_type rank): it gives no embeddings");
    j->embd.file = sp->file[0];
    j->embd.pooling = pool == TUTTI_POOL_CLS || pool == TUTTI_POOL_LAST ? pool : TUTTI_POOL_MEAN;
    return 0;
}

int srv_embd_prepare(srv_server *s, srv_job *j, const char *body, size_t n, char *err, size_t cap, const char **param) {
    *param = NULL;
    cJSON *root = srv_json_parse(body, n, err, cap);
    if (!root) return 400;
    int st = 0;
    srv_embd *e = &j->embd;
    e->on = true;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    const cJSON *dim = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    if (!cJSON_IsObject(root)) st = fail(err, cap, param, NULL, 400, "the request body must be a JSON object");
    else if (!in || cJSON_IsNull(in)) st = fail(err, cap, param, "input", 400, "'input' is required");
    else if (fmt && !cJSON_IsNull(fmt) &&
             !(cJSON_IsString(fmt) && (!strcmp(fmt->valuestring, "float") || !strcmp(fmt->valuestring, "base64"))))
        st = fail(err, cap, param, "encoding_format", 400, "'encoding_format' must be \"float\" or \"base64\"");
    else st = resolve(s, cJSON_GetObjectItemCaseSensitive(root, "model"), j, err, cap, param);
    const srv_file *f = st ? NULL : &s->reg.files[e->file];
    if (!st && dim && !cJSON_IsNull(dim) &&
        !(cJSON_IsNumber(dim) && dim->valuedouble == (double)tutti_model_n_embd(f->model))) {
        snprintf(err, cap, "'dimensions': model %s gives vectors of %d dimensions, no other number", f->name,
                 tutti_model_n_embd(f->model));
        *param = "dimensions";
        st = 400;
    }
    e->base64 = !st && fmt && cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "base64");
    /* a list of inputs, unless it is one input of token ids */
    bool list = !st && cJSON_IsArray(in) && cJSON_GetArraySize(in) > 0 && !cJSON_IsNumber(cJSON_GetArrayItem(in, 0));
    int count = st ? 0 : list ? cJSON_GetArraySize(in) : 1;
    if (!st && (count < 1 || count > SRV_MAX_EMBD_INPUTS)) {
        snprintf(err, cap, "'input' holds 1 to %d inputs", SRV_MAX_EMBD_INPUTS);
        *param = "input";
        st = 400;
    }
    if (!st) {
        e->ids = calloc((size_t)count, sizeof *e->ids);
        e->n_ids = calloc((size_t)count, sizeof *e->n_ids);
        if (!e->ids || !e->n_ids) st = fail(err, cap, param, NULL, 500, "out of memory");
    }
    if (!st && !list) st = add_input(e, f, in, err, cap, param);
    const cJSON *it;
    if (!st && list) cJSON_ArrayForEach(it, in) if (!st) st = add_input(e, f, it, err, cap, param);
    cJSON_Delete(root);
    return st;
}

/* pooled and normalised rows[n][d] into v[d]; -1: out of memory */
static int pool(const float *rows, int32_t n, int32_t d, int how, float *v) {
    double acc[4096], *a = d <= 4096 ? acc : calloc((size_t)d, sizeof(double));
    if (!a) return -1;
    memset(a, 0, sizeof(double) * (size_t)d);
    int32_t from = how == TUTTI_POOL_LAST ? n - 1 : 0, to = how == TUTTI_POOL_CLS ? 1 : n;
    for (int32_t t = from; t < to; t++)
        for (int32_t i = 0; i < d; i++) a[i] += rows[(size_t)t * (size_t)d + i];
    double norm = 0;
    for (int32_t i = 0; i < d; i++) a[i] /= (double)(to - from), norm += a[i] * a[i];
    norm = sqrt(norm);
    for (int32_t i = 0; i < d; i++) v[i] = (float)(norm > 0 ? a[i] / norm : 0);
    if (a != acc) free(a);
    return 0;
}

int srv_embd_run(srv_embd *e, tutti_session *sess, const tutti_model *m, bool (*gone)(void *), void *arg, char *err,
                 size_t cap) {
    int32_t d = tutti_model_n_embd(m), longest = 0;
    for (int i = 0; i < e->n; i++) longest = e->n_ids[i] > longest ? e->n_ids[i] : longest;
    float *rows = malloc(sizeof(float) * (size_t)longest * (size_t)d);
    e->out = malloc(sizeof(float) * (size_t)e->n * (size_t)d);
    int rc = rows && e->out ? 0 : (snprintf(err, cap, "out of memory"), -1);
    for (int i = 0; i < e->n && rc == 0; i++) {
        if (gone && gone(arg)) { /* the client left: the rest is not computed */
            snprintf(err, cap, "the client left");
            rc = -1;
            break;
        }
        if (tutti_session_rewind(sess, 0) < 0 || tutti_session_embed(sess, e->ids[i], e->n_ids[i], rows) < 0) {
            snprintf(err, cap, "embedding failed: %s", tutti_last_error());
            rc = -1;
            break;
        }
        if (pool(rows, e->n_ids[i], d, e->pooling, e->out + (size_t)i * (size_t)d) < 0)
            rc = -1, snprintf(err, cap, "out of memory");
    }
    tutti_session_rewind(sess, 0);
    free(rows);
    e->dim = d;
    return rc;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const unsigned char *p, size_t n) {
    char *o = malloc((n + 2) / 3 * 4 + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        o[k++] = b64[v >> 18 & 63], o[k++] = b64[v >> 12 & 63];
        o[k++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        o[k++] = i + 2 < n ? b64[v & 63] : '=';
    }
    o[k] = 0;
    return o;
}

char *srv_embd_json(const srv_job *j) {
    const srv_embd *e = &j->embd;
    if (!e->out) return NULL; /* cancelled before it ran */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < e->n; i++) {
        cJSON *it = cJSON_CreateObject();
        cJSON_AddItemToArray(data, it);
        cJSON_AddStringToObject(it, "object", "embedding");
        cJSON_AddNumberToObject(it, "index", i);
        const float *v = e->out + (size_t)i * (size_t)e->dim;
        if (e->base64) {
            unsigned char *le = malloc(sizeof(float) * (size_t)e->dim); /* float32 little-endian */
            for (int32_t k = 0; le && k < e->dim; k++) {
                uint32_t u;
                memcpy(&u, &v[k], 4);
                for (int b = 0; b < 4; b++) le[4 * k + b] = (unsigned char)(u >> (8 * b));
            }
            char *s = le ? base64(le, sizeof(float) * (size_t)e->dim) : NULL;
            cJSON_AddStringToObject(it, "embedding", s ? s : "");
            free(s), free(le);
        } else {
            cJSON *a = cJSON_AddArrayToObject(it, "embedding");
            for (int32_t k = 0; k < e->dim; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[k]));
        }
    }
    cJSON_AddStringToObject(o, "model", j->model_name);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)e->n_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)e->n_tokens);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
