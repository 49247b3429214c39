/* Hosts: which world rank runs where, learnt once from the start-up exchange, and the host
 * structure of a group, computed only when an algorithm asks for it (hier), so that forming a
 * group stays a few stores. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gfc/gfc_internal.h"

/* config.hosts ("0,0,1,1"): one label per world rank, any non-negative integers. */
static tdl_status_t hosts_parse(const char *text, int size, int *labels)
{
    const char *p = text;
    for (int r = 0; r < size; r++) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < 0 || v > 1 << 30)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "gfc-hosts '%s': entry %d is not a host number", text, r);
        labels[r] = (int)v;
        p = end;
        if (r + 1 < size) {
            if (*p != ',')
                return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                       "gfc-hosts '%s': %d hosts for a world of %d ranks", text,
                                       r + 1, size);
            p++;
        }
    }
    if (*p != '\0')
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc-hosts '%s': more entries than the %d ranks of the world", text,
                               size);
    return TDL_OK;
}

tdl_status_t gfc_hosts_build(gfc_runtime_t *rt, const unsigned char (*host_ids)[16])
{
    int n = rt->size;
    int *host_of = malloc((size_t)n * sizeof(int));
    int *labels = malloc((size_t)n * sizeof(int));
    int *rep = malloc((size_t)n * sizeof(int)); /* the lowest rank of each host found so far */
    if (!host_of || !labels || !rep) {
        free(host_of);
        free(labels);
        free(rep);
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory for the host table");
    }
    tdl_status_t st = TDL_OK;
    if (rt->config.hosts[0])
        st = hosts_parse(rt->config.hosts, n, labels);
    int nhosts = 0;
    for (int r = 0; r < n && st == TDL_OK; r++) {
        int h = 0;
        if (rt->config.hosts[0])
            while (h < nhosts && labels[rep[h]] != labels[r])
                h++;
        else
            while (h < nhosts && memcmp(host_ids[rep[h]], host_ids[r], 16) != 0)
                h++;
        if (h == nhosts)
            rep[nhosts++] = r;
        host_of[r] = h;
    }
    free(labels);
    free(rep);
    if (st != TDL_OK) {
        free(host_of);
        return st;
    }
    unsigned *mark = calloc((size_t)nhosts, sizeof(unsigned));
    int *count = calloc((size_t)nhosts, sizeof(int));
    if (!mark || !count) {
        free(host_of);
        free(mark);
        free(count);
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory for the host table");
    }
    rt->host_of = host_of;
    rt->nhosts = nhosts;
    rt->host_mark = mark;
    rt->host_count = count;
    rt->host_stamp = 0;
    return TDL_OK;
}

void gfc_hosts_free(gfc_runtime_t *rt)
{
    free(rt->host_of);
    free(rt->host_mark);
    free(rt->host_count);
    rt->host_of = NULL;
    rt->host_mark = NULL;
    rt->host_count = NULL;
}

int gfc_runtime_hosts(const gfc_runtime_t *rt)
{
    return rt->nhosts;
}

int gfc_runtime_host(const gfc_runtime_t *rt, int rank)
{
    return rank >= 0 && rank < rt->size ? rt->host_of[rank] : -1;
}

int gfc_group_hosts(const gfc_group_t *g, int *max_local_out)
{
    gfc_runtime_t *rt = g->rt;
    /* Marks stamped with a counter: nothing to clear between calls (a wrap clears once). */
    if (++rt->host_stamp == 0) {
        memset(rt->host_mark, 0, (size_t)rt->nhosts * sizeof(unsigned));
        rt->host_stamp = 1;
    }
    int hosts = 0, most = 0;
    for (int i = 0; i < g->size; i++) {
        int h = rt->host_of[g->ranks[i]];
        if (rt->host_mark[h] != rt->host_stamp) {
            rt->host_mark[h] = rt->host_stamp;
            rt->host_count[h] = 0;
            hosts++;
        }
        int on = ++rt->host_count[h]; /* TDL_MAX evaluates its arguments twice */
        most = TDL_MAX(most, on);
    }
    if (max_local_out)
        *max_local_out = most;
    return hosts;
}

tdl_status_t gfc_topo_of(const gfc_group_t *g, gfc_topo_t *topo_out)
{
    gfc_runtime_t *rt = g->rt;
    int n = g->size;
    /* host_of, local_of, first (n + 1 at most), members, and the world-host -> group-host map */
    int *mem = malloc(((size_t)4 * n + 1 + (size_t)rt->nhosts) * sizeof(int));
    if (!mem)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory for a group's hosts");
    gfc_topo_t t = {
        .host_of = mem, .local_of = mem + n, .first = mem + 2 * n, .members = mem + 3 * n + 1};
    int *map = mem + 4 * n + 1;
    for (int h = 0; h < rt->nhosts; h++)
        map[h] = -1;
    int *count = t.members; /* counts per group host first, then turned into offsets */
    for (int i = 0; i < n; i++) {
        int wh = rt->host_of[g->ranks[i]];
        if (map[wh] < 0) {
            map[wh] = t.hosts;
            count[t.hosts++] = 0;
        }
        t.host_of[i] = map[wh];
        t.local_of[i] = count[map[wh]]++;
        t.max_local = TDL_MAX(t.max_local, count[map[wh]]);
    }
    t.first[0] = 0;
    for (int h = 0; h < t.hosts; h++)
        t.first[h + 1] = t.first[h] + count[h];
    for (int i = 0; i < n; i++)
        t.members[t.first[t.host_of[i]] + t.local_of[i]] = i;
    *topo_out = t;
    return TDL_OK;
}

void gfc_topo_free(gfc_topo_t *topo)
{
    free(topo->host_of);
    memset(topo, 0, sizeof(*topo));
}
