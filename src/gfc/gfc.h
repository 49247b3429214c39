/* gfc: group-free collectives over UCX. */
#ifndef TIDAL_GFC_H
#define TIDAL_GFC_H

#include <stddef.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The UCX transports this process can use ("cma,posix,self,sysv,tcp"), sorted and without
 * duplicates, read from UCX's own component and memory-domain tables. */
tdl_status_t gfc_transports_query(char *buf, size_t size);
/* "1.13.1" */
const char *gfc_ucx_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_GFC_H */
