/* The pieces of POST /v1/images/generations that need no server: base64 against RFC 4648's test
 * vectors; the prompt matcher (names, case, space, "class N", numbers out of range, no names);
 * the class_names attribute, written by train_weights_save and read back, and forged ones (not
 * JSON, not an array, the wrong count, bad names, too long, another type) refused naming the
 * file and the attribute; a PNG grid cut into its tiles, each the bytes of that image encoded
 * alone; OpenAI's error object. */
#include "config.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt/ckpt.h"
#include "core/core.h"
#include "dit/dit.h"
#include "serve/serve.h"
#include "serve/serve_internal.h"
#include "tap.h"
#include "train/train.h"
#include "train/train_internal.h"

static char tmpdir[64];

static void test_base64(void)
{
    /* RFC 4648, section 10, and bytes past 0x7f */
    static const struct {
        const char *in;
        size_t len;
        const char *out;
    } v[] = {{"", 0, ""},
             {"f", 1, "Zg=="},
             {"fo", 2, "Zm8="},
             {"foo", 3, "Zm9v"},
             {"foob", 4, "Zm9vYg=="},
             {"fooba", 5, "Zm9vYmE="},
             {"foobar", 6, "Zm9vYmFy"},
             {"\xff\xfe\x00", 3, "//4A"},
             {"\x00", 1, "AA=="},
             {"\xfb\xff", 2, "+/8="}};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(v); i++) {
        char out[16];
        memset(out, '#', sizeof(out));
        size_t n = serve_base64_encode((const unsigned char *)v[i].in, v[i].len, out);
        ok(n == strlen(v[i].out) && strcmp(out, v[i].out) == 0, "base64 of %zu bytes: %s (%s)",
           v[i].len, v[i].out, out);
    }
}

/* prompt -> label, or -1 for an error whose message holds `needle` (may be NULL) */
static void prompt_is(const char *const *names, const char *prompt, int want, const char *needle)
{
    char why[1024] = "";
    int label = -7;
    tdl_status_t st = serve_openai_label(prompt, names, 10, &label, why, sizeof(why));
    if (want >= 0)
        ok(st == TDL_OK && label == want, "prompt '%s' -> class %d (got %d: %s)", prompt, want,
           label, why);
    else
        ok(st == TDL_ERR_INVALID_ARG && label == -7 && (!needle || strstr(why, needle)),
           "prompt '%.40s' refused, saying '%s' (%s)", prompt, needle ? needle : "", why);
}

static void test_prompts(void)
{
    const char *const *fm = train_fmnist_class_names;
    prompt_is(fm, "Sneaker", 7, NULL);
    prompt_is(fm, "sneaker", 7, NULL);
    prompt_is(fm, "  SNEAKER \n\t", 7, NULL);
    prompt_is(fm, "T-shirt/top", 0, NULL);
    prompt_is(fm, "ankle boot", 9, NULL);
    prompt_is(fm, "Ankle Boot ", 9, NULL);
    prompt_is(fm, "class 7", 7, NULL);
    prompt_is(fm, "Class 7", 7, NULL);
    prompt_is(fm, "CLASS  0", 0, NULL);
    prompt_is(fm, "class7", 7, NULL);
    prompt_is(fm, "7", 7, NULL);
    prompt_is(fm, " 09 ", 9, NULL);
    prompt_is(fm, "ankle  boot", -1, "not a class of this model");
    prompt_is(fm, "sneakers", -1, "not a class of this model");
    prompt_is(fm, "dog", -1,
              "'T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', "
              "'Sneaker', 'Bag', 'Ankle boot'");
    prompt_is(fm, "dog", -1, "'class N' for N from 0 to 9");
    prompt_is(fm, "class 10", -1, "out of range");
    prompt_is(fm, "10", -1, "out of range");
    prompt_is(fm, "99999999999999999999999", -1, "out of range");
    prompt_is(fm, "class -1", -1, "not a class");
    prompt_is(fm, "-1", -1, "not a class");
    prompt_is(fm, "class", -1, "not a class");
    prompt_is(fm, "", -1, "'prompt' is empty");
    prompt_is(fm, " \t ", -1, "'prompt' is empty");
    prompt_is(fm, "Sneak\xc3\xa9r", -1, "'Sneak??r'");
    prompt_is(NULL, "sneaker", -1, "no class names, so give 'class N' or N for N from 0 to 9");
    prompt_is(NULL, "class 3", 3, NULL);
    prompt_is(NULL, "3", 3, NULL);
    /* a long prompt is cut in the message; a small buffer is not overrun */
    char big[10000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    prompt_is(fm, big, -1, "not a class");
    char small[24];
    memset(small, 'Z', sizeof(small));
    int label = -7;
    tdl_status_t st = serve_openai_label("dog", fm, 10, &label, small, 16);
    ok(st == TDL_ERR_INVALID_ARG && strlen(small) == 15 && small[16] == 'Z',
       "a message into 16 bytes is cut at 15 (%s)", small);
    /* 200 long names: the list is cut after whole names, and stays valid UTF-8 */
    static char store[200][40];
    const char *many[200];
    for (int i = 0; i < 200; i++) {
        snprintf(store[i], sizeof(store[i]), "n\xc3\xa4me number %d of many", i);
        many[i] = store[i];
    }
    char why[1024];
    st = serve_openai_label("nope", many, 200, &label, why, sizeof(why));
    json_t *js = json_string(why);
    ok(st == TDL_ERR_INVALID_ARG && strstr(why, ", ...") && js,
       "200 names: the message lists some, then '...', and is UTF-8 (%zu bytes)", strlen(why));
    json_decref(js);
    st = serve_openai_label("n\xc3\xa4me number 199 of many", many, 200, &label, why, sizeof(why));
    ok(st == TDL_OK && label == 199, "... and the last of 200 names matches (%d)", label);
}

/* parse -> TDL_ERR_CORRUPT with a message naming the file, the attribute and `needle` */
static void forged(const char *json, int num_classes, const char *needle, const char *what)
{
    char **names = (char **)&names; /* must stay as it is */
    char **before = names;
    tdl_status_t st = train_class_names_parse("w.h5", json, num_classes, &names);
    const char *msg = tdl_error_get();
    ok(st == TDL_ERR_CORRUPT && names == before && strstr(msg, "w.h5") &&
           strstr(msg, "class_names") && strstr(msg, needle),
       "forged class_names (%s) refused: %s", what, msg);
}

static void test_names_parse(void)
{
    char *json = train_class_names_json(train_fmnist_class_names, 10);
    is_str(json,
           "[\"T-shirt/top\",\"Trouser\",\"Pullover\",\"Dress\",\"Coat\",\"Sandal\",\"Shirt\","
           "\"Sneaker\",\"Bag\",\"Ankle boot\"]",
           "Fashion-MNIST's names as the attribute's JSON");
    char **names = NULL;
    tdl_status_t st = train_class_names_parse("w.h5", json, 10, &names);
    bool same = st == TDL_OK && names;
    for (int i = 0; same && i < 10; i++)
        same = strcmp(names[i], train_fmnist_class_names[i]) == 0;
    ok(same, "... and parsed back, the same ten names");
    free(names);
    free(json);
    names = NULL;
    st = train_class_names_parse("w.h5", "[\"Pull\\u00f6ver\", \"caf\xc3\xa9\", \"\xe6\x97\xa5\"]",
                                 3, &names);
    ok(st == TDL_OK && names && !strcmp(names[0], "Pull\xc3\xb6ver") &&
           !strcmp(names[2], "\xe6\x97\xa5"),
       "non-ASCII names (escaped and raw UTF-8) are taken");
    free(names);

    forged("not json", 3, "is not JSON", "not JSON");
    forged("", 3, "is not JSON", "empty");
    forged("{\"a\": 1}", 3, "a JSON array of 3 strings", "an object");
    forged("\"Bag\"", 1, "a JSON array of 1 strings", "a string");
    forged("[\"a\", \"b\"]", 3, "not an array of 2", "too few names");
    forged("[\"a\", \"b\", \"c\", \"d\"]", 3, "not an array of 4", "too many names");
    forged("[\"a\", 7, \"c\"]", 3, "class 1 is not a string", "a number among them");
    forged("[\"a\", null, \"c\"]", 3, "class 1 is not a string", "null among them");
    forged("[\"a\", \"\", \"c\"]", 3, "class 1 is empty", "an empty name");
    char long_name[200];
    snprintf(long_name, sizeof(long_name), "[\"a\", \"%065d\", \"c\"]", 0);
    forged(long_name, 3, "longer than 64 bytes", "a 65-byte name");
    forged("[\"a\", \"b\\u0001\", \"c\"]", 3, "control character", "U+0001");
    forged("[\"a\", \"b\\u007f\", \"c\"]", 3, "control character", "DEL");
    forged("[\"a\", \"b\\u0085\", \"c\"]", 3, "control character", "U+0085 (C1)");
    forged("[\"a\", \"b\\nc\", \"c\"]", 3, "control character", "a line feed");
    forged("[\"a\", \" b\", \"c\"]", 3, "space", "a leading space");
    forged("[\"a\", \"b \", \"c\"]", 3, "space", "a trailing space");
    forged("[\"a\", \"7\", \"c\"]", 3, "a number or 'class N'", "a number as a name");
    forged("[\"a\", \"Class 2\", \"c\"]", 3, "a number or 'class N'", "'Class 2' as a name");
    forged("[\"Bag\", \"b\", \"bag\"]", 3, "names two classes 'bag'", "a name twice (case)");
    forged("[\"a\", \"b\\u0000c\", \"c\"]", 3, "is not JSON", "a NUL (jansson refuses it)");
    forged("[\"a\", \"\xff\xfe\", \"c\"]", 3, "is not JSON", "invalid UTF-8");
    forged("[\"a\", \"\\ud800\", \"c\"]", 3, "is not JSON", "a lone surrogate");
    /* longer than any 2 valid names can be: refused before it is parsed */
    size_t n = 2 + 2 * (6 * TRAIN_CLASS_NAME_MAX + 3) + 1;
    char *huge = malloc(n + 1);
    memset(huge, ' ', n);
    huge[0] = '[', huge[n - 1] = ']', huge[n] = '\0';
    forged(huge, 2, "bytes, longer than 2 names", "a huge text");
    free(huge);
}

/* A tiny model's weights file with the configuration and `extra` as attributes. */
static tdl_status_t write_with(const char *path, const dit_model_t *m, const ckpt_attr_t *extra)
{
    ckpt_tensor_t *t = train_tensors_of(m, m->params);
    ckpt_attr_t attrs[TRAIN_CONFIG_ATTRS + 1];
    int na = train_config_attrs(&m->config, attrs);
    if (extra)
        attrs[na++] = *extra;
    tdl_status_t st = ckpt_weights_write(path, t, NULL, m->ninfos, attrs, na);
    free(t);
    return st;
}

static void test_names_file(void)
{
    dit_config_t cfg;
    dit_model_t *m = NULL;
    if (dit_config_named("tiny", &cfg) != TDL_OK || dit_model_create(&cfg, 1, 32, &m) != TDL_OK) {
        ok(0, "a tiny model: %s", tdl_error_get());
        return;
    }
    dit_model_init_weights(m, 1);
    char path[128], **names = (char **)&names;
    snprintf(path, sizeof(path), "%s/named.h5", tmpdir);
    ok(cfg.num_classes == 10 &&
           train_weights_save(path, m, NULL, 3, train_fmnist_class_names) == TDL_OK,
       "train_weights_save with Fashion-MNIST's names");
    char *raw = NULL;
    ok(ckpt_attr_read_string(path, "class_names", &raw) == TDL_OK && raw &&
           strncmp(raw, "[\"T-shirt/top\",\"Trouser\",", 25) == 0,
       "... a string attribute class_names holding the JSON array (%.40s...)", raw);
    free(raw);
    tdl_status_t st = train_weights_class_names(path, 10, &names);
    ok(st == TDL_OK && names && !strcmp(names[7], "Sneaker") && !strcmp(names[9], "Ankle boot"),
       "... read back: class 7 Sneaker, class 9 Ankle boot");
    free(names);
    dit_config_t back;
    ok(train_weights_config(path, &back) == TDL_OK, "... and the file loads");

    snprintf(path, sizeof(path), "%s/plain.h5", tmpdir);
    names = (char **)&names;
    ok(train_weights_save(path, m, NULL, 3, NULL) == TDL_OK &&
           train_weights_class_names(path, 10, &names) == TDL_OK && names == NULL &&
           train_weights_config(path, &back) == TDL_OK,
       "a file without class names (older files, synthetic data) loads, with no names");

    static const struct {
        const char *what;
        ckpt_attr_t attr;
        const char *needle;
    } bad[] = {
        {"nine names",
         {.key = "class_names", .type = CKPT_ATTR_STRING, .s = "[\"a\",\"b\"]"},
         "a JSON array of 10 strings"},
        {"not JSON",
         {.key = "class_names", .type = CKPT_ATTR_STRING, .s = "sneaker"},
         "is not JSON"},
        {"an integer", {.key = "class_names", .type = CKPT_ATTR_INT, .i = 7}, "expected a string"},
        {"a real", {.key = "class_names", .type = CKPT_ATTR_DOUBLE, .d = 1.5}, "expected a string"},
    };
    for (size_t i = 0; i < TDL_ARRAY_SIZE(bad); i++) {
        snprintf(path, sizeof(path), "%s/forged%zu.h5", tmpdir, i);
        if (write_with(path, m, &bad[i].attr) != TDL_OK) {
            ok(0, "write a file with class_names as %s: %s", bad[i].what, tdl_error_get());
            continue;
        }
        dit_model_t *loaded = NULL;
        st = train_weights_config(path, &back);
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", tdl_error_get());
        ok(st == TDL_ERR_CORRUPT && strstr(msg, path) && strstr(msg, "class_names") &&
               strstr(msg, bad[i].needle),
           "class_names as %s: the file is refused at load naming it and the attribute (%s)",
           bad[i].what, msg);
        ok(train_weights_load(path, "model", 1, 0, &loaded) == TDL_ERR_CORRUPT && !loaded,
           "... by train_weights_load too");
    }
    dit_model_free(m);
}

static void test_png_split(void)
{
    for (int channels = 1; channels <= 3; channels += 2) {
        const int n = 5, side = 8, cols = 3, pad = 2;
        size_t per = (size_t)channels * side * side;
        float *img = malloc((size_t)n * per * sizeof(float));
        for (size_t i = 0; i < (size_t)n * per; i++)
            img[i] = (float)((i * 37 + 11) % 255) / 127.0f - 1.0f;
        unsigned char *grid = NULL, *pngs[5] = {NULL};
        size_t glen = 0, lens[5] = {0};
        tdl_status_t st = serve_png_encode(img, n, channels, side, side, cols, pad, &grid, &glen);
        st = st ? st : serve_png_split_grid(grid, glen, n, side, side, cols, pad, pngs, lens);
        ok(st == TDL_OK, "a grid of 5 images of 8x8, %d channel(s), cut into 5 (%s)", channels,
           st ? tdl_error_get() : "ok");
        for (int k = 0; st == TDL_OK && k < n; k++) {
            unsigned char *alone = NULL;
            size_t alen = 0;
            serve_png_encode(img + (size_t)k * per, 1, channels, side, side, 1, 0, &alone, &alen);
            ok(alone && lens[k] == alen && memcmp(pngs[k], alone, alen) == 0,
               "... tile %d is byte for byte image %d encoded alone (%zu bytes)", k, k, alen);
            free(alone);
            free(pngs[k]);
        }
        unsigned char *none[5] = {NULL};
        ok(serve_png_split_grid(grid, glen, 4, side, side, 2, pad, none, lens) ==
                   TDL_ERR_INVALID_ARG &&
               !none[0],
           "... read as a grid of another size: refused, nothing returned (%s)", tdl_error_get());
        ok(serve_png_split_grid(grid, glen / 2, n, side, side, cols, pad, none, lens) ==
                   TDL_ERR_INVALID_ARG &&
               !none[0],
           "... cut in half: refused (%s)", tdl_error_get());
        grid[glen / 2] ^= 0x55;
        ok(serve_png_split_grid(grid, glen, n, side, side, cols, pad, none, lens) ==
               TDL_ERR_INVALID_ARG,
           "... a byte flipped: refused (%s)", tdl_error_get());
        ok(serve_png_split_grid((const unsigned char *)"not a png", 9, n, side, side, cols, pad,
                                none, lens) == TDL_ERR_INVALID_ARG,
           "... not a PNG: refused");
        free(grid);
        free(img);
    }
}

static void test_error_object(void)
{
    static const struct {
        unsigned code;
        const char *param, *type;
    } v[] = {{400, "size", "invalid_request_error"},
             {401, NULL, "invalid_request_error"},
             {500, NULL, "server_error"},
             {504, NULL, "server_error"}};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(v); i++) {
        json_t *o = serve_openai_error(v[i].code, v[i].param, "what is wrong");
        json_t *e = json_object_get(o, "error");
        json_t *param = json_object_get(e, "param"), *code = json_object_get(e, "code");
        ok(o && json_object_size(o) == 1 && json_object_size(e) == 4 &&
               !strcmp(json_string_value(json_object_get(e, "message")), "what is wrong") &&
               !strcmp(json_string_value(json_object_get(e, "type")), v[i].type) &&
               (v[i].param ? !strcmp(json_string_value(param), v[i].param) : json_is_null(param)) &&
               json_is_null(code),
           "the error object of a %u: type %s, param %s, code null", v[i].code, v[i].type,
           v[i].param ? v[i].param : "null");
        json_decref(o);
    }
    json_t *o = serve_openai_error(400, "prompt", "cut \xc3");
    ok(o && json_string_value(json_object_get(json_object_get(o, "error"), "message")),
       "a message that is not UTF-8 still gives an error object");
    json_decref(o);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

int main(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/tidal-test-openai-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        ok(0, "a temporary directory");
        return done_testing();
    }
    test_base64();
    test_prompts();
    test_names_parse();
    test_names_file();
    test_png_split();
    test_error_object();
    nftw(tmpdir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return done_testing();
}
