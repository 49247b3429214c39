/* The one encoding of the messages between the dispatcher and the executors (wire.h). Every
 * field is written by put_* and read by get_*, little-endian, through a cursor that never passes
 * the end of its buffer.
 *
 *   command   u32 op, then
 *     task    u32 kind, i32 steps, u8 flags (1: move, 2: cfg_parallel), u8 nranks, u8 nprev,
 *             u8 0, u64 seq, i32 ranks[nranks], i32 prev[nprev], the spec: u64 id, u64 seed,
 *             i32 n, i32 res, i32 steps, i32 label, f32 cfg, i32 sampler, i32 priority,
 *             f64 deadline_ms
 *     other   u32 len, u8 data[len]
 *   ack       i32 status */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "gfc/gfc.h"
#include "serve/serve.h"
#include "serve/wire.h"

#define FLAG_MOVE         1u
#define FLAG_CFG_PARALLEL 2u
#define TASK_FIXED_BYTES  (4 + 4 + 4 + 8 + SPEC_BYTES) /* after the op, without the rank lists */
#define SPEC_BYTES        (8 + 8 + 4 * 4 + 4 + 4 + 4 + 8)

_Static_assert(TASK_FIXED_BYTES + 2 * 4 * SERVE_MAX_DEGREE <= SERVE_WIRE_CMD_MAX &&
                   4 + 4 + SERVE_USER_BYTES <= SERVE_WIRE_CMD_MAX,
               "SERVE_WIRE_CMD_MAX holds every command");
_Static_assert(SERVE_MAX_DEGREE <= UINT8_MAX, "rank counts travel as one byte");
/* a field added to serve_traj_spec_t needs its place in put_spec and get_spec */
_Static_assert(sizeof(serve_traj_spec_t) == 56, "serve_traj_spec_t as the wire knows it");
_Static_assert(sizeof(((serve_inflight_t *)0)->ack) == SERVE_WIRE_ACK_BYTES,
               "serve_inflight_t receives an ack whole");

tdl_status_t serve_wire_pair_group(gfc_runtime_t *rt, int worker, uint64_t ns, int pair[2],
                                   gfc_group_t *g)
{
    pair[0] = 0, pair[1] = worker;
    return gfc_group_init(g, rt, pair, 2, ns);
}

uint64_t serve_wire_task_ns(uint64_t base, uint64_t id, uint64_t seq)
{
    uint64_t z = base ^ (id * 0x9e3779b97f4a7c15ull) ^ (seq * 0xbf58476d1ce4e5b9ull);
    z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
    return z ^ (z >> 29);
}

/* ---- writing --------------------------------------------------------------------------------- */

static unsigned char *put_u8(unsigned char *p, uint8_t v)
{
    *p = v;
    return p + 1;
}

static unsigned char *put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return p + 4;
}

static unsigned char *put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return p + 8;
}

static unsigned char *put_i32(unsigned char *p, int32_t v)
{
    return put_u32(p, (uint32_t)v);
}

static unsigned char *put_f32(unsigned char *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    return put_u32(p, u);
}

static unsigned char *put_f64(unsigned char *p, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    return put_u64(p, u);
}

static unsigned char *put_spec(unsigned char *p, const serve_traj_spec_t *s)
{
    p = put_u64(p, s->id), p = put_u64(p, s->seed);
    p = put_i32(p, s->n), p = put_i32(p, s->res), p = put_i32(p, s->steps);
    p = put_i32(p, s->label), p = put_f32(p, s->cfg), p = put_i32(p, s->sampler);
    p = put_i32(p, s->priority);
    return put_f64(p, s->deadline_ms);
}

/* ---- reading --------------------------------------------------------------------------------- */

/* A cursor over received bytes; a read past the end yields zeros and clears ok. */
typedef struct reader {
    const unsigned char *p;
    size_t left;
    bool ok;
} reader_t;

static const unsigned char *take(reader_t *r, size_t n)
{
    static const unsigned char zeros[8];
    if (!r->ok || r->left < n) {
        r->ok = false;
        return zeros;
    }
    const unsigned char *p = r->p;
    r->p += n, r->left -= n;
    return p;
}

static uint8_t get_u8(reader_t *r)
{
    return *take(r, 1);
}

static uint32_t get_u32(reader_t *r)
{
    const unsigned char *p = take(r, 4);
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(reader_t *r)
{
    const unsigned char *p = take(r, 8);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int32_t get_i32(reader_t *r)
{
    uint32_t u = get_u32(r);
    int32_t v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

static float get_f32(reader_t *r)
{
    uint32_t u = get_u32(r);
    float v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

static double get_f64(reader_t *r)
{
    uint64_t u = get_u64(r);
    double v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

static void get_spec(reader_t *r, serve_traj_spec_t *s)
{
    s->id = get_u64(r), s->seed = get_u64(r);
    s->n = get_i32(r), s->res = get_i32(r), s->steps = get_i32(r);
    s->label = get_i32(r), s->cfg = get_f32(r), s->sampler = get_i32(r);
    s->priority = get_i32(r);
    s->deadline_ms = get_f64(r);
}

/* ---- commands -------------------------------------------------------------------------------- */

/* What is wrong with a rank list (NULL: nothing), into why[size]. */
static const char *ranks_problem(const char *name, const int *ranks, int n, int lo, char *why,
                                 size_t size)
{
    if (n < lo || n > SERVE_MAX_DEGREE) {
        snprintf(why, size, "%d %s (%d to %d)", n, name, lo, SERVE_MAX_DEGREE);
        return why;
    }
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 1) {
            snprintf(why, size, "%s[%d] is %d (executors are ranks >= 1)", name, i, ranks[i]);
            return why;
        }
        if (serve_wire_member(ranks, i, ranks[i])) {
            snprintf(why, size, "rank %d twice in %s", ranks[i], name);
            return why;
        }
    }
    return NULL;
}

/* What is wrong with a task's fields, as either side sees them (NULL: nothing). */
static const char *task_problem(const serve_wire_task_t *t, char *why, size_t size)
{
    const char *p;
    if ((unsigned)t->kind > SERVE_TASK_DECODE) {
        snprintf(why, size, "kind %u (prepare, step_chunk or decode)", (unsigned)t->kind);
        return why;
    }
    if ((p = ranks_problem("ranks", t->ranks, t->nranks, 1, why, size)) ||
        (p = ranks_problem("prev", t->prev, t->nprev, 0, why, size)))
        return p;
    if (t->move && t->nprev == 0) {
        snprintf(why, size, "a move with no ranks holding the state");
        return why;
    }
    if (t->batch_after < 0 || t->batch_after >= SERVE_MAX_BATCH ||
        (t->batch_after > 0 && (t->kind != SERVE_TASK_STEP_CHUNK || t->cfg_parallel))) {
        snprintf(why, size,
                 "%d tasks batched after it (0 to %d, and only after a step_chunk without CFG "
                 "parallelism)",
                 t->batch_after, SERVE_MAX_BATCH - 1);
        return why;
    }
    return NULL;
}

tdl_status_t serve_wire_task_encode(const serve_wire_task_t *t, unsigned char *buf, size_t *len_out)
{
    char why[128];
    if (task_problem(t, why, sizeof(why)))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "request %llu: task %llu: %s",
                               (unsigned long long)t->spec.id, (unsigned long long)t->seq, why);
    unsigned char *p = put_u32(buf, SERVE_OP_TASK);
    p = put_u32(p, (uint32_t)t->kind), p = put_i32(p, t->steps);
    p = put_u8(p, (uint8_t)((t->move ? FLAG_MOVE : 0) | (t->cfg_parallel ? FLAG_CFG_PARALLEL : 0)));
    p = put_u8(p, (uint8_t)t->nranks), p = put_u8(p, (uint8_t)t->nprev);
    p = put_u8(p, (uint8_t)t->batch_after);
    p = put_u64(p, t->seq);
    for (int i = 0; i < t->nranks; i++)
        p = put_i32(p, t->ranks[i]);
    for (int i = 0; i < t->nprev; i++)
        p = put_i32(p, t->prev[i]);
    p = put_spec(p, &t->spec);
    *len_out = (size_t)(p - buf);
    return TDL_OK;
}

tdl_status_t serve_wire_msg_encode(const serve_ctl_msg_t *msg, unsigned char *buf, size_t *len_out)
{
    if (msg->op < SERVE_OP_STOP || msg->len > SERVE_USER_BYTES)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "a command of op %u with %u bytes (op >= %d, at most %d bytes)",
                               msg->op, msg->len, SERVE_OP_STOP, SERVE_USER_BYTES);
    unsigned char *p = put_u32(buf, msg->op);
    p = put_u32(p, msg->len);
    memcpy(p, msg->data, msg->len);
    *len_out = (size_t)(p - buf) + msg->len;
    return TDL_OK;
}

static tdl_status_t decode_task(reader_t *r, size_t len, serve_wire_task_t *t)
{
    memset(t, 0, sizeof(*t));
    uint32_t kind = get_u32(r);
    t->steps = get_i32(r);
    uint8_t flags = get_u8(r), nranks = get_u8(r), nprev = get_u8(r), after = get_u8(r);
    t->seq = get_u64(r);
    if (!r->ok)
        return tdl_error_raise(TDL_ERR_CORRUPT, "a task of %zu bytes (at least %d)", len,
                               4 + TASK_FIXED_BYTES);
    if (flags & ~(FLAG_MOVE | FLAG_CFG_PARALLEL))
        return tdl_error_raise(TDL_ERR_CORRUPT, "a task with flags 0x%x (1 move, 2 cfg_parallel)",
                               flags);
    if (after >= SERVE_MAX_BATCH || (after > 0 && (kind != SERVE_TASK_STEP_CHUNK ||
                                                   (flags & FLAG_CFG_PARALLEL))))
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "a task of kind %u with %u batched after it (0 to %d, and only "
                               "after a step_chunk without CFG parallelism)",
                               kind, after, SERVE_MAX_BATCH - 1);
    if (nranks < 1 || nranks > SERVE_MAX_DEGREE || nprev > SERVE_MAX_DEGREE)
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "a task on %u ranks with %u holding its state "
                               "(1 to %d, and 0 to %d)",
                               nranks, nprev, SERVE_MAX_DEGREE, SERVE_MAX_DEGREE);
    size_t want = 4 + TASK_FIXED_BYTES + 4 * ((size_t)nranks + nprev);
    if (len != want)
        return tdl_error_raise(TDL_ERR_CORRUPT, "a task on %u + %u ranks of %zu bytes (it is %zu)",
                               nranks, nprev, len, want);
    t->kind = kind > SERVE_TASK_DECODE ? SERVE_TASK_FINALIZE : (serve_task_kind_t)kind;
    t->move = flags & FLAG_MOVE, t->cfg_parallel = flags & FLAG_CFG_PARALLEL;
    t->nranks = nranks, t->nprev = nprev, t->batch_after = after;
    for (int i = 0; i < nranks; i++)
        t->ranks[i] = get_i32(r);
    for (int i = 0; i < nprev; i++)
        t->prev[i] = get_i32(r);
    get_spec(r, &t->spec);
    char why[128];
    if (kind > SERVE_TASK_DECODE)
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "request %llu: task %llu: kind %u (0 prepare, 1 step_chunk, 2 "
                               "decode)",
                               (unsigned long long)t->spec.id, (unsigned long long)t->seq, kind);
    if (task_problem(t, why, sizeof(why)))
        return tdl_error_raise(TDL_ERR_CORRUPT, "request %llu: task %llu: %s",
                               (unsigned long long)t->spec.id, (unsigned long long)t->seq, why);
    return TDL_OK;
}

tdl_status_t serve_wire_cmd_decode(const unsigned char *buf, size_t len, serve_wire_cmd_t *cmd_out)
{
    reader_t r = {.p = buf, .left = len, .ok = true};
    serve_wire_cmd_t c = {.op = get_u32(&r)};
    tdl_status_t st = TDL_OK;
    if (!r.ok) {
        st = tdl_error_raise(TDL_ERR_CORRUPT, "a command of %zu bytes (at least 4)", len);
    } else if (c.op == SERVE_OP_TASK) {
        st = decode_task(&r, len, &c.task);
    } else if (c.op < SERVE_OP_STOP) {
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "a command of op %u (%d: a task, %d: stop, above: the caller's own)",
                             c.op, SERVE_OP_TASK, SERVE_OP_STOP);
    } else {
        uint32_t n = get_u32(&r);
        if (!r.ok || n > SERVE_USER_BYTES || r.left != n) {
            st = tdl_error_raise(TDL_ERR_CORRUPT,
                                 "a command of op %u in %zu bytes with a payload of %u (at most "
                                 "%d, and exactly the bytes after its 8-byte header)",
                                 c.op, len, r.ok ? n : 0, SERVE_USER_BYTES);
        } else {
            c.msg.op = c.op, c.msg.len = n;
            memcpy(c.msg.data, r.p, n);
        }
    }
    if (st == TDL_OK)
        *cmd_out = c;
    return st;
}

/* ---- acks ------------------------------------------------------------------------------------ */

void serve_wire_ack_encode(int32_t status, unsigned char buf[SERVE_WIRE_ACK_BYTES])
{
    put_i32(buf, status);
}

tdl_status_t serve_wire_ack_decode(const unsigned char *buf, size_t len, int32_t *status_out)
{
    if (len != SERVE_WIRE_ACK_BYTES)
        return tdl_error_raise(TDL_ERR_CORRUPT, "an ack of %zu bytes (it is %d)", len,
                               SERVE_WIRE_ACK_BYTES);
    reader_t r = {.p = buf, .left = len, .ok = true};
    *status_out = get_i32(&r);
    return TDL_OK;
}

/* ---- co-location: memberships, reloads, reports -------------------------------------------- */

#define MEMBERS_FIXED_BYTES (4 + 4 + 4)
#define REPORT_FIXED_BYTES  (4 + 4 + 4 + 8 + 8 + 4)

_Static_assert(MEMBERS_FIXED_BYTES + 2 * SERVE_WIRE_MAX_WORKERS <= SERVE_USER_BYTES,
               "a membership fits a command");
_Static_assert(REPORT_FIXED_BYTES + sizeof(((serve_wire_report_t *)0)->path) <= SERVE_USER_BYTES,
               "a report fits serve_worker_report");

tdl_status_t serve_wire_members_encode(uint32_t op, const serve_wire_members_t *m,
                                       serve_ctl_msg_t *msg)
{
    if (m->n < 1 || m->n > SERVE_WIRE_MAX_WORKERS)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "a membership of %u ranks (1 to %d)", m->n,
                               SERVE_WIRE_MAX_WORKERS);
    unsigned char *p = msg->data;
    p = put_u32(p, m->epoch), p = put_u32(p, m->n), p = put_i32(p, m->root);
    for (uint32_t i = 0; i < m->n; i++)
        p = put_u8(put_u8(p, (uint8_t)(m->ranks[i] & 0xff)), (uint8_t)(m->ranks[i] >> 8));
    msg->op = op;
    msg->len = (uint32_t)(p - msg->data);
    return TDL_OK;
}

tdl_status_t serve_wire_members_decode(const serve_ctl_msg_t *msg, int world,
                                       serve_wire_members_t *m_out)
{
    reader_t r = {
        .p = msg->data, .left = TDL_MIN(msg->len, (uint32_t)SERVE_USER_BYTES), .ok = true};
    serve_wire_members_t m = {.epoch = get_u32(&r), .n = get_u32(&r), .root = get_i32(&r)};
    if (!r.ok || m.n < 1 || m.n > SERVE_WIRE_MAX_WORKERS || (int)m.n > world - 1 ||
        msg->len != MEMBERS_FIXED_BYTES + 2 * m.n)
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "a membership of %u bytes naming %u ranks in a "
                               "world of %d",
                               msg->len, r.ok ? m.n : 0, world);
    bool root = false;
    for (uint32_t i = 0; i < m.n; i++) {
        int lo = get_u8(&r), k = lo | get_u8(&r) << 8;
        if (k < 1 || k >= world)
            return tdl_error_raise(TDL_ERR_CORRUPT,
                                   "a membership naming rank %d (workers are 1 "
                                   "to %d)",
                                   k, world - 1);
        for (uint32_t j = 0; j < i; j++)
            if (m.ranks[j] == k)
                return tdl_error_raise(TDL_ERR_CORRUPT, "a membership naming rank %d twice", k);
        m.ranks[i] = (uint16_t)k;
        root |= k == m.root;
    }
    if (!root)
        return tdl_error_raise(TDL_ERR_CORRUPT, "a membership whose root %d is not a member",
                               m.root);
    *m_out = m;
    return TDL_OK;
}

tdl_status_t serve_wire_reload_encode(const char *path, serve_ctl_msg_t *msg)
{
    size_t n = strlen(path);
    if (n < 1 || n > SERVE_USER_BYTES)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "a checkpoint path of %zu bytes (1 to %d): "
                               "use a shorter --out",
                               n, SERVE_USER_BYTES);
    msg->op = SERVE_OP_RELOAD;
    msg->len = (uint32_t)n;
    memcpy(msg->data, path, n);
    return TDL_OK;
}

tdl_status_t serve_wire_reload_decode(const serve_ctl_msg_t *msg,
                                      char path_out[SERVE_USER_BYTES + 1])
{
    if (msg->len < 1 || msg->len > SERVE_USER_BYTES || memchr(msg->data, 0, msg->len))
        return tdl_error_raise(TDL_ERR_CORRUPT, "a reload of %u bytes%s", msg->len,
                               msg->len <= SERVE_USER_BYTES && memchr(msg->data, 0, msg->len)
                                   ? " with a NUL in its path"
                                   : "");
    memcpy(path_out, msg->data, msg->len);
    path_out[msg->len] = '\0';
    return TDL_OK;
}

tdl_status_t serve_wire_drop_encode(uint64_t request, serve_ctl_msg_t *msg)
{
    msg->op = SERVE_OP_DROP;
    msg->len = 8;
    for (int i = 0; i < 8; i++)
        msg->data[i] = (unsigned char)(request >> (8 * i));
    return TDL_OK;
}

tdl_status_t serve_wire_drop_decode(const serve_ctl_msg_t *msg, uint64_t *request_out)
{
    if (msg->op != SERVE_OP_DROP || msg->len != 8)
        return tdl_error_raise(TDL_ERR_CORRUPT, "a drop of %u bytes (8: a request number)",
                               msg->len);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)msg->data[i] << (8 * i);
    *request_out = v;
    return TDL_OK;
}

tdl_status_t serve_wire_report_encode(const serve_wire_report_t *r, unsigned char *buf,
                                      size_t *len_out)
{
    size_t n = strnlen(r->path, sizeof(r->path));
    if (n == sizeof(r->path))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "a report's text of %zu bytes or more (at "
                               "most %zu)",
                               n, sizeof(r->path) - 1);
    unsigned char *p = buf;
    p = put_u32(p, r->kind), p = put_i32(p, r->rank), p = put_i32(p, r->members);
    p = put_u64(p, (uint64_t)r->step), p = put_f64(p, r->loss), p = put_u32(p, (uint32_t)n);
    memcpy(p, r->path, n);
    *len_out = (size_t)(p - buf) + n;
    return TDL_OK;
}

tdl_status_t serve_wire_report_decode(const unsigned char *buf, size_t len,
                                      serve_wire_report_t *r_out)
{
    reader_t rd = {.p = buf, .left = len, .ok = true};
    serve_wire_report_t r = {.kind = get_u32(&rd), .rank = get_i32(&rd)};
    r.members = get_i32(&rd);
    r.step = (int64_t)get_u64(&rd);
    r.loss = get_f64(&rd);
    uint32_t n = get_u32(&rd);
    if (!rd.ok || n >= sizeof(r.path) || len != REPORT_FIXED_BYTES + n)
        return tdl_error_raise(TDL_ERR_CORRUPT, "a report of %zu bytes", len);
    if (r.kind < SERVE_REPORT_STEP || r.kind >= SERVE_REPORT_KINDS)
        return tdl_error_raise(TDL_ERR_CORRUPT, "a report of kind %u", r.kind);
    const unsigned char *text = take(&rd, n);
    if (memchr(text, 0, n))
        return tdl_error_raise(TDL_ERR_CORRUPT, "a report whose text holds a NUL");
    memcpy(r.path, text, n);
    r.path[n] = '\0';
    *r_out = r;
    return TDL_OK;
}
