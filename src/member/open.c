/* The member factory: one function from a spec to a member of the right
 * kind.  The kinds of the MPI layer (a member on another rank, a member
 * split by layers over every rank) live above this layer and register
 * here when MPI starts (src/mpi/mpi.c), as ggml's backends register with
 * its backend registry: the member layer never includes them. */
#include "member/member.h"
#include "member/remote.h"
#include "util/error.h"

static member_open_fn g_kinds[MEMBER_N_KINDS];

void member_register_kind(member_kind kind, member_open_fn open) {
    if ((unsigned)kind < MEMBER_N_KINDS) g_kinds[kind] = open;
}

fusion_member *member_open(const member_spec *spec) {
    if (!spec || !spec->path || !*spec->path) return tutti_set_error("member: no model path"), NULL;
    member_kind placed = spec->split_counts ? MEMBER_KIND_SPLIT : MEMBER_KIND_RANK;
    if (spec->split_counts || spec->rank > 0) {
        if (!g_kinds[placed])
            return tutti_set_error("member %s: placed %s, but this process runs no MPI ensemble", spec->path,
                                   spec->split_counts ? "over the MPI ranks" : "on another MPI rank"),
                   NULL;
        return g_kinds[placed](spec);
    }
    if (fusion_is_remote_spec(spec->path)) return fusion_member_remote_new(spec->path, spec->n_ctx);
    return fusion_member_local_new_shared(spec->path, spec->shared, spec->n_sessions, spec->n_ctx, spec->n_threads);
}
