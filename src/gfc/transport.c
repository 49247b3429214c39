/* What UCX can use on this machine, for `tidal info`: the transport layer resources of every
 * memory domain of every UCT component, the same tables `ucx_info -d` prints; and what one
 * endpoint really uses, read from UCX's own description of it (ucp_ep_print_info). */
#include "config.h"

#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "gfc/gfc_internal.h"

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds the transports of one memory domain to names[] (deduplicated later). */
static void transports_of_md(uct_component_h component, const char *md_name, char **names,
                             size_t *count, size_t max)
{
    uct_md_config_t *md_config;
    if (uct_md_config_read(component, NULL, NULL, &md_config) != UCS_OK)
        return;
    uct_md_h md;
    if (uct_md_open(component, md_name, md_config, &md) == UCS_OK) {
        uct_tl_resource_desc_t *res;
        unsigned nres;
        if (uct_md_query_tl_resources(md, &res, &nres) == UCS_OK) {
            for (unsigned i = 0; i < nres && *count < max; i++)
                names[(*count)++] = strdup(res[i].tl_name);
            uct_release_tl_resource_list(res);
        }
        uct_md_close(md);
    }
    uct_config_release(md_config);
}

tdl_status_t gfc_transports_query(char *buf, size_t size)
{
    enum { MAX_TL = 256 };
    char *names[MAX_TL];
    size_t count = 0;
    uct_component_h *components;
    unsigned ncomp;
    if (uct_query_components(&components, &ncomp) != UCS_OK)
        return tdl_error_raise(TDL_ERR_UCX, "uct_query_components failed");
    for (unsigned c = 0; c < ncomp; c++) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                   UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
        if (uct_component_query(components[c], &attr) != UCS_OK)
            continue;
        uct_md_resource_desc_t *mds = calloc(attr.md_resource_count + 1, sizeof(*mds));
        if (!mds)
            continue;
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        if (uct_component_query(components[c], &attr) == UCS_OK) {
            for (unsigned m = 0; m < attr.md_resource_count; m++)
                transports_of_md(components[c], mds[m].md_name, names, &count, MAX_TL);
        }
        free(mds);
    }
    uct_release_component_list(components);

    qsort(names, count, sizeof(names[0]), str_cmp);
    size_t used = 0;
    if (size)
        buf[0] = '\0';
    for (size_t i = 0; i < count; i++) {
        if (names[i] && (i == 0 || strcmp(names[i], names[i - 1]) != 0) && used < size) {
            int n = snprintf(buf + used, size - used, "%s%s", used ? "," : "", names[i]);
            used += n > 0 ? (size_t)n : 0;
        }
    }
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    if (count == 0)
        snprintf(buf, size, "none");
    return TDL_OK;
}

/* ---- what an endpoint uses -------------------------------------------------------------------
 * ucp_ep_print_info (UCX 1.13) lists the endpoint's lanes, one line each:
 *   #  lane[0]:  3:sysv/memory.0 md[2]  -> md[2]/sysv/sysdev[255] am am_bw#0
 *   #  lane[1]:  5:cma/memory.0 md[4]   -> md[4]/cma/sysdev[255] rma_bw#0
 *   #  lane[2]:  2:tcp/lo.0 md[1]       -> md[1]/tcp/sysdev[255] rma_bw#1 wireup
 * and, with protocol v2 (gfc's default), the protocol chosen for each message size:
 *   # | tidal-gfc ep_cfg[0] | tagged message by ucp_tag_send*() from host memory    |
 *   # |               0..92 | eager short                            | sysv/memory |
 *   # |           6505..inf | (?) rendezvous zero-copy flushed write | cma/memory  |
 * A lane can be configured and never carry a tag message (tcp/lo above: rendezvous goes by cma),
 * so the table decides where there is one. */

#define EP_MAX_LANES 16
#define EP_LINE_MAX  1024

typedef struct ep_lane {
    char name[96]; /* "tl/device", without the ".0" path index */
    bool am;       /* am, am_bw#N or tag: carries eager tag messages */
    bool rndv;     /* rma_bw#0: protocol v1's first rendezvous lane */
    bool in_table; /* named by a row of a tag-message protocol table */
} ep_lane_t;

typedef struct ep_info {
    ep_lane_t lanes[EP_MAX_LANES];
    int nlanes;
    bool in_tag_table; /* the rows being read belong to a tag-message table */
} ep_info_t;

/* "lane[0]:  3:sysv/memory.0 md[2] -> md[2]/sysv/sysdev[255] am am_bw#0" */
static void ep_info_lane(ep_info_t *info, const char *line)
{
    const char *p = strstr(line, "lane[");
    char name[96];
    if (!p || info->nlanes == EP_MAX_LANES || sscanf(p, "lane[%*d]: %*d:%95s", name) != 1)
        return; /* not a lane of a transport (a connection manager's, say) */
    ep_lane_t *lane = &info->lanes[info->nlanes++];
    memset(lane, 0, sizeof(*lane));
    char *dot = strrchr(name, '.');
    if (dot && dot[1] && strspn(dot + 1, "0123456789") == strlen(dot + 1))
        *dot = '\0';
    snprintf(lane->name, sizeof(lane->name), "%s", name);
    const char *arrow = strstr(p, "->");
    char flags[EP_LINE_MAX], *save = NULL;
    snprintf(flags, sizeof(flags), "%s", arrow ? arrow + 2 : "");
    for (char *t = strtok_r(flags, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
        if (!strcmp(t, "am") || !strcmp(t, "tag") || !strncmp(t, "am_bw#", 6))
            lane->am = true;
        else if (!strcmp(t, "rma_bw#0"))
            lane->rndv = true;
    }
}

/* Whether `name` occurs in `text` as a whole word ("tcp/lo" is not in "tcp/lo1"). */
static bool ep_name_in(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
        bool start = p == text || !(isalnum((unsigned char)p[-1]) || strchr("_/:.-", p[-1]));
        bool end = !(isalnum((unsigned char)p[n]) || (p[n] && strchr("_/:.-", p[n])));
        if (start && end)
            return true;
    }
    return false;
}

/* "| tidal-gfc ep_cfg[0] | tagged message by ... |" opens a table; "| 0..92 | ... | x/y |" is
 * a row whose last cell names the transports of one protocol. */
static void ep_info_table_row(ep_info_t *info, const char *line)
{
    char row[EP_LINE_MAX];
    snprintf(row, sizeof(row), "%s", line);
    char *cells[8];
    int ncells = 0;
    for (char *p = strchr(row, '|'); p && ncells < 8; p = strchr(p + 1, '|')) {
        *p = '\0';
        cells[ncells++] = p + 1;
    }
    if (ncells < 3) /* "| a | b |" splits into a, b and what follows the last bar */
        return;
    if (strstr(cells[0], "ep_cfg[")) {
        info->in_tag_table = strstr(cells[1], "tag") != NULL;
        return;
    }
    if (!info->in_tag_table)
        return;
    const char *last = cells[ncells - 2];
    for (int i = 0; i < info->nlanes; i++)
        info->lanes[i].in_table |= ep_name_in(last, info->lanes[i].name);
}

static void ep_info_parse(ep_info_t *info, const char *text)
{
    memset(info, 0, sizeof(*info));
    while (*text) {
        const char *nl = strchr(text, '\n');
        size_t len = nl ? (size_t)(nl - text) : strlen(text);
        char line[EP_LINE_MAX];
        snprintf(line, sizeof(line), "%.*s", (int)TDL_MIN(len, sizeof(line) - 1), text);
        const char *p = line + strspn(line, "# \t");
        if (!strncmp(p, "lane[", 5))
            ep_info_lane(info, p);
        else if (*p == '|')
            ep_info_table_row(info, p);
        else if (*p == '+' || *p == '\0')
            ; /* a table's rule, or a blank line */
        else
            info->in_tag_table = false;
        text += len + (nl != NULL);
    }
}

static bool ep_lane_reported(const ep_lane_t *lane, bool table)
{
    return table ? lane->in_table : (lane->am || lane->rndv);
}

/* Protocol v2's table where it names a lane, else (UCX_PROTO_ENABLE=n) the lanes configured for
 * eager messages and the first rendezvous lane: the distinct names in lane order, '+'-joined. */
static tdl_status_t ep_info_format(const ep_info_t *info, int peer, char *buf, size_t size)
{
    bool table = false;
    for (int i = 0; i < info->nlanes; i++)
        table |= info->lanes[i].in_table;
    char out[512] = "";
    size_t used = 0;
    for (int i = 0; i < info->nlanes; i++) {
        const ep_lane_t *l = &info->lanes[i];
        bool seen = false;
        for (int j = 0; j < i; j++) {
            const ep_lane_t *k = &info->lanes[j];
            seen |= ep_lane_reported(k, table) && !strcmp(k->name, l->name);
        }
        if (seen || !ep_lane_reported(l, table))
            continue;
        int n = snprintf(out + used, sizeof(out) - used, "%s%s", used ? "+" : "", l->name);
        if (n < 0 || (size_t)n >= sizeof(out) - used)
            return tdl_error_raise(TDL_ERR_INTERNAL,
                                   "gfc: the transports to rank %d do not fit in %zu bytes", peer,
                                   sizeof(out));
        used += (size_t)n;
    }
    if (used == 0)
        return tdl_error_raise(TDL_ERR_UCX, "gfc: UCX shows no lane for tag messages to rank %d",
                               peer);
    if (used >= size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc: the transports to rank %d ('%s') need %zu bytes, the buffer "
                               "has %zu",
                               peer, out, used + 1, size);
    memcpy(buf, out, used + 1);
    return TDL_OK;
}

/* Flushes the endpoint: completes once UCX has wired it up (which needs the peer to progress),
 * so its lanes are the ones that will carry messages. */
static tdl_status_t ep_wireup_wait(gfc_runtime_t *rt, int peer, ucp_ep_h ep)
{
    ucp_request_param_t prm = {0};
    void *req = ucp_ep_flush_nbx(ep, &prm);
    if (req == NULL)
        return TDL_OK;
    if (UCS_PTR_IS_ERR(req))
        return tdl_error_raise(TDL_ERR_PEER, "gfc: cannot connect to rank %d: %s", peer,
                               ucs_status_string(UCS_PTR_STATUS(req)));
    uint64_t deadline = tdl_clock_ns() + (uint64_t)rt->config.timeout_ms * 1000000ull;
    ucs_status_t s;
    unsigned polls = 0;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        gfc_runtime_advance(rt);
        if (++polls % rt->yield_after == 0) {
            sched_yield(); /* oversubscribed: let the peer run */
            if (!gfc_peer_check(rt, peer)) {
                s = rt->peer_status[peer];
                break;
            }
        }
        if (tdl_clock_ns() > deadline) {
            s = UCS_ERR_TIMED_OUT;
            break;
        }
    }
    if (s == UCS_INPROGRESS || s == UCS_ERR_TIMED_OUT)
        ucp_request_cancel(rt->worker, req);
    ucp_request_free(req);
    if (s == UCS_ERR_TIMED_OUT)
        return tdl_error_raise(TDL_ERR_TIMEOUT,
                               "gfc: rank %d did not complete the connection within %lld ms", peer,
                               (long long)rt->config.timeout_ms);
    if (s != UCS_OK)
        return tdl_error_raise(TDL_ERR_PEER, "gfc: cannot connect to rank %d: %s", peer,
                               ucs_status_string(s));
    return TDL_OK;
}

tdl_status_t gfc_peer_transport(gfc_runtime_t *rt, int peer, char *buf, size_t size)
{
    if (peer < 0 || peer >= rt->size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc: rank %d outside the world of %d", peer,
                               rt->size);
    ucp_ep_h ep;
    tdl_status_t st = gfc_ep_get(rt, peer, &ep);
    if (st != TDL_OK)
        return st;
    if ((st = ep_wireup_wait(rt, peer, ep)) != TDL_OK)
        return st;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc: cannot describe the endpoint to rank %d", peer);
    ucp_ep_print_info(ep, f);
    if (fclose(f) != 0) {
        free(text);
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc: cannot describe the endpoint to rank %d", peer);
    }
    ep_info_t info;
    ep_info_parse(&info, text);
    free(text);
    if ((st = ep_info_format(&info, peer, buf, size)) != TDL_OK)
        return st;
    /* gfc's own single copy carries large messages to this peer (copy.c) */
    size_t used = strlen(buf);
    if (peer != rt->rank && gfc_copy_applies(rt, peer, SIZE_MAX) && used + 9 < size)
        snprintf(buf + used, size - used, "+gfc/copy");
    return TDL_OK;
}

const char *gfc_ucx_version(void)
{
    return ucp_get_version_string();
}
