/* The parameter registry. Values are kept as validated text plus their parsed form; each value
 * remembers its source so that precedence holds whatever order the sources are read in. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

extern char **environ;

typedef struct param_value {
    const tdl_param_def_t *def;
    tdl_param_source_t source;
    char *text; /* NULL: unset string */
    int64_t i;  /* INT, BOOL */
    double d;   /* DOUBLE */
} param_value_t;

struct tdl_params {
    param_value_t *values;
    size_t count, capacity;
};

tdl_status_t tdl_params_create(tdl_params_t **params_out)
{
    tdl_params_t *p = calloc(1, sizeof(*p));
    if (!p)
        return tdl_error_raise(TDL_ERR_NOMEM, "cannot allocate the parameter registry");
    *params_out = p;
    return TDL_OK;
}

void tdl_params_destroy(tdl_params_t *params)
{
    if (!params)
        return;
    for (size_t i = 0; i < params->count; i++)
        free(params->values[i].text);
    free(params->values);
    free(params);
}

static param_value_t *param_find(const tdl_params_t *params, const char *name, size_t len)
{
    for (size_t i = 0; i < params->count; i++) {
        const char *n = params->values[i].def->name;
        if (strlen(n) == len && strncmp(n, name, len) == 0)
            return &params->values[i];
    }
    return NULL;
}

void tdl_param_env_name(const char *name, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "TIDAL_");
    for (const char *c = name; *c && n + 1 < size; c++)
        buf[n++] = (*c == '-') ? '_' : (char)toupper((unsigned char)*c);
    if (size)
        buf[TDL_MIN(n, size - 1)] = '\0';
}

const char *tdl_param_source_name(tdl_param_source_t source)
{
    switch (source) {
    case TDL_PARAM_SRC_DEFAULT: return "default";
    case TDL_PARAM_SRC_CONFIG: return "config";
    case TDL_PARAM_SRC_ENV: return "env";
    case TDL_PARAM_SRC_CMDLINE: return "cmdline";
    }
    return "?";
}

static bool enum_has(const char *choices, const char *value)
{
    size_t vlen = strlen(value);
    for (const char *c = choices; c && *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == vlen && strncmp(c, value, len) == 0)
            return true;
        c = bar ? bar + 1 : NULL;
    }
    return false;
}

static bool range_bounded(const tdl_param_def_t *def)
{
    return def->min <= def->max;
}

/* Parses `text` for `def` into `out` without touching the registry. */
static tdl_status_t param_parse(const tdl_param_def_t *def, const char *text, const char *where,
                                param_value_t *out)
{
    char envname[128];
    tdl_param_env_name(def->name, envname, sizeof(envname));
    const char *origin = where ? where : "default";
    switch (def->type) {
    case TDL_PARAM_BOOL:
        if (!strcasecmp(text, "1") || !strcasecmp(text, "true") || !strcasecmp(text, "yes") ||
            !strcasecmp(text, "on")) {
            out->i = 1;
        } else if (!strcasecmp(text, "0") || !strcasecmp(text, "false") ||
                   !strcasecmp(text, "no") || !strcasecmp(text, "off")) {
            out->i = 0;
        } else {
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "invalid value '%s' for %s (--%s): expected true or false", text,
                                   origin, def->name);
        }
        return TDL_OK;
    case TDL_PARAM_INT: {
        errno = 0;
        char *end;
        long long v = strtoll(text, &end, 0);
        int64_t mult = 1;
        /* Sizes may carry a binary suffix: 64k, 16M, 2G. */
        if (end != text && *end && !end[1]) {
            switch (*end) {
            case 'k':
            case 'K':
                mult = 1ll << 10;
                end++;
                break;
            case 'm':
            case 'M':
                mult = 1ll << 20;
                end++;
                break;
            case 'g':
            case 'G':
                mult = 1ll << 30;
                end++;
                break;
            default: break;
            }
        }
        if (errno || end == text || *end || (v != 0 && llabs(v) > INT64_MAX / mult)) {
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "invalid value '%s' for %s (--%s): expected an integer", text,
                                   origin, def->name);
        }
        v *= mult;
        if (range_bounded(def) && ((double)v < def->min || (double)v > def->max)) {
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "invalid value '%s' for %s (--%s): must be in [%.17g, %.17g]",
                                   text, origin, def->name, def->min, def->max);
        }
        out->i = v;
        return TDL_OK;
    }
    case TDL_PARAM_DOUBLE: {
        errno = 0;
        char *end;
        double v = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(v)) {
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "invalid value '%s' for %s (--%s): expected a finite number",
                                   text, origin, def->name);
        }
        if (range_bounded(def) && (v < def->min || v > def->max)) {
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "invalid value '%s' for %s (--%s): must be in [%g, %g]", text,
                                   origin, def->name, def->min, def->max);
        }
        out->d = v;
        return TDL_OK;
    }
    case TDL_PARAM_ENUM:
        if (!enum_has(def->choices, text)) {
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "invalid value '%s' for %s (--%s): choose one of %s", text,
                                   origin, def->name, def->choices);
        }
        return TDL_OK;
    case TDL_PARAM_STRING:
        /* no text parameter means anything by "": an empty value is a mistake (TIDAL_TOKEN= would
         * turn authentication off, --ckpt "" fail after start-up); unset means the default */
        if (!text[0])
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "empty value for %s (--%s): give one, or leave it unset", origin,
                                   def->name);
        return TDL_OK;
    }
    return tdl_error_raise(TDL_ERR_INTERNAL, "parameter --%s has an unknown type", def->name);
}

tdl_status_t tdl_params_register(tdl_params_t *params, const tdl_param_def_t *defs, size_t count)
{
    if (params->count + count > params->capacity) {
        size_t cap = TDL_MAX(params->capacity * 2, params->count + count + 16);
        param_value_t *v = realloc(params->values, cap * sizeof(*v));
        if (!v)
            return tdl_error_raise(TDL_ERR_NOMEM, "cannot grow the parameter registry");
        params->values = v;
        params->capacity = cap;
    }
    for (size_t i = 0; i < count; i++) {
        const tdl_param_def_t *def = &defs[i];
        if (param_find(params, def->name, strlen(def->name))) {
            return tdl_error_raise(TDL_ERR_INTERNAL, "parameter --%s is registered twice",
                                   def->name);
        }
        param_value_t v = {.def = def, .source = TDL_PARAM_SRC_DEFAULT};
        if (def->def) {
            tdl_status_t st = param_parse(def, def->def, "default", &v);
            if (st != TDL_OK)
                return tdl_error_raise(TDL_ERR_INTERNAL, "bad default for --%s: %s", def->name,
                                       tdl_error_get());
            v.text = strdup(def->def);
            if (!v.text)
                return tdl_error_raise(TDL_ERR_NOMEM, "cannot store parameter --%s", def->name);
        }
        params->values[params->count++] = v;
    }
    return TDL_OK;
}

static tdl_status_t params_set_n(tdl_params_t *params, const char *name, size_t len,
                                 const char *value, tdl_param_source_t source, const char *where)
{
    param_value_t *pv = param_find(params, name, len);
    if (!pv) {
        return tdl_error_raise(TDL_ERR_NOT_FOUND,
                               "unknown parameter '%.*s' in %s: see 'tidal --help-params'",
                               (int)len, name, where ? where : "input");
    }
    param_value_t parsed = *pv;
    tdl_status_t st = param_parse(pv->def, value, where, &parsed);
    if (st != TDL_OK)
        return st;
    if (source < pv->source)
        return TDL_OK;
    char *text = strdup(value);
    if (!text)
        return tdl_error_raise(TDL_ERR_NOMEM, "cannot store parameter --%s", pv->def->name);
    free(pv->text);
    parsed.text = text;
    parsed.source = source;
    *pv = parsed;
    return TDL_OK;
}

tdl_status_t tdl_params_set(tdl_params_t *params, const char *name, const char *value,
                            tdl_param_source_t source, const char *where)
{
    return params_set_n(params, name, strlen(name), value, source, where);
}

tdl_status_t tdl_params_load_env(tdl_params_t *params)
{
    char envname[160];
    for (size_t i = 0; i < params->count; i++) {
        const tdl_param_def_t *def = params->values[i].def;
        tdl_param_env_name(def->name, envname, sizeof(envname));
        const char *v = getenv(envname);
        if (!v)
            continue;
        tdl_status_t st = tdl_params_set(params, def->name, v, TDL_PARAM_SRC_ENV, envname);
        if (st != TDL_OK)
            return st;
    }
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "TIDAL_", 6) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        bool known = false;
        for (size_t i = 0; i < params->count && !known; i++) {
            tdl_param_env_name(params->values[i].def->name, envname, sizeof(envname));
            known = strlen(envname) == len && strncmp(envname, *e, len) == 0;
        }
        if (!known)
            TDL_DEBUG("ignoring environment variable %.*s: no parameter of that name", (int)len,
                      *e);
    }
    return TDL_OK;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

/* The longest line a config file may hold, newline excluded (doc/config.md). */
#define CONFIG_LINE_MAX 4094

tdl_status_t tdl_params_load_file(tdl_params_t *params, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        return tdl_error_raise(errno == ENOENT ? TDL_ERR_NOT_FOUND : TDL_ERR_IO,
                               "cannot open config file '%s': %s", path, strerror(errno));
    }
    tdl_status_t st = TDL_OK;
    char *line = NULL, where[512];
    size_t linecap = 0;
    /* the line each parameter was set on, to refuse a second setting: the last one winning
     * silently hides a mistake in one of the two */
    int *set_at = calloc(params->count ? params->count : 1, sizeof(*set_at));
    if (!set_at) {
        fclose(f);
        return tdl_error_raise(TDL_ERR_NOMEM, "config file '%s': out of memory", path);
    }
    int lineno = 0;
    ssize_t got;
    while ((got = getline(&line, &linecap, f)) >= 0) {
        size_t len = (size_t)got;
        lineno++;
        snprintf(where, sizeof(where), "%s:%d", path, lineno);
        if (memchr(line, '\0', len)) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                 "%s: the line holds a NUL byte: a config file is text, one "
                                 "'name = value' a line",
                                 where);
            goto out;
        }
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        if (len > CONFIG_LINE_MAX) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG, "%s: line longer than %d characters", where,
                                 CONFIG_LINE_MAX);
            goto out;
        }
        char *hash = strchr(line, '#');
        char *eq = strchr(line, '=');
        /* A '#' inside a quoted value is part of it. */
        if (hash && eq && hash > eq) {
            char *q = strchr(eq, '"');
            if (q && q < hash) {
                char *q2 = strchr(q + 1, '"');
                hash = q2 ? strchr(q2, '#') : NULL;
            }
        }
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        if (!eq || eq >= s + strlen(s)) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG, "%s: expected 'name = value', found '%s'",
                                 where, s);
            goto out;
        }
        *eq = '\0';
        char *name = trim(s);
        char *value = trim(eq + 1);
        size_t vlen = strlen(value);
        if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
            value[vlen - 1] = '\0';
            value++;
        }
        if (strncmp(name, "--", 2) == 0)
            name += 2;
        if (strcmp(name, "config") == 0) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                 "%s: a config file cannot name another one ('config = %s'): "
                                 "copy its settings here, or give that file with --config",
                                 where, value);
            goto out;
        }
        param_value_t *pv = param_find(params, name, strlen(name));
        if (pv && set_at[pv - params->values]) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                 "%s: '%s' is set a second time (first at line %d): keep one",
                                 where, pv->def->name, set_at[pv - params->values]);
            goto out;
        }
        st = tdl_params_set(params, name, value, TDL_PARAM_SRC_CONFIG, where);
        if (st != TDL_OK)
            goto out;
        set_at[pv - params->values] = lineno;
    }
    if (ferror(f))
        st = tdl_error_raise(TDL_ERR_IO, "error reading config file '%s'", path);
out:
    free(set_at);
    free(line);
    fclose(f);
    return st;
}

tdl_status_t tdl_params_parse_args(tdl_params_t *params, int argc, char **argv,
                                   char **positional_out, int *npositional_out)
{
    int npos = 0;
    char where[300];
    for (int i = 0; i < argc; i++) {
        char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            for (i++; i < argc; i++)
                positional_out[npos++] = argv[i];
            break;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            if (arg[0] == '-' && arg[1] != '\0') {
                return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                       "unknown option '%s': options are spelled --name, see "
                                       "'tidal --help'",
                                       arg);
            }
            positional_out[npos++] = arg;
            continue;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        param_value_t *pv = param_find(params, name, len);
        const char *value = eq ? eq + 1 : NULL;
        if (!pv && !eq && len > 3 && strncmp(name, "no-", 3) == 0) {
            param_value_t *neg = param_find(params, name + 3, len - 3);
            if (neg && neg->def->type == TDL_PARAM_BOOL) {
                pv = neg;
                value = "false";
            }
        }
        if (!pv) {
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "unknown option '--%.*s': see 'tidal --help-params'", (int)len,
                                   name);
        }
        if (!value) {
            if (pv->def->type == TDL_PARAM_BOOL) {
                value = "true";
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                return tdl_error_raise(TDL_ERR_INVALID_ARG, "option '--%s' needs a value",
                                       pv->def->name);
            }
        }
        snprintf(where, sizeof(where), "--%s", pv->def->name);
        tdl_status_t st =
            tdl_params_set(params, pv->def->name, value, TDL_PARAM_SRC_CMDLINE, where);
        if (st != TDL_OK)
            return st;
    }
    *npositional_out = npos;
    return TDL_OK;
}

bool tdl_params_has(const tdl_params_t *params, const char *name)
{
    return param_find(params, name, strlen(name)) != NULL;
}

const tdl_param_def_t *tdl_params_def(const tdl_params_t *params, const char *name)
{
    param_value_t *pv = param_find(params, name, strlen(name));
    return pv ? pv->def : NULL;
}

tdl_param_source_t tdl_params_source(const tdl_params_t *params, const char *name)
{
    param_value_t *pv = param_find(params, name, strlen(name));
    return pv ? pv->source : TDL_PARAM_SRC_DEFAULT;
}

static const param_value_t *param_get(const tdl_params_t *params, const char *name,
                                      tdl_param_type_t type)
{
    const param_value_t *pv = param_find(params, name, strlen(name));
    bool type_ok = pv && (pv->def->type == type ||
                          (type == TDL_PARAM_STRING && pv->def->type == TDL_PARAM_ENUM));
    if (!type_ok) {
        fprintf(stderr, "tidal: internal error: parameter '%s' %s\n", name,
                pv ? "read with the wrong type" : "is not registered");
        abort();
    }
    return pv;
}

bool tdl_param_bool(const tdl_params_t *params, const char *name)
{
    return param_get(params, name, TDL_PARAM_BOOL)->i != 0;
}

int64_t tdl_param_int(const tdl_params_t *params, const char *name)
{
    return param_get(params, name, TDL_PARAM_INT)->i;
}

double tdl_param_double(const tdl_params_t *params, const char *name)
{
    return param_get(params, name, TDL_PARAM_DOUBLE)->d;
}

const char *tdl_param_str(const tdl_params_t *params, const char *name)
{
    return param_get(params, name, TDL_PARAM_STRING)->text;
}

static const char *type_hint(const tdl_param_def_t *def)
{
    switch (def->type) {
    case TDL_PARAM_BOOL: return "bool";
    case TDL_PARAM_INT: return "int";
    case TDL_PARAM_DOUBLE: return "num";
    case TDL_PARAM_STRING: return "text";
    case TDL_PARAM_ENUM: return def->choices;
    }
    return "?";
}

void tdl_params_print_help(const tdl_params_t *params, FILE *out)
{
    char envname[160];
    for (size_t i = 0; i < params->count; i++) {
        const tdl_param_def_t *def = params->values[i].def;
        tdl_param_env_name(def->name, envname, sizeof(envname));
        fprintf(out, "  --%s <%s>\n      %s\n      default: %s; environment: %s", def->name,
                type_hint(def), def->help, def->def ? def->def : "(unset)", envname);
        if ((def->type == TDL_PARAM_INT || def->type == TDL_PARAM_DOUBLE) && range_bounded(def))
            fprintf(out, "; range: [%.17g, %.17g]", def->min, def->max);
        fputc('\n', out);
    }
}

void tdl_params_print_values(const tdl_params_t *params, FILE *out)
{
    for (size_t i = 0; i < params->count; i++) {
        const param_value_t *pv = &params->values[i];
        fprintf(out, "%s = %s  # %s\n", pv->def->name, pv->text ? pv->text : "",
                tdl_param_source_name(pv->source));
    }
}
