/* The cost model of co-located training (train_model.h). */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coord/train_model.h"

void coord_train_model_default(coord_train_model_t *m)
{
    /* the tiny DiT (49860 parameters) at batch 8: about 5 ms an image on a core, the f32
     * gradient over a 10 Gbit/s link */
    *m = (coord_train_model_t){.batch = 8,
                               .image_s = 5e-3,
                               .fixed_s = 4e-3,
                               .grad_bytes = 49860.0 * 4,
                               .link_bytes_per_s = 1.25e9,
                               .hop_s = 50e-6,
                               .state_bytes = 49860.0 * 4 * 4};
    snprintf(m->name, sizeof(m->name), "tiny");
    snprintf(m->codec, sizeof(m->codec), "f32");
}

double coord_train_allreduce_s(const coord_train_model_t *m, int members)
{
    if (members <= 1)
        return 0;
    double n = members;
    return 2 * (n - 1) / n * m->grad_bytes / m->link_bytes_per_s + 2 * (n - 1) * m->hop_s;
}

double coord_train_step_s(const coord_train_model_t *m, int members)
{
    int n = TDL_MAX(members, 1);
    int local = (m->batch + n - 1) / n;
    return m->fixed_s + local * m->image_s + coord_train_allreduce_s(m, n);
}

double coord_train_join_s(const coord_train_model_t *m)
{
    return m->hop_s + m->state_bytes / m->link_bytes_per_s;
}

/* Least squares y = p x + q z (no intercept) or, with z all 1, y = p x + q; false when the
 * normal equations are singular. */
static bool fit2(const double *x, const double *z, const double *y, int n, double *p, double *q)
{
    double sxx = 0, sxz = 0, szz = 0, sxy = 0, szy = 0;
    for (int i = 0; i < n; i++) {
        sxx += x[i] * x[i], sxz += x[i] * z[i], szz += z[i] * z[i];
        sxy += x[i] * y[i], szy += z[i] * y[i];
    }
    double det = sxx * szz - sxz * sxz;
    if (!(fabs(det) > 1e-12 * (sxx * szz + 1e-300)))
        return false;
    *p = (sxy * szz - szy * sxz) / det;
    *q = (szy * sxx - sxy * sxz) / det;
    return true;
}

tdl_status_t coord_train_model_fit(coord_train_model_t *m)
{
    double x[COORD_TRAIN_MAX_POINTS], z[COORD_TRAIN_MAX_POINTS], y[COORD_TRAIN_MAX_POINTS];
    int n = 0;
    /* the all-reduce: bytes and hops of a ring */
    for (int i = 0; i < m->npoints; i++) {
        const coord_train_point_t *p = &m->points[i];
        if (p->members < 2)
            continue;
        x[n] = 2.0 * (p->members - 1) / p->members * m->grad_bytes;
        z[n] = 2.0 * (p->members - 1);
        y[n++] = p->allreduce_s;
    }
    double inv_bw = 0, hop = 0;
    if (n == 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "train model: no point with more than 1 member to fit the "
                               "all-reduce from");
    /* one member count above 1, hops below what the points can tell, or a ring that slows more
     * than its bytes say (ranks sharing cores): the bytes alone */
    if (!fit2(x, z, y, n, &inv_bw, &hop) || hop < 0 || !(inv_bw > 0)) {
        double sxy = 0, sxx = 0;
        for (int i = 0; i < n; i++)
            sxy += x[i] * y[i], sxx += x[i] * x[i];
        hop = 0, inv_bw = sxx > 0 ? sxy / sxx : 0;
    }
    if (!(inv_bw > 0))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "train model: the all-reduce took no longer with more bytes");
    /* the rest of a step: images per member, and what a step costs whatever its images */
    n = 0;
    for (int i = 0; i < m->npoints; i++) {
        const coord_train_point_t *p = &m->points[i];
        x[n] = (double)((p->batch + p->members - 1) / p->members);
        z[n] = 1;
        y[n++] = p->step_s - p->allreduce_s;
    }
    double image_s = 0, fixed_s = 0;
    if (!fit2(x, z, y, n, &image_s, &fixed_s) || !(image_s > 0))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "train model: the steps need two local batches to fit (%d points)",
                               n);
    m->link_bytes_per_s = 1 / inv_bw, m->hop_s = hop;
    m->image_s = image_s, m->fixed_s = fmax(fixed_s, 0);
    m->step_rel_err = 0;
    for (int i = 0; i < m->npoints; i++) {
        coord_train_model_t at = *m;
        at.batch = m->points[i].batch;
        double fit = coord_train_step_s(&at, m->points[i].members);
        m->step_rel_err = fmax(m->step_rel_err,
                               fabs(fit - m->points[i].step_s) / fmax(m->points[i].step_s, 1e-12));
    }
    return TDL_OK;
}

/* ---- JSON ------------------------------------------------------------------------------- */

static bool num(json_t *o, const char *key, double *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || !json_is_number(v) || !isfinite(json_number_value(v)))
        return false;
    *out = json_number_value(v);
    return true;
}

static json_t *load_root(const char *path, bool need, tdl_status_t *st)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    *st = TDL_OK;
    if (root && json_is_object(root))
        return root;
    json_decref(root);
    FILE *f = fopen(path, "r");
    if (!f && errno == ENOENT && !need)
        return json_object(); /* a new file */
    if (!f)
        *st = tdl_error_raise(errno == ENOENT ? TDL_ERR_NOT_FOUND : TDL_ERR_IO, "%s: %s", path,
                              strerror(errno));
    else
        *st = tdl_error_raise(TDL_ERR_CORRUPT, "%s:%d: %s", path, jerr.line,
                              root ? "not a JSON object" : jerr.text);
    if (f)
        fclose(f);
    return NULL;
}

tdl_status_t coord_train_model_load(const char *path, coord_train_model_t *out)
{
    tdl_status_t st;
    json_t *root = load_root(path, true, &st);
    if (!root)
        return st;
    json_t *t = json_object_get(root, "train"), *v;
    coord_train_model_t m = {0};
    double batch = 0;
    if (!t || !json_is_object(t)) {
        st = tdl_error_raise(TDL_ERR_NOT_FOUND,
                             "%s has no \"train\" object (tidal profile --train writes one)", path);
    } else if (!num(t, "batch", &batch) || !num(t, "image_s", &m.image_s) ||
               !num(t, "fixed_s", &m.fixed_s) || !num(t, "grad_bytes", &m.grad_bytes) ||
               !num(t, "link_bytes_per_s", &m.link_bytes_per_s) || !num(t, "hop_s", &m.hop_s) ||
               !num(t, "state_bytes", &m.state_bytes) || batch < 1 || batch > 1 << 24 ||
               m.image_s <= 0 || m.fixed_s < 0 || m.grad_bytes < 0 || m.link_bytes_per_s <= 0 ||
               m.hop_s < 0 || m.state_bytes < 0) {
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s: \"train\" needs batch >= 1, image_s > 0, link_bytes_per_s > 0 "
                             "and fixed_s, grad_bytes, hop_s, state_bytes >= 0",
                             path);
    } else {
        m.batch = (int)batch;
        num(t, "step_rel_err", &m.step_rel_err);
        if ((v = json_object_get(t, "model")) && json_is_string(v))
            snprintf(m.name, sizeof(m.name), "%s", json_string_value(v));
        if ((v = json_object_get(t, "codec")) && json_is_string(v))
            snprintf(m.codec, sizeof(m.codec), "%s", json_string_value(v));
        json_t *pts = json_object_get(t, "points"), *p;
        size_t i;
        json_array_foreach(pts, i, p)
        {
            double mem = 0, b = 0;
            coord_train_point_t q = {0};
            if (m.npoints == COORD_TRAIN_MAX_POINTS || !num(p, "members", &mem) ||
                !num(p, "batch", &b) || !num(p, "step_s", &q.step_s) ||
                !num(p, "allreduce_s", &q.allreduce_s) || mem < 1 || b < 1)
                continue; /* the points are kept to be shown, not needed */
            q.members = (int)mem, q.batch = (int)b;
            m.points[m.npoints++] = q;
        }
        *out = m;
    }
    json_decref(root);
    return st;
}

tdl_status_t coord_train_model_save(const coord_train_model_t *m, const char *path)
{
    tdl_status_t st;
    json_t *root = load_root(path, false, &st);
    if (!root)
        return st;
    json_t *pts = json_array();
    for (int i = 0; i < m->npoints; i++) {
        const coord_train_point_t *p = &m->points[i];
        coord_train_model_t at = *m;
        at.batch = p->batch;
        json_array_append_new(pts, json_pack("{s:i, s:i, s:f, s:f, s:f}", "members", p->members,
                                             "batch", p->batch, "step_s", p->step_s, "allreduce_s",
                                             p->allreduce_s, "fit_s",
                                             coord_train_step_s(&at, p->members)));
    }
    json_t *t = json_pack("{s:s, s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:o}", "model",
                          m->name, "codec", m->codec, "batch", m->batch, "image_s", m->image_s,
                          "fixed_s", m->fixed_s, "grad_bytes", m->grad_bytes, "link_bytes_per_s",
                          m->link_bytes_per_s, "hop_s", m->hop_s, "state_bytes", m->state_bytes,
                          "step_rel_err", m->step_rel_err, "points", pts);
    json_object_set_new(root, "train", t);
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (rc != 0)
        return tdl_error_raise(TDL_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return TDL_OK;
}
