# bench/run serve-real: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_serve_real() { # one trace on the real coordinator (mpirun, 2 executors): edf_best_fit against static, and the simulator's prediction
    bench_build src/tidal
    local tidal=$builddir/src/tidal work pol nreq=60 exe=2
    [ -n "$quick" ] && nreq=24
    local policies="edf_best_fit static_sp1 static_sp2"
    if [ -z "$bench_norun" ]; then
        work=$(mktemp -d "${TMPDIR:-/tmp}/tidal-serve-real.XXXXXX")
        echo "source,policy,requests,mean_s,p50_s,p95_s,makespan_s" >"$bench_csv"
        say "training a 2-step fmnist checkpoint to serve"
        if ! OPENBLAS_NUM_THREADS=1 "$tidal" train --model fmnist --resolution 32 --batch 4 \
            --micro-batch 2 --steps 2 --val-every 0 --out "$work/run" >>"$bench_log" 2>&1; then
            bench_failed+=("tidal train"); return 0
        fi
        # the profile runs as many processes as the job (rank 0 coordinates there): the cores are
        # shared the same way
        bench_mpirun $((exe + 1)) "$tidal" profile --model fmnist --out "$work/cost.json" --reps 5 ||
            bench_failed+=("tidal profile")
        "$tidal" workload --ranks "$exe" --load 1.0 --requests "$nreq" --seed 11 \
            --class-steps 10,15,20 --cost "$work/cost.json" -o "$work/trace.jsonl" \
            >>"$bench_log" 2>&1 || bench_failed+=("tidal workload")
        for pol in $policies; do
            bench_mpirun $((exe + 1)) "$tidal" serve --ckpt "$work/run/model.h5" --listen none \
                --trace "$work/trace.jsonl" --exit-after-trace --policy "$pol" \
                --cost "$work/cost.json" --progress-every 10 \
                --request-log "$work/real_$pol.jsonl" || bench_failed+=("tidal serve $pol")
            "$tidal" sim --trace "$work/trace.jsonl" --ranks "$exe" --policy "$pol" \
                --cost "$work/cost.json" --request-log "$work/sim_$pol.jsonl" \
                >>"$bench_log" 2>&1 || bench_failed+=("tidal sim $pol")
            for src in real sim; do
                python3 - "$src" "$pol" "$work/${src}_$pol.jsonl" >>"$bench_csv" 2>>"$bench_log" <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[3])]
lat = sorted(r["latency_s"] for r in rs)
q = lambda p: lat[max(0, min(len(lat) - 1, int(-(-p * len(lat) // 1)) - 1))]
span = max(r["finish_s"] for r in rs) - min(r["arrival_s"] for r in rs)
print(f"{sys.argv[1]},{sys.argv[2]},{len(rs)},{sum(lat) / len(lat):.6f},{q(0.5):.6f},{q(0.95):.6f},{span:.6f}")
PY
            done
        done
        rm -rf "$work"
    fi
    bench_ran_nps=$((exe + 1))
    bench_launch="mpirun -np $((exe + 1)): rank 0 coordinates, $exe executors; the fmnist DiT, a tidal workload trace at load 1.0 of a cost model profiled in the same run"
    val() { awk -F, -v s="$1" -v p="$2" -v c="$3" '$1 == s && $2 == p { print $c; exit }' "$bench_csv"; }
    local ebf s1 s2 best sim_ebf
    ebf=$(val real edf_best_fit 4); s1=$(val real static_sp1 4); s2=$(val real static_sp2 4)
    sim_ebf=$(val sim edf_best_fit 4)
    best=$(awk -v a="$s1" -v b="$s2" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 < b + 0) print a; else print b }')
    bench_headline mean_latency_ratio "$(awk -v a="$ebf" -v b="$best" 'BEGIN { if (a != "" && b + 0 > 0) printf "%.3f", a / b }')"
    bench_headline sim_error_mean_latency "$(awk -v s="$sim_ebf" -v r="$ebf" 'BEGIN { if (s != "" && r + 0 > 0) { d = (s - r) / r; printf "%.3f", d < 0 ? -d : d } }')"
    bench_headline real_mean_s_edf_best_fit "$ebf"
    bench_headline sim_mean_s_edf_best_fit "$sim_ebf"
    bench_headline real_mean_s_best_static "$best"
    bench_target "edf_best_fit mean latency on the real coordinator vs the best static policy" mean_latency_ratio '<=' 0.5
    bench_target "the simulator's mean latency against the real run's (edf_best_fit)" sim_error_mean_latency '<=' 0.15
    bench_table source policy requests mean_s p50_s p95_s makespan_s
    bench_note "classes S/M/L = 32/64/128 px with 10/15/20 steps, chunks of 1 step (the default of tidal serve and tidal sim); the cost model is" \
        "tidal profile's on 2 ranks of this machine; latency = arrival at the coordinator to the PNG back;" \
        "sim_error = |sim - real| / real of edf_best_fit's mean latency; 3 processes share 2 cores"
    awk -F, 'NR > 1 { v[$2 "," $1] = $4; if (!(($2) in seen)) { seen[$2] = 1; o[n++] = $2 } }
             END { print "policy,real,sim"; for (i = 0; i < n; i++) print o[i] "," v[o[i] ",real"] "," v[o[i] ",sim"] }' \
        "$bench_csv" >"$results/$bench_name.bars.csv" 2>/dev/null
    bench_plot <<GP
width = 900
set datafile separator ","
set title name . ": mean latency, real coordinator and simulator"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "seconds"
set key top left
bars = "$results/$bench_name.bars.csv"
plot for [i = 2:3] bars using i:xtic(1) title columnhead(i)
GP
}
