# bench/run serve-batch: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
#
# Issue 23's benchmark of serving as clients expect it: what a server costs before it serves (its
# peak resident memory, VmHWM after 128x128 requests that fill --max-batch 8, and the time from
# its launch to the first 200 of /healthz, with the default model), and what batched denoising
# buys alone: throughput at saturation at 32 and 64 px and p50 latency at 30% load, batched
# against --no-batching, in the same run; and the same on 8 executor devices of the emulated
# cluster (1x8+1: rank 0 coordinates, edf_best_fit, batched chunks under a cost model that
# tidal profile measures there, its batch dimension included).

bm_serve_batch() { # tidal serve's peak resident memory and start-up time to /healthz (default model, --max-batch 8, --max-resolution 128); batched against unbatched throughput and low-load p50, alone
    bench_build src/tidal
    local tidal=$builddir/src/tidal work rounds=3 nreq=3 r res
    [ -n "$quick" ] && rounds=1 nreq=1
    [ ${#bench_extra[@]} -eq 0 ] || die "serve-batch: takes no options yet (got '${bench_extra[*]}')"
    command -v curl >/dev/null 2>&1 || die "serve-batch: needs curl"
    # the program itself, not libtool's wrapper script of an uninstalled build (a shell that
    # takes 0.3 to 0.7 s here before tidal starts): what an installed tidal costs
    local prog=$tidal libs=""
    if [ -x "$builddir/src/.libs/tidal" ] && grep -q libtool "$tidal" 2>/dev/null; then
        prog=$builddir/src/.libs/tidal libs=$builddir/src/.libs
    fi
    if [ -z "$bench_norun" ]; then
        work=$(mktemp -d "${TMPDIR:-/tmp}/tidal-serve-batch.XXXXXX")
        echo "round,max_resolution,startup_s,rss_healthz_mib,peak_rss_mib,activations_mib,requests" \
            >"$bench_csv"
        say "training the default model (fmnist) for 2 steps to serve"
        if ! OPENBLAS_NUM_THREADS=1 "$tidal" train --steps 2 --batch 8 --micro-batch 8 \
            --val-every 0 --out "$work/run" >>"$bench_log" 2>&1; then
            bench_failed+=("tidal train"); rm -rf "$work"; return 0
        fi
        for r in $(seq 1 "$rounds"); do
            for res in 32 128; do
                say "round $r: tidal serve --max-batch 8 --max-resolution $res"
                serve_batch_round "$r" "$res" || bench_failed+=("tidal serve, round $r, $res")
            done
        done
        serve_batch_throughput
        serve_batch_cluster
        rm -rf "$work"
    fi
    bench_launch="one tidal serve process (no mpirun), OPENBLAS_NUM_THREADS=1, the fmnist DiT of a 2-step tidal train, --max-batch 8"
    bench_headline serve_startup_s "$(csv_median startup_s 128)"
    bench_headline serve_peak_rss_mib "$(csv_agg max peak_rss_mib 'max_resolution == 128')"
    bench_headline serve_rss_at_healthz_mib "$(csv_median rss_healthz_mib 128)"
    bench_headline serve_activations_mib "$(awk -F, 'NR > 1 && $2 == 128 && $6 != "" { print $6; exit }' "$bench_csv" 2>/dev/null)"
    bench_headline serve_peak_rss_mib_max_res_32 "$(csv_agg max peak_rss_mib 'max_resolution == 32')"
    bench_target "tidal serve's peak resident memory, default model, --max-batch 8 --max-resolution 128, after 128x128 requests" serve_peak_rss_mib '<' 200
    bench_target "seconds from the launch of tidal serve to its first /healthz 200" serve_startup_s '<' 1
    local tcsv=$results/$bench_name.throughput.csv k2 v
    if [ -s "$tcsv" ]; then
        while read -r k2 v; do bench_headline "$k2" "$v"; done < <(awk -F, '
            NR > 1 { key = $1 "," $2 "," $3; rate[key] = $6; p50[key] = $7 }
            END {
                for (r = 32; r <= 64; r *= 2) {
                    b = rate["saturation," r ",batched"]; u = rate["saturation," r ",unbatched"]
                    if (u > 0) printf "batch_throughput_ratio_%d %.3f\n", r, b / u
                    if (u > 0) printf "unbatched_requests_per_s_%d %.3f\nbatched_requests_per_s_%d %.3f\n", r, u, r, b
                }
                b = p50["low," 32 ",batched"]; u = p50["low," 32 ",unbatched"]
                if (u > 0) printf "batch_p50_ratio_low_load %.3f\nunbatched_p50_s_low_load %.4f\n", b / u, u
            }' "$tcsv")
        bench_target "batched throughput at saturation, 32 px, against --no-batching" batch_throughput_ratio_32 '>=' 2
        bench_target "batched throughput at saturation, 64 px, against --no-batching" batch_throughput_ratio_64 '>=' 1.3
        bench_target "p50 latency at 30% load, 32 px, batched over --no-batching" batch_p50_ratio_low_load '<=' 1.1
    fi
    local ccsv=$results/$bench_name.cluster.csv
    if [ -s "$ccsv" ]; then
        while read -r k2 v; do bench_headline "$k2" "$v"; done < <(awk -F, '
            NR > 1 { key = $1 "," $2 "," $3; rate[key] = $6; p50[key] = $7; nb[key] = $8 "/" $9 }
            END {
                for (r = 32; r <= 64; r *= 2) {
                    b = rate["saturation," r ",batched"]; u = rate["saturation," r ",unbatched"]
                    if (u > 0) printf "cluster_batch_throughput_ratio_%d %.3f\n", r, b / u
                    if (u > 0) printf "cluster_batched_chunks_%d %s\n", r, nb["saturation," r ",batched"]
                }
                b = p50["low," 32 ",batched"]; u = p50["low," 32 ",unbatched"]
                if (u > 0) printf "cluster_batch_p50_ratio_low_load %.3f\n", b / u
            }' "$ccsv")
        bench_target "on 8 emulated executors: batched throughput at saturation, 32 px" cluster_batch_throughput_ratio_32 '>=' 2
        bench_target "on 8 emulated executors: batched throughput at saturation, 64 px" cluster_batch_throughput_ratio_64 '>=' 1.3
        bench_target "on 8 emulated executors: p50 latency at 30% load, 32 px, batched over --no-batching" cluster_batch_p50_ratio_low_load '<=' 1.1
    fi
    bench_table round max_resolution startup_s rss_healthz_mib peak_rss_mib activations_mib requests
    bench_note "start-up: from the launch to the first 200 of /healthz, polled every 10 ms with" \
        "curl; the program itself is run, not libtool's wrapper script; the median of the rounds"
    bench_note "peak: VmHWM of /proc/PID/status after $nreq request(s) of 4 guided images (8 rows" \
        "a forward pass, the whole --max-batch), 2 Heun steps each; the rows at 32: the same server" \
        "sized for and given 32x32 images, what the process holds besides large activations"
    bench_note "cuBLAS is opened with a GPU, not linked (it held about 150 MiB of every process);" \
        "serve_peak_rss_mib_max_res_32: what a server sized for 32 px holds, its activations" \
        "aside"
    bench_note "throughput ($bench_name.throughput.csv): one tidal serve alone, --max-batch 16," \
        "a trace of requests all at 0 ms (20 Heun steps, guidance 4, labels 0-9: 2 rows a" \
        "request, up to 8 requests a pass), --exit-after-trace, batched and --no-batching in" \
        "turn; low load: a Poisson trace at 30% of the --no-batching rate just measured, at 32" \
        "px. On a CPU one BLAS thread keeps its core busy with one image's products, so batching" \
        "saves only the per-pass costs"
    bench_note "cluster ($bench_name.cluster.csv): mpirun -np 9 on the emulated cluster" \
        "${bench_cluster:-(none here: plain mpirun)}, edf_best_fit, --max-batch 16, the same" \
        "saturation traces, low load at 30% of the rate the cluster sustained unbatched;" \
        "the cost model is tidal profile's on that layout (--sides 32,64, its batch dimension at" \
        "1, 2, 4, 8, 16 images), so chunks batch only where that profile says sharing a step pays;" \
        "batched_chunks: chunks that took in others / the requests they held"
    awk -F, 'NR > 1 { s[$2] = s[$2] " " $4; p[$2] = ($5 + 0 > p[$2] + 0 ? $5 : p[$2]) }
             END { print "max_resolution,rss_healthz_mib,peak_rss_mib"
                   for (r in p) { split(s[r], a, " "); print r "," a[1] "," p[r] } }' \
        "$bench_csv" 2>/dev/null | sort -t, -k1n >"$results/$bench_name.bars.csv"
    bench_plot <<GP
width = 900
set datafile separator ","
set title name . ": resident memory of tidal serve (MiB)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "MiB"
set yrange [0:*]
set key top left
bars = "$results/$bench_name.bars.csv"
plot for [i = 2:3] bars using i:xtic(1) title columnhead(i), 200 with lines lw 2 title "target (peak)"
GP
}

# csv_median COLUMN RES: the median of COLUMN over the rows at max_resolution RES.
csv_median() {
    awk -F, -v col="$1" -v res="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
        $2 == res && $c != "" { print $c }' "$bench_csv" | sort -g |
        awk '{ v[n++] = $1 } END { if (n) printf "%s", n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }'
}

# serve_batch_round ROUND RES: one server's start-up and peak, a CSV row.
serve_batch_round() {
    local r=$1 res=$2 out=$work/serve-$1-$2 t0 t1 pid port="" n=0 code rss hwm act done_n=0 i
    t0=$(date +%s.%N)
    OPENBLAS_NUM_THREADS=1 LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
        "$prog" serve --ckpt "$work/run/model.h5" --listen 127.0.0.1:0 --progress-every 0 \
        --max-batch 8 --max-resolution "$res" >"$out.out" 2>"$out.err" &
    pid=$!
    while [ $n -lt 6000 ]; do
        [ -z "$port" ] && port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\).*/\1/p' \
            "$out.out" 2>/dev/null)
        if [ -n "$port" ]; then
            code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")
            [ "$code" = 200 ] && break
        fi
        kill -0 $pid 2>/dev/null || break
        sleep 0.01; n=$((n + 1))
    done
    t1=$(date +%s.%N)
    if [ "${code:-}" != 200 ]; then
        cat "$out.err" >>"$bench_log"
        kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
        return 1
    fi
    rss=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$pid/status")
    act=$(sed -n 's/.* in \([0-9.]*\) MiB of activations.*/\1/p' "$out.out")
    for i in $(seq 1 "$nreq"); do
        code=$(curl -s -o "$out.$i.png" -w '%{http_code}' -X POST \
            "http://127.0.0.1:$port/v1/images?wait=1" \
            -d "{\"label\": $((i % 10)), \"n\": 4, \"resolution\": $res, \"steps\": 2, \"cfg\": 4, \"seed\": $((100 + i))}")
        [ "$code" = 200 ] && done_n=$((done_n + 1))
    done
    hwm=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/$pid/status")
    kill -TERM $pid; wait $pid
    cat "$out.out" "$out.err" >>"$bench_log"
    awk -v r="$r" -v res="$res" -v t0="$t0" -v t1="$t1" -v rss="$rss" -v hwm="$hwm" \
        -v act="$act" -v n="$done_n" \
        'BEGIN { printf "%d,%d,%.3f,%.1f,%.1f,%s,%d\n", r, res, t1 - t0, rss / 1024, hwm / 1024, act, n }' \
        >>"$bench_csv"
    [ "$done_n" = "$nreq" ]
}

# serve_batch_throughput: saturation at 32 and 64 px and low load at 32, batched and not; rows
# in $results/$bench_name.throughput.csv (what,res,mode,requests,seconds,requests_per_s,p50_s).
serve_batch_throughput() {
    local tcsv=$results/$bench_name.throughput.csv res mode n rate line
    echo "what,res,mode,requests,seconds,requests_per_s,p50_s" >"$tcsv"
    for res in 32 64; do
        n=48 && [ "$res" = 64 ] && n=16
        [ -n "$quick" ] && n=$((n / 2))
        /usr/bin/python3 - "$work/sat$res.jsonl" "$n" "$res" <<'PY'
import json, sys
path, n, res = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "w") as f:
    for i in range(n):
        f.write(json.dumps({"at_ms": 0, "label": i % 10, "resolution": res, "steps": 20,
                            "cfg": 4, "seed": 1000 + i}) + "\n")
PY
        for mode in unbatched batched; do
            say "saturation at $res px, $mode: $n requests at once"
            serve_batch_trace saturation "$res" "$mode" "$work/sat$res.jsonl" "$n" >>"$tcsv" ||
                bench_failed+=("saturation $res $mode")
        done
    done
    rate=$(awk -F, '$1 == "saturation" && $2 == 32 && $3 == "unbatched" { print $6 }' "$tcsv")
    [ -n "$rate" ] || return 0
    n=40 && [ -n "$quick" ] && n=20
    serve_batch_low_trace "$work/low.jsonl" "$n" "$rate" 23 2000
    for mode in unbatched batched; do
        say "30% load at 32 px ($(awk -v r="$rate" 'BEGIN { printf "%.2f", 0.3 * r }') requests/s), $mode"
        serve_batch_trace low 32 "$mode" "$work/low.jsonl" "$n" >>"$tcsv" || bench_failed+=("low load $mode")
    done
}

# serve_batch_trace WHAT RES MODE TRACE N: one server through the trace, its CSV row.
serve_batch_trace() {
    local out=$work/$1-$2-$3 flag=""
    [ "$3" = unbatched ] && flag=--no-batching
    OPENBLAS_NUM_THREADS=1 "$tidal" serve --ckpt "$work/run/model.h5" --listen none \
        --trace "$4" --exit-after-trace --max-batch 16 --max-resolution 64 --progress-every 0 \
        $flag >"$out.out" 2>&1 || { cat "$out.out" >>"$bench_log"; return 1; }
    cat "$out.out" >>"$bench_log"
    sed -n 's/.*trace: \([0-9]*\) requests, \([0-9]*\) done, .* in \([0-9.]*\) s (\([0-9.]*\) done\/s); latency p50 \([0-9.]*\) s.*/\2 \3 \4 \5/p' "$out.out" |
        awk -v w="$1" -v r="$2" -v m="$3" -v n="$5" '$1 == n { printf "%s,%s,%s,%s,%s,%s,%s\n", w, r, m, $1, $2, $3, $4; ok = 1 }
            END { exit !ok }'
}


# serve_batch_cluster: the saturation and low-load traces on 8 executors of the emulated cluster
# (1x8+1), edf_best_fit under a cost model profiled there, batched and --no-batching; rows in
# $results/$bench_name.cluster.csv (what,res,mode,requests,seconds,requests_per_s,p50_s,
# batches,batched).
serve_batch_cluster() {
    local ccsv=$results/$bench_name.cluster.csv what res mode trace n
    bench_cluster_default "1x8+1"
    echo "what,res,mode,requests,seconds,requests_per_s,p50_s,batches,batched" >"$ccsv"
    bench_mpirun 9 "$tidal" profile --model fmnist --sides 32,64 --step-batches 1,2,4,8,16 \
        --reps 7 --out "$work/cost.json" || { bench_failed+=("tidal profile on the cluster"); return 0; }
    for what in saturation-32 saturation-64 low-32; do
        res=${what#*-}
        case $what in
        saturation-*) trace=$work/sat$res.jsonl ;;
        *)  # 30% of the rate this cluster sustained unbatched at 32 px
            trace=$work/cllow.jsonl
            local rate
            rate=$(awk -F, '$1 == "saturation" && $2 == 32 && $3 == "unbatched" { print $6 }' "$ccsv")
            [ -n "$rate" ] || continue
            n=40 && [ -n "$quick" ] && n=20
            serve_batch_low_trace "$trace" "$n" "$rate" 29 3000
            ;;
        esac
        [ -s "$trace" ] || continue
        n=$(grep -c . "$trace")
        for mode in unbatched batched; do
            local flag="" log=$work/cl-$what-$mode.jsonl
            [ "$mode" = unbatched ] && flag=--no-batching
            say "cluster: $what, $mode: $n requests"
            bench_mpirun 9 "$tidal" serve --ckpt "$work/run/model.h5" --listen none \
                --trace "$trace" --exit-after-trace --policy edf_best_fit --cost "$work/cost.json" \
                --max-batch 16 --max-resolution 64 --progress-every 0 --request-log "$log" $flag ||
                { bench_failed+=("cluster: $what $mode"); continue; }
            local nb
            nb=$(grep 'tidal serve: policy .* batched chunks' "$bench_log" | tail -n 1 |
                sed -n 's/.*, \([0-9]*\) batched chunks (\([0-9]*\) requests).*/\1,\2/p')
            /usr/bin/python3 - "$log" "${what%-*}" "$res" "$mode" "${nb:-,}" >>"$ccsv" 2>>"$bench_log" <<'PY'
import json, sys
log, what, res, mode, nb = sys.argv[1:6]
rs = [json.loads(l) for l in open(log)]
lat = sorted(r["latency_s"] for r in rs)
span = max(r["finish_s"] for r in rs) - min(r["arrival_s"] for r in rs)
p50 = lat[max(0, (len(lat) + 1) // 2 - 1)]
print(f"{what},{res},{mode},{len(rs)},{span:.4f},{len(rs) / span:.4f},{p50:.4f},{nb}")
PY
        done
    done
}

# serve_batch_low_trace PATH N RATE RNG_SEED FIRST_SEED: N requests at 32 px (20 Heun steps,
# guidance 4) arriving as Poisson at 30% of RATE requests/s.
serve_batch_low_trace() {
    /usr/bin/python3 - "$@" <<'PY'
import json, random, sys
path, n, rate, rs, s0 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng, t = random.Random(rs), 0.0
with open(path, "w") as f:
    for i in range(n):
        t += rng.expovariate(0.3 * rate)
        f.write(json.dumps({"at_ms": int(t * 1000), "label": i % 10, "resolution": 32,
                            "steps": 20, "cfg": 4, "seed": s0 + i}) + "\n")
PY
}
