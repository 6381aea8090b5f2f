/* mergekit-moe: a mixture of experts made of dense models of one base
 * (mergekit/moe/mixtral.py), written in llama.cpp's Mixtral layout.
 *
 * The output is the base model (architecture llama: attention, norms, token
 * embedding and output all copied from base_model) whose feed-forward blocks
 * become one expert per entry of `experts`: expert e of layer l is the
 * source model's blk.l.ffn_{gate,up,down}, stacked into ffn_gate_exps /
 * ffn_up_exps ({n_embd, n_ff, n_expert}) and ffn_down_exps ({n_ff, n_embd,
 * n_expert}); the router ffn_gate_inp ({n_embd, n_expert}) holds the gate
 * vectors of moe_router.c, in F32 as llama.cpp's converter and quantizer
 * keep routers; llama.expert_count and llama.expert_used_count
 * (experts_per_token) are added to the base's metadata.  llama.cpp routes
 * such a file as Mixtral: softmax over the router logits, the top
 * experts_per_token, their weights renormalized.  An expert's residual_scale
 * multiplies its down projection; noise_scale adds N(0, noise_scale^2)
 * noise to its three matrices (tutti's counter-based generator, keyed by the
 * seed, the tensor and the expert).  Tensors are written one at a time, like
 * tutti merge, in the output type (dtype, or the --type given). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "merge/merge.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/path.h"

enum { T_COPY, T_ROUTER, T_GATE, T_UP, T_DOWN };

typedef struct moe_tensor {
    char name[96];
    int kind, layer, type;
    const gguf_tensor_info *src; /* T_COPY: the base's tensor */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
} moe_tensor;

typedef struct moe_run {
    const tutti_merge_config *cfg;
    const merge_moe *moe;
    const tutti_merge_params *p;
    gguf_file **files; /* [0] the base, [1 + e] expert e's source */
    char **paths;
    int n_files;
    char arch[64];
    int n_layer;
    int64_t n_embd, n_ff;
    int out_type;
    float *gate; /* [n_layer][n_expert][n_embd] */
    moe_tensor *plan;
    int n_plan;
} moe_run;

static const char *const k_ffn[3] = {"ffn_gate", "ffn_up", "ffn_down"};

static const gguf_tensor_info *layer_tensor(gguf_file *f, int l, const char *kind) {
    char nm[96];
    snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, kind);
    return gguf_find_tensor(f, nm);
}

/* Opens the base and the experts' sources and checks them: one dense llama
 * model shape and one token list. */
static int open_inputs(moe_run *r) {
    r->n_files = 1 + r->moe->n_experts;
    r->files = calloc((size_t)r->n_files, sizeof *r->files);
    r->paths = calloc((size_t)r->n_files, sizeof *r->paths);
    if (!r->files || !r->paths) return tutti_set_error("moe: out of memory");
    for (int i = 0; i < r->n_files; i++) {
        r->paths[i] = i ? r->moe->experts[i - 1].source_model : r->cfg->base_model;
        if (!(r->files[i] = gguf_open(r->paths[i]))) return TUTTI_ERR;
    }
    if (merge_check_arch_vocab(r->files, r->paths, r->n_files, r->arch, sizeof r->arch)) return TUTTI_ERR;
    if (strcmp(r->arch, "llama"))
        return tutti_set_error("moe: %s is a %s model; the Mixtral layout is made of llama models", r->paths[0],
                               r->arch);
    int64_t v = 0;
    for (int i = 0; i < r->n_files; i++) {
        if (gguf_find_key(r->files[i], "llama.expert_count") >= 0 &&
            gguf_get_i64(r->files[i], "llama.expert_count", &v) && v > 0)
            return tutti_set_error("moe: %s has experts already; mergekit-moe combines dense models", r->paths[i]);
        int64_t nl = 0;
        if (!gguf_get_i64(r->files[i], "llama.block_count", &nl) || nl < 1 || nl > 100000)
            return tutti_set_error("moe: %s: no valid llama.block_count", r->paths[i]);
        if (i == 0) r->n_layer = (int)nl;
        else if (nl != r->n_layer)
            return tutti_set_error("moe: %s has %lld layers, the base %s has %d", r->paths[i], (long long)nl,
                                   r->paths[0], r->n_layer);
        for (int l = 0; l < r->n_layer; l++)
            for (int k = 0; k < 3; k++) {
                const gguf_tensor_info *t = layer_tensor(r->files[i], l, k_ffn[k]),
                                       *b = layer_tensor(r->files[0], l, k_ffn[k]);
                if (!t || !b || t->n_dims != 2 || t->ne[0] != b->ne[0] || t->ne[1] != b->ne[1])
                    return tutti_set_error("moe: %s: blk.%d.%s.weight is missing or differs in shape from the base's",
                                           r->paths[i], l, k_ffn[k]);
                if (!tutti_type_supported(t->type))
                    return tutti_set_error("moe: %s: blk.%d.%s.weight has type %s, which tutti cannot dequantize",
                                           r->paths[i], l, k_ffn[k], tutti_type_name(t->type));
            }
    }
    const gguf_tensor_info *g0 = layer_tensor(r->files[0], 0, "ffn_gate");
    r->n_embd = g0->ne[0];
    r->n_ff = g0->ne[1];
    return 0;
}

static int add(moe_run *r, const char *name, int kind, int layer, const gguf_tensor_info *src, uint32_t n_dims,
               const int64_t *ne) {
    moe_tensor *np = realloc(r->plan, sizeof *np * (size_t)(r->n_plan + 1));
    if (!np) return tutti_set_error("moe: out of memory");
    r->plan = np;
    moe_tensor *t = &r->plan[r->n_plan++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind, t->layer = layer, t->src = src, t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->ne[d] = ne[d];
    t->type = kind == T_ROUTER ? TUTTI_TYPE_F32 : merge_tensor_type(r->out_type, name, n_dims, ne[0]);
    if (kind == T_COPY && !tutti_type_supported(src->type))
        return tutti_set_error("moe: %s: tensor %s has type %s, which tutti cannot dequantize", r->paths[0], name,
                               tutti_type_name(src->type));
    return 0;
}

/* The base's tensors in order, each dense FFN matrix replaced by its
 * experts' stack (the router before the gate experts). */
static int make_plan(moe_run *r) {
    gguf_file *b = r->files[0];
    int64_t ne_exp = r->moe->n_experts;
    for (int64_t i = 0; i < gguf_n_tensors(b); i++) {
        const gguf_tensor_info *t = gguf_tensor(b, i);
        char nm[96], rest[96];
        snprintf(nm, sizeof nm, "%.*s", (int)(t->name.len < 95 ? t->name.len : 95), t->name.data);
        int l = -1, off = 0;
        int kind = T_COPY;
        if (sscanf(nm, "blk.%d.%n", &l, &off) == 1 && off > 0) {
            snprintf(rest, sizeof rest, "%s", nm + off);
            kind = !strcmp(rest, "ffn_gate.weight")   ? T_GATE
                   : !strcmp(rest, "ffn_up.weight")   ? T_UP
                   : !strcmp(rest, "ffn_down.weight") ? T_DOWN
                                                      : T_COPY;
        }
        if (kind == T_COPY) {
            if (add(r, nm, T_COPY, l, t, t->n_dims, t->ne)) return TUTTI_ERR;
            continue;
        }
        char out[96];
        if (kind == T_GATE) {
            snprintf(out, sizeof out, "blk.%d.ffn_gate_inp.weight", l);
            if (add(r, out, T_ROUTER, l, NULL, 2, (int64_t[]){r->n_embd, ne_exp})) return TUTTI_ERR;
        }
        snprintf(out, sizeof out, "blk.%d.%s_exps.weight", l, k_ffn[kind - T_GATE]);
        int64_t ne[3] = {t->ne[0], t->ne[1], ne_exp};
        if (add(r, out, kind, l, NULL, 3, ne)) return TUTTI_ERR;
    }
    return 0;
}

/* Counter-based N(0, 1) (Box-Muller), element i of the noise of one tensor. */
static double noise(uint64_t key, int64_t i) {
    double u1 = 1 - merge_rng_uniform(key, 2 * i), u2 = merge_rng_uniform(key, 2 * i + 1);
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

static int fill(void *ctx, int64_t index, void *buf, uint64_t size) {
    moe_run *r = ctx;
    const moe_tensor *t = &r->plan[index];
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    int64_t per = t->n_dims == 3 ? n / t->ne[2] : n; /* one expert's matrix */
    if (tutti_row_size(t->type, t->ne[0]) * (uint64_t)(n / t->ne[0]) != size)
        return tutti_set_error("moe: internal: size of %s", t->name);
    if (t->kind == T_ROUTER) {
        memcpy(buf, r->gate + (int64_t)t->layer * r->moe->n_experts * r->n_embd, sizeof(float) * (size_t)n);
        return 0;
    }
    float *x = malloc(sizeof(float) * (size_t)(per ? per : 1));
    if (!x) return tutti_set_error("moe: out of memory (%s)", t->name);
    int rc = 0;
    int n_mat = t->kind == T_COPY ? 1 : r->moe->n_experts;
    size_t mat_bytes = (size_t)(size / (uint64_t)n_mat);
    for (int e = 0; rc == 0 && e < n_mat; e++) {
        const gguf_tensor_info *src =
            t->kind == T_COPY ? t->src : layer_tensor(r->files[1 + e], t->layer, k_ffn[t->kind - T_GATE]);
        if (!tutti_dequantize_row(src->type, src->data, x, per)) {
            rc = tutti_set_error("moe: %s: cannot dequantize %.*s", r->paths[t->kind == T_COPY ? 0 : 1 + e],
                                 (int)src->name.len, src->name.data);
            break;
        }
        if (t->kind != T_COPY) {
            const merge_expert *ex = &r->moe->experts[e];
            if (!isnan(ex->noise_scale)) {
                uint64_t key = merge_rng_key(t->name, r->p->seed, e);
                for (int64_t j = 0; j < per; j++) x[j] = (float)((double)x[j] + ex->noise_scale * noise(key, j));
            }
            if (t->kind == T_DOWN && !isnan(ex->residual_scale)) { /* in float32, as torch scales a float32 tensor */
                float sc = (float)ex->residual_scale;
                for (int64_t j = 0; j < per; j++) x[j] *= sc;
            }
        }
        rc = merge_quantize(t->type, x, per, t->ne[0], (char *)buf + (size_t)e * mat_bytes);
    }
    free(x);
    if (rc == 0 && r->p->verbose)
        fprintf(stderr, "merge: [%lld/%d] %-28s %-6s\n", (long long)index + 1, r->n_plan, t->name,
                tutti_type_name(t->type));
    return rc;
}

static int write_metadata(moe_run *r, gguf_writer *w) {
    gguf_file *f = r->files[0];
    char name[512];
    if (r->p->name) snprintf(name, sizeof name, "%s", r->p->name);
    else {
        int o = snprintf(name, sizeof name, "mixture of experts of");
        for (int i = 1; i < r->n_files && o < (int)sizeof name; i++)
            o += snprintf(name + o, sizeof name - (size_t)o, "%s %s", i > 1 ? " +" : "", tutti_base_name(r->paths[i]));
    }
    bool quantized = r->out_type != TUTTI_TYPE_F32 && r->out_type != TUTTI_TYPE_F16 && r->out_type != TUTTI_TYPE_BF16;
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_kv_key(f, i);
        if (gguf_str_eq(k, "general.name") || gguf_str_eq(k, "general.file_type") ||
            gguf_str_eq(k, "general.quantization_version") || gguf_str_eq(k, "general.alignment") ||
            (k.len >= 12 && !memcmp(k.data, "tutti.merge.", 12)))
            continue;
        rc = gguf_writer_copy_kv(w, f, i);
    }
    if (rc == 0) rc = gguf_writer_add_str(w, "general.name", name);
    if (rc == 0) rc = gguf_writer_add_u32(w, "general.file_type", (uint32_t)merge_llama_ftype(r->out_type));
    if (rc == 0 && quantized) rc = gguf_writer_add_u32(w, "general.quantization_version", 2);
    if (rc == 0) rc = gguf_writer_add_u32(w, "llama.expert_count", (uint32_t)r->moe->n_experts);
    if (rc == 0) rc = gguf_writer_add_u32(w, "llama.expert_used_count", (uint32_t)r->moe->experts_per_token);
    if (rc == 0) rc = gguf_writer_add_str(w, "tutti.merge.method", "mergekit-moe");
    if (rc == 0)
        rc = gguf_writer_add_str_arr(w, "tutti.merge.models", (const char *const *)r->paths, (uint64_t)r->n_files);
    if (rc == 0 && r->cfg->text) rc = gguf_writer_add_str(w, "tutti.merge.config", r->cfg->text);
    return rc;
}

int merge_moe_write(const tutti_merge_config *c, int out_type, const merge_out *o, const tutti_merge_params *p) {
    moe_run r = {.cfg = c, .moe = c->moe, .p = p, .out_type = out_type};
    gguf_writer *w = NULL;
    int rc = open_inputs(&r);
    if (rc == 0) rc = merge_out_check(o, r.paths, r.n_files);
    if (rc == 0) {
        size_t n = (size_t)r.n_layer * (size_t)r.moe->n_experts * (size_t)r.n_embd;
        r.gate = malloc(sizeof(float) * n);
        rc = r.gate ? merge_moe_gates(r.moe, r.paths[0], r.n_layer, r.n_embd, p->seed, r.gate)
                    : tutti_set_error("moe: out of memory");
    }
    if (rc == 0) rc = make_plan(&r);
    if (rc == 0 && !(w = gguf_writer_new())) rc = tutti_set_error("moe: out of memory");
    if (rc == 0) rc = write_metadata(&r, w);
    for (int i = 0; rc == 0 && i < r.n_plan; i++)
        rc = gguf_writer_add_tensor_fill(w, r.plan[i].name, r.plan[i].type, r.plan[i].n_dims, r.plan[i].ne, fill, &r);
    if (rc == 0) rc = merge_out_write(w, o);
    gguf_writer_free(w);
    for (int i = 0; r.files && i < r.n_files; i++) gguf_close(r.files[i]);
    free(r.files), free(r.paths), free(r.gate), free(r.plan);
    return rc;
}
