/* Making an ensemble: the members' files and settings checked, their
 * vocabularies compared (the alignment), each member opened where the MPI
 * placement puts it (member/member.h's factory), and the schedule of their
 * forward passes chosen (schedule.c).  What the ensemble does afterwards is
 * the fusion layer's (src/fusion/). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ensemble/ensemble.h"
#include "fusion/ensemble_impl.h"
#include "member/remote.h"
#include "mpi/tutti_mpi.h"
#include "util/error.h"

/* Sequential vs parallel members, measured on the shared 2-core machine
 * (load ~9), `tutti run` greedy, byte alignment, 200 bytes:
 *   4 story models: parallel (1 thread each) 0.24-0.27 s; sequential with
 *   2 threads per member 16-24 s (the kernels' thread pool synchronising per
 *   tiny matmul under oversubscription);
 *   stories260K + tok361: parallel 0.101 s, sequential 1 thread 0.103 s,
 *   sequential 2 threads 8.2 s.
 * So members run concurrently, one thread each (n_threads / n_members),
 * whenever there are two or more members and two or more threads. */
static bool default_parallel(int32_t n_members, int32_t n_threads) { return n_members > 1 && n_threads >= 2; }

/* The members' paths (readable before any model is loaded), temperatures
 * and weights (their defaults; tutti_ensemble_params_check checked them). */
static int read_members(tutti_ensemble *e, const tutti_ensemble_params *params) {
    for (int32_t i = 0; i < e->n; i++) {
        const tutti_member_desc *d = &params->members[i];
        if (!d->model_path || !*d->model_path) return tutti_set_error("member %d: no model path", i + 1);
        if (!(e->path[i] = tutti_hub_resolve(d->model_path))) { /* a model spec (src/hub): its cached file */
            tutti_error_prefix("member %d", i + 1);
            return TUTTI_ERR;
        }
        if (!fusion_is_remote_spec(e->path[i]) && access(e->path[i], R_OK) != 0)
            return tutti_set_error("member %d: cannot open model file %s: %s", i + 1, e->path[i], strerror(errno));
        e->temp[i] = isnan(d->temp) ? 1.0f : d->temp; /* checked by tutti_ensemble_params_check */
    }
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < e->n; i++) w[i] = params->members[i].weight;
    ens_resolve_weights(e, w, e->w);
    return 0;
}

/* Vocabulary identity decides the alignment: h[i] is member i's. */
static int choose_align(tutti_ensemble *e, tutti_align asked, uint64_t *h) {
    for (int32_t i = 0; i < e->n; i++)
        if (fusion_member_vocab_hash(e->path[i], &h[i]) < 0) {
            tutti_error_prefix("member %d", i + 1);
            return TUTTI_ERR;
        }
    e->same_vocab = true;
    int32_t differ = -1;
    for (int32_t i = 1; i < e->n; i++)
        if (h[i] != h[0]) {
            e->same_vocab = false;
            if (differ < 0) differ = i;
        }
    e->align = asked == TUTTI_ALIGN_AUTO ? (e->same_vocab ? TUTTI_ALIGN_TOKEN : TUTTI_ALIGN_BYTE) : asked;
    if (e->align == TUTTI_ALIGN_TOKEN && !e->same_vocab)
        return tutti_set_usage_error("token alignment: members 1 (%s) and %d (%s) have different vocabularies (token "
                                     "lists, merges or scores differ), so they cannot share token ids; use byte or "
                                     "span alignment",
                                     e->path[0], differ + 1, e->path[differ]);
    return 0;
}

/* Member i's spec: where the MPI placement puts it (split by layers over
 * every rank, here with its experts over every rank, on another rank, or
 * here). */
static int member_spec_of(const tutti_ensemble *e, const tutti_ensemble_params *params, int32_t i, int32_t n_sessions,
                          int32_t n_threads, member_spec *spec) {
    *spec = (member_spec){.path = e->path[i],
                          .shared = params->models ? params->models[i] : NULL,
                          .n_sessions = n_sessions,
                          .n_ctx = params->n_ctx,
                          .n_threads = n_threads,
                          .index = i};
    const char *counts = NULL;
    if (!fusion_is_remote_spec(e->path[i]) && tutti_mpi_member_split(e->path[i], &counts, &spec->split_ubatch)) {
        spec->split_counts = counts ? counts : "";
        return 0;
    }
    const int experts = fusion_is_remote_spec(e->path[i]) ? 0 : tutti_mpi_member_experts();
    if (experts) { /* here, its routed experts over every rank (--split-experts) */
        spec->split_experts = true;
        spec->split_experts_strict = experts == 2;
        return 0;
    }
    spec->rank = tutti_mpi_member_rank(i, e->n);
    return spec->rank < 0 ? TUTTI_ERR : 0;
}

static int open_members(tutti_ensemble *e, const tutti_ensemble_params *params, const uint64_t *h,
                        int32_t n_threads_each) {
    /* byte/span: a session per hypothesis, two spare, and room for the
     * speculative paths of byte alignment */
    int32_t n_sessions = e->align == TUTTI_ALIGN_TOKEN ? 1 : e->max_hyps + 2 + FUSION_SPEC_MAX;
    for (int32_t i = 0; i < e->n; i++) {
        member_spec spec;
        if (member_spec_of(e, params, i, n_sessions, n_threads_each, &spec) < 0 || !(e->m[i] = member_open(&spec))) {
            tutti_error_prefix("member %d", i + 1);
            return TUTTI_ERR;
        }
        e->m[i]->vocab_hash = h[i];
        if (params->ctx_shift && e->m[i]->set_ctx_shift && e->m[i]->set_ctx_shift(e->m[i], params->n_keep) < 0) {
            tutti_error_prefix("member %d", i + 1);
            return TUTTI_ERR;
        }
        if (params->ctx_shift && !e->m[i]->set_ctx_shift && params->verbose)
            fprintf(stderr,
                    "ensemble: member %d (%s) cannot shift its context (remote, MPI or split member): a full "
                    "context still ends the generation\n",
                    i + 1, e->path[i]);
        /* messages say "member 2 (b.gguf): ..." */
        char file[256];
        snprintf(file, sizeof file, "%s", e->m[i]->name);
        snprintf(e->m[i]->name, sizeof e->m[i]->name, "%d (%.200s)", i + 1, file);
        if (e->align != TUTTI_ALIGN_TOKEN && !(e->trie[i] = fusion_trie_build(e->m[i]->vocab))) {
            tutti_error_prefix("member %d (%s)", i + 1, e->path[i]);
            return TUTTI_ERR;
        }
    }
    if (e->align == TUTTI_ALIGN_TOKEN)
        for (int32_t i = 1; i < e->n; i++)
            if (e->m[i]->n_vocab != e->m[0]->n_vocab)
                return tutti_set_error("token alignment: members 1 and %d give %d and %d logits per position", i + 1,
                                       e->m[0]->n_vocab, e->m[i]->n_vocab);
    return 0;
}

/* A batch (a server's slots) runs the local members' passes: the members
 * then go in turn, each pass on all the batch's threads. */
static int use_batch(tutti_ensemble *e, tutti_batch *b) {
    if (!b) return 0;
    e->parallel = false;
    for (int32_t i = 0; i < e->n; i++)
        if (fusion_member_local_model(e->m[i]) && fusion_member_local_set_batch(e->m[i], b) < 0) return TUTTI_ERR;
    return 0;
}

/* Members one after the other or concurrently (e->parallel, asked: the
 * params' 0 default, 1 in turn, 2 concurrently); per: threads each member
 * got when concurrent. */
static int choose_schedule(tutti_ensemble *e, int asked, bool verbose, int32_t n_threads, int32_t per) {
    bool all_local = true; /* remote and MPI members wait on I/O: they run concurrently */
    for (int32_t i = 0; i < e->n; i++) all_local &= fusion_member_local_model(e->m[i]) != NULL;
    if (asked == 0 && !e->parallel && !all_local) {
        /* with one thread the default is "in turn", but a remote or MPI
         * member's step is a wait, not work: run every member concurrently
         * so the local passes overlap the requests, the local members
         * sharing the threads */
        int32_t n_local = 0;
        for (int32_t i = 0; i < e->n; i++) n_local += fusion_member_local_model(e->m[i]) != NULL;
        e->parallel = true;
        for (int32_t i = 0; i < e->n && n_local > 1; i++)
            if (fusion_member_local_model(e->m[i]) &&
                fusion_member_local_set_threads(e->m[i], n_threads / n_local > 0 ? n_threads / n_local : 1) < 0)
                return TUTTI_ERR;
    }
    if (asked != 0 || !e->parallel || !all_local) return 0;
    /* the default: measure both schedules on this machine, now */
    double t_seq = 0, t_par = 0;
    uint64_t key = 0;
    char cpath[4096] = "";
    bool have_key = ens_schedule_cache_key((const char *const *)e->path, e->n, per, n_threads, &key) == 0;
    bool cached = have_key && ens_schedule_cache_get(key, &t_seq, &t_par, cpath, sizeof cpath);
    if (!cached) {
        int64_t busy_at = ens_schedule_busy_at(); /* before our own passes add to the load */
        if (ens_members_calibrate(e->m, e->n, per, n_threads, &t_seq, &t_par) < 0) return TUTTI_ERR;
        if (have_key) ens_schedule_cache_put(key, t_seq, t_par, busy_at, cpath, sizeof cpath);
    }
    e->parallel = t_par <= t_seq;
    if (verbose)
        fprintf(stderr,
                "ensemble: members %s (%s per step: concurrently, %d thread(s) each, %.3f ms; "
                "in turn, %d threads each, %.3f ms)\n",
                e->parallel ? "concurrently" : "in turn", cached ? "cached measurement" : "measured", per, 1e3 * t_par,
                n_threads, 1e3 * t_seq);
    for (int32_t i = 0; i < e->n && !e->parallel; i++)
        if (fusion_member_local_set_threads(e->m[i], n_threads) < 0) return TUTTI_ERR;
    return 0;
}

tutti_ensemble *tutti_ensemble_new(const tutti_ensemble_params *params) {
    if (tutti_ensemble_params_check(params) < 0) return NULL;
    tutti_ensemble *e = calloc(1, sizeof *e);
    if (!e) return tutti_set_error("ensemble: out of memory"), NULL;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv_go, NULL);
    pthread_cond_init(&e->cv_done, NULL);
    e->n = params->n_members;
    e->rule = params->rule;
    e->select = -1; /* selective fusion off (fusion/ctxweights.c) */
    e->beta = params->beta > 0 ? params->beta : 0.1f;
    e->prune = params->prune >= 0 ? params->prune : 1e-4;
    e->max_hyps = params->max_hyps > 0 ? params->max_hyps : 8;
    uint64_t h[TUTTI_ENSEMBLE_MAX_MEMBERS];
    if (read_members(e, params) < 0 || choose_align(e, params->align, h) < 0) goto fail;
    int32_t n_threads = params->n_threads > 0 ? params->n_threads : (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    e->n_threads = n_threads;
    e->parallel = params->parallel == 2 || (params->parallel == 0 && default_parallel(e->n, n_threads));
    int32_t per = e->parallel ? (n_threads / e->n > 0 ? n_threads / e->n : 1) : n_threads;
    if (open_members(e, params, h, per) < 0 || use_batch(e, params->batch) < 0 ||
        choose_schedule(e, params->parallel, params->verbose, n_threads, per) < 0)
        goto fail;
    if (e->parallel && e->n > 1 && ens_start_workers(e) < 0) goto fail;
    return e;
fail:
    tutti_ensemble_free(e);
    return NULL;
}
