/* The model the serving tests run: the fmnist DiT with random weights everywhere (the reference
 * initialization zeroes adaLN and the output layer, which would hide errors), the same on every
 * rank. */
#ifndef TIDAL_TESTS_MODEL_FIXTURE_H
#define TIDAL_TESTS_MODEL_FIXTURE_H

#include "dit/dit.h"
#include "gfc/harness.h"

static inline dit_model_t *fixture_model(harness_t *h, int max_batch, int max_resolution)
{
    dit_config_t cfg;
    dit_model_t *m = NULL;
    harness_expect_status(h, dit_config_named("fmnist", &cfg), TDL_OK, "config");
    harness_expect_status(h, dit_model_create(&cfg, max_batch, max_resolution, &m), TDL_OK,
                          "model");
    if (!m)
        return NULL;
    tdl_rng_t rng;
    tdl_rng_init(&rng, 42, 1);
    for (size_t i = 0; i < m->num_params; i++)
        m->params[i] = 0.05f * tdl_rng_normal(&rng);
    return m;
}

#endif /* TIDAL_TESTS_MODEL_FIXTURE_H */
