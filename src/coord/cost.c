/* The serving cost model: quadratic fits per (stage, degree), their JSON form, the default. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/cost.h"

static const char *const stage_names[COORD_COST_NSTAGES] = {"prepare", "step", "decode"};

const char *coord_cost_stage_name(coord_cost_stage_t stage)
{
    return (unsigned)stage < COORD_COST_NSTAGES ? stage_names[stage] : "?";
}

static const coord_cost_fit_t *find_fit(const coord_cost_model_t *m, coord_cost_stage_t stage,
                                        int degree)
{
    if ((unsigned)stage >= COORD_COST_NSTAGES)
        return NULL;
    for (int i = 0; i < m->nfits[stage]; i++)
        if (m->fits[stage][i].degree == degree)
            return &m->fits[stage][i];
    return NULL;
}

tdl_status_t coord_cost_model_set_fit(coord_cost_model_t *m, coord_cost_stage_t stage, int degree,
                                      double a, double b, double c, double rel_err)
{
    if ((unsigned)stage >= COORD_COST_NSTAGES)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "cost model: unknown stage %d", (int)stage);
    if (degree < 1 || degree > 1024 || (degree & (degree - 1)))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "cost model: degree %d is not a power of two in 1..1024", degree);
    if (!isfinite(a) || !isfinite(b) || !isfinite(c) || !isfinite(rel_err))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "cost model: %s at degree %d: not finite",
                               stage_names[stage], degree);
    coord_cost_fit_t f = {degree, a, b, c, rel_err};
    coord_cost_fit_t *slot = (coord_cost_fit_t *)find_fit(m, stage, degree);
    if (slot) {
        *slot = f;
        return TDL_OK;
    }
    if (m->nfits[stage] == COORD_COST_MAX_FITS)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "cost model: more than %d degrees for %s",
                               COORD_COST_MAX_FITS, stage_names[stage]);
    int i = m->nfits[stage]++;
    for (; i > 0 && m->fits[stage][i - 1].degree > degree; i--)
        m->fits[stage][i] = m->fits[stage][i - 1];
    m->fits[stage][i] = f;
    return TDL_OK;
}

tdl_status_t coord_cost_model_set_batch(coord_cost_model_t *m, int tokens, const int *images,
                                        const double *factor, int npoints)
{
    if (tokens < 1 || npoints < 1 || npoints > COORD_COST_MAX_BATCH_POINTS)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "cost model: a batch table of %d points at %d tokens (1 to %d "
                               "points, tokens >= 1)",
                               npoints, tokens, COORD_COST_MAX_BATCH_POINTS);
    coord_cost_batch_t b = {.tokens = tokens};
    for (int i = 0; i < npoints; i++) {
        if (images[i] < 1 || !isfinite(factor[i]) || factor[i] <= 0)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "cost model: batch of %d images at %d tokens with factor %g "
                                   "(images >= 1, factor finite and > 0)",
                                   images[i], tokens, factor[i]);
        int k = b.npoints++;
        for (; k > 0 && b.images[k - 1] > images[i]; k--)
            b.images[k] = b.images[k - 1], b.factor[k] = b.factor[k - 1];
        if (k > 0 && b.images[k - 1] == images[i])
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "cost model: batch of %d images twice at %d tokens", images[i],
                                   tokens);
        b.images[k] = images[i], b.factor[k] = factor[i];
    }
    int at = 0;
    while (at < m->nbatch && m->batch[at].tokens < tokens)
        at++;
    if (at < m->nbatch && m->batch[at].tokens == tokens) {
        m->batch[at] = b;
        return TDL_OK;
    }
    if (m->nbatch == COORD_COST_MAX_BATCH_TABLES)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "cost model: more than %d batch tables",
                               COORD_COST_MAX_BATCH_TABLES);
    memmove(&m->batch[at + 1], &m->batch[at], (size_t)(m->nbatch - at) * sizeof(b));
    m->batch[at] = b;
    m->nbatch++;
    return TDL_OK;
}

double coord_cost_batch_factor(const coord_cost_model_t *m, int tokens, int images)
{
    if (m->nbatch == 0 || images < 1 || tokens < 1)
        return 1.0;
    const coord_cost_batch_t *b = &m->batch[0];
    for (int i = 1; i < m->nbatch; i++)
        if (fabs(log((double)m->batch[i].tokens / tokens)) < fabs(log((double)b->tokens / tokens)))
            b = &m->batch[i];
    if (images <= b->images[0])
        return b->factor[0];
    for (int i = 1; i < b->npoints; i++)
        if (images <= b->images[i]) {
            double u = (double)(images - b->images[i - 1]) / (b->images[i] - b->images[i - 1]);
            return b->factor[i - 1] + u * (b->factor[i] - b->factor[i - 1]);
        }
    return b->factor[b->npoints - 1];
}

double coord_cost_stage_s(const coord_cost_model_t *m, coord_cost_stage_t stage, int tokens,
                          int degree)
{
    const coord_cost_fit_t *f = find_fit(m, stage, degree);
    if (!f)
        return INFINITY;
    double x = tokens;
    double s = (f->a * x + f->b) * x + f->c;
    return s > 0 ? s : 0;
}

bool coord_cost_has_degree(const coord_cost_model_t *m, coord_cost_stage_t stage, int degree)
{
    return find_fit(m, stage, degree) != NULL;
}

int coord_cost_tokens(const coord_cost_model_t *m, int resolution)
{
    int side = resolution / (m->patch > 0 ? m->patch : 1);
    return side * side;
}

double coord_cost_migration_s(const coord_cost_model_t *m, int tokens, int images)
{
    double bytes = m->state_bytes_per_token * tokens * images;
    return m->migration_latency_s +
           (m->migration_bytes_per_s > 0 ? bytes / m->migration_bytes_per_s : 0);
}

/* Solves the 3x3 system by Gaussian elimination with partial pivoting; false if singular. */
static bool solve3(double m[3][4], double out[3])
{
    for (int col = 0; col < 3; col++) {
        int piv = col;
        for (int r = col + 1; r < 3; r++)
            if (fabs(m[r][col]) > fabs(m[piv][col]))
                piv = r;
        if (fabs(m[piv][col]) < 1e-300)
            return false;
        for (int k = 0; k < 4; k++) {
            double t = m[col][k];
            m[col][k] = m[piv][k];
            m[piv][k] = t;
        }
        for (int r = col + 1; r < 3; r++) {
            double f = m[r][col] / m[col][col];
            for (int k = col; k < 4; k++)
                m[r][k] -= f * m[col][k];
        }
    }
    for (int r = 2; r >= 0; r--) {
        double s = m[r][3];
        for (int k = r + 1; k < 3; k++)
            s -= m[r][k] * out[k];
        out[r] = s / m[r][r];
    }
    return true;
}

tdl_status_t coord_cost_fit_quadratic(const double *xs, const double *ys, int n, double *a,
                                      double *b, double *c, double *rel_err)
{
    if (n < 1 || !xs || !ys)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "cost fit: no points");
    for (int i = 0; i < n; i++)
        if (!isfinite(xs[i]) || !isfinite(ys[i]))
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "cost fit: point %d is not finite", i);
    /* Scale x to about 1 so that the normal equations stay well conditioned. */
    double xmax = 0;
    for (int i = 0; i < n; i++)
        xmax = fmax(xmax, fabs(xs[i]));
    if (xmax == 0)
        xmax = 1;
    int np = n >= 3 ? 3 : n; /* parameters fitted: c, then b, then a */
    double m[3][4] = {{0}}, p[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        double u = xs[i] / xmax, pw[3] = {1, u, u * u};
        for (int r = 0; r < np; r++) {
            for (int k = 0; k < np; k++)
                m[r][k] += pw[r] * pw[k];
            m[r][3] += pw[r] * ys[i];
        }
    }
    if (np < 3)
        for (int r = np; r < 3; r++)
            m[r][r] = 1; /* the unfitted coefficients are 0 */
    if (!solve3(m, p))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "cost fit: the points do not determine a quadratic (repeated x?)");
    double fa = p[2] / (xmax * xmax), fb = p[1] / xmax, fc = p[0], err = 0;
    for (int i = 0; i < n; i++) {
        double f = (fa * xs[i] + fb) * xs[i] + fc;
        double d = fabs(f - ys[i]);
        err = fmax(err, ys[i] != 0 ? d / fabs(ys[i]) : d);
    }
    *a = fa;
    *b = fb;
    *c = fc;
    *rel_err = err;
    return TDL_OK;
}

void coord_cost_model_default(coord_cost_model_t *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "fmnist-ideal");
    m->patch = 4;
    m->per_image = true;
    m->migration_latency_s = 0.5e-3;
    m->migration_bytes_per_s = 10e9;
    m->state_bytes_per_token = 128;
    /* ms per step of one image at 64, 256 and 1024 tokens: SP1 and SP2 as measured on this
     * machine; SP4 and SP8 as an idealized cluster (scaling at 1024 tokens, losing at 64). */
    static const double xs[3] = {64, 256, 1024};
    static const struct {
        int degree;
        double ms[3];
    } steps[] = {{1, {3.2, 16.0, 157.0}},
                 {2, {2.3, 9.8, 84.0}},
                 {4, {3.4, 7.2, 45.0}},
                 {8, {4.5, 7.6, 27.0}}};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(steps); i++) {
        double ys[3], a, b, c, e;
        for (int k = 0; k < 3; k++)
            ys[k] = steps[i].ms[k] * 1e-3;
        if (coord_cost_fit_quadratic(xs, ys, 3, &a, &b, &c, &e) == TDL_OK)
            coord_cost_model_set_fit(m, COORD_COST_STEP, steps[i].degree, a, b, c, e);
    }
    /* Noise from the seed, and un-patchify plus PNG on the group's first member. */
    coord_cost_model_set_fit(m, COORD_COST_PREPARE, 1, 0, 2e-7, 1e-4, 0);
    coord_cost_model_set_fit(m, COORD_COST_DECODE, 1, 0, 2e-6, 3e-4, 0);
}

/* ---- JSON ------------------------------------------------------------------------------- */

static tdl_status_t bad(const char *path, const char *what)
{
    return tdl_error_raise(TDL_ERR_CORRUPT, "cost model %s: %s", path, what);
}

static bool get_num(json_t *obj, const char *key, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_number(v))
        return false;
    *out = json_number_value(v);
    return isfinite(*out);
}

tdl_status_t coord_cost_model_load(const char *path, coord_cost_model_t *out)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        FILE *f = fopen(path, "r");
        if (!f)
            return tdl_error_raise(errno == ENOENT ? TDL_ERR_NOT_FOUND : TDL_ERR_IO,
                                   "cost model %s: %s", path, strerror(errno));
        fclose(f);
        return tdl_error_raise(TDL_ERR_CORRUPT, "cost model %s:%d: %s", path, jerr.line, jerr.text);
    }
    tdl_status_t st = TDL_OK;
    char msg[256];
    coord_cost_model_t m;
    memset(&m, 0, sizeof(m));
    m.per_image = true;
    json_t *v, *stages, *mig;
    if (!json_is_object(root)) {
        st = bad(path, "not a JSON object");
        goto out;
    }
    if ((v = json_object_get(root, "model")) && json_is_string(v))
        snprintf(m.name, sizeof(m.name), "%s", json_string_value(v));
    v = json_object_get(root, "patch");
    if (!v || !json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 64) {
        st = bad(path, "'patch' must be an integer in 1..64");
        goto out;
    }
    m.patch = (int)json_integer_value(v);
    if ((v = json_object_get(root, "per_image"))) {
        if (!json_is_boolean(v)) {
            st = bad(path, "'per_image' must be true or false");
            goto out;
        }
        m.per_image = json_is_true(v);
    }
    stages = json_object_get(root, "stages");
    if (!json_is_object(stages)) {
        st = bad(path, "'stages' must be an object of prepare, step and decode");
        goto out;
    }
    const char *sname;
    json_t *sobj;
    json_object_foreach(stages, sname, sobj)
    {
        int s = -1;
        for (int k = 0; k < COORD_COST_NSTAGES; k++)
            if (!strcmp(sname, stage_names[k]))
                s = k;
        if (s < 0 || !json_is_object(sobj)) {
            snprintf(msg, sizeof(msg), "stage '%s' is not one of prepare, step, decode", sname);
            st = bad(path, msg);
            goto out;
        }
        const char *dname;
        json_t *fobj;
        json_object_foreach(sobj, dname, fobj)
        {
            char *end;
            long d = strtol(dname, &end, 10);
            double a, b, c, e = 0;
            if (*end || !json_is_object(fobj) || !get_num(fobj, "a", &a) ||
                !get_num(fobj, "b", &b) || !get_num(fobj, "c", &c) ||
                (json_object_get(fobj, "rel_err") && !get_num(fobj, "rel_err", &e)) ||
                coord_cost_model_set_fit(&m, (coord_cost_stage_t)s, (int)d, a, b, c, e) != TDL_OK) {
                snprintf(msg, sizeof(msg),
                         "stages.%s.%s must be {\"a\", \"b\", \"c\"[, \"rel_err\"]} numbers "
                         "under a power-of-two degree",
                         sname, dname);
                st = bad(path, msg);
                goto out;
            }
        }
    }
    for (int k = 0; k < COORD_COST_NSTAGES; k++)
        if (!m.nfits[k]) {
            snprintf(msg, sizeof(msg), "stage '%s' has no fit", stage_names[k]);
            st = bad(path, msg);
            goto out;
        }
    json_t *batch = json_object_get(root, "step_batch");
    if (batch && !json_is_object(batch)) {
        st = bad(path, "'step_batch' must be an object of tables by tokens");
        goto out;
    }
    const char *tname;
    json_t *tobj;
    json_object_foreach(batch, tname, tobj)
    {
        char *end;
        long tokens = strtol(tname, &end, 10);
        int images[COORD_COST_MAX_BATCH_POINTS], np = 0;
        double factor[COORD_COST_MAX_BATCH_POINTS];
        bool fine = !*end && tokens >= 1 && tokens <= 1 << 30 && json_is_object(tobj) &&
                    json_object_size(tobj) >= 1 &&
                    json_object_size(tobj) <= COORD_COST_MAX_BATCH_POINTS;
        const char *iname;
        json_t *f;
        json_object_foreach(tobj, iname, f)
        {
            long im = strtol(iname, &end, 10);
            if (!fine || *end || im < 1 || im > 1 << 20 || !json_is_number(f)) {
                fine = false;
                break;
            }
            images[np] = (int)im, factor[np++] = json_number_value(f);
        }
        if (!fine || coord_cost_model_set_batch(&m, (int)tokens, images, factor, np) != TDL_OK) {
            snprintf(msg, sizeof(msg),
                     "step_batch.%s must map 1 to %d image counts to factors > 0, under a "
                     "token count >= 1",
                     tname, COORD_COST_MAX_BATCH_POINTS);
            st = bad(path, msg);
            goto out;
        }
    }
    mig = json_object_get(root, "migration");
    if (!json_is_object(mig) || !get_num(mig, "latency_s", &m.migration_latency_s) ||
        !get_num(mig, "bytes_per_s", &m.migration_bytes_per_s) ||
        !get_num(mig, "state_bytes_per_token", &m.state_bytes_per_token) ||
        m.migration_latency_s < 0 || m.migration_bytes_per_s <= 0 || m.state_bytes_per_token < 0) {
        st = bad(path, "'migration' must hold latency_s >= 0, bytes_per_s > 0 and "
                       "state_bytes_per_token >= 0");
        goto out;
    }
    *out = m;
out:
    json_decref(root);
    return st;
}

tdl_status_t coord_cost_model_save(const coord_cost_model_t *m, const char *path)
{
    json_t *root = json_object(), *stages = json_object(), *mig = json_object();
    json_object_set_new(root, "model", json_string(m->name));
    json_object_set_new(root, "patch", json_integer(m->patch));
    json_object_set_new(root, "per_image", json_boolean(m->per_image));
    json_object_set_new(root, "x", json_string("tokens"));
    json_object_set_new(root, "y", json_string("seconds"));
    for (int s = 0; s < COORD_COST_NSTAGES; s++) {
        json_t *so = json_object();
        for (int i = 0; i < m->nfits[s]; i++) {
            const coord_cost_fit_t *f = &m->fits[s][i];
            char key[16];
            snprintf(key, sizeof(key), "%d", f->degree);
            json_object_set_new(so, key,
                                json_pack("{s:f, s:f, s:f, s:f}", "a", f->a, "b", f->b, "c", f->c,
                                          "rel_err", f->rel_err));
        }
        json_object_set_new(stages, stage_names[s], so);
    }
    json_object_set_new(root, "stages", stages);
    json_object_set_new(mig, "latency_s", json_real(m->migration_latency_s));
    json_object_set_new(mig, "bytes_per_s", json_real(m->migration_bytes_per_s));
    json_object_set_new(mig, "state_bytes_per_token", json_real(m->state_bytes_per_token));
    json_object_set_new(root, "migration", mig);
    if (m->nbatch > 0) {
        json_t *batch = json_object();
        for (int i = 0; i < m->nbatch; i++) {
            json_t *t = json_object();
            char key[24];
            for (int k = 0; k < m->batch[i].npoints; k++) {
                snprintf(key, sizeof(key), "%d", m->batch[i].images[k]);
                json_object_set_new(t, key, json_real(m->batch[i].factor[k]));
            }
            snprintf(key, sizeof(key), "%d", m->batch[i].tokens);
            json_object_set_new(batch, key, t);
        }
        json_object_set_new(root, "step_batch", batch);
    }
    /* what else the file holds beside the serving model (the training model) stays */
    json_t *old = json_load_file(path, 0, NULL), *v;
    const char *key;
    if (old && json_is_object(old)) {
        json_object_foreach(old, key, v)
        {
            if (!json_object_get(root, key))
                json_object_set(root, key, v);
        }
    }
    json_decref(old);
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (rc != 0)
        return tdl_error_raise(TDL_ERR_IO, "cost model %s: cannot write: %s", path,
                               strerror(errno));
    return TDL_OK;
}
