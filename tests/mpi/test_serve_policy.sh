#!/bin/sh
# The real coordinator and the simulator run the same policies: a small trace is replayed by
# `tidal serve` under mpirun (rank 0 coordinates, 2 executors) with edf_best_fit and with
# static_sp1, with a cost model `tidal profile` measured here, and simulated by `tidal sim` with
# the same cost model; the two agree on the order in which the requests complete. Bad policy
# choices are refused with exit 2 before anything runs.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
tiny_ckpt "$dir/run"
ckpt="$dir/run/model.h5"
check "a tiny checkpoint to serve" [ -s "$ckpt" ]
tidal_mpirun 2 "$TIDAL" profile --model tiny --sides 32,48,64 --reps 3 --out "$dir/cost.json" \
    >"$dir/profile.out" 2>&1
check "profile of the tiny model on 2 ranks" [ -s "$dir/cost.json" ]

# a large request, two small ones while it runs; later a pair that arrives together-ish
cat >"$dir/t.jsonl" <<'EOF'
{"at_ms": 0, "label": -1, "n": 1, "resolution": 64, "steps": 6, "seed": 1}
{"at_ms": 40, "label": -1, "n": 1, "resolution": 32, "steps": 3, "seed": 2}
{"at_ms": 80, "label": -1, "n": 1, "resolution": 32, "steps": 3, "seed": 3}
{"at_ms": 1500, "label": -1, "n": 1, "resolution": 64, "steps": 4, "seed": 4}
{"at_ms": 1520, "label": 3, "n": 1, "resolution": 32, "steps": 2, "cfg": 2.0, "seed": 5}
EOF
for p in edf_best_fit static_sp1; do
    tidal_mpirun 3 "$TIDAL" serve --ckpt "$ckpt" --listen none --trace "$dir/t.jsonl" \
        --exit-after-trace --policy $p --cost "$dir/cost.json" --max-resolution 64 \
        --progress-every 0 --request-log "$dir/real_$p.jsonl" >"$dir/serve_$p.out" 2>&1
    rc=$?
    check "$p: the trace on 3 ranks exits 0 (rc=$rc)" [ $rc = 0 ]
    check "$p: all 5 done" grep -q "trace: 5 requests, 5 done, 0 failed" "$dir/serve_$p.out"
    [ $rc = 0 ] || tail -n 20 "$dir/serve_$p.out" | sed 's/^/# /'
    "$TIDAL" sim --trace "$dir/t.jsonl" --ranks 2 --chunk 1 --policy $p --cost "$dir/cost.json" \
        --request-log "$dir/sim_$p.jsonl" >"$dir/sim_$p.out" 2>&1
    check "$p: simulated" [ $? = 0 ]
    python3 - "$dir/real_$p.jsonl" "$dir/sim_$p.jsonl" >"$dir/cmp_$p" 2>&1 <<'EOF'
import json, sys
real = [json.loads(l) for l in open(sys.argv[1])]
sim = [json.loads(l) for l in open(sys.argv[2])]
order = lambda rs: [r["seq"] for r in sorted(rs, key=lambda r: r["finish_s"])]
mean = lambda rs: sum(r["latency_s"] for r in rs) / len(rs)
print(f"real order {order(real)}, mean latency {mean(real):.3f} s")
print(f"sim  order {order(sim)}, mean latency {mean(sim):.3f} s")
ok = len(real) == 5 and all(r["ok"] for r in real) and order(real) == order(sim)
sys.exit(0 if ok else 1)
EOF
    rc=$?
    sed 's/^/# /' "$dir/cmp_$p"
    check "$p: the real run completes the requests in the simulator's order" [ $rc = 0 ]
done

bad() { # DESC NP ARGS...: exit 2 and a line naming the problem
    desc=$1; np=$2; shift 2
    tidal_mpirun $np "$TIDAL" serve --ckpt "$ckpt" --listen none --trace "$dir/t.jsonl" \
        --exit-after-trace "$@" >"$dir/bad.out" 2>&1
    rc=$?
    check "$desc: exit 2 (rc=$rc)" [ $rc = 2 ]
}
bad "unknown --policy" 3 --policy fastest
bad "--sp 3 without a policy" 3 --sp 3
bad "static_sp4 with 2 executors" 3 --policy static_sp4
grep -q "4 executor ranks" "$dir/bad.out"
check "the error says how many executors static_sp4 needs" [ $? = 0 ]
bad "a cost model that does not parse" 3 --policy edf_best_fit --cost "$dir/t.jsonl"
done_testing
