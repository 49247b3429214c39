# bench/run serve-batch: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
#
# Issue 23's benchmark of serving as clients expect it. This half measures what a server costs
# before it serves: its peak resident memory (VmHWM after 128x128 requests that fill
# --max-batch 8) and the time from its launch to the first 200 of /healthz, with the default
# model. Still to come (the batched denoising): throughput at saturation at 32 and 64, batched
# against unbatched, and p50 latency at 30% load (batch_throughput_ratio_32,
# batch_throughput_ratio_64, batch_p50_ratio_low_load).

bm_serve_batch() { # tidal serve's peak resident memory and start-up time to /healthz (default model, --max-batch 8, --max-resolution 128); batched throughput to come
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
    bench_table round max_resolution startup_s rss_healthz_mib peak_rss_mib activations_mib requests
    bench_note "start-up: from the launch to the first 200 of /healthz, polled every 10 ms with" \
        "curl; the program itself is run, not libtool's wrapper script; the median of the rounds"
    bench_note "peak: VmHWM of /proc/PID/status after $nreq request(s) of 4 guided images (8 rows" \
        "a forward pass, the whole --max-batch), 2 Heun steps each; the rows at 32: the same server" \
        "sized for and given 32x32 images, what the process holds besides large activations"
    bench_note "with CUDA built in, every tidal process holds about 150 MiB of libcublasLt, GPU or" \
        "not (its 90 MiB of zeroed data and the code its loading touches): compare" \
        "serve_peak_rss_mib_max_res_32 with a build configured --without-cuda"
    bench_note "still to come here: batched against unbatched throughput at 32 and 64 and p50" \
        "latency at 30% load (batch_throughput_ratio_32, batch_throughput_ratio_64," \
        "batch_p50_ratio_low_load)"
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
