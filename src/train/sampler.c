/* The data order: epoch e visits 0..n-1 in the order of a Fisher-Yates shuffle driven by
 * tdl_rng(seed, stream = e). The order is a pure function of (seed, epoch), never of how many
 * ranks train or how the indices are consumed, so every rank computes the same global batch
 * and a resized group resumes from a saved (epoch, pos) exactly where the old one stopped. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "train/train.h"

tdl_status_t train_sampler_init(train_sampler_t *s, uint64_t n, uint64_t seed)
{
    if (!s)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "train_sampler_init: NULL sampler");
    if (n == 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "sampler: the data set is empty (n = 0): nothing to sample");
    if (n > SIZE_MAX / sizeof(uint64_t))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "sampler: n = %llu is too large",
                               (unsigned long long)n);
    uint64_t *perm = malloc((size_t)n * sizeof(*perm));
    if (!perm)
        return tdl_error_raise(TDL_ERR_NOMEM, "sampler: cannot allocate an order of %llu indices",
                               (unsigned long long)n);
    s->seed = seed;
    s->n = n;
    s->epoch = 0;
    s->pos = 0;
    s->perm = perm;
    s->perm_epoch = UINT64_MAX;
    return TDL_OK;
}

void train_sampler_free(train_sampler_t *s)
{
    if (!s)
        return;
    free(s->perm);
    memset(s, 0, sizeof(*s));
}

/* perm = the order of s->epoch. */
static void sampler_shuffle(train_sampler_t *s)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, s->seed, s->epoch);
    uint64_t *p = s->perm;
    for (uint64_t i = 0; i < s->n; i++)
        p[i] = i;
    for (uint64_t i = s->n - 1; i > 0; i--) {
        uint64_t j = tdl_rng_below(&rng, i + 1);
        uint64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    s->perm_epoch = s->epoch;
}

uint64_t train_sampler_next(train_sampler_t *s)
{
    if (s->perm_epoch != s->epoch)
        sampler_shuffle(s);
    uint64_t index = s->perm[s->pos];
    if (++s->pos == s->n) {
        s->epoch++;
        s->pos = 0;
    }
    return index;
}

void train_sampler_take(train_sampler_t *s, uint64_t *out, size_t count)
{
    for (size_t i = 0; i < count; i++)
        out[i] = train_sampler_next(s);
}

void train_sampler_cursor(const train_sampler_t *s, uint64_t *epoch_out, uint64_t *pos_out)
{
    *epoch_out = s->epoch;
    *pos_out = s->pos;
}

tdl_status_t train_sampler_seek(train_sampler_t *s, uint64_t epoch, uint64_t pos)
{
    if (pos > s->n)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "sampler: position %llu is beyond the %llu indices of an epoch",
                               (unsigned long long)pos, (unsigned long long)s->n);
    /* UINT64_MAX marks "no order cached" in perm_epoch, so it is no epoch. */
    if (epoch == UINT64_MAX || (pos == s->n && epoch == UINT64_MAX - 1))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "sampler: epoch %llu is out of range",
                               (unsigned long long)epoch);
    if (pos == s->n) { /* the end of an epoch is the start of the next */
        epoch++;
        pos = 0;
    }
    s->epoch = epoch;
    s->pos = pos;
    return TDL_OK;
}
