# bench/run serve-real: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_serve_real() { # one trace per load on the real coordinator (1 + 8 devices): edf_best_fit against every static degree, and the simulator's prediction
    bench_build src/tidal
    local tidal=$builddir/src/tidal work pol nreq=60 exe=2 load loads="0.8 1.0 1.2"
    local extra_loads="0.6 1.5 2.0" l np
    [ -n "$quick" ] && nreq=24 extra_loads=""
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --requests|--loads)
            [ $# -ge 2 ] || die "serve-real: $1 needs a value"
            case $1 in
            --requests) printf '%s' "$2" | grep -qE '^[1-9][0-9]*$' ||
                            die "serve-real: --requests '$2' is not a count"
                        nreq=$2 ;;
            --loads) loads=$(printf '%s' "$2" | tr ',' ' '); extra_loads="" ;;
            esac
            shift ;;
        *) die "serve-real: unknown option '$1' (it takes --requests N --loads 0.8,1.0,1.2)" ;;
        esac
        shift
    done
    for l in $loads; do
        printf '%s' "$l" | grep -qE '^[0-9]+(\.[0-9]+)?$' || die "serve-real: load '$l' is not a number"
    done
    bench_cluster_default "1x8+1"
    [ -n "$bench_cluster" ] && exe=$(($(bench_cluster_np "$bench_cluster") - 1))
    np=$((exe + 1))
    # the static degrees tidal serve takes: up to the executors, dividing fmnist's 4 heads
    local policies="edf_best_fit" d=1 heads=4
    while [ $d -le "$exe" ] && [ $((heads % d)) = 0 ]; do
        policies="$policies static_sp$d"; d=$((d * 2))
    done
    if [ -z "$bench_norun" ]; then
        work=$(mktemp -d "${TMPDIR:-/tmp}/tidal-serve-real.XXXXXX")
        echo "source,policy,load,requests,mean_s,p50_s,p95_s,makespan_s,met_deadline" >"$bench_csv"
        say "training a 2-step fmnist checkpoint to serve"
        if ! OPENBLAS_NUM_THREADS=1 "$tidal" train --model fmnist --resolution 32 --batch 4 \
            --micro-batch 2 --steps 2 --val-every 0 --out "$work/run" >>"$bench_log" 2>&1; then
            bench_failed+=("tidal train"); return 0
        fi
        # the profile runs on the job's layout (rank 0 coordinates there too)
        bench_mpirun "$np" "$tidal" profile --model fmnist --out "$work/cost.json" --reps 3 ||
            bench_failed+=("tidal profile")
        for load in $loads $extra_loads; do
            "$tidal" workload --ranks "$exe" --load "$load" --requests "$nreq" --seed 11 \
                --class-steps 10,15,20 --cost "$work/cost.json" -o "$work/trace-$load.jsonl" \
                >>"$bench_log" 2>&1 || bench_failed+=("tidal workload --load $load")
            for pol in $policies; do
                # the static degrees only at the loads the figures need: the others take the
                # time of the real runs that matter, and the sustainable load needs only the best
                case " $loads " in *" $load "*) ;; *) [ "$pol" = edf_best_fit ] ||
                    [ "$pol" = "static_sp$(bench_serve_best_static "$load")" ] || continue ;; esac
                bench_mpirun "$np" "$tidal" serve --ckpt "$work/run/model.h5" --listen none \
                    --trace "$work/trace-$load.jsonl" --exit-after-trace --policy "$pol" \
                    --cost "$work/cost.json" --progress-every 10 \
                    --request-log "$work/real_${pol}_$load.jsonl" ||
                    bench_failed+=("tidal serve $pol at load $load")
                "$tidal" sim --trace "$work/trace-$load.jsonl" --ranks "$exe" --policy "$pol" \
                    --cost "$work/cost.json" --request-log "$work/sim_${pol}_$load.jsonl" \
                    >>"$bench_log" 2>&1 || bench_failed+=("tidal sim $pol at load $load")
                for src in real sim; do
                    /usr/bin/python3 - "$src" "$pol" "$load" "$work/${src}_${pol}_$load.jsonl" \
                        "$work/trace-$load.jsonl" >>"$bench_csv" 2>>"$bench_log" <<'PY'
import json, sys
src, pol, load, log, trace = sys.argv[1:6]
rs = [json.loads(l) for l in open(log)]
tr = [json.loads(l) for l in open(trace)]
lat = sorted(r["latency_s"] for r in rs)
q = lambda p: lat[max(0, min(len(lat) - 1, int(-(-p * len(lat) // 1)) - 1))]
span = max(r["finish_s"] for r in rs) - min(r["arrival_s"] for r in rs)
# a request meets its deadline when it succeeded within deadline_ms of its arrival
met = sum(1 for r in rs if r.get("ok", True) and "deadline_ms" in tr[r["seq"]]
          and r["latency_s"] * 1000.0 <= tr[r["seq"]]["deadline_ms"])
print(f"{src},{pol},{load},{len(rs)},{sum(lat) / len(lat):.6f},{q(0.5):.6f},{q(0.95):.6f},"
      f"{span:.6f},{met / len(tr):.4f}")
PY
                done
            done
        done
        rm -rf "$work"
    fi
    bench_ran_nps=$np
    bench_launch="mpirun -np $np: rank 0 coordinates, $exe executors; the fmnist DiT, one tidal workload trace per load (fractions of the executors' single-rank capacity under a cost model profiled in the same run, on the same layout)"
    # column c of source s, policy p, load l
    val() { awk -F, -v s="$1" -v p="$2" -v l="$3" -v c="$4" \
        '$1 == s && $2 == p && $3 + 0 == l + 0 { print $c; exit }' "$bench_csv"; }
    local ebf best bp v worst=0 e lo
    ebf=$(val real edf_best_fit 1.0 5)
    best="" bp=""
    for pol in $policies; do
        [ "$pol" = edf_best_fit ] && continue
        v=$(val real "$pol" 1.0 5)
        [ -n "$v" ] && { [ -z "$best" ] || awk -v a="$v" -v b="$best" 'BEGIN { exit !(a < b) }'; } &&
            best=$v bp=$pol
    done
    bench_headline mean_latency_ratio "$(awk -v a="$ebf" -v b="$best" 'BEGIN { if (a != "" && b + 0 > 0) printf "%.3f", a / b }')"
    # the simulator's error: the largest over the loads, of edf_best_fit's mean latency
    for load in $loads; do
        e=$(awk -v s="$(val sim edf_best_fit "$load" 5)" -v r="$(val real edf_best_fit "$load" 5)" \
            'BEGIN { if (s != "" && r + 0 > 0) { d = (s - r) / r; printf "%.3f", d < 0 ? -d : d } }')
        [ -n "$e" ] && bench_headline "sim_error_mean_latency_$load" "$e"
        [ -n "$e" ] && worst=$(awk -v a="$worst" -v b="$e" 'BEGIN { print (b > a ? b : a) }')
    done
    bench_headline sim_error_mean_latency "$worst"
    # the highest load at which at least 90% of the requests met their deadline, per policy
    # (walking up the loads, up to the first that fails)
    lo() { awk -F, -v p="$1" '$1 == "real" && $2 == p { print $3, $9 }' "$bench_csv" | sort -n |
           awk '$2 + 0 < 0.9 { bad = 1 } !bad { m = $1 } END { if (m != "") print m }'; }
    local le ls sbest="" sbp=""
    le=$(lo edf_best_fit)
    for pol in $policies; do
        [ "$pol" = edf_best_fit ] && continue
        ls=$(lo "$pol")
        [ -n "$ls" ] && { [ -z "$sbest" ] || awk -v a="$ls" -v b="$sbest" 'BEGIN { exit !(a > b) }'; } &&
            sbest=$ls sbp=$pol
    done
    bench_headline sustainable_load_ratio "$(awk -v a="$le" -v b="$sbest" 'BEGIN { if (a != "" && b + 0 > 0) printf "%.3f", a / b }')"
    bench_headline sustainable_load_edf_best_fit "$le"
    bench_headline sustainable_load_best_static "${sbest:+$sbest ($sbp)}"
    bench_headline real_mean_s_edf_best_fit "$ebf"
    bench_headline sim_mean_s_edf_best_fit "$(val sim edf_best_fit 1.0 5)"
    bench_headline real_mean_s_best_static "${best:+$best ($bp)}"
    bench_target "edf_best_fit mean latency on the real coordinator vs the best static policy, load 1.0" mean_latency_ratio '<=' 0.5
    bench_target "highest load with 90% of deadlines met, edf_best_fit over the best static policy" sustainable_load_ratio '>=' 1.5
    bench_target "the simulator's mean latency against the real run's (edf_best_fit), worst load" sim_error_mean_latency '<=' 0.15
    bench_table source policy load requests mean_s p50_s p95_s makespan_s met_deadline
    bench_note "classes S/M/L = 32/64/128 px with 10/15/20 steps, chunks of 1 step (the default of tidal serve and tidal sim); the cost model is" \
        "tidal profile's on the job's layout; latency = arrival at the coordinator to the PNG back;" \
        "met_deadline = the share of the trace's requests that succeeded within their deadline (tidal workload's: alpha x the cost model's single-rank time);" \
        "sim_error = |sim - real| / real of edf_best_fit's mean latency; sustainable load = the highest load run at which met_deadline >= 0.9" \
        "(loads $loads${extra_loads:+, and $extra_loads for edf_best_fit and the static degree best at load 1.0}: a lower bound when the highest load run still meets it)"
    awk -F, 'NR > 1 && $3 + 0 == 1.0 { v[$2 "," $1] = $5; if (!(($2) in seen)) { seen[$2] = 1; o[n++] = $2 } }
             END { print "policy,real,sim"; for (i = 0; i < n; i++) print o[i] "," v[o[i] ",real"] "," v[o[i] ",sim"] }' \
        "$bench_csv" >"$results/$bench_name.bars.csv" 2>/dev/null
    bench_plot <<GP
width = 1300
set datafile separator ","
set multiplot layout 1, 2 title name . ": real coordinator and simulator"
set title "mean latency at load 1.0"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "seconds"
set key top left
bars = "$results/$bench_name.bars.csv"
plot for [i = 2:3] bars using i:xtic(1) title columnhead(i)
set title "share of deadlines met against load (real runs)"
set style data linespoints
set style fill empty
set xlabel "load (of the executors' single-rank capacity)"
set ylabel "met deadline"
set yrange [0:1.05]
set xtics auto
plot for [p in "$policies"] csv using (strcol(1) eq "real" && strcol(2) eq p ? column(3) : NaN):9 title p, \
     0.9 with lines dt 2 lc "black" title "90%"
unset multiplot
GP
}

# The static degree whose mean latency was lowest at load 1.0 in this run (1 when none ran yet).
bench_serve_best_static() {
    awk -F, 'NR > 1 && $1 == "real" && $2 ~ /^static_sp/ && $3 + 0 == 1.0 &&
             (b == "" || $5 + 0 < b) { b = $5 + 0; p = substr($2, 10) }
             END { print (p == "" ? 1 : p) }' "$bench_csv"
}
