#!/bin/sh
# `tidal workload --diurnal` from the command line: its options in --help-params, a compressed
# day that ends with the day, the same bytes for a seed, and exit code 2 with one line naming the
# option for every bad value (the statistics are tests/unit/test_workload_diurnal's).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"

tmp=`mktemp -d`
trap 'rm -rf "$tmp"' EXIT

out=`"$TIDAL" --help-params`
for p in diurnal day-seconds peak-to-trough peak-hour bursts burst-height burst-minutes \
    burst-hours; do
    env=TIDAL_`echo "$p" | tr 'a-z-' 'A-Z_'`
    case $out in *"--$p "*"$env"*) ok "--help-params lists --$p and $env";;
        *) not_ok "--help-params lacks --$p";; esac
done

# a day of 600 s at 8 ranks, load 0.5: about 690 requests, the whole day without --requests
"$TIDAL" workload --diurnal --day-seconds 600 --load 0.5 --seed 3 --burst-hours 9.5,17 \
    -o "$tmp/a.jsonl" 2>"$tmp/a.err"; rc=$?
check "a compressed day exits 0" [ $rc = 0 ]
n=`wc -l <"$tmp/a.jsonl"`
diag "`cat "$tmp/a.err"`"
# 0.5 x 2.29 requests/s x 600 s = 687, Poisson sd 26
check "about 687 requests in the day ($n)" [ "$n" -gt 582 -a "$n" -lt 792 ]
last=`tail -n 1 "$tmp/a.jsonl" | sed 's/^{"at_ms": \([0-9]*\),.*/\1/'`
check "the last arrives within the day ($last ms)" [ "$last" -le 600000 ]
case `cat "$tmp/a.err"` in *"bursts at hours 9.50, 17.00"*) ok "the summary names the bursts";;
    *) not_ok "summary: `cat "$tmp/a.err"`";; esac
"$TIDAL" workload --diurnal --day-seconds 600 --load 0.5 --seed 3 --burst-hours 9.5,17 \
    >"$tmp/b.jsonl"
check "the same seed to standard output: the same bytes" cmp -s "$tmp/a.jsonl" "$tmp/b.jsonl"
"$TIDAL" workload --diurnal --day-seconds 600 --load 0.5 --seed 4 --burst-hours 9.5,17 \
    >"$tmp/c.jsonl"
if cmp -s "$tmp/a.jsonl" "$tmp/c.jsonl"; then not_ok "another seed: the same trace"
else ok "another seed: another trace"; fi
"$TIDAL" workload --diurnal --day-seconds 600 --load 0.5 --requests 2000 >"$tmp/d.jsonl"
check "--requests 2000: the day repeats to 2000" [ "`wc -l <"$tmp/d.jsonl"`" = 2000 ]
TIDAL_DAY_SECONDS=600 "$TIDAL" workload --requests 5 >/dev/null 2>&1
check "TIDAL_DAY_SECONDS (tidal run's too) does not stop a trace without --diurnal" [ $? = 0 ]

# the day through tidal sim --colocate: a timeline row every 30 s of it, serving and training
# within the 8 ranks, its arrivals the trace's, and the plot beside it where gnuplot is
"$TIDAL" sim --colocate --ranks 8 --trace "$tmp/a.jsonl" --day-seconds 600 --chunk 5 \
    --timeline "$tmp/tl.csv" --timeline-every 30 >"$tmp/sim.out" 2>&1; rc=$?
check "sim --colocate of the day exits 0" [ $rc = 0 ]
[ $rc = 0 ] || sed 's/^/# /' "$tmp/sim.out"
check "the timeline's header" [ "`head -n 1 "$tmp/tl.csv"`" = \
    "t_s,serving,training,live,step,train_images_per_s,arrivals_per_s,done" ]
awk -F, -v n="$n" 'NR > 1 { rows++; if ($2 + $3 > 8 || $2 < 0 || $3 < 0) bad++
        arr += $7 * ($1 - t); t = $1 }
    END { printf "%d rows, %d beyond 8 ranks, %.0f arrivals of %d\n", rows, bad, arr, n
          exit !(rows >= 19 && rows <= 21 && !bad && arr > 0.9 * n && arr <= n + 0.5) }' \
    "$tmp/tl.csv" >"$tmp/tl.sum"; rc=$?
diag "timeline: `cat "$tmp/tl.sum"`"
check "20 rows of 30 s: serving + training within the ranks, arrivals summing to the trace's" [ $rc = 0 ]
if command -v gnuplot >/dev/null 2>&1; then
    check "the plot beside the timeline (tl.png)" [ -s "$tmp/tl.png" ]
    check "sim names both files" grep -q "timeline in $tmp/tl.csv and $tmp/tl.png" "$tmp/sim.out"
else
    skip "no gnuplot: no plot of the timeline"
    skip "no gnuplot: no plot to name"
fi

usage_error() {
    desc=$1; needle=$2; shift 2
    err=`"$TIDAL" workload "$@" -o "$tmp/bad.jsonl" 2>&1 >/dev/null`; rc=$?
    lines=`printf '%s\n' "$err" | wc -l`
    if [ $rc = 2 ] && [ "$lines" = 1 ] && printf '%s' "$err" | grep -qF -- "$needle" &&
        [ ! -s "$tmp/bad.jsonl" ]; then
        ok "$desc -> exit 2: $err"
    else
        not_ok "$desc -> rc=$rc lines=$lines: $err"
    fi
}
usage_error "peak/trough below 1" --peak-to-trough --diurnal --peak-to-trough 0.5
usage_error "peak/trough not a number" --peak-to-trough --diurnal --peak-to-trough many
usage_error "peak hour 25" --peak-hour --diurnal --peak-hour 25
usage_error "peak hour -1" --peak-hour --diurnal --peak-hour -1
usage_error "a day of 0 s" --day-seconds --diurnal --day-seconds 0
usage_error "65 bursts" --bursts --diurnal --bursts 65
usage_error "2.5 bursts" --bursts --diurnal --bursts 2.5
usage_error "burst height 0.5" --burst-height --diurnal --burst-height 0.5
usage_error "bursts of 0 minutes" --burst-minutes --diurnal --burst-minutes 0
usage_error "bursts of 1441 minutes" --burst-minutes --diurnal --burst-minutes 1441
usage_error "a burst past midnight" --burst-hours --diurnal --burst-hours 23.95
usage_error "a burst at -1 h" --burst-hours --diurnal --burst-hours -1
usage_error "burst hours not numbers" --burst-hours --diurnal --burst-hours 9,x
usage_error "a trailing comma" --burst-hours --diurnal --burst-hours 9,
usage_error "--bursts against --burst-hours" --burst-hours --diurnal --bursts 3 --burst-hours 9,10
usage_error "--diurnal with --phases" --phases --diurnal --phases 1:10
usage_error "more than 1e8 requests in the day" --day-seconds --diurnal --load 1e6 --ranks 1048576
usage_error "a diurnal option without --diurnal" "--peak-hour needs --diurnal" --peak-hour 3
usage_error "--burst-hours without --diurnal" "--burst-hours needs --diurnal" --burst-hours 9
usage_error "--requests 0 alone" "--requests 0" --requests 0
usage_error "phases all at load 0" --phases --phases 0:10 --requests 5
done_testing
