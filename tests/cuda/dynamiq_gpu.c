/* dynamiq on the GPU against the CPU, byte for byte: encode, the fused decode-accumulate-encode
 * pass and decode, over sizes with short last super-groups and every configuration that changes
 * the code path (stochastic and nearest rounding, fitted and uniform levels, fixed widths, an
 * even split, widths above the tables), then corrupt input refused. Exit 77 without a GPU. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "core/core.h"
#include "cuda/cuda.h"
#include "tap.h"

static void fill(float *x, size_t n, uint64_t seed)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, 3);
    float scale = 1;
    for (size_t i = 0; i < n; i++) {
        if (i % 777 == 0)
            scale = expf(2.0f * tdl_rng_normal(&rng));
        x[i] = scale * tdl_rng_normal(&rng) / (0.2f + fabsf(tdl_rng_normal(&rng)));
    }
    if (n > 600)
        x[500] = 0, x[501] = 1e-40f;
}

static void *dev_copy(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    if (bytes)
        cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("1..0 # SKIP no GPU\n");
        return 77;
    }
    const codec_ops_t *ops = codec_find("dynamiq");
    static const size_t sizes[] = {1, 33, 256, 1000, 40009, (size_t)1 << 20};
    static const codec_config_t cfgs[] = {
        {0},
        {.round = CODEC_ROUND_NEAREST},
        {.flags = CODEC_DQ_UNIFORM},
        {.flags = CODEC_DQ_FIXED_WIDTH | CODEC_DQ_INDEPENDENT},
        {.flags = CODEC_DQ_EVEN_SPLIT | CODEC_DQ_FLAT_SCALE},
        {.bits = 3.0},
        {.bits = 14.0},
    };
    for (size_t c = 0; c < TDL_ARRAY_SIZE(cfgs); c++)
        for (size_t z = 0; z < TDL_ARRAY_SIZE(sizes); z++) {
            size_t n = sizes[z], cap = ops->max_encoded_bytes(&cfgs[c], n), b0, b1, g0 = 0, g1 = 0;
            float *x = malloc(n * 4), *local = malloc(n * 4), *dc = malloc(n * 4),
                  *dg = malloc(n * 4);
            unsigned char *e0 = malloc(cap), *e1 = malloc(cap), *h = malloc(cap);
            fill(x, n, 10 + z), fill(local, n, 20 + z);
            codec_where_t w0 = {.seed = 5, .rank = 1, .hop = 0, .contributions = 1,
                                .group_size = 4, .collective = 77, .offset = 1000};
            codec_where_t w1 = w0;
            w1.rank = 2, w1.hop = 1, w1.contributions = 2;
            int good = ops->encode(&cfgs[c], &w0, x, n, e0, &b0) == TDL_OK &&
                       ops->decode_accumulate_encode(&cfgs[c], &w1, e0, b0, local, n, e1, &b1) ==
                           TDL_OK &&
                       ops->decode(&cfgs[c], e1, b1, dc, n) == TDL_OK;
            codec_dq_params_t p0, p1;
            codec_dynamiq_params(&cfgs[c], &w0, &p0);
            codec_dynamiq_params(&cfgs[c], &w1, &p1);
            float *dx = dev_copy(x, n * 4), *dl = dev_copy(local, n * 4), *dd = dev_copy(NULL, n * 4);
            unsigned char *de0 = dev_copy(NULL, cap), *de1 = dev_copy(NULL, cap);
            good = good && tdl_cuda_dynamiq_encode(&p0, dx, n, de0, &g0) == TDL_OK && g0 == b0;
            cudaMemcpy(h, de0, b0, cudaMemcpyDeviceToHost);
            int same_enc = good && memcmp(h, e0, b0) == 0;
            /* the fused pass from the CPU's input encoding, so a difference shows where it is */
            cudaMemcpy(de0, e0, b0, cudaMemcpyHostToDevice);
            good = good && tdl_cuda_dynamiq_fused(&p1, de0, b0, dl, n, de1, &g1) == TDL_OK &&
                   g1 == b1;
            cudaMemcpy(h, de1, b1, cudaMemcpyDeviceToHost);
            int same_fused = good && memcmp(h, e1, b1) == 0;
            cudaMemcpy(de1, e1, b1, cudaMemcpyHostToDevice);
            good = good && tdl_cuda_dynamiq_decode(de1, b1, dd, n, 0) == TDL_OK;
            cudaMemcpy(dg, dd, n * 4, cudaMemcpyDeviceToHost);
            int same_dec = good && memcmp(dg, dc, n * 4) == 0;
            ok(same_enc && same_fused && same_dec,
               "config %zu, %zu values: encode %s, fused %s, decode %s the CPU's", c, n,
               same_enc ? "=" : "!=", same_fused ? "=" : "!=", same_dec ? "=" : "!=");
            if (c == 0 && z == 3) {
                memcpy(h, e1, b1);
                h[4 + 4 + 2] = 0xf1; /* header, 4 units, S: a width on a zero group */
                cudaMemcpy(de1, h, b1, cudaMemcpyHostToDevice);
                ok(tdl_cuda_dynamiq_decode(de1, b1, dd, n, 0) == TDL_ERR_CORRUPT &&
                       tdl_cuda_dynamiq_decode(de1, b1 - 1, dd, n, 0) == TDL_ERR_CORRUPT,
                   "corrupt metadata and a wrong size are refused: %s", tdl_error_get());
            }
            cudaFree(dx), cudaFree(dl), cudaFree(dd), cudaFree(de0), cudaFree(de1);
            free(x), free(local), free(dc), free(dg), free(e0), free(e1), free(h);
        }
    return done_testing();
}
