/* dynamiq's layout constants and the allocation of widths within a super-group: the part of the
 * format the CPU (src/codec/dynamiq.c) and the GPU (cuda/dynamiq.cu) must share exactly, kept in
 * one place. Plain C that nvcc compiles for both sides. */
#ifndef TIDAL_DYNAMIQ_FORMAT_H
#define TIDAL_DYNAMIQ_FORMAT_H

#ifdef __CUDACC__
#define DQ_HD __host__ __device__
#else
#define DQ_HD
#endif

#define DQ_GROUP 32
#define DQ_SUPER 256
#define DQ_GPS (DQ_SUPER / DQ_GROUP)
#define DQ_EMAX 14          /* group exponents 0..14 half octaves below S */
#define DQ_EZERO 15         /* a group of zeros */
#define DQ_WMAX 16          /* widths 1..16: fitted tables to DQ_MAX_WIDTH, uniform levels above */
#define DQ_HEADER 4
#define DQ_VERSION 3
#define DQ_META_ZERO ((DQ_EZERO << 4) | 0)
#define DQ_MIN_BITS256 352  /* 1.375 bits per value: every group at 1 bit fits */
#define DQ_MAX_BITS256 4184 /* 16.34375: every group at 16 bits fits */
#define DQ_GOLDEN 0x9E3779B9u
/* A group scale s below DQ_TINY_SCALE (its values far below FLT_MIN) is quantized as s and its
 * values times DQ_TINY_PRE, exactly, since 1 / s would overflow or lose bits: the same quotients
 * (the CPU's codec_scaled_group, whose constants dynamiq.c checks against these) */
#define DQ_TINY_SCALE 0x1p-100f
#define DQ_TINY_PRE 0x1p64f

/* The width of a group of exponent eg at threshold t (half bits): clamp((t - eg) / 2, 1, 16). */
static inline DQ_HD int dq_width_at(int t, int eg)
{
    int w = t - eg >= 0 ? (t - eg) / 2 : 0;
    return w < 1 ? 1 : w > DQ_WMAX ? DQ_WMAX : w;
}

/* Widths w[0..ng) for groups of exponents e[] within vb value bytes (a width-w group takes 4w):
 * reverse water-filling on the exponents (w = (t - e) / 2 for the largest t that fits), the
 * remaining 4-byte units to the groups next in line, largest scale first; fixed: one width for
 * every group. Groups of zeros (e == DQ_EZERO) get 0. */
static inline DQ_HD void dq_allocate(const int *e, int ng, int vb, int fixed, int *w)
{
    int nz = 0;
    for (int g = 0; g < ng; g++)
        nz += e[g] != DQ_EZERO;
    if (nz == 0) {
        for (int g = 0; g < ng; g++)
            w[g] = 0;
        return;
    }
    if (fixed) {
        int b = vb / (4 * nz);
        b = b < DQ_WMAX ? b : DQ_WMAX;
        for (int g = 0; g < ng; g++)
            w[g] = e[g] == DQ_EZERO ? 0 : b;
        return;
    }
    int lo = 0, hi = 2 * DQ_WMAX + DQ_EMAX + 1; /* cost(lo) fits; cost(hi) is the most */
    while (hi - lo > 1) {
        int t = (lo + hi) / 2, cost = 0;
        for (int g = 0; g < ng; g++)
            cost += e[g] == DQ_EZERO ? 0 : 4 * dq_width_at(t, e[g]);
        if (cost <= vb)
            lo = t;
        else
            hi = t;
    }
    int left = vb;
    for (int g = 0; g < ng; g++) {
        w[g] = e[g] == DQ_EZERO ? 0 : dq_width_at(lo, e[g]);
        left -= 4 * w[g];
    }
    for (int ex = 0; ex <= DQ_EMAX && left >= 4; ex++)
        for (int g = 0; g < ng && left >= 4; g++)
            if (e[g] == ex && dq_width_at(lo + 1, ex) > w[g]) {
                w[g]++;
                left -= 4;
            }
}

#endif /* TIDAL_DYNAMIQ_FORMAT_H */
