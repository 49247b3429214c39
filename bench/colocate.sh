# bench/run colocate: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_colocate() { # tidal run against a static half-and-half partition on 1 coordinator + 8 devices: SLO violations, training images/s, reallocation time
    bench_build src/tidal
    local tidal=$builddir/src/tidal work mode np=5 secs=120 out alpha=8 cost="" base=0.012 burst=0.12 batch=32
    [ -n "$quick" ] && secs=60
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --alpha|--seconds|--base|--burst|--batch)
            [ $# -ge 2 ] || die "colocate: $1 needs a value"
            printf '%s' "$2" | grep -qE '^[0-9]+(\.[0-9]+)?$' || die "colocate: $1 '$2' is not a number"
            case $1 in --alpha) alpha=$2 ;; --seconds) secs=${2%.*} ;;
                       --base) base=$2 ;; --burst) burst=$2 ;; --batch) batch=${2%.*} ;; esac
            shift ;;
        *) die "colocate: unknown option '$1' (it takes --alpha X --seconds N --base LOAD --burst LOAD --batch N)" ;;
        esac
        shift
    done
    bench_cluster_default "1x8+1"
    if [ -n "$bench_cluster" ]; then
        np=$(bench_cluster_np "$bench_cluster")
        # loads against the capacity of a cost model profiled on these devices: between the
        # bursts 0.1 of one device per worker, in the bursts 1.2 (more than twice what the
        # static half serves: at 1.0 it missed 17 deadlines, too few for a ratio to count);
        # deadlines 4x the single-device time
        case " ${bench_extra[*]} " in *" --base "*) ;; *) base=0.1 ;; esac
        case " ${bench_extra[*]} " in *" --burst "*) ;; *) burst=1.2 ;; esac
        case " ${bench_extra[*]} " in *" --alpha "*) ;; *) alpha=4 ;; esac
    fi
    if [ -z "$bench_norun" ]; then
        work=$(mktemp -d "${TMPDIR:-/tmp}/tidal-colocate.XXXXXX")
        echo "mode,requests,done,slo_violations,train_steps,train_images_per_s,realloc_p50_ms,realloc_p95_ms,over_budget_p95,batch,over_prev_step_p95,alpha" >"$bench_csv"
        # two bursts, a tenth of the trace each, in calm: the static half must miss deadlines in
        # them, and tidal run train on nearly every worker between them
        local q=$((secs / 10))
        if [ -n "$bench_cluster" ]; then
            # the cost model of these devices, profiled on the same layout as the job. 12
            # repetitions: a step of 32 px is 2-4 periods of a throttled device, and with 3 the
            # slowest member's median moved by +-25% from run to run and the trace built on it
            # from 308 to 510 requests (12: +-11%, capacity within +-5%; doc/colocation.md)
            say "profiling the serving cost model on the emulated cluster"
            bench_mpirun "$np" "$tidal" profile --model fmnist --sides 32,64 --reps 12 \
                --out "$work/cost.json" && cost=$work/cost.json ||
                bench_failed+=("tidal profile on the emulated cluster")
        fi
        # without a cluster: the built-in cost model's capacity (about 16 requests/s of this mix
        # on 4 ranks): 0.2 requests/s between bursts of 2/s, which is what this machine serves with
        # its 2 cores shared by 5 processes; deadlines 8x the model's single-rank time (the
        # model is about 5x faster than a rank here that shares its core with training)
        "$tidal" workload --ranks $((np - 1)) --requests 0 ${cost:+--cost "$cost"} \
            --phases "$base:$((2 * q)),$burst:$q,$base:$((3 * q)),$burst:$q,$base:$((secs - 7 * q))" \
            --mix 0.8,0.2,0 --alpha "$alpha,$alpha,$alpha" --class-steps 20,20,20 --seed 5 -o "$work/trace.jsonl" \
            >>"$bench_log" 2>&1 || bench_failed+=("tidal workload")
        for mode in slo_first static; do
            out=$work/$mode
            bench_mpirun $np "$tidal" run --model fmnist --train-steps 1000000 --batch "$batch" \
                --micro-batch 16 --ckpt-every 100000 --listen none --trace "$work/trace.jsonl" --chunk 5 \
                --max-seconds "$secs" --realloc $mode --serve-ranks $(((np - 1) / 2)) \
                ${cost:+--cost "$cost"} \
                --max-resolution 64 --progress-every 10 --out "$out" 2>"$work/$mode.out" ||
                bench_failed+=("tidal run --realloc $mode")
            cp "$out/timeline.csv" "$results/$bench_name.$mode.timeline.csv" 2>/dev/null
            cp "$work/$mode.out" "$results/$bench_name.$mode.out" 2>/dev/null
            awk -v mode=$mode -v alpha="$alpha" -v batch="$batch" '
                /trace: [0-9]+ requests/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "requests,") req = $i;
                    if ($(i+1) == "done,") done = $i; if ($(i+1) == "SLO") slo = $i } }
                /realloc to serving p50/ { for (i = 1; i <= NF; i++) { if ($i == "p50") p50 = $(i+1); if ($i == "p95") p95 = $(i+1) } }
                /against the training step they waited for/ { n95 = 0
                    for (i = 1; i <= NF; i++) if ($i == "p95") { n95++; if (n95 == 1) ob = $(i+1); else op = $(i+1) } }
                /training: [0-9]+ steps in this job/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "steps") steps = $i;
                    if ($(i+1) == "images/s") ips = $i } }
                END { printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", mode, req, done, slo, steps, ips, p50 + 0, p95 + 0, ob + 0, batch, op + 0, alpha }' \
                "$work/$mode.out" >>"$bench_csv"
        done
        rm -rf "$work"
    fi
    bench_ran_nps=$np
    [ -n "$bench_norun" ] && alpha=$(awk -F, 'NR == 2 { print $12 }' "$bench_csv" 2>/dev/null) &&
        batch=$(awk -F, 'NR == 2 { print $10 }' "$bench_csv" 2>/dev/null)
    bench_launch="mpirun -np $np tidal run (rank 0 coordinates, $((np - 1)) workers), the fmnist DiT at batch $batch, a ${secs} s trace with two bursts"
    val() { awk -F, -v m="$1" -v c="$2" '$1 == m { print $c; exit }' "$bench_csv"; }
    local sa sb ia ib p95
    sa=$(val slo_first 4); sb=$(val static 4); ia=$(val slo_first 6); ib=$(val static 6)
    p95=$(val slo_first 8)
    bench_headline slo_violation_ratio_vs_static "$(awk -v a="$sa" -v b="$sb" 'BEGIN { if (b + 0 > 0) printf "%.3f", a / b; else if (a + 0 == 0) print "1.000" }')"
    bench_headline train_throughput_ratio_vs_static "$(awk -v a="$ia" -v b="$ib" 'BEGIN { if (b + 0 > 0) printf "%.3f", a / b }')"
    bench_headline realloc_ms_p95 "$p95"
    # each move against the training step it waited for + 10 ms; and against the step before
    bench_headline realloc_over_budget "$(val slo_first 9)"
    bench_headline realloc_over_prev_step_budget "$(val slo_first 11)"
    bench_headline slo_violations_slo_first "$sa"
    bench_headline slo_violations_static "$sb"
    bench_headline static_violations "$sb"
    bench_target "SLO violations, tidal run against the static partition" slo_violation_ratio_vs_static '<=' 0.5
    bench_target "training images/s, tidal run against the static partition" train_throughput_ratio_vs_static '>=' 1.0
    bench_target "moving a rank to serving: p95 over one training step + 10 ms" realloc_over_budget '<=' 1.0
    bench_target "violations of the static partition, enough for a ratio to mean something" static_violations '>=' 20
    bench_table mode requests done slo_violations train_steps train_images_per_s realloc_p50_ms realloc_p95_ms over_budget_p95 over_prev_step_p95 batch
    bench_note "static: --realloc static --serve-ranks $(((np - 1) / 2)) (half of the $((np - 1)) workers serve, half train, all the time);" \
        "slo_first: tidal run's default policy; the same trace (tidal workload --phases, 80% 32 px and 20% 64 px, 20 Heun steps," \
        "loads $base with two bursts of $burst, each a tenth of the trace (at 2/10 and 6/10 of it), as fractions of the workers' single-device capacity under the cost model (profiled on the same layout when on the emulated cluster), deadlines $alpha x the cost model's single-rank time); realloc = from the decision to the rank's report that it serves;" \
        "over_budget = each move's time / (the duration of the training step under way at the decision, which a leaving rank must finish as it is in that step's all-reduce, + 10 ms), p95 over the moves;" \
        "over_prev_step = the same against the step before the decision + 10 ms (a step slowed by the burst's serving on the shared cores overruns it)"
    bench_plot <<GP
width = 1100
height = 700
set datafile separator ","
set multiplot layout 2,1 title name . ": ranks serving and training images/s over time"
set key top left
set ylabel "serving ranks"
plot "$results/$bench_name.slo_first.timeline.csv" using 1:2 with steps title "slo_first", \
     "$results/$bench_name.static.timeline.csv" using 1:2 with steps title "static"
set ylabel "training images/s"
set xlabel "seconds"
plot "$results/$bench_name.slo_first.timeline.csv" using 1:7 with lines title "slo_first", \
     "$results/$bench_name.static.timeline.csv" using 1:7 with lines title "static"
unset multiplot
GP
}
