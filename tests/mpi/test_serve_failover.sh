#!/bin/sh
# A serving executor that dies does not lose a request: `tidal serve` on 4 ranks (rank 0 and 3
# executors) under tools/mpirun-recover replays a trace while TIDAL_FAULT kills one executor at
# a step chunk (SIGKILL), or stops it there (SIGSTOP, then SIGKILL once it has been declared
# dead): static_sp1 and static_sp2 (a dead member of a sequence-parallel group), static_sp1 with
# batched chunks (every request of the dead rank's batch); and an
# executor that dies as a request's state moves to other ranks (serve.move), under edf_best_fit.
# Every request answers 200 with the PNG, byte for byte, of a run without the failure (a request
# that lost its rank starts again from its seed); stopped, the job exits 0, names the dead rank
# and counts it in /metrics.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/cluster/common.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
command -v curl >/dev/null 2>&1 || { echo "1..0 # SKIP curl is not installed"; exit 0; }
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
tiny_ckpt "$dir/ckpt"
check "a tiny checkpoint to serve" [ -s "$dir/ckpt/model.h5" ]
ids=""
: >"$dir/trace.jsonl"
for i in 0 1 2 3 4 5 6 7; do
    ids="$ids r$i"
    echo "{\"at_ms\": $((60 * i)), \"id\": \"r$i\", \"label\": $i, \"n\": 1, \"resolution\": 32, \"steps\": 8, \"sampler\": \"euler\", \"seed\": $((i + 1))}" >>"$dir/trace.jsonl"
done
serve="--ckpt $dir/ckpt/model.h5 --trace $dir/trace.jsonl"
recover="$abs_top_srcdir/tools/mpirun-recover"

# ended W WHAT RANK: the job, stopped by SIGTERM to rank 0 after its requests, exits 0, names the
# dead rank in its closing lines, and counts it in /metrics
ended() {
    check "$2: the job exits 0 (rc=`cat "$1/rc"`)" [ "`cat "$1/rc"`" = 0 ]
    check "$2: its closing lines name rank $3" grep -q "1 executor rank died: $3 (" "$1/serve.out"
    check "$2: /metrics counts a dead rank" grep -qx 'tidal_ranks{role="dead"} 1' "$1/metrics"
}

# faulted DIR LABEL WHEN POINT:RANK:NTH KILL|STOP REF IDS ARGS...: the 4-rank job of ARGS with
# rank 1 signalled at the fault point: it must lose no request, and every PNG must be REF's
faulted() {
    f_w=$1 f_label=$2 f_when=$3 f_point=$4 f_how=$5 f_ref=$6 f_ids=$7
    shift 7
    mkdir "$f_w"
    [ $f_how = STOP ] && (stop_then_kill "$f_w/serve.out" "is dead (" "$dir/ckpt" "$f_w/rc" &)
    TIDAL_LAUNCH="$recover" TIDAL_FAULT="$f_point:$f_how" \
        cluster_serve4 "$f_w" "$f_ids" "$@" >/dev/null 2>&1
    check "$f_label of rank 1 $f_when: it happened" \
        grep -q "TIDAL_FAULT: SIG$f_how at ${f_point%%:*}" "$f_w/serve.out"
    check "$f_label: rank 0 declared rank 1 dead and took it out of the pool" \
        grep -q "rank 1 is dead (.*): it leaves the pool, 2 of 3 executors are left" "$f_w/serve.out"
    check "$f_label: every request answered 200" [ "`grep -c ' 200$' "$f_w/codes"`" = 8 ]
    ended "$f_w" "$f_label" 1
    f_same=yes
    for id in $f_ids; do cmp -s "$f_ref/$id.png" "$f_w/$id.png" || f_same=no; done
    check "$f_label: every PNG is byte for byte the one of the run without a failure" [ $f_same = yes ]
    [ $f_same = yes ] || grep -E "warn|error" "$f_w/serve.out" | head -n 20 | sed 's/^/# /'
}


for sp in 1 2; do
    mkdir "$dir/ref$sp"
    cluster_serve4 "$dir/ref$sp" "$ids" $serve --sp $sp >/dev/null 2>&1
    check "sp$sp: without a failure, 8 requests answer 200" [ "`grep -c ' 200$' "$dir/ref$sp/codes"`" = 8 ]
    # rank 1 takes the first free task: it runs chunks in both layouts
    for how in KILL STOP; do
        faulted "$dir/$how$sp" "sp$sp, SIG$how" "at its 3rd chunk" serve.chunk:1:3 $how \
            "$dir/ref$sp" "$ids" $serve --sp $sp
    done
done

# A batch that loses its rank: the eight requests at once, under a cost model whose batch
# dimension says that sharing a step pays, so that each executor's chunks step several requests
# together; rank 1 dies at its 3rd chunk, every member of its batch starts again elsewhere
sed 's/"at_ms": [0-9]*/"at_ms": 0/' "$dir/trace.jsonl" >"$dir/batch.jsonl"
cat >"$dir/bcost.json" <<'EOF'
{"model": "tiny", "patch": 2, "per_image": true,
 "stages": {"prepare": {"1": {"a": 0, "b": 0, "c": 0.0001}},
            "step": {"1": {"a": 0, "b": 0, "c": 0.004}},
            "decode": {"1": {"a": 0, "b": 0, "c": 0.001}}},
 "migration": {"latency_s": 0.0005, "bytes_per_s": 1e10, "state_bytes_per_token": 128},
 "step_batch": {"256": {"1": 1, "8": 0.5}}}
EOF
batched="--ckpt $dir/ckpt/model.h5 --trace $dir/batch.jsonl --sp 1 --cost $dir/bcost.json"
for how in KILL STOP; do
    faulted "$dir/${how}batch" "batched, SIG$how" "at its 3rd chunk" serve.chunk:1:3 $how \
        "$dir/ref1" "$ids" $batched
    b1=`sed -n 's/^tidal_batch_size_bucket{le="1"} //p' "$dir/${how}batch/metrics"`
    ball=`sed -n 's/^tidal_batch_size_bucket{le="+Inf"} //p' "$dir/${how}batch/metrics"`
    check "batched, SIG$how: chunks stepped several requests ($((${ball:-0} - ${b1:-0})) of ${ball:-0})" \
        [ $((${ball:-0} - ${b1:-0})) -gt 0 ]
done

# A move of state on every run: under edf_best_fit, with a cost model in which sp2 steps 4x
# faster than sp1, m0 (40 steps) runs alone at sp2 on ranks 1..2 (rank 1, the first free one,
# leads it, and its ranks are kept). Seven short requests come at once: at m0's next chunk it
# keeps rank 1 and gives rank 2 up to them (sp2 -> sp1), or, if they came before m0's first
# chunk, it widens again once they are done (sp1 -> sp2). Either way rank 1 hands m0's state on.
cat >"$dir/cost.json" <<'EOF'
{"model": "tiny", "patch": 2, "per_image": true, "x": "tokens", "y": "seconds",
 "stages": {"prepare": {"1": {"a": 0, "b": 0, "c": 0.0001}},
            "step": {"1": {"a": 0, "b": 0, "c": 0.004}, "2": {"a": 0, "b": 0, "c": 0.001}},
            "decode": {"1": {"a": 0, "b": 0, "c": 0.001}}},
 "migration": {"latency_s": 0.0005, "bytes_per_s": 1e10, "state_bytes_per_token": 128}}
EOF
mids=""
: >"$dir/move.jsonl"
for i in 0 1 2 3 4 5 6 7; do
    mids="$mids m$i"
    at=30 steps=4
    [ $i = 0 ] && at=0 steps=40
    echo "{\"at_ms\": $at, \"id\": \"m$i\", \"label\": $i, \"n\": 1, \"resolution\": 32, \"steps\": $steps, \"sampler\": \"euler\", \"seed\": $((i + 1))}" >>"$dir/move.jsonl"
done
# debug: rank 0 names each task as it sends it, "(moved)" when the state moves
move="--ckpt $dir/ckpt/model.h5 --trace $dir/move.jsonl --policy edf_best_fit"
move="$move --cost $dir/cost.json --log-level debug"
mkdir "$dir/refmove"
cluster_serve4 "$dir/refmove" "$mids" $move >/dev/null 2>&1
check "move: without a failure, 8 requests answer 200" [ "`grep -c ' 200$' "$dir/refmove/codes"`" = 8 ]
check "move: without a failure, m0's state moves between its chunks" \
    grep -q "request m0: step_chunk (moved)" "$dir/refmove/serve.out"
for how in KILL STOP; do
    faulted "$dir/${how}move" "move, SIG$how" "as it hands m0's state on" serve.move:1:1 $how \
        "$dir/refmove" "$mids" $move
done
done_testing
