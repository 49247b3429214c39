/* Each rank r contributes a blob of 37*r + (r % 2) * 5000 bytes (0 for rank 0, large for odd
 * ranks) whose byte i is (r * 31 + i) & 0xff; every rank checks every blob. Exits non-zero on
 * any rank's failure. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "mpi/bootstrap.h"

static size_t blob_len(int r)
{
    return (size_t)(37 * r + (r % 2) * 5000);
}

int main(int argc, char **argv)
{
    tdl_boot_info_t me;
    if (tdl_boot_init(&argc, &argv, &me) != TDL_OK) {
        fprintf(stderr, "bootstrap failed: %s\n", tdl_error_get());
        return 1;
    }
    size_t len = blob_len(me.rank);
    unsigned char *mine = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        mine[i] = (unsigned char)((me.rank * 31 + (int)i) & 0xff);
    tdl_blobs_t all;
    int64_t bad = 0;
    if (tdl_boot_allgatherv(mine, len, &all) != TDL_OK) {
        fprintf(stderr, "rank %d: %s\n", me.rank, tdl_error_get());
        bad = 1;
    } else {
        bad += all.count != me.size;
        for (int r = 0; r < all.count && !bad; r++) {
            bad += all.len[r] != blob_len(r);
            for (size_t i = 0; i < all.len[r] && !bad; i++)
                bad += all.data[all.off[r] + i] != (unsigned char)((r * 31 + (int)i) & 0xff);
        }
        tdl_blobs_free(&all);
    }
    if (me.local_rank < 0 || me.local_rank >= me.local_size || me.local_size > me.size)
        bad++;
    tdl_boot_allreduce_sum_i64(&bad);
    if (me.rank == 0)
        printf("# %d ranks, %s, local size %d: %s\n", me.size, tdl_boot_library_version(),
               me.local_size, bad ? "MISMATCH" : "all blobs match");
    free(mine);
    tdl_boot_finalize();
    return bad ? 1 : 0;
}
