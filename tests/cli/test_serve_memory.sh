#!/bin/sh
# `tidal serve` on the default model (fmnist) at --max-batch 8 --max-resolution 128 keeps an
# inference model: its activations are one block's, untouched until a request needs them. The
# start-up leaves them alone (the resident memory at /healthz is that of a server sized for 32),
# a 128x128 request raises the peak by at most the activations the server reports, and the PNGs
# it serves are byte for byte those of `tidal generate`, which samples with the training model.
# Start-up time and resident memory are printed, not judged: bench/run serve-batch holds them to
# their targets (serve_startup_s, serve_peak_rss_mib).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
serve_test_setup

# the default model, two steps
"$TIDAL" train --steps 2 --batch 8 --micro-batch 8 --val-every 0 --out "$dir/run" \
    >"$dir/train.log" 2>&1
check "tidal train --steps 2 writes the default model's weights" [ -s "$dir/run/model.h5" ]
ckpt="$dir/run/model.h5"

# kib PID FIELD: VmRSS or VmHWM of PID in KiB
kib() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }

# start_server NAME ARGS...: tidal serve on a free port; sets $pid, $base and $startup (seconds
# from the launch until /healthz answered 200), or returns 1
start_server() {
    name=$1; shift
    t0=`date +%s.%N`
    "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 --progress-every 0 "$@" \
        >"$dir/$name.out" 2>"$dir/$name.err" &
    pid=$!
    pids="$pids $pid"
    port="" n=0
    while [ $n -lt 3000 ]; do
        [ -z "$port" ] &&
            port=`sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\).*/\1/p' "$dir/$name.out" \
                2>/dev/null`
        if [ -n "$port" ] &&
            [ "`curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/healthz`" = 200 ]; then
            startup=`echo "\`date +%s.%N\` - $t0" | bc`
            base="http://127.0.0.1:$port"
            return 0
        fi
        kill -0 $pid 2>/dev/null || break
        sleep 0.01; n=$((n + 1))
    done
    sed 's/^/# stderr: /' "$dir/$name.err" | tail -n 20
    return 1
}

stop_server() {
    kill -TERM "$1"
    wait "$1"; rc=$?
}

# the activations a server reports on its start-up line, in MiB
activations() { sed -n 's/.* in \([0-9.]*\) MiB of activations.*/\1/p' "$dir/$1.out"; }

# a server sized for 32: what the process holds besides the activations
if start_server small --max-batch 8 --max-resolution 32; then
    ok "a server for 8 images of 32 answers /healthz"
    rss_small=`kib $pid VmRSS`
    diag "--max-resolution 32: /healthz after $startup s, VmRSS `expr $rss_small / 1024` MiB"
    # cuBLAS (with its 150 MiB of libcublasLt) is opened with a GPU, never on the CPU
    check "a server on the CPU has not loaded cuBLAS" sh -c "! grep -q libcublas /proc/$pid/maps"
    stop_server $pid
else
    not_ok "a server for 8 images of 32 answers /healthz"
fi

if start_server big --max-batch 8 --max-resolution 128; then
    ok "a server for 8 images of 128 answers /healthz"
    rss0=`kib $pid VmRSS`
    act=`activations big`
    diag "--max-resolution 128: /healthz after $startup s, VmRSS `expr $rss0 / 1024` MiB," \
        "$act MiB of activations"
    check "it reports its activations on the start-up line ($act MiB)" [ -n "$act" ]
    # the inference model of 8 images of 128: one block's (the training model's: 943 MiB)
    check "the activations are under 64 MiB" \
        awk -v a="${act:-1e9}" 'BEGIN { exit !(a < 64) }'
    check "start-up leaves the activations untouched: VmRSS within 8 MiB of the 32 server's" \
        awk -v a="$rss0" -v b="${rss_small:-0}" 'BEGIN { exit !(a - b < 8192 && b - a < 8192) }'

    # 4 guided images of 128: 8 rows a pass, the whole workspace
    curl -s -o "$dir/served128.png" -w '%{http_code}' -X POST "$base/v1/images?wait=1" \
        -d '{"label": 3, "n": 4, "resolution": 128, "steps": 2, "cfg": 4, "seed": 7}' \
        >"$dir/code128"
    check "4 guided images of 128: 200" [ "`cat $dir/code128`" = 200 ]
    hwm=`kib $pid VmHWM`
    diag "after a 128x128 request of 8 rows: VmHWM `expr $hwm / 1024` MiB"
    check "the request raised the peak by at most the activations and 24 MiB" \
        awk -v h="$hwm" -v r="$rss0" -v a="${act:-0}" \
        'BEGIN { exit !((h - r) / 1024 <= a + 24) }'
    curl -s -o "$dir/served32.png" -w '%{http_code}' -X POST "$base/v1/images?wait=1" \
        -d '{"label": 5, "n": 3, "resolution": 32, "steps": 3, "cfg": 1, "seed": 11}' \
        >"$dir/code32"
    check "3 unguided images of 32: 200" [ "`cat $dir/code32`" = 200 ]
    stop_server $pid
    check "exit 0 on SIGTERM" [ "$rc" = 0 ]
else
    not_ok "a server for 8 images of 128 answers /healthz"
fi

# the same images from the training model's forward
"$TIDAL" generate --ckpt "$ckpt" --class 3 --n 4 --resolution 128 --steps 2 --cfg 4 --seed 7 \
    -o "$dir/gen128.png" >"$dir/gen128.log" 2>&1
check "served 128x128 PNG == tidal generate's, byte for byte" \
    cmp -s "$dir/served128.png" "$dir/gen128.png"
"$TIDAL" generate --ckpt "$ckpt" --class 5 --n 3 --resolution 32 --steps 3 --cfg 1 --seed 11 \
    -o "$dir/gen32.png" >"$dir/gen32.log" 2>&1
check "served 32x32 PNG == tidal generate's, byte for byte" \
    cmp -s "$dir/served32.png" "$dir/gen32.png"

done_testing
