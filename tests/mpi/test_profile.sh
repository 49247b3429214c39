#!/bin/sh
# `tidal profile` under mpirun writes a cost model that `tidal workload` and `tidal sim` read.
# Python recomputes each fit at the measured points from the printed table: the fits must
# reproduce the measurements within the relative error the file claims, and cost must grow
# with the tokens. Bad sides are refused with exit 2.
#
# `tidal profile --train` (doc/colocation.md) on 2 and 3 ranks with the tiny model: Python
# recomputes step(n) of coord/train_model.h from the "train" object at every measured point,
# which must lie within the step_rel_err the file claims (and the claim must be the largest),
# the table printed must be the file's points, and the serving model must stay beside it. A fit
# that fails must say why, print its measurements and leave the file as it was. Bad training
# arguments are refused with exit 2.
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
# the batch dimension: a table per side, each factor the printed ms an image over one image's
sides = {32: 64, 48: 144, 64: 256, 96: 576}
for line in open(sys.argv[2]):
    g = re.match(r"\s*step\s+SP1\s+(\d+)x\d+\s+batches:(.*)", line)
    if not g:
        continue
    side, pts = int(g[1]), re.findall(r"(\d+): ([\d.]+) ms an image \(x([\d.]+)\)", g[2])
    table = m.get("step_batch", {}).get(str(sides.get(side, 0)))
    if not table or sorted(int(k) for k in table) != [1, 2, 4, 8] or len(pts) != 4:
        bad.append(f"step_batch at {side} px: table {table}, printed {pts}")
        continue
    one = float(pts[0][1])
    for b, ms, fac in pts:
        if abs(table[b] - float(fac)) > 1e-3 * max(1, table[b]) or \
           abs(float(ms) / one - table[b]) > 0.02 * table[b] + 1e-3 / one:
            bad.append(f"step_batch at {side} px, {b} images: {table[b]} against printed {ms} ms (x{fac})")
    sides.pop(side)
if sides:
    bad.append(f"no batch line for sides {sorted(sides)}")
mig = m["migration"]
if not (mig["bytes_per_s"] > 0 and mig["latency_s"] >= 0 and mig["state_bytes_per_token"] > 0):
    bad.append(f"migration block {mig}")
print("\n".join(bad) if bad else "consistent")
sys.exit(1 if bad else 0)
EOF
pyrc=$?
sed 's/^/# /' "$tmp.py"
check "every fit reproduces its measurements within its claimed error; step cost grows; a batch table per side, its factors the printed ones" [ "$pyrc" = 0 ]
"$TIDAL" profile --step-batches 1,0 --out "$tmp.no.json" >/dev/null 2>"$tmp.err"; rc=$?
check "--step-batches 1,0: exit 2, named, no file written" \
    sh -c '[ "$1" = 2 ] && grep -q "step-batches" "$2" && [ ! -e "$3" ]' _ "$rc" "$tmp.err" "$tmp.no.json"

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

# ---- tidal profile --train -----------------------------------------------------------------
targs="--model tiny --resolution 32 --batch 8 --micro-batch 4 --reps 3"

# train_check JSON OUT RANKS: the "train" object against the formula and the printed table; the
# serving model beside it. Prints what is wrong, exits 1 if anything is.
train_check() {
    python3 - "$@" <<'EOF'
import json, math, re, sys
path, out, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = json.load(open(path))
text = open(out).read()
bad = []
t = m.get("train")
if not isinstance(t, dict):
    print('no "train" object'); sys.exit(1)
g = re.search(r"tidal profile --train: tiny \((\d+) parameters\)", text)
params = int(g[1]) if g else 0
if t["model"] != "tiny" or t["codec"] != "f32" or t["batch"] != 8:
    bad.append(f"model/codec/batch {t['model']} {t['codec']} {t['batch']}")
if t["grad_bytes"] != 4 * params or t["state_bytes"] != (4 * params + 2048) * 4:
    bad.append(f"grad_bytes {t['grad_bytes']}, state_bytes {t['state_bytes']} for {params} parameters")
if not (t["image_s"] > 0 and t["link_bytes_per_s"] > 0 and t["fixed_s"] >= 0 and t["hop_s"] >= 0):
    bad.append(f"image_s {t['image_s']}, link {t['link_bytes_per_s']}, fixed {t['fixed_s']}, hop {t['hop_s']}")
pts = t["points"]
want = sorted((n, b) for b in (8, 16) for n in range(1, ranks + 1))
if sorted((p["members"], p["batch"]) for p in pts) != want:
    bad.append(f"points {[(p['members'], p['batch']) for p in pts]}, want {want}")
def allreduce(n):
    return 0 if n < 2 else 2 * (n - 1) / n * t["grad_bytes"] / t["link_bytes_per_s"] + 2 * (n - 1) * t["hop_s"]
worst = 0
rows = {(int(r[0]), int(r[1])): [float(x) for x in r[2:]] for r in
        re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[+-][\d.]+%$", text, re.M)}
for p in pts:
    n, b = p["members"], p["batch"]
    fit = t["fixed_s"] + math.ceil(b / n) * t["image_s"] + allreduce(n)
    err = abs(fit - p["step_s"]) / p["step_s"]
    worst = max(worst, err)
    if err > t["step_rel_err"] * (1 + 1e-9) + 1e-12:
        bad.append(f"n={n} b={b}: fit {fit:.6g} s, measured {p['step_s']:.6g} s, error {err:.3g} > claimed {t['step_rel_err']:.3g}")
    if abs(fit - p["fit_s"]) > 1e-9 * fit:
        bad.append(f"n={n} b={b}: fit_s {p['fit_s']} in the file, {fit} from the formula")
    if not (p["step_s"] > 0 and (p["allreduce_s"] > 0) == (n > 1) and p["allreduce_s"] < p["step_s"]):
        bad.append(f"n={n} b={b}: step {p['step_s']} s, all-reduce {p['allreduce_s']} s")
    r = rows.get((n, b))
    if r is None or r[0] != math.ceil(b / n) or abs(r[1] - p["step_s"] * 1e3) > 6e-4 \
            or abs(r[2] - p["allreduce_s"] * 1e3) > 6e-4 or abs(r[3] - fit * 1e3) > 6e-4:
        bad.append(f"n={n} b={b}: printed row {r}, file {p}")
if abs(worst - t["step_rel_err"]) > 1e-9:
    bad.append(f"step_rel_err {t['step_rel_err']}, the points' largest {worst}")
g = re.search(r"train fit: .*largest relative error ([\d.]+)%", text)
if not g or abs(float(g[1]) - t["step_rel_err"] * 100) > 0.051:
    bad.append(f"printed fit error {g[1] if g else None}%, file {t['step_rel_err'] * 100:.2f}%")
if not (m.get("stages", {}).get("step", {}).get("1") and m.get("migration")):
    bad.append("the serving cost model is gone")
print("\n".join(bad) if bad else f"consistent: {len(pts)} points within {t['step_rel_err'] * 100:.1f}%")
sys.exit(1 if bad else 0)
EOF
}

# fit_failed RC OUT ERR JSON BEFORE RANKS: the fit failed (exit 1), said why, printed every
# point (2 batches x RANKS member counts) without a fit, and left JSON as it was: the same bytes
# as the copy BEFORE, or (BEFORE "no-train") with no "train" object.
fit_failed() {
    [ "$1" = 1 ] && grep -q "the training fit failed: train model: " "$3" &&
        [ "`grep -cE '^ +[0-9]+ +(8|16) +[0-9]+ +[0-9.]+ +[0-9.]+ +- +-$' "$2"`" = $((2 * $6)) ] &&
        if [ "$5" = no-train ]; then
            python3 -c 'import json, sys; sys.exit("train" in json.load(open(sys.argv[1])))' "$4"
        else
            cmp -s "$4" "$5"
        fi
}

# 2 ranks, --train-only, onto the serving model of the first run: one group size above 1 does
# not tell the all-reduce's bytes from its hops for coord_train_model_fit today, so the fit must
# fail saying so; should the fit learn to do without (train_model.h: "one of them above 1"), the
# file must be consistent instead.
cp "$tmp.json" "$tmp.t2.json"
cp "$tmp.json" "$tmp.t2.before"
tidal_mpirun 2 "$TIDAL" profile --train-only $targs --out "$tmp.t2.json" \
    >"$tmp.t2.out" 2>"$tmp.t2.err"; rc=$?
sed 's/^/# /' "$tmp.t2.out"
if [ "$rc" = 0 ]; then
    train_check "$tmp.t2.json" "$tmp.t2.out" 2 >"$tmp.py" 2>&1; pyrc=$?
    sed 's/^/# /' "$tmp.py"
    check "train-only on 2 ranks: the fit reproduces every point within its claimed error" \
        [ "$pyrc" = 0 ]
else
    grep "profile:" "$tmp.t2.err" | sed 's/^/# /'
    check "train-only on 2 ranks: the fit fails saying why, the points printed, file untouched" \
        fit_failed "$rc" "$tmp.t2.out" "$tmp.t2.err" "$tmp.t2.json" "$tmp.t2.before" 2
fi

# 3 ranks, serving and training into a new file
tidal_mpirun 3 "$TIDAL" profile --train --sides 32,64 $targs --out "$tmp.t3.json" \
    >"$tmp.t3.out" 2>"$tmp.t3.err"; rc=$?
sed 's/^/# /' "$tmp.t3.out"
grep "profile:" "$tmp.t3.err" | sed 's/^/# /'
serving=no
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); sys.exit(0 if m["stages"]["step"]["2"] else 1)' \
    "$tmp.t3.json" 2>/dev/null && serving=yes
check "--train on 3 ranks writes the serving model first (SP1 and SP2)" [ "$serving" = yes ]
trained=no
if [ "$rc" = 0 ]; then
    train_check "$tmp.t3.json" "$tmp.t3.out" 3 >"$tmp.py" 2>&1; pyrc=$?
    sed 's/^/# /' "$tmp.py"
    check "--train on 3 ranks: the fit reproduces every point within its claimed error" \
        [ "$pyrc" = 0 ]
    trained=yes
else
    # Where 3 ranks share 2 cores, the 3-member all-reduce often takes over twice the 2-member
    # one (each hop waits for a rank to get a core), which 2 (n - 1) / n of the bytes and
    # 2 (n - 1) hops cannot fit (doc/colocation.md): the fit must then say so.
    check "--train on 3 ranks: a fit that fails says why and prints its points" \
        fit_failed "$rc" "$tmp.t3.out" "$tmp.t3.err" "$tmp.t3.json" no-train 3
    skip "--train on 3 ranks: the fit failed on this machine (see above): no \"train\" object to check"
fi

if ! "$TIDAL" sim --help 2>/dev/null | grep -q -- --colocate; then
    skip "tidal sim has no --colocate in this build"
elif [ "$trained" != yes ]; then
    skip "sim --colocate on the profiled training: no \"train\" object (the fit failed)"
else
    "$TIDAL" workload -o "$tmp.t3.trace" --requests 30 --ranks 4 --cost "$tmp.t3.json" \
        >/dev/null 2>&1 &&
        "$TIDAL" sim --trace "$tmp.t3.trace" --cost "$tmp.t3.json" --ranks 4 --colocate \
            >"$tmp.sim1" 2>&1; rc=$?
    "$TIDAL" sim --trace "$tmp.t3.trace" --cost "$tmp.t3.json" --ranks 4 --colocate \
        --train-model "$tmp.t3.json" >"$tmp.sim2" 2>&1
    sed 's/^/# /' "$tmp.sim1"
    same=no # but for the wall time of the simulation
    [ "$rc" = 0 ] && grep -q "co-located on 4 ranks" "$tmp.sim1" &&
        [ "`sed 's/simulated in .*//' "$tmp.sim1"`" = "`sed 's/simulated in .*//' "$tmp.sim2"`" ] &&
        same=yes
    check "sim --colocate --cost reads the profiled \"train\" object (as --train-model does)" \
        [ "$same" = yes ]
fi

# bad training arguments: exit 2, named, before MPI, no file
for bad in "--resolution 33" "--data $tmp.none.h5" "--batch 0" "--allreduce-round up"; do
    "$TIDAL" profile --train-only --model tiny $bad --out "$tmp.no.json" >/dev/null 2>"$tmp.err"
    rc=$?
    refused=no
    opt=${bad%% *}
    [ "$rc" = 2 ] && grep -q -- "$opt" "$tmp.err" && [ ! -e "$tmp.no.json" ] && refused=yes
    [ "$refused" = yes ] || sed 's/^/# /' "$tmp.err"
    check "profile --train-only $bad: exit 2, named, no file written" [ "$refused" = yes ]
done
done_testing
