#!/bin/sh
# Every codec through gfc's ring and butterfly all-reduce at 2, 3, 4, 5 and 8 ranks: the same
# bits on every rank and a vNMSE below the recorded threshold (tests/mpi/codec_allreduce.c).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/mpi/codec_allreduce"
tmp="${TMPDIR:-/tmp}/tidal-codec-ar.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
for np in 2 3 4 5 8; do
    tidal_mpirun $np "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
done
# Ring chunks of 16 KiB: three chunks a block (one with the default), whose first sends
# the ring encodes one progress call at a time while earlier ones are already travelling. (With
# 4 KiB chunks dynamiq's vNMSE on the ring passes 1.5e-2: each chunk of 1024 values is encoded on
# its own, and its bits cannot go to the larger blocks of other chunks.)
TIDAL_GFC_RING_CODEC_CHUNK=16384 tidal_mpirun 4 "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
relay "np=4, 16 KiB ring chunks" "$tmp.out" $rc
done_testing
