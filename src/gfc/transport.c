/* What UCX can use on this machine, for `tidal info`: the transport layer resources of every
 * memory domain of every UCT component, the same tables `ucx_info -d` prints. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "gfc/gfc.h"

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

const char *gfc_ucx_version(void)
{
    return ucp_get_version_string();
}
