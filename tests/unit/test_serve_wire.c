/* The wire between rank 0 and the executors (src/serve/wire.h): every command and ack comes back
 * from its encoding as it went in; a command cut short, one byte too long, or with a field out of
 * range is refused with TDL_ERR_CORRUPT naming the field and leaves the output alone; random
 * corruptions of a valid command are decoded or refused, never read past the end (ASan build).
 * Also the guidance rule of serve.h. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "serve/serve.h"
#include "serve/wire.h"
#include "tap.h"

/* byte offsets of the task's fields (wire.c's layout) */
enum {
    OFF_OP = 0,
    OFF_KIND = 4,
    OFF_FLAGS = 12,
    OFF_NRANKS = 13,
    OFF_NPREV = 14,
    OFF_BATCH = 15,
    OFF_RANKS = 24
};

static serve_wire_task_t sample_task(void)
{
    serve_wire_task_t t = {.kind = SERVE_TASK_STEP_CHUNK,
                           .steps = 3,
                           .move = true,
                           .cfg_parallel = true,
                           .nranks = 2,
                           .nprev = 1,
                           .ranks = {2, 3},
                           .prev = {1},
                           .seq = 0x0102030405060708ull};
    t.spec = (serve_traj_spec_t){.id = 0xfedcba9876543210ull,
                                 .seed = (1ull << 53) - 1,
                                 .n = 16,
                                 .res = 128,
                                 .steps = 1000,
                                 .label = -1,
                                 .cfg = 4.25f,
                                 .sampler = DIT_SAMPLER_EULER,
                                 .priority = -1000000,
                                 .deadline_ms = 86400000.5};
    return t;
}

static bool same_task(const serve_wire_task_t *a, const serve_wire_task_t *b)
{
    const serve_traj_spec_t *x = &a->spec, *y = &b->spec;
    return a->kind == b->kind && a->steps == b->steps && a->move == b->move &&
           a->cfg_parallel == b->cfg_parallel && a->nranks == b->nranks && a->nprev == b->nprev &&
           a->batch_after == b->batch_after &&
           memcmp(a->ranks, b->ranks, (size_t)a->nranks * sizeof(int)) == 0 &&
           memcmp(a->prev, b->prev, (size_t)a->nprev * sizeof(int)) == 0 && a->seq == b->seq &&
           x->id == y->id && x->seed == y->seed && x->n == y->n && x->res == y->res &&
           x->steps == y->steps && x->label == y->label && x->cfg == y->cfg &&
           x->sampler == y->sampler && x->priority == y->priority &&
           x->deadline_ms == y->deadline_ms;
}

/* Decoding buf must fail with TDL_ERR_CORRUPT, a message holding `word`, and *out untouched. */
static void refused(const unsigned char *buf, size_t len, const char *word, const char *what)
{
    serve_wire_cmd_t out, before;
    memset(&out, 0x5a, sizeof(out));
    memcpy(&before, &out, sizeof(out));
    tdl_status_t st = serve_wire_cmd_decode(buf, len, &out);
    const char *msg = tdl_error_get();
    if (!ok(st == TDL_ERR_CORRUPT && strstr(msg, word) && memcmp(&out, &before, sizeof(out)) == 0,
            "%s: refused, naming '%s'", what, word))
        diag("status %d: %s", (int)st, msg);
}

static void test_task_round_trip(void)
{
    serve_wire_task_t t = sample_task();
    unsigned char buf[SERVE_WIRE_CMD_MAX];
    size_t len = 0;
    is_int(serve_wire_task_encode(&t, buf, &len), TDL_OK, "task encoded");
    is_int(len, 76 + 4 * 3, "a task on 2 + 1 ranks is 88 bytes");
    ok(buf[OFF_OP] == SERVE_OP_TASK && buf[1] == 0 && buf[OFF_KIND] == 1 && buf[OFF_FLAGS] == 3 &&
           buf[OFF_NRANKS] == 2 && buf[OFF_NPREV] == 1 && buf[16] == 0x08 && buf[23] == 0x01 &&
           buf[OFF_RANKS] == 2 && buf[OFF_RANKS + 4] == 3 && buf[OFF_RANKS + 8] == 1,
       "fields little-endian where the layout puts them");
    serve_wire_cmd_t c;
    is_int(serve_wire_cmd_decode(buf, len, &c), TDL_OK, "task decoded");
    ok(c.op == SERVE_OP_TASK && same_task(&c.task, &t), "the task comes back as it went");

    /* the other kinds, no move, the most ranks */
    serve_wire_task_t u = {.kind = SERVE_TASK_DECODE,
                           .nranks = SERVE_MAX_DEGREE,
                           .nprev = SERVE_MAX_DEGREE,
                           .seq = 9,
                           .spec = t.spec};
    for (int i = 0; i < SERVE_MAX_DEGREE; i++)
        u.ranks[i] = i + 1, u.prev[i] = SERVE_MAX_DEGREE - i;
    ok(serve_wire_task_encode(&u, buf, &len) == TDL_OK && len <= SERVE_WIRE_CMD_MAX &&
           serve_wire_cmd_decode(buf, len, &c) == TDL_OK && same_task(&c.task, &u),
       "a DECODE on %d ranks with %d holding the state, in %zu bytes", SERVE_MAX_DEGREE,
       SERVE_MAX_DEGREE, len);
    serve_wire_task_t p = {.kind = SERVE_TASK_PREPARE, .nranks = 1, .ranks = {5}, .spec = t.spec};
    ok(serve_wire_task_encode(&p, buf, &len) == TDL_OK &&
           serve_wire_cmd_decode(buf, len, &c) == TDL_OK && same_task(&c.task, &p),
       "a PREPARE on one rank, none holding the state");
    serve_wire_task_t b = t;
    b.cfg_parallel = false, b.batch_after = SERVE_MAX_BATCH - 1;
    ok(serve_wire_task_encode(&b, buf, &len) == TDL_OK && buf[OFF_BATCH] == SERVE_MAX_BATCH - 1 &&
           serve_wire_cmd_decode(buf, len, &c) == TDL_OK && same_task(&c.task, &b),
       "a STEP_CHUNK with %d more of its batch after it", SERVE_MAX_BATCH - 1);
    serve_wire_task_t bad[3] = {b, b, u};
    bad[0].batch_after = SERVE_MAX_BATCH, bad[1].cfg_parallel = true, bad[2].batch_after = 1;
    const char *why[3] = {"SERVE_MAX_BATCH after it", "with CFG parallelism", "after a DECODE"};
    for (int i = 0; i < 3; i++) {
        len = 0;
        tdl_status_t st = serve_wire_task_encode(&bad[i], buf, &len);
        ok(st == TDL_ERR_INVALID_ARG && len == 0 && strstr(tdl_error_get(), "batched"),
           "encode refuses a batch %s: %s", why[i], tdl_error_get());
    }
}

static void test_task_refused(void)
{
    serve_wire_task_t t = sample_task();
    unsigned char good[SERVE_WIRE_CMD_MAX], buf[SERVE_WIRE_CMD_MAX + 1];
    size_t len = 0;
    serve_wire_task_encode(&t, good, &len);

    int cut = 0;
    for (size_t n = 0; n < len; n++) {
        serve_wire_cmd_t out = {.op = 77};
        cut += serve_wire_cmd_decode(good, n, &out) == TDL_ERR_CORRUPT && out.op == 77;
    }
    is_int(cut, len, "every cut of the task (0 .. %zu bytes) refused", len - 1);
    refused(good, 3, "bytes", "3 bytes");
    refused(good, 20, "bytes", "a task's header cut");
    refused(good, len - 1, "bytes", "the spec cut by one byte");
    memcpy(buf, good, len), buf[len] = 0;
    refused(buf, len + 1, "bytes", "one byte too many");

#define PATCHED(off, val, word, what)                                                              \
    do {                                                                                           \
        memcpy(buf, good, len);                                                                    \
        buf[off] = (unsigned char)(val);                                                           \
        refused(buf, len, word, what);                                                             \
    } while (0)
    PATCHED(OFF_KIND, 3, "kind", "kind FINALIZE");
    PATCHED(OFF_KIND + 3, 0x80, "kind", "a kind past any enum");
    PATCHED(OFF_FLAGS, 4, "flags", "an unknown flag");
    PATCHED(OFF_BATCH, 1, "batched", "a batch after a chunk with CFG parallelism");
    buf[OFF_FLAGS] = 1; /* move only */
    memcpy(good + OFF_FLAGS, buf + OFF_FLAGS, 1);
    PATCHED(OFF_BATCH, SERVE_MAX_BATCH, "batched", "SERVE_MAX_BATCH batched after a chunk");
    memcpy(buf, good, len), buf[OFF_BATCH] = SERVE_MAX_BATCH - 1;
    serve_wire_cmd_t in_batch;
    ok(serve_wire_cmd_decode(buf, len, &in_batch) == TDL_OK &&
           in_batch.task.batch_after == SERVE_MAX_BATCH - 1,
       "a chunk with %d batched after it is taken", SERVE_MAX_BATCH - 1);
    memcpy(buf, good, len), buf[OFF_BATCH] = 1, buf[OFF_KIND] = 2;
    refused(buf, len, "batched", "a DECODE with a batch after it");
    good[OFF_FLAGS] = 3;
    PATCHED(OFF_NRANKS, 0, "ranks", "no ranks");
    PATCHED(OFF_NRANKS, SERVE_MAX_DEGREE + 1, "ranks", "more ranks than SERVE_MAX_DEGREE");
    PATCHED(OFF_NPREV, SERVE_MAX_DEGREE + 1, "ranks", "more holders than SERVE_MAX_DEGREE");
    PATCHED(OFF_NRANKS, 3, "bytes", "a rank count the length does not hold");
    PATCHED(OFF_RANKS, 0, "ranks[0] is 0", "rank 0 among the ranks");
    PATCHED(OFF_RANKS + 3, 0x80, "ranks[0]", "a negative rank");
    PATCHED(OFF_RANKS + 4, 2, "twice in ranks", "a rank repeated");
    PATCHED(OFF_RANKS + 8, 0, "prev[0]", "rank 0 holding the state");
    memcpy(buf, good, len);
    buf[OFF_NPREV] = 0, buf[OFF_FLAGS] = 1;
    memmove(buf + OFF_RANKS + 8, buf + OFF_RANKS + 12, len - OFF_RANKS - 12);
    refused(buf, len - 4, "move", "a move with no ranks holding the state");
    PATCHED(OFF_OP, 0, "op 0", "op 0");

    /* what the encoder would not send */
    size_t n = 0;
    serve_wire_task_t b = t;
    b.nranks = 0;
    ok(serve_wire_task_encode(&b, buf, &n) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "ranks"),
       "encode refuses a task on no ranks");
    b = t, b.kind = SERVE_TASK_FINALIZE;
    ok(serve_wire_task_encode(&b, buf, &n) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "kind"),
       "encode refuses FINALIZE");
    b = t, b.nprev = 0;
    ok(serve_wire_task_encode(&b, buf, &n) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "move"),
       "encode refuses a move with nobody holding the state");
    b = t, b.ranks[1] = b.ranks[0];
    ok(serve_wire_task_encode(&b, buf, &n) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "twice"),
       "encode refuses a repeated rank");
    is_int(n, 0, "and writes no length");
}

static void test_msgs(void)
{
    unsigned char buf[SERVE_WIRE_CMD_MAX + 1];
    size_t len = 0;
    serve_wire_cmd_t c;
    ok(serve_wire_msg_encode(&(serve_ctl_msg_t){.op = SERVE_OP_STOP}, buf, &len) == TDL_OK &&
           len == 8 && serve_wire_cmd_decode(buf, len, &c) == TDL_OK && c.op == SERVE_OP_STOP &&
           c.msg.op == SERVE_OP_STOP && c.msg.len == 0,
       "stop: 8 bytes, back as it went");
    serve_ctl_msg_t m = {.op = SERVE_OP_STOP + 5, .len = SERVE_USER_BYTES};
    for (int i = 0; i < SERVE_USER_BYTES; i++)
        m.data[i] = (unsigned char)(i * 7 + 1);
    ok(serve_wire_msg_encode(&m, buf, &len) == TDL_OK && len == SERVE_WIRE_CMD_MAX &&
           serve_wire_cmd_decode(buf, len, &c) == TDL_OK && c.op == m.op && c.msg.op == m.op &&
           c.msg.len == m.len && memcmp(c.msg.data, m.data, m.len) == 0,
       "a caller's command with a full payload, back as it went");
    refused(buf, len - 1, "payload", "a payload one byte short");
    buf[len] = 0;
    refused(buf, len + 1, "payload", "a payload one byte long");
    buf[4] = 1, buf[5] = 1; /* 257 */
    refused(buf, len + 1, "payload", "a payload over SERVE_USER_BYTES");
    refused(buf, 6, "payload", "a payload length cut");
    m.len = SERVE_USER_BYTES + 1;
    len = 0;
    ok(serve_wire_msg_encode(&m, buf, &len) == TDL_ERR_INVALID_ARG && len == 0,
       "encode refuses a payload over SERVE_USER_BYTES");
    m.len = 0, m.op = SERVE_OP_TASK;
    ok(serve_wire_msg_encode(&m, buf, &len) == TDL_ERR_INVALID_ARG,
       "encode refuses a task's op without a task");
}

static void test_acks(void)
{
    unsigned char buf[8] = {0};
    int32_t st = 99;
    serve_wire_ack_encode(0, buf);
    ok(serve_wire_ack_decode(buf, SERVE_WIRE_ACK_BYTES, &st) == TDL_OK && st == 0, "ack 0");
    serve_wire_ack_encode(-123456, buf);
    ok(serve_wire_ack_decode(buf, SERVE_WIRE_ACK_BYTES, &st) == TDL_OK && st == -123456,
       "ack -123456");
    st = 99;
    ok(serve_wire_ack_decode(buf, 3, &st) == TDL_ERR_CORRUPT && st == 99 &&
           strstr(tdl_error_get(), "3 bytes"),
       "an ack of 3 bytes refused");
    ok(serve_wire_ack_decode(buf, 5, &st) == TDL_ERR_CORRUPT && st == 99, "an ack of 5 refused");
}

/* Random bytes changed in a valid command: decoded or refused, never anything else. */
static void test_corruptions(void)
{
    serve_wire_task_t t = sample_task();
    unsigned char good[SERVE_WIRE_CMD_MAX];
    size_t len = 0;
    serve_wire_task_encode(&t, good, &len);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int bad = 0;
    for (int k = 0; k < 20000; k++) {
        unsigned char buf[SERVE_WIRE_CMD_MAX];
        memcpy(buf, good, len);
        for (int j = 0; j < 3; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            buf[(s >> 8) % len] = (unsigned char)s;
        }
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t n = (s >> 16) % (len + 1);
        unsigned char *exact = malloc(n ? n : 1); /* n bytes: ASan sees a read past them */
        memcpy(exact, buf, n);
        serve_wire_cmd_t c;
        tdl_status_t st = serve_wire_cmd_decode(exact, n, &c);
        bad += st != TDL_OK && st != TDL_ERR_CORRUPT;
        free(exact);
    }
    is_int(bad, 0, "20000 corrupted commands decoded or refused as corrupt");
}

static void test_helpers(void)
{
    ok(serve_wire_task_ns(SERVE_NS_TASK, 7, 0) != serve_wire_task_ns(SERVE_NS_TASK, 7, 1) &&
           serve_wire_task_ns(SERVE_NS_TASK, 7, 0) != serve_wire_task_ns(SERVE_NS_TASK, 8, 0) &&
           serve_wire_task_ns(SERVE_NS_TASK, 7, 0) != serve_wire_task_ns(SERVE_NS_MOVE, 7, 0),
       "a namespace per request, task and purpose");
    int r[] = {3, 1, 4};
    ok(serve_wire_member(r, 3, 4) && !serve_wire_member(r, 3, 2) && !serve_wire_member(r, 0, 3),
       "serve_wire_member");
}

static void test_guidance(void)
{
    ok(!serve_guided(-1, 4.0) && serve_cfg_used(-1, 4.0) == 1.0,
       "unconditional: not guided, cfg 1");
    ok(!serve_guided(3, 1.0) && serve_cfg_used(3, 1.0) == 1.0, "cfg 1: not guided");
    ok(serve_guided(3, 4.0) && serve_cfg_used(3, 4.0) == 4.0, "label 3, cfg 4: guided at 4");
    ok(serve_guided(0, 0.0) && serve_cfg_used(0, 0.0) == 0.0, "label 0, cfg 0: guided at 0");
    ok(serve_guided(2, (float)1.5) && serve_cfg_used(2, (float)1.5) == 1.5f,
       "a float scale as a spec holds it");
}

/* The co-location messages: memberships, reloads and reports, bytes worked out by hand. */
static void test_colocation(void)
{
    serve_wire_members_t m = {.epoch = 3, .n = 3, .root = 2, .ranks = {1, 2, 300}}, back;
    serve_ctl_msg_t msg;
    is_int(serve_wire_members_encode(SERVE_OP_JOIN, &m, &msg), TDL_OK, "a membership encodes");
    static const unsigned char want[] = {3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 2, 0, 44, 1};
    ok(msg.op == SERVE_OP_JOIN && msg.len == sizeof(want) && !memcmp(msg.data, want, sizeof(want)),
       "as u32 epoch, u32 n, i32 root, u16 ranks, little-endian (%u bytes)", msg.len);
    memset(&back, 0x5a, sizeof(back));
    ok(serve_wire_members_decode(&msg, 301, &back) == TDL_OK && back.epoch == 3 && back.n == 3 &&
           back.root == 2 && back.ranks[2] == 300,
       "and decodes in a world of 301");
    is_int(serve_wire_members_decode(&msg, 300, &back), TDL_ERR_CORRUPT,
           "rank 300 in a world of 300 is refused");
    ok(strstr(tdl_error_get(), "rank 300") != NULL, "naming it: %s", tdl_error_get());
    serve_ctl_msg_t bad = msg;
    bad.data[14] = 1; /* rank 1 twice */
    is_int(serve_wire_members_decode(&bad, 301, &back), TDL_ERR_CORRUPT, "a rank twice");
    bad = msg;
    bad.data[8] = 9; /* root 9 */
    is_int(serve_wire_members_decode(&bad, 301, &back), TDL_ERR_CORRUPT, "a root outside it");
    bad = msg;
    bad.len--;
    is_int(serve_wire_members_decode(&bad, 301, &back), TDL_ERR_CORRUPT, "one byte short");
    bad = msg;
    bad.data[4] = 200; /* n = 200 */
    is_int(serve_wire_members_decode(&bad, 301, &back), TDL_ERR_CORRUPT, "too many ranks");
    bad = msg;
    bad.data[12] = 0; /* rank 0, the coordinator */
    is_int(serve_wire_members_decode(&bad, 301, &back), TDL_ERR_CORRUPT, "rank 0");
    ok(back.epoch == 3 && back.ranks[2] == 300, "a refusal leaves the output alone");
    m.n = 0;
    is_int(serve_wire_members_encode(SERVE_OP_RESIZE, &m, &msg), TDL_ERR_INVALID_ARG,
           "an empty membership is not sent");

    char path[SERVE_USER_BYTES + 1];
    ok(serve_wire_reload_encode("runs/r/ckpt/ckpt-00000100.h5", &msg) == TDL_OK &&
           serve_wire_reload_decode(&msg, path) == TDL_OK &&
           !strcmp(path, "runs/r/ckpt/ckpt-00000100.h5"),
       "a reload carries its path");
    msg.data[3] = 0;
    is_int(serve_wire_reload_decode(&msg, path), TDL_ERR_CORRUPT, "a path with a NUL is refused");
    char longp[SERVE_USER_BYTES + 2];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    is_int(serve_wire_reload_encode(longp, &msg), TDL_ERR_INVALID_ARG, "a path too long for it");

    serve_wire_report_t r = {.kind = SERVE_REPORT_CKPT,
                             .rank = 1,
                             .members = 3,
                             .step = -2,
                             .loss = 0.25},
                        rb;
    snprintf(r.path, sizeof(r.path), "a.h5");
    unsigned char buf[SERVE_USER_BYTES];
    size_t len = 0;
    is_int(serve_wire_report_encode(&r, buf, &len), TDL_OK, "a report encodes");
    is_int((int)len, 4 + 4 + 4 + 8 + 8 + 4 + 4, "in 36 bytes for a path of 4");
    ok(buf[12] == 0xfe && buf[19] == 0xff && buf[32] == 'a',
       "step -2 as two's complement, the path after the length");
    ok(serve_wire_report_decode(buf, len, &rb) == TDL_OK && rb.kind == SERVE_REPORT_CKPT &&
           rb.step == -2 && rb.loss == 0.25 && rb.members == 3 && !strcmp(rb.path, "a.h5"),
       "and decodes");
    is_int(serve_wire_report_decode(buf, len - 1, &rb), TDL_ERR_CORRUPT, "a report cut short");
    buf[0] = 99;
    is_int(serve_wire_report_decode(buf, len, &rb), TDL_ERR_CORRUPT, "a report of kind 99");
    buf[0] = SERVE_REPORT_CKPT, buf[33] = 0;
    is_int(serve_wire_report_decode(buf, len, &rb), TDL_ERR_CORRUPT, "a NUL in its text");
    memset(r.path, 'x', sizeof(r.path));
    is_int(serve_wire_report_encode(&r, buf, &len), TDL_ERR_INVALID_ARG,
           "a text that fills the field without its NUL is not sent");
}

int main(void)
{
    test_task_round_trip();
    test_task_refused();
    test_msgs();
    test_acks();
    test_corruptions();
    test_helpers();
    test_guidance();
    test_colocation();
    return done_testing();
}
