/* The cost model of serving: seconds per image of each trajectory stage (prepare, one denoising
 * step, decode) as a quadratic in the tokens of the image, one fit per sequence-parallel degree,
 * and the cost of moving a request's live state to another group. `tidal profile` measures and
 * writes it; the scheduler and the simulator read it. No I/O but load and save. */
#ifndef TIDAL_COORD_COST_H
#define TIDAL_COORD_COST_H

#include <stdbool.h>

#include "core/core.h"

#define COORD_COST_MAX_FITS 8 /* degrees per stage */

typedef enum {
    COORD_COST_PREPARE = 0,
    COORD_COST_STEP,
    COORD_COST_DECODE,
    COORD_COST_NSTAGES
} coord_cost_stage_t;

/* seconds = a * x^2 + b * x + c, x the tokens of one image; rel_err the largest |fit - y| / y
 * over the points the fit was made from (0 when not measured). */
typedef struct coord_cost_fit {
    int degree;
    double a, b, c, rel_err;
} coord_cost_fit_t;

#define COORD_COST_MAX_BATCH_TABLES 8  /* image sizes the batch dimension is measured at */
#define COORD_COST_MAX_BATCH_POINTS 16 /* batch sizes each */

/* The batch dimension of a denoising step at images of `tokens` tokens: a step of images[i]
 * images together costs images[i] x factor[i] times one image's (factor 1 at 1 image; below 1
 * where sharing the model's passes pays), linear between points and flat past the ends. */
typedef struct coord_cost_batch {
    int tokens, npoints;
    int images[COORD_COST_MAX_BATCH_POINTS]; /* ascending */
    double factor[COORD_COST_MAX_BATCH_POINTS];
} coord_cost_batch_t;

typedef struct coord_cost_model {
    char name[64];  /* the DiT configuration measured ("fmnist") */
    int patch;      /* pixels per token side: tokens = (resolution / patch)^2 */
    bool per_image; /* true: a stage of n images costs n times the fit */
    coord_cost_fit_t fits[COORD_COST_NSTAGES][COORD_COST_MAX_FITS]; /* by ascending degree */
    int nfits[COORD_COST_NSTAGES];
    double migration_latency_s;   /* fixed cost of moving a request's state between groups */
    double migration_bytes_per_s; /* bandwidth of that move */
    double state_bytes_per_token; /* live state of one image per token (latents, history) */
    coord_cost_batch_t batch[COORD_COST_MAX_BATCH_TABLES]; /* by ascending tokens; none: 1 */
    int nbatch;
} coord_cost_model_t;

const char *coord_cost_stage_name(coord_cost_stage_t stage);

/* An idealized cluster in the ballpark of the fmnist DiT measured on a small machine; see
 * doc/scheduler.md for the numbers and where they come from. */
void coord_cost_model_default(coord_cost_model_t *model);
/* Adds or replaces the fit of (stage, degree); degree a power of two, at most 1024. */
tdl_status_t coord_cost_model_set_fit(coord_cost_model_t *model, coord_cost_stage_t stage,
                                      int degree, double a, double b, double c, double rel_err);
/* The JSON format of doc/scheduler.md. Load fills *model only on success. */
tdl_status_t coord_cost_model_load(const char *path, coord_cost_model_t *model);
tdl_status_t coord_cost_model_save(const coord_cost_model_t *model, const char *path);

/* Seconds of one image of `tokens` tokens in `stage` at `degree`; INFINITY when the model has
 * no fit at that degree. Never below 0. */
double coord_cost_stage_s(const coord_cost_model_t *model, coord_cost_stage_t stage, int tokens,
                          int degree);
bool coord_cost_has_degree(const coord_cost_model_t *model, coord_cost_stage_t stage, int degree);
int coord_cost_tokens(const coord_cost_model_t *model, int resolution);
/* Adds or replaces the batch table of `tokens`: npoints (1 .. COORD_COST_MAX_BATCH_POINTS)
 * distinct image counts >= 1 (any order) and their factors, finite and > 0. */
tdl_status_t coord_cost_model_set_batch(coord_cost_model_t *model, int tokens, const int *images,
                                        const double *factor, int npoints);
/* The factor of a step of `images` images of `tokens` tokens together (the table of the nearest
 * tokens, by ratio); 1 without tables. */
double coord_cost_batch_factor(const coord_cost_model_t *model, int tokens, int images);
/* Seconds to move the state of `images` images of `tokens` tokens to another group. */
double coord_cost_migration_s(const coord_cost_model_t *model, int tokens, int images);

/* Least-squares y = a x^2 + b x + c over n points (n >= 3; n = 2 fits a line, n = 1 a
 * constant); rel_err as in coord_cost_fit_t. Outputs written only on success. */
tdl_status_t coord_cost_fit_quadratic(const double *xs, const double *ys, int n, double *a,
                                      double *b, double *c, double *rel_err);

#endif /* TIDAL_COORD_COST_H */
