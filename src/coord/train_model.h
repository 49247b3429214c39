/* The cost model of co-located training, for the simulator (sim.h): a data-parallel step's
 * seconds as a function of its members, and a joiner's wait for the training state. `tidal
 * profile --train` measures it and writes it as the "train" object of the serving cost model's
 * JSON (doc/colocation.md). No I/O but load and save. */
#ifndef TIDAL_COORD_TRAIN_MODEL_H
#define TIDAL_COORD_TRAIN_MODEL_H

#include "core/core.h"

#define COORD_TRAIN_MAX_POINTS 64

/* A measured step: what the fit was made from, kept beside it. */
typedef struct coord_train_point {
    int members, batch;
    double step_s, allreduce_s; /* measured: a whole step; its all-reduce alone */
} coord_train_point_t;

/* step(n) = fixed_s + ceil(batch / n) * image_s + allreduce(n), where
 * allreduce(n) = 2 (n - 1) / n * grad_bytes / link_bytes_per_s + 2 (n - 1) * hop_s (0 at n = 1,
 * a ring's bytes and hops); a joiner waits hop_s + state_bytes / link_bytes_per_s for the state;
 * a leaver waits for the end of the step under way. */
typedef struct coord_train_model {
    char name[64];  /* the DiT configuration measured ("fmnist") */
    char codec[16]; /* the all-reduce's wire format measured ("f32", "dynamiq") */
    int batch;      /* the global batch (images a step) */
    double image_s; /* forward and backward of one image on one device */
    double fixed_s; /* a step's cost whatever its images: optimizer, EMA, launch */
    double grad_bytes, link_bytes_per_s, hop_s;
    double state_bytes;  /* what a joiner receives: weights, EMA, optimizer moments */
    double step_rel_err; /* largest |fit - measured| / measured over the points (0: none) */
    coord_train_point_t points[COORD_TRAIN_MAX_POINTS];
    int npoints;
} coord_train_model_t;

/* The tiny model's numbers on a device of about a core (doc/colocation.md): for tests and for a
 * simulation without a profile. */
void coord_train_model_default(coord_train_model_t *m);
/* Seconds of one step of `members` (>= 1) members; of the all-reduce alone; a joiner's wait. */
double coord_train_step_s(const coord_train_model_t *m, int members);
double coord_train_allreduce_s(const coord_train_model_t *m, int members);
double coord_train_join_s(const coord_train_model_t *m);
/* Fits image_s, fixed_s (from the steps less their all-reduce) and link_bytes_per_s, hop_s (from
 * the all-reduces) over m->points, and sets step_rel_err. With one member count above 1, or a
 * fit of the hops below 0, hop_s is 0 and the bytes alone are fitted. TDL_ERR_INVALID_ARG when
 * the points do not determine them: two local batches, and a member count above 1. */
tdl_status_t coord_train_model_fit(coord_train_model_t *m);
/* The "train" object of a JSON file (doc/colocation.md); TDL_ERR_NOT_FOUND when the file has
 * none. Load fills *m only on success. Save adds or replaces the object, keeping the rest of the
 * file (the serving cost model beside it). */
tdl_status_t coord_train_model_load(const char *path, coord_train_model_t *m);
tdl_status_t coord_train_model_save(const coord_train_model_t *m, const char *path);

#endif /* TIDAL_COORD_TRAIN_MODEL_H */
