// dynamiq on the GPU: encode, decode and the fused decode-accumulate-encode pass, producing the
// bytes src/codec/dynamiq.c produces (layout and design there and in doc/dynamiq.md). One block
// of 256 threads per super-group, one warp per group of 32, one thread per value; a group's bit
// planes are warp ballots. Every float operation is the CPU's, rounded alike: explicit _rn
// intrinsics, no fused multiply-add, integer conversions as C's. The budget split runs in one
// block, its totals summed exactly in integers. tests/cuda/dynamiq.gpu compares bytes.
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "codec/codec.h"
#include "codec/dynamiq_format.h"
#include "cuda/cuda.h"

#define DQ_TABLE_WMAX 8
#define DQ_FLAT_SCALE 16u
#define DQ_FIXED_WIDTH 4u
#define DQ_EVEN_SPLIT 32u

static_assert(CODEC_DQ_FLAT_SCALE == DQ_FLAT_SCALE && CODEC_DQ_FIXED_WIDTH == DQ_FIXED_WIDTH &&
                  CODEC_DQ_EVEN_SPLIT == DQ_EVEN_SPLIT,
              "flags as in codec.h");

struct dq_dev_tables {
    float lv[2][9 * 256];
    float ig[2][9 * 256];
};

static dq_dev_tables *dq_tables_dev;

static tdl_status_t dq_cuda_err(cudaError_t e, const char *what)
{
    return tdl_error_raise(TDL_ERR_CUDA, "dynamiq on the GPU: %s: %s", what, cudaGetErrorString(e));
}

static tdl_status_t dq_tables_ready(void)
{
    if (dq_tables_dev)
        return TDL_OK;
    dq_dev_tables host;
    for (int kind = 0; kind < 2; kind++) {
        const float *lv, *ig;
        codec_dynamiq_tables(kind, &lv, &ig);
        memcpy(host.lv[kind], lv, sizeof(host.lv[kind]));
        memcpy(host.ig[kind], ig, sizeof(host.ig[kind]));
    }
    dq_dev_tables *d;
    cudaError_t e = cudaMalloc(&d, sizeof(*d));
    if (e == cudaSuccess)
        e = cudaMemcpy(d, &host, sizeof(host), cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
        return dq_cuda_err(e, "level tables");
    dq_tables_dev = d;
    return TDL_OK;
}

// ---- device helpers, each the CPU's expression --------------------------------------------

__device__ static inline float dq_bits_f32(uint32_t u)
{
    return __uint_as_float(u);
}

__device__ static inline float dq_pow2f(int k)
{
    return k >= -126 ? dq_bits_f32((uint32_t)(k + 127) << 23) : dq_bits_f32(0x00400000u);
}

__device__ static inline float dq_half_pow(int e)
{
    float r = dq_pow2f(-(e >> 1));
    return (e & 1) ? __fmul_rn(r, 0x1.6a09e6p-1f) : r;
}

__device__ static inline uint32_t dq_fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

__device__ static inline size_t dq_groups(size_t m)
{
    return (m + DQ_GROUP - 1) / DQ_GROUP;
}

__device__ __host__ static inline size_t dq_sg_bytes(size_t m, int units)
{
    return 2 + (m + DQ_GROUP - 1) / DQ_GROUP + 4 * (size_t)units;
}

// Value t of the encoded super-group at p (m values): the CPU's dequantize.
__device__ static float dq_decode_value(const dq_dev_tables *T, int kind, const unsigned char *p,
                                        int m, int t)
{
    int ng = (int)dq_groups((size_t)m), g = t / DQ_GROUP, lane = t % DQ_GROUP;
    const unsigned char *meta = p + 2;
    float S = dq_bits_f32((uint32_t)(p[0] | (p[1] << 8)) << 16);
    if (isnan(S))
        return NAN;
    int e = meta[g] >> 4, w = (meta[g] & 15) + 1;
    if (e == DQ_EZERO)
        return 0.0f;
    const unsigned char *val = p + 2 + ng;
    for (int h = 0; h < g; h++)
        val += (meta[h] >> 4) == DQ_EZERO ? 0 : 4 * ((meta[h] & 15) + 1);
    uint32_t code = 0;
    for (int j = 0; j < w; j++) {
        const unsigned char *q = val + 4 * j;
        uint32_t plane = q[0] | (q[1] << 8) | (q[2] << 16) | ((uint32_t)q[3] << 24);
        code |= ((plane >> lane) & 1u) << j;
    }
    float s = __fmul_rn(S, dq_half_pow(e)), y;
    if (w <= DQ_TABLE_WMAX) {
        y = __fmul_rn(T->lv[kind][w * 256 + code], s);
    } else {
        float st = __fdiv_rn(2.0f, (float)((1 << w) - 1));
        y = __fmul_rn(__fadd_rn(-1.0f, __fmul_rn((float)code, st)), s);
    }
    return y;
}

// ---- kernels ------------------------------------------------------------------------------

// Offsets of the super-groups after the units table: an exclusive scan of their sizes in one
// block; *end gets the end of the last. Also checks each units entry against its group count.
__global__ static void dq_offsets_kernel(const unsigned char *units, size_t n, size_t nsg,
                                         size_t *off, size_t *end, int *bad)
{
    __shared__ size_t part[1024];
    size_t per = (nsg + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * per;
    size_t hi = lo + per < nsg ? lo + per : nsg, sum = 0;
    for (size_t k = lo; k < hi; k++) {
        size_t m = n - k * DQ_SUPER < DQ_SUPER ? n - k * DQ_SUPER : DQ_SUPER;
        if (units[k] > DQ_WMAX * dq_groups(m))
            atomicMin(bad, (int)k);
        sum += dq_sg_bytes(m, units[k]);
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        size_t run = 0;
        for (unsigned i = 0; i < blockDim.x; i++) {
            size_t v = part[i];
            part[i] = run;
            run += v;
        }
        *end = run;
    }
    __syncthreads();
    size_t run = part[threadIdx.x];
    for (size_t k = lo; k < hi; k++) {
        size_t m = n - k * DQ_SUPER < DQ_SUPER ? n - k * DQ_SUPER : DQ_SUPER;
        off[k] = run;
        run += dq_sg_bytes(m, units[k]);
    }
}

// dq_check_sg for every super-group: widths within units, none on a zero group, unused value
// bytes zero; then the padding after the last. bad gets the smallest bad index.
__global__ static void dq_check_kernel(const unsigned char *sgs, const unsigned char *units,
                                       const size_t *off, size_t n, size_t nsg, size_t avail,
                                       int *bad)
{
    size_t k = blockIdx.x;
    if (k == nsg) { // the padding
        size_t end = nsg ? off[nsg - 1] + dq_sg_bytes(n - (nsg - 1) * DQ_SUPER, units[nsg - 1]) : 0;
        if (end > avail) {
            if (threadIdx.x == 0)
                atomicMin(bad, (int)nsg);
            return;
        }
        for (size_t i = end + threadIdx.x; i < avail; i += blockDim.x)
            if (sgs[i])
                atomicMin(bad, (int)nsg);
        return;
    }
    if (threadIdx.x != 0)
        return;
    size_t m = n - k * DQ_SUPER < DQ_SUPER ? n - k * DQ_SUPER : DQ_SUPER;
    int ng = (int)dq_groups(m), used = 0;
    const unsigned char *p = sgs + off[k];
    if (off[k] + dq_sg_bytes(m, units[k]) > avail) {
        atomicMin(bad, (int)k);
        return;
    }
    for (int g = 0; g < ng; g++) {
        int e = p[2 + g] >> 4, w = (p[2 + g] & 15) + 1;
        if (e == DQ_EZERO && (p[2 + g] & 15))
            atomicMin(bad, (int)k);
        used += e == DQ_EZERO ? 0 : w;
    }
    if (used > units[k]) {
        atomicMin(bad, (int)k);
        return;
    }
    for (size_t i = dq_sg_bytes(m, used); i < dq_sg_bytes(m, units[k]); i++)
        if (p[i])
            atomicMin(bad, (int)k);
}

// The value t of super-group k the encoder sees: the input, or the decoded input plus local.
__device__ static float dq_source(const float *in, const dq_dev_tables *T, int in_kind,
                                  const unsigned char *in_sgs, const size_t *in_off,
                                  const float *local, size_t k, int m, int t)
{
    size_t i = k * DQ_SUPER + (size_t)t;
    if (in)
        return in[i];
    float y = dq_decode_value(T, in_kind, in_sgs + in_off[k], m, t);
    return __fadd_rn(y, local[i]);
}

// Super-group statistics: the largest magnitude (0 where a value is not finite).
__global__ static void dq_stats_kernel(const float *in, const dq_dev_tables *T, int in_kind,
                                       const unsigned char *in_sgs, const size_t *in_off,
                                       const float *local, size_t n, float *est)
{
    __shared__ float mx[DQ_SUPER];
    __shared__ int bad;
    size_t k = blockIdx.x;
    int m = (int)(n - k * DQ_SUPER < DQ_SUPER ? n - k * DQ_SUPER : DQ_SUPER), t = threadIdx.x;
    if (t == 0)
        bad = 0;
    __syncthreads();
    float a = 0;
    if (t < m) {
        a = fabsf(dq_source(in, T, in_kind, in_sgs, in_off, local, k, m, t));
        if (!(a <= 3.402823466e38f))
            bad = 1, a = 0;
    }
    mx[t] = a;
    __syncthreads();
    for (int s = DQ_SUPER / 2; s > 0; s >>= 1) {
        if (t < s)
            mx[t] = mx[t + s] > mx[t] ? mx[t + s] : mx[t];
        __syncthreads();
    }
    if (t == 0)
        est[k] = bad ? 0.0f : mx[0];
}

// dq_log2_bits of dynamiq.c: log2 from the float's bits (0 for the even-split ablation).
__device__ static inline float dq_log2_est(float est, bool flat)
{
    return flat ? 0.0f
                : __fmul_rn(__int2float_rn((int32_t)__float_as_uint(est) - 0x3f800000), 0x1.0p-23f);
}

// The budget split of dynamiq.c in one block: bisection on t, totals summed in integers.
__global__ static void dq_split_kernel(const float *est, size_t n, size_t nsg, size_t budget,
                                       unsigned flags, unsigned char *units)
{
    __shared__ unsigned long long total;
    __shared__ double lo_s, hi_s;
    bool flat = flags & DQ_EVEN_SPLIT;
    size_t last_ng = (n - (nsg - 1) * DQ_SUPER + DQ_GROUP - 1) / DQ_GROUP;
    if (threadIdx.x == 0) {
        size_t fixed = nsg;
        for (size_t k = 0; k < nsg; k++)
            fixed += dq_sg_bytes(n - k * DQ_SUPER < DQ_SUPER ? n - k * DQ_SUPER : DQ_SUPER, 0);
        float lmax = -INFINITY;
        for (size_t k = 0; k < nsg; k++) {
            float l = est[k] > 0 ? dq_log2_est(est[k], flat) : -INFINITY;
            lmax = l > lmax ? l : lmax;
        }
        double lo = 0, hi = DQ_WMAX + 1;
        if (lmax > -INFINITY) {
            lo = __dsub_rn(-(double)lmax, (double)DQ_WMAX);
            hi = __dadd_rn(lo, (double)(2 * DQ_WMAX + 2));
        }
        lo_s = lo, hi_s = hi;
        total = fixed;
    }
    __syncthreads();
    unsigned long long fixed = total;
    for (int it = 0; it < 40; it++) {
        double t = __dmul_rn(0.5, __dadd_rn(lo_s, hi_s));
        __syncthreads();
        if (threadIdx.x == 0)
            total = fixed;
        __syncthreads();
        unsigned long long mine = 0;
        for (size_t k = threadIdx.x; k < nsg; k += blockDim.x) {
            if (!(est[k] > 0))
                continue;
            double b = __dadd_rn(t, (double)dq_log2_est(est[k], flat));
            b = b < 1 ? 1 : b > DQ_WMAX ? DQ_WMAX : b;
            mine += 4 * (unsigned long long)__dmul_rn(b, (double)(k + 1 < nsg ? DQ_GPS : last_ng));
        }
        atomicAdd(&total, mine);
        __syncthreads();
        if (threadIdx.x == 0) {
            if (total <= budget)
                lo_s = t;
            else
                hi_s = t;
        }
        __syncthreads();
    }
    for (size_t k = threadIdx.x; k < nsg; k += blockDim.x) {
        if (!(est[k] > 0)) {
            units[k] = 0;
            continue;
        }
        double b = __dadd_rn(lo_s, (double)dq_log2_est(est[k], flat));
        b = b < 1 ? 1 : b > DQ_WMAX ? DQ_WMAX : b;
        units[k] = (unsigned char)(unsigned)__dmul_rn(b, (double)(k + 1 < nsg ? DQ_GPS : last_ng));
    }
}

struct dq_kparams {
    int kind, stochastic;
    unsigned flags;
    uint32_t key, offset;
    uint64_t a0;
};

// Encodes every super-group: block k, warp g = group g, lane = value.
__global__ static void dq_encode_kernel(dq_kparams P, const float *in, const dq_dev_tables *T,
                                        int in_kind, const unsigned char *in_sgs,
                                        const size_t *in_off, const float *local, size_t n,
                                        const unsigned char *units, const size_t *off,
                                        unsigned char *sgs)
{
    __shared__ float gmax[DQ_GPS];
    __shared__ int bad, e[DQ_GPS], w[DQ_GPS], voff[DQ_GPS];
    __shared__ float S;
    size_t k = blockIdx.x;
    int m = (int)(n - k * DQ_SUPER < DQ_SUPER ? n - k * DQ_SUPER : DQ_SUPER), t = threadIdx.x;
    int ng = (int)dq_groups((size_t)m), g = t / DQ_GROUP, lane = t % DQ_GROUP;
    unsigned char *o = sgs + off[k];
    if (t == 0)
        bad = 0;
    __syncthreads();
    float x = 0, a = 0;
    if (t < m) {
        x = dq_source(in, T, in_kind, in_sgs, in_off, local, k, m, t);
        a = fabsf(x);
        if (!(a <= 3.402823466e38f))
            bad = 1;
    }
    float gm = a;
    for (int s = 16; s > 0; s >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, gm, s);
        gm = other > gm ? other : gm;
    }
    if (lane == 0)
        gmax[g] = gm;
    __syncthreads();
    if (t == 0) {
        for (int h = 0; h < ng; h++)
            o[2 + h] = DQ_META_ZERO;
        if (bad) {
            o[0] = 0xc0, o[1] = 0x7f;
        } else {
            float smax = 0;
            for (int h = 0; h < ng; h++)
                smax = gmax[h] > smax ? gmax[h] : smax;
            uint32_t u = __float_as_uint(smax);
            u = (u >> 16) + ((u & 0xffffu) != 0);
            if (u >= 0x7f80u)
                u = 0x7f7fu;
            o[0] = (unsigned char)u, o[1] = (unsigned char)(u >> 8);
            S = dq_bits_f32(u << 16);
            for (int h = 0; h < ng; h++) {
                if (gmax[h] == 0) {
                    e[h] = DQ_EZERO;
                } else if (P.flags & DQ_FLAT_SCALE) {
                    e[h] = 0;
                } else {
                    int lo = 0, hi = DQ_EMAX + 1;
                    while (hi - lo > 1) {
                        int mid = (lo + hi) >> 1;
                        if (__fmul_rn(S, dq_half_pow(mid)) >= gmax[h])
                            lo = mid;
                        else
                            hi = mid;
                    }
                    e[h] = lo;
                }
            }
            dq_allocate(e, ng, 4 * units[k], (P.flags & DQ_FIXED_WIDTH) != 0, w);
            int run = 0;
            for (int h = 0; h < ng; h++) {
                voff[h] = run;
                if (e[h] != DQ_EZERO) {
                    o[2 + h] = (unsigned char)(e[h] << 4 | (w[h] - 1));
                    run += 4 * w[h];
                }
            }
        }
    }
    __syncthreads();
    if (bad || g >= ng || e[g] == DQ_EZERO)
        return;
    int wg = w[g], top = (1 << wg) - 1;
    float s = __fmul_rn(S, dq_half_pow(e[g]));
    float pre = s < DQ_TINY_SCALE ? DQ_TINY_PRE : 1.0f; /* exact; 1 for all but tiny scales */
    float inv = __fdiv_rn(1.0f, __fmul_rn(s, pre));
    float v = __fmul_rn(__fmul_rn(t < m ? x : 0.0f, pre), inv);
    v = v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v;
    int kk;
    float p;
    if (wg <= DQ_TABLE_WMAX) {
        const float *lv = T->lv[P.kind] + wg * 256, *ig = T->ig[P.kind] + wg * 256;
        kk = 0;
        for (int step = 1 << (wg - 1); step; step >>= 1)
            kk += lv[kk + step] <= v ? step : 0;
        kk = kk < top - 1 ? kk : top - 1;
        p = __fmul_rn(__fsub_rn(v, lv[kk]), ig[kk]);
    } else {
        float is = __fmul_rn((float)top, 0.5f), st = __fdiv_rn(2.0f, (float)top);
        int q = __float2int_rz(__fmul_rn(__fadd_rn(v, 1.0f), is));
        q = q < 0 ? 0 : q > top - 1 ? top - 1 : q;
        kk = q;
        p = __fmul_rn(__fsub_rn(v, __fadd_rn(-1.0f, __fmul_rn((float)q, st))), is);
    }
    uint32_t code;
    if (P.stochastic) {
        uint32_t a32 = (uint32_t)(P.a0 + k * DQ_SUPER + (size_t)g * DQ_GROUP);
        uint32_t r = dq_fmix32((a32 + (uint32_t)lane) * DQ_GOLDEN + P.key) + P.offset;
        code = (uint32_t)kk + (__fmul_rn(__uint2float_rn(r >> 8), 0x1.0p-24f) < p);
    } else {
        code = (uint32_t)kk + (p > 0.5f);
    }
    code = t < m ? code : 0;
    unsigned char *val = o + 2 + ng + voff[g];
    for (int j = 0; j < wg; j++) {
        uint32_t plane = __ballot_sync(0xffffffffu, (code >> j) & 1u);
        if (lane == 0) {
            val[4 * j] = (unsigned char)plane, val[4 * j + 1] = (unsigned char)(plane >> 8);
            val[4 * j + 2] = (unsigned char)(plane >> 16);
            val[4 * j + 3] = (unsigned char)(plane >> 24);
        }
    }
}

__global__ static void dq_decode_kernel(const dq_dev_tables *T, int kind, const unsigned char *sgs,
                                        const size_t *off, size_t n, float *out, int add)
{
    size_t k = blockIdx.x;
    int m = (int)(n - k * DQ_SUPER < DQ_SUPER ? n - k * DQ_SUPER : DQ_SUPER), t = threadIdx.x;
    if (t >= m)
        return;
    float y = dq_decode_value(T, kind, sgs + off[k], m, t);
    size_t i = k * DQ_SUPER + (size_t)t;
    out[i] = add ? __fadd_rn(out[i], y) : y;
}

// ---- host side ----------------------------------------------------------------------------

struct dq_scratch {
    size_t *off_in, *off_out, *end;
    float *est;
    int *bad;
};

static void dq_scratch_free(dq_scratch *s)
{
    cudaFree(s->off_in), cudaFree(s->off_out), cudaFree(s->end), cudaFree(s->est), cudaFree(s->bad);
}

static tdl_status_t dq_scratch_alloc(dq_scratch *s, size_t nsg)
{
    memset(s, 0, sizeof(*s));
    size_t k = nsg ? nsg : 1;
    cudaError_t e = cudaMalloc(&s->off_in, k * sizeof(size_t));
    if (e == cudaSuccess)
        e = cudaMalloc(&s->off_out, k * sizeof(size_t));
    if (e == cudaSuccess)
        e = cudaMalloc(&s->end, 2 * sizeof(size_t));
    if (e == cudaSuccess)
        e = cudaMalloc(&s->est, k * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMalloc(&s->bad, sizeof(int));
    if (e != cudaSuccess) {
        dq_scratch_free(s);
        return dq_cuda_err(e, "scratch memory");
    }
    return TDL_OK;
}

// Checks an encoding on the device: header and size here, every super-group there.
static tdl_status_t dq_open_dev(const unsigned char *d_in, size_t in_bytes, size_t n,
                                dq_scratch *s, int *kind_out)
{
    unsigned char h[DQ_HEADER];
    if (in_bytes < DQ_HEADER)
        return tdl_error_raise(TDL_ERR_CORRUPT, "codec dynamiq: %zu bytes, shorter than the header",
                               in_bytes);
    cudaError_t e = cudaMemcpy(h, d_in, DQ_HEADER, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return dq_cuda_err(e, "reading the header");
    int code = h[2] | (h[3] << 8);
    if (h[0] != DQ_VERSION || h[1] > 1 || code < DQ_MIN_BITS256 || code > DQ_MAX_BITS256)
        return tdl_error_raise(TDL_ERR_CORRUPT, "codec dynamiq: bad header (version %d, levels %d, "
                                                "budget %d/256)",
                               h[0], h[1], code);
    if (in_bytes != codec_dynamiq_size(n, code))
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "codec dynamiq: encoded data of %zu values is %zu bytes, expected %zu",
                               n, in_bytes, codec_dynamiq_size(n, code));
    size_t nsg = (n + DQ_SUPER - 1) / DQ_SUPER;
    int none = 0x7fffffff, bad;
    cudaMemcpy(s->bad, &none, sizeof(int), cudaMemcpyHostToDevice);
    if (nsg) {
        dq_offsets_kernel<<<1, 1024>>>(d_in + DQ_HEADER, n, nsg, s->off_in, s->end, s->bad);
        dq_check_kernel<<<(unsigned)nsg + 1, 256>>>(d_in + DQ_HEADER + nsg, d_in + DQ_HEADER,
                                                    s->off_in, n, nsg,
                                                    in_bytes - DQ_HEADER - nsg, s->bad);
    }
    e = cudaMemcpy(&bad, s->bad, sizeof(int), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return dq_cuda_err(e, "checking the encoding");
    if (bad != none)
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "codec dynamiq: super-group %d has impossible metadata", bad);
    *kind_out = h[1];
    return TDL_OK;
}

static tdl_status_t dq_run_dev(const codec_dq_params_t *p, const float *d_in,
                               const unsigned char *d_enc, size_t enc_bytes, const float *d_local,
                               size_t n, unsigned char *d_out, size_t *out_bytes)
{
    tdl_status_t st = dq_tables_ready();
    if (st != TDL_OK)
        return st;
    size_t nsg = (n + DQ_SUPER - 1) / DQ_SUPER, total = codec_dynamiq_size(n, p->code);
    dq_scratch s;
    if ((st = dq_scratch_alloc(&s, nsg)) != TDL_OK)
        return st;
    int in_kind = 0;
    if (d_enc && (st = dq_open_dev(d_enc, enc_bytes, n, &s, &in_kind)) != TDL_OK) {
        dq_scratch_free(&s);
        return st;
    }
    const unsigned char *in_sgs = d_enc ? d_enc + DQ_HEADER + nsg : NULL;
    unsigned char h[DQ_HEADER] = {DQ_VERSION, (unsigned char)p->levels, (unsigned char)p->code,
                                  (unsigned char)(p->code >> 8)};
    cudaError_t e = cudaMemset(d_out, 0, total);
    if (e == cudaSuccess)
        e = cudaMemcpy(d_out, h, DQ_HEADER, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && nsg) {
        unsigned char *units = d_out + DQ_HEADER;
        int none = 0x7fffffff;
        cudaMemcpy(s.bad, &none, sizeof(int), cudaMemcpyHostToDevice);
        dq_stats_kernel<<<(unsigned)nsg, DQ_SUPER>>>(d_in, dq_tables_dev, in_kind, in_sgs,
                                                     s.off_in, d_local, n, s.est);
        dq_split_kernel<<<1, 1024>>>(s.est, n, nsg, total - DQ_HEADER, p->flags, units);
        dq_offsets_kernel<<<1, 1024>>>(units, n, nsg, s.off_out, s.end + 1, s.bad);
        dq_kparams kp = {p->levels, p->stochastic, p->flags, p->key, p->offset, p->a0};
        dq_encode_kernel<<<(unsigned)nsg, DQ_SUPER>>>(kp, d_in, dq_tables_dev, in_kind, in_sgs,
                                                      s.off_in, d_local, n, units, s.off_out,
                                                      units + nsg);
        e = cudaDeviceSynchronize();
    }
    dq_scratch_free(&s);
    if (e != cudaSuccess)
        return dq_cuda_err(e, "encoding");
    *out_bytes = total;
    return TDL_OK;
}

extern "C" tdl_status_t tdl_cuda_dynamiq_encode(const codec_dq_params_t *p, const float *d_in,
                                                size_t n, void *d_out, size_t *out_bytes)
{
    return dq_run_dev(p, d_in, NULL, 0, NULL, n, (unsigned char *)d_out, out_bytes);
}

extern "C" tdl_status_t tdl_cuda_dynamiq_fused(const codec_dq_params_t *p, const void *d_in,
                                               size_t in_bytes, const float *d_local, size_t n,
                                               void *d_out, size_t *out_bytes)
{
    return dq_run_dev(p, NULL, (const unsigned char *)d_in, in_bytes, d_local, n,
                      (unsigned char *)d_out, out_bytes);
}

extern "C" tdl_status_t tdl_cuda_dynamiq_decode(const void *d_in, size_t in_bytes, float *d_out,
                                                size_t n, int add)
{
    tdl_status_t st = dq_tables_ready();
    if (st != TDL_OK)
        return st;
    size_t nsg = (n + DQ_SUPER - 1) / DQ_SUPER;
    dq_scratch s;
    if ((st = dq_scratch_alloc(&s, nsg)) != TDL_OK)
        return st;
    int kind = 0;
    const unsigned char *in = (const unsigned char *)d_in;
    if ((st = dq_open_dev(in, in_bytes, n, &s, &kind)) == TDL_OK && nsg) {
        dq_decode_kernel<<<(unsigned)nsg, DQ_SUPER>>>(dq_tables_dev, kind, in + DQ_HEADER + nsg,
                                                      s.off_in, n, d_out, add);
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess)
            st = dq_cuda_err(e, "decoding");
    }
    dq_scratch_free(&s);
    return st;
}
