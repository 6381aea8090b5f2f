/* tutti_merge: checks, plan and the streaming write.
 *
 * The configuration is normalized to output slices as mergekit's planner
 * does (the `models:` form is one slice over all layers, with the base model
 * appended when it is not listed).  Before any tensor is computed, every
 * input is opened and compared: architecture, token list, tensor names and
 * shapes (a missing output.weight means a tied output: the token embedding
 * stands in for it).  The plan is one entry per output tensor; the GGUF
 * writer then asks for each tensor's bytes in turn (gguf_writer_add_tensor_fill),
 * so only the inputs of one tensor (dequantized to float32), its float32
 * result and its output bytes are in memory at a time.  Input pages are given
 * back to the kernel after each tensor (madvise), so the mappings do not
 * pile up in the resident set either. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "merge/merge.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/file.h"
#include "util/path.h"

#define NAME_MAX_LEN 64
#define MAX_SOURCES 64 /* models of one slice (fixed arrays below) */

tutti_merge_params tutti_merge_default_params(void) {
    return (tutti_merge_params){.type = NULL, .seed = 0, .name = NULL, .verbose = false, .notice = NULL};
}

static const struct {
    const char *name;
    int type;
} k_out_types[] = {
    {"F32", TUTTI_TYPE_F32},   {"F16", TUTTI_TYPE_F16},   {"BF16", TUTTI_TYPE_BF16}, {"Q8_0", TUTTI_TYPE_Q8_0},
    {"Q4_0", TUTTI_TYPE_Q4_0}, {"Q4_1", TUTTI_TYPE_Q4_1}, {"Q5_0", TUTTI_TYPE_Q5_0}, {"Q5_1", TUTTI_TYPE_Q5_1},
    {"Q4_K", TUTTI_TYPE_Q4_K}, {"Q5_K", TUTTI_TYPE_Q5_K}, {"Q6_K", TUTTI_TYPE_Q6_K}, {"MXFP4", TUTTI_TYPE_MXFP4},
};

static int out_type_of(const char *s) {
    for (size_t i = 0; i < sizeof k_out_types / sizeof *k_out_types; i++)
        if (!strcasecmp(s, k_out_types[i].name)) return k_out_types[i].type;
    return -1;
}

/* The i-quants (tensor types IQ1_S .. IQ4_XS, llama-quantize's IQ2_M,
 * IQ3_M ...) are fitted to their codebooks with an importance matrix, which
 * a merge does not have: tutti writes none of them. */
static bool is_iquant_name(const char *s) { return !strncasecmp(s, "IQ", 2) && s[2] >= '1' && s[2] <= '4'; }

typedef struct src_ref { /* one source of a slice, resolved */
    int file;            /* index into files */
    int lo, hi;
    const merge_params *params;
} src_ref;

typedef struct out_slice {
    src_ref *src;
    int n_src;
    int base; /* index among src, or -1 */
    const merge_params *params;
} out_slice;

typedef struct plan_tensor {
    char name[NAME_MAX_LEN];
    char hf[128];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    int type;
    int slice;
    double t;
    bool copy_first;             /* rope_freqs: not a learned weight */
    bool fallback;               /* rows the output type's blocks do not divide: type is llama-quantize's fallback */
    const gguf_tensor_info **in; /* per source of the slice */
} plan_tensor;

typedef struct merge_run {
    const tutti_merge_config *cfg;
    const tutti_merge_params *p;
    char **paths;
    gguf_file **files;
    int n_files;
    out_slice *slices;
    int n_slices;
    plan_tensor *plan;
    int64_t n_plan, cap_plan;
    const char *arch;
    char arch_buf[64];
    int out_type;
    long page;
} merge_run;

static int file_index(merge_run *r, const char *path) {
    for (int i = 0; i < r->n_files; i++)
        if (!strcmp(r->paths[i], path)) return i;
    char **np = realloc(r->paths, sizeof *np * (size_t)(r->n_files + 1));
    if (!np) return tutti_set_error("merge: out of memory");
    r->paths = np;
    gguf_file **nf = realloc(r->files, sizeof *nf * (size_t)(r->n_files + 1));
    if (!nf) return tutti_set_error("merge: out of memory");
    r->files = nf;
    r->paths[r->n_files] = strdup(path);
    if (!r->paths[r->n_files]) return tutti_set_error("merge: out of memory");
    char *local = tutti_hub_resolve(path); /* a model spec (src/hub): its cached file */
    r->files[r->n_files] = local ? gguf_open(local) : NULL;
    free(local);
    if (!r->files[r->n_files]) {
        free(r->paths[r->n_files]);
        return TUTTI_ERR;
    }
    return r->n_files++;
}

static int block_count(merge_run *r, int f, int64_t *out) {
    char key[96];
    snprintf(key, sizeof key, "%s.block_count", r->arch);
    if (!gguf_get_i64(r->files[f], key, out) || *out < 1 || *out > 100000)
        return tutti_set_error("merge: %s: no valid %s", r->paths[f], key);
    return 0;
}

/* ---- checks ---- */

int merge_check_arch_vocab(gguf_file *const *files, char *const *paths, int n_files, char *arch, size_t arch_size) {
    gguf_str a0;
    if (!gguf_get_str(files[0], "general.architecture", &a0))
        return tutti_set_error("merge: %s: no general.architecture", paths[0]);
    snprintf(arch, arch_size, "%.*s", (int)(a0.len < 63 ? a0.len : 63), a0.data);
    int64_t t0 = gguf_find_key(files[0], "tokenizer.ggml.tokens");
    for (int i = 1; i < n_files; i++) {
        gguf_str a;
        if (!gguf_get_str(files[i], "general.architecture", &a) || a.len != a0.len || memcmp(a.data, a0.data, a.len))
            return tutti_set_error("merge: different architectures: %s is %s, %s is %.*s", paths[0], arch, paths[i],
                                   (int)(a.len < 64 ? a.len : 64), a.data ? a.data : "(none)");
        int64_t ti = gguf_find_key(files[i], "tokenizer.ggml.tokens");
        if ((t0 < 0) != (ti < 0))
            return tutti_set_error("merge: different vocabularies: %s has a token list, %s has none",
                                   paths[t0 < 0 ? i : 0], paths[t0 < 0 ? 0 : i]);
        if (t0 < 0) continue;
        uint64_t n0 = gguf_kv_arr_n(files[0], t0), ni = gguf_kv_arr_n(files[i], ti);
        if (n0 != ni)
            return tutti_set_error("merge: different vocabularies: %s has %llu tokens, %s has %llu (merging "
                                   "needs one token list; fuse them with tutti run/eval instead)",
                                   paths[0], (unsigned long long)n0, paths[i], (unsigned long long)ni);
        for (uint64_t j = 0; j < n0; j++) {
            gguf_str s0 = gguf_kv_str(files[0], t0, j), si = gguf_kv_str(files[i], ti, j);
            if (s0.len != si.len || memcmp(s0.data, si.data, s0.len))
                return tutti_set_error("merge: different vocabularies: token %llu is '%.*s' in %s and '%.*s' "
                                       "in %s (merging needs one token list; fuse them with tutti run/eval "
                                       "instead)",
                                       (unsigned long long)j, (int)(s0.len < 40 ? s0.len : 40), s0.data, paths[0],
                                       (int)(si.len < 40 ? si.len : 40), si.data, paths[i]);
        }
    }
    return 0;
}

static int check_arch_vocab(merge_run *r) {
    if (merge_check_arch_vocab(r->files, r->paths, r->n_files, r->arch_buf, sizeof r->arch_buf)) return TUTTI_ERR;
    r->arch = r->arch_buf;
    return 0;
}

/* Splits "blk.N.rest" (returns N, *rest) or returns -1 for a non-layer tensor. */
static int layer_of(gguf_str name, const char **rest, char *buf) {
    snprintf(buf, NAME_MAX_LEN, "%.*s", (int)(name.len < NAME_MAX_LEN - 1 ? name.len : NAME_MAX_LEN - 1), name.data);
    int l, off = 0;
    if (sscanf(buf, "blk.%d.%n", &l, &off) == 1 && off > 0 && l >= 0) {
        *rest = buf + off;
        return l;
    }
    *rest = buf;
    return -1;
}

/* The tensor `name` of file f, the token embedding for a tied output. */
static const gguf_tensor_info *find(merge_run *r, int f, const char *name) {
    const gguf_tensor_info *t = gguf_find_tensor(r->files[f], name);
    if (!t && !strcmp(name, "output.weight")) t = gguf_find_tensor(r->files[f], "token_embd.weight");
    return t;
}

static bool same_shape(const gguf_tensor_info *a, const gguf_tensor_info *b) {
    if (a->n_dims != b->n_dims) return false;
    for (uint32_t d = 0; d < a->n_dims; d++)
        if (a->ne[d] != b->ne[d]) return false;
    return true;
}

/* Every tensor of file g in layer lg (or the non-layer ones, lg = -1) must
 * have a counterpart in file f at layer lf: no tensor missing either way. */
static int check_counterparts(merge_run *r, int f, int lf, int g, int lg) {
    char buf[NAME_MAX_LEN], nm[NAME_MAX_LEN + 16];
    for (int64_t i = 0; i < gguf_n_tensors(r->files[g]); i++) {
        const gguf_tensor_info *t = gguf_tensor(r->files[g], i);
        const char *rest;
        int l = layer_of(t->name, &rest, buf);
        if (l != lg) continue;
        if (l >= 0) snprintf(nm, sizeof nm, "blk.%d.%s", lf, rest);
        else snprintf(nm, sizeof nm, "%s", rest);
        const gguf_tensor_info *u = find(r, f, nm);
        if (!u)
            return tutti_set_error("merge: missing tensor: %s has %s, %s has no %s", r->paths[g], buf, r->paths[f], nm);
        if (!same_shape(t, u))
            return tutti_set_error("merge: different shapes: %s of %s is %lldx%lld, %s of %s is %lldx%lld", buf,
                                   r->paths[g], (long long)t->ne[0], (long long)t->ne[1], nm, r->paths[f],
                                   (long long)u->ne[0], (long long)u->ne[1]);
        if (!tutti_type_supported(u->type))
            return tutti_set_error("merge: %s: tensor %s has type %s, which tutti cannot dequantize", r->paths[f], nm,
                                   tutti_type_name(u->type));
    }
    return 0;
}

/* ---- plan ---- */

/* llama-quantize's choice for a tensor: only 2-D+ weights are quantized
 * (norms, biases and other vectors stay F32); a row length the type's block
 * does not divide falls back like llama_tensor_get_type (Q4_K -> Q5_0,
 * Q5_K -> Q5_1, Q6_K -> Q8_0, else F16; F16 too when the fallback's block
 * does not divide it either), and *fallback says so. */
static int tensor_type(int out_type, const char *name, uint32_t n_dims, int64_t ne0, bool *fallback) {
    size_t l = strlen(name);
    bool weight = l >= 7 && !strcmp(name + l - 7, ".weight");
    *fallback = false;
    if (n_dims < 2 || !weight || strstr(name, "_norm.weight")) return TUTTI_TYPE_F32;
    int t = out_type;
    const tutti_type_traits *tt = tutti_type_get(t);
    if (ne0 % tt->block_size) {
        t = t == TUTTI_TYPE_Q4_K   ? TUTTI_TYPE_Q5_0
            : t == TUTTI_TYPE_Q5_K ? TUTTI_TYPE_Q5_1
            : t == TUTTI_TYPE_Q6_K ? TUTTI_TYPE_Q8_0
                                   : TUTTI_TYPE_F16;
        if (ne0 % tutti_type_get(t)->block_size) t = TUTTI_TYPE_F16;
        *fallback = true;
    }
    return t;
}

int merge_tensor_type(int out_type, const char *name, uint32_t n_dims, int64_t ne0) {
    bool fallback;
    return tensor_type(out_type, name, n_dims, ne0, &fallback);
}

int merge_out_check(const merge_out *o, char *const *paths, int n_paths) {
    if (!o->path) return 0;
    /* the output must not be an input: compared as files (device and
     * inode), so ./x, /abs/x, a symlink or a hard link to x are all x */
    for (int i = 0; i < n_paths; i++)
        if (tutti_same_file(paths[i], o->path))
            return tutti_set_error("merge: the output %s is the input %s (the same file); write the merge to another "
                                   "file",
                                   o->path, paths[i]);
    return tutti_check_writable(o->path); /* before the work, not after it */
}

int merge_out_write(gguf_writer *w, const merge_out *o) {
    if (o->path) return gguf_writer_write(w, o->path);
    if (o->stream) return gguf_writer_write_stream(w, o->stream, "<stdout>");
    return gguf_writer_write_buffer(w, o->buf, o->size);
}

static int add_plan(merge_run *r, const char *out_name, int slice, double t, const char *const *in_names) {
    if (r->n_plan == r->cap_plan) {
        int64_t cap = r->cap_plan ? r->cap_plan * 2 : 64;
        plan_tensor *np = realloc(r->plan, sizeof *np * (size_t)cap);
        if (!np) return tutti_set_error("merge: out of memory");
        r->plan = np;
        r->cap_plan = cap;
    }
    const out_slice *s = &r->slices[slice];
    plan_tensor *pt = &r->plan[r->n_plan];
    memset(pt, 0, sizeof *pt);
    pt->in = calloc((size_t)s->n_src, sizeof *pt->in);
    if (!pt->in) return tutti_set_error("merge: out of memory");
    r->n_plan++;
    snprintf(pt->name, sizeof pt->name, "%s", out_name);
    merge_hf_name(r->arch, out_name, pt->hf, sizeof pt->hf);
    pt->slice = slice;
    pt->t = t;
    pt->copy_first = !strncmp(out_name, "rope_freqs", 10);
    for (int i = 0; i < s->n_src; i++) {
        const gguf_tensor_info *ti = find(r, s->src[i].file, in_names[i]);
        if (!ti) return tutti_set_error("merge: missing tensor: %s has no %s", r->paths[s->src[i].file], in_names[i]);
        if (i > 0 && !same_shape(ti, pt->in[0]))
            return tutti_set_error("merge: different shapes: %s of %s and %s of %s", in_names[0],
                                   r->paths[s->src[0].file], in_names[i], r->paths[s->src[i].file]);
        if (!tutti_type_supported(ti->type))
            return tutti_set_error("merge: %s: tensor %s has type %s, which tutti cannot dequantize",
                                   r->paths[s->src[i].file], in_names[i], tutti_type_name(ti->type));
        pt->in[i] = ti;
    }
    pt->n_dims = pt->in[0]->n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) pt->ne[d] = pt->in[0]->ne[d];
    pt->type = tensor_type(r->out_type, out_name, pt->n_dims, pt->ne[0], &pt->fallback);
    return 0;
}

static int make_slices(merge_run *r) {
    const tutti_merge_config *c = r->cfg;
    if (c->n_models) {
        int n = c->n_models, base = -1;
        for (int i = 0; i < n; i++)
            if (c->base_model && base < 0 && !strcmp(c->models[i].model, c->base_model)) base = i;
        int n_src = n + (c->base_model && base < 0);
        if (n_src > MAX_SOURCES) return tutti_set_error("merge: at most %d models", MAX_SOURCES);
        r->slices = calloc(1, sizeof *r->slices);
        if (!r->slices) return tutti_set_error("merge: out of memory");
        r->n_slices = 1;
        out_slice *s = &r->slices[0];
        s->src = calloc((size_t)n_src, sizeof *s->src);
        if (!s->src) return tutti_set_error("merge: out of memory");
        s->n_src = n_src;
        s->params = NULL;
        for (int i = 0; i < n_src; i++) {
            const char *path = i < n ? c->models[i].model : c->base_model;
            int f = file_index(r, path);
            if (f < 0) return TUTTI_ERR;
            s->src[i] = (src_ref){f, 0, -1, i < n ? &c->models[i].params : NULL};
        }
        s->base = c->base_model ? (base >= 0 ? base : n) : -1;
        return 0;
    }
    r->slices = calloc((size_t)c->n_slices, sizeof *r->slices);
    if (!r->slices) return tutti_set_error("merge: out of memory");
    r->n_slices = c->n_slices;
    for (int k = 0; k < c->n_slices; k++) {
        const merge_slice *ms = &c->slices[k];
        out_slice *s = &r->slices[k];
        if (ms->n_src > MAX_SOURCES) return tutti_set_error("merge: slice %d: at most %d sources", k + 1, MAX_SOURCES);
        s->src = calloc((size_t)ms->n_src, sizeof *s->src);
        if (!s->src) return tutti_set_error("merge: out of memory");
        s->n_src = ms->n_src;
        s->params = &ms->params;
        s->base = -1;
        const char *bm = ms->base_model ? ms->base_model : c->base_model;
        for (int i = 0; i < ms->n_src; i++) {
            int f = file_index(r, ms->src[i].model);
            if (f < 0) return TUTTI_ERR;
            s->src[i] = (src_ref){f, ms->src[i].lo, ms->src[i].hi, &ms->src[i].params};
            if (bm && s->base < 0 && !strcmp(ms->src[i].model, bm)) s->base = i;
        }
        if (bm && s->base < 0 && c->method != MM_PASSTHROUGH)
            return tutti_set_error("merge: slice %d: base_model %s is not one of its sources", k + 1, bm);
    }
    return 0;
}

static int build_plan(merge_run *r) {
    /* layer ranges: the models form takes every layer of each model */
    for (int k = 0; k < r->n_slices; k++) {
        out_slice *s = &r->slices[k];
        for (int i = 0; i < s->n_src; i++) {
            int64_t nl;
            if (block_count(r, s->src[i].file, &nl)) return TUTTI_ERR;
            if (s->src[i].hi < 0) s->src[i].hi = (int)nl;
            if (s->src[i].hi > nl)
                return tutti_set_error("merge: slice %d: layer_range [%d, %d) of %s, which has %lld layers", k + 1,
                                       s->src[i].lo, s->src[i].hi, r->paths[s->src[i].file], (long long)nl);
            if (s->src[i].hi - s->src[i].lo != s->src[0].hi - s->src[0].lo)
                return tutti_set_error("merge: slice %d: all sources must have the same number of layers (%s: %d, "
                                       "%s: %d)",
                                       k + 1, r->paths[s->src[0].file], s->src[0].hi - s->src[0].lo,
                                       r->paths[s->src[i].file], s->src[i].hi - s->src[i].lo);
        }
        if (r->cfg->method == MM_PASSTHROUGH && s->n_src != 1)
            return tutti_set_error("merge: passthrough: slice %d has %d sources, needs exactly one", k + 1, s->n_src);
    }
    /* no tensor missing anywhere: non-layer tensors against the first file of
     * the first slice, layers against the first source of their slice */
    const out_slice *s0 = &r->slices[0], *sl = &r->slices[r->n_slices - 1];
    for (int k = 0; k < r->n_slices; k++) {
        const out_slice *s = &r->slices[k];
        for (int i = 0; i < s->n_src; i++) {
            if (check_counterparts(r, s->src[i].file, -1, s0->src[0].file, -1) ||
                check_counterparts(r, s0->src[0].file, -1, s->src[i].file, -1))
                return TUTTI_ERR;
            for (int l = 0; l < s->src[i].hi - s->src[i].lo; l++)
                if (check_counterparts(r, s->src[i].file, s->src[i].lo + l, s->src[0].file, s->src[0].lo + l) ||
                    check_counterparts(r, s->src[0].file, s->src[0].lo + l, s->src[i].file, s->src[i].lo + l))
                    return TUTTI_ERR;
        }
    }
    char buf[NAME_MAX_LEN];
    const char *names[MAX_SOURCES];
    gguf_file *f0 = r->files[s0->src[0].file];
    /* pre-layer tensors (token embedding, rope_freqs): t = 0 */
    for (int64_t i = 0; i < gguf_n_tensors(f0); i++) {
        const char *rest;
        if (layer_of(gguf_tensor(f0, i)->name, &rest, buf) >= 0 || !strncmp(rest, "output", 6)) continue;
        for (int j = 0; j < s0->n_src; j++) names[j] = rest;
        if (add_plan(r, rest, 0, 0.0, names)) return TUTTI_ERR;
    }
    int out_layer = 0;
    char in_names[MAX_SOURCES][NAME_MAX_LEN + 16], out_name[NAME_MAX_LEN + 16];
    for (int k = 0; k < r->n_slices; k++) {
        const out_slice *s = &r->slices[k];
        gguf_file *fr = r->files[s->src[0].file];
        int nl = s->src[0].hi - s->src[0].lo;
        for (int l = 0; l < nl; l++, out_layer++) {
            double t = nl > 1 ? (double)l / (nl - 1) : 1.0;
            for (int64_t i = 0; i < gguf_n_tensors(fr); i++) {
                const char *rest;
                if (layer_of(gguf_tensor(fr, i)->name, &rest, buf) != s->src[0].lo + l) continue;
                for (int j = 0; j < s->n_src; j++) {
                    snprintf(in_names[j], sizeof in_names[j], "blk.%d.%s", s->src[j].lo + l, rest);
                    names[j] = in_names[j];
                }
                snprintf(out_name, sizeof out_name, "blk.%d.%s", out_layer, rest);
                if (strlen(out_name) >= NAME_MAX_LEN)
                    return tutti_set_error("merge: tensor name %s too long", out_name);
                if (add_plan(r, out_name, k, t, names)) return TUTTI_ERR;
            }
        }
    }
    /* post-layer tensors (final norm, output): t = 1; output.weight exists
     * unless every source ties it to the token embedding */
    gguf_file *fl = r->files[sl->src[0].file];
    bool any_output = false;
    for (int j = 0; j < sl->n_src; j++)
        any_output |= gguf_find_tensor(r->files[sl->src[j].file], "output.weight") != NULL;
    for (int64_t i = 0; i < gguf_n_tensors(fl); i++) {
        const char *rest;
        if (layer_of(gguf_tensor(fl, i)->name, &rest, buf) >= 0 || strncmp(rest, "output", 6) ||
            !strcmp(rest, "output.weight"))
            continue;
        for (int j = 0; j < sl->n_src; j++) names[j] = rest;
        if (add_plan(r, rest, r->n_slices - 1, 1.0, names)) return TUTTI_ERR;
    }
    if (any_output) {
        for (int j = 0; j < sl->n_src; j++) names[j] = "output.weight";
        if (add_plan(r, "output.weight", r->n_slices - 1, 1.0, names)) return TUTTI_ERR;
    }
    return 0;
}

/* ---- computing one tensor ---- */

static void release_pages(merge_run *r, const gguf_tensor_info *t) {
    uintptr_t a = (uintptr_t)t->data, e = a + t->size;
    a &= ~(uintptr_t)(r->page - 1);
    e = (e + (uintptr_t)r->page - 1) & ~(uintptr_t)(r->page - 1);
    madvise((void *)a, e - a, MADV_DONTNEED);
}

static int param_of(merge_run *r, const plan_tensor *pt, const merge_params *src, const char *name, double *out) {
    bool err = false;
    const merge_params *slice = r->slices[pt->slice].params;
    if (!merge_lookup(src, slice, &r->cfg->params, name, pt->hf, pt->name, pt->t, out, &err)) {
        *out = NAN;
        return err ? TUTTI_ERR : 0;
    }
    return 0;
}

static int fill_tensor(void *ctx, int64_t index, void *buf, uint64_t size) {
    merge_run *r = ctx;
    const plan_tensor *pt = &r->plan[index];
    const out_slice *s = &r->slices[pt->slice];
    int64_t n = 1;
    for (uint32_t d = 0; d < pt->n_dims; d++) n *= pt->ne[d];
    int n_in = pt->copy_first ? 1 : s->n_src;
    float **in = calloc((size_t)n_in, sizeof *in);
    float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
    double w[MAX_SOURCES], dens[MAX_SOURCES], gam[MAX_SOURCES], eps[MAX_SOURCES];
    for (int i = 0; i < MAX_SOURCES; i++) w[i] = dens[i] = gam[i] = eps[i] = NAN;
    int rc = in && out ? 0 : tutti_set_error("merge: out of memory (tensor %s, %lld elements)", pt->name, (long long)n);
    for (int i = 0; rc == 0 && i < n_in; i++) {
        in[i] = malloc(sizeof(float) * (size_t)(n ? n : 1));
        if (!in[i]) rc = tutti_set_error("merge: out of memory (tensor %s)", pt->name);
        else if (!tutti_dequantize_row(pt->in[i]->type, pt->in[i]->data, in[i], n))
            rc = tutti_set_error("merge: %s: cannot dequantize %s", r->paths[s->src[i].file], pt->name);
        if (rc == 0) release_pages(r, pt->in[i]);
        if (rc == 0)
            rc = param_of(r, pt, s->src[i].params, "weight", &w[i]) ||
                         param_of(r, pt, s->src[i].params, "density", &dens[i]) ||
                         param_of(r, pt, s->src[i].params, "gamma", &gam[i]) ||
                         param_of(r, pt, s->src[i].params, "epsilon", &eps[i])
                     ? TUTTI_ERR
                     : 0;
    }
    merge_tensor_args a = {
        .method = r->cfg->method,
        .n_in = n_in,
        .in = (const float *const *)in,
        .base = pt->copy_first ? -1 : s->base,
        .n = n,
        .ne0 = pt->ne[0],
        .rows = n / (pt->ne[0] ? pt->ne[0] : 1),
        .outer = pt->ne[pt->n_dims - 1],
        .weight = w,
        .density = dens,
        .gamma = gam,
        .epsilon = eps,
        .name = pt->name,
        .seed = r->p->seed,
    };
    if (rc == 0) {
        /* the method's global parameters: slice, then global level */
        static const char *const gnames[] = {
            "t",           "lambda",      "scale",    "normalize", "rescale", "nuslerp_flatten",  "nuslerp_row_wise",
            "filter_wise", "select_topk", "max_iter", "tol",       "eps",     "normalize_weights"};
        enum { NG = sizeof gnames / sizeof *gnames };
        double g[NG];
        for (int k = 0; k < NG; k++) g[k] = NAN;
        for (int k = 0; rc == 0 && k < NG; k++) rc = param_of(r, pt, NULL, gnames[k], &g[k]);
        double t = g[0], lambda = g[1], scale = g[2], nz = g[3], rs = g[4], fl = g[5], rw = g[6], fw = g[7];
        merge_method m = r->cfg->method;
        bool def_norm = m == MM_LINEAR || m == MM_TIES || m == MM_DELLA;
        bool def_rescale = m == MM_DARE_TIES || m == MM_DARE_LINEAR || m == MM_DELLA || m == MM_DELLA_LINEAR;
        a.t = t;
        a.lambda = isnan(lambda) ? 1.0 : lambda;
        a.scale = scale;
        a.normalize = isnan(nz) ? def_norm : nz != 0;
        a.rescale = isnan(rs) ? def_rescale : rs != 0;
        a.flatten = isnan(fl) ? true : fl != 0;
        a.row_wise = !isnan(rw) && rw != 0;
        a.filter_wise = !isnan(fw) && fw != 0;
        a.select_topk = g[8];
        a.max_iter = isnan(g[9]) ? 10 : (int)fmin(fmax(g[9], 0), 1e6);
        a.tol = g[10];
        a.eps = g[11];
        a.normalize_weights = isnan(g[12]) || g[12] != 0;
    }
    if (rc == 0) rc = merge_tensor(&a, out);
    if (rc == 0) {
        for (int64_t j = 0; j < n; j++)
            if (!isfinite(out[j])) {
                rc = tutti_set_error("merge: tensor %s: element %lld is not finite (%g)", pt->name, (long long)j,
                                     out[j]);
                break;
            }
    }
    if (rc == 0 && tutti_row_size(pt->type, pt->ne[0]) * (uint64_t)(n / pt->ne[0]) != size)
        rc = tutti_set_error("merge: internal: size of %s", pt->name);
    if (rc == 0) rc = merge_quantize(pt->type, out, n, pt->ne[0], buf);
    if (rc == 0 && r->p->verbose)
        fprintf(stderr, "merge: [%lld/%lld] %-28s %-6s t=%.3f%s\n", (long long)index + 1, (long long)r->n_plan,
                pt->name, tutti_type_name(pt->type), pt->t,
                pt->fallback ? " (fallback: rows of this length do not fill the "
                               "output type's blocks)"
                             : "");
    for (int i = 0; in && i < n_in; i++) free(in[i]);
    free(in);
    free(out);
    if (rc) tutti_error_prefix("merge: tensor %s", pt->name);
    return rc;
}

int merge_quantize(int type, const float *x, int64_t n, int64_t ne0, void *buf) {
    size_t rs = tutti_row_size(type, ne0);
    for (int64_t row = 0; row < n / ne0; row++)
        if (!tutti_quantize_row_ref(type, x + row * ne0, (char *)buf + (size_t)row * rs, ne0))
            return tutti_set_error("merge: cannot write rows of %lld values as %s", (long long)ne0,
                                   tutti_type_name(type));
    return 0;
}

/* ---- metadata ---- */

int merge_llama_ftype(int type) {
    switch (type) {
    case TUTTI_TYPE_F32: return 0;
    case TUTTI_TYPE_F16: return 1;
    case TUTTI_TYPE_Q4_0: return 2;
    case TUTTI_TYPE_Q4_1: return 3;
    case TUTTI_TYPE_Q8_0: return 7;
    case TUTTI_TYPE_Q5_0: return 8;
    case TUTTI_TYPE_Q5_1: return 9;
    case TUTTI_TYPE_Q4_K: return 15; /* llama-quantize's Q4_K is Q4_K_M */
    case TUTTI_TYPE_Q5_K: return 17;
    case TUTTI_TYPE_Q6_K: return 18;
    case TUTTI_TYPE_BF16: return 32;
    case TUTTI_TYPE_MXFP4: return 38; /* LLAMA_FTYPE_MOSTLY_MXFP4_MOE, MXFP4's only ftype */
    default: return 0;
    }
}

static int write_metadata(merge_run *r, gguf_writer *w, int meta_file) {
    gguf_file *f = r->files[meta_file];
    char bc_key[96];
    snprintf(bc_key, sizeof bc_key, "%s.block_count", r->arch);
    uint32_t n_layers = 0;
    for (int k = 0; k < r->n_slices; k++) n_layers += (uint32_t)(r->slices[k].src[0].hi - r->slices[k].src[0].lo);
    char name[512];
    if (r->p->name) snprintf(name, sizeof name, "%s", r->p->name);
    else {
        int o = snprintf(name, sizeof name, "%s merge of", merge_method_name(r->cfg->method));
        for (int i = 0; i < r->n_files && o < (int)sizeof name; i++)
            o += snprintf(name + o, sizeof name - (size_t)o, "%s %s", i ? " +" : "", tutti_base_name(r->paths[i]));
    }
    bool quantized = r->out_type != TUTTI_TYPE_F32 && r->out_type != TUTTI_TYPE_F16 && r->out_type != TUTTI_TYPE_BF16;
    bool have_name = false, have_ft = false, have_qv = false;
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_kv_key(f, i);
        int rc;
        if (gguf_str_eq(k, "general.name")) rc = gguf_writer_add_str(w, "general.name", name), have_name = true;
        else if (gguf_str_eq(k, "general.file_type"))
            rc = gguf_writer_add_u32(w, "general.file_type", (uint32_t)merge_llama_ftype(r->out_type)), have_ft = true;
        else if (gguf_str_eq(k, "general.quantization_version"))
            rc = gguf_writer_add_u32(w, "general.quantization_version", 2), have_qv = true;
        else if (gguf_str_eq(k, bc_key)) rc = gguf_writer_add_u32(w, bc_key, n_layers);
        else if (gguf_str_eq(k, "general.alignment") || (k.len >= 12 && !memcmp(k.data, "tutti.merge.", 12)))
            continue; /* the default alignment; an input's own merge record is not ours */
        else rc = gguf_writer_copy_kv(w, f, i);
        if (rc) return TUTTI_ERR;
    }
    if (!have_name && gguf_writer_add_str(w, "general.name", name)) return TUTTI_ERR;
    if (!have_ft && gguf_writer_add_u32(w, "general.file_type", (uint32_t)merge_llama_ftype(r->out_type)))
        return TUTTI_ERR;
    if (quantized && !have_qv && gguf_writer_add_u32(w, "general.quantization_version", 2)) return TUTTI_ERR;
    if (gguf_writer_add_str(w, "tutti.merge.method", merge_method_name(r->cfg->method))) return TUTTI_ERR;
    const char **models = calloc((size_t)r->n_files, sizeof *models);
    if (!models) return tutti_set_error("merge: out of memory");
    for (int i = 0; i < r->n_files; i++) models[i] = r->paths[i];
    int rc = gguf_writer_add_str_arr(w, "tutti.merge.models", models, (uint64_t)r->n_files);
    free(models);
    if (rc) return TUTTI_ERR;
    if (r->cfg->text) return gguf_writer_add_str(w, "tutti.merge.config", r->cfg->text);
    /* the command-line form: record the global parameters and weights */
    char rec[2048];
    int o = snprintf(rec, sizeof rec, "merge_method: %s\n", merge_method_name(r->cfg->method));
    if (r->cfg->base_model) o += snprintf(rec + o, sizeof rec - (size_t)o, "base_model: %s\n", r->cfg->base_model);
    for (int i = 0; i < r->cfg->n_models && o < (int)sizeof rec; i++) {
        o += snprintf(rec + o, sizeof rec - (size_t)o, "%s  - model: %s\n", i ? "" : "models:\n",
                      r->cfg->models[i].model);
        const merge_params *mp = &r->cfg->models[i].params;
        for (int j = 0; j < mp->n && o < (int)sizeof rec; j++)
            o += snprintf(rec + o, sizeof rec - (size_t)o, "    parameters: {%s: %.17g}\n", mp->p[j].name,
                          mp->p[j].set->num);
    }
    if (r->cfg->params.n && o < (int)sizeof rec) o += snprintf(rec + o, sizeof rec - (size_t)o, "parameters:\n");
    for (int j = 0; j < r->cfg->params.n && o < (int)sizeof rec; j++)
        o += snprintf(rec + o, sizeof rec - (size_t)o, "  %s: %.17g\n", r->cfg->params.p[j].name,
                      r->cfg->params.p[j].set->num);
    if (o < (int)sizeof rec) snprintf(rec + o, sizeof rec - (size_t)o, "seed: %llu\n", (unsigned long long)r->p->seed);
    return gguf_writer_add_str(w, "tutti.merge.config", rec);
}

/* The tensors written in a fallback type (tensor_type), said once through
 * the caller's notice as llama-quantize warns: how many, in which types, and
 * the first few names with their row lengths. */
static void report_fallbacks(const merge_run *r) {
    int64_t n_fb = 0, per_type[TUTTI_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < r->n_plan; i++)
        if (r->plan[i].fallback) n_fb++, per_type[r->plan[i].type]++;
    if (!n_fb || !r->p->notice) return;
    char msg[1024];
    int o =
        snprintf(msg, sizeof msg,
                 "%lld of %lld tensors have rows that %s's %d-value blocks do not divide; written as llama-quantize "
                 "falls back:",
                 (long long)n_fb, (long long)r->n_plan, tutti_type_name(r->out_type),
                 (int)tutti_type_get(r->out_type)->block_size);
    for (int t = 0; t < TUTTI_TYPE_COUNT && o < (int)sizeof msg; t++)
        if (per_type[t])
            o += snprintf(msg + o, sizeof msg - (size_t)o, " %lld as %s,", (long long)per_type[t], tutti_type_name(t));
    int shown = 0;
    for (int64_t i = 0; i < r->n_plan && shown < 4 && o < (int)sizeof msg; i++)
        if (r->plan[i].fallback)
            o += snprintf(msg + o, sizeof msg - (size_t)o, "%s %s (rows of %lld)", shown++ ? "," : " e.g.",
                          r->plan[i].name, (long long)r->plan[i].ne[0]);
    if (n_fb > shown && o < (int)sizeof msg) snprintf(msg + o, sizeof msg - (size_t)o, ", ... (-v lists every tensor)");
    r->p->notice(msg, r->p->notice_user);
}

/* The merge, written where o says. */
static int merge_to(const tutti_merge_config *c, const merge_out *o, const tutti_merge_params *pp) {
    tutti_merge_params p = pp ? *pp : tutti_merge_default_params();
    int out_type = p.type ? out_type_of(p.type) : merge_config_out_type(c);
    if (!p.type && out_type < 0) out_type = TUTTI_TYPE_F16;
    if (out_type < 0 && is_iquant_name(p.type))
        return tutti_set_error("merge: output type '%s' is an i-quant, which is fitted with an importance matrix "
                               "that a merge does not have; merge to F16 or F32, then llama-imatrix and "
                               "llama-quantize --imatrix",
                               p.type);
    if (out_type < 0)
        return tutti_set_error("merge: output type '%s' is not one tutti writes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                               "Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4; mixtures like Q4_K_M: llama-quantize)",
                               p.type);
    if (c->moe) return merge_moe_write(c, out_type, o, &p);
    if (c->n_models == 0 && c->n_slices == 0) return tutti_set_error("merge: no models");
    if (c->method == MM_PASSTHROUGH && c->n_models > 1)
        return tutti_set_error("merge: passthrough takes slices (one source each), not a list of models");
    if (merge_config_check(c) < 0) return TUTTI_ERR;
    merge_run r = {.cfg = c, .p = &p, .out_type = out_type, .page = sysconf(_SC_PAGESIZE)};
    if (r.page <= 0) r.page = 4096;
    gguf_writer *w = NULL;
    int rc = make_slices(&r);
    if (rc == 0) rc = check_arch_vocab(&r);
    if (rc == 0) rc = build_plan(&r);
    if (rc == 0) rc = merge_out_check(o, r.paths, r.n_files);
    if (rc == 0) {
        w = gguf_writer_new();
        if (!w) rc = tutti_set_error("merge: out of memory");
    }
    if (rc == 0) {
        int meta = r.slices[0].base >= 0 ? r.slices[0].src[r.slices[0].base].file : r.slices[0].src[0].file;
        rc = write_metadata(&r, w, meta);
    }
    for (int64_t i = 0; rc == 0 && i < r.n_plan; i++)
        rc = gguf_writer_add_tensor_fill(w, r.plan[i].name, r.plan[i].type, r.plan[i].n_dims, r.plan[i].ne, fill_tensor,
                                         &r);
    if (rc == 0) report_fallbacks(&r);
    if (rc == 0) rc = merge_out_write(w, o);
    gguf_writer_free(w);
    for (int64_t i = 0; i < r.n_plan; i++) free(r.plan[i].in);
    free(r.plan);
    for (int k = 0; k < r.n_slices; k++) free(r.slices[k].src);
    free(r.slices);
    for (int i = 0; i < r.n_files; i++) {
        gguf_close(r.files[i]);
        free(r.paths[i]);
    }
    free(r.files);
    free(r.paths);
    return rc;
}

int tutti_merge(const tutti_merge_config *c, const char *out_path, const tutti_merge_params *p) {
    if (!c || !out_path || !*out_path) return tutti_set_error("merge: NULL configuration or output path");
    return merge_to(c, &(merge_out){.path = out_path}, p);
}

int tutti_merge_stream(const tutti_merge_config *c, FILE *out, const tutti_merge_params *p) {
    if (!c || !out) return tutti_set_error("merge: NULL configuration or stream");
    return merge_to(c, &(merge_out){.stream = out}, p);
}

int merge_to_buffer(const tutti_merge_config *c, const tutti_merge_params *p, void **buf, size_t *size) {
    if (!c || !buf || !size) return tutti_set_error("merge: NULL configuration or buffer");
    *buf = NULL;
    *size = 0;
    return merge_to(c, &(merge_out){.buf = buf, .size = size}, p);
}
