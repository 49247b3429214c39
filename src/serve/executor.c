/* The executor's side of a sequence-parallel step: a gfc group as the DiT's exchanges. Any group
 * value works (any ranks, any order, formed without messages), so a task may run on a different
 * group and degree at every step. */
#include "config.h"

#include "dit/dit.h"
#include "gfc/gfc.h"
#include "serve/serve.h"

static tdl_status_t sp_alltoall(void *ctx, const float *send, float *recv, size_t count)
{
    return gfc_alltoall(ctx, send, recv, count, GFC_DT_F32);
}

static tdl_status_t sp_allgather(void *ctx, const float *send, float *recv, size_t count)
{
    return gfc_allgather(ctx, send, recv, count, GFC_DT_F32);
}

void serve_sp_comm(dit_sp_comm_t *comm, gfc_group_t *group)
{
    *comm = (dit_sp_comm_t){.size = group->size,
                            .rank = group->me,
                            .alltoall = sp_alltoall,
                            .allgather = sp_allgather,
                            .ctx = group};
}
