/* Images for the VAE's encoder (tidal encode, doc/vae.md): PNG files read with libpng as RGB, and
 * the reference DiT's center_crop_arr (ADM's): halve with PIL's BOX filter while the short side
 * is at least twice the resolution, resize with PIL's BICUBIC so that the short side is the
 * resolution, then crop the centre. The resampling is PIL's (Resample.c, 8-bit path): separable,
 * horizontal pass first, antialiased (the filter widened by the downscale factor), coefficients
 * normalized and rounded to 22-bit fixed point, each pass rounded and clipped to uint8. */
#include "config.h"

#include <math.h>
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "train/train.h"

#define PIL_PRECISION_BITS (32 - 8 - 2)

void train_image_free(train_image_t *img)
{
    free(img->pixels);
    img->pixels = NULL;
}

/* ---- PNG ------------------------------------------------------------------------------------- */

typedef struct png_read_err {
    char msg[200];
} png_read_err_t;

static void on_error(png_structp png, png_const_charp msg)
{
    png_read_err_t *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof(e->msg), "%s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* libpng reports errors by longjmp: this function holds the setjmp; what it allocates is in
 * *rows_out and *pixels_out for the caller to free. */
static int png_decode(FILE *f, png_read_err_t *err, uint8_t **pixels_out, png_bytep **rows_out,
                      int *w_out, int *h_out)
{
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, err, on_error, on_warning);
    if (!png)
        return -1;
    png_infop info = png_create_info_struct(png);
    if (!info || setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, info ? &info : NULL, NULL);
        return -1;
    }
    png_init_io(png, f);
    png_set_user_limits(png, 16384, 16384);
    png_read_info(png, info);
    /* as PIL's convert("RGB"): palette expanded, gray replicated, alpha dropped, 16 bits cut */
    png_set_expand(png);
    png_set_strip_16(png);
    png_set_strip_alpha(png);
    png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8)
        png_error(png, "cannot convert to 8-bit RGB");
    *pixels_out = tdl_malloc((size_t)w * h * 3);
    *rows_out = tdl_malloc((size_t)h * sizeof(png_bytep));
    if (!*pixels_out || !*rows_out)
        png_error(png, "out of memory");
    for (int y = 0; y < h; y++)
        (*rows_out)[y] = *pixels_out + (size_t)y * w * 3;
    png_read_image(png, *rows_out);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    *w_out = w;
    *h_out = h;
    return 0;
}

tdl_status_t train_image_read_png(const char *path, train_image_t *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tdl_error_raise(TDL_ERR_IO, "cannot open the image %s: %s", path, strerror(errno));
    unsigned char sig[8];
    if (fread(sig, 1, 8, f) != 8 || png_sig_cmp(sig, 0, 8) != 0) {
        fclose(f);
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s is not a PNG file (no PNG signature)", path);
    }
    rewind(f);
    png_read_err_t err = {"out of memory"};
    uint8_t *interleaved = NULL;
    png_bytep *rows = NULL;
    int w = 0, h = 0;
    int rc = png_decode(f, &err, &interleaved, &rows, &w, &h);
    fclose(f);
    free(rows);
    if (rc != 0) {
        free(interleaved);
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s: cannot decode the PNG: %s", path, err.msg);
    }
    uint8_t *planar = tdl_malloc((size_t)w * h * 3);
    if (!planar) {
        free(interleaved);
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory for %dx%d pixels", path, w, h);
    }
    size_t plane = (size_t)w * h;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++)
            planar[c * plane + i] = interleaved[i * 3 + c];
    free(interleaved);
    *out = (train_image_t){.channels = 3, .height = h, .width = w, .pixels = planar};
    return TDL_OK;
}

/* ---- PIL's resampling ------------------------------------------------------------------------ */

static double filter_box(double x)
{
    return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
}

static double filter_bicubic(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* PIL's precompute_coeffs and normalize_coeffs_8bpc for one axis, in_size -> out_size: for each
 * output, the first input it reads, how many, and their fixed-point weights (ksize a row). */
typedef struct coeffs {
    int ksize;
    int *bounds; /* [out_size][2]: first, count */
    int32_t *k;  /* [out_size][ksize] */
} coeffs_t;

static int coeffs_make(int in_size, int out_size, bool bicubic, coeffs_t *c)
{
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = (bicubic ? 2.0 : 0.5) * filterscale;
    c->ksize = (int)ceil(support) * 2 + 1;
    c->bounds = tdl_malloc((size_t)out_size * 2 * sizeof(int));
    c->k = tdl_calloc((size_t)out_size * c->ksize, sizeof(int32_t));
    double *kd = tdl_malloc((size_t)c->ksize * sizeof(double));
    if (!c->bounds || !c->k || !kd) {
        free(kd);
        return -1;
    }
    double ss = 1.0 / filterscale;
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            double w = bicubic ? filter_bicubic((x + xmin - center + 0.5) * ss)
                               : filter_box((x + xmin - center + 0.5) * ss);
            kd[x] = w;
            ww += w;
        }
        for (int x = 0; x < xmax; x++) {
            double k = ww != 0.0 ? kd[x] / ww : kd[x];
            c->k[(size_t)xx * c->ksize + x] =
                (int32_t)(k < 0 ? -0.5 + k * (1 << PIL_PRECISION_BITS)
                                : 0.5 + k * (1 << PIL_PRECISION_BITS));
        }
        c->bounds[xx * 2] = xmin;
        c->bounds[xx * 2 + 1] = xmax;
    }
    free(kd);
    return 0;
}

static void coeffs_free(coeffs_t *c)
{
    free(c->bounds);
    free(c->k);
}

static uint8_t clip8(int64_t v)
{
    v >>= PIL_PRECISION_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* out[C, h, ow] from in[C, h, w] along x, or (vertical) out[C, oh, w] from in[C, h, w]. */
static void resample_pass(const uint8_t *in, uint8_t *out, int channels, int h, int w, int osize,
                          bool vertical, const coeffs_t *c)
{
    int oh = vertical ? osize : h, ow = vertical ? w : osize;
    for (int ch = 0; ch < channels; ch++) {
        const uint8_t *src = in + (size_t)ch * h * w;
        uint8_t *dst = out + (size_t)ch * oh * ow;
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) {
                int o = vertical ? y : x, first = c->bounds[o * 2], n = c->bounds[o * 2 + 1];
                const int32_t *k = c->k + (size_t)o * c->ksize;
                int64_t ss = (int64_t)1 << (PIL_PRECISION_BITS - 1);
                if (vertical)
                    for (int i = 0; i < n; i++)
                        ss += (int64_t)src[(size_t)(first + i) * w + x] * k[i];
                else
                    for (int i = 0; i < n; i++)
                        ss += (int64_t)src[(size_t)y * w + first + i] * k[i];
                dst[(size_t)y * ow + x] = clip8(ss);
            }
    }
}

tdl_status_t train_image_resize(const train_image_t *in, int ow, int oh, bool bicubic,
                                train_image_t *out)
{
    int c = in->channels, w = in->width, h = in->height;
    if (ow < 1 || oh < 1 || ow > 16384 || oh > 16384)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "resize to %dx%d", ow, oh);
    uint8_t *mid = tdl_malloc((size_t)c * h * ow), *res = tdl_malloc((size_t)c * oh * ow);
    coeffs_t cx = {0}, cy = {0};
    tdl_status_t st = TDL_OK;
    if (!mid || !res || coeffs_make(w, ow, bicubic, &cx) || coeffs_make(h, oh, bicubic, &cy)) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "resize %dx%d to %dx%d: out of memory", w, h, ow, oh);
        goto out;
    }
    /* as PIL: an axis whose size stays is not resampled */
    if (ow != w)
        resample_pass(in->pixels, mid, c, h, w, ow, false, &cx);
    else
        memcpy(mid, in->pixels, (size_t)c * h * w);
    if (oh != h)
        resample_pass(mid, res, c, h, ow, oh, true, &cy);
    else
        memcpy(res, mid, (size_t)c * h * ow);
    *out = (train_image_t){.channels = c, .height = oh, .width = ow, .pixels = res};
    res = NULL;
out:
    coeffs_free(&cy);
    coeffs_free(&cx);
    free(res);
    free(mid);
    return st;
}

tdl_status_t train_image_center_crop(const train_image_t *in, int res, uint8_t *out)
{
    if (res < 1 || in->width < 1 || in->height < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "center crop of %dx%d to %d", in->width,
                               in->height, res);
    train_image_t cur = {.channels = in->channels, .height = in->height, .width = in->width};
    cur.pixels = tdl_malloc((size_t)cur.channels * cur.height * cur.width);
    if (!cur.pixels)
        return tdl_error_raise(TDL_ERR_NOMEM, "center crop: out of memory");
    memcpy(cur.pixels, in->pixels, (size_t)cur.channels * cur.height * cur.width);
    tdl_status_t st = TDL_OK;
    while (st == TDL_OK && TDL_MIN(cur.width, cur.height) >= 2 * res) {
        train_image_t half;
        st = train_image_resize(&cur, cur.width / 2, cur.height / 2, false, &half);
        if (st == TDL_OK) {
            train_image_free(&cur);
            cur = half;
        }
    }
    double scale = (double)res / TDL_MIN(cur.width, cur.height);
    /* Python's round() on x * scale: halves to even */
    int ow = (int)nearbyint(cur.width * scale), oh = (int)nearbyint(cur.height * scale);
    if (st == TDL_OK && (ow != cur.width || oh != cur.height)) {
        train_image_t sized;
        st = train_image_resize(&cur, ow, oh, true, &sized);
        if (st == TDL_OK) {
            train_image_free(&cur);
            cur = sized;
        }
    }
    if (st == TDL_OK) {
        int y0 = (cur.height - res) / 2, x0 = (cur.width - res) / 2;
        for (int c = 0; c < cur.channels; c++)
            for (int y = 0; y < res; y++)
                memcpy(out + ((size_t)c * res + y) * res,
                       cur.pixels + ((size_t)c * cur.height + y0 + y) * cur.width + x0,
                       (size_t)res);
    }
    train_image_free(&cur);
    return st;
}
