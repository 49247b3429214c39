/* The DiT tests' random tensors: `rng`, which each test seeds (tdl_rng_init), and randn, a new
 * tensor of n normal values of standard deviation std from it (tensor_free it). Included by
 * tests/unit/test_dit_grad.c, tests/unit/test_dit_inference.c and tests/cuda/dit_compare.h. */
#ifndef TIDAL_TESTS_RANDN_H
#define TIDAL_TESTS_RANDN_H

#include <stddef.h>

#include "core/core.h"
#include "tensor/tensor.h"

static tdl_rng_t rng;

static float *randn(size_t n, float std)
{
    float *p = tensor_alloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = std * tdl_rng_normal(&rng);
    return p;
}

#endif /* TIDAL_TESTS_RANDN_H */
