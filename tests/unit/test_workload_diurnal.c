/* `tidal workload --diurnal` against the curve it promises, computed here on its own (the cosine's
 * integral in hours, the bursts' normalisation): on compressed days of 3600 s and about 30,000
 * requests, the count of each hour of the day within 4 Poisson standard deviations of the
 * integral of the rate over it (and a chi-square over the 24), the day's total against load x
 * capacity x day, the peak / trough ratio and peak hour of a cosine fitted to the 24 counts, the
 * bursts' windows at burst-height times the curve, explicit and drawn hours, a day repeated for
 * a request count, byte-identical traces for a seed, and every bad argument refused. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord/cost.h"
#include "coord/workload.h"
#include "core/core.h"
#include "tap.h"

#define DAY_S  3600.0
#define NSIGMA 4.0

static coord_cost_model_t cost;

static void day_config(coord_workload_config_t *c, uint64_t seed)
{
    coord_workload_config_default(c);
    c->ranks = 32;
    c->load = 0.9; /* about 9.2 requests/s of capacity: some 30,000 requests a day of 3600 s */
    c->requests = 0;
    c->seed = seed;
    c->diurnal.on = 1;
    c->diurnal.day_s = DAY_S;
}

/* ∫ (1 + a cos(2 pi (h - peak) / 24)) dh from h0 to h1, in hours. */
static double cos_hours(double a, double peak, double h0, double h1)
{
    double k = 2 * M_PI / 24;
    return (h1 - h0) + a / k * (sin(k * (h1 - peak)) - sin(k * (h0 - peak)));
}

/* The expected curve: base rate (requests/s outside bursts) and the bursts' hours. */
typedef struct expect {
    double a, peak, height, base_rps, mean_rps;
    int nb;
    double b0[COORD_WORKLOAD_MAX_BURSTS], b1[COORD_WORKLOAD_MAX_BURSTS]; /* hours, disjoint */
} expect_t;

/* From the config alone (hours: disjoint ones, as the tests choose, or the ones given). */
static void expect_init(expect_t *e, const coord_workload_config_t *c, const double *hours, int nb)
{
    const coord_workload_diurnal_t *d = &c->diurnal;
    double R = d->peak_to_trough;
    *e = (expect_t){.a = (R - 1) / (R + 1),
                    .peak = d->peak_hour,
                    .height = d->burst_height,
                    .mean_rps = c->load * coord_workload_capacity_rps(c, &cost),
                    .nb = nb};
    double w = 0;
    for (int i = 0; i < nb; i++) {
        e->b0[i] = hours[i];
        e->b1[i] = hours[i] + d->burst_minutes / 60;
        w += cos_hours(e->a, e->peak, e->b0[i], e->b1[i]);
    }
    /* the day's integral in hours is 24 + (height - 1) w, and its mean must be mean_rps */
    e->base_rps = e->mean_rps * 24 / (24 + (e->height - 1) * w);
}

/* Expected arrivals between hours h0 and h1 of the day. */
static double expect_count(const expect_t *e, double h0, double h1)
{
    double x = cos_hours(e->a, e->peak, h0, h1);
    for (int i = 0; i < e->nb; i++) {
        double lo = fmax(h0, e->b0[i]), hi = fmin(h1, e->b1[i]);
        if (hi > lo)
            x += (e->height - 1) * cos_hours(e->a, e->peak, lo, hi);
    }
    return e->base_rps * x * DAY_S / 24;
}

static int count_in(const coord_workload_request_t *r, int n, double h0, double h1)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        double h = r[i].at_ms / 1000.0 / DAY_S * 24;
        k += h >= h0 && h < h1;
    }
    return k;
}

static coord_workload_request_t *gen(const coord_workload_config_t *c, int *n)
{
    coord_workload_request_t *r = NULL;
    *n = 0;
    if (coord_workload_generate(c, &cost, &r, n) != TDL_OK) {
        diag("generate: %s", tdl_error_get());
        return NULL;
    }
    return r;
}

/* (1) per-hour counts on the curve, (2) the day's total, (3) the fitted cosine. */
static void check_curve(const char *what, const coord_workload_config_t *c, const double *hours,
                        int nb)
{
    expect_t e;
    expect_init(&e, c, hours, nb);
    int n;
    coord_workload_request_t *r = gen(c, &n);
    if (!ok(r != NULL, "%s: generated", what))
        return;
    int bin[24] = {0}, late = 0;
    for (int i = 0; i < n; i++) {
        double h = r[i].at_ms / 1000.0 / DAY_S * 24;
        late += r[i].at_ms > (int64_t)(DAY_S * 1000);
        bin[h >= 24 ? 23 : (int)h]++; /* at_ms rounds: the last instant may read 24 h */
    }
    ok(late == 0, "%s: requests 0 ends with the day (%d later)", what, late);

    double chi2 = 0, worst = 0;
    int worst_h = 0;
    for (int h = 0; h < 24; h++) {
        double x = expect_count(&e, h, h + 1), z = (bin[h] - x) / sqrt(x);
        chi2 += z * z;
        if (fabs(z) > fabs(worst))
            worst = z, worst_h = h;
        if (h % 6 == 0 || h == (int)e.peak || h == ((int)e.peak + 12) % 24)
            diag("%s: hour %2d: %6d arrivals, expected %8.1f (z %+.2f)", what, h, bin[h], x, z);
    }
    diag("%s: worst hour %d at z %+.2f; chi-square %.1f over 24 bins", what, worst_h, worst, chi2);
    ok(fabs(worst) <= NSIGMA, "%s: every hour within %g sigma of the curve's integral", what,
       NSIGMA);
    /* 24 degrees of freedom: mean 24, sd sqrt(48); 55 is exceeded with probability 3e-4 */
    ok(chi2 < 55, "%s: chi-square %.1f < 55 (24 bins)", what, chi2);

    double want = e.mean_rps * DAY_S, tol = NSIGMA * sqrt(want);
    diag("%s: %d requests in the day, load x capacity x day = %.1f (%.3f vs %.3f requests/s; "
         "tolerance %.0f = %g sqrt)",
         what, n, want, n / DAY_S, e.mean_rps, tol, NSIGMA);
    ok(fabs(n - want) <= tol, "%s: the day's mean rate is load x capacity", what);

    if (nb == 0) {
        /* least squares on cos and sin of the bins' centres, orthogonal over 24 equal bins; a
         * bin's mean of a cosine is sinc(pi / 24) of its value at the centre */
        double A = 0, B = 0, C = 0, sinc = sin(M_PI / 24) / (M_PI / 24);
        for (int h = 0; h < 24; h++) {
            double th = 2 * M_PI * (h + 0.5) / 24;
            A += bin[h] / 24.0;
            B += bin[h] * cos(th) / 12;
            C += bin[h] * sin(th) / 12;
        }
        double amp = sqrt(B * B + C * C) / sinc, phi = atan2(C, B);
        double a_fit = amp / A, r_fit = (1 + a_fit) / (1 - a_fit);
        double peak_fit = fmod(phi / (2 * M_PI) * 24 + 24, 24);
        /* Poisson errors of the fit: along the peak's direction for the amplitude, across it
         * for the phase; A's own error enters the ratio a = amp / A */
        double v_par = 0, v_perp = 0;
        for (int h = 0; h < 24; h++) {
            double th = 2 * M_PI * (h + 0.5) / 24, x = expect_count(&e, h, h + 1);
            v_par += x * pow(cos(th - phi) / 12, 2);
            v_perp += x * pow(sin(th - phi) / 12, 2);
        }
        double sd_a = sqrt(v_par / (sinc * sinc * A * A) + a_fit * a_fit / (24 * A));
        double sd_r = 2 / pow(1 - a_fit, 2) * sd_a;
        double sd_peak = sqrt(v_perp) / (amp * sinc) / (2 * M_PI) * 24;
        double R = c->diurnal.peak_to_trough;
        diag("%s: fitted peak/trough %.3f (want %g, sd %.3f), peak hour %.2f (want %g, sd %.2f)",
             what, r_fit, R, sd_r, peak_fit, e.peak, sd_peak);
        double dpeak = fabs(peak_fit - e.peak);
        dpeak = fmin(dpeak, 24 - dpeak);
        ok(fabs(r_fit - R) <= NSIGMA * sd_r, "%s: fitted peak/trough %.3f within %g sd of %g", what,
           r_fit, NSIGMA, R);
        ok(dpeak <= NSIGMA * sd_peak, "%s: fitted peak hour %.2f within %g sd of %g", what,
           peak_fit, NSIGMA, e.peak);
    }
    free(r);
}

/* (4) each burst's window holds about burst-height times the curve's expectation without it,
 * and the window of the same length just before it about the curve's. */
static void check_bursts(const char *what, const coord_workload_config_t *c,
                         const coord_workload_request_t *r, int n, const double *hours, int nb)
{
    expect_t e, flat;
    expect_init(&e, c, hours, nb);
    flat = e;
    flat.nb = 0; /* the same base rate, no burst: the non-burst expectation */
    double len = c->diurnal.burst_minutes / 60;
    for (int i = 0; i < nb; i++) {
        double h0 = hours[i], x0 = expect_count(&flat, h0, h0 + len);
        int k = count_in(r, n, h0, h0 + len);
        double ratio = k / x0, sd = sqrt(c->diurnal.burst_height * x0) / x0;
        diag("%s: burst at %.3f h: %d arrivals over a non-burst expectation of %.1f: x%.3f "
             "(want x%g, sd %.3f)",
             what, h0, k, x0, ratio, c->diurnal.burst_height, sd);
        ok(fabs(ratio - c->diurnal.burst_height) <= NSIGMA * sd,
           "%s: burst at %.2f h multiplies the rate by %.2f (want %g)", what, h0, ratio,
           c->diurnal.burst_height);
        if (h0 >= len) {
            double xb = expect_count(&flat, h0 - len, h0);
            int kb = count_in(r, n, h0 - len, h0);
            diag("%s: before it: %d arrivals, expected %.1f: x%.3f", what, kb, xb, kb / xb);
            ok(fabs(kb - xb) <= NSIGMA * sqrt(xb), "%s: the window before %.2f h is the curve's",
               what, h0);
        }
    }
}

static void test_curve(void)
{
    coord_workload_config_t c;
    day_config(&c, 11);
    check_curve("R 4, peak 14 h", &c, NULL, 0);
    day_config(&c, 5);
    c.diurnal.peak_to_trough = 10;
    c.diurnal.peak_hour = 3.5;
    check_curve("R 10, peak 3.5 h", &c, NULL, 0);
    day_config(&c, 6);
    c.diurnal.peak_to_trough = 1;
    check_curve("R 1 (flat)", &c, NULL, 0);
}

static void test_bursts_given(void)
{
    coord_workload_config_t c;
    day_config(&c, 21);
    const double hours[] = {4, 15.5}; /* near the trough and near the peak */
    c.diurnal.nbursts = 2;
    c.diurnal.burst_minutes = 30;
    c.diurnal.burst_hours_given = 1;
    memcpy(c.diurnal.burst_hour, hours, sizeof(hours));
    check_curve("bursts at 4 and 15.5 h", &c, hours, 2);
    int n;
    coord_workload_request_t *r = gen(&c, &n);
    if (r)
        check_bursts("bursts at 4 and 15.5 h", &c, r, n, hours, 2);
    free(r);
    /* a taller burst, to see the height is the one asked for */
    c.diurnal.burst_height = 6;
    c.seed = 22;
    r = gen(&c, &n);
    if (r)
        check_bursts("height 6", &c, r, n, hours, 2);
    free(r);
}

static void test_bursts_drawn(void)
{
    coord_workload_config_t c;
    day_config(&c, 31);
    c.diurnal.nbursts = 3;
    c.diurnal.burst_minutes = 20;
    coord_workload_curve_t k, k2, k3;
    ok(coord_workload_curve_init(&c, &cost, &k) == TDL_OK && k.nbursts == 3,
       "drawn bursts: the curve resolves 3 hours");
    double hours[3];
    int in_day = 1;
    for (int i = 0; i < 3; i++) {
        hours[i] = k.burst_hour[i];
        in_day &= hours[i] >= 0 && hours[i] + 20.0 / 60 <= 24;
    }
    diag("seed 31: bursts at %.3f, %.3f, %.3f h", hours[0], hours[1], hours[2]);
    ok(in_day, "drawn bursts start and end within the day");
    coord_workload_curve_init(&c, &cost, &k2);
    ok(!memcmp(k.burst_hour, k2.burst_hour, sizeof(hours)), "the same seed draws the same hours");
    c.seed = 32;
    coord_workload_curve_init(&c, &cost, &k3);
    ok(memcmp(k.burst_hour, k3.burst_hour, sizeof(hours)), "another seed draws other hours");
    c.seed = 31;
    int disjoint = k.nwindows == 3;
    if (!disjoint) {
        diag("seed 31's bursts overlap; the window check needs disjoint ones");
    } else {
        int n;
        coord_workload_request_t *r = gen(&c, &n);
        if (r)
            check_bursts("drawn bursts", &c, r, n, hours, 3);
        free(r);
    }
    /* overlapping bursts do not compound: their union is one window at the height */
    coord_workload_config_t o;
    day_config(&o, 41);
    o.diurnal.nbursts = 2;
    o.diurnal.burst_hours_given = 1;
    o.diurnal.burst_hour[0] = 10, o.diurnal.burst_hour[1] = 10.25;
    o.diurnal.burst_minutes = 30;
    ok(coord_workload_curve_init(&o, &cost, &k) == TDL_OK && k.nwindows == 1 &&
           fabs(k.window_start_s[0] - 10 * DAY_S / 24) < 1e-9 &&
           fabs(k.window_end_s[0] - 10.75 * DAY_S / 24) < 1e-9,
       "overlapping bursts at 10 and 10.25 h for 30 minutes: one window, 10 .. 10.75 h");
    ok(fabs(coord_workload_curve_rate(&k, 10.5 * DAY_S / 24) /
                (k.base_rps * (1 + k.amplitude * cos(2 * M_PI * (10.5 - 14) / 24))) -
            3) < 1e-9,
       "inside both: the rate is 3 times the curve, not 9");
}

/* (5) the same seed gives the same bytes; another seed others; a count repeats the day. */
static void test_reproducible(void)
{
    coord_workload_config_t c;
    day_config(&c, 7);
    c.diurnal.nbursts = 2;
    char p1[] = "/tmp/tidal-diurnal-XXXXXX", p2[] = "/tmp/tidal-diurnal-XXXXXX",
         p3[] = "/tmp/tidal-diurnal-XXXXXX";
    close(mkstemp(p1));
    close(mkstemp(p2));
    close(mkstemp(p3));
    int n1, n2, n3;
    coord_workload_request_t *r1 = gen(&c, &n1), *r2 = gen(&c, &n2), *r3;
    c.seed = 8;
    r3 = gen(&c, &n3);
    ok(r1 && r2 && r3 && coord_workload_write(p1, r1, n1) == TDL_OK &&
           coord_workload_write(p2, r2, n2) == TDL_OK && coord_workload_write(p3, r3, n3) == TDL_OK,
       "three traces written");
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "cmp -s %s %s", p1, p2);
    ok(system(cmd) == 0, "seed 7 twice: byte-identical traces (%d requests)", n1);
    snprintf(cmd, sizeof(cmd), "cmp -s %s %s", p1, p3);
    ok(system(cmd) != 0, "seed 8: another trace (%d requests)", n3);
    unlink(p1), unlink(p2), unlink(p3);
    free(r1), free(r2), free(r3);

    day_config(&c, 9);
    c.requests = 45000; /* a day and a half */
    int n;
    coord_workload_request_t *r = gen(&c, &n);
    int sorted = r != NULL;
    for (int i = 1; r && i < n; i++)
        sorted &= r[i].at_ms >= r[i - 1].at_ms;
    ok(r && n == 45000 && sorted && r[n - 1].at_ms > DAY_S * 1000 &&
           r[n - 1].at_ms < 2 * DAY_S * 1000,
       "--requests 45000: the day repeats, in order (last at %.0f s)",
       r ? r[n - 1].at_ms / 1000.0 : -1.0);
    free(r);
}

/* (6) every bad value refused with TDL_ERR_INVALID_ARG, naming the option; outputs untouched. */
static void test_refused(void)
{
    static const struct {
        const char *what, *needle;
        int field;
        double v;
    } bad[] = {
        {"peak/trough below 1", "--peak-to-trough", 0, 0.5},
        {"peak/trough NaN", "--peak-to-trough", 0, NAN},
        {"peak hour -1", "--peak-hour", 1, -1},
        {"peak hour 25", "--peak-hour", 1, 25},
        {"day of 0 s", "--day-seconds", 2, 0},
        {"day of 0.5 s", "--day-seconds", 2, 0.5},
        {"day of infinite seconds", "--day-seconds", 2, INFINITY},
        {"-1 bursts", "--bursts", 3, -1},
        {"65 bursts", "--bursts", 3, 65},
        {"burst height 0.5", "--burst-height", 4, 0.5},
        {"burst height 101", "--burst-height", 4, 101},
        {"bursts of 0 minutes", "--burst-minutes", 5, 0},
        {"bursts of 1441 minutes", "--burst-minutes", 5, 1441},
        {"a burst past midnight (23.95 h for 10 min)", "--burst-hours", 6, 23.95},
        {"a burst at -1 h", "--burst-hours", 6, -1},
        {"a burst hour NaN", "--burst-hours", 6, NAN},
        {"load 0", "--load", 7, 0},
        {"diurnal with phases", "--phases", 8, 0},
        {"about 1e14 requests in the day", "--diurnal", 9, 0},
    };
    for (size_t i = 0; i < TDL_ARRAY_SIZE(bad); i++) {
        coord_workload_config_t c;
        day_config(&c, 1);
        coord_workload_diurnal_t *d = &c.diurnal;
        switch (bad[i].field) {
        case 0: d->peak_to_trough = bad[i].v; break;
        case 1: d->peak_hour = bad[i].v; break;
        case 2: d->day_s = bad[i].v; break;
        case 3: d->nbursts = (int)bad[i].v; break;
        case 4: d->burst_height = bad[i].v; break;
        case 5: d->burst_minutes = bad[i].v; break;
        case 6: d->nbursts = 1, d->burst_hours_given = 1, d->burst_hour[0] = bad[i].v; break;
        case 7: c.load = bad[i].v; break;
        case 8: c.nphases = 1, c.phase_load[0] = 1, c.phase_s[0] = 10; break;
        case 9: c.ranks = 1 << 20, c.load = 1e6; break;
        }
        coord_workload_request_t *sentinel = (coord_workload_request_t *)&c, *r = sentinel;
        int n = -7;
        tdl_status_t st = coord_workload_generate(&c, &cost, &r, &n);
        const char *msg = tdl_error_get();
        ok(st == TDL_ERR_INVALID_ARG && strstr(msg, bad[i].needle) && r == sentinel && n == -7,
           "refused: %s: %s", bad[i].what, msg);
    }
    coord_workload_config_t c;
    day_config(&c, 1);
    c.diurnal.on = 0;
    ok(coord_workload_config_check(&c) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "--requests 0"),
       "refused: requests 0 with neither phases nor diurnal: %s", tdl_error_get());
    coord_workload_config_default(&c);
    c.nphases = 2, c.phase_load[0] = c.phase_load[1] = 0, c.phase_s[0] = c.phase_s[1] = 10;
    ok(coord_workload_config_check(&c) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "--phases"),
       "refused: phases all at load 0 with --requests 1000 (it would never end): %s",
       tdl_error_get());
    coord_workload_curve_t k;
    coord_workload_config_default(&c);
    ok(coord_workload_curve_init(&c, &cost, &k) == TDL_ERR_INVALID_ARG,
       "refused: a curve without diurnal");
}

int main(void)
{
    coord_cost_model_default(&cost);
    double t0 = tdl_clock_s();
    test_curve();
    test_bursts_given();
    test_bursts_drawn();
    test_reproducible();
    test_refused();
    diag("%.2f s", tdl_clock_s() - t0);
    return done_testing();
}
