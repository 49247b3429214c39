# bench/run serve-sim: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_serve_sim() { # dynamic serving policies against static parallelism, simulated at 8 and 64 ranks (GF-DiT)
    bench_build src/tidal
    local tidal=$builddir/src/tidal np load pol trace row nreq
    local policies="edf_best_fit edf_greedy srtf static_sp1 static_sp2 static_sp4"
    if [ -z "$bench_norun" ]; then
        echo "np,load,policy,requests,throughput_rps,goodput_rps,mean_s,p95_s,p99_s,slo_violation_rate,utilization,migrations" >"$bench_csv"
        for np in ${bench_nps_override:-8 64}; do
            nreq=$((np <= 8 ? 2000 : 8000))
            [ -n "$quick" ] && nreq=$((nreq / 4))
            for load in 0.5 0.75 1.0 1.25 1.5; do
                trace=$results/$bench_name.np$np.load$load.jsonl
                if ! "$tidal" workload --ranks "$np" --load "$load" --requests "$nreq" --seed 7 \
                    -o "$trace" >>"$bench_log" 2>&1; then
                    bench_failed+=("tidal workload at $np ranks, load $load"); continue
                fi
                for pol in $policies; do
                    echo "== tidal sim --ranks $np --policy $pol --trace $trace" >>"$bench_log"
                    if row=$("$tidal" sim --ranks "$np" --policy "$pol" --trace "$trace" \
                        --format csv "${bench_extra[@]}" 2>>"$bench_log" | tail -n 1); then
                        echo "$row" >>"$bench_log"
                        echo "$row" | awk -F, -v np="$np" -v load="$load" 'BEGIN { OFS = "," }
                            { print np, load, $1, $3, $5, $6, $7, $9, $10, $11, $12, $14 }' \
                            >>"$bench_csv"
                    else
                        bench_failed+=("tidal sim $pol at $np ranks, load $load")
                    fi
                done
                rm -f "$trace"
            done
            bench_ran_nps="${bench_ran_nps:+$bench_ran_nps }$np"
        done
    else
        bench_ran_nps=$(csv_agg_np)
    fi
    bench_launch="one process: tidal workload (seed 7) then tidal sim per policy, built-in cost model"
    local cond='np == 8 && load == 1.0' thr mean slo good
    # The best static policy by each metric, edf_best_fit divided by it.
    stat() { awk -F, -v c="$2" -v fn="$1" 'NR > 1 && $1 == 8 && $2 == 1.0 && $3 ~ /^static_sp/ {
        v = $c + 0; if (!n++ || (fn == "max" ? v > r : v < r)) r = v } END { if (n) print r }' \
        "$bench_csv"; }
    ebf() { awk -F, -v c="$1" 'NR > 1 && $1 == 8 && $2 == 1.0 && $3 == "edf_best_fit" {
        print $c; exit }' "$bench_csv"; }
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b + 0 > 0)
        printf "%.3f", a / b; else if (a != "" && a + 0 == 0 && b != "") print "0" }'; }
    thr=$(ratio "$(ebf 5)" "$(stat max 5)")
    good=$(ratio "$(ebf 6)" "$(stat max 6)")
    mean=$(ratio "$(ebf 7)" "$(stat min 7)")
    slo=$(ratio "$(ebf 10)" "$(stat min 10)")
    bench_headline throughput_ratio "$thr"
    bench_headline mean_latency_ratio "$mean"
    bench_headline slo_violation_ratio "$slo"
    bench_headline goodput_ratio "$good"
    bench_headline ebf_slo_violation_rate_8_100 "$(ebf 10)"
    bench_headline ebf_mean_s_8_100 "$(ebf 7)"
    bench_target "edf_best_fit throughput at 8 ranks, 100% load, vs best static" throughput_ratio '>=' 1.5
    bench_target "edf_best_fit mean latency at 8 ranks, 100% load, vs best static" mean_latency_ratio '<=' 0.5
    bench_target "edf_best_fit SLO violations at 8 ranks, 100% load, vs best static" slo_violation_ratio '<=' 0.5
    bench_table np load policy throughput_rps goodput_rps mean_s p95_s p99_s slo_violation_rate utilization migrations
    bench_note "simulated (tidal sim), not measured: the built-in cost model (doc/scheduler.md), chunks of 1 step (tidal serve's and tidal sim's default)," \
        "classes S/M/L = 32/64/128 px with 20/30/50 steps, mix 0.5/0.3/0.2, deadlines 1.5/2/6 x single-rank time;" \
        "load = arrival rate / (ranks / mean single-rank time); throughput = requests / (first arrival to last finish)," \
        "goodput = requests that met their deadline per second; ratios against the best static policy of each metric"
    bench_plot <<GP
width = 1500
height = 800
set datafile separator ","
set multiplot layout 2,3 title name . ": simulated serving, metrics against load (rows: 8 and 64 ranks)"
set xlabel "load (fraction of single-rank capacity)"
set key top left font ",8"
pols = "$policies"
do for [n in "8 64"] {
  set ylabel "requests/s"; set title n . " ranks: throughput"; unset logscale y
  plot for [p in pols] csv using (strcol(3) eq p && column(1) == n + 0 ? column(2) : NaN):5 title p
  set ylabel "seconds"; set title n . " ranks: mean latency"; set logscale y
  plot for [p in pols] csv using (strcol(3) eq p && column(1) == n + 0 ? column(2) : NaN):7 title p
  set ylabel "fraction"; set title n . " ranks: SLO violation rate"; unset logscale y
  plot for [p in pols] csv using (strcol(3) eq p && column(1) == n + 0 ? column(2) : NaN):10 title p
}
unset multiplot
GP
}
