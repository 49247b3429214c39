/* Image grids as PNG: float images in [-1, 1] to an 8-bit canvas, encoded by libpng into
 * memory; the file writer stores those bytes atomically (temporary file, fsync, rename), so a
 * reader never sees half an image. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <png.h>

#include "serve/serve.h"

/* libpng refuses wider or taller images unless told otherwise; so do we. */
#define PNG_MAX_SIDE 1000000

typedef struct {
    unsigned char *data;
    size_t len, cap;
} png_membuf_t;

typedef struct {
    char msg[256];
} png_errbuf_t;

typedef struct {
    int n, channels, height, width, ncols, pad;
    int rows, cols;  /* grid cells */
    uint32_t gw, gh; /* canvas size in pixels */
} png_grid_t;

static tdl_status_t png_grid_plan(int n, int channels, int height, int width, int ncols, int pad,
                                  png_grid_t *grid_out)
{
    if (n <= 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "PNG grid: n = %d images; give at least 1", n);
    if (channels != 1 && channels != 3)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "PNG grid: %d channels; PNG images here have 1 (grayscale) or 3 "
                               "(RGB)",
                               channels);
    if (height <= 0 || width <= 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "PNG grid: images of %d x %d pixels; both sides must be >= 1",
                               height, width);
    if (ncols <= 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "PNG grid: ncols = %d; it must be >= 1", ncols);
    if (pad < 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "PNG grid: pad = %d; it must be >= 0", pad);
    png_grid_t g = {n, channels, height, width, ncols, pad, 0, 0, 0, 0};
    g.cols = TDL_MIN(ncols, n);
    g.rows = (n + ncols - 1) / ncols;
    int64_t gw = (int64_t)g.cols * width + (int64_t)(g.cols + 1) * pad;
    int64_t gh = (int64_t)g.rows * height + (int64_t)(g.rows + 1) * pad;
    if (gw > PNG_MAX_SIDE || gh > PNG_MAX_SIDE)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "PNG grid: %lld x %lld pixels (%d images of %d x %d in %d columns, "
                               "pad %d) is larger than the %d pixels PNG readers accept per side",
                               (long long)gw, (long long)gh, n, height, width, g.cols, pad,
                               PNG_MAX_SIDE);
    g.gw = (uint32_t)gw;
    g.gh = (uint32_t)gh;
    *grid_out = g;
    return TDL_OK;
}

static inline uint8_t png_quantize(float v)
{
    if (!(v > -1.0f)) /* also NaN */
        return 0;
    if (v >= 1.0f)
        return 255;
    return (uint8_t)roundf((v + 1.0f) * 127.5f);
}

/* The canvas, interleaved [gh, gw, channels], white where no image is. */
static void png_grid_fill(const png_grid_t *g, const float *images, uint8_t *canvas)
{
    const size_t c = (size_t)g->channels, stride = (size_t)g->gw * c;
    memset(canvas, 255, (size_t)g->gh * stride);
    for (int k = 0; k < g->n; k++) {
        const size_t y0 = (size_t)g->pad + (size_t)(k / g->cols) * (size_t)(g->height + g->pad);
        const size_t x0 = (size_t)g->pad + (size_t)(k % g->cols) * (size_t)(g->width + g->pad);
        const float *img = images + (size_t)k * c * (size_t)g->height * (size_t)g->width;
        for (size_t ch = 0; ch < c; ch++) {
            for (int y = 0; y < g->height; y++) {
                const float *src = img + (ch * (size_t)g->height + (size_t)y) * (size_t)g->width;
                uint8_t *dst = canvas + (y0 + (size_t)y) * stride + x0 * c + ch;
                for (int x = 0; x < g->width; x++)
                    dst[(size_t)x * c] = png_quantize(src[x]);
            }
        }
    }
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_errbuf_t *err = png_get_error_ptr(png);
    snprintf(err->msg, sizeof(err->msg), "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
}

static void png_membuf_write(png_structp png, png_bytep data, size_t len)
{
    png_membuf_t *mb = png_get_io_ptr(png);
    if (len > mb->cap - mb->len) {
        size_t cap = TDL_MAX(mb->cap * 2, mb->len + len);
        cap = TDL_MAX(cap, (size_t)4096);
        unsigned char *p = realloc(mb->data, cap);
        if (!p)
            png_error(png, "out of memory");
        mb->data = p;
        mb->cap = cap;
    }
    memcpy(mb->data + mb->len, data, len);
    mb->len += len;
}

static void png_membuf_flush(png_structp png)
{
}

/* libpng reports errors by longjmp: this function holds the setjmp, and nothing it changes
 * after it is read once the jump has come back. Returns 0 or -1 with err->msg set. */
static int png_encode_canvas(const png_grid_t *g, const uint8_t *canvas, png_membuf_t *mb,
                             png_errbuf_t *err)
{
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, err, png_on_error, png_on_warning);
    if (!png) {
        snprintf(err->msg, sizeof(err->msg), "cannot create a libpng writer");
        return -1;
    }
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        snprintf(err->msg, sizeof(err->msg), "cannot create a libpng info structure");
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return -1;
    }
    png_set_write_fn(png, mb, png_membuf_write, png_membuf_flush);
    png_set_IHDR(png, info, g->gw, g->gh, 8,
                 g->channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    const size_t stride = (size_t)g->gw * (size_t)g->channels;
    for (uint32_t y = 0; y < g->gh; y++)
        png_write_row(png, canvas + (size_t)y * stride);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return 0;
}

int serve_grid_cols(int n)
{
    int cols = 1;
    while (cols * cols < n)
        cols++;
    return cols;
}

tdl_status_t serve_png_encode(const float *images, int n, int channels, int height, int width,
                              int ncols, int pad, unsigned char **png_out, size_t *len_out)
{
    if (!png_out || !len_out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "serve_png_encode: NULL output argument");
    if (!images)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "PNG grid: images is NULL");
    png_grid_t g;
    tdl_status_t st = png_grid_plan(n, channels, height, width, ncols, pad, &g);
    if (st != TDL_OK)
        return st;
    size_t bytes = (size_t)g.gh * (size_t)g.gw * (size_t)g.channels;
    uint8_t *canvas = malloc(bytes);
    if (!canvas)
        return tdl_error_raise(TDL_ERR_NOMEM, "PNG grid: cannot allocate a %u x %u canvas", g.gw,
                               g.gh);
    png_grid_fill(&g, images, canvas);
    png_membuf_t mb = {0};
    png_errbuf_t err = {""};
    if (png_encode_canvas(&g, canvas, &mb, &err) != 0) {
        st = tdl_error_raise(strcmp(err.msg, "out of memory") ? TDL_ERR_INTERNAL : TDL_ERR_NOMEM,
                             "PNG grid: libpng failed to encode %u x %u pixels: %s", g.gw, g.gh,
                             err.msg);
        goto out;
    }
    *png_out = mb.data;
    *len_out = mb.len;
    mb.data = NULL;
out:
    free(mb.data);
    free(canvas);
    return st;
}

/* ---- reading a grid back, to cut it into its images ---------------------------------------- */

typedef struct {
    const unsigned char *data;
    size_t len, pos;
} png_membuf_in_t;

/* What png_decode_canvas found: the size and the pixels, interleaved [height, width, channels]. */
typedef struct {
    uint32_t width, height;
    int channels;
    uint8_t *canvas; /* malloc'ed; NULL until the header has been judged */
} png_decoded_t;

static void png_membuf_read(png_structp png, png_bytep out, size_t len)
{
    png_membuf_in_t *in = png_get_io_ptr(png);
    if (len > in->len - in->pos)
        png_error(png, "the PNG ends early");
    memcpy(out, in->data + in->pos, len);
    in->pos += len;
}

/* Decodes an 8-bit grayscale or RGB PNG, not interlaced (what serve_png_encode writes), of
 * exactly want_w x want_h pixels. As png_encode_canvas, this function holds the setjmp, and
 * what it changes after it lives in *out. Returns 0 or -1 with err->msg set. */
static int png_decode_canvas(const unsigned char *data, size_t len, uint32_t want_w,
                             uint32_t want_h, png_decoded_t *out, png_errbuf_t *err)
{
    png_membuf_in_t in = {data, len, 0};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, err, png_on_error, png_on_warning);
    if (!png) {
        snprintf(err->msg, sizeof(err->msg), "cannot create a libpng reader");
        return -1;
    }
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        snprintf(err->msg, sizeof(err->msg), "cannot create a libpng info structure");
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(out->canvas);
        out->canvas = NULL;
        return -1;
    }
    png_set_read_fn(png, &in, png_membuf_read);
    png_read_info(png, info);
    int color = png_get_color_type(png, info);
    out->width = png_get_image_width(png, info);
    out->height = png_get_image_height(png, info);
    out->channels = color == PNG_COLOR_TYPE_RGB ? 3 : 1;
    if (png_get_bit_depth(png, info) != 8 ||
        (color != PNG_COLOR_TYPE_GRAY && color != PNG_COLOR_TYPE_RGB) ||
        png_get_interlace_type(png, info) != PNG_INTERLACE_NONE)
        png_error(png, "not an 8-bit grayscale or RGB PNG without interlacing");
    if (out->width != want_w || out->height != want_h)
        png_error(png, "another size than the grid's");
    const size_t stride = (size_t)out->width * (size_t)out->channels;
    if (!(out->canvas = malloc((size_t)out->height * stride)))
        png_error(png, "out of memory");
    for (uint32_t y = 0; y < out->height; y++)
        png_read_row(png, out->canvas + (size_t)y * stride, NULL);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    return 0;
}

tdl_status_t serve_png_split_grid(const unsigned char *png, size_t len, int n, int height,
                                  int width, int ncols, int pad, unsigned char **pngs_out,
                                  size_t *lens_out)
{
    if (!png || !pngs_out || !lens_out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "serve_png_split_grid: NULL argument");
    png_grid_t g, tile;
    /* the channels are the PNG's: planned as 1, the sizes do not depend on them */
    tdl_status_t st = png_grid_plan(n, 1, height, width, ncols, pad, &g);
    if (st != TDL_OK)
        return st;
    png_decoded_t d = {0};
    png_errbuf_t err = {""};
    if (png_decode_canvas(png, len, g.gw, g.gh, &d, &err) != 0)
        return tdl_error_raise(strcmp(err.msg, "out of memory") ? TDL_ERR_INVALID_ARG
                                                                : TDL_ERR_NOMEM,
                               "PNG grid: cannot read %zu bytes as a grid of %d images of %d x %d "
                               "(%u x %u pixels): %s",
                               len, n, height, width, g.gw, g.gh, err.msg);
    if ((st = png_grid_plan(1, d.channels, height, width, 1, 0, &tile)) != TDL_OK)
        goto out;
    const size_t c = (size_t)d.channels, row = (size_t)width * c, stride = (size_t)g.gw * c;
    uint8_t *pixels = malloc((size_t)height * row);
    if (!pixels) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "PNG grid: out of memory for a tile");
        goto out;
    }
    int k = 0;
    for (; k < n; k++) {
        /* the cell png_grid_fill put image k in */
        const size_t y0 = (size_t)g.pad + (size_t)(k / g.cols) * (size_t)(g.height + g.pad);
        const size_t x0 = (size_t)g.pad + (size_t)(k % g.cols) * (size_t)(g.width + g.pad);
        for (int y = 0; y < height; y++)
            memcpy(pixels + (size_t)y * row, d.canvas + (y0 + (size_t)y) * stride + x0 * c, row);
        png_membuf_t mb = {0};
        if (png_encode_canvas(&tile, pixels, &mb, &err) != 0) {
            free(mb.data);
            st =
                tdl_error_raise(strcmp(err.msg, "out of memory") ? TDL_ERR_INTERNAL : TDL_ERR_NOMEM,
                                "PNG grid: libpng failed to encode image %d: %s", k, err.msg);
            break;
        }
        pngs_out[k] = mb.data;
        lens_out[k] = mb.len;
    }
    free(pixels);
    if (st != TDL_OK)
        while (k-- > 0) {
            free(pngs_out[k]);
            pngs_out[k] = NULL;
        }
out:
    free(d.canvas);
    return st;
}

tdl_status_t serve_png_write_grid(const char *path, const float *images, int n, int channels,
                                  int height, int width, int ncols, int pad)
{
    if (!path || !*path)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "PNG grid: no output path given");
    char tmp[PATH_MAX];
    int len = snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if (len < 0 || (size_t)len >= sizeof(tmp))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "PNG grid: output path too long: %s", path);
    unsigned char *png;
    size_t png_len;
    tdl_status_t st =
        serve_png_encode(images, n, channels, height, width, ncols, pad, &png, &png_len);
    if (st != TDL_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", tdl_error_get());
        return tdl_error_raise(st, "cannot write %s: %s", path, why);
    }

    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = tdl_error_raise(TDL_ERR_IO,
                             "cannot write %s: cannot create %s: %s: check that the directory "
                             "exists and is writable",
                             path, tmp, strerror(errno));
        goto err_png;
    }
    for (size_t done = 0; done < png_len;) {
        ssize_t w = write(fd, png + done, png_len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            st = tdl_error_raise(TDL_ERR_IO, "cannot write %s: writing %s failed: %s", path, tmp,
                                 strerror(errno));
            goto err_tmp;
        }
        done += (size_t)w;
    }
    st = tdl_file_commit(fd, tmp, path);
    fd = -1;
    if (st != TDL_OK)
        goto err_tmp;
    free(png);
    return TDL_OK;

err_tmp:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
err_png:
    free(png);
    return st;
}
