/* A completion request -> a generation job (srv_prepare_job, server.h):
 * the served model or the inline ensemble, every prompt of every member
 * (chat renderings, token-id prompts), the contexts, max_tokens, the seed. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/pipeline_srv.h"
#include "server/server.h"
#include "server/tools.h"

static uint64_t g_counter;

static int fail(char *err, size_t cap, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t cap, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return status;
}

/* The model: a served name, or an ensemble described under "tutti",
 * named for its members. */
static int resolve_model(srv_server *s, srv_job *j, char *err, size_t cap, const char **param, const char **code) {
    const srv_request *r = &j->req;
    if (!r->ens.present) {
        const char *name = r->model && r->model[0] ? r->model : "default";
        snprintf(j->model_name, sizeof j->model_name, "%s", name);
        const srv_spec *sp = srv_registry_find(&s->reg, name);
        if (!sp) {
            *param = "model", *code = "model_not_found";
            return fail(err, cap, 404, "the model '%s' does not exist (see /v1/models)", name);
        }
        j->spec = *sp;
        return 0;
    }
    srv_spec *sp = &j->spec;
    memset(sp, 0, sizeof *sp);
    sp->n = r->ens.n_members;
    size_t o = (size_t)snprintf(j->model_name, sizeof j->model_name, "inline(");
    for (int i = 0; i < sp->n; i++) {
        int fi = srv_registry_file_index(&s->reg, r->ens.members[i]);
        if (fi < 0) {
            *param = "tutti", *code = "model_not_found";
            return fail(err, cap, 404, "tutti.members: '%s' is not a loaded model (see /v1/models)", r->ens.members[i]);
        }
        sp->file[i] = fi;
        sp->w[i] = r->ens.has_weights ? r->ens.weights[i] : NAN;
        sp->t[i] = r->ens.has_temps ? r->ens.temps[i] : NAN;
        if (o < sizeof j->model_name)
            o += (size_t)snprintf(j->model_name + o, sizeof j->model_name - o, "%s%s", i ? "," : "",
                                  s->reg.files[fi].name);
    }
    if (o < sizeof j->model_name) snprintf(j->model_name + o, sizeof j->model_name - o, ")");
    sp->rule = r->ens.rule >= 0 ? r->ens.rule : TUTTI_RULE_MIX;
    sp->align = r->ens.align >= 0 ? r->ens.align : TUTTI_ALIGN_AUTO;
    srv_spec_make_key(sp);
    return 0;
}

/* Checks that need the model: per-token features in a known alignment,
 * token ids in member 1's vocabulary (an alignment resolved only when the
 * slot builds the ensemble is checked there). */
static int check_features(srv_server *s, srv_job *j, char *err, size_t cap, const char **param) {
    const srv_request *r = &j->req;
    int al = j->spec.align_used >= 0 ? j->spec.align_used : j->spec.align;
    if (r->shares && r->echo) {
        *param = "tutti";
        return fail(err, cap, 400, "tutti.shares covers generated text only: not with echo");
    }
    if (r->logprobs >= 0 && al == TUTTI_ALIGN_SPAN) {
        *param = "logprobs";
        return fail(err, cap, 400,
                    "logprobs need token or byte alignment: model '%s' fuses in span alignment, whose "
                    "steps have no per-token distribution",
                    j->model_name);
    }
    if (r->n_bias > 0 && (al == TUTTI_ALIGN_BYTE || al == TUTTI_ALIGN_SPAN)) {
        *param = "logit_bias";
        return fail(err, cap, 400,
                    "logit_bias needs token alignment: model '%s' fuses in %s alignment, over %s, "
                    "which have no token ids to bias",
                    j->model_name, tutti_align_name((tutti_align)al),
                    al == TUTTI_ALIGN_BYTE ? "bytes" : "drafted spans");
    }
    int32_t V = tutti_vocab_n_tokens(s->reg.files[j->spec.file[0]].vocab);
    for (int32_t k = 0; k < r->n_bias; k++)
        if (r->bias_ids[k] >= V) {
            *param = "logit_bias";
            return fail(err, cap, 400, "logit_bias: token %d is not in the vocabulary of model '%s' (0 to %d)",
                        r->bias_ids[k], s->reg.files[j->spec.file[0]].name, V - 1);
        }
    return 0;
}

/* Member i's ids for a token-id prompt of member 1's vocabulary: the same
 * ids when the members share it (token alignment), else the prompt's text
 * tokenized by member i. */
static int32_t *ids_for_member(srv_server *s, const srv_job *j, const srv_prompt *p, int i, int32_t *n) {
    const tutti_vocab *v1 = s->reg.files[j->spec.file[0]].vocab, *vi = s->reg.files[j->spec.file[i]].vocab;
    if (i == 0 || j->spec.align_used == TUTTI_ALIGN_TOKEN || vi == v1) {
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)p->n_ids);
        if (ids) memcpy(ids, p->ids, sizeof(int32_t) * (size_t)p->n_ids), *n = p->n_ids;
        return ids;
    }
    int32_t k = tutti_detokenize(v1, p->ids, p->n_ids, NULL, 0);
    if (k == TUTTI_ERR_SIZE) return NULL;
    size_t need = k < 0 ? (size_t)(-(int64_t)k) : (size_t)k;
    char *text = malloc(need + 1);
    if (!text || (k = tutti_detokenize(v1, p->ids, p->n_ids, text, (int32_t)need + 1)) < 0) {
        free(text);
        return NULL;
    }
    int32_t *ids = server_tokenize(vi, text, (size_t)k, tutti_vocab_add_bos(vi), false, n);
    free(text);
    return ids;
}

/* every member's prompt of every prompt: its own chat rendering, the ids,
 * or the text it tokenizes itself (counted here to check the context) */
static int prepare_prompts(srv_server *s, srv_job *j, char *err, size_t cap, const char **param, const char **code,
                           int32_t *room) {
    srv_request *r = &j->req;
    const char *field = r->kind == SRV_CHAT ? "messages" : "prompt";
    j->n_prompts = r->kind == SRV_CHAT ? 1 : r->n_prompts;
    *room = INT32_MAX;
    for (int p = 0; p < j->n_prompts; p++)
        for (int i = 0; i < j->spec.n; i++) {
            const srv_file *f = &s->reg.files[j->spec.file[i]];
            const srv_prompt *pr = &r->prompts[p];
            *param = field;
            if (r->kind == SRV_CHAT && srv_tools_in_chat(r)) {
                if (i == 0) { /* the format of member 1's template */
                    char *t = server_chat_template(f, s->reg.chat_template);
                    j->tool_fmt = r->tools.n && r->tools.choice != SRV_TC_NONE ? srv_tools_format(t) : -1;
                    free(t);
                }
                char *ctx = srv_tools_ctx_json(r, j->tool_fmt);
                j->ids[0][i] =
                    ctx ? server_chat_tokens_json(f, s->reg.chat_template, ctx, &j->n_ids[0][i], err, cap) : NULL;
                free(ctx);
                if (!j->ids[0][i]) {
                    char m[1024];
                    snprintf(m, sizeof m, "%s", err);
                    return fail(err, cap, 400, "model %s: %s", f->name, m);
                }
            } else if (r->kind == SRV_CHAT) {
                tutti_chat_message msgs[256];
                if (r->n_msgs > 256) return fail(err, cap, 400, "at most 256 messages");
                for (int k = 0; k < r->n_msgs; k++) msgs[k] = (tutti_chat_message){r->msgs[k].role, r->msgs[k].content};
                j->ids[0][i] =
                    server_chat_tokens(f, s->reg.chat_template, msgs, (size_t)r->n_msgs, &j->n_ids[0][i], err, cap);
                if (!j->ids[0][i]) {
                    char m[1024];
                    snprintf(m, sizeof m, "%s", err);
                    return fail(err, cap, 400, "model %s: %s", f->name, m);
                }
            } else if (pr->ids) {
                int32_t V = tutti_vocab_n_tokens(s->reg.files[j->spec.file[0]].vocab);
                for (int32_t k = 0; i == 0 && k < pr->n_ids; k++)
                    if (pr->ids[k] >= V)
                        return fail(err, cap, 400, "prompt %d: token %d is not in the vocabulary of model %s (0 to %d)",
                                    p, pr->ids[k], f->name, V - 1);
                if (!(j->ids[p][i] = ids_for_member(s, j, pr, i, &j->n_ids[p][i])))
                    return fail(err, cap, 400, "model %s: cannot tokenize prompt %d", f->name, p);
            } else {
                int32_t n = 0,
                        *ids = server_tokenize(f->vocab, pr->text, pr->len, tutti_vocab_add_bos(f->vocab), false, &n);
                if (!ids) return fail(err, cap, 400, "model %s: cannot tokenize the prompt", f->name);
                free(ids);
                j->n_ids[p][i] = n;
            }
            if (j->n_ids[p][i] >= f->n_ctx) {
                *code = "context_length_exceeded";
                return fail(err, cap, 400, "the prompt is %d tokens for model %s, whose context holds %d",
                            j->n_ids[p][i], f->name, f->n_ctx);
            }
            if (f->n_ctx - j->n_ids[p][i] < *room) *room = f->n_ctx - j->n_ids[p][i];
        }
    *param = NULL;
    return 0;
}

int srv_prepare_job(srv_server *s, srv_job *j, srv_kind kind, const char *body, size_t n, char *err, size_t cap,
                    const char **param, const char **code) {
    *code = NULL;
    int st = srv_request_parse(body, n, kind, &j->req, err, cap, param);
    if (st || (st = srv_pipeline_prepare(s, j, err, cap, param, code)) >= 0) return st;
    srv_request *r = &j->req;
    int32_t room;
    if ((st = resolve_model(s, j, err, cap, param, code))) return st;
    /* the members stay loaded until the job is freed (models on demand) */
    if (srv_job_hold(&s->reg, j, j->spec.file, j->spec.n, err, cap) < 0) return 500;
    if ((st = check_features(s, j, err, cap, param)) || (st = prepare_prompts(s, j, err, cap, param, code, &room)))
        return st;
    if (j->tool_fmt >= 0 && !(r->grammar = srv_tools_grammar(&r->tools, j->tool_fmt, err, cap))) {
        *param = "tools";
        return 400;
    }
    if (j->tool_fmt >= 0) r->grammar_field = "tools";
    j->n_prompt = 0;
    for (int p = 0; p < j->n_prompts; p++) j->n_prompt += j->n_ids[p][0];
    /* max_tokens counts tokens of member 1's tokenizer in every alignment
     * (as tutti run -n); capped at what the context holds */
    int64_t want = r->max_tokens >= 0 ? r->max_tokens : kind == SRV_COMPLETION ? 16 : room;
    j->max_units = (int32_t)(want < room ? want : room);
    if (r->repeat_last_n_ctx) r->sp.repeat_last_n = room;
    if (!r->seed_set)
        r->sp.seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ __atomic_add_fetch(&g_counter, 1, __ATOMIC_RELAXED);
    uint64_t idn = __atomic_add_fetch(&g_counter, 1, __ATOMIC_RELAXED);
    snprintf(j->id, sizeof j->id, "%s-%llx%04llx", kind == SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)(idn & 0xffff));
    j->created = (long)time(NULL);
    return 0;
}
