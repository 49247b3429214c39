#!/bin/sh
# `tidal info` prints one line per rank, in rank order, at 1, 2 and 4 ranks (oversubscribed);
# ranks, sizes and local ranks agree with the launch.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"

out=`"$TIDAL" info`; rc=$?
check "singleton 'tidal info' exits 0" [ $rc = 0 ]
check "singleton prints one line" [ "`printf '%s\n' "$out" | grep -c '^rank='`" = 1 ]

for np in 1 2 4; do
    out=`tidal_mpirun $np "$TIDAL" info 2>/tmp/tidal-info-err.$$`; rc=$?
    check "mpirun -np $np tidal info exits 0" [ $rc = 0 ]
    [ $rc = 0 ] || diag "`cat /tmp/tidal-info-err.$$`"
    lines=`printf '%s\n' "$out" | grep -c '^rank='`
    check "np=$np: $lines rank lines" [ "$lines" = $np ]
    want=""; got=""
    r=0; while [ $r -lt $np ]; do want="$want $r/$np/$r/$np"; r=$((r + 1)); done
    got=`printf '%s\n' "$out" | sed -n 's/^rank=\([0-9]*\) size=\([0-9]*\) host=[^ ]* local_rank=\([0-9]*\) local_size=\([0-9]*\) .*/ \1\/\2\/\3\/\4/p' | tr -d '\n'`
    check "np=$np: rank/size/local rank/local size in order:$got" [ "$got" = "$want" ]
    check "np=$np: every line names UCX transports" \
        [ "`printf '%s\n' "$out" | grep -c ' ucx=[a-z_0-9,]*self'`" = $np ]
    check "np=$np: every line shows cuda and build" \
        [ "`printf '%s\n' "$out" | grep -c ' cuda=[^ ]* build=mpi:'`" = $np ]
done
rm -f /tmp/tidal-info-err.$$
done_testing
