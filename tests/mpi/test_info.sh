#!/bin/sh
# `tidal info` prints one line per rank, in rank order, at 1, 2 and 4 ranks (oversubscribed);
# ranks, sizes and local ranks agree with the launch. With --transports it adds one line per
# ordered pair of ranks naming the UCX transport that UCX chose for it, and a summary.
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
    check "np=$np: no transport lines without --transports" \
        [ "`printf '%s\n' "$out" | grep -c '^transport'`" = 0 ]
done

# --transports, alone: no pairs
out=`"$TIDAL" info --transports`; rc=$?
check "singleton --transports exits 0" [ $rc = 0 ]
check "singleton --transports: no pair lines" \
    [ "`printf '%s\n' "$out" | grep -c '^transport from='`" = 0 ]
check "singleton --transports: 'none' both ways" [ "`printf '%s\n' "$out" | grep -cx \
    'transports: within hosts: none | between hosts: none'`" = 1 ]

# pairs_of OUT: the transport lines' "from-to" in sorted order; tls_of OUT: their tl= values.
pairs_of() { printf '%s\n' "$1" | sed -n 's/^transport from=\([0-9]*\) to=\([0-9]*\) .*/\1-\2/p' |
    sort | tr '\n' ' '; }
tls_of() { printf '%s\n' "$1" | sed -n 's/^transport from=.* tl=\([^ ]*\)$/\1/p'; }
all_pairs="0-1 0-2 1-0 1-2 2-0 2-1 "

# Here every rank shares the host, so with its default transports UCX takes shared memory (sysv
# or posix; cma for large messages) and never tcp.
out=`unset UCX_TLS; tidal_mpirun 3 "$TIDAL" info --transports 2>/tmp/tidal-info-err.$$`; rc=$?
check "np=3 --transports exits 0" [ $rc = 0 ]
[ $rc = 0 ] || diag "`cat /tmp/tidal-info-err.$$`"
printf '%s\n' "$out" | grep '^transport' | sed 's/^/# /'
check "np=3 --transports: still 3 rank lines" [ "`printf '%s\n' "$out" | grep -c '^rank='`" = 3 ]
check "np=3 --transports: 6 transport lines" \
    [ "`printf '%s\n' "$out" | grep -c '^transport from='`" = 6 ]
got=`pairs_of "$out"`
check "np=3 --transports: each ordered pair once: $got" [ "$got" = "$all_pairs" ]
hosts='s/^transport .* host_from=\([^ ]*\) host_to=\([^ ]*\) .*/\1 \2/p'
same=`printf '%s\n' "$out" | sed -n "$hosts" | awk '$1 == $2' | wc -l`
check "np=3 --transports: host_from = host_to on every line" [ "$same" = 6 ]
tls=`tls_of "$out"`
check "np=3 --transports: no pair uses tcp" [ "`printf '%s\n' "$tls" | grep -c tcp`" = 0 ]
check "np=3 --transports: every pair uses posix, sysv or cma" \
    [ "`printf '%s\n' "$tls" | grep -Ec '(^|\+)(posix|sysv|cma)/'`" = 6 ]
summary='^transports: within hosts: [^ ]*(posix|sysv|cma)/[^ ]* \| between hosts: none$'
check "np=3 --transports: summary within hosts only" \
    [ "`printf '%s\n' "$out" | grep -Ec "$summary"`" = 1 ]

check "np=3 --transports: large messages by gfc's single copy on every pair" \
    [ "`printf '%s\n' "$tls" | grep -c '+gfc/copy$'`" = 6 ]
out=`tidal_mpirun 3 -x TIDAL_GFC_SINGLE_COPY=0 "$TIDAL" info --transports 2>/dev/null`
n_copy=`tls_of "$out" | grep -c 'gfc/copy'`; n_tls=`tls_of "$out" | wc -l`
check "np=3 --gfc-single-copy 0: none of $n_tls pairs names it" [ "$n_copy.$n_tls" = 0.6 ]

# With UCX restricted to tcp the same ranks on the same host report tcp: the report is UCX's
# choice, not a guess from host names.
out=`tidal_mpirun 3 -x UCX_TLS=tcp,self "$TIDAL" info --transports 2>/tmp/tidal-info-err.$$`; rc=$?
check "np=3 UCX_TLS=tcp,self --transports exits 0" [ $rc = 0 ]
[ $rc = 0 ] || diag "`cat /tmp/tidal-info-err.$$`"
printf '%s\n' "$out" | grep '^transport' | sed 's/^/# /'
got=`pairs_of "$out"`
check "np=3 UCX_TLS=tcp,self: each ordered pair once: $got" [ "$got" = "$all_pairs" ]
tls=`tls_of "$out"`
check "np=3 UCX_TLS=tcp,self: every pair reports tcp" \
    [ "`printf '%s\n' "$tls" | grep -c '^tcp/'`" = 6 ]
# gfc's own single copy is not UCX's: UCX_TLS leaves it on (--gfc-single-copy 0 turns it off)
check "np=3 UCX_TLS=tcp,self: and nothing but tcp from UCX" \
    [ "`printf '%s\n' "$tls" | tr '+' '\n' | grep -v '^gfc/copy$' | grep -vc '^tcp/'`" = 0 ]
rm -f /tmp/tidal-info-err.$$
done_testing
