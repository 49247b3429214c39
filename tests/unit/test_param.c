/* The parameter registry: types, ranges, bad values, and precedence
 * command line > environment > config file > default, whatever order they are read in. */
#include "config.h"

#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"
#include "tap.h"

static const tdl_param_def_t defs[] = {
    {"steps", TDL_PARAM_INT, "100", "training steps", NULL, 1, 1e9},
    {"lr", TDL_PARAM_DOUBLE, "1e-4", "learning rate", NULL, 0, 1},
    {"name", TDL_PARAM_STRING, NULL, "run name", NULL, 1, 0},
    {"ema", TDL_PARAM_BOOL, "true", "keep EMA weights", NULL, 1, 0},
    {"policy", TDL_PARAM_ENUM, "fcfs", "serving policy", "fcfs|srtf|edf_best_fit", 1, 0},
    {"gfc-timeout-ms", TDL_PARAM_INT, "30000", "timeout", NULL, 1, 3.6e6},
    {"buffer", TDL_PARAM_INT, "64k", "buffer bytes", NULL, 1, 0},
    {"config", TDL_PARAM_STRING, NULL, "config file", NULL, 1, 0},
};

static tdl_params_t *fresh(void)
{
    tdl_params_t *p = NULL;
    tdl_params_create(&p);
    tdl_params_register(p, defs, TDL_ARRAY_SIZE(defs));
    return p;
}

static char cfg_path[64];

static void write_config(const char *text)
{
    FILE *f = fopen(cfg_path, "w");
    fputs(text, f);
    fclose(f);
}

static tdl_status_t parse(tdl_params_t *p, int argc, char **argv, int *npos, char **pos)
{
    return tdl_params_parse_args(p, argc, argv, pos, npos);
}

int main(void)
{
    char *pos[16];
    int npos;
    snprintf(cfg_path, sizeof(cfg_path), "/tmp/tidal-test-param-%d.conf", (int)getpid());

    /* defaults */
    tdl_params_t *p = fresh();
    is_int(tdl_param_int(p, "steps"), 100, "int default");
    is_near(tdl_param_double(p, "lr"), 1e-4, 1e-12, "double default");
    ok(tdl_param_str(p, "name") == NULL, "unset string default is NULL");
    ok(tdl_param_bool(p, "ema"), "bool default");
    is_str(tdl_param_str(p, "policy"), "fcfs", "enum default");
    is_int(tdl_param_int(p, "buffer"), 65536, "size suffix k in a default");
    is_int(tdl_params_source(p, "steps"), TDL_PARAM_SRC_DEFAULT, "source is default");
    ok(tdl_params_register(p, defs, 1) == TDL_ERR_INTERNAL, "registering a name twice is a bug");

    /* command-line forms */
    char *argv1[] = {"--steps",  "7",    "--lr=0.5",    "img", "--no-ema",
                     "--policy", "srtf", "--buffer=2M", "--",  "--steps"};
    is_int(parse(p, 10, argv1, &npos, pos), TDL_OK, "parse --a b, --a=b, --no-flag, --");
    is_int(tdl_param_int(p, "steps"), 7, "--steps 7");
    is_near(tdl_param_double(p, "lr"), 0.5, 0, "--lr=0.5");
    ok(!tdl_param_bool(p, "ema"), "--no-ema");
    is_str(tdl_param_str(p, "policy"), "srtf", "--policy srtf");
    is_int(tdl_param_int(p, "buffer"), 2 << 20, "--buffer=2M");
    is_int(npos, 2, "two positional arguments");
    ok(npos == 2 && !strcmp(pos[0], "img") && !strcmp(pos[1], "--steps"),
       "positionals in order, '--' ends options");
    tdl_params_destroy(p);

    /* bad values: refused with a message naming the option and the value; nothing changes */
    struct {
        char *argv[2];
        const char *needle;
    } bad[] = {
        {{"--steps", "ten"}, "'ten'"},
        {{"--steps", "0"}, "[1, 1000000000]"},
        {{"--steps", "12abc"}, "--steps"},
        {{"--lr", "2"}, "--lr"},
        {{"--lr", "nan"}, "finite"},
        {{"--ema=maybe", "x"}, "true or false"},
        {{"--policy", "lifo"}, "fcfs|srtf"},
        {{"--bogus", "1"}, "'--bogus'"},
        {{"--steps", "99999999999999999999"}, "integer"},
    };
    for (size_t i = 0; i < TDL_ARRAY_SIZE(bad); i++) {
        p = fresh();
        tdl_error_clear();
        tdl_status_t st = parse(p, 2, bad[i].argv, &npos, pos);
        ok(st != TDL_OK && strstr(tdl_error_get(), bad[i].needle), "%s %s refused: %s",
           bad[i].argv[0], bad[i].argv[1], tdl_error_get());
        is_int(tdl_param_int(p, "steps"), 100, "  and --steps keeps its value");
        tdl_params_destroy(p);
    }
    p = fresh();
    char *missing[] = {"--steps"};
    ok(parse(p, 1, missing, &npos, pos) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "needs a value"),
       "option without its value refused");
    char *single_dash[] = {"-s"};
    ok(parse(p, 1, single_dash, &npos, pos) == TDL_ERR_INVALID_ARG, "'-s' refused");
    tdl_params_destroy(p);

    /* precedence, reading the sources in both orders */
    write_config("# a comment\n\nsteps = 3   # trailing comment\nlr=0.25\nname = \"run #1\"\n"
                 "policy = edf_best_fit\n");
    setenv("TIDAL_STEPS", "2", 1);
    setenv("TIDAL_LR", "0.125", 1);
    setenv("TIDAL_GFC_TIMEOUT_MS", "500", 1);
    char *argv2[] = {"--steps=1"};
    for (int order = 0; order < 2; order++) {
        p = fresh();
        tdl_status_t s1, s2, s3;
        if (order == 0) {
            s1 = parse(p, 1, argv2, &npos, pos);
            s2 = tdl_params_load_env(p);
            s3 = tdl_params_load_file(p, cfg_path);
        } else {
            s3 = tdl_params_load_file(p, cfg_path);
            s2 = tdl_params_load_env(p);
            s1 = parse(p, 1, argv2, &npos, pos);
        }
        ok(s1 == TDL_OK && s2 == TDL_OK && s3 == TDL_OK, "order %d: all sources read", order);
        is_int(tdl_param_int(p, "steps"), 1, "order %d: command line beats env and file", order);
        is_near(tdl_param_double(p, "lr"), 0.125, 0, "order %d: env beats file", order);
        is_str(tdl_param_str(p, "name"), "run #1", "order %d: file beats default (quoted #)",
               order);
        is_str(tdl_param_str(p, "policy"), "edf_best_fit", "order %d: enum from file", order);
        is_int(tdl_param_int(p, "gfc-timeout-ms"), 500, "order %d: TIDAL_GFC_TIMEOUT_MS", order);
        is_int(tdl_params_source(p, "lr"), TDL_PARAM_SRC_ENV, "order %d: lr source is env", order);
        ok(tdl_param_bool(p, "ema"), "order %d: untouched bool keeps its default", order);
        tdl_params_destroy(p);
    }

    /* a bad environment value names the variable */
    setenv("TIDAL_STEPS", "-4", 1);
    p = fresh();
    ok(tdl_params_load_env(p) == TDL_ERR_INVALID_ARG && strstr(tdl_error_get(), "TIDAL_STEPS"),
       "bad env value names TIDAL_STEPS: %s", tdl_error_get());
    tdl_params_destroy(p);
    unsetenv("TIDAL_STEPS");
    unsetenv("TIDAL_LR");
    unsetenv("TIDAL_GFC_TIMEOUT_MS");

    /* a bad config line names the file and line */
    write_config("steps = 5\nthis line has no equals sign\n");
    p = fresh();
    ok(tdl_params_load_file(p, cfg_path) == TDL_ERR_INVALID_ARG && strstr(tdl_error_get(), ":2:"),
       "malformed config line names file:line: %s", tdl_error_get());
    tdl_params_destroy(p);
    write_config("stepz = 5\n");
    p = fresh();
    ok(tdl_params_load_file(p, cfg_path) == TDL_ERR_NOT_FOUND && strstr(tdl_error_get(), "stepz"),
       "unknown config name refused: %s", tdl_error_get());
    tdl_params_destroy(p);
    write_config("lr = 3\n");
    p = fresh();
    ok(tdl_params_load_file(p, cfg_path) == TDL_ERR_INVALID_ARG && strstr(tdl_error_get(), ":1"),
       "out-of-range config value names file:line: %s", tdl_error_get());
    tdl_params_destroy(p);
    p = fresh();
    ok(tdl_params_load_file(p, "/nonexistent/tidal.conf") == TDL_ERR_NOT_FOUND,
       "missing config file is NOT_FOUND");
    tdl_params_destroy(p);
    /* a key given twice names both lines; the file's first value is not silently replaced */
    write_config("steps = 5\nlr = 0.25\n--steps = 6\n");
    p = fresh();
    ok(tdl_params_load_file(p, cfg_path) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), ":3:") && strstr(tdl_error_get(), "line 1") &&
           strstr(tdl_error_get(), "steps"),
       "a key set twice is refused, naming file, line and first line: %s", tdl_error_get());
    tdl_params_destroy(p);
    /* an empty text value is refused from every source, naming it */
    write_config("name = \"\"\n");
    p = fresh();
    ok(tdl_params_load_file(p, cfg_path) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "empty value") && strstr(tdl_error_get(), ":1"),
       "an empty value in a config file is refused: %s", tdl_error_get());
    char *empty_arg[] = {"--name", ""};
    ok(parse(p, 2, empty_arg, &npos, pos) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "--name"),
       "--name '' is refused: %s", tdl_error_get());
    tdl_params_destroy(p);
    /* a config file naming another is refused, not ignored */
    write_config("steps = 5\nconfig = other.conf\n");
    p = fresh();
    ok(tdl_params_load_file(p, cfg_path) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), ":2:") && strstr(tdl_error_get(), "other.conf"),
       "'config = FILE' inside a config file is refused: %s", tdl_error_get());
    tdl_params_destroy(p);
    /* a NUL byte is named as such, not as a long line */
    {
        FILE *f = fopen(cfg_path, "w");
        fwrite("steps = 5\nlr = 0.2\0junk\n", 1, 25, f);
        fclose(f);
    }
    p = fresh();
    ok(tdl_params_load_file(p, cfg_path) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), ":2:") && strstr(tdl_error_get(), "NUL"),
       "a NUL byte in a line is reported as one: %s", tdl_error_get());
    tdl_params_destroy(p);
    /* the longest line allowed reads; one more character is refused */
    {
        FILE *f = fopen(cfg_path, "w");
        fprintf(f, "name = \"%0*d\"\n", 4094 - 9, 0);
        fprintf(f, "steps = 7\n");
        fclose(f);
    }
    p = fresh();
    ok(tdl_params_load_file(p, cfg_path) == TDL_OK && tdl_param_int(p, "steps") == 7 &&
           strlen(tdl_param_str(p, "name")) == 4094 - 9,
       "a line of 4094 characters reads: %s", tdl_error_get());
    tdl_params_destroy(p);
    {
        FILE *f = fopen(cfg_path, "w");
        fprintf(f, "name = \"%0*d\"\n", 4094 - 8, 0);
        fclose(f);
    }
    p = fresh();
    ok(tdl_params_load_file(p, cfg_path) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "longer than 4094"),
       "a line of 4095 characters is refused: %s", tdl_error_get());
    tdl_params_destroy(p);
    unlink(cfg_path);

    char env[64];
    tdl_param_env_name("gfc-timeout-ms", env, sizeof(env));
    is_str(env, "TIDAL_GFC_TIMEOUT_MS", "environment name of gfc-timeout-ms");
    return done_testing();
}
