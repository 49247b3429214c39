/* PNG grids: written files read back with libpng's png_image API, checked against pixels
 * computed by hand (placement, white border, rounding, clamping); the in-memory encoder gives
 * the file's bytes; bad arguments and unwritable places fail naming the problem and leave no
 * file behind. */
#include "config.h"

#include <ftw.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "serve/serve.h"
#include "tap.h"

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char buf[4][256];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof(buf[0]), "%s/%s", tmpdir, name);
    return p;
}

static bool exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static bool tmp_exists(const char *path)
{
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    return exists(tmp);
}

/* The whole file, malloc'd. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size + 1);
    *len = fread(buf, 1, (size_t)size, f);
    fclose(f);
    return buf;
}

/* Decodes a PNG from memory into 8-bit samples of `format`; NULL when it is not a PNG. */
static unsigned char *decode(const unsigned char *png, size_t len, png_uint_32 format,
                             png_uint_32 *w, png_uint_32 *h, png_uint_32 *file_format)
{
    png_image im;
    memset(&im, 0, sizeof(im));
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, png, len))
        return NULL;
    *w = im.width;
    *h = im.height;
    *file_format = im.format;
    im.format = format;
    unsigned char *px = malloc(PNG_IMAGE_SIZE(im));
    if (!png_image_finish_read(&im, NULL, px, 0, NULL)) {
        free(px);
        png_image_free(&im);
        return NULL;
    }
    return px;
}

/* 5 grayscale images of 2 x 3 in 2 columns with a 1-pixel border: a canvas of
 * width 2 * 3 + 3 * 1 = 9 and height 3 * 2 + 4 * 1 = 10; the 6th cell stays white. */
enum { N = 5, H = 2, W = 3, NCOLS = 2, PAD = 1, GW = 9, GH = 10 };

static float gray[N][H][W];

/* What image k >= 1 holds at (y, x): p / 127.5 - 1 for p = 40 k + 3 y + x, which encodes as p. */
static int gray_byte(int k, int y, int x)
{
    return 40 * k + 3 * y + x;
}

static void make_gray(void)
{
    /* image 0: -1 -> 0, 0 -> 127.5 -> 128, 1 -> 255; -0.5 -> 63.75 -> 64, 0.5 -> 191.25 -> 191,
     * 2 clamps to 255 */
    const float first[H][W] = {{-1.0f, 0.0f, 1.0f}, {-0.5f, 0.5f, 2.0f}};
    memcpy(gray[0], first, sizeof(first));
    for (int k = 1; k < N; k++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                gray[k][y][x] = (float)gray_byte(k, y, x) / 127.5f - 1.0f;
    /* image 1: -3 clamps to 0, NaN counts as -1 (0), 0.25 -> 159.375 -> 159 */
    gray[1][0][0] = -3.0f;
    gray[1][0][1] = NAN;
    gray[1][0][2] = 0.25f;
}

static void test_gray(void)
{
    make_gray();
    const char *path = tmp_path("gray.png");
    tdl_status_t st = serve_png_write_grid(path, &gray[0][0][0], N, 1, H, W, NCOLS, PAD);
    if (!ok(st == TDL_OK, "write a 5-image grayscale grid")) {
        diag("%s", tdl_error_get());
        return;
    }
    ok(!tmp_exists(path), "no .tmp file left after success");
    size_t flen = 0;
    unsigned char *file = slurp(path, &flen);
    png_uint_32 w = 0, h = 0, fmt = 0;
    unsigned char *px = file ? decode(file, flen, PNG_FORMAT_GRAY, &w, &h, &fmt) : NULL;
    if (!ok(px != NULL, "libpng reads it back")) {
        free(file);
        return;
    }
    ok(w == GW && h == GH, "9 x 10 pixels: 2 columns of 3 + 3 borders, 3 rows of 2 + 4 borders");
    ok(!(fmt & PNG_FORMAT_FLAG_COLOR) && !(fmt & PNG_FORMAT_FLAG_ALPHA), "a grayscale PNG");

#define AT(y, x) px[(y)*GW + (x)]
    ok(AT(1, 1) == 0 && AT(1, 2) == 128 && AT(1, 3) == 255 && AT(2, 1) == 64 && AT(2, 2) == 191 &&
           AT(2, 3) == 255,
       "image 0 at rows 1-2, columns 1-3: 0 128 255 / 64 191 255");
    ok(AT(1, 5) == 0 && AT(1, 6) == 0 && AT(1, 7) == 159 && AT(2, 5) == 43 && AT(2, 7) == 45,
       "image 1 at rows 1-2, columns 5-7: -3 -> 0, NaN -> 0, 0.25 -> 159, then 43 .. 45");
    ok(AT(4, 1) == 80 && AT(5, 3) == 85, "image 2 at rows 4-5, columns 1-3: 80 .. 85");
    ok(AT(4, 5) == 120 && AT(5, 7) == 125, "image 3 at rows 4-5, columns 5-7: 120 .. 125");
    ok(AT(7, 1) == 160 && AT(8, 3) == 165, "image 4 at rows 7-8, columns 1-3: 160 .. 165");
    int white = 1;
    for (int y = 7; y <= 8; y++)
        for (int x = 5; x <= 7; x++)
            white &= AT(y, x) == 255;
    ok(white, "the empty 6th cell (rows 7-8, columns 5-7) is white");
    white = 1;
    for (int x = 0; x < GW; x++)
        white &= AT(0, x) == 255 && AT(3, x) == 255 && AT(6, x) == 255 && AT(9, x) == 255;
    for (int y = 0; y < GH; y++)
        white &= AT(y, 0) == 255 && AT(y, 4) == 255 && AT(y, 8) == 255;
    ok(white, "border rows 0, 3, 6, 9 and columns 0, 4, 8 are white");
    int bad = 0;
    for (int k = 2; k < N; k++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                bad += AT(1 + (k / 2) * 3 + y, 1 + (k % 2) * 4 + x) != gray_byte(k, y, x);
    is_int(bad, 0, "images 2-4: every pixel p / 127.5 - 1 comes back as p");
#undef AT
    free(px);

    unsigned char *mem = NULL;
    size_t mlen = 0;
    st = serve_png_encode(&gray[0][0][0], N, 1, H, W, NCOLS, PAD, &mem, &mlen);
    ok(st == TDL_OK && mlen == flen && memcmp(mem, file, flen) == 0,
       "the in-memory encoder gives the file's %zu bytes", flen);
    unsigned char *mem2 = NULL;
    size_t mlen2 = 0;
    serve_png_encode(&gray[0][0][0], N, 1, H, W, NCOLS, PAD, &mem2, &mlen2);
    ok(mem2 && mlen2 == mlen && memcmp(mem, mem2, mlen) == 0, "and the same bytes every time");
    free(mem2);
    free(mem);
    free(file);

    /* rewriting replaces the file whole, also over a stale .tmp of a crashed writer */
    char stale[300];
    snprintf(stale, sizeof(stale), "%s.tmp", path);
    FILE *f = fopen(stale, "w");
    fputs("stale", f);
    fclose(f);
    st = serve_png_write_grid(path, &gray[0][0][0], 1, 1, H, W, 1, 0);
    file = slurp(path, &flen);
    px = file ? decode(file, flen, PNG_FORMAT_GRAY, &w, &h, &fmt) : NULL;
    ok(st == TDL_OK && px && w == W && h == H && px[0] == 0 && px[5] == 255 && !exists(stale),
       "a second write replaces the file (one 3 x 2 image, pad 0) and the stale .tmp");
    free(px);
    free(file);
}

static void test_rgb(void)
{
    /* 2 RGB images of 2 x 2 with ncols 3: min(3, 2) = 2 columns, 1 row; pad 2 gives
     * width 2 * 2 + 3 * 2 = 10 and height 2 + 2 * 2 = 6 */
    float rgb[2][3][2][2];
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 2; y++)
                for (int x = 0; x < 2; x++)
                    rgb[k][c][y][x] = (float)(100 * k + 30 * c + 2 * y + x) / 127.5f - 1.0f;
    const char *path = tmp_path("rgb.png");
    tdl_status_t st = serve_png_write_grid(path, &rgb[0][0][0][0], 2, 3, 2, 2, 3, 2);
    size_t flen = 0;
    unsigned char *file = st == TDL_OK ? slurp(path, &flen) : NULL;
    png_uint_32 w = 0, h = 0, fmt = 0;
    unsigned char *px = file ? decode(file, flen, PNG_FORMAT_RGB, &w, &h, &fmt) : NULL;
    if (!ok(px != NULL, "an RGB grid is written and read back")) {
        diag("%s", tdl_error_get());
        free(file);
        return;
    }
    ok(w == 10 && h == 6 && (fmt & PNG_FORMAT_FLAG_COLOR) && !(fmt & PNG_FORMAT_FLAG_ALPHA),
       "10 x 6 RGB without alpha (2 columns, not 3, for 2 images)");
#define RGB(y, x, c) px[((y)*10 + (x)) * 3 + (c)]
    ok(RGB(2, 2, 0) == 0 && RGB(2, 2, 1) == 30 && RGB(2, 2, 2) == 60,
       "image 0 (0,0) at (2,2): 0 30 60");
    ok(RGB(3, 3, 0) == 3 && RGB(3, 3, 1) == 33 && RGB(3, 3, 2) == 63,
       "image 0 (1,1) at (3,3): 3 33 63");
    ok(RGB(2, 6, 0) == 100 && RGB(2, 6, 1) == 130 && RGB(3, 7, 2) == 163,
       "image 1 at (2,6) .. (3,7): 100 130 .. 163");
    ok(RGB(1, 2, 0) == 255 && RGB(2, 4, 1) == 255 && RGB(2, 5, 2) == 255 && RGB(4, 7, 0) == 255 &&
           RGB(2, 8, 0) == 255 && RGB(0, 0, 2) == 255,
       "the border around and between the tiles is white");
#undef RGB
    free(px);
    free(file);
}

/* A refused write: the status, the message holds both needles, and nothing is left at path. */
static void refused(tdl_status_t want, const char *path, const float *images, int n, int c, int h,
                    int w, int ncols, int pad, const char *needle, const char *what)
{
    tdl_error_clear();
    tdl_status_t st = serve_png_write_grid(path, images, n, c, h, w, ncols, pad);
    const char *msg = tdl_error_get();
    bool named = strstr(msg, path) && strstr(msg, needle);
    if (!ok(st == want && named && !tmp_exists(path), "%s: %s", what, msg))
        diag("status %s, want %s", tdl_status_str(st), tdl_status_str(want));
}

static void test_errors(void)
{
    make_gray();
    const float *g = &gray[0][0][0];
    const char *path = tmp_path("bad.png");
    refused(TDL_ERR_INVALID_ARG, path, g, 0, 1, H, W, 2, 1, "n = 0", "n = 0 refused");
    refused(TDL_ERR_INVALID_ARG, path, g, -3, 1, H, W, 2, 1, "n = -3", "n = -3 refused");
    refused(TDL_ERR_INVALID_ARG, path, g, N, 1, H, W, 0, 1, "ncols = 0", "ncols = 0 refused");
    refused(TDL_ERR_INVALID_ARG, path, g, N, 1, H, W, -1, 1, "ncols = -1", "ncols = -1 refused");
    refused(TDL_ERR_INVALID_ARG, path, g, N, 2, H, W, 2, 1, "2 channels", "2 channels refused");
    refused(TDL_ERR_INVALID_ARG, path, g, N, 1, 0, W, 2, 1, "0 x 3", "height 0 refused");
    refused(TDL_ERR_INVALID_ARG, path, g, N, 1, H, W, 2, -1, "pad = -1", "pad = -1 refused");
    refused(TDL_ERR_INVALID_ARG, path, NULL, N, 1, H, W, 2, 1, "NULL", "NULL images refused");
    refused(TDL_ERR_INVALID_ARG, path, g, 1, 1, 1, 2000000, 1, 0, "1000000",
            "a 2000000-pixel-wide grid refused");
    ok(!exists(path), "none of them created %s", path);

    refused(TDL_ERR_IO, "/nonexistent-tidal-dir/grid.png", g, N, 1, H, W, 2, 1,
            "exists and is writable", "a missing directory");
    const char *file = tmp_path("plain-file");
    FILE *f = fopen(file, "w");
    fclose(f);
    char below[300];
    snprintf(below, sizeof(below), "%s/grid.png", file);
    refused(TDL_ERR_IO, below, g, N, 1, H, W, 2, 1, "Not a directory",
            "a 'directory' that is a plain file");
    const char *ro = tmp_path("read-only");
    mkdir(ro, 0555);
    if (geteuid() != 0) {
        char inside[300];
        snprintf(inside, sizeof(inside), "%s/grid.png", ro);
        refused(TDL_ERR_IO, inside, g, N, 1, H, W, 2, 1, "Permission denied",
                "a read-only directory");
    } else {
        ok(1, "a read-only directory # SKIP root writes anywhere");
    }
    /* the rename fails: the temporary file must go */
    const char *dir = tmp_path("a-directory");
    mkdir(dir, 0755);
    refused(TDL_ERR_IO, dir, g, N, 1, H, W, 2, 1, "renaming", "a path that is a directory");
    struct stat sb;
    ok(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), "the directory is still there");

    unsigned char *png = (unsigned char *)"untouched";
    size_t len = 7;
    ok(serve_png_encode(g, 0, 1, H, W, 2, 1, &png, &len) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "n = 0") && len == 7 && !strcmp((const char *)png, "untouched"),
       "the encoder refuses n = 0 and leaves its outputs alone");
    ok(serve_png_encode(g, N, 1, H, W, 2, 1, NULL, &len) == TDL_ERR_INVALID_ARG,
       "the encoder refuses a NULL output");
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

int main(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/tidal-test-png-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot create a temporary directory\n");
        return 1;
    }
    test_gray();
    test_rgb();
    test_errors();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return done_testing();
}
