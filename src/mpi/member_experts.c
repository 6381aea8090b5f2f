/* A member whose routed experts are split over the MPI ranks
 * (--split-experts; src/mpi/experts.c, include/tutti.h).
 *
 *   mpirun -np K tutti run -m MOE.gguf -m B.gguf --split-experts ...
 *
 * The member runs in rank 0's process, as a local member does (the same
 * session pool, prefix reuse, batches of several sequences, hence the same
 * forward passes), and every session of its pool sends each MoE layer's
 * rows of the other ranks' experts there; every rank loads the file once
 * (rank 0 with the member, the others when the first session opens), and
 * places only its own experts (a served model shared from the registry is
 * whole).  The bits of a pass do not depend on
 * where an expert's products run, so the member's logits are the local
 * member's.  A dense model is not split (its sessions are plain). */
#include <stdlib.h>
#include <string.h>

#include "member/member.h"
#include "model/model.h"
#include "mpi/member_kinds.h"
#include "mpi/tutti_mpi.h"
#include "util/error.h"
#include "util/path.h"

typedef struct experts_ctx {
    char *path;
    bool strict;              /* a model without experts is an error (tutti generate) */
    tutti_mpi_experts *split; /* opened with the first session */
} experts_ctx;

static tutti_session *experts_open(void *ctx, int32_t slot, const tutti_model *model, const tutti_session_params *sp) {
    experts_ctx *c = ctx;
    (void)slot;
    if (c->strict && model->hp.n_expert < 1)
        return tutti_set_error("--split-experts: %s has no routed experts", tutti_base_name(c->path)), NULL;
    tutti_session *s = tutti_session_new(model, sp);
    if (!s) return NULL;
    /* the other ranks get the session's thread count (sp's 0: all CPUs) */
    if ((!c->split && !(c->split = tutti_mpi_experts_open(s, c->path))) || tutti_mpi_experts_join(c->split, s) < 0) {
        tutti_session_free(s);
        return NULL;
    }
    return s;
}

static void experts_release(void *ctx) {
    experts_ctx *c = ctx;
    tutti_mpi_experts_close(c->split); /* the split goes with the last session */
    free(c->path);
    free(c);
}

fusion_member *tmpi_member_experts_open(const member_spec *spec) {
    experts_ctx *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(spec->path))) {
        free(c);
        return tutti_set_error("member %s: out of memory", spec->path), NULL;
    }
    c->strict = spec->split_experts_strict;
    const fusion_local_sessions ops = {c, experts_open, NULL, experts_release, true, tutti_mpi_experts_load};
    return fusion_member_local_new_sessions(spec->path, spec->shared, spec->n_sessions, spec->n_ctx, spec->n_threads,
                                            &ops);
}
