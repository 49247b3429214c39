/* AdamW against a step worked by hand, warm-up, clipping, EMA, training on a fixed small set
 * lowering the loss, and the validation loss of the EMA weights. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "dit/dit.h"
#include "train/train.h"

static void test_adamw(void)
{
    train_adamw_t o;
    ok(train_adamw_init(&o, 2, 0.9f, 0.999f, 1e-8f, 0.1f) == TDL_OK, "AdamW init");
    float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, -0.25f};
    /* step 1: m = 0.1 g, v = 0.001 g^2, bias-corrected m/sqrt(v) = sign(g);
     * p = p (1 - lr wd) - lr sign(g) with lr 0.01: 1 * 0.999 - 0.01, -2 * 0.999 + 0.01 */
    train_adamw_step(&o, p, g, 0.01f);
    is_near(p[0], 0.989, 1e-6, "AdamW step 1, positive gradient");
    is_near(p[1], -1.988, 1e-6, "AdamW step 1, negative gradient");
    /* step 2 with the same gradient: m_hat = g and v_hat = g^2 again, so the same move */
    train_adamw_step(&o, p, g, 0.01f);
    is_near(p[0], 0.989 * 0.999 - 0.01, 1e-6, "AdamW step 2");
    train_adamw_free(&o);
    is_near(train_lr_at(0, 1.0f, 4), 0.25, 1e-7, "warm-up starts at lr / warmup");
    is_near(train_lr_at(3, 1.0f, 4), 1.0, 1e-7, "warm-up reaches lr");
    float gr[2] = {3, 4};
    is_near(train_grad_clip(gr, 2, 1.0), 5.0, 1e-6, "clip reports the norm before clipping");
    is_near(sqrt(gr[0] * gr[0] + gr[1] * gr[1]), 1.0, 1e-5, "clipped to norm 1");
    float bad[2] = {NAN, 1};
    ok(!isfinite(train_grad_clip(bad, 2, 1.0)), "a NaN gradient shows as a non-finite norm");
    float ema[1] = {0}, cur[1] = {1};
    train_ema_update(ema, cur, 1, 0.9f);
    is_near(ema[0], 0.1, 1e-7, "EMA moves (1 - decay) of the way");
}

static void test_loss_decreases(void)
{
    enum { N = 16, S = 8 };
    uint8_t pix[N * S * S];
    int32_t labels[N];
    for (int i = 0; i < N; i++) {
        labels[i] = i % 4;
        for (int k = 0; k < S * S; k++) /* four classes of stripes */
            pix[i * S * S + k] = ((k / S + k % S * (i % 4)) % 4 < 2) ? 230 : 20;
    }
    train_dataset_t *ds;
    if (!ok(train_dataset_create(N, 1, S, S, 4, pix, labels, &ds) == TDL_OK, "small data set"))
        return;
    train_opts_t o = {.model = "tiny", .data = "(memory)", .steps = 120, .batch = 16,
                      .micro_batch = 8, .lr = 3e-3f, .clip = 1.0f, .ema_decay = 0.99f,
                      .warmup = 10, .seed = 3};
    train_trainer_t *tr;
    if (!ok(train_trainer_create_with_data(&o, ds, &tr) == TDL_OK, "trainer"))
        return;
    double first = 0, last = 0, loss;
    for (int s = 0; s < o.steps; s++) {
        train_trainer_step(tr, NULL, &loss, NULL);
        if (s < 10)
            first += loss / 10;
        if (s >= o.steps - 10)
            last += loss / 10;
    }
    ok(last < 0.7 * first, "training lowers the loss: %.4f over the first 10 steps, %.4f over "
                           "the last 10",
       first, last);
    is_int(train_trainer_steps_done(tr), o.steps, "steps counted");

    /* the validation loss of the EMA weights: the same number as a trainer whose weights are
     * that EMA, and the trained weights back in place afterwards */
    double v_model = NAN, v_ema = NAN, v_again = NAN, v_other = NAN;
    ok(train_trainer_val_loss(tr, NULL, N, false, &v_model) == TDL_OK, "validation loss");
    ok(train_trainer_val_loss(tr, NULL, N, true, &v_ema) == TDL_OK, "validation loss, EMA");
    tdl_status_t st = train_trainer_val_loss(tr, NULL, N, false, &v_again);
    ok(st == TDL_OK && v_again == v_model, "the trained weights are back after the EMA's validation (%.9g, %.9g)", v_model, v_again);
    ok(isfinite(v_ema) && v_ema != v_model, "the EMA weights score differently (%.6f, %.6f)",
       v_ema, v_model);
    train_dataset_t *ds2;
    train_trainer_t *other;
    if (ok(train_dataset_create(N, 1, S, S, 4, pix, labels, &ds2) == TDL_OK &&
               train_trainer_create_with_data(&o, ds2, &other) == TDL_OK,
           "a second trainer")) {
        dit_model_t *m = train_trainer_model(other);
        memcpy(m->params, train_trainer_ema(tr), m->num_params * sizeof(float));
        dit_model_params_changed(m);
        st = train_trainer_val_loss(other, NULL, N, false, &v_other);
        ok(st == TDL_OK && v_other == v_ema, "the EMA's validation loss is that of a model holding the EMA weights (%.9g, %.9g)",
           v_ema, v_other);
        train_trainer_free(other);
    }
    train_trainer_free(tr);
}

int main(void)
{
    test_adamw();
    test_loss_decreases();
    return done_testing();
}
