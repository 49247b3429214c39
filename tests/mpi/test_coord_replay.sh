#!/bin/sh
# tidal sim and tidal run decide with the same code: `tidal run` on 4 ranks under a bursty trace
# writes its coordinator's event log (--event-log: every event with its time, every command);
# `tidal sim --replay` feeds those events to a new coordinator, whose own log must be the same,
# line for line, for slo_first and for static. A log whose header asks for another cooldown (or
# another static split) gives other decisions: the comparison can tell.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
dir=`mktemp -d`
trap '[ -n "$KEEP" ] || rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
burst_trace "$dir/burst.jsonl"

for realloc in slo_first static; do
    extra=""
    [ $realloc = static ] && extra="--serve-ranks 1"
    tidal_mpirun 4 "$TIDAL" run --model tiny --batch 8 --micro-batch 4 --train-steps 60 \
        --ckpt-every 30 --listen none --trace "$dir/burst.jsonl" --exit-after-trace \
        --out "$dir/$realloc" --max-resolution 32 --progress-every 0 --cooldown 1 \
        --realloc $realloc $extra --event-log "$dir/$realloc.log" >"$dir/$realloc.out" 2>&1
    rc=$?
    check "$realloc: tidal run with --event-log exits 0 (rc=$rc)" [ $rc = 0 ]
    resizes=`grep -c '^> resize' "$dir/$realloc.log"`
    check "$realloc: its log has the trace's 24 arrivals and $resizes resizes (at least 1)" \
        sh -c '[ "`grep -c "^arrive " "$1"`" = 24 ] && [ "$2" -ge 1 ]' _ "$dir/$realloc.log" "$resizes"
    "$TIDAL" sim --replay "$dir/$realloc.log" --event-log "$dir/$realloc.replay" >/dev/null 2>&1
    check "$realloc: tidal sim --replay exits 0" [ $? = 0 ]
    check "$realloc: the replay's log is the job's, line for line (`wc -l <"$dir/$realloc.log"` lines)" \
        cmp -s "$dir/$realloc.log" "$dir/$realloc.replay"
    cmp -s "$dir/$realloc.log" "$dir/$realloc.replay" ||
        diff "$dir/$realloc.log" "$dir/$realloc.replay" | head -n 10 | sed 's/^/# /'
done

# the same events under another policy setting: other commands
sed '1s/min_train=[^ ]*/min_train=3/' "$dir/slo_first.log" >"$dir/all.log"
"$TIDAL" sim --replay "$dir/all.log" --event-log "$dir/all.replay" >/dev/null 2>&1
check "slo_first with every worker kept training: the replay gives no resize" \
    sh -c '! grep -q "^> resize" "$1" && ! cmp -s "$1" "$2"' _ "$dir/all.replay" "$dir/all.log"
sed '2s/static_serve=[^ ]*/static_serve=2/' "$dir/static.log" >"$dir/two.log"
"$TIDAL" sim --replay "$dir/two.log" --event-log "$dir/two.replay" >/dev/null 2>&1
check "static with 2 serving: the replay's resize names one member, not two" \
    sh -c 'grep -q "^> resize .*members=1\$" "$1" && ! cmp -s "$2" "$1"' _ "$dir/two.replay" "$dir/two.log"

# a log it cannot read is refused with exit 2, naming the line
printf '# tidal coordinator events 1: workers=3\n' >"$dir/bad.log"
"$TIDAL" sim --replay "$dir/bad.log" >/dev/null 2>"$dir/bad.err"
check "a header missing its fields: exit 2" [ $? = 2 ]
check "naming the file and line (`cat "$dir/bad.err"`)" grep -q "bad.log:1: a header missing a field" "$dir/bad.err"
"$TIDAL" sim --replay "$dir/none.log" >/dev/null 2>&1
check "a log that is not there: exit 2" [ $? = 2 ]
done_testing
