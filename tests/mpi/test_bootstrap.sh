#!/bin/sh
# The bootstrap's variable-length all-gather at 1, 2, 3 and 4 ranks.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
for np in 1 2 3 4; do
    out=`tidal_mpirun $np "$abs_top_builddir/tests/mpi/bootstrap_allgatherv" 2>&1`; rc=$?
    printf '%s\n' "$out" | grep '^#' 
    check "np=$np: every rank received every rank's bytes (rc=$rc)" [ $rc = 0 ]
    [ $rc = 0 ] || diag "$out"
done
done_testing
