/* The member kinds of the MPI layer (member/member.h's factory opens them
 * through member_register_kind; mpi.c registers them when MPI starts). */
#ifndef TUTTI_MPI_MEMBER_KINDS_H
#define TUTTI_MPI_MEMBER_KINDS_H

#include "member/member.h"

/* A member whose model lives on MPI rank spec->rank (member_rank.c): rank 0
 * keeps its vocabulary, the rank runs an ordinary local member.  Without an
 * MPI run (no communicator) the member is opened here.  NULL + error naming
 * the rank. */
fusion_member *tmpi_member_rank_open(const member_spec *spec);
/* A member split by layers over every rank (member_split.c): counts
 * spec->split_counts ("" = by memory), micro-batch spec->split_ubatch (0 =
 * auto).  The same logits as a local member, bit for bit.  NULL + error. */
fusion_member *tmpi_member_split_open(const member_spec *spec);

#endif
