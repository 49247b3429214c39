/* The wire between rank 0's dispatcher (dispatch.c) and the executors (executor.c): the groups
 * and namespaces they talk on, the op codes, and one encoding of every message, which both sides
 * call. Fields are fixed-width and little-endian, a message is exactly as long as its fields say,
 * and a decoder checks the length and every range before it reads: a malformed message is
 * refused with TDL_ERR_CORRUPT naming what is wrong, never read out of bounds.
 *
 *   rank 0 -> executor w   {0, w}, SERVE_NS_CONTROL, tag = commands sent to w so far:
 *                          a command (a task, stop, or one of the caller's own)
 *   executor w -> rank 0   {0, w}, SERVE_NS_STATUS, tag = reports sent so far:
 *                          the caller's own reports (serve_worker_report), up to SERVE_USER_BYTES
 *   task lead -> rank 0    {0, lead}, SERVE_NS_RESULT ^ request id, tag = the task's seq:
 *                          the PNG after DECODE (empty: it failed), else an ack
 *   a task's ranks         serve_wire_task_ns(SERVE_NS_TASK, id, seq): the chunk's collectives
 *   old and new ranks      serve_wire_task_ns(SERVE_NS_MOVE, id, seq): the state's move */
#ifndef TIDAL_SERVE_WIRE_H
#define TIDAL_SERVE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "gfc/gfc.h"
#include "serve/serve.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== groups and namespaces =================================================================== */

#define SERVE_NS_CONTROL 0x636f6e74726f6cull /* "control" */
#define SERVE_NS_RESULT  0x726573756c74ull   /* "result" */
#define SERVE_NS_TASK    0x7461736bull       /* "task" */
#define SERVE_NS_MOVE    0x6d6f7665ull       /* "move" */
#define SERVE_NS_STATUS  0x737461747573ull   /* "status" */

/* The largest PNG a DECODE answers with. */
#define SERVE_MAX_PNG (8u << 20)

/* The two-member group {0, worker} on namespace ns. pair must outlive the group (a group refers to
 * its rank list). */
tdl_status_t serve_wire_pair_group(gfc_runtime_t *rt, int worker, uint64_t ns, int pair[2],
                                   gfc_group_t *g);

/* A namespace of its own for each task of each request. */
uint64_t serve_wire_task_ns(uint64_t base, uint64_t id, uint64_t seq);

/* Whether rank r is among ranks[0 .. n). */
static inline bool serve_wire_member(const int *ranks, int n, int r)
{
    for (int i = 0; i < n; i++)
        if (ranks[i] == r)
            return true;
    return false;
}

/* ==== op codes ================================================================================ */

/* SERVE_OP_STOP (serve.h) is 2; ops above it are the caller's own (below). */
#define SERVE_OP_TASK 1

/* ==== commands of the caller's own: co-location (tidal run) ================================ */

/* Ops > SERVE_OP_STOP with up to SERVE_USER_BYTES of payload, sent by serve_dispatcher_send and
 * returned by serve_worker_run / serve_worker_poll as a serve_ctl_msg_t, and the reports workers
 * send with serve_worker_report. Payloads are encoded and checked here, as the commands below. */
#define SERVE_OP_RESIZE  10 /* to training's leader: the membership after the current step */
#define SERVE_OP_JOIN    11 /* to a serving worker: join training in this membership */
#define SERVE_OP_RELOAD  12 /* to a serving worker: serve the weights of this checkpoint */
#define SERVE_OP_RECOVER 13 /* to a member whose group lost a rank: train on in this membership */
#define SERVE_OP_LEAVE                                                                             \
    14 /* to a member whose group lost a rank: leave training, serve (no data)                     \
        */
#define SERVE_OP_RESTART                                                                           \
    15 /* to a serving worker once every member died: train in this membership                     \
        * from the newest checkpoint of the run (or its first step) */

/* To an executor that holds a request's state (its last task ran there), once the request is
 * cancelled: let it go. Taken by the executor's own receive, never returned to the caller.
 *   u64 request (the task's spec.id) */
#define SERVE_OP_DROP 16
tdl_status_t serve_wire_drop_encode(uint64_t request, serve_ctl_msg_t *msg);
tdl_status_t serve_wire_drop_decode(const serve_ctl_msg_t *msg, uint64_t *request_out);

#define SERVE_WIRE_MAX_WORKERS 1024

/* A training membership: world ranks in order (the first leads), and the rank whose state a
 * group that grows starts from.
 *   u32 epoch, u32 n, i32 root, u16 ranks[n] */
typedef struct serve_wire_members {
    uint32_t epoch, n;
    int32_t root;
    uint16_t ranks[SERVE_WIRE_MAX_WORKERS];
} serve_wire_members_t;

typedef enum {
    SERVE_REPORT_STEP = 1, /* training's leader: a step done (step, loss, members) */
    SERVE_REPORT_LEFT,     /* this rank left training and serves (members -1: training is
                            * over; the leader's DONE, on another channel, may come after it) */
    SERVE_REPORT_JOINED,   /* this rank trains in the new membership */
    SERVE_REPORT_CKPT,     /* the leader wrote checkpoint `path` at `step` */
    SERVE_REPORT_DONE,     /* training ran its last step */
    SERVE_REPORT_ERROR,    /* this rank failed: `path` says why */
    SERVE_REPORT_RESUMED,  /* training resumed `path` at `step` */
    SERVE_REPORT_FAILED,   /* this member's group lost a rank: it has done `step` steps, in the
                            * membership of epoch `members`; `path` says why */
    SERVE_REPORT_KINDS
} serve_report_kind_t;

/* A worker's report to rank 0.
 *   u32 kind, i32 rank, i32 members, i64 step, f64 loss, u32 len, u8 path[len] */
typedef struct serve_wire_report {
    uint32_t kind;
    int32_t rank, members;
    int64_t step;
    double loss;
    char path[200]; /* a NUL-terminated text */
} serve_wire_report_t;

/* A RESIZE, JOIN, RECOVER or RESTART (op) carrying m; TDL_ERR_INVALID_ARG when m has no member or
 * too many. */
tdl_status_t serve_wire_members_encode(uint32_t op, const serve_wire_members_t *m,
                                       serve_ctl_msg_t *msg);
/* The membership of a RESIZE, JOIN, RECOVER or RESTART in a world of `world` ranks: 1 .. world - 1
 * distinct workers, the root among them. TDL_ERR_CORRUPT names what is wrong; *m_out is left alone.
 */
tdl_status_t serve_wire_members_decode(const serve_ctl_msg_t *msg, int world,
                                       serve_wire_members_t *m_out);
/* A RELOAD of `path` (1 .. SERVE_USER_BYTES bytes); and back, NUL-terminated. */
tdl_status_t serve_wire_reload_encode(const char *path, serve_ctl_msg_t *msg);
tdl_status_t serve_wire_reload_decode(const serve_ctl_msg_t *msg,
                                      char path_out[SERVE_USER_BYTES + 1]);
/* A report into buf (SERVE_USER_BYTES) and its length; a path too long for it is
 * TDL_ERR_INVALID_ARG. */
tdl_status_t serve_wire_report_encode(const serve_wire_report_t *r, unsigned char *buf,
                                      size_t *len_out);
/* TDL_ERR_CORRUPT naming what is wrong (length, kind, a path with a NUL); *r_out left alone. */
tdl_status_t serve_wire_report_decode(const unsigned char *buf, size_t len,
                                      serve_wire_report_t *r_out);

/* ==== a command, rank 0 to an executor ======================================================== */

/* A task as it travels: what serve_task_cmd_t says, with the request's spec. */
typedef struct serve_wire_task {
    serve_task_kind_t kind; /* PREPARE, STEP_CHUNK or DECODE */
    int steps;              /* of a STEP_CHUNK */
    bool move, cfg_parallel;
    int nranks, nprev; /* 1 .. SERVE_MAX_DEGREE and 0 .. SERVE_MAX_DEGREE */
    /* STEP_CHUNKs of other requests that follow this one on the same ranks, stepped together
     * with it in one batch (0: it is the batch's last, or alone); below SERVE_MAX_BATCH */
    int batch_after;
    int ranks[SERVE_MAX_DEGREE], prev[SERVE_MAX_DEGREE]; /* distinct ranks >= 1 in each list */
    uint64_t seq;
    serve_traj_spec_t spec;
} serve_wire_task_t;

/* A command decoded: a task, or any other op with its payload. */
typedef struct serve_wire_cmd {
    uint32_t op;            /* SERVE_OP_TASK, SERVE_OP_STOP or one of the caller's own */
    serve_wire_task_t task; /* op SERVE_OP_TASK */
    serve_ctl_msg_t msg;    /* any other op: msg.op == op, and its payload */
} serve_wire_cmd_t;

/* The largest command: the receive buffer of an executor. */
#define SERVE_WIRE_CMD_MAX (8 + SERVE_USER_BYTES)

/* Encodes a task into buf (SERVE_WIRE_CMD_MAX bytes) and writes its length to *len_out. A task
 * the decoder would refuse is TDL_ERR_INVALID_ARG naming the field, and nothing is written. */
tdl_status_t serve_wire_task_encode(const serve_wire_task_t *task, unsigned char *buf,
                                    size_t *len_out);
/* The same for another command (msg->op >= SERVE_OP_STOP, msg->len <= SERVE_USER_BYTES). */
tdl_status_t serve_wire_msg_encode(const serve_ctl_msg_t *msg, unsigned char *buf, size_t *len_out);
/* Decodes the len bytes received; TDL_ERR_CORRUPT names what is wrong and leaves *cmd_out as it
 * was. */
tdl_status_t serve_wire_cmd_decode(const unsigned char *buf, size_t len, serve_wire_cmd_t *cmd_out);

/* ==== a task's ack, its lead to rank 0 (tasks other than DECODE) ============================== */

#define SERVE_WIRE_ACK_BYTES 4

/* status: 0 when the task ran, else the tdl_status_t it failed with. */
void serve_wire_ack_encode(int32_t status, unsigned char buf[SERVE_WIRE_ACK_BYTES]);
/* TDL_ERR_CORRUPT when len is not SERVE_WIRE_ACK_BYTES. */
tdl_status_t serve_wire_ack_decode(const unsigned char *buf, size_t len, int32_t *status_out);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_SERVE_WIRE_H */
