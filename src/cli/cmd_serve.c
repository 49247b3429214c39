/* `tidal serve`: image requests over HTTP (and from a trace file). Alone, rank 0 samples them
 * one at a time; under mpirun rank 0 coordinates (src/coord/rank0.c) and the other ranks
 * execute the tasks it places. `tidal run` starts the same way with co-location added
 * (cmd_run.c). doc/serving.md. */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "coord/job.h"
#include "gfc/gfc.h"
#include "mpi/bootstrap.h"
#include "serve/serve.h"
#include "train/train.h"

const tdl_param_def_t cli_serve_params[CLI_SERVE_NPARAMS] = {
    {"ckpt", TDL_PARAM_STRING, NULL, "weights file written by tidal train (HDF5)", NULL, 1, 0},
    {"weights", TDL_PARAM_ENUM, "ema", "which weights of the file", "ema|model", 1, 0},
    {"listen", TDL_PARAM_STRING, "127.0.0.1:8000",
     "HTTP address, HOST:PORT or [IPV6]:PORT (port 0: any free one; 'none': no HTTP, with "
     "--trace)",
     NULL, 1, 0},
    {"token", TDL_PARAM_STRING, NULL,
     "bearer token every request but /healthz must carry (better set as TIDAL_TOKEN)", NULL, 1, 0},
    {"max-body", TDL_PARAM_INT, "65536", "largest request body in bytes (larger: 413)", NULL, 64,
     1 << 26},
    {"queue-max", TDL_PARAM_INT, "256", "requests that may wait; more get 503 with Retry-After",
     NULL, 1, 1e6},
    {"keep-results", TDL_PARAM_INT, "1024",
     "finished requests kept for GET /v1/images/ID (the oldest are forgotten)", NULL, 0, 1e7},
    {"wait-timeout", TDL_PARAM_DOUBLE, "300", "seconds ?wait=1 waits before answering 504", NULL,
     0.001, 86400},
    {"max-connections", TDL_PARAM_INT, "1024", "HTTP connections open at once (a thread each)",
     NULL, 1, 65536},
    {"connection-timeout", TDL_PARAM_INT, "600",
     "seconds an HTTP connection may stay idle (0: forever)", NULL, 0, 86400},
    {"cancel-on-disconnect", TDL_PARAM_BOOL, "false",
     "cancel a ?wait=1 request whose client has gone away (checked every 200 ms)", NULL, 0, 0},
    {"max-resolution", TDL_PARAM_INT, "128",
     "largest image side a request may ask for: 32, 64 or 128 (sizes the activations)", NULL, 32,
     128},
    {"max-batch", TDL_PARAM_INT, "8", "images per forward pass (guided: half as many)", NULL, 2,
     4096},
    {"vae", TDL_PARAM_STRING, NULL,
     "a latent model's VAE (a weights file with its decoder, doc/vae.md; random:SEED: the SD "
     "configuration with random weights, for tests): requests name the images' resolution, "
     "its upscale times the model's, and DECODE runs its decoder to an RGB PNG",
     NULL, 1, 0},
    {"batching", TDL_PARAM_BOOL, "true",
     "alone: requests of one resolution and sampler share the model's passes, joining and "
     "leaving between steps, up to --max-batch rows (--no-batching: one request at a time)",
     NULL, 0, 0},
    {"steps", TDL_PARAM_INT, "50", "sampler steps of a request that does not say", NULL, 1,
     SERVE_MAX_STEPS},
    {"cfg", TDL_PARAM_DOUBLE, "4.0", "guidance scale of a request that does not say", NULL, 0,
     SERVE_MAX_CFG},
    {"sp", TDL_PARAM_INT, "1",
     "under mpirun: executor ranks per request (sequence-parallel degree; it must divide the "
     "tokens and the heads)",
     NULL, 1, 8},
    {"chunk", TDL_PARAM_INT, "1", "steps per STEP_CHUNK task", NULL, 1, 1000},
    {"policy", TDL_PARAM_STRING, NULL,
     "under mpirun: the placement policy (static_sp1, static_sp2, static_sp4, static_sp8, fcfs, "
     "sjf, srtf, edf_greedy, edf_best_fit, edf_priority; default: static_sp<--sp>)",
     NULL, 1, 0},
    {"cost", TDL_PARAM_STRING, NULL,
     "cost model JSON the policy estimates with (tidal profile); default: the built-in model", NULL,
     1, 0},
    {"request-log", TDL_PARAM_STRING, NULL,
     "under mpirun: a JSON line per finished request (seq, id, arrival_s, finish_s, latency_s, "
     "ok) to this file, as tidal sim --request-log writes",
     NULL, 1, 0},
    {"event-log", TDL_PARAM_STRING, NULL,
     "under mpirun: every event the coordinator takes and every command it gives, a line each, "
     "to this file; tidal sim --replay feeds it to the same code again (doc/coordinator.md)",
     NULL, 1, 0},
    {"cfg-parallel", TDL_PARAM_BOOL, "false",
     "with an even --sp: a guided request's conditional and unconditional halves run on the two "
     "halves of its ranks at once",
     NULL, 0, 0},
    {"trace", TDL_PARAM_STRING, NULL,
     "JSON-lines file of requests, each with \"at_ms\", its arrival after the start", NULL, 1, 0},
    {"exit-after-trace", TDL_PARAM_BOOL, "false",
     "exit when every request of --trace has finished, with a latency summary", NULL, 0, 0},
    {"max-seconds", TDL_PARAM_DOUBLE, "0", "stop after this long (0: at SIGINT or SIGTERM)", NULL,
     0, 1e9},
    {"progress-every", TDL_PARAM_DOUBLE, "5", "seconds between progress lines (0: none)", NULL, 0,
     1e6},
    CLI_DEVICE_PARAM,
};

/* SIGINT and SIGTERM: stop taking requests, finish the one running, fail the waiting ones,
 * exit 0. A second signal exits at once. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    if (stop_signal)
        _exit(128 + sig);
    stop_signal = sig;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The model every rank serves: --ckpt's weights, or (tidal run without --ckpt) the training
 * run's model at its initial weights, which training replaces. An inference model: no
 * gradients, one block's activations, nothing of them touched before the first request. */
static tdl_status_t serving_model(tdl_params_t *params, const cli_colocate_t *run,
                                  dit_model_t **out)
{
    const char *ckpt = tdl_param_str(params, "ckpt");
    int max_batch = (int)tdl_param_int(params, "max-batch");
    int max_res = (int)tdl_param_int(params, "max-resolution");
    struct dit_backend *be = NULL;
    tdl_status_t st = dit_backend_open(tdl_param_str(params, "device"), -1, &be);
    if (st != TDL_OK)
        return st;
    if (ckpt)
        return train_weights_load_inference(ckpt, tdl_param_str(params, "weights"), max_batch,
                                            max_res, be, out);
    dit_config_t cfg;
    st = dit_config_named(run->worker.train.model, &cfg);
    if (st == TDL_OK)
        st = train_config_servable(&cfg);
    if (st == TDL_OK)
        st = dit_model_create_inference(&cfg, max_batch, max_res, be, out);
    else
        dit_backend_close(be);
    if (st == TDL_OK)
        dit_model_init_weights(*out, run->worker.train.seed);
    return st;
}

/* The class names the prompts of POST /v1/images/generations may give: --ckpt's (NULL when the
 * file has none), or, for tidal run without --ckpt, Fashion-MNIST's when it trains on them.
 * *owned is what to free. */
static tdl_status_t serving_class_names(tdl_params_t *params, const cli_colocate_t *run,
                                        const dit_model_t *m, const char *const **names_out,
                                        char ***owned)
{
    const char *ckpt = tdl_param_str(params, "ckpt");
    *owned = NULL;
    *names_out = NULL;
    if (!ckpt) {
        if (!strcmp(run->worker.train.data, "fmnist") &&
            m->config.num_classes == TRAIN_FMNIST_CLASSES)
            *names_out = train_fmnist_class_names;
        return TDL_OK;
    }
    tdl_status_t st = train_weights_class_names(ckpt, m->config.num_classes, owned);
    if (st == TDL_OK)
        *names_out = (const char *const *)*owned;
    return st;
}

/* A static degree must fit the executors and divide the heads and the width (rank 0 says). */
static int check_degree(tdl_params_t *params, const dit_config_t *mc, int world, int rank)
{
    int sp = (int)tdl_param_int(params, "sp");
    const char *pname = tdl_param_str(params, "policy");
    if (pname && strncmp(pname, "static_sp", 9))
        return CLI_EXIT_OK;
    if (pname)
        sp = atoi(pname + 9);
    if (sp > world - 1) {
        if (rank == 0)
            fprintf(stderr,
                    "tidal: serve: degree %d needs %d executor ranks; this job has %d "
                    "(mpirun -np %d)\n",
                    sp, sp, world - 1, sp + 1);
        return CLI_EXIT_USAGE;
    }
    if (mc->num_heads % sp || mc->hidden_size % sp) {
        if (rank == 0)
            fprintf(stderr,
                    "tidal: serve: degree %d does not divide the model's %d heads and "
                    "width %d\n",
                    sp, mc->num_heads, mc->hidden_size);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/* Rank 0's options from the parameters. */
static void rank0_opts(tdl_params_t *params, const cli_colocate_t *run, char *policy, size_t size,
                       coord_rank0_opts_t *o)
{
    const char *listen = tdl_param_str(params, "listen");
    const char *pname = tdl_param_str(params, "policy");
    if (pname)
        snprintf(policy, size, "%s", pname);
    else
        snprintf(policy, size, "static_sp%lld", (long long)tdl_param_int(params, "sp"));
    *o = (coord_rank0_opts_t){
        .ckpt = tdl_param_str(params, "ckpt"),
        .weights = tdl_param_str(params, "weights"),
        .http_on = strcasecmp(listen, "none") != 0,
        .http = {.listen = listen,
                 .token = tdl_param_str(params, "token"),
                 .max_body = (size_t)tdl_param_int(params, "max-body"),
                 .wait_timeout_ms = (int)ceil(tdl_param_double(params, "wait-timeout") * 1e3),
                 .max_connections = (int)tdl_param_int(params, "max-connections"),
                 .connection_timeout_s = (int)tdl_param_int(params, "connection-timeout"),
                 .cancel_on_disconnect = tdl_param_bool(params, "cancel-on-disconnect")},
        .trace = tdl_param_str(params, "trace"),
        .exit_after_trace = tdl_param_bool(params, "exit-after-trace"),
        .queue_max = (int)tdl_param_int(params, "queue-max"),
        .keep_results = (int)tdl_param_int(params, "keep-results"),
        .max_resolution = (int)tdl_param_int(params, "max-resolution"),
        .default_steps = (int)tdl_param_int(params, "steps"),
        .default_cfg = tdl_param_double(params, "cfg"),
        .max_seconds = tdl_param_double(params, "max-seconds"),
        .progress_every = tdl_param_double(params, "progress-every"),
        .batching = tdl_param_bool(params, "batching"),
        .policy = policy,
        .cost = tdl_param_str(params, "cost"),
        .request_log = tdl_param_str(params, "request-log"),
        .event_log = tdl_param_str(params, "event-log"),
        .chunk = (int)tdl_param_int(params, "chunk"),
        .cfg_parallel = tdl_param_bool(params, "cfg-parallel"),
        .colocate = run ? &run->colocate : NULL};
}

int cli_serve_main(tdl_params_t *params, const char *what, const cli_colocate_t *run)
{
    if (!run && !tdl_param_str(params, "ckpt"))
        return cli_usage_error("'tidal serve' needs --ckpt FILE (a weights file from tidal "
                               "train)");
    cli_vae_t vae_arg;
    const char *vae_path = tdl_param_str(params, "vae");
    if (vae_path && run)
        return cli_usage_error("--vae: tidal run serves the model it trains, in pixels; serve a "
                               "latent model with tidal serve --ckpt FILE --vae FILE");
    if (vae_path) {
        int vrc = cli_vae_config(vae_path, DIT_VAE_DECODER, &vae_arg);
        if (vrc != CLI_EXIT_OK)
            return vrc;
        dit_config_t mc;
        if (train_weights_config(tdl_param_str(params, "ckpt"), &mc) != TDL_OK)
            return cli_usage_error("--ckpt: %s", tdl_error_get());
        if (mc.in_channels != vae_arg.config.latent_channels)
            return cli_usage_error("--vae %s makes images of latents of %d channels; the model "
                                   "of %s has %d",
                                   vae_path, vae_arg.config.latent_channels,
                                   tdl_param_str(params, "ckpt"), mc.in_channels);
    }
    int max_res = (int)tdl_param_int(params, "max-resolution");
    if (max_res != 32 && max_res != 64 && max_res != 128)
        return cli_usage_error("--max-resolution must be 32, 64 or 128, not %d", max_res);
    const char *listen = tdl_param_str(params, "listen");
    bool http_on = strcasecmp(listen, "none") != 0;
    if (!http_on && !tdl_param_str(params, "trace"))
        return cli_usage_error("--listen none leaves nothing to serve: give --trace FILE");
    char host[SERVE_HOST_MAX + 1];
    int port;
    if (http_on && serve_listen_parse(listen, host, &port) != TDL_OK)
        return cli_usage_error("%s", tdl_error_get());
    if (tdl_param_bool(params, "exit-after-trace") && !tdl_param_str(params, "trace"))
        return cli_usage_error("--exit-after-trace needs --trace FILE");
    const char *pname = tdl_param_str(params, "policy");
    if (pname && !coord_policy_find(pname))
        return cli_usage_error("unknown --policy '%s': use one of %s", pname, coord_policy_names());
    int sp = (int)tdl_param_int(params, "sp");
    if (!pname && sp != 1 && sp != 2 && sp != 4 && sp != 8)
        return cli_usage_error("--sp %d: use 1, 2, 4 or 8 (or a dynamic --policy)", sp);
    if (tdl_param_str(params, "cost")) {
        coord_cost_model_t cm;
        if (coord_cost_model_load(tdl_param_str(params, "cost"), &cm) != TDL_OK)
            return cli_usage_error("--cost: %s", tdl_error_get());
    }

    tdl_boot_info_t me;
    tdl_status_t st = tdl_boot_init(NULL, NULL, &me);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    if (me.size > 1)
        tdl_log_set_rank(me.rank);
    /* on every rank: SIGTERM from mpirun or Slurm reaches them all */
    install_signals();
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* every rank loads the model; under mpirun the gfc runtime joins them */
    int rc = CLI_EXIT_OK;
    dit_model_t *m = NULL;
    gfc_runtime_t *rt = NULL;
    serve_dispatcher_t *d = NULL;
    bool up = false; /* every rank's gfc runtime is up (the same on every rank) */
    dit_vae_t *vae = NULL;
    const char *device = tdl_param_str(params, "device"); /* the VAE's too */
    if ((st = serving_model(params, run, &m)) != TDL_OK ||
        (vae_path && (st = cli_vae_load(&vae_arg, device, &vae)) != TDL_OK)) {
        fprintf(stderr, "tidal[%d]: %s: %s\n", me.rank, what, tdl_error_get());
        rc = CLI_EXIT_FAILURE;
    }
    if (me.size > 1) {
        if (rc == CLI_EXIT_OK)
            rc = check_degree(params, &m->config, me.size, me.rank);
        gfc_runtime_config_t gc;
        if ((st = gfc_runtime_config_from_params(params, &gc)) == TDL_OK) {
            gc.rank = me.rank, gc.size = me.size, gc.allgather = tdl_boot_allgatherv;
            st = gfc_runtime_create(&gc, &rt);
        }
        if (st != TDL_OK && rc == CLI_EXIT_OK) {
            fprintf(stderr, "tidal[%d]: serve: %s\n", me.rank, tdl_error_get());
            rc = CLI_EXIT_FAILURE;
        }
        /* everyone ready, or everyone leaves */
        int64_t bad = rc != CLI_EXIT_OK;
        up = tdl_boot_allreduce_sum_i64(&bad) == TDL_OK && !bad;
        if (!up)
            rc = rc != CLI_EXIT_OK ? rc : CLI_EXIT_FAILURE;
        else if (me.rank == 0 && (st = serve_dispatcher_create(rt, me.size, &d)) != TDL_OK) {
            fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
            rc = CLI_EXIT_FAILURE;
        }
    }
    if (me.rank == 0) {
        if (rc == CLI_EXIT_OK) {
            char policy[64];
            coord_rank0_opts_t o;
            rank0_opts(params, run, policy, sizeof(policy), &o);
            o.vae = vae;
            char **names = NULL;
            if ((st = serving_class_names(params, run, m, &o.http.class_names, &names)) != TDL_OK) {
                fprintf(stderr, "tidal: %s: %s\n", what, tdl_error_get());
                rc = CLI_EXIT_FAILURE;
            }
            if (d)
                printf("tidal serve: rank 0 coordinates, ranks 1..%d execute; policy %s, %lld "
                       "steps per task\n",
                       me.size - 1, pname ? pname : "static (--sp)",
                       (long long)tdl_param_int(params, "chunk"));
            bool bad_input = false;
            if (rc == CLI_EXIT_OK &&
                (st = coord_rank0_run(&o, me.size, m, d, &stop_signal, &bad_input)) != TDL_OK) {
                if (bad_input) {
                    rc = cli_usage_error("%s", tdl_error_get());
                } else {
                    fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
                    rc = CLI_EXIT_FAILURE;
                }
            }
            free(names);
        }
        if (d) { /* whatever happened, the executors are told to leave */
            serve_dispatcher_stop(d);
            serve_dispatcher_free(d);
        }
    } else if (rc == CLI_EXIT_OK && rt) {
        /* an executor: requests from rank 0 until it says stop; a signal here changes nothing */
        st = run ? coord_worker_run(&run->worker, rt, me.rank, me.size, m)
                 : serve_executor_loop(rt, me.rank, m, vae);
        if (st != TDL_OK) {
            fprintf(stderr, "tidal[%d]: %s: %s\n", me.rank, what, tdl_error_get());
            rc = CLI_EXIT_FAILURE;
        }
    }
    /* rank 0's verdict reaches every live rank (a failed executor makes it a failure): they
     * exit with the same code. Over gfc, which passes over dead ranks, where MPI would hang */
    int64_t verdict = rc;
    bool deaths = false;
    if (up) {
        verdict = gfc_verdict(rt, rc, &deaths);
        gfc_runtime_destroy(rt);
    } else if (me.size > 1) { /* start-up failed: every rank is still there */
        gfc_runtime_destroy(rt);
        int64_t fails = rc != CLI_EXIT_OK;
        verdict = me.rank == 0 ? rc : 0;
        if (tdl_boot_allreduce_sum_i64(&fails) != TDL_OK ||
            tdl_boot_allreduce_sum_i64(&verdict) != TDL_OK)
            verdict = CLI_EXIT_FAILURE;
        if (verdict == CLI_EXIT_OK && fails)
            verdict = CLI_EXIT_FAILURE;
    }
    dit_model_free(m);
    dit_vae_free(vae);
    cli_mpi_end(deaths);
    return (int)verdict;
}

static int serve_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal serve' takes no arguments, found '%s'", pos[0]);
    return cli_serve_main(params, "serve", NULL);
}

const cli_command_t cli_cmd_serve = {
    .name = "serve",
    .summary = "serve image requests over HTTP (and from a trace file) from a weights file",
    .usage = "tidal serve --ckpt FILE [--listen 127.0.0.1:8000] [--token T] [--queue-max 256] "
             "[--trace FILE.jsonl [--exit-after-trace]]",
    .params = cli_serve_params,
    .nparams = TDL_ARRAY_SIZE(cli_serve_params),
    .run = serve_run,
};
