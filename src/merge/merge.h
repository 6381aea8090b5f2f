/* Model merging — the `merge` layer (internal header).
 *
 * config.c     the configuration (mergekit's MergeConfiguration) and its
 *              parameter lookup (mergekit's ConfigReader / evaluate_setting)
 * yaml.c       the YAML front end (libyaml document API)
 * names.c      GGUF tensor names -> Hugging Face names (what filters match)
 * sparsify.c   task-vector sparsification (magnitude, random, outliers,
 *              DELLA) and the counter-based random generator
 * methods.c    one output tensor from the input tensors, per method
 * spherical.c  the hypersphere means: karcher, multislerp
 * selective.c  element-wise selections: sce, nearswap, arcee_fusion
 * merge.c      checks, plan, streaming write (tutti_merge) */
#ifndef TUTTI_MERGE_H
#define TUTTI_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tutti.h"

/* A parameter setting: mergekit's ScalarOrGradient or a list of
 * ConditionalParameter. */
typedef enum merge_set_kind {
    MSET_NUM,  /* number or bool (bool as 0/1, is_bool set) */
    MSET_STR,  /* string scalar */
    MSET_GRAD, /* list of numbers: interpolated over t */
    MSET_SEL,  /* list of strings/bools: picked by t */
    MSET_COND, /* list of {filter, value} */
} merge_set_kind;

typedef struct merge_setting merge_setting;
typedef struct merge_cond {
    char *filter; /* NULL or "*": always matches */
    merge_setting *value;
} merge_cond;

struct merge_setting {
    merge_set_kind kind;
    bool is_bool;
    double num;
    char *str;
    double *nums; /* GRAD: n; SEL: strings in strs */
    char **strs;
    int n;
    merge_cond *conds;
};

typedef struct merge_param {
    char *name;
    merge_setting *set;
} merge_param;

typedef struct merge_params {
    merge_param *p;
    int n;
} merge_params;

typedef struct merge_source {
    char *model;
    int lo, hi; /* layer_range [lo, hi); hi < 0: all layers (models form) */
    merge_params params;
} merge_source;

typedef struct merge_slice {
    merge_source *src;
    int n_src;
    char *base_model; /* NULL: the configuration's */
    merge_params params;
} merge_slice;

typedef enum merge_method {
    MM_LINEAR,
    MM_SLERP,
    MM_NUSLERP,
    MM_TASK_ARITHMETIC,
    MM_TIES,
    MM_DARE_TIES,
    MM_DARE_LINEAR,
    MM_DELLA,
    MM_DELLA_LINEAR,
    MM_BREADCRUMBS,
    MM_BREADCRUMBS_TIES,
    MM_MODEL_STOCK,
    MM_PASSTHROUGH,
    MM_SCE,
    MM_KARCHER,
    MM_MULTISLERP,
    MM_NEARSWAP,
    MM_ARCEE_FUSION,
    MM_COUNT
} merge_method;

/* mergekit-moe (moe.c): a mixture of experts made of dense models.  The
 * router's initial rows (gate vectors) per mergekit's gate_mode. */
typedef enum merge_gate_mode {
    MG_HIDDEN,         /* hidden states at each layer's input, last prompt token ("hidden", "hidden_last") */
    MG_HIDDEN_AVG,     /* the same, averaged over the prompt's tokens */
    MG_CHEAP_EMBED,    /* the prompts' summed token embeddings, every layer alike */
    MG_RANDOM,         /* N(0, 1) */
    MG_UNIFORM_RANDOM, /* U(-1/sqrt(n_embd), 1/sqrt(n_embd)), torch.nn.Linear's initialisation */
} merge_gate_mode;

typedef struct merge_expert {
    char *source_model;
    char **pos, **neg; /* positive_prompts[n_pos], negative_prompts[n_neg] */
    int n_pos, n_neg;
    double noise_scale, residual_scale; /* NAN: none */
} merge_expert;

typedef struct merge_moe {
    merge_expert *experts;
    int n_experts;
    merge_gate_mode gate_mode;
    int experts_per_token; /* default 2 */
} merge_moe;

struct tutti_merge_config {
    merge_moe *moe; /* a mergekit-moe configuration (`experts:`): base_model, dtype and text apply */
    merge_method method;
    char *base_model;
    char *dtype, *out_dtype;
    merge_params params;
    merge_source *models; /* the `models:` form */
    int n_models;
    merge_slice *slices; /* the `slices:` form */
    int n_slices;
    char *text; /* the YAML text (or a generated summary), recorded in the output */
};

const char *merge_method_name(merge_method m);
int merge_method_from_name(const char *s); /* -1 when unknown */
const char *merge_method_list(void);       /* "linear, slerp, ..." for messages */

/* Evaluates a setting for tensor hf_name at gradient position t.  Returns
 * false when the setting does not apply (no condition matched); *is_num says
 * whether the value is a number (else *str is set). */
bool merge_setting_eval(const merge_setting *s, const char *hf_name, const char *gguf_name, double t, double *num,
                        const char **str);
void merge_setting_free(merge_setting *s);
void merge_params_free(merge_params *p);
/* 1 for a numeric parameter name, 2 for a boolean one, 0 unknown. */
int merge_param_kind(const char *name);
/* Output type from the configuration's out_dtype / dtype (ggml type id), or
 * -1 when it names none. */
int merge_config_out_type(const tutti_merge_config *c);
/* ggml type id of a mergekit dtype string (float32, float16, bfloat16), or -1. */
int merge_dtype_type(const char *s);
/* A numeric parameter's value against mergekit's range for its name
 * (density, gamma, t, epsilon in [0, 1]; any finite number otherwise).  0,
 * or TUTTI_ERR with a message naming the parameter and its range. */
int merge_param_check(const char *name, double v);
/* One parameter's setting (every value of a gradient or a condition): a
 * number where one is needed, each checked by merge_param_check. */
int merge_setting_check(const char *name, const merge_setting *s);
/* Every parameter of the configuration (global, per model, per slice and
 * source; every value of a gradient or a condition): numbers where numbers
 * are needed, each in range.  0 or TUTTI_ERR naming where. */
int merge_config_check(const tutti_merge_config *c);
/* Adds (or replaces) a numeric parameter. */
int merge_params_set_num(merge_params *p, const char *name, double v, bool is_bool);

/* A parameter of one tensor: looked up in source, slice and global
 * parameters (any may be NULL) in that order.  Returns true and sets *out
 * when found (bools as 0/1); false when absent everywhere; a string value
 * for a numeric parameter is an error (*err set). */
bool merge_lookup(const merge_params *source, const merge_params *slice, const merge_params *global, const char *name,
                  const char *hf_name, const char *gguf_name, double t, double *out, bool *err);

/* ---- writing (merge.c, moe.c) ---- */

/* files[n_files] (opened from paths) have one architecture (its name into
 * arch) and one token list; 0, or TUTTI_ERR naming the first difference. */
struct gguf_file;
int merge_check_arch_vocab(struct gguf_file *const *files, char *const *paths, int n_files, char *arch,
                           size_t arch_size);
/* The output type of one tensor: llama-quantize's choice (2-D+ weights in
 * out_type, with its fallbacks for rows the blocks do not divide; vectors
 * and norms F32). */
int merge_tensor_type(int out_type, const char *name, uint32_t n_dims, int64_t ne0);
/* llama.cpp's general.file_type for an output type. */
int merge_llama_ftype(int type);
/* n floats (rows of ne0) quantized into buf as type; 0 or TUTTI_ERR. */
int merge_quantize(int type, const float *x, int64_t n, int64_t ne0, void *buf);
/* Where a merge goes: a file (path, written atomically), a stream, or a
 * malloc'd GGUF image (*buf, *size; the caller frees it).  One of them. */
typedef struct merge_out {
    const char *path;
    FILE *stream;
    void **buf;
    size_t *size;
} merge_out;
/* Before the work: a file output is none of the inputs paths[n_paths]
 * (compared as files) and can be written.  0 or TUTTI_ERR. */
int merge_out_check(const merge_out *o, char *const *paths, int n_paths);
struct gguf_writer;
/* The writer's GGUF where o says.  0 or TUTTI_ERR. */
int merge_out_write(struct gguf_writer *w, const merge_out *o);
/* The mixture of experts of a mergekit-moe configuration (moe.c), written
 * where o says, tensors in out_type. */
int merge_moe_write(const tutti_merge_config *c, int out_type, const merge_out *o, const tutti_merge_params *p);
/* The router's rows: gate[n_layer][n_experts][n_embd] for the dense base
 * model at base_path (moe_router.c, mergekit/moe/router.py's
 * get_gate_params).  seed: of the random modes.  Writes a warning on stderr
 * for layers whose gate vectors are nearly dependent (condition number > 5,
 * as mergekit warns).  0 or TUTTI_ERR. */
int merge_moe_gates(const merge_moe *moe, const char *base_path, int n_layer, int64_t n_embd, uint64_t seed,
                    float *gate);

/* tutti_merge into memory: the GGUF image the file would hold, malloc'd
 * into *buf (*size bytes; the caller frees it).  0 or TUTTI_ERR. */
int merge_to_buffer(const tutti_merge_config *c, const tutti_merge_params *p, void **buf, size_t *size);

/* Hugging Face name of a GGUF tensor name for architecture arch (into buf). */
void merge_hf_name(const char *arch, const char *gguf_name, char *buf, size_t size);

/* ---- math ---- */

/* Counter-based uniform in [0, 1): element i of the mask of output tensor
 * `name`, source `source`, seed `seed` (see merge_ref.py's uniforms()). */
uint64_t merge_rng_key(const char *name, uint64_t seed, int source);
double merge_rng_uniform(uint64_t key, int64_t i);

typedef enum merge_sparsify_kind { MSP_NONE, MSP_MAGNITUDE, MSP_RANDOM, MSP_OUTLIERS, MSP_DELLA } merge_sparsify_kind;

/* Sparsifies delta (n floats, rows x (n / rows)) in place (dropped elements
 * become 0) and sets *factor to the rescaling that restores the L1 norm of
 * the task vector when rescale (mergekit's RescaleNorm.l1), else 1: the
 * sparsified delta is delta[i] * *factor, applied in double by the caller.
 * density >= 1 leaves delta whole.  Returns 0 or TUTTI_ERR (epsilon out of
 * range, out of memory). */
int merge_sparsify(merge_sparsify_kind kind, float *delta, int64_t n, int64_t rows, double density, double gamma,
                   double epsilon, bool rescale, uint64_t key, double *factor);

/* One merge of n floats per input: the per-tensor parameters of each input
 * (weight etc.; NAN when absent) and the global ones. */
typedef struct merge_tensor_args {
    merge_method method;
    int n_in;
    const float *const *in; /* n_in inputs */
    int base;               /* index of the base model among in, or -1 */
    int64_t n, rows;        /* elements; rows = n / ne[0] (vectors of ne[0]) */
    int64_t ne0;
    int64_t outer;                                    /* ne[n_dims - 1] (nuslerp_row_wise vectors run along it) */
    const double *weight, *density, *gamma, *epsilon; /* per input */
    double t, lambda, scale;
    bool normalize, rescale, flatten, row_wise, filter_wise;
    double select_topk;     /* sce (default 1) */
    int max_iter;           /* karcher (default 10) */
    double tol;             /* karcher (default 1e-5) */
    double eps;             /* multislerp (default 1e-8) */
    bool normalize_weights; /* multislerp (default true) */
    const char *name;       /* output tensor name (random masks) */
    uint64_t seed;
} merge_tensor_args;

/* Computes the merged tensor into out (n floats).  0 or TUTTI_ERR. */
int merge_tensor(const merge_tensor_args *a, float *out);

/* An error naming the method, model and tensor when input i has no weight. */
int merge_need_weight(const merge_tensor_args *a, int i);
/* The task vector in[i] - in[base] of a's tensor (float32, as mergekit's),
 * malloc'd; NULL with the error set. */
float *merge_task_vector(const merge_tensor_args *a, int i);
/* The methods of spherical.c and selective.c, as merge_tensor calls them
 * (a->n_in >= 2).  0 or TUTTI_ERR. */
int merge_karcher(const merge_tensor_args *a, float *out);
int merge_multislerp(const merge_tensor_args *a, float *out);
int merge_sce(const merge_tensor_args *a, float *out);
int merge_nearswap(const merge_tensor_args *a, float *out);
int merge_arcee_fusion(const merge_tensor_args *a, float *out);

#endif
