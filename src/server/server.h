/* `tutti serve`: an OpenAI-compatible HTTP server over tutti ensembles
 * (libmicrohttpd for HTTP, cJSON for JSON).  Uses only include/tutti.h.
 *
 * Pieces:
 *   request.c      body -> srv_request (fuzzed)
 *   chat_tokens.c  messages -> a member's prompt ids (server_chat_tokens)
 *   registry.c     loaded models, served model names (specs), config file
 *   slots.c        --parallel slots (each with its own ensembles, so its own
 *                  sessions and KV caches; weights shared), the bounded
 *                  queue, generation jobs and their output
 *   http.c         endpoints, SSE, errors, /metrics, the daemon's life
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
    int n_weights;        /* 0: not given */
    float temps[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int n_temps;
    int rule, align;      /* -1: not given */
    float beta;           /* <= 0: default */
    double prune;         /* < 0: default */
    int max_hyps;         /* <= 0: default */
    bool adapt, route;    /* --adapt, --route (for 'default') */
    double adapt_alpha;   /* --adapt-alpha, < 0: not given */
    double route_tau;     /* --route-tau, <= 0: not given */
    double select;        /* --select, < 0: not given */
    bool no_context;      /* --no-context: the -e file's context weights are not used */
    const char *config;   /* --config FILE (JSON) */
    const char *chat_template_file;
    const char *host;
    int port;             /* 0: any free port (printed) */
    const char *api_key;
    int parallel;         /* slots */
    int queue;            /* waiting requests beyond the slots */
    int n_ctx;            /* -1: min(trained, 4096); 0: the trained context; else tokens */
    int n_threads;
    size_t max_body;
} server_opts;

/* Runs the server until SIGINT/SIGTERM.  Returns the exit status (0, or 1
 * after printing why it could not start). */
int server_main(const server_opts *o);

/* ---- registry ---- */

typedef struct srv_file {
    char *path;
    char *name;           /* served name of the model alone */
    tutti_model *model;
    int32_t n_ctx;        /* its sessions' context */
    /* native /completion: each token's JSON '"id":I,"token":"T","bytes":[..]',
     * built once (native.c) */
    char *nat_frag;
    int64_t *nat_off;     /* [n_vocab + 1] */
} srv_file;

/* A served model name: an ensemble over loaded files. */
typedef struct srv_spec {
    char *name;
    int n;
    int file[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* indices into registry files */
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];  /* NAN: default */
    float t[TUTTI_ENSEMBLE_MAX_MEMBERS];  /* NAN: 1 */
    int rule, align;
    bool adapt;           /* weights follow the text with fixed-share alpha adapt_alpha (--adapt) */
    double adapt_alpha;
    double route;         /* > 0: weights from the prompt with this tau (--route); 0 (as zeroed): off */
    tutti_context_weights ctx; /* the -e file's context weights (n_features 0, as zeroed: off) */
    bool select;          /* selective fusion at select_thresh (--select, the -e file's); false: off */
    double select_thresh;
    int align_used;       /* the alignment the ensemble resolved (AUTO decided), -1 if not known yet */
    char key[1024];       /* identity for the slots' ensemble caches */
} srv_spec;

typedef struct srv_registry {
    srv_file *files;
    int n_files;
    srv_spec *specs;
    int n_specs;
    char *chat_template;  /* --chat-template override, or NULL */
    float beta;
    double prune;
    int max_hyps;
    int n_ctx_opt;
} srv_registry;

/* Loads the -m / -e files and the config file's models, builds the served
 * names.  Returns 0, or -1 with a message in err. */
int srv_registry_load(srv_registry *reg, const server_opts *o, char *err, size_t errlen);
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
int32_t *server_chat_tokens(const tutti_model *model, const char *tmpl_override, const tutti_chat_message *msgs,
                            size_t n_msgs, int32_t *n_out, char *err, size_t errlen);

/* ---- metrics ---- */

typedef struct srv_metrics {
    pthread_mutex_t mu;
    int64_t requests[12][6];  /* [endpoint][status class 2xx 4xx 5xx ...] see http.c */
    int64_t prompt_tokens, prompt_evaluated, prompt_reused;
    int64_t gen_units;
    double gen_seconds;
    double last_tokens_per_s;
    int64_t cancelled;
    double member_forward_s[64];  /* per loaded file */
    int64_t member_tokens[64];
} srv_metrics;

/* ---- jobs and slots ---- */

typedef struct srv_job srv_job;

struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    /* request */
    srv_request req;
    srv_spec spec;            /* resolved (a copy: inline specs live here) */
    char model_name[256];     /* echoed in responses */
    int32_t *ids[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* chat: each member's prompt ids */
    int32_t n_ids[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t n_prompt;         /* member 1's prompt tokens (usage) */
    int32_t max_units;
    char id[40];
    long created;
    /* client */
    int fd;                   /* the connection's socket (disconnect check), -1 once gone */
    bool cancelled;
    /* output */
    char *out;                /* stream: SSE bytes; else unused */
    size_t n_out, cap_out, sent;
    char *text[SRV_MAX_N];    /* non-stream: each choice's text */
    size_t n_text[SRV_MAX_N], cap_text[SRV_MAX_N];
    const char *finish[SRV_MAX_N];
    int choice;               /* the choice being generated */
    bool role_sent;
    int64_t n_units;
    double t_gen_s;           /* wall time inside the generations */
    const char *unit;         /* "token" or "byte" */
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
    char *nat_out;            /* the answer's JSON */
    bool done;
    int status;               /* 200, or an HTTP error status */
    char error[1024];
};

typedef struct srv_server srv_server;

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
int srv_queue_len(srv_server *s);
int srv_slots_busy(srv_server *s);

typedef struct srv_slot srv_slot;

struct srv_server {
    server_opts opts;
    srv_registry reg;
    srv_metrics metrics;
    volatile int ready;       /* models loaded */
    volatile int stopping;
    /* slots */
    srv_slot *slots;
    int n_slots;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    srv_job **queue;          /* ring [queue_cap] */
    int q_head, q_len, q_cap;
    int busy;
};

#endif
