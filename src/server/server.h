/* `tutti serve`: an OpenAI-compatible HTTP server over tutti ensembles
 * (libmicrohttpd for HTTP, cJSON for JSON).  Uses only include/tutti.h.
 *
 * Pieces:
 *   request.c      body -> srv_request (fuzzed): strict JSON, the table of fields
 *   framing.c      HTTP framing checks (fuzzed): Content-Length, Transfer-Encoding, request line
 *   conn.c         the listening socket, connection limits and time limits
 *   chat_tokens.c  messages -> a member's prompt ids (server_chat_tokens)
 *   registry.c     loaded models, served model names (specs), config file
 *   slots.c        --parallel slots (each with its own ensembles, so its own
 *                  sessions and KV caches; weights shared), the bounded
 *                  queue, generation jobs and their output
 *   generate.c     a completion request -> a job (prompts, context, limits)
 *   http.c         endpoints, auth, CORS, SSE, errors, /metrics, the daemon's life
 *   echo.c         /v1/completions echo: the prompt's logprobs
 *   embed.c        POST /v1/embeddings
 *   tools_req.c    the tool fields of a chat request (fuzzed with request.c)
 *   tools.c        tool calls: template variables, the call grammar, the calls read back
 *   web/index.html the page at GET / (built in as srv_web_page by CMakeLists.txt)
 */
#ifndef TUTTI_SERVER_H
#define TUTTI_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/logprobs.h"
#include "server/request.h"
#include "tutti.h"

typedef struct server_opts {
    const char *models[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* -m, in order */
    int n_models;
    const char *ens_file; /* -e */
    float weights[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int n_weights; /* 0: not given */
    float temps[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int n_temps;
    int rule, align;    /* -1: not given */
    float beta;         /* <= 0: default */
    double prune;       /* < 0: default */
    int max_hyps;       /* <= 0: default */
    bool adapt, route;  /* --adapt, --route (for 'default') */
    double adapt_alpha; /* --adapt-alpha, < 0: not given */
    double route_tau;   /* --route-tau, <= 0: not given */
    double select;      /* --select, < 0: not given */
    bool no_context;    /* --no-context: the -e file's context weights are not used */
    const char *config; /* --config FILE (JSON) */
    const char *chat_template_file;
    const char *host;
    int port; /* 0: any free port (printed) */
    /* API keys: --api-key, the lines of --api-key-file, or TUTTI_API_KEY
     * (n_api_keys 0: no authentication) */
    char **api_keys;
    int n_api_keys;
    int parallel;       /* slots */
    bool cont_batching; /* the slots' passes share one batch (tutti_batch) */
    int n_ubatch;       /* its tokens per forward pass */
    int pooling;        /* /v1/embeddings: TUTTI_POOL_MEAN, _CLS or _LAST; -1: the GGUF's */
    int queue;          /* waiting requests beyond the slots */
    int n_ctx;          /* -1: min(trained, 4096); 0: the trained context; else tokens */
    int n_threads;
    size_t max_body;
    /* connections (conn.h): seconds, and counts (max_conns_per_ip 0: no limit) */
    int timeout_read, timeout_head, timeout_body;
    int max_conns, max_conns_per_ip;
    /* models on demand (registry.c): every GGUF under models_dir, loaded at
     * its first request; beyond models_max loaded (0: no limit) or
     * models_mem_mib of their files (0: no limit) the least recently used
     * idle one is unloaded */
    const char *models_dir;
    int models_max;
    int64_t models_mem_mib;
    /* -md/--model-draft (tutti_ensemble_set_draft): set on every generating
     * ensemble of token alignment whose vocabulary is the draft's
     * (draft.model_path NULL and lookup_n 0: no draft) */
    tutti_draft_params draft;
} server_opts;

/* Runs the server until SIGINT/SIGTERM.  Returns the exit status (0, or 1
 * after printing why it could not start). */
int server_main(const server_opts *o);
/* `tutti run -e FILE` with a pipeline config (pipeline_serve.c): o's
 * registry (o->config = FILE, o->models = 'default') planned and loaded, its
 * first pipeline run on prompt[0..n) (docs/pipelines.md): sp and max_tokens
 * are the steps' defaults, the output step's text goes to stdout as it
 * comes, each step's counts and times and the run's wall time against the
 * steps' sum to stderr (unless quiet); should_stop(NULL) is polled.  0, or
 * -1 with the message in err. */
int server_run_pipeline(const server_opts *o, const char *prompt, size_t n, const tutti_sampler_params *sp,
                        int32_t max_tokens, bool quiet, int (*should_stop)(void *), char *err, size_t cap);

/* ---- registry ---- */

#define SRV_MAX_FILES 64

typedef struct srv_file {
    char *path;     /* a GGUF file, or a remote member's URL (docs/remote-members.md) */
    char *name;     /* served name of the model alone */
    bool named;     /* the name came from --config */
    char **aliases; /* more names (the same file named twice in --config) */
    int n_aliases;
    tutti_model *model;       /* NULL for a remote member */
    tutti_ensemble *remote;   /* a remote member: a one-member ensemble holding its tokenizer */
    const tutti_vocab *vocab; /* the model's or the remote member's */
    int32_t n_ctx;            /* its sessions' context */
    /* native /completion: each token's JSON '"id":I,"token":"T","bytes":[..]',
     * built once (native.c) */
    char *nat_frag;
    int64_t *nat_off; /* [n_vocab + 1] */
    /* on demand (--models-dir; registry mu guards the fields below and
     * model/vocab's changes): loaded at the first acquire, unloaded (model
     * freed) only once 'doomed' and no holder is left */
    bool lazy;
    int64_t bytes; /* the file's size, for --models-memory */
    int refs;      /* holders: jobs (active) and slots' ensembles and sessions built on the model */
    int active;    /* jobs holding it (never chosen for unloading) */
    bool doomed;   /* to be unloaded: slots drop their ensembles over it */
    bool loading;  /* a thread is loading it (others wait on cv) */
    uint64_t last_use;
    int32_t n_vocab_meta; /* from the GGUF's metadata, for /v1/models while not loaded */
    int64_t n_loads;
} srv_file;

/* A served model name: an ensemble over loaded files. */
typedef struct srv_spec {
    char *name;
    int n;
    int file[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* indices into registry files */
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];  /* NAN: default */
    float t[TUTTI_ENSEMBLE_MAX_MEMBERS];  /* NAN: 1 */
    int rule, align;
    bool adapt; /* weights follow the text with fixed-share alpha adapt_alpha (--adapt) */
    double adapt_alpha;
    double route;              /* > 0: weights from the prompt with this tau (--route); 0 (as zeroed): off */
    tutti_context_weights ctx; /* the -e file's context weights (n_features 0, as zeroed: off) */
    bool select;               /* selective fusion at select_thresh (--select, the -e file's); false: off */
    double select_thresh;
    int align_used; /* the alignment the ensemble resolved (AUTO decided), -1 if not known yet */
    char key[1024]; /* identity for the slots' ensemble caches */
} srv_spec;

typedef struct srv_registry {
    srv_file *files;
    int n_files;
    srv_spec *specs;
    int n_specs;
    char *chat_template; /* --chat-template override, or NULL */
    float beta;
    double prune;
    int max_hyps;
    int n_ctx_opt;
    struct srv_pipes *pipelines; /* the --config file's pipelines (pipeline_srv.h), NULL: none */
    /* models on demand */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool mu_init;
    int models_max;
    int64_t models_mem; /* bytes, 0: no limit */
    uint64_t clock;
    volatile int sweep_gen; /* bumped when a doomed model is still held: slots drop what they hold of it */
} srv_registry;

/* Models on demand: holds files[0..n) (a job's members), loading those not
 * loaded (at most one thread loads a file; the others wait), and unloads
 * the least recently used idle on-demand models beyond the limits.  0, or
 * -1 with a message in err (nothing held then). */
int srv_registry_acquire(srv_registry *reg, const int *files, int n, bool active, char *err, size_t cap);
/* Drops what srv_registry_acquire took (active as given there). */
void srv_registry_release(srv_registry *reg, const int *files, int n, bool active);
/* Adds (or finds) a model file (name: NULL for its own); its index or -1. */
int srv_registry_add_file_named(srv_registry *reg, const char *path, const char *name, char *err, size_t cap);
/* Loads f's model (or connects a remote member) into f; 0 or -1 with err. */
int srv_registry_load_file(const srv_registry *reg, srv_file *f, char *err, size_t cap);
/* --models-dir: every *.gguf under dir (sorted, subfolders too) as an
 * on-demand file.  0, or -1 with err. */
int srv_registry_scan_dir(srv_registry *reg, const char *dir, char *err, size_t cap);
/* true when file i's model is loaded (for /v1/models) */
bool srv_registry_loaded(srv_registry *reg, int i);
/* true when file i is to be unloaded (a slot then frees what it built on it) */
bool srv_registry_doomed(srv_registry *reg, int i);

/* Reads the -e and --config files, checks that every model file opens as
 * GGUF and builds the served names (nothing loaded yet).  Returns 0, or -1
 * with a message in err. */
int srv_registry_plan(srv_registry *reg, const server_opts *o, char *err, size_t errlen);
/* Loads the planned files (remote members: connected and checked) and
 * checks the named ensembles.  0, or -1 with a message. */
int srv_registry_load(srv_registry *reg, char *err, size_t errlen);
/* msg with every model file's path (or URL) replaced by its served name,
 * for error bodies (clients never see where the models are). */
void srv_registry_scrub(const srv_registry *reg, const char *msg, char *out, size_t cap);
/* A spec's weights and temperatures through the library's validator. */
int srv_spec_check(const srv_spec *s);
bool srv_is_url(const char *path);
void srv_registry_free(srv_registry *reg);
const srv_spec *srv_registry_find(const srv_registry *reg, const char *name);
int srv_registry_file_index(const srv_registry *reg, const char *name);
/* Fills an ensemble's parameters for spec (members/models point into the
 * caller's arrays). */
/* Applies s's adapt, route, context-weight and selective-fusion settings to an ensemble made from
 * srv_spec_params.  0, or TUTTI_ERR (the library's message). */
int srv_spec_apply(const srv_spec *s, struct tutti_ensemble *e);
void srv_spec_params(const srv_registry *reg, const srv_spec *s, int n_threads, tutti_member_desc *desc,
                     const tutti_model **models, tutti_ensemble_params *p);
/* Canonical key of a spec (member files, weights, temps, rule, align). */
void srv_spec_make_key(srv_spec *s);

/* ---- chat ---- */

int32_t *server_tokenize(const tutti_vocab *vocab, const char *text, size_t len, bool add_bos, bool special,
                         int32_t *n_out);
/* Renders msgs[0..n) with the model's chat template (or tmpl_override when
 * non-NULL), add_generation_prompt on, and tokenizes it: template text with
 * special tokens, message text without.  Returns malloc'd ids (count in
 * *n_out) or NULL with a message in err. */
int32_t *server_chat_tokens(const srv_file *f, const char *tmpl_override, const tutti_chat_message *msgs, size_t n_msgs,
                            int32_t *n_out, char *err, size_t errlen);
/* The same from the template's variables as JSON (messages with tool
 * fields, tools: tools.c), and the template itself (malloc'd; NULL: none). */
int32_t *server_chat_tokens_json(const srv_file *f, const char *tmpl_override, const char *ctx_json, int32_t *n_out,
                                 char *err, size_t errlen);
char *server_chat_template(const srv_file *f, const char *tmpl_override);

/* ---- metrics (metrics.c) ---- */

/* /props, /tokenize, /detokenize and /completion are llama-server's own
 * (native.c), for remote members */
enum {
    SRV_EP_HEALTH,
    SRV_EP_MODELS,
    SRV_EP_COMPLETIONS,
    SRV_EP_CHAT,
    SRV_EP_METRICS,
    SRV_EP_PROPS,
    SRV_EP_TOKENIZE,
    SRV_EP_DETOKENIZE,
    SRV_EP_NATIVE,
    SRV_EP_EMBEDDINGS,
    SRV_EP_WEB,
    SRV_EP_OTHER,
    SRV_N_EP
};
/* GET /: the chat page (src/server/web/index.html, built in by CMakeLists.txt) */
extern const unsigned char srv_web_page[];
extern const unsigned long srv_web_page_len;
extern const char *const srv_ep_names[SRV_N_EP];
extern const int srv_status_codes[6]; /* the counted statuses; 0: any other */

typedef struct srv_metrics {
    pthread_mutex_t mu;
    int64_t requests[SRV_N_EP][6]; /* [endpoint][srv_status_codes index] */
    int64_t prompt_tokens, prompt_evaluated, prompt_reused;
    int64_t gen_units;
    double gen_seconds;
    double last_tokens_per_s;
    int64_t cancelled;
    double member_forward_s[SRV_MAX_FILES]; /* per loaded file */
    int64_t member_tokens[SRV_MAX_FILES];
    int64_t draft_rounds, drafted, draft_accepted; /* -md (tutti_ensemble_stats) */
} srv_metrics;

/* ---- jobs and slots ---- */

typedef struct srv_job srv_job;
typedef struct srv_server srv_server;
/* GET /v1/models' and /metrics' bodies (malloc'd) */
char *srv_models_json(const srv_server *s);
char *srv_metrics_text(srv_server *s);

/* POST /v1/embeddings (embed.c): the inputs' ids and their vectors */
typedef struct srv_embd {
    bool on;
    int file;    /* the registry file */
    int pooling; /* TUTTI_POOL_MEAN, _CLS or _LAST */
    bool base64; /* encoding_format "base64" */
    int32_t **ids, *n_ids;
    int n;
    int64_t n_tokens;
    float *out; /* [n][dim], normalised */
    int32_t dim;
} srv_embd;

struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    /* request */
    srv_request req;
    srv_spec spec;        /* resolved (a copy: inline specs live here) */
    char model_name[256]; /* echoed in responses */
    /* each prompt's ids per member (chat: one prompt; completions: for
     * token-id prompts; NULL: the member tokenizes the text itself) */
    int32_t *ids[SRV_MAX_N][TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t n_ids[SRV_MAX_N][TUTTI_ENSEMBLE_MAX_MEMBERS];
    int n_prompts;    /* 1, or a completions batch */
    int32_t n_prompt; /* member 1's prompt tokens over all prompts (usage) */
    int32_t max_units;
    char id[40];
    long created;
    /* client */
    int fd; /* the connection's socket (disconnect check), -1 once gone */
    bool cancelled;
    /* output */
    char *out; /* stream: SSE bytes; else unused */
    size_t n_out, cap_out, sent;
    char *text[SRV_MAX_N]; /* non-stream: each choice's text */
    size_t n_text[SRV_MAX_N], cap_text[SRV_MAX_N];
    const char *finish[SRV_MAX_N];
    int choice; /* the choice being generated */
    bool role_sent;
    int64_t n_units;
    double t_gen_s;   /* wall time inside the generations */
    const char *unit; /* "token" or "byte" */
    int64_t prompt_eval[TUTTI_ENSEMBLE_MAX_MEMBERS];
    /* logprobs (req.logprobs >= 0): each choice's entries */
    srv_lp lp[SRV_MAX_N];
    const tutti_vocab *lp_vocab; /* member 1's, for token texts */
    bool lp_oom;
    /* llama-server's POST /completion (native.h): the next token's distribution */
    bool native;
    int nat_file;
    int32_t *nat_ids, n_nat_ids;
    int32_t n_probs, n_predict;
    char *nat_out;                      /* the answer's JSON */
    const struct pl_pipeline *pipeline; /* the model is a pipeline (pipeline_srv.h): it runs the job */
    char *pipe_steps;                   /* its steps' usage (a JSON array), for usage.tutti.steps */
    srv_embd embd;                      /* /v1/embeddings (embd.on) */
    /* tools in use (tools.h): the format (-1: none); per choice: the text
     * seen to be no call (streamed as it comes), the calls read back and
     * the content beside them */
    int tool_fmt;
    bool tool_plain[SRV_MAX_N];
    char *tool_calls[SRV_MAX_N], *tool_content[SRV_MAX_N];
    /* the registry files this job holds (srv_job_hold), released with the job */
    srv_registry *held_reg;
    int held[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int n_held;
    bool done;
    int status; /* 200, or an HTTP error status */
    char error[1024];
};
/* Holds the files of a job's model until the job is freed (loading them on
 * demand).  0, or -1 with err. */
int srv_job_hold(srv_registry *reg, srv_job *j, const int *files, int n, char *err, size_t cap);

/* Text returned for the job's current choice (a streamed chunk, or the
 * choice's text), as the generation's pieces are. */
void srv_job_emit(srv_job *j, const char *bytes, size_t n);
/* echo (echo.c): the prompt of choice c (prompt p) returned before its
 * completion, with its tokens' (or characters') log-probabilities when
 * logprobs are asked for (tutti_ensemble_score): the first token's null.
 * 0, or -1 with a message in err. */
int srv_echo_prompt(srv_job *j, tutti_ensemble *e, int c, int p, char *err, size_t cap);

/* /v1/embeddings (embed.c): the body parsed into j->embd (model, inputs
 * tokenized), 0 or an HTTP status with err and *param; run on a slot's
 * session of the model, asking gone(arg) before each input whether the
 * client left (0, or -1 with err); the answer's JSON. */
int srv_embd_prepare(srv_server *s, srv_job *j, const char *body, size_t n, char *err, size_t cap, const char **param);
int srv_embd_run(srv_embd *e, tutti_session *sess, const tutti_model *m, bool (*gone)(void *), void *arg, char *err,
                 size_t cap);
char *srv_embd_json(const srv_job *j);
void srv_embd_free(srv_embd *e);

/* Creates the slots and their worker threads. */
int srv_slots_start(srv_server *s, char *err, size_t errlen);
/* Wakes every worker, cancels waiting and running jobs, joins the workers
 * (new submissions get 503 from then on); srv_slots_free releases the rest
 * once no connection can submit any more. */
void srv_slots_stop(srv_server *s);
void srv_slots_free(srv_server *s);
/* Queues a job (takes a reference).  Returns 0, or 503 when the queue is
 * full or the server is stopping. */
int srv_submit(srv_server *s, srv_job *j);
srv_job *srv_job_new(void);
void srv_job_unref(srv_job *j);
/* Marks a job's client as gone (the connection ended). */
void srv_job_client_gone(srv_job *j);
/* Appends the SSE event "data: JSON\n\n" to a streaming job's output
 * and wakes its connection (j->mu held); takes json (NULL: nothing). */
void srv_sse_event(srv_job *j, char *json);
int srv_queue_len(srv_server *s);
int srv_slots_busy(srv_server *s);

typedef struct srv_slot srv_slot;
typedef struct srv_conns srv_conns;

struct srv_server {
    server_opts opts;
    srv_registry reg;
    srv_metrics metrics;
    volatile int ready; /* models loaded */
    volatile int stopping;
    /* slots */
    srv_slot *slots;
    int n_slots;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    srv_job **queue; /* ring [queue_cap] */
    int q_head, q_len, q_cap;
    int busy;
    srv_conns *conns;   /* conn.c */
    tutti_batch *batch; /* continuous batching: every slot's sessions (NULL: off) */
};

/* POST /v1/completions and /v1/chat/completions (generate.c): the request
 * parsed into j, the model resolved, every prompt prepared and checked
 * against the contexts.  0, or an HTTP status with the message in err and
 * the field in *param. */
int srv_prepare_job(srv_server *s, srv_job *j, srv_kind kind, const char *body, size_t n, char *err, size_t cap,
                    const char **param, const char **code);

#endif
