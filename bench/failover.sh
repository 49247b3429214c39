# bench/run failover: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

# failover_pid_of DIR RANK: the pid of world rank RANK of the job writing into DIR
failover_pid_of() {
    local p
    for p in $(pgrep -f "tidal (serve|run) .*$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
            { echo "$p"; return 0; }
    done
    return 1
}

bm_failover() { # kills of executors and training members at random moments of tidal serve and tidal run under a steady trace: detection, recovery, requests lost
    bench_build src/tidal
    local tidal=$builddir/src/tidal work kills=20 i kind victim at how t_kill pid job rc seed=7
    [ -n "$quick" ] && kills=6
    # rank 0 and two workers on h0, two on h1: a victim on h1 is found from its connection or
    # its silence, as on a cluster, since rank 0's host cannot look up its process. Four workers,
    # so that tidal run can keep two training (--min-train 2: no single death leaves training
    # without a member's state) and still serve on one after a death.
    local np=5
    bench_cluster_default "2x2+1/1gbit"
    [ -n "$bench_cluster" ] && np=$(bench_cluster_np "$bench_cluster") && bench_cluster_note "$bench_cluster"
    [ "$np" -ge 3 ] || die "failover: a layout of at least 3 ranks (rank 0 and two executors)"
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --kills) [ $# -ge 2 ] && printf '%s' "$2" | grep -qE '^[1-9][0-9]*$' ||
                     die "failover: --kills needs a count"
                 kills=$2; shift ;;
        *) die "failover: unknown option '$1' (it takes --kills N)" ;;
        esac
        shift
    done
    if [ -z "$bench_norun" ]; then
        work=$(mktemp -d "${TMPDIR:-/tmp}/tidal-failover.XXXXXX")
        echo "run,command,victim,how,kill_at_s,detect_ms,replace_ms,train_step_ms,requests,done,failed,regroups,orphaned,affected,extra_ms_max,extra_ms" >"$bench_csv"
        say "training a 2-step checkpoint of the tiny model to serve"
        if ! OPENBLAS_NUM_THREADS=1 "$tidal" train --model tiny --resolution 32 --batch 4 \
            --micro-batch 2 --steps 2 --val-every 0 --out "$work/ckpt" >>"$bench_log" 2>&1; then
            bench_failed+=("tidal train"); return 0
        fi
        # a steady trace below what serving can take, so that a kill's effect is not lost in a
        # queue: a request of 10 steps every 200 ms for 6 s (on the default cluster one serving
        # device takes about 6 a second)
        /usr/bin/python3 - "$work/trace.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(30):
        f.write(json.dumps({"at_ms": 200 * i, "id": f"q{i}", "label": i % 10, "n": 1,
                            "resolution": 32, "steps": 10, "sampler": "euler",
                            "seed": i + 1}) + "\n")
PY
        # failover_job KIND OUT: the job of a run (tidal serve or tidal run) writing into OUT, in
        # the background; $job its pid
        failover_job() {
            local args=(serve --ckpt "$work/ckpt/model.h5" --max-resolution 32)
            [ "$1" = run ] && args=(run --model tiny --batch 8 --micro-batch 4 --seed 3
                --train-steps 120 --ckpt-every 50 --max-resolution 32 --cooldown 1 --min-train 2
                --out "$2")
            mkdir -p "$2"
            local launch=(tidal_mpirun) ml
            if [ -n "$bench_cluster" ]; then # tidal_mpirun inside the cluster, its hosts' slots
                ml="MPIRUN=$(printf %q "$MPIRUN"); $(declare -f tidal_mpirun); tidal_mpirun \"\$@\""
                # shellcheck disable=SC2046
                launch=("$top/tools/cluster" $(bench_cluster_opts "$bench_cluster") -- bash -c "$ml" _)
            fi
            TIDAL_LOG_CLOCK=unix TIDAL_LAUNCH="$top/tools/mpirun-recover" \
                TIDAL_TEST_TIMEOUT=180 TIDAL_MPIRUN_FLAGS="-x TIDAL_LOG_CLOCK" \
                "${launch[@]}" "$np" "$tidal" "${args[@]}" --request-log "$2/requests.jsonl" \
                --listen none --trace "$work/trace.jsonl" --exit-after-trace \
                --progress-every 0 >"$2.log" 2>&1 &
            job=$!
        }
        # each request's latency without a failure, to set the affected ones' against
        for kind in serve run; do
            say "tidal $kind without a failure: the latencies to compare with"
            failover_job $kind "$work/base-$kind"
            wait $job || bench_failed+=("tidal $kind without a failure exited $?")
            cat "$work/base-$kind.log" >>"$bench_log"
        done
        for i in $(seq 1 "$kills"); do
            # half the kills in each command; every third a SIGSTOP (found by its silence)
            kind=serve; [ $((i % 2)) = 0 ] && kind=run
            how=KILL; [ $((i % 3)) = 0 ] && how=STOP
            victim=$((1 + RANDOM % (np - 1)))
            at=$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 1.0 + 4.0 * r / 32767 }')
            local out=$work/run$i
            say "kill $i of $kills: tidal $kind, SIG$how of rank $victim at ${at} s"
            failover_job $kind "$out" # it names $out, by which the victim is found
            # the trace starts when rank 0 says it replays it
            local n=0
            until grep -q "replaying" "$out.log" 2>/dev/null || [ $n -ge 600 ]; do
                sleep 0.05; n=$((n + 1))
            done
            sleep "$at"
            pid=$(failover_pid_of "$out" "$victim")
            t_kill=$(date +%s.%N)
            if [ -n "$pid" ]; then
                kill -s "$how" "$pid"
                if [ $how = STOP ]; then # once it is declared dead (or after 6 s), SIGKILL it
                    n=0
                    until grep -q "declared rank $victim dead" "$out.log" || [ $n -ge 120 ]; do
                        sleep 0.05; n=$((n + 1))
                    done
                    kill -KILL "$pid" 2>/dev/null
                fi
            fi
            wait $job
            rc=$?
            cat "$out.log" >>"$bench_log"
            [ -n "$pid" ] || { bench_failed+=("kill $i: no rank $victim to kill"); continue; }
            [ $rc = 0 ] || bench_failed+=("kill $i: tidal $kind exited $rc")
            /usr/bin/python3 - "$out.log" "$t_kill" "$i" "$kind" "$victim" "$how" "$at" \
                "$out/requests.jsonl" "$work/base-$kind/requests.jsonl" \
                >>"$bench_csv" 2>>"$bench_log" <<'PY'
import json, re, sys
log, t_kill, i, kind, victim, how, at, reqs, base = sys.argv[1:10]
t_kill = float(t_kill)
def first(pattern):
    for line in open(log, errors="replace"):
        m = re.match(r"tidal\[\d+\] (\d+\.\d+) \w+: (.*)", line)
        if m and re.search(pattern, m.group(2)) and float(m.group(1)) >= t_kill - 0.05:
            return (float(m.group(1)) - t_kill) * 1e3
    return None
text = open(log, errors="replace").read()
detect = first(rf"declared rank {victim} dead")
replace = first(r"placed again on executor ranks")
step = first(r"training went on: step|training starts again on ranks")
m = re.search(r"trace: (\d+) requests, (\d+) done, (\d+) failed", text)
req, done, failed = (m.groups() if m else ("", "", ""))
regroups = len(re.findall(r"training lost ranks", text))
orphaned = int("training lost every member" in text)
# the requests that started again (the coordinator numbers them from 1, the log from 0), each
# one's latency against the same request's in the run without a failure
def latencies(path):
    try:
        return {json.loads(l)["seq"]: json.loads(l) for l in open(path) if l.strip()}
    except OSError:
        return {}
run, ref = latencies(reqs), {r["id"]: r for r in latencies(base).values()}
hit = {int(n) - 1 for n in re.findall(r"request (\d+) placed again", text)}
extra = [(run[s]["latency_s"] - ref[run[s]["id"]]["latency_s"]) * 1e3
         for s in sorted(hit) if s in run and run[s]["id"] in ref and run[s]["ok"]]
f = lambda v: "" if v is None else f"{v:.1f}"
print(f"{i},{kind},{victim},{how},{at},{f(detect)},{f(replace)},{f(step)},{req},{done},{failed},"
      f"{regroups},{orphaned},{len(hit)},{f(max(extra) if extra else None)},"
      f"{';'.join(f'{e:.1f}' for e in extra)}")
PY
        done
        rm -rf "$work"
    fi
    bench_ran_nps=$np
    local where="on this machine: one host, $np ranks sharing its cores (not an emulated cluster)"
    [ -n "$bench_cluster" ] && where="on the emulated cluster $bench_cluster (rank 0 on h0; the layout line below)"
    bench_launch="tools/mpirun-recover -np $np (rank 0 coordinates, $((np - 1)) workers), $where; $kills kills, alternately of tidal serve and tidal run (120 training steps of the tiny DiT, batch 8, --min-train 2 so that no single death leaves training without a member), under a trace of 30 requests of 10 steps at 200 ms; the victim (rank 1-$((np - 1))) and the moment (1-5 s into the trace) at random; every third a SIGSTOP, then SIGKILL once declared dead"
    # the headline figures, from the rows: quantiles over the runs that have the column
    local k v
    while read -r k v; do bench_headline "$k" "$v"; done < <(/usr/bin/python3 - "$bench_csv" <<'PY'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def num(r, c):
    return float(r[c]) if r.get(c) not in (None, "") else None
def q(vals, p):  # the p-quantile, nearest rank
    vals = sorted(v for v in vals if v is not None)
    return f"{vals[min(len(vals), max(1, math.ceil(p * len(vals)))) - 1]:.1f}" if vals else "n/a"
col = lambda c, keep=lambda r: True: [num(r, c) for r in rows if keep(r)]
print("detect_ms_p50", q(col("detect_ms"), 0.5))
print("detect_ms_p95", q(col("detect_ms"), 0.95))
print("detect_ms_p95_stop", q(col("detect_ms", lambda r: r["how"] == "STOP"), 0.95))
print("replace_ms_p50", q(col("replace_ms"), 0.5))
print("replace_ms_p95", q(col("replace_ms"), 0.95))
print("train_step_ms_p50", q(col("train_step_ms"), 0.5))
print("train_step_ms_p95", q(col("train_step_ms"), 0.95))
# recovery: the kill's re-placed task (serving) or first training step after it, whichever it
# hit; the later of the two where it hit both
rec = [max(v for v in (num(r, "replace_ms"), num(r, "train_step_ms")) if v is not None)
       for r in rows if num(r, "replace_ms") is not None or num(r, "train_step_ms") is not None]
print("recover_ms_p95", q(rec, 0.95))
extra = [float(e) for r in rows for e in r["extra_ms"].split(";") if e]
print("affected_requests", len(extra))
print("affected_extra_latency_ms_p50", q(extra, 0.5))
print("affected_extra_latency_ms_p95", q(extra, 0.95))
print("requests_lost", sum(int(r["requests"]) - int(r["done"]) - int(r["failed"])
                           for r in rows if r["requests"]))
print("requests_failed", sum(int(r["failed"] or 0) for r in rows))
print("training_restarts", sum(int(r["orphaned"] or 0) for r in rows))
print("kills_measured", sum(num(r, "detect_ms") is not None for r in rows))
PY
)
    bench_target "a dead or stopped rank declared dead (p95)" detect_ms_p95 '<=' 2000
    bench_target "recovery: the first re-placed task or training step after the kill (p95); the issue allows 2 s + one training step" recover_ms_p95 '<=' 2200
    bench_target "requests lost" requests_lost '<=' 0
    bench_target "training restarts (from a checkpoint)" training_restarts '<=' 0
    bench_table run command victim how kill_at_s detect_ms replace_ms train_step_ms requests done failed regroups affected extra_ms_max
    bench_note "detect_ms: from the kill (the script's clock) to the first rank's line 'declared rank R dead' (TIDAL_LOG_CLOCK=unix, the same clock);" \
        "replace_ms: to the coordinator's first 'request N placed again' (only when the victim held a request);" \
        "train_step_ms: to the first training step done after the regroup, or to training taken up again from a checkpoint (tidal run, only when the victim trained);" \
        "requests_lost = requests of the trace neither done nor failed; training_restarts = runs where every training member died, so that serving ranks took training up again from its newest checkpoint (tidal run keeps two members here, --min-train 2: with the default 1, a kill of the lone member is such a restart, tests/mpi/test_run_failover.sh)." \
        "affected: the requests that started again from their seed because the victim held their state; extra_ms: each one's latency less that of the same request in a run of the same command without a failure (affected_extra_latency_ms_p50/p95 over all of them; a handful per run, so the p95 of a --quick run is its worst)." \
        "The recovery target is taken as 2200 ms: 2 s plus a step of the tiny model (under 200 ms here)."
    bench_plot <<GP
set datafile separator ","
set key top left
set ylabel "ms after the kill"
set yrange [0:2500]
set xlabel "kill"
plot "$bench_csv" using 1:6 skip 1 with points pt 7 title "declared dead", \
     "" using 1:7 skip 1 with points pt 5 title "task placed again", \
     "" using 1:8 skip 1 with points pt 9 title "training step after the regroup", \
     2000 with lines dt 2 title "2 s"
GP
}
