/* `tidal info`: one line per rank saying where it runs and what it can use; with --transports,
 * one line per ordered pair of ranks saying which UCX transport connects them. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gfc/gfc.h"
#include "mpi/bootstrap.h"
#include "tensor/tensor.h"
#ifdef TIDAL_HAVE_CUDA
#include "cuda/cuda.h"
#endif

static void describe_cuda(char *buf, size_t size)
{
#ifdef TIDAL_HAVE_CUDA
    int count = 0;
    char names[1024];
    if (tdl_cuda_devices_describe(&count, names, sizeof(names)) != TDL_OK)
        snprintf(buf, size, "error(%s)", tdl_error_get());
    else if (count == 0)
        snprintf(buf, size, "0");
    else
        snprintf(buf, size, "%d:%s", count, names);
#else
    snprintf(buf, size, "not-built");
#endif
}

static const tdl_param_def_t info_params[] = {
    {"transports", TDL_PARAM_BOOL, "false",
     "also connect every pair of ranks over gfc and print, per ordered pair, the UCX transport "
     "its messages take (as UCX chose it), then a summary within and between hosts",
     NULL, 0, 0},
};

#define INFO_TL_MAX 256 /* one pair's "tl/device+..." */

static bool tl_set_has(const char *set, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = set; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len + (p[len] == ',');
    }
    return false;
}

/* Adds the '+'-separated names of `tl` that are new to the ','-separated set `set`. */
static void tl_set_add(char *set, size_t size, const char *tl)
{
    char names[INFO_TL_MAX], *save = NULL;
    snprintf(names, sizeof(names), "%s", tl);
    for (char *t = strtok_r(names, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
        size_t used = strlen(set);
        if (!tl_set_has(set, t))
            snprintf(set + used, size - used, "%s%s", used ? "," : "", t);
    }
}

/* Each rank's contribution: "<host>\n" then, for every other rank in order, "<tl>\n". */
static tdl_status_t info_transports_mine(gfc_runtime_t *rt, const tdl_boot_info_t *me,
                                         char **blob_out, size_t *len_out)
{
    size_t cap = strlen(me->host) + 2 + (size_t)me->size * (INFO_TL_MAX + 1);
    char *blob = malloc(cap);
    if (!blob)
        return tdl_error_raise(TDL_ERR_NOMEM, "out of memory");
    size_t used = (size_t)snprintf(blob, cap, "%s\n", me->host);
    for (int peer = 0; peer < me->size; peer++) {
        char tl[INFO_TL_MAX];
        if (peer == me->rank)
            continue;
        tdl_status_t st = gfc_peer_transport(rt, peer, tl, sizeof(tl));
        if (st != TDL_OK) {
            free(blob);
            return st;
        }
        used += (size_t)snprintf(blob + used, cap - used, "%s\n", tl);
    }
    *blob_out = blob;
    *len_out = used;
    return TDL_OK;
}

/* Rank 0's report from every rank's contribution: a line per ordered pair, then the summary. */
static tdl_status_t info_transports_print(const tdl_blobs_t *all)
{
    int n = all->count;
    char within[1024] = "", between[1024] = "";
    tdl_status_t st = TDL_OK;
    /* host[r]: a copy of rank r's contribution, cut after its first line */
    char **host = calloc((size_t)n, sizeof(*host));
    if (!host)
        return tdl_error_raise(TDL_ERR_NOMEM, "out of memory");
    for (int r = 0; r < n && st == TDL_OK; r++) {
        host[r] = strndup((const char *)all->data + all->off[r], all->len[r]);
        char *nl = host[r] ? strchr(host[r], '\n') : NULL;
        if (!host[r])
            st = tdl_error_raise(TDL_ERR_NOMEM, "out of memory");
        else if (!nl)
            st = tdl_error_raise(TDL_ERR_INTERNAL, "rank %d sent no host name", r);
        else
            *nl = '\0';
    }
    for (int r = 0; r < n && st == TDL_OK; r++) {
        char *save = NULL, *rest = host[r] + strlen(host[r]) + 1;
        for (int peer = 0; peer < n && st == TDL_OK; peer++) {
            if (peer == r)
                continue;
            const char *tl = strtok_r(save ? NULL : rest, "\n", &save);
            if (!tl) {
                st = tdl_error_raise(TDL_ERR_INTERNAL, "rank %d sent no transport to rank %d", r,
                                     peer);
                break;
            }
            printf("transport from=%d to=%d host_from=%s host_to=%s tl=%s\n", r, peer, host[r],
                   host[peer], tl);
            bool local = strcmp(host[r], host[peer]) == 0;
            tl_set_add(local ? within : between, sizeof(within), tl);
        }
    }
    if (st == TDL_OK)
        printf("transports: within hosts: %s | between hosts: %s\n", within[0] ? within : "none",
               between[0] ? between : "none");
    for (int r = 0; r < n; r++)
        free(host[r]);
    free(host);
    return st;
}

/* Every rank finds its transports to every other, then rank 0 prints them all. Collective; a
 * rank that fails says why itself, the others report how many failed. */
static tdl_status_t info_transports(tdl_params_t *params, const tdl_boot_info_t *me)
{
    gfc_runtime_t *rt = NULL;
    char *mine = NULL;
    size_t len = 0;
    gfc_runtime_config_t gc;
    tdl_status_t st = gfc_runtime_config_from_params(params, &gc);
    if (st == TDL_OK) {
        gc.rank = me->rank, gc.size = me->size, gc.allgather = tdl_boot_allgatherv;
        st = gfc_runtime_create(&gc, &rt);
    }
    if (st == TDL_OK)
        st = info_transports_mine(rt, me, &mine, &len);
    /* Nobody leaves gfc before every pair is connected: a wire-up needs both ends' progress. */
    int *world = rt ? malloc((size_t)me->size * sizeof(int)) : NULL;
    if (world) {
        for (int r = 0; r < me->size; r++)
            world[r] = r;
        gfc_group_t g;
        tdl_status_t bst = gfc_group_init(&g, rt, world, me->size, 0x696e666full /* "info" */);
        if (bst == TDL_OK)
            bst = gfc_barrier(&g);
        if (st == TDL_OK)
            st = bst;
        free(world);
    }
    char why[600] = "";
    if (st != TDL_OK)
        snprintf(why, sizeof(why), "%s", tdl_error_get());
    /* Every rank takes part in the exchange, failed or not; a failed one sends nothing. */
    int64_t failed = st != TDL_OK;
    tdl_blobs_t all = {0};
    tdl_status_t xst = tdl_boot_allgatherv(mine, failed ? 0 : len, &all);
    if (xst == TDL_OK)
        xst = tdl_boot_allreduce_sum_i64(&failed);
    if (st != TDL_OK)
        tdl_error_set("%s", why);
    else if (xst != TDL_OK)
        st = xst;
    else if (failed)
        st = tdl_error_raise(TDL_ERR_PEER, "%lld rank%s could not report their transports",
                             (long long)failed, failed > 1 ? "s" : "");
    else if (me->rank == 0)
        st = info_transports_print(&all);
    tdl_blobs_free(&all);
    free(mine);
    if (rt) {
        tdl_boot_barrier();
        gfc_runtime_destroy(rt);
    }
    return st;
}

static int info_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal info' takes no arguments, found '%s'", pos[0]);
    tdl_boot_info_t me;
    tdl_status_t st = tdl_boot_init(NULL, NULL, &me);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: cannot start MPI: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    tdl_log_set_rank(me.rank);

    char ucx[512], cuda[1200], line[2400];
    if (gfc_transports_query(ucx, sizeof(ucx)) != TDL_OK)
        snprintf(ucx, sizeof(ucx), "error");
    describe_cuda(cuda, sizeof(cuda));
    int n = snprintf(line, sizeof(line),
                     "rank=%d size=%d host=%s local_rank=%d local_size=%d ucx=%s cuda=%s "
                     "build=%s blas=%s",
                     me.rank, me.size, me.host, me.local_rank, me.local_size, ucx, cuda,
                     tdl_build_options(), tensor_blas_core());
    size_t len = n < 0 ? 0 : TDL_MIN((size_t)n, sizeof(line) - 1);

    /* Rank 0 prints every line in rank order, so the output does not interleave. */
    tdl_blobs_t all;
    st = tdl_boot_allgatherv(line, len, &all);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal[%d]: %s\n", me.rank, tdl_error_get());
        tdl_boot_finalize();
        return CLI_EXIT_FAILURE;
    }
    if (me.rank == 0) {
        for (int r = 0; r < all.count; r++)
            printf("%.*s\n", (int)all.len[r], (const char *)all.data + all.off[r]);
        fflush(stdout);
        char advice[256];
        if (*tensor_blas_advice(advice, sizeof(advice)))
            fprintf(stderr, "tidal: note: %s\n", advice);
    }
    tdl_blobs_free(&all);
    int rc = CLI_EXIT_OK;
    if (tdl_param_bool(params, "transports") && (st = info_transports(params, &me)) != TDL_OK) {
        fprintf(stderr, "tidal[%d]: info --transports: %s\n", me.rank, tdl_error_get());
        rc = CLI_EXIT_FAILURE;
    }
    fflush(stdout);
    tdl_boot_finalize();
    return rc;
}

const cli_command_t cli_cmd_info = {
    .name = "info",
    .summary = "print one line per rank: host, ranks, UCX transports, CUDA devices, build",
    .usage = "[mpirun -np N] tidal info [--transports]",
    .params = info_params,
    .nparams = TDL_ARRAY_SIZE(info_params),
    .run = info_run,
};
