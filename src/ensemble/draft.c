/* The draft model of an ensemble (tutti_ensemble_set_draft): opened
 * through the member factory like a member, with one session.  In TOKEN
 * alignment its token ids are proposed to the members as they are when it
 * shares member 1's vocabulary, else its text is re-spelled in member 1's
 * tokens; in BYTE alignment it proposes bytes (any tokenizer).  Drafting
 * itself is the generation loop's (src/fusion/draft.c, align_token.c,
 * align_byte.c). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fusion/ensemble_impl.h"
#include "member/remote.h"
#include "util/error.h"

tutti_draft_params tutti_draft_default_params(void) {
    /* llama.cpp's defaults (common/common.h, common_params_speculative):
     * --draft-max 16, --draft-min 0, --draft-p-min 0.75 */
    tutti_draft_params p = {.n_max = 16, .n_min = 0, .p_min = 0.75f};
    return p;
}

static int check_params(const tutti_draft_params *p) {
    if (p->n_max < 1 || p->n_max > 1024) return tutti_set_error("draft: n_max %d is not in [1, 1024]", p->n_max);
    if (p->n_min < 0 || p->n_min > p->n_max)
        return tutti_set_error("draft: n_min %d is not in [0, n_max = %d]", p->n_min, p->n_max);
    if (!(p->p_min >= 0 && p->p_min <= 1)) return tutti_set_error("draft: p_min %g is not in [0, 1]", (double)p->p_min);
    if (p->n_threads < 0) return tutti_set_error("draft: n_threads %d is negative", p->n_threads);
    return 0;
}

int tutti_ensemble_set_draft(tutti_ensemble *e, const tutti_draft_params *params) {
    if (!e) return tutti_set_error("draft: no ensemble");
    bool lookup = params && (!params->model_path || !*params->model_path) && params->lookup_n > 0;
    if (!params || ((!params->model_path || !*params->model_path) && !lookup)) {
        if (e->draft) e->draft->vt->free(e->draft);
        e->draft = NULL;
        e->draft_p = (tutti_draft_params){0};
        return 0;
    }
    if (check_params(params) < 0) return TUTTI_ERR;
    if (params->lookup_n < 0 || params->lookup_n > 1024)
        return tutti_set_error("draft: lookup_n %d is not in [0, 1024]", params->lookup_n);
    if (e->align == TUTTI_ALIGN_SPAN)
        return tutti_set_error("draft: drafting needs token or byte alignment (this ensemble fuses in span "
                               "alignment, whose drafts are the members' own)");
    if (lookup && e->align != TUTTI_ALIGN_TOKEN)
        return tutti_set_error("draft: prompt lookup needs token alignment (this ensemble fuses in %s alignment); "
                               "give a draft model",
                               tutti_align_name(e->align));
    if (lookup) { /* prompt lookup: no model (fusion/draft.c) */
        if (e->draft) e->draft->vt->free(e->draft);
        e->draft = NULL;
        e->draft_p = *params;
        e->draft_p.model_path = NULL;
        return 0;
    }
    char *path = tutti_hub_resolve(params->model_path);
    if (!path) {
        tutti_error_prefix("draft model");
        return TUTTI_ERR;
    }
    int rc = TUTTI_ERR;
    uint64_t h = 0;
    fusion_member *d = NULL;
    if (fusion_is_remote_spec(path)) {
        tutti_set_error("draft model %s: a remote draft cannot be rewound cheaply; give a local GGUF file", path);
        goto out;
    }
    if (access(path, R_OK) != 0) {
        tutti_set_error("draft model: cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    if (fusion_member_vocab_hash(path, &h) < 0) {
        tutti_error_prefix("draft model %s", path);
        goto out;
    }
    /* another tokenizer: the draft's text is re-spelled in member 1's
     * tokens (fusion/draft.c), a deterministic proposal */
    bool bytes = e->align == TUTTI_ALIGN_BYTE, respell = !bytes && h != e->m[0]->vocab_hash;
    if (respell && !e->m[0]->vocab) {
        tutti_set_error("draft model %s: its vocabulary differs from member 1's (%s), which has no tokenizer here to "
                        "re-spell the draft's text in",
                        path, e->path[0]);
        goto out;
    }
    int32_t n_threads = params->n_threads;
    if (n_threads <= 0) n_threads = e->n_threads; /* the draft runs while no member does: all of them */
    member_spec spec = {.path = path, .n_sessions = 1, .n_ctx = e->m[0]->n_ctx, .n_threads = n_threads};
    if (!(d = member_open(&spec))) {
        tutti_error_prefix("draft model");
        goto out;
    }
    d->vocab_hash = h;
    if (bytes && !d->vocab) {
        tutti_set_error("draft model %s: has no tokenizer to spell its tokens in bytes", path);
        d->vt->free(d);
        goto out;
    }
    if (!bytes && !respell && d->n_vocab != e->m[0]->n_vocab) {
        tutti_set_error("draft model %s: %d logits per position, member 1 %d", path, d->n_vocab, e->m[0]->n_vocab);
        d->vt->free(d);
        goto out;
    }
    if (e->draft) e->draft->vt->free(e->draft);
    e->draft = d;
    e->draft_respell = respell;
    e->draft_p = *params;
    e->draft_p.model_path = NULL;
    rc = 0;
out:
    free(path);
    return rc;
}
