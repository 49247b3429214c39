#!/bin/sh
# `tidal profile` under mpirun writes a cost model that `tidal workload` and `tidal sim` read.
# Python recomputes each fit at the measured points from the printed table: the fits must
# reproduce the measurements within the relative error the file claims, and cost must grow
# with the tokens. Bad sides are refused with exit 2.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
tmp="${TMPDIR:-/tmp}/tidal-profile.$$"
trap 'rm -f "$tmp".*' EXIT

tidal_mpirun 2 "$TIDAL" profile --sides 32,48,64,96 --reps 3 --out "$tmp.json" \
    >"$tmp.out" 2>"$tmp.err"; rc=$?
check "profile on 2 ranks exits 0" [ "$rc" = 0 ]
[ "$rc" = 0 ] || sed 's/^/# /' "$tmp.err"

python3 - "$tmp.json" "$tmp.out" >"$tmp.py" 2>&1 <<'EOF'
import json, re, sys
m = json.load(open(sys.argv[1]))
meas = {}
for line in open(sys.argv[2]):
    g = re.match(r"\s*(prepare|step|decode)\s+SP(\d+)\s+\d+x\d+\s+\(\s*(\d+) tokens\):\s+([\d.]+) ms", line)
    if g:
        meas.setdefault((g[1], g[2]), []).append((int(g[3]), float(g[4]) / 1e3))
bad = []
for stage in ("prepare", "step", "decode"):
    for deg in ("1", "2"):
        f = m["stages"][stage].get(deg)
        pts = meas.get((stage, deg), [])
        if f is None or len(pts) != 4:
            bad.append(f"{stage} SP{deg}: fit or points missing ({len(pts)} points)")
            continue
        for x, y in pts:
            fit = f["a"] * x * x + f["b"] * x + f["c"]
            # the printed ms have 3 decimals: allow that rounding on top of the claimed error
            if abs(fit - y) > f["rel_err"] * y * 1.001 + 1e-6:
                bad.append(f"{stage} SP{deg} at {x} tokens: fit {fit:.6g} s, measured {y:.6g} s, claimed rel_err {f['rel_err']:.3g}")
        if stage == "step" and not pts[-1][1] > pts[0][1]:
            bad.append(f"step SP{deg}: {pts[-1][0]} tokens not slower than {pts[0][0]}")
mig = m["migration"]
if not (mig["bytes_per_s"] > 0 and mig["latency_s"] >= 0 and mig["state_bytes_per_token"] > 0):
    bad.append(f"migration block {mig}")
print("\n".join(bad) if bad else "consistent")
sys.exit(1 if bad else 0)
EOF
pyrc=$?
sed 's/^/# /' "$tmp.py"
check "every fit reproduces its measurements within its claimed error; step cost grows" [ "$pyrc" = 0 ]

"$TIDAL" workload -o "$tmp.trace" --requests 60 --ranks 4 --cost "$tmp.json" >"$tmp.wout" 2>&1
check "workload sizes a trace with the profiled model" [ "$?" = 0 ]
"$TIDAL" sim --trace "$tmp.trace" --cost "$tmp.json" --ranks 4 --policy edf_best_fit \
    >"$tmp.sim" 2>&1; rc=$?
sed 's/^/# /' "$tmp.sim"
served=no; [ "$rc" = 0 ] && grep -q ": 60 requests in" "$tmp.sim" && served=yes
check "sim runs edf_best_fit on the profiled model, all 60 requests served" [ "$served" = yes ]

"$TIDAL" profile --sides 30,64 --out "$tmp.no.json" >/dev/null 2>"$tmp.err"; rc=$?
refused=no
[ "$rc" = 2 ] && grep -q "sides '30,64'" "$tmp.err" && [ ! -e "$tmp.no.json" ] && refused=yes
check "sides not a multiple of the patch: exit 2, named, no file written" [ "$refused" = yes ]
done_testing
