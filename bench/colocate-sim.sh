# bench/run colocate-sim: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_colocate_sim() { # co-location at 64 and 512 ranks over a simulated day (tidal sim --colocate): slo_first against every static split and an hourly schedule; the simulator against a real tidal run on the emulated cluster
    bench_build src/tidal
    local tidal=$builddir/src/tidal work scales="64 512" day=86400 load=0.4 real=1 R k f
    [ -n "$quick" ] && scales=64 day=8640
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --scales) [ $# -ge 2 ] || die "colocate-sim: --scales needs rank counts"; scales=${2//,/ }; shift ;;
        --day-seconds) [ $# -ge 2 ] || die "colocate-sim: --day-seconds needs seconds"; day=$2; shift ;;
        --load) [ $# -ge 2 ] || die "colocate-sim: --load needs a fraction"; load=$2; shift ;;
        --no-real) real="" ;;
        *) die "colocate-sim: unknown option '$1' (it takes --scales, --day-seconds, --load, --no-real)" ;;
        esac
        shift
    done
    # the real run and the profile on 4 devices of the emulated cluster, rank 0 beside them
    bench_cluster_default "1x4+1"
    if [ -z "$bench_norun" ]; then
        work=$(mktemp -d "${TMPDIR:-/tmp}/tidal-colocate-sim.XXXXXX")
        echo "ranks,realloc,serve_share,requests,with_deadline,slo_violations,slo_violation_rate,train_images_per_s,train_device_h,mean_s,p95_s,moves_per_h,sim_wall_s,command_wall_s" >"$bench_csv"
        local cost="" job="--model tiny --batch 16 --micro-batch 8 --seed 3"
        # 1. the cost models of serving and training, measured on the devices the real run uses
        if [ -n "$bench_cluster" ]; then
            say "profiling serving and training on the emulated cluster $bench_cluster"
            if bench_mpirun 5 "$tidal" profile $job --sides 32,64 --reps 3 --train --out "$work/cost.json"; then
                cost=$work/cost.json
                cp "$cost" "$results/$bench_name.cost.json"
            else
                bench_failed+=("tidal profile --train on the emulated cluster")
            fi
        fi
        # 2. per scale: a day's trace, the runs
        for R in $scales; do
            say "$R ranks: a diurnal trace of $day s at load $load (peak 4x the trough, 4 bursts)"
            "$tidal" workload --diurnal --ranks "$R" --load "$load" --day-seconds "$day" \
                --peak-to-trough 4 --bursts 4 --burst-height 2 --burst-minutes 30 --seed 7 \
                --mix 0,1,0 --class-steps 20,20,20 --alpha 8,8,8 \
                ${cost:+--cost "$cost"} -o "$work/trace$R.jsonl" >>"$bench_log" 2>&1 ||
                { bench_failed+=("tidal workload at $R ranks"); continue; }
            # what an operator sets by hand from yesterday's traffic: per 3 hours, a quarter
            # more serving than the mean load of the block needs, within 10% .. 90%
            local sched
            sched=$(/usr/bin/python3 - "$work/trace$R.jsonl" "$day" "$load" <<'PY'
import json, sys
day, load = float(sys.argv[2]), float(sys.argv[3])
hours = [0] * 24
for line in open(sys.argv[1]):
    t = json.loads(line)["at_ms"] / 1000
    hours[min(23, int(t / day * 24))] += 1
mean = sum(hours) / 24
out = []
for b in range(0, 24, 3):
    need = load * sum(hours[b:b + 3]) / 3 / mean  # the block's load, as a share of capacity
    out.append(f"{b}:{min(0.9, max(0.1, 1.25 * need)):.2f}")
print(",".join(out))
PY
)
            # training keeps a tenth of the ranks (--min-train's default), as the static splits
            # do: its global batch is fixed, so a step on fewer members is longer, and a rank
            # sent back waits for its end
            local args=(--colocate --ranks "$R" --trace "$work/trace$R.jsonl" --chunk 5
                --policy edf_best_fit
                --train-batch $((16 * R)) --day-seconds "$day" --format csv ${cost:+--cost "$cost"})
            colocate_sim_row() { # SHARE ARGS...: one simulation, its row
                local share=$1 out t0 t1; shift
                t0=$(date +%s.%N)
                out=$("$tidal" sim "${args[@]}" "$@" 2>>"$bench_log" | tail -n 1) ||
                    { bench_failed+=("tidal sim $* at $R ranks"); return 0; }
                t1=$(date +%s.%N)
                awk -F, -v R="$R" -v s="$share" -v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" \
                    '{ printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n",
                    R, $2, s, $4, $18, $19, $10, $13, $11, $6, $8, $16, $17, w }' <<<"$out" >>"$bench_csv"
            }
            say "$R ranks: slo_first"
            colocate_sim_row adaptive --realloc slo_first --timeline "$results/$bench_name.timeline$R.csv" \
                --timeline-every $(awk -v d="$day" 'BEGIN { print d / 288 }')
            say "$R ranks: schedule $sched"
            colocate_sim_row hourly --realloc schedule --schedule "$sched"
            for f in 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9; do
                k=$(awk -v R="$R" -v f="$f" 'BEGIN { printf "%d", R * f + 0.5 }')
                say "$R ranks: static, $k serving"
                colocate_sim_row "$f" --realloc static --serve-ranks "$k"
            done
        done
        # 3. the simulator against the job: tidal run on the emulated cluster, and its simulation
        if [ -n "$real" ] && [ -n "$cost" ]; then
            say "the real job: tidal run on $bench_cluster for 60 s of a steady trace"
            "$tidal" workload --ranks 4 --load 0.3 --requests 0 --phases 0.3:60 --seed 9 \
                --mix 1,0,0 --class-steps 20,20,20 --alpha 8,8,8 --cost "$cost" \
                -o "$work/real.jsonl" >>"$bench_log" 2>&1
            # the placement of the day's simulations: edf_best_fit, 5 steps a task
            if bench_mpirun 5 "$tidal" run $job --policy edf_best_fit --chunk 5 \
                --train-steps 1000000 --ckpt-every 1000000 \
                --listen none --trace "$work/real.jsonl" --max-seconds 60 --cost "$cost" \
                --max-resolution 32 --progress-every 0 --out "$work/real" \
                --request-log "$work/real.requests" >"$work/real.out" 2>&1; then
                cat "$work/real.out" >>"$bench_log"
                "$tidal" sim --colocate --ranks 4 --trace "$work/real.jsonl" --cost "$cost" \
                    --policy edf_best_fit --chunk 5 --train-batch 16 --format csv >"$work/sim.csv" 2>>"$bench_log" ||
                    bench_failed+=("tidal sim of the real job")
                /usr/bin/python3 - "$work/real.out" "$work/real.requests" "$work/sim.csv" \
                    >"$results/$bench_name.real.csv" 2>>"$bench_log" <<'PY'
import csv, json, re, sys
text = open(sys.argv[1]).read()
m = re.search(r"training: (\d+) steps in this job, ([\d.]+) images/s over ([\d.]+) s", text)
lat = [json.loads(l)["latency_s"] for l in open(sys.argv[2]) if l.strip()]
sim = list(csv.DictReader(open(sys.argv[3])))[0]
real_ips, real_mean = float(m.group(2)), sum(lat) / len(lat)
sim_ips, sim_mean = float(sim["train_images_per_s"]), float(sim["mean_s"])
print("what,real,sim,error")
print(f"train_images_per_s,{real_ips:.3f},{sim_ips:.3f},{abs(sim_ips - real_ips) / real_ips:.4f}")
print(f"mean_latency_s,{real_mean:.4f},{sim_mean:.4f},{abs(sim_mean - real_mean) / real_mean:.4f}")
PY
            else
                bench_failed+=("tidal run on the emulated cluster")
            fi
        fi
        rm -rf "$work"
    fi
    bench_ran_nps=${scales// /,}
    bench_launch="tidal sim --colocate (the coordinator of tidal run over simulated training, --chunk 5, a global batch of 16 images per rank) at $scales ranks, a diurnal trace of $day s at load $load (tidal workload --diurnal, peak 4x the trough at 14 h, 4 bursts of 2x for 30 min, 64 px images (1024 tokens, as DiT-XL/2 at 512 px) of 20 Heun steps, deadlines 8x the single-device time; edf_best_fit, training never under a tenth of the ranks); cost models profiled on the emulated cluster when there is one (tidal profile --train, the tiny DiT), else the built-in ones; the real job: tidal run on that cluster (rank 0 and 4 workers, the tiny DiT at batch 16, edf_best_fit, 5 steps a task) for 60 s of a steady trace of 32 px requests at 0.3 of its capacity, and tidal sim --colocate of the same"
    # the headline figures, from the rows
    local k2 v
    while read -r k2 v; do bench_headline "$k2" "$v"; done < <(/usr/bin/python3 - "$bench_csv" "$results/$bench_name.real.csv" <<'PY'
import csv, os, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for R in sorted({r["ranks"] for r in rows}, key=int):
    at = [r for r in rows if r["ranks"] == R]
    slo = next((r for r in at if r["realloc"] == "slo_first"), None)
    static = [r for r in at if r["realloc"] == "static"]
    sched = next((r for r in at if r["realloc"] == "schedule"), None)
    if not slo:
        continue
    v, t = int(slo["slo_violations"]), float(slo["train_images_per_s"])
    # the best static split that trains at least as much, and the one with no more violations
    more = [r for r in static if float(r["train_images_per_s"]) >= t]
    fewer = [r for r in static if int(r["slo_violations"]) <= v]
    # none with as few violations: the one with the fewest (a comparison that favours static)
    if not fewer and static:
        least = min(int(r["slo_violations"]) for r in static)
        fewer = [r for r in static if int(r["slo_violations"]) == least]
        print(f"static_fewest_violations_{R}", least)
    best_v = min((int(r["slo_violations"]) for r in more), default=None)
    best_t = max((float(r["train_images_per_s"]) for r in fewer), default=None)
    print(f"slo_violations_slo_first_{R}", v)
    print(f"slo_violation_ratio_vs_best_static_{R}",
          "n/a" if best_v is None else f"{v / best_v:.3f}" if best_v else ("1.000" if v == 0 else "inf"))
    print(f"best_static_violations_{R}", "n/a" if best_v is None else best_v)
    print(f"train_throughput_ratio_vs_best_static_{R}",
          "n/a" if not best_t else f"{t / best_t:.3f}")
    if sched:
        sv, st = int(sched["slo_violations"]), float(sched["train_images_per_s"])
        print(f"slo_violation_ratio_vs_schedule_{R}", f"{v / sv:.3f}" if sv else "n/a")
        print(f"train_throughput_ratio_vs_schedule_{R}", f"{t / st:.3f}" if st else "n/a")
    print(f"sim_seconds_{R}_day", slo["sim_wall_s"])
    print(f"sim_command_seconds_{R}_day", slo["command_wall_s"])
if os.path.exists(sys.argv[2]):
    for r in csv.DictReader(open(sys.argv[2])):
        key = "sim_error_train_throughput" if r["what"] == "train_images_per_s" else "sim_error_mean_latency"
        print(key, r["error"])
PY
)
    for R in $scales; do
        bench_target "$R ranks: SLO violations against the best static split that trains as much" "slo_violation_ratio_vs_best_static_$R" '<=' 0.5
        bench_target "$R ranks: training images/s against the best static split with no more violations" "train_throughput_ratio_vs_best_static_$R" '>=' 1.2
    done
    bench_target "the simulator against the real job: training images/s" sim_error_train_throughput '<=' 0.15
    bench_target "the simulator against the real job: mean latency" sim_error_mean_latency '<=' 0.15
    case " $scales " in *" 512 "*) bench_target "512 ranks through the simulated day, reading the trace too" sim_command_seconds_512_day '<' 60 ;; esac
    bench_table ranks realloc serve_share requests slo_violations slo_violation_rate train_images_per_s train_device_h mean_s p95_s moves_per_h sim_wall_s command_wall_s
    bench_note "serve_share: the static split's share of the ranks serving (adaptive: slo_first; hourly: schedule, a share per 3 hours set from the trace's own hourly arrivals, a quarter above the block's load);" \
        "the best static split is chosen after the fact among the nine, an oracle no operator has; a ratio of violation counts means something only when both are large (each row gives its count);" \
        "train_throughput_ratio_vs_best_static: against the static split with the most training among those with no more violations than slo_first, or, when none has as few, the one with the fewest (static_fewest_violations_R: a comparison that favours static);" \
        "training images/s: images trained over the simulated time, which lasts until the trace is served (an overloaded split drains its queue after the day, and trains meanwhile);" \
        "the real job and its simulation: $bench_name.real.csv (training images/s, and mean latency from tidal run's --request-log, against tidal sim --colocate with the same trace and cost models)"
    bench_plot <<GP
width = 1100
height = 700
set datafile separator ","
set key top right
set xlabel "training images/s"
set ylabel "SLO violation rate"
set logscale y
plot for [R in "$scales"] "$bench_csv" using (\$1 == R+0 && strcol(2) eq "static" ? \$8 : 1/0):(\$7 > 0 ? \$7 : 1e-6) skip 1 with linespoints title "static splits, ".R." ranks", \
     for [R in "$scales"] "" using (\$1 == R+0 && strcol(2) eq "slo_first" ? \$8 : 1/0):(\$7 > 0 ? \$7 : 1e-6) skip 1 with points pt 7 ps 2 title "slo_first, ".R." ranks", \
     for [R in "$scales"] "" using (\$1 == R+0 && strcol(2) eq "schedule" ? \$8 : 1/0):(\$7 > 0 ? \$7 : 1e-6) skip 1 with points pt 5 ps 2 title "schedule, ".R." ranks"
GP
}
