#!/bin/sh
# Cancellation and progress events of `tidal serve`, alone and under mpirun (2 executors,
# edf_best_fit, a step a task): DELETE of a queued request (200, cancelled at once), of a running
# one (202, then cancelled at its next task boundary: fewer steps run than asked for, and under
# mpirun the executors that held its state drop it), of an unknown one (404) and of a finished one
# (409); a ?wait=1 client that goes away under --cancel-on-disconnect; GET .../events as
# Server-Sent Events from queued to the end, with each task's steps, degree and ranks; /metrics
# counts the cancelled apart, its histograms by resolution, and promtool passes it (and tidal run's);
# and the request served after them gives byte for byte the PNG of a server that never saw a
# cancel.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/cluster/common.sh" # cluster_rank0_of
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
command -v curl >/dev/null 2>&1 || { echo "1..0 # SKIP curl is not installed"; exit 0; }
dir=`mktemp -d`
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null; pkill -9 -P "$p" 2>/dev/null; done; rm -rf "$dir"; }
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1
PY=/usr/bin/python3
[ -x "$PY" ] || PY=`command -v python3`
tiny_ckpt "$dir/run"
ckpt="$dir/run/model.h5"
check "a tiny checkpoint to serve" [ -s "$ckpt" ]

code() { # METHOD PATH [BODY]: the HTTP code; the body in $dir/body
    curl -s -o "$dir/body" -w '%{http_code}' -X "$1" ${3:+-d "$3"} "$base$2"
}
status() { # ID: the request's status field
    curl -s "$base/v1/images/$1" | sed -n 's/.*"status":"\([a-z]*\)".*/\1/p'
}
wait_status() { # ID STATUS: up to 30 s
    ws_n=0
    while [ "`status $1`" != "$2" ] && [ $ws_n -lt 300 ]; do sleep 0.1; ws_n=$((ws_n + 1)); done
    [ "`status $1`" = "$2" ]
}
# events_ok FILE STEPS RUN: the SSE stream of a request asked STEPS steps: queued first, then
# started (if it ran a task), task_started/task_finished pairs (each step_chunk's steps, from_step in order,
# degree = the ranks listed), then one end event RUN (done or cancelled) and nothing after it;
# prints the step_chunk tasks finished
events_ok() {
    "$PY" - "$@" <<'EOF'
import json, sys
path, steps, end = sys.argv[1], int(sys.argv[2]), sys.argv[3]
evs, name = [], None
for line in open(path):
    line = line.rstrip("\n")
    if line.startswith("event: "):
        name = line[7:]
    elif line.startswith("data: "):
        evs.append((name, json.loads(line[6:])))
names = [n for n, _ in evs]
tasks = [n for n in names if n.startswith("task_")]
ok = names[0] == "queued" and names[-1] == end and names.count(end) == 1
ok &= not tasks or names[1] == "started"  # (cancelled while queued: never started)
done = 0
for n, d in evs:
    if n in ("task_started", "task_finished"):
        ok &= d["degree"] == len(d["ranks"]) and d["degree"] >= 1
        if n == "task_finished" and d["task"] == "step_chunk":
            ok &= d["from_step"] == done
            done += d["steps"]
ok &= done <= steps and (end != "done" or done == steps) and (end != "cancelled" or done < steps)
print(done)
sys.exit(0 if ok else 1)
EOF
}

stop_mpi() { # PID: SIGTERM to its rank 0, which ends the job cleanly (its logs whole)
    sm_r0=`cluster_rank0_of $1`
    if [ -n "$sm_r0" ]; then kill -TERM $sm_r0; else pkill -TERM -P $1; fi
    wait $1
}

promcheck() { # FILE WHAT: promtool's lint of a /metrics page (Debian's prometheus package)
    if ! command -v promtool >/dev/null 2>&1; then
        skip "$2: promtool is not installed (Debian package prometheus)"
    elif promtool check metrics <"$1" >"$1.lint" 2>&1; then
        ok "$2: promtool check metrics passes"
    else
        not_ok "$2: promtool check metrics: `head -c 300 "$1.lint"`"
    fi
}

for mode in alone mpi; do
    if [ $mode = alone ]; then
        serve_bg $mode "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 --max-resolution 32 \
            --progress-every 0 --cancel-on-disconnect --log-level debug
    else
        serve_bg $mode tidal_mpirun 3 "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 \
            --max-resolution 32 --progress-every 0 --cancel-on-disconnect --log-level debug \
            --policy edf_best_fit --chunk 1 --event-log "$dir/mpi.elog"
    fi
    m="$mode:"
    # a long request on every executor (8 images: alone, they fill the batch's 8 rows), then
    # one that waits behind them
    busy=1
    [ $mode = mpi ] && busy=2
    i=0
    while [ $i -lt $busy ]; do
        code POST /v1/images "{\"id\": \"$mode-run$i\", \"steps\": 1000, \"n\": 8, \"seed\": $i}" >/dev/null
        i=$((i + 1))
    done
    code POST /v1/images "{\"id\": \"$mode-q\", \"steps\": 1000, \"seed\": 9}" >/dev/null
    curl -s -N "$base/v1/images/$mode-run0/events" >"$dir/$mode.ev" &
    evpid=$!
    wait_status $mode-run0 running
    check "$m the first request runs" [ "`status $mode-run0`" = running ]
    c=`code DELETE /v1/images/$mode-q`
    if [ $mode = alone ]; then
        check "$m DELETE of a queued request: 200 ($c)" [ "$c" = 200 ]
        check "$m  and it is cancelled at once" grep -q '"status":"cancelled"' "$dir/body"
    else # rank 0 has taken it from the queue (it shows running), the policy has not placed it
        check "$m DELETE of a request waiting for ranks: 202 ($c)" [ "$c" = 202 ]
        wait_status $mode-q cancelled
        check "$m  and it is cancelled" [ "`status $mode-q`" = cancelled ]
    fi
    curl -s -N "$base/v1/images/$mode-q/events" >"$dir/$mode.q.ev"
    steps=`events_ok "$dir/$mode.q.ev" 1000 cancelled` || steps="bad: `tr '\n' ' ' <"$dir/$mode.q.ev"`"
    check "$m  its events end cancelled, no step run ($steps)" [ "$steps" = 0 ]
    sleep 0.5
    c=`code DELETE /v1/images/$mode-run0`
    check "$m DELETE of a running request: 202 ($c)" [ "$c" = 202 ]
    check "$m  with cancel_requested" grep -q '"cancel_requested":true' "$dir/body"
    wait_status $mode-run0 cancelled
    check "$m  cancelled at its next task boundary" [ "`status $mode-run0`" = cancelled ]
    wait $evpid
    steps=`events_ok "$dir/$mode.ev" 1000 cancelled`
    check "$m its events: queued, started, tasks in order, cancelled after $steps of 1000 steps" [ $? = 0 ]
    [ -n "$steps" ] || sed 's/^/# /' "$dir/$mode.ev" | tail -n 8
    c=`code DELETE /v1/images/$mode-run0`
    check "$m DELETE of a cancelled request: 409 ($c)" [ "$c" = 409 ]
    c=`code DELETE /v1/images/$mode-nosuch`
    check "$m DELETE of an unknown id: 404 ($c)" [ "$c" = 404 ]
    c=`code GET "/v1/images/$mode-run0?format=png"`
    check "$m its PNG: 409 ($c), it was cancelled" [ "$c" = 409 ]
    c=`code GET /v1/images/$mode-nosuch/events`
    check "$m events of an unknown id: 404 ($c)" [ "$c" = 404 ]
    i=1
    while [ $i -lt $busy ]; do code DELETE /v1/images/$mode-run$i >/dev/null; i=$((i + 1)); done
    # a client that gives up on ?wait=1: its request is cancelled
    curl -s -o /dev/null --max-time 1 -d "{\"id\": \"$mode-gone\", \"steps\": 1000}" \
        "$base/v1/images?wait=1"
    wait_status $mode-gone cancelled
    check "$m --cancel-on-disconnect: the request of a client gone is cancelled" \
        [ "`status $mode-gone`" = cancelled ]
    check "$m  and the log says why" grep -q "request $mode-gone: its client went away" "$dir/$mode.err"
    # what is left runs as if nothing had happened
    c=`code POST "/v1/images?wait=1" '{"id": "after", "label": 3, "steps": 6, "seed": 21}'`
    cp "$dir/body" "$dir/$mode.after.png"
    check "$m a request after the cancels: 200 ($c)" [ "$c" = 200 ]
    curl -s "$base/metrics" >"$dir/$mode.metrics"
    # run0 and run1 (mpi), q, gone
    want=$((busy + 2))
    check "$m /metrics counts $want cancelled, none failed" \
        grep -qx "tidal_requests_total{status=\"cancelled\",source=\"http\"} $want" "$dir/$mode.metrics"
    check "$m  (failed 0)" grep -qx 'tidal_requests_total{status="failed",source="http"} 0' "$dir/$mode.metrics"
    check "$m  and nothing runs" grep -qx 'tidal_requests_running 0' "$dir/$mode.metrics"
    check "$m the latency histogram by resolution: the one request done, at 32" \
        grep -qx 'tidal_request_latency_seconds_count{resolution="32"} 1' "$dir/$mode.metrics"
    check "$m  none at 64" \
        grep -qx 'tidal_request_latency_seconds_count{resolution="64"} 0' "$dir/$mode.metrics"
    promcheck "$dir/$mode.metrics" "$m /metrics of tidal serve"
    if [ $mode = mpi ]; then
        n=`grep -c "cancelled: its state dropped" "$dir/$mode.out" "$dir/$mode.err" | awk -F: '{ s += $2 } END { print s }'`
        check "mpi: executors dropped the state of the requests cancelled between tasks ($n)" [ "$n" -ge 1 ]
        stop_mpi $pid
        # the coordinator's decisions, cancels included, are those tidal sim makes of its events
        "$TIDAL" sim --replay "$dir/mpi.elog" --event-log "$dir/mpi.replay" >/dev/null 2>&1
        check "mpi: the event log has the cancels (`grep -c '^cancel ' "$dir/mpi.elog"`) and the drops (`grep -c '^> drop' "$dir/mpi.elog"`)" \
            sh -c 'grep -q "^cancel " "$1" && grep -q "^> drop" "$1" && grep -q "cancelled=1" "$1"' _ "$dir/mpi.elog"
        check "mpi: tidal sim --replay gives the job's log line for line (`wc -l <"$dir/mpi.elog"` lines)" \
            cmp -s "$dir/mpi.elog" "$dir/mpi.replay"
        cmp -s "$dir/mpi.elog" "$dir/mpi.replay" ||
            diff "$dir/mpi.elog" "$dir/mpi.replay" | head -n 10 | sed 's/^/# /'
    else
        kill -TERM $pid
        wait $pid
    fi
done
# /metrics of tidal run (ranks training and serving) passes promtool too
echo '{"at_ms": 0, "steps": 2, "seed": 1}' >"$dir/one.jsonl"
serve_bg run tidal_mpirun 3 "$TIDAL" run --model tiny --batch 4 --micro-batch 2 --train-steps 1000 \
    --ckpt-every 1000 --listen 127.0.0.1:0 --trace "$dir/one.jsonl" --max-resolution 32 \
    --progress-every 0 --max-seconds 120 --out "$dir/runout"
code POST "/v1/images?wait=1" '{"steps": 2, "resolution": 32}' >/dev/null
curl -s "$base/metrics" >"$dir/run.metrics"
check "tidal run: /metrics counts its ranks by role" grep -q '^tidal_ranks{role="training"}' "$dir/run.metrics"
promcheck "$dir/run.metrics" "/metrics of tidal run"
stop_mpi $pid
# a server that never saw a cancel
serve_bg ref "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 --max-resolution 32 --progress-every 0
code POST "/v1/images?wait=1" '{"id": "after", "label": 3, "steps": 6, "seed": 21}' >/dev/null
cp "$dir/body" "$dir/ref.png"
kill -TERM $pid; wait $pid
check "alone: the request after the cancels is byte for byte the reference's" cmp -s "$dir/ref.png" "$dir/alone.after.png"
check "mpi: the same" cmp -s "$dir/ref.png" "$dir/mpi.after.png"
done_testing
