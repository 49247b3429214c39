/* The DiT's element-wise activations, value and derivative per element, and its LayerNorm of one
 * row: one definition for the CPU loops (layers.c) and the GPU kernels (cuda/dit.cu, which nvcc
 * compiles for the device, and its emulation), so both backends compute the same thing. */
#ifndef TIDAL_DIT_ACTIVATION_H
#define TIDAL_DIT_ACTIVATION_H

#include <math.h>

#ifdef __CUDACC__
#define DIT_ELEMENTWISE static __host__ __device__ __forceinline__
#else
#define DIT_ELEMENTWISE static inline
#endif

/* tanh as a rational function (the minimax approximant Eigen uses), within 4e-7 of tanhf over
 * the whole line: libm's tanhf and expf are scalar calls that took half the training time;
 * this vectorizes. */
DIT_ELEMENTWISE float dit_fast_tanh(float x)
{
    const float c = 7.90531110763549805f;
    x = x < -c ? -c : (x > c ? c : x);
    float x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * x;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return p / q;
}

/* sigmoid(x) = (1 + tanh(x / 2)) / 2 */
DIT_ELEMENTWISE float dit_fast_sigmoid(float x)
{
    return 0.5f + 0.5f * dit_fast_tanh(0.5f * x);
}

/* SiLU: x * sigmoid(x), and its derivative */
DIT_ELEMENTWISE float dit_silu(float x)
{
    return x * dit_fast_sigmoid(x);
}

DIT_ELEMENTWISE float dit_silu_grad(float x)
{
    float s = dit_fast_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

#define DIT_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

/* GELU, tanh approximation, and its derivative */
DIT_ELEMENTWISE float dit_gelu(float x)
{
    return 0.5f * x * (1.0f + dit_fast_tanh(DIT_GELU_K * (x + 0.044715f * x * x * x)));
}

DIT_ELEMENTWISE float dit_gelu_grad(float x)
{
    float th = dit_fast_tanh(DIT_GELU_K * (x + 0.044715f * x * x * x));
    float du = DIT_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

#define DIT_LN_EPS 1e-6f

/* LayerNorm without affine of the d values x: y = (x - mean) * rstd, sums in double */
DIT_ELEMENTWISE void dit_layernorm_row(float *y, float *mean, float *rstd, const float *x, int d)
{
    double m = 0, v = 0;
    for (int j = 0; j < d; j++)
        m += x[j];
    m /= d;
    for (int j = 0; j < d; j++)
        v += (x[j] - m) * (x[j] - m);
    v /= d;
    float r = (float)(1.0 / sqrt(v + DIT_LN_EPS));
    for (int j = 0; j < d; j++)
        y[j] = (float)(x[j] - m) * r;
    *mean = (float)m;
    *rstd = r;
}

/* Its backward, added into dx: dx += rstd * (dy - mean(dy) - xhat * mean(dy * xhat)) */
DIT_ELEMENTWISE void dit_layernorm_row_backward(float *dx, const float *dy, const float *x,
                                                float m, float r, int d)
{
    double sdy = 0, sdyx = 0;
    for (int j = 0; j < d; j++) {
        float xh = (x[j] - m) * r;
        sdy += dy[j];
        sdyx += dy[j] * xh;
    }
    float mdy = (float)(sdy / d), mdyx = (float)(sdyx / d);
    for (int j = 0; j < d; j++) {
        float xh = (x[j] - m) * r;
        dx[j] += r * (dy[j] - mdy - xh * mdyx);
    }
}

#endif /* TIDAL_DIT_ACTIVATION_H */
