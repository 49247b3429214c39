#!/bin/sh
# The emulated cluster (tools/cluster) measures what it claims:
# - a rank's compute rate does not depend on how many ranks run: the same sampling work on 1, 4
#   and 8 devices of 0.22 core (8 of them fill this machine's 2 cores), every rank within 10% of
#   the rate of the device that ran alone;
# - the layout a run prints is the one asked for, and the one the ranks find themselves in (their
#   hosts, their devices' quotas);
# - a trace served on 2 hosts x 2 ranks gives byte for byte the PNGs of 4 ranks on one host;
# - `tidal train` on 2 hosts x 2 ranks ends with bit for bit the weights and losses of 4 ranks on
#   one host (f32 and dynamiq: the all-reduce sums in an order set by the ranks, not the wires).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/cluster/common.sh"

# ---- run inside the cluster ------------------------------------------------------------------

# One rank: its host, its device (cgroup) and quota, and one fixed piece of compute: tidal
# generate sampling 8 images in 10 steps, the seconds it prints (the sampling alone), the wall
# seconds and CPU seconds of the whole program (the device's share of a core: CPU / wall).
# generate prints its seconds to the hundredth: in tenths, the 1.5 s of a 0.22-core device read
# 1.4, 1.5 or 1.6, 7% apart, and a rank 10% off a lone device could be rounding alone.
rank_rate() { # CKPT DIR
    r=$OMPI_COMM_WORLD_RANK
    cg=`sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}cpu\(,[^:]*\)\{0,1\}:\(.*\)/\3/p' /proc/self/cgroup`
    q=`cat "/sys/fs/cgroup/cpu$cg/cpu.cfs_quota_us"`/`cat "/sys/fs/cgroup/cpu$cg/cpu.cfs_period_us"`
    times >"$2/cpu0.$r"
    t0=`date +%s.%N`
    "$TIDAL" generate --ckpt "$1" --n 8 --steps 10 --sampler euler --output "$2/g$r.png" \
        >"$2/gen.$r" || return 1
    t1=`date +%s.%N`
    times >"$2/cpu1.$r"
    cpu=`cat "$2/cpu0.$r" "$2/cpu1.$r" | awk 'function s(t) { sub(/s$/, "", t); split(t, a, "m")
        return a[1] * 60 + a[2] } NR == 2 { c0 = s($1) + s($2) } NR == 4 { c1 = s($1) + s($2) }
        END { printf "%.3f", c1 - c0 }'`
    echo "rate: rank $r host `hostname` quota $q start $t0 end $t1 seconds" \
        `sed -n 's/.* in \([0-9.]*\) s -> .*/\1/p' "$2/gen.$r"` cpu $cpu
}
# what the machine's cores did meanwhile: busy jiffies and all jiffies (/proc/stat)
cpu_jiffies() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
rates() { # CKPT DIR: every device of the cluster at once
    echo "layout: $TIDAL_CLUSTER_LAYOUT"
    j0=`cpu_jiffies`
    cluster_mpirun "$TIDAL_CLUSTER_RANKS" sh "$cluster_self" --in-cluster rank_rate "$@" || return 1
    echo "machine: $j0 `cpu_jiffies` `getconf _NPROCESSORS_ONLN`" |
        awk '{ printf "machine: %.2f cores busy\n", ($4 - $2) / ($5 - $3) * $6 }'
}
train4() { # ARGS...: tidal train on 4 ranks
    [ -n "${TIDAL_CLUSTER:-}" ] && echo "layout: $TIDAL_CLUSTER_LAYOUT"
    cluster_mpirun 4 "$TIDAL" train "$@"
}
cluster_enter "$@"

# ---- the test ----------------------------------------------------------------------------------

cluster_check
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
command -v curl >/dev/null 2>&1 || { echo "1..0 # SKIP curl is not installed"; exit 0; }
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
tiny_ckpt "$dir/ckpt"
ckpt="$dir/ckpt/model.h5"
check "a tiny checkpoint to sample from" [ -s "$ckpt" ]

# layout_ok NAME H R F RATE: the layout line tools/cluster printed (stderr), the one the command
# saw (TIDAL_CLUSTER_LAYOUT) and the layout asked for agree
layout_ok() {
    want="emulated cluster: $2 hosts x $3 ranks, each rank a device of $4 core"
    printed=`grep '^emulated cluster:' "$dir/$1.err"`
    seen=`sed -n 's/^layout: //p' "$dir/$1.out"`
    case $printed in "$want "*"host links $5 each way"*) ;; *) return 1 ;; esac
    [ "$printed" = "$seen" ]
}

# ---- compute rate: 1, 4 and 8 devices of 0.22 core, 1 between ------------------------------
# (0.22, not 0.25: eight quarters are the whole machine, and then mpirun, its daemons and the
# kernel take their time from the devices; 8 x 0.22 leaves them 0.24 of a core)
# The machine's own speed drifts (a virtual machine's host): each of the 4 and 8 devices is set
# against the lone device measured just before and just after it. When a rank is off, the whole
# measurement is made again, up to three times: noise passes a later time, a rate that depends on
# the ranks fails every time. (Here, with 8 devices filling the machine, a device gets 94-96% of
# its share in 5 ms periods: 8 ranks read 0.87-0.99 of the lone one at their lowest, and one
# measurement in five had a rank under 0.9; at 10 ms periods 97%, at 20 ms all of it.)
# Other work on the machine (another test) cannot take a device's share, but it does take the
# caches of the core between the device's turns: a lone device beside it computes slower per CPU
# second, by as much as 30% here. So the rates are compared where the lone
# device had the machine to itself (less than 0.4 core of other work), and otherwise only shown.
for attempt in 1 2 3; do
    for l in 1x1a 2x2 1x1b 2x4 1x1c; do
        h=${l%%x*}; r=${l#*x}; r=${r%[abc]}
        cluster_run --hosts $h --ranks-per-host $r --rank-cpu 0.22 --link 1gbit -- \
            rates "$ckpt" "$dir" >"$dir/rate$l.out" 2>"$dir/rate$l.err"
        rc=$?
        check "$h x $r devices: each rank sampled (rc=$rc)" \
            [ $rc = 0 -a "`grep -c '^rate: .* seconds [0-9.]* cpu [0-9]' "$dir/rate$l.out"`" = $((h * r)) ]
        [ $rc = 0 ] || tail -n 5 "$dir/rate$l.err" | sed 's/^/# /'
        check "$h x $r: the layout printed is the one asked for" layout_ok rate$l $h $r 0.22 1gbit
        # the ranks found themselves where the layout says: r on each host, a 0.22-core quota each
        check "$h x $r: $r ranks on each of h0..h$((h - 1)), each in a device of quota 1100/5000 us" \
            awk -v h=$h -v r=$r '/^rate:/ { n[$5]++; bad += $7 != "1100/5000" }
                END { for (k = 0; k < h; k++) bad += n["h" k] != r; exit bad != 0 }' \
            "$dir/rate$l.out"
    done
    # per rank: layout, rank, host, sampling seconds, images x steps per second, share of a core;
    # per run: the cores the rest of the machine kept busy
    for l in 1x1a 2x2 1x1b 2x4 1x1c; do
        awk -v l=$l '/^rate:/ { printf "%s %s %s %s %.2f %.3f\n", l, $3, $5, $13, 80 / $13,
                                       $15 / ($11 - $9); cpu += $15 / ($11 - $9) }
                     /^machine:/ { busy = $2 }
                     END { printf "%s other %.2f\n", l, busy - cpu }' "$dir/rate$l.out"
    done >"$dir/rates"
    awk 'NF == 6 { printf "# %s: rank %s on %s, %s s, %s images x steps per s, %.3f of a core\n",
                          $1, $2, $3, $4, $5, $6 }
         NF == 3 { printf "# %s: %s cores of other work beside the devices\n", $1, $3 }' "$dir/rates"
    awk 'NF != 6 { next } $1 ~ /^1x1/ { one[substr($1, 4)] = $5; next } { v[$1 " rank " $2] = $5 }
         END { lo = 2; hi = 0
               for (k in v) { b = k ~ /^2x2/ ? (one["a"] + one["b"]) / 2 : (one["b"] + one["c"]) / 2
                              x = b > 0 ? v[k] / b : 0; if (x < lo) lo = x; if (x > hi) hi = x
                              bad += x < 0.9 || x > 1.1 }
               printf "# against the lone device before and after: from %.3f to %.3f of it\n", lo, hi
               exit bad != 0 }' "$dir/rates" >"$dir/ratio"
    rc=$?
    cat "$dir/ratio"
    busy=`awk '$1 ~ /^1x1/ && $2 == "other" && $3 > m { m = $3 } END { printf "%.2f", m }' "$dir/rates"`
    [ $rc = 0 ] && break
    [ $attempt = 3 ] || diag "a rank was off by more than 10%: measuring once more"
done
# the share each device got: CPU seconds of the whole program / its wall seconds
# (at least 85%: the kernel's tick, 4 ms at 250 Hz, can delay a device's turn in its period).
# Where other work kept the rest of the machine busy (over 0.4 core beside a lone device, as a
# build or another test does in CI), a device gets its turns later still: down to 77% of its
# share was seen with 1.2 cores of other work. There the bound is 70%, which a device whose
# quota or weight were lost would still fail (alone it takes the whole core, 450%; behind
# other work without its weight, far less than its share).
lo=0.187 pct=85
if ! awk -v b="$busy" 'BEGIN { exit !(b < 0.4) }'; then
    lo=0.154 pct=70
    diag "up to $busy cores of other work ran beside the devices: a share of 70% or more is enough"
fi
check "every device of 1, 4 and 8 had its 0.22 of a core ($pct% to 105% of it)" \
    awk -v lo=$lo 'NF == 6 { if ($6 < lo || $6 > 0.231) bad++ } END { exit bad != 0 }' "$dir/rates"
if [ $rc = 0 ] || awk -v b="$busy" 'BEGIN { exit !(b < 0.4) }'; then
    check "every rank of 4 and of 8 devices computes within 10% of one device alone" [ $rc = 0 ]
else
    skip "rates not compared: up to $busy cores of other work ran beside the lone device"
fi
# the 8 ranks really ran together: the last one started before the first one ended
check "the 8 devices sampled at the same time" awk '/^rate:/ {
        if (!n++ || $9 > s) s = $9; if (n == 1 || $11 < e) e = $11 }
    END { printf "# 8 devices: the last start %.2f s before the first end\n", e - s
          exit !(n == 8 && s < e) }' "$dir/rate2x4.out"

# ---- a trace replayed on 2 hosts x 2 ranks and on one host: the same PNGs --------------------
# sequence parallel over 2 executors (ranks 1 and 2 are on different hosts), guidance, grids
ids="a b c d e f"
i=0
: >"$dir/trace.jsonl"
for id in $ids; do
    echo "{\"at_ms\": $((i * 40)), \"id\": \"$id\", \"label\": $((i % 4 * 3 - 1)), \"n\": $((1 + i % 2)), \"resolution\": 32, \"steps\": 3, \"cfg\": 1.5, \"seed\": $((7 + i))}" >>"$dir/trace.jsonl"
    i=$((i + 1))
done
mkdir "$dir/one" "$dir/two"
cluster_serve4 "$dir/one" "$ids" --trace "$dir/trace.jsonl" --ckpt "$ckpt" --sp 2 >"$dir/serve1.out" 2>&1
cluster_run --hosts 2 --ranks-per-host 2 --rank-cpu 0.5 --link 1gbit -- \
    cluster_serve4 "$dir/two" "$ids" --trace "$dir/trace.jsonl" --ckpt "$ckpt" --sp 2 \
    >"$dir/serve2.out" 2>"$dir/serve2.err"
for w in one two; do # one host, two hosts
    check "$w: every request of the trace answered 200" \
        [ "`grep -c ' 200$' "$dir/$w/codes"`" = 6 ]
    [ "`grep -c ' 200$' "$dir/$w/codes"`" = 6 ] || sed 's/^/# /' "$dir/$w/codes" "$dir/$w/serve.out"
done
check "2 x 2: the layout printed is the one asked for" layout_ok serve2 2 2 0.5 1gbit
same=yes
for id in $ids; do cmp -s "$dir/one/$id.png" "$dir/two/$id.png" || same=no; done
check "the trace's PNGs on 2 hosts are byte for byte those of one host" [ $same = yes ]
diag "PNG checksums (one host, two hosts): `cd "$dir/one" && cksum $ids.png 2>/dev/null |
    awk '{ printf "%s ", $1 }'`/ `cd "$dir/two" && cksum $ids.png 2>/dev/null | awk '{ printf "%s ", $1 }'`"

# ---- training on 2 hosts x 2 ranks and on one host: the same bits ----------------------------
train="--model tiny --resolution 32 --steps 8 --batch 16 --micro-batch 2 --val-every 0 --log-every 1 --ckpt-every 0"
for ar in f32 dynamiq; do
    tidal_mpirun 4 "$TIDAL" train $train --allreduce $ar --out "$dir/t1$ar" >"$dir/t1$ar.out" 2>&1
    cluster_run --hosts 2 --ranks-per-host 2 --rank-cpu 0.25 --link 1gbit -- \
        train4 $train --allreduce $ar --out "$dir/t2$ar" >"$dir/t2$ar.out" 2>"$dir/t2$ar.err"
    rc=$?
    check "$ar: tidal train on 2 x 2 exits 0 (rc=$rc)" [ $rc = 0 -a -s "$dir/t2$ar/model.h5" ]
    [ $rc = 0 ] || tail -n 12 "$dir/t2$ar.err" "$dir/t2$ar.out" | sed 's/^/# /'
    check "$ar: the layout printed is the one asked for" layout_ok t2$ar 2 2 0.25 1gbit
    cut -d, -f1,2 "$dir/t1$ar/loss.csv" >"$dir/l1" 2>/dev/null
    cut -d, -f1,2 "$dir/t2$ar/loss.csv" >"$dir/l2" 2>/dev/null
    check "$ar: the 8 losses on 2 hosts equal those on one host, digit for digit" \
        sh -c '[ `wc -l <"$1"` = 9 ] && cmp -s "$1" "$2"' _ "$dir/l1" "$dir/l2"
    diag "$ar losses: `tail -n +2 "$dir/l2" | cut -d, -f2 | tr '\n' ' '`"
    "$TIDAL" ckpt diff "$dir/t1$ar/model.h5" "$dir/t2$ar/model.h5" >"$dir/diff$ar" 2>&1
    rc=$?
    check "$ar: the weights (model and EMA) are bit for bit the same (ckpt diff rc=$rc)" [ $rc = 0 ]
    [ $rc = 0 ] || tail -n 1 "$dir/diff$ar" | sed 's/^/# /'
done
done_testing
