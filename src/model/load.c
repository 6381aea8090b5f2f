/* Model loading: GGUF metadata -> hyper-parameters, tensors bound by name
 * with every shape and type checked, tokenizer.  Weights stay in the
 * read-only mapping owned by the gguf_file (never copied).
 *
 * Metadata keys and tensor names follow llama.cpp's GGUF conventions
 * (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): keys are
 * "<arch>.<name>", tensors "token_embd.weight", "blk.N.attn_q.weight", ... */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/model.h"
#include "quant/quant.h"
#include "quant/vecdot.h"
#include "tokenizer/tokenizer.h"
#include "kernels/kernels.h"
#include "util/error.h"
#include "util/mem.h"

tutti_model_params tutti_model_default_params(void) {
    tutti_model_params p = {.verbose = false, .use_mmap = false};
    return p;
}

/* ---- weight placement ---- */

/* Where the weights live.  Generation streams every weight once per token,
 * so they must be mapped by 2 MiB pages (4 KiB pages cost a TLB miss every
 * 4 KiB: +9% tokens/s measured on Llama-1B Q8_0, +2-3% on Q4_K_M).  Two
 * ways give that:
 *   - the file's own mapping, when Linux maps its page cache with 2 MiB
 *     entries (2 MiB folios: ext4 on Linux 6.x makes them when a mapping
 *     advised MADV_HUGEPAGE, as gguf_open advises, reads the file; a file
 *     cached earlier by small writes or by another program's reads holds
 *     small folios: their 2 MiB chunks are re-read from the disk into 2 MiB
 *     folios first, gguf_reread_small).  The weights are then read where
 *     they are: no copy, no second copy of the model beside the page cache,
 *     a load that costs only the populate (reading the file, as llama.cpp's
 *     MAP_POPULATE does);
 *   - else (the re-read gave up: a file system without large folios, a slow
 *     disk, pages other processes map in small folios) one anonymous arena,
 *     2 MiB-aligned and advised as transparent huge pages, the weights
 *     copied in with all cores.  One arena, not one allocation per tensor:
 *     huge pages are resident whole, so per-tensor
 *     allocations would each waste up to 2 MiB.  All tensors move then,
 *     small ones too (norms, biases): touching one 1 KiB norm of a mapping
 *     would map a whole folio (measured: Qwen2.5-0.5B Q8_0 kept 140 MiB of
 *     the file resident for its 47 MiB of small matrices).  The mapped pages
 *     are given back (madvise) slice by slice, so resident memory does not
 *     double, not even at the peak.
 * A weight whose type has an interleaved layout (quant.h) is repacked into
 * the arena in either case when the kernel path has kernels for it, as
 * llama.cpp's CPU "repack" buffers do (the kernels then feed 8 rows per
 * activation load).  An untied token_embd stays mapped (lookups touch only
 * the rows used), and so do the unrepacked weights of a model loaded from a
 * caller's buffer.  A tied output matrix (alias = token_embd) shares a plain
 * copy, but keeps the original for the embedding lookups when repacked. */
/* A weight to place: matrices [m0, m1) of w (all of them but for the
 * routed experts of a rank's share). */
typedef struct placed {
    tutti_weight *w;
    int64_t m0, m1;
    bool in_place; /* the file's mapping keeps them (mapped by 2 MiB pages) */
} placed;

/* Bytes of p's matrices. */
static size_t placed_bytes(const placed *p) {
    return tutti_row_size(p->w->type, p->w->n_cols) * (size_t)(p->w->n_rows * (p->m1 - p->m0));
}

/* Whether the file mapping at p's matrices (faulted in) is mapped by 2 MiB
 * pages; range caches the answer for the mapping [range[0], range[1]) that
 * was asked about last (range[2]: 1 huge, 0 not). */
static bool mapped_huge(const placed *p, uintptr_t range[3]) {
    const uintptr_t a = (uintptr_t)tutti_weight_mat(p->w, p->m0);
    if (a >= range[0] && a < range[1]) return range[2];
    const double share = tutti_mem_huge_share((const void *)a, range);
    if (share < 0) range[0] = range[1] = 0; /* unknown: ask again next time */
    range[2] = share >= 0.9;
    return range[2];
}

/* Bytes p takes in the arena (0: stays where it is); *rt = repacked type or -1. */
static size_t place_size(const tutti_model *m, const placed *p, int *rt) {
    const tutti_weight *w = p->w;
    *rt = -1;
    if (!w->data || p->m1 <= p->m0) return 0;
    const int64_t rows = w->n_rows * (p->m1 - p->m0);
    /* a 3-D weight's matrices (experts) are repacked as one when no panel of
     * 8 interleaved rows (quant.h) straddles two of them */
    const bool whole_panels = w->n_mat == 1 || w->n_rows % 8 == 0;
    const int t = tutti_repack_type(w->type);
    const size_t bytes =
        t >= 0 && whole_panels && tutti_vec_dot_get(t) ? tutti_repack_size(w->type, rows, w->n_cols) : 0;
    if (bytes) {
        *rt = t;
        return bytes;
    }
    return m->mapped && !p->in_place ? tutti_row_size(w->type, w->n_cols) * (size_t)rows : 0;
}

/* Copies (rt < 0) or repacks (into type rt) p's matrices to dst. */
static void place_weight(const tutti_model *m, const placed *p, tutti_weight *alias, char *dst, int rt) {
    tutti_weight *w = p->w;
    /* in slices of ~8 MiB whose source pages are given back at once */
    const bool give_back = m->mapped && !(rt >= 0 && alias);
    const size_t src_row = tutti_row_size(w->type, w->n_cols);
    const size_t dst_row = rt >= 0 ? tutti_row_size(rt, w->n_cols) : src_row;
    const int64_t rows = w->n_rows * (p->m1 - p->m0);
    const char *from = tutti_weight_mat(w, p->m0);
    int64_t slice = (int64_t)(((size_t)8 << 20) / src_row) / 8 * 8;
    if (slice < 8) slice = 8;
    for (int64_t r = 0; r < rows; r += slice) {
        const int64_t nr = rows - r < slice ? rows - r : slice;
        const char *src = from + (size_t)r * src_row;
        if (rt >= 0) tutti_repack(w->type, src, dst + (size_t)r * dst_row, nr, w->n_cols);
        else memcpy(dst + (size_t)r * dst_row, src, (size_t)nr * src_row);
        if (give_back) {
            const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
            const uintptr_t lo = ((uintptr_t)src + page - 1) / page * page;
            const uintptr_t hi = ((uintptr_t)src + (size_t)nr * src_row) / page * page;
            if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advisory: failure only costs memory */
        }
    }
    if (p->m0 > 0 || p->m1 < w->n_mat) { /* a share of the experts: the rest stays mapped */
        w->part = dst, w->part_type = rt >= 0 ? rt : w->type, w->part0 = p->m0, w->part1 = p->m1;
        return;
    }
    w->data = dst;
    if (rt >= 0) w->type = rt;
    else if (alias) alias->data = dst;
}

#define LAYER_WEIGHTS 39

/* Every weight of layer L (absent ones have data NULL). */
static int layer_weights(tutti_layer *L, tutti_weight **ws) {
    tutti_weight *all[LAYER_WEIGHTS] = {
        &L->attn_norm,
        &L->wq,
        &L->wk,
        &L->wv,
        &L->wqkv,
        &L->bq,
        &L->bk,
        &L->bv,
        &L->q_norm,
        &L->k_norm,
        &L->wo,
        &L->bo,
        &L->attn_sinks,
        &L->post_attn_norm,
        &L->ffn_norm,
        &L->ffn_gate,
        &L->ffn_up,
        &L->ffn_down,
        &L->post_ffn_norm,
        &L->ffn_gate_inp,
        &L->ffn_gate_inp_b,
        &L->exp_probs_b,
        &L->ffn_gate_exps,
        &L->ffn_up_exps,
        &L->ffn_down_exps,
        &L->ffn_gate_exps_b,
        &L->ffn_up_exps_b,
        &L->ffn_down_exps_b,
        &L->ffn_gate_shexp,
        &L->ffn_up_shexp,
        &L->ffn_down_shexp,
        &L->ffn_gate_inp_shexp,
        &L->wq_a,
        &L->q_a_norm,
        &L->wq_b,
        &L->wkv_a_mqa,
        &L->kv_a_norm,
        &L->wk_b,
        &L->wv_b,
    };
    memcpy(ws, all, sizeof all);
    return LAYER_WEIGHTS;
}

/* The weights of the model's part (all layers of a whole model) but
 * token_embd, output last (entries may be absent: data NULL); the routed
 * experts' tensors with the share [part_e0, part_e1), with
 * part_experts_only nothing but them and their biases. */
static int model_weights(tutti_model *m, placed *out, int cap) {
    int n = 0;
    tutti_weight *ws[LAYER_WEIGHTS];
    for (int il = m->part_il0; il < m->part_il1; il++) {
        tutti_layer *L = &m->layers[il];
        const int k = layer_weights(L, ws);
        for (int i = 0; i < k && n < cap; i++) {
            const bool exps = ws[i] == &L->ffn_gate_exps || ws[i] == &L->ffn_up_exps || ws[i] == &L->ffn_down_exps;
            const bool bias =
                ws[i] == &L->ffn_gate_exps_b || ws[i] == &L->ffn_up_exps_b || ws[i] == &L->ffn_down_exps_b;
            if (m->part_experts_only && !exps && !bias) continue;
            const int64_t nm = ws[i]->n_mat;
            out[n++] = (placed){ws[i],
                                exps && m->part_e0 < nm ? m->part_e0
                                : exps                  ? nm
                                                        : 0,
                                exps && m->part_e1 < nm ? m->part_e1 : nm, false};
        }
    }
    tutti_weight *top[] = {&m->output_norm, &m->rope_freqs, &m->output};
    for (int i = 0; i < 3 && n < cap && m->part_head && !m->part_experts_only; i++)
        out[n++] = (placed){top[i], 0, top[i]->n_mat, false};
    return n;
}

/* One weight's move into the arena (place_weight's arguments). */
typedef struct placement {
    const placed *p;
    tutti_weight *alias;
    char *dst;
    int rt;
} placement;

typedef struct place_job {
    const tutti_model *m;
    placement *p;
    int n;
    atomic_int next;
} place_job;

/* A thread's share of the moves: the next unclaimed weight until none is left. */
static void place_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    place_job *job = arg;
    for (int i; (i = atomic_fetch_add(&job->next, 1)) < job->n;)
        place_weight(job->m, job->p[i].p, job->p[i].alias, job->p[i].dst, job->p[i].rt);
}

/* Moves every placed weight into arena (laid out as place_size says), with
 * all cores: copying is bound by faulting in fresh pages, which scales. */
static void place_all(tutti_model *m, const placed *ws, int n, char *arena) {
    placement *p = malloc(sizeof *p * (size_t)n);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    tutti_threadpool *tp = p ? tutti_threadpool_new(cores < 1 ? 1 : cores > 8 ? 8 : (int)cores) : NULL;
    place_job job = {.m = m, .p = p, .n = 0};
    char *at = arena;
    for (int i = 0; i < n; i++) {
        int rt;
        const size_t sz = place_size(m, &ws[i], &rt);
        if (!sz) continue;
        tutti_weight *alias = ws[i].w == &m->output && m->tied ? &m->token_embd : NULL;
        if (p) p[job.n++] = (placement){&ws[i], alias, at, rt};
        else place_weight(m, &ws[i], alias, at, rt); /* no memory for the list: one thread */
        at += (sz + 63) / 64 * 64;
    }
    atomic_init(&job.next, 0);
    if (p) tutti_threadpool_run_dynamic(tp, place_worker, &job); /* tp NULL: this thread alone */
    tutti_threadpool_free(tp);
    free(p);
}

static int place_weights(tutti_model *m) {
    const int cap = LAYER_WEIGHTS * m->hp.n_layer + 3;
    placed *ws = malloc(sizeof *ws * (size_t)cap);
    if (!ws) return tutti_set_error("%s: out of memory", m->path);
    const int n = model_weights(m, ws, cap);
    uintptr_t range[3] = {0, 0, 0};
    size_t total = 0;
    /* Fault in what will be read (the file read here if it is not cached),
     * then re-read what the page cache held in small folios (another
     * program read the file first).  Measured on the 2-core VM after
     * llama-completion read the file from the disk: 14% of it was in small
     * folios (68 MiB of Qwen2.5-0.5B Q8_0's 504 MiB, and of Llama-3.2-1B
     * Q8_0's 1255 MiB), which sent the whole model to the copy below: 0.2-1.2
     * s of system time (Llama: 2.9-3.8 s) for first-touching fresh memory,
     * against 0.02 s for the load with the re-read.  A file cached wholly
     * in small folios: 504 MiB re-read in 0.37 s. */
    for (int i = 0; i < n && m->mapped; i++)
        if (ws[i].w->data && ws[i].m1 > ws[i].m0)
            tutti_mem_populate(tutti_weight_mat(ws[i].w, ws[i].m0), placed_bytes(&ws[i]));
    if (m->mapped) m->weights_reread = gguf_reread_small(m->gguf);
    for (int i = 0; i < n; i++) {
        int rt;
        if (m->mapped && ws[i].w->data && ws[i].m1 > ws[i].m0) ws[i].in_place = mapped_huge(&ws[i], range);
        total += (place_size(m, &ws[i], &rt) + 63) / 64 * 64;
        if (ws[i].in_place && rt < 0) m->weights_in_place += placed_bytes(&ws[i]);
    }
    void *arena = NULL;
    if (total && posix_memalign(&arena, (size_t)2 << 20, total) == 0) {
        (void)madvise(arena, total, MADV_HUGEPAGE); /* advisory */
        m->weights_mem = arena, m->weights_mem_size = total;
        place_all(m, ws, n, arena);
    } /* else no memory for a copy: the weights stay mapped (and unrepacked) */
    free(ws);
    return TUTTI_OK;
}

/* ---- public ---- */

/* What of the file a process places: layers [il0, il1) (il1 < 0: all),
 * the head, the routed experts' share xr of xk (xk 0: all of them), and
 * with experts_only nothing but the experts. */
typedef struct load_part {
    int32_t il0, il1;
    bool head;
    int32_t xr, xk;
    bool experts_only;
} load_part;

/* Loads from path (buf == NULL: mmap) or from the caller's buffer. */
static tutti_model *load_local(const char *path, const void *buf, size_t size, const tutti_model_params *params,
                               const load_part *part) {
    int32_t il0 = part->il0, il1 = part->il1;
    tutti_model_params defaults = tutti_model_default_params();
    if (!params) params = &defaults;
    if (!path) {
        tutti_set_error("tutti_model_load: path is NULL");
        return NULL;
    }
    tutti_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        tutti_set_error("%s: out of memory", path);
        return NULL;
    }
    m->gguf = buf ? gguf_open_buffer(buf, size, path) : gguf_open(path);
    if (!m->gguf) goto fail;

    gguf_str arch;
    if (!gguf_get_str(m->gguf, "general.architecture", &arch)) {
        if (gguf_find_key(m->gguf, "general.architecture") < 0)
            tutti_set_error("%s: metadata key general.architecture is missing (is this a model file, not a "
                            "vocabulary-only file?)",
                            path);
        goto fail;
    }
    m->arch = tutti_arch_find(arch.data, arch.len);
    if (!m->arch) {
        tutti_set_error("%s: architecture '%.*s' is not supported (supported: %s)", path,
                        (int)(arch.len > 64 ? 64 : arch.len), arch.data, tutti_arch_list());
        goto fail;
    }
    if (gguf_n_tensors(m->gguf) == 0) {
        tutti_set_error("%s: the file has no tensors (a vocabulary-only GGUF? tutti tokenize accepts those)", path);
        goto fail;
    }
    if (tutti_load_hparams(m) || tutti_bind_tensors(m)) goto fail;
    if (il1 < 0) il1 = m->hp.n_layer; /* the whole model */
    if (il0 < 0 || il0 > il1 || il1 > m->hp.n_layer) {
        tutti_set_error("%s: layers [%d, %d) are not a range of the model's %d layers", path, il0, il1, m->hp.n_layer);
        goto fail;
    }
    m->part_il0 = il0, m->part_il1 = il1, m->part_head = part->head;
    const int64_t ne = m->hp.n_expert;
    m->part_e0 = part->xk > 0 ? (int32_t)(ne * part->xr / part->xk) : 0;
    m->part_e1 = part->xk > 0 ? (int32_t)(ne * (part->xr + 1) / part->xk) : (int32_t)ne;
    m->part_experts_only = part->experts_only;

    m->vocab = tutti_vocab_from_gguf(m->gguf);
    if (!m->vocab) {
        /* the vocabulary's messages mostly name the file already */
        if (!strstr(tutti_last_error(), path)) tutti_error_prefix("%s: tokenizer", path);
        goto fail;
    }
    /* Token ids index token_embd/output rows and the vocabulary alike: a
     * mismatch would read past one of them (llama.cpp requires equality too). */
    if (tutti_vocab_n_tokens(m->vocab) != m->hp.n_vocab) {
        tutti_set_error("%s: tensor 'token_embd.weight' has %d rows but the vocabulary (tokenizer.ggml.tokens) "
                        "has %d tokens",
                        path, m->hp.n_vocab, tutti_vocab_n_tokens(m->vocab));
        goto fail;
    }
    m->mapped = !buf;
    if (!params->use_mmap && place_weights(m)) goto fail;
    if (params->verbose) tutti_model_describe(m, stderr);
    return m;
fail:
    tutti_model_free(m);
    return NULL;
}

/* A model spec "hf://..." (src/hub) loads its cached file. */
static tutti_model *load(const char *path, const void *buf, size_t size, const tutti_model_params *params,
                         const load_part *part) {
    if (buf || !tutti_is_hub_spec(path)) return load_local(path, buf, size, params, part);
    char *local = tutti_hub_resolve(path);
    tutti_model *m = local ? load_local(local, NULL, 0, params, part) : NULL;
    free(local);
    return m;
}

tutti_model *tutti_model_load(const char *path, const tutti_model_params *params) {
    return load(path, NULL, 0, params, &(load_part){0, -1, true, 0, 0, false});
}

tutti_model *tutti_model_load_part(const char *path, const tutti_model_params *params, int32_t il0, int32_t il1,
                                   bool head) {
    return load(path, NULL, 0, params, &(load_part){il0, il1, head, 0, 0, false});
}

tutti_model *tutti_model_load_experts(const char *path, const tutti_model_params *params, int32_t rank, int32_t n_ranks,
                                      bool experts_only) {
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks) {
        tutti_set_error("%s: expert share %d of %d ranks", path, rank, n_ranks);
        return NULL;
    }
    return load(path, NULL, 0, params, &(load_part){0, -1, !experts_only, rank, n_ranks, experts_only});
}

tutti_model *tutti_model_load_buffer(const void *buf, size_t size, const char *name, const tutti_model_params *params) {
    if (!buf) {
        tutti_set_error("tutti_model_load_buffer: buffer is NULL");
        return NULL;
    }
    return load(name ? name : "(buffer)", buf, size, params, &(load_part){0, -1, true, 0, 0, false});
}

void tutti_model_free(tutti_model *model) {
    if (!model) return;
    tutti_vocab_free(model->vocab);
    free(model->layers);
    free(model->weights_mem);
    gguf_close(model->gguf);
    free(model->path);
    free(model);
}

const tutti_vocab *tutti_model_vocab(const tutti_model *model) { return model ? model->vocab : NULL; }
int32_t tutti_model_n_vocab(const tutti_model *model) { return model ? model->hp.n_vocab : 0; }
int32_t tutti_model_n_ctx_train(const tutti_model *model) { return model ? model->hp.n_ctx_train : 0; }
const char *tutti_model_arch(const tutti_model *model) { return model ? model->arch->name : NULL; }
int32_t tutti_model_n_expert(const tutti_model *model) { return model ? model->hp.n_expert : 0; }
int32_t tutti_model_n_expert_used(const tutti_model *model) { return model ? model->hp.n_expert_used : 0; }

/* The mixture-of-experts and latent-attention lines of tutti_model_describe. */
static void describe_moe(const tutti_model *model, FILE *out) {
    const tutti_hparams *hp = &model->hp;
    if (model->arch->mla)
        fprintf(out,
                "  latent attention: kv_lora_rank %d, %s, query heads %d (%d rope), values %d; cache %d values "
                "per token and layer\n",
                hp->n_lora_kv, hp->n_lora_q ? "q LoRA" : "plain q", hp->head_dim_k_mla, hp->n_rot, hp->head_dim_v_mla,
                hp->head_dim_k);
    if (hp->n_expert == 0) return;
    const char *gating = hp->gating == TUTTI_GATING_SIGMOID   ? "sigmoid"
                         : hp->gating == TUTTI_GATING_SOFTMAX ? "softmax"
                                                              : "the selected logits' softmax";
    fprintf(out, "  experts: %d, %d per token, %d wide%s; router: %s%s%s", hp->n_expert, hp->n_expert_used,
            hp->n_ff_exp, model->arch->moe_oai ? " (biased, clamped SwiGLU)" : "", gating,
            model->layers[hp->n_layer - 1].exp_probs_b.data ? " + selection bias" : "",
            hp->expert_norm_w ? ", renormalized" : "");
    if (hp->expert_weights_scale != 0.0f && hp->expert_weights_scale != 1.0f)
        fprintf(out, ", x %g", hp->expert_weights_scale);
    if (hp->n_expert_groups > 1) fprintf(out, ", %d groups (%d used)", hp->n_expert_groups, hp->n_group_used);
    if (hp->n_ff_shexp) fprintf(out, "; shared expert %d wide", hp->n_ff_shexp);
    if (hp->n_layer_dense_lead) fprintf(out, "; leading dense layers: %d", hp->n_layer_dense_lead);
    fprintf(out, "\n");
}

void tutti_model_describe(const tutti_model *model, FILE *out) {
    if (!model || !out) return;
    const tutti_hparams *hp = &model->hp;
    gguf_str name = {"", 0};
    gguf_get_str(model->gguf, "general.name", &name);
    fprintf(out, "model: %s\n  name: %.*s\n  architecture: %s\n", model->path, (int)(name.len > 200 ? 200 : name.len),
            name.data, model->arch->name);
    fprintf(out,
            "  n_vocab %d, n_ctx_train %d, n_embd %d, n_layer %d, n_ff %d\n"
            "  n_head %d, n_head_kv %d, head_dim %d/%d (k/v), n_rot %d, rms_eps %g\n"
            "  rope: base %g%s, position scale %g%s\n",
            hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv, hp->head_dim_k,
            hp->head_dim_v, hp->n_rot, hp->rms_eps, hp->rope_base,
            model->rope_freqs.data ? " with rope_freqs factors" : "", hp->rope_scale,
            model->arch->rope_mode == TUTTI_ROPE_NEOX ? ", neox" : ", normal");
    if (hp->yarn_scale > 0 || hp->rope_attn_factor != 1.0f || model->rope_long.data)
        fprintf(out, "  rope scaling:%s attn_factor %g, original context %d%s\n", hp->yarn_scale > 0 ? " yarn," : "",
                hp->rope_attn_factor, hp->n_ctx_orig,
                model->rope_long.data ? ", longrope factors (long above the original context)" : "");
    if (hp->n_swa) {
        if (hp->swa_pattern == 0) fprintf(out, "  sliding window %d on every layer", hp->n_swa);
        else
            fprintf(out, "  sliding window %d on layers il %% %d < %d", hp->n_swa, hp->swa_pattern,
                    hp->swa_pattern - 1);
        fprintf(out, ", their rope base %g", hp->rope_base_swa);
        fprintf(out, "\n");
    }
    if (hp->attn_softcap > 0 || hp->final_softcap > 0)
        fprintf(out, "  soft-capping: attention %g, final %g\n", hp->attn_softcap, hp->final_softcap);
    const tutti_arch *a = model->arch;
    fprintf(out, "  attention: scale %g on %s, q/k/v bias %s, q/k norm %s, %s qkv\n", hp->attn_scale,
            a->attn_scale_on_q ? "q" : "scores", model->layers[0].bq.data ? "yes" : "no", a->qk_norm ? "yes" : "no",
            a->fused_qkv ? "fused" : "separate");
    fprintf(out, "  ffn: %s gate, %s gate/up; post-norms %s; embeddings x sqrt(n_embd) %s\n",
            a->act == TUTTI_ACT_GELU_TANH ? "GELU (tanh)" : "SiLU", a->fused_gate_up ? "fused" : "separate",
            a->post_norms ? "yes" : "no", a->embd_scale ? "yes" : "no");
    describe_moe(model, out);
    fprintf(out, "  output: %s\n", model->tied ? "tied to token_embd" : "separate");

    /* tensor types: count and bytes per type */
    int64_t count[TUTTI_TYPE_COUNT] = {0};
    uint64_t bytes[TUTTI_TYPE_COUNT] = {0}, total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(model->gguf); i++) {
        const gguf_tensor_info *t = gguf_tensor(model->gguf, i);
        if (t->type >= 0 && t->type < TUTTI_TYPE_COUNT) {
            count[t->type]++;
            bytes[t->type] += t->size;
        }
        total += t->size;
    }
    fprintf(out, "  tensors: %" PRId64 ", %.2f MiB:", gguf_n_tensors(model->gguf), (double)total / (1 << 20));
    for (int t = 0; t < TUTTI_TYPE_COUNT; t++)
        if (count[t])
            fprintf(out, " %s×%" PRId64 " (%.2f MiB)", tutti_type_name(t), count[t], (double)bytes[t] / (1 << 20));
    fprintf(out, "\n");
    if (model->weights_in_place || model->weights_mem_size)
        fprintf(out,
                "  weights: %.2f MiB read in the file's mapping (2 MiB pages; %.2f MiB of the file re-read into 2 "
                "MiB folios), %.2f MiB copied or repacked\n",
                (double)model->weights_in_place / (1 << 20), (double)model->weights_reread / (1 << 20),
                (double)model->weights_mem_size / (1 << 20));
    fprintf(out, "  tokenizer: %s (pre %s), %d tokens\n", tutti_vocab_type(model->vocab), tutti_vocab_pre(model->vocab),
            tutti_vocab_n_tokens(model->vocab));
}
