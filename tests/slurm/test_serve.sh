#!/bin/sh
# jobs/serve.sbatch on a real single-node Slurm: under srun --mpi=pmix and under mpirun, a
# server of 3 ranks (a coordinator, 2 executors) answers HTTP requests with PNGs; the time-limit
# warning (`scancel --signal=USR1 --batch`) stops it cleanly and the job ends COMPLETED; a trace
# replay job (--listen none --trace --exit-after-trace) serves every request and completes.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/slurm/cluster.sh"
. "$abs_top_srcdir/tests/slurm/common.sh"
command -v curl >/dev/null 2>&1 || { echo "1..0 # SKIP curl is not installed"; slurm_planned=1; exit 0; }

slurm_start || { slurm_skip_all 2 "no Slurm cluster: $slurm_why"; slurm_planned=1; exit 0; }
w=$slurm_dir/work
tiny_ckpt "$w/run"
check "a tiny model to serve" [ -s "$w/run/model.h5" ]
cat >"$w/serve.conf" <<CONF
ckpt = $w/run/model.h5
listen = 127.0.0.1:0
max-resolution = 32
max-batch = 4
progress-every = 0
max-seconds = 120   # a bound, should the stop go wrong
CONF
export TIDAL_SERVE_CONF="$w/serve.conf"
body='{"label": 3, "n": 2, "resolution": 32, "steps": 3, "cfg": 2.0, "seed": 5}'

launchers=`slurm_launchers`
case $launchers in srun*) ;; *) skip "$slurm_no_pmix" ;; esac
for l in $launchers; do
    out="$w/serve-$l.out"
    TIDAL_LAUNCHER=$l slurm_submit "$l: serve.sbatch" -D "$w" -n 3 -o "$out" \
        "$TIDAL_JOBS/serve.sbatch" --sp 1 || continue
    id=$slurm_id
    slurm_wait_file "$out" "listening on http://" 60
    url=`sed -n 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "$out" | head -n 1`
    check "$l: serve.sbatch (job $id, 3 tasks) listens (${url:-nowhere})" [ -n "$url" ]
    for i in 1 2; do
        code=`curl -s --max-time 60 -o "$w/$l-$i.png" -w '%{http_code}' -d "$body" "$url/v1/images?wait=1"`
        check "$l: request $i answered 200 with a PNG ($code)" sh -c \
            "[ '$code' = 200 ] && head -c 8 '$w/$l-$i.png' | od -An -c | grep -q 'P   N   G'"
    done
    check "$l: the same seeded request gives the same image" cmp -s "$w/$l-1.png" "$w/$l-2.png"
    if command -v pngcheck >/dev/null 2>&1; then
        check "$l: pngcheck accepts it" pngcheck -q "$w/$l-1.png"
    fi
    scancel --signal=USR1 --batch "$id"
    slurm_wait_state "$id" COMPLETED 60
    check "$l: after the time-limit warning the job ends COMPLETED ($slurm_state)" [ "$slurm_state" = COMPLETED ]
    check "$l: exit code 0:0 (`slurm_job_field $id ExitCode`)" [ "`slurm_job_field $id ExitCode`" = 0:0 ]
    check "$l: the server stopped on the SIGTERM it was given, 2 requests done" sh -c \
        "grep -q 'stopping (SIGTERM)' '$out' && grep -q 'http: 2 requests, 2 done, 0 failed' '$out'"
    [ "$slurm_state" = COMPLETED ] || slurm_diag "$out"
done

# trace replay, with the default launcher
i=0
: >"$w/t.jsonl"
while [ $i -lt 6 ]; do
    echo "{\"at_ms\": $((i * 20)), \"label\": $i, \"n\": 1, \"resolution\": 32, \"steps\": 3, \"seed\": $i}" >>"$w/t.jsonl"
    i=$((i + 1))
done
out="$w/trace.out"
id=""
slurm_submit "trace replay" -D "$w" -n 3 -o "$out" "$TIDAL_JOBS/serve.sbatch" --listen none \
    --trace "$w/t.jsonl" --exit-after-trace --sp 2 && id=$slurm_id
slurm_state=none
[ -n "$id" ] && slurm_wait_state "$id" COMPLETED 60
check "trace replay at --sp 2 (job $id) ends COMPLETED ($slurm_state)" [ "$slurm_state" = COMPLETED ]
check "all 6 requests of the trace done" grep -q "trace: 6 requests, 6 done, 0 failed" "$out"
[ "$slurm_state" = COMPLETED ] || slurm_diag "$out"
slurm_done
