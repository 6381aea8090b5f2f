/* The bodies of GET /v1/models (JSON) and GET /metrics (Prometheus text
 * exposition format 0.0.4). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/pipeline_srv.h"
#include "server/server.h"
#include "util/buf.h"

const char *const srv_ep_names[SRV_N_EP] = {
    "/health",   "/v1/models",  "/v1/completions", "/v1/chat/completions", "/metrics", "/props",
    "/tokenize", "/detokenize", "/completion",     "/v1/embeddings",       "/",        "other"};
const int srv_status_codes[6] = {200, 400, 401, 404, 503, 0}; /* 0: any other */

char *srv_models_json(const srv_server *s) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    for (int i = 0; i < s->reg.n_specs; i++) {
        const srv_spec *sp = &s->reg.specs[i];
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(data, m);
        cJSON_AddStringToObject(m, "id", sp->name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "tutti");
        cJSON *t = cJSON_AddObjectToObject(m, "tutti");
        cJSON *mem = cJSON_AddArrayToObject(t, "members");
        for (int k = 0; k < sp->n; k++) cJSON_AddItemToArray(mem, cJSON_CreateString(s->reg.files[sp->file[k]].name));
        cJSON_AddStringToObject(t, "rule", tutti_rule_name((tutti_fusion_rule)sp->rule));
        cJSON_AddStringToObject(t, "align",
                                tutti_align_name((tutti_align)(sp->align_used >= 0 ? sp->align_used : sp->align)));
        int32_t ctx = INT32_MAX;
        for (int k = 0; k < sp->n; k++)
            if (s->reg.files[sp->file[k]].n_ctx < ctx) ctx = s->reg.files[sp->file[k]].n_ctx;
        cJSON_AddNumberToObject(t, "n_ctx", ctx);
        /* models on demand: loaded when every member is (llama-server's router says it as status.value) */
        bool loaded = true, lazy = false;
        srv_registry *reg = (srv_registry *)&s->reg;
        for (int k = 0; k < sp->n; k++) {
            loaded &= srv_registry_loaded(reg, sp->file[k]);
            lazy |= reg->files[sp->file[k]].lazy;
        }
        cJSON_AddBoolToObject(t, "loaded", loaded);
        cJSON_AddBoolToObject(t, "on_demand", lazy);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "status"), "value", loaded ? "loaded" : "unloaded");
        if (sp->n == 1) { /* llama-server's model metadata (remote members check n_vocab) */
            cJSON *meta = cJSON_AddObjectToObject(m, "meta");
            const srv_file *f1 = &s->reg.files[sp->file[0]];
            cJSON_AddNumberToObject(meta, "n_vocab", f1->lazy ? f1->n_vocab_meta : tutti_vocab_n_tokens(f1->vocab));
            cJSON_AddNumberToObject(meta, "n_ctx", ctx);
        }
    }
    srv_pipelines_models_json(&s->reg, data);
    char *b = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return b;
}

typedef struct text {
    char *b;
    size_t n, cap;
} text;

static void prom(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void prom(text *t, const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k >= sizeof line) k = sizeof line - 1;
    (void)tutti_buf_append(&t->b, &t->n, &t->cap, line, (size_t)k); /* out of memory: the line is left out */
}

/* A label value in the text format: backslash, double quote and line feed
 * escaped as \\, \" and \n (the exposition format's only escapes), so that
 * a model name from --config cannot end the label or the line. */
static const char *label(const char *v, char *out, size_t cap) {
    size_t o = 0;
    for (; *v && o + 3 < cap; v++) {
        if (*v == '\\' || *v == '"') out[o++] = '\\', out[o++] = *v;
        else if (*v == '\n') out[o++] = '\\', out[o++] = 'n';
        else out[o++] = *v;
    }
    out[o] = 0;
    return out;
}

char *srv_metrics_text(srv_server *s) {
    int q = srv_queue_len(s), busy = srv_slots_busy(s);
    srv_metrics m;
    pthread_mutex_lock(&s->metrics.mu);
    memcpy(&m, &s->metrics, sizeof m);
    pthread_mutex_unlock(&s->metrics.mu);
    text t = {0};
    prom(&t, "# HELP tutti_requests_total HTTP requests by endpoint and status code\n"
             "# TYPE tutti_requests_total counter\n");
    for (int e = 0; e < SRV_N_EP; e++)
        for (int k = 0; k < 6; k++)
            if (m.requests[e][k]) {
                char code[16];
                snprintf(code, sizeof code, "%d", srv_status_codes[k]);
                prom(&t, "tutti_requests_total{endpoint=\"%s\",code=\"%s\"} %lld\n", srv_ep_names[e],
                     srv_status_codes[k] ? code : "other", (long long)m.requests[e][k]);
            }
    prom(
        &t,
        "# HELP tutti_generated_tokens_total generated units (tokens in token alignment, bytes in byte and span alignment)\n"
        "# TYPE tutti_generated_tokens_total counter\ntutti_generated_tokens_total %lld\n",
        (long long)m.gen_units);
    prom(&t,
         "# HELP tutti_generation_seconds_total wall time of generations (prompt included)\n"
         "# TYPE tutti_generation_seconds_total counter\ntutti_generation_seconds_total %.6f\n",
         m.gen_seconds);
    prom(
        &t,
        "# HELP tutti_tokens_per_second generated units per second of generation, over all requests and of the last one\n"
        "# TYPE tutti_tokens_per_second gauge\ntutti_tokens_per_second{scope=\"all\"} %.3f\n"
        "tutti_tokens_per_second{scope=\"last\"} %.3f\n",
        m.gen_seconds > 0 ? m.gen_units / m.gen_seconds : 0.0, m.last_tokens_per_s);
    prom(&t,
         "# HELP tutti_prompt_tokens_total prompt tokens of all members\n# TYPE tutti_prompt_tokens_total counter\n"
         "tutti_prompt_tokens_total %lld\n",
         (long long)m.prompt_tokens);
    prom(&t,
         "# HELP tutti_prompt_tokens_evaluated_total prompt tokens run through a forward pass\n"
         "# TYPE tutti_prompt_tokens_evaluated_total counter\ntutti_prompt_tokens_evaluated_total %lld\n",
         (long long)m.prompt_evaluated);
    prom(&t,
         "# HELP tutti_prompt_tokens_reused_total prompt tokens taken from a slot's KV cache\n"
         "# TYPE tutti_prompt_tokens_reused_total counter\ntutti_prompt_tokens_reused_total %lld\n",
         (long long)m.prompt_reused);
    prom(&t,
         "# HELP tutti_draft_rounds_total rounds in which the -md draft proposed tokens\n"
         "# TYPE tutti_draft_rounds_total counter\ntutti_draft_rounds_total %lld\n"
         "# HELP tutti_draft_tokens_total tokens the draft proposed\n"
         "# TYPE tutti_draft_tokens_total counter\ntutti_draft_tokens_total %lld\n"
         "# HELP tutti_draft_accepted_total drafted tokens the models accepted\n"
         "# TYPE tutti_draft_accepted_total counter\ntutti_draft_accepted_total %lld\n",
         (long long)m.draft_rounds, (long long)m.drafted, (long long)m.draft_accepted);
    prom(&t,
         "# HELP tutti_requests_cancelled_total generations stopped because the client went away\n"
         "# TYPE tutti_requests_cancelled_total counter\ntutti_requests_cancelled_total %lld\n",
         (long long)m.cancelled);
    prom(
        &t,
        "# HELP tutti_queue_length requests waiting for a slot\n# TYPE tutti_queue_length gauge\ntutti_queue_length %d\n",
        q);
    prom(&t,
         "# HELP tutti_slots_busy slots generating\n# TYPE tutti_slots_busy gauge\ntutti_slots_busy %d\n"
         "# HELP tutti_slots slots generating at once\n# TYPE tutti_slots gauge\ntutti_slots %d\n",
         busy, s->n_slots);
    prom(&t, "# HELP tutti_member_forward_seconds_total forward-pass time per model file\n"
             "# TYPE tutti_member_forward_seconds_total counter\n");
    char lb[1024];
    for (int i = 0; i < s->reg.n_files && i < SRV_MAX_FILES; i++)
        prom(&t, "tutti_member_forward_seconds_total{model=\"%s\"} %.6f\n", label(s->reg.files[i].name, lb, sizeof lb),
             m.member_forward_s[i]);
    prom(&t, "# HELP tutti_member_forward_tokens_total tokens run through each model file\n"
             "# TYPE tutti_member_forward_tokens_total counter\n");
    for (int i = 0; i < s->reg.n_files && i < SRV_MAX_FILES; i++)
        prom(&t, "tutti_member_forward_tokens_total{model=\"%s\"} %lld\n", label(s->reg.files[i].name, lb, sizeof lb),
             (long long)m.member_tokens[i]);
    if (s->batch) { /* continuous batching: passes per generated token show how well the slots share them */
        tutti_batch_stats b;
        tutti_batch_get_stats(s->batch, &b);
        prom(&t,
             "# HELP tutti_batch_steps_total steps of the shared batch (one forward pass per model each)\n"
             "# TYPE tutti_batch_steps_total counter\ntutti_batch_steps_total %lld\n"
             "# HELP tutti_batch_passes_total forward passes of the shared batch\n"
             "# TYPE tutti_batch_passes_total counter\ntutti_batch_passes_total %lld\n"
             "# HELP tutti_batch_tokens_total tokens through those passes\n"
             "# TYPE tutti_batch_tokens_total counter\ntutti_batch_tokens_total %lld\n"
             "# HELP tutti_batch_segments_total sessions' pieces through those passes (a generated token is one)\n"
             "# TYPE tutti_batch_segments_total counter\ntutti_batch_segments_total %lld\n"
             "# HELP tutti_batch_max_tokens the largest pass in tokens\n"
             "# TYPE tutti_batch_max_tokens gauge\ntutti_batch_max_tokens %d\n",
             (long long)b.n_steps, (long long)b.n_passes, (long long)b.n_tokens, (long long)b.n_segments, b.max_tokens);
    }
    return t.b;
}
