/* tidal serve: requests, trajectory tasks, executors, state migration, the HTTP front door,
 * and PNG output. Each part has its own section below. */
#ifndef TIDAL_SERVE_H
#define TIDAL_SERVE_H

#include <stddef.h>

#include "core/core.h"
#include "dit/dit.h"
#include "gfc/gfc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== PNG (src/serve/png.c) ================================================================== */

/* Images float [n, channels, height, width] with values in [-1, 1] (clamped; NaN counts as -1;
 * pixel = round((v + 1) * 127.5)) laid out row by row in a grid of min(ncols, n) columns and
 * ceil(n / ncols) rows, with `pad` pixels of white between and around the tiles; cells of the
 * last row past image n - 1 are white too. channels 1 gives a grayscale PNG, 3 an RGB one.
 * The output is 8 bits per sample and the same bytes for the same arguments. */

/* Writes the grid to `path` atomically: the PNG goes to "<path>.tmp" in the same directory, is
 * fsync'ed and renamed over `path`. On failure nothing is left behind and `path` keeps its old
 * content, if it had one. */
tdl_status_t serve_png_write_grid(const char *path, const float *images, int n, int channels,
                                  int height, int width, int ncols, int pad);

/* The same PNG into memory: *png_out (free it with free()) of *len_out bytes. */
tdl_status_t serve_png_encode(const float *images, int n, int channels, int height, int width,
                              int ncols, int pad, unsigned char **png_out, size_t *len_out);

/* ==== executors (src/serve/executor.c) ======================================================== */

/* The members of `group` as the exchanges of dit_sp_forward: every member calls it with the
 * same inputs and gets the whole output. */
void serve_sp_comm(dit_sp_comm_t *comm, gfc_group_t *group);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_SERVE_H */
