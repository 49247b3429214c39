#!/bin/sh
# The tidal program's contract with scripts: --version, --help, --help-params, and exit code 2
# with a one-line error naming the argument for every bad argument or parameter value.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"

out=`"$TIDAL" --version`; rc=$?
check "--version exits 0" [ $rc = 0 ]
case $out in "tidal "[0-9]*) ok "--version prints 'tidal <version>'";; *) not_ok "--version: $out";; esac

out=`"$TIDAL" --help`; rc=$?
check "--help exits 0" [ $rc = 0 ]
case $out in *usage:*info*) ok "--help shows usage and the info command";; *) not_ok "--help";; esac
case $out in *"srun --mpi=pmix"*) ok "--help shows how to launch under Slurm";; *) not_ok "--help srun";; esac

out=`"$TIDAL" --help-params`; rc=$?
check "--help-params exits 0" [ $rc = 0 ]
case $out in *--log-level*TIDAL_LOG_LEVEL*) ok "--help-params lists log-level and its variable";;
    *) not_ok "--help-params";; esac

case $out in *--gfc-timeout-ms*TIDAL_GFC_TIMEOUT_MS*) ok "--help-params lists gfc-timeout-ms";; *) not_ok "--help-params gfc";; esac
out=`"$TIDAL" info --help`; rc=$?
check "'info --help' exits 0" [ $rc = 0 ]

# usage errors: exit 2, exactly one line on stderr, naming the culprit
usage_error() {
    desc=$1; needle=$2; shift 2
    err=`"$TIDAL" "$@" 2>&1 >/dev/null`; rc=$?
    lines=`printf '%s\n' "$err" | wc -l`
    if [ $rc = 2 ] && [ "$lines" = 1 ] && printf '%s' "$err" | grep -qF -- "$needle"; then
        ok "$desc -> exit 2: $err"
    else
        not_ok "$desc -> rc=$rc lines=$lines: $err"
    fi
}
usage_error "no command" "" 
usage_error "unknown command" "'frobnicate'" frobnicate
usage_error "unknown option first" "'--frob'" --frob
usage_error "unknown option to info" "'--frob'" info --frob 1
usage_error "bad log level" "'loud'" info --log-level loud
usage_error "bad gfc timeout" "--gfc-timeout-ms" info --gfc-timeout-ms 0
usage_error "bad gfc algorithm" "ring" info --gfc-allreduce fastest
usage_error "missing value" "--log-level" info --log-level
usage_error "stray argument" "'extra'" info extra
usage_error "single-dash option" "'-x'" info -x
TIDAL_LOG_LEVEL=shout; export TIDAL_LOG_LEVEL
usage_error "bad environment value" "TIDAL_LOG_LEVEL" info
unset TIDAL_LOG_LEVEL
usage_error "missing config file" "/nonexistent.conf" info --config /nonexistent.conf
conf=`mktemp`; echo "log-levle = info" > "$conf"
usage_error "misspelt config name" "log-levle" info --config "$conf"
echo "log-level = loud" > "$conf"
usage_error "bad config value" "$conf:1" info --config "$conf"
printf 'log-level = info\nconfig = other.conf\n' > "$conf"
usage_error "a config file naming another" "$conf:2" info --config "$conf"
printf 'log-level = info\nlog-level = debug\n' > "$conf"
usage_error "a config key set twice" "first at line 1" info --config "$conf"
rm -f "$conf"

# --listen addresses are checked before start-up (exit 2, not 1 after it); an empty token
# would turn authentication off unnoticed. `tidal run` reads the world size from the launcher's
# variables, set here as mpirun would, so that it gets as far as its arguments.
for a in 127.0.0.1:99999 :-1 127.0.0.1: '[::1:80' localhost 127.0.0.1:8x; do
    usage_error "serve --listen '$a'" "--listen '$a'" serve --ckpt /nonexistent.h5 --listen "$a"
    OMPI_COMM_WORLD_SIZE=2; export OMPI_COMM_WORLD_SIZE
    usage_error "run --listen '$a'" "--listen '$a'" run --listen "$a"
    unset OMPI_COMM_WORLD_SIZE
done
usage_error "serve --token ''" "empty value for --token" serve --ckpt /nonexistent.h5 --token ""
TIDAL_TOKEN=; export TIDAL_TOKEN
usage_error "serve with TIDAL_TOKEN=" "empty value for TIDAL_TOKEN" serve --ckpt /nonexistent.h5
OMPI_COMM_WORLD_SIZE=2; export OMPI_COMM_WORLD_SIZE
usage_error "run with TIDAL_TOKEN=" "empty value for TIDAL_TOKEN" run
unset TIDAL_TOKEN OMPI_COMM_WORLD_SIZE
# no text parameter takes "": refused where it is read, for every command
usage_error "serve --ckpt ''" "empty value for --ckpt" serve --ckpt ""
usage_error "generate --ckpt ''" "empty value for --ckpt" generate --ckpt ""
usage_error "train --resume ''" "empty value for --resume" train --resume ""
usage_error "train --resolution 33" "--resolution 33" train --resolution 33 --steps 1
conf=`mktemp`; printf 'log-level = info\nout = ""\n' > "$conf"
usage_error "an empty value in a config file" "$conf:2" train --config "$conf"
rm -f "$conf"
done_testing
