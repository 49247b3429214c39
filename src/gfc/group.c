/* Group values: validation and identity. Nothing here touches the network. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gfc/gfc_internal.h"

tdl_status_t gfc_group_init(gfc_group_t *group_out, gfc_runtime_t *rt, const int *ranks, int size,
                            uint64_t ns)
{
    if (!rt || !ranks || size < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc group: needs at least one rank (got %d)",
                               size);
    if (size > rt->size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc group: %d ranks in a world of %d: some must repeat", size,
                               rt->size);
    /* Duplicate check with a bitmap on the stack for usual worlds, on the heap beyond. */
    uint64_t stack_bits[64];
    size_t words = ((size_t)rt->size + 63) / 64;
    uint64_t *bits = words <= 64 ? stack_bits : calloc(words, sizeof(uint64_t));
    if (!bits)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc group: out of memory");
    if (bits == stack_bits)
        memset(stack_bits, 0, words * sizeof(uint64_t));
    tdl_status_t st = TDL_OK;
    int me = -1;
    uint64_t id = gfc_mix64(ns ^ 0x6766632d67726f75ull) ^ (uint64_t)size;
    for (int i = 0; i < size; i++) {
        int r = ranks[i];
        if (r < 0 || r >= rt->size) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                 "gfc group: entry %d is rank %d, outside the world [0, %d)", i, r,
                                 rt->size);
            break;
        }
        if (bits[r / 64] & (1ull << (r % 64))) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                 "gfc group: rank %d appears twice (entry %d repeats it)", r, i);
            break;
        }
        bits[r / 64] |= 1ull << (r % 64);
        if (r == rt->rank)
            me = i;
        id = gfc_mix64(id + (uint64_t)(uint32_t)r + 0x9e3779b97f4a7c15ull);
    }
    if (bits != stack_bits)
        free(bits);
    if (st != TDL_OK)
        return st;
    if (me < 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc group: the caller (rank %d) is not a member", rt->rank);
    gfc_group_t g = {
        .rt = rt, .ranks = ranks, .size = size, .me = me, .ns = ns, .id = id, .seq = 0};
    *group_out = g;
    return TDL_OK;
}

uint64_t gfc_tag(uint64_t tag_base, uint32_t step, int src_world)
{
    return gfc_mix64(tag_base ^ (((uint64_t)step << 32) | (uint32_t)src_world)) & GFC_TAG_MASK;
}

uint64_t gfc_tag_base(uint64_t group_id, uint64_t seq)
{
    return gfc_mix64(group_id ^ gfc_mix64(seq + 0x7f4a7c159e3779b9ull));
}
