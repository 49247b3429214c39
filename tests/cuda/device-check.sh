#!/usr/bin/env bash
# tests/cuda/device-check.sh: the GPU checks in one call, run THERE (a machine with a GPU, nvcc
# and PyTorch, no network) from the repository root, after tests/cuda/device-prep.sh filled
# .devpkgs/ HERE. doc/gpu.md ("Running the GPU checks") gives the exact device call:
#
#   bash tests/cuda/device-check.sh        (carry [".devpkgs"], timeout_s 590, $OUT set)
#
# Phases, each logged with its wall time and bounded by `timeout`, the whole within a budget
# (TIDAL_DEVICE_CHECK_BUDGET seconds, default 540) so that it ends even when something hangs:
#   info       the machine: GPUs (nvidia-smi -L), nvcc, python3 and torch, compilers
#   deps       .devpkgs/debs/*.deb unpacked (dpkg -x) into a prefix (TDEPS_PREFIX, default
#              /opt/tdeps; never /), made relocatable: Open MPI (OPAL_PREFIX), pkg-config
#              (a sysroot over the prefix's .pc files), the autotools; PATH, LD_LIBRARY_PATH,
#              PKG_CONFIG_*, CPATH set to prefer the prefix's MPI stack over anything installed
#   autotools  .devpkgs/generated.tar.gz unpacked; autoreconf -fi instead where configure.ac,
#              Makefile.am or m4/ changed since device-prep.sh made it
#   configure  in TIDAL_DEVICE_BUILDDIR (default /tmp/tidal-build), CUDA found where nvcc is;
#              cuBLAS and NCCL looked for in python3's nvidia-* packages where the toolkit lacks
#   build      make -j$(nproc), and the test programs
#   gpu-tests  make check TESTS="<GPU_TESTS of Makefile.am>"
#   bench-*    bench/run gpu-train, gpu-setup, gpu-codec (each only where bench/run has it)
#   suite      make check, with TIDAL_DEVICE=cuda exported where a GPU is present, in the time
#              left (last: the benchmarks come first)
# Without a GPU it still builds, the GPU tests and benchmarks skip, and it finishes.
#
# $OUT receives at most 6 files: summary.txt, logs.tar.gz (every phase log, config.log, the
# test logs), results.tar.gz (bench results gpu-*.{md,csv,png,log}) and the gpu-*.md reports.
# The summary is printed last. Exit status: 0 when every phase that ran passed.
set -u -o pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
OUT=${OUT:-/tmp/device-check-out}
P=${TDEPS_PREFIX:-/opt/tdeps}
B=${TIDAL_DEVICE_BUILDDIR:-/tmp/tidal-build}
budget=${TIDAL_DEVICE_CHECK_BUDGET:-540}
reserve=20                      # seconds kept for collecting the results
devpkgs=$top/.devpkgs
work=${TIDAL_DEVICE_WORK:-/tmp/device-check}
logs=$work/logs
results=$work/bench-results
t_start=$(date +%s)
deadline=$((t_start + budget - reserve))
jobs=$(nproc 2>/dev/null || echo 4)

rm -rf "$work" && mkdir -p "$logs" "$results" "$OUT" || exit 1
export TIDAL_BENCH_RESULTS=$results
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONUNBUFFERED=1

summary=()      # "phase|status|seconds|note"
failed=0
n_phase=0

say() { printf 'device-check: %s\n' "$*"; }

# phase NAME LIMIT COMMAND...: runs COMMAND (a program or an exported function) with its output
# in $logs/NN-NAME.log, for at most LIMIT seconds and never past the deadline; records the
# outcome. Exit status 77 from COMMAND means skipped. Returns COMMAND's status.
phase() {
    local name=$1 limit=$2 left t0 rc secs status log; shift 2
    n_phase=$((n_phase + 1))
    log=$logs/$(printf '%02d' $n_phase)-$name.log
    left=$((deadline - $(date +%s)))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 10 ]; then
        summary+=("$name|not run|0|out of time (budget ${budget} s)")
        say "$name: not run, out of time"
        return 124
    fi
    say "$name: start (at most $limit s)"
    t0=$(date +%s)
    # bash -c: COMMAND may be an exported function, which timeout alone cannot run.
    timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    secs=$(($(date +%s) - t0))
    case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124|137) status="TIMEOUT"; failed=1 ;;
    *) status="FAILED ($rc)"; failed=1 ;;
    esac
    summary+=("$name|$status|$secs|${phase_note:-}")
    phase_note=""
    say "$name: $status in $secs s (log $(basename "$log"))"
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        tail -n 25 "$log" | sed 's/^/    | /'
    fi
    return $rc
}
phase_note=""

# ---- info ----------------------------------------------------------------------------------
have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    have_gpu=1
fi
info() {
    echo "== date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(uname -a)"
    echo "== $(nproc) cores; $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    [ -r /etc/os-release ] && . /etc/os-release && echo "== os: ${PRETTY_NAME:-?}"
    echo "== nvidia-smi -L"; nvidia-smi -L 2>&1 || echo "(no nvidia-smi / no GPU)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
        --format=csv 2>&1 | head -n 5
    echo "== CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}"
    echo "== nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo none)"
    { command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version; } \
        2>/dev/null | tail -n 2
    ls -d /usr/local/cuda* 2>/dev/null
    (cd /usr/local/cuda/lib64 2>/dev/null && echo lib{cudart,cublas,nccl}.so*)
    echo
    echo "== python3: $(command -v python3) $(python3 --version 2>&1)"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        "available", torch.cuda.is_available(),
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1 | tail -n 1
    for t in gcc g++ make perl pkg-config autoreconf mpirun gnuplot curl h5dump; do
        printf '%-10s %s\n' "$t" "$(command -v $t || echo -)"
    done
    gcc --version 2>&1 | head -n 1
    echo "== ldconfig: $(ldconfig -p 2>/dev/null | grep -cE 'lib(mpi|ucp|hdf5|openblas)\.so') of" \
        "libmpi/libucp/libhdf5/libopenblas known to the system"
    df -h /tmp 2>/dev/null | tail -n 1
}
export -f info
phase info 45 info

# ---- deps: the .debs into a prefix ---------------------------------------------------------
ML=$P/usr/lib/x86_64-linux-gnu
# Sonames the machine's own copy may serve (its newer version is compatible): a Debian 12 copy
# of these is used only where the machine has none. Everything else of the prefix (Open MPI,
# PMIx, UCX, HDF5, OpenBLAS, libmicrohttpd, jansson, libpng, ...) wins over the machine's.
generic_re='^lib(z|zstd|lzma|bz2|ssl|crypto|curl|curl-gnutls|gnutls|nettle|hogweed|gmp|idn2'
generic_re+='|unistring|p11-kit|tasn1|ffi|krb5|krb5support|gssapi_krb5|k5crypto|com_err|keyutils'
generic_re+='|ldap|ldap_r'
generic_re+='|lber|sasl2|nghttp2|psl|rtmp|ssh2|brotlicommon|brotlidec|brotlienc|xml2|icu[a-z0-9]*'
generic_re+='|sqlite3|tinfo|readline|udev|pcre2-8|selinux|cap-ng|jpeg|gomp|uuid|md|bsd|gfortran'
generic_re+='|quadmath|numa|nl-3|nl-route-3)(-[0-9.]+)?\.so'
export P ML generic_re devpkgs
deps() {
    local f l t c b s d n known
    ls "$devpkgs"/debs/*.deb >/dev/null 2>&1 ||
        { echo "no .devpkgs/debs/*.deb: run tests/cuda/device-prep.sh, carry .devpkgs"; return 1; }
    rm -rf "$P" && mkdir -p "$P" || return 1
    for f in "$devpkgs"/debs/*.deb; do
        dpkg -x "$f" "$P" || { echo "dpkg -x $f failed"; return 1; }
    done
    echo "unpacked $(ls "$devpkgs"/debs/*.deb | wc -l) packages into $P ($(du -sh "$P" | cut -f1))"
    # Absolute links (libz.so -> /lib/...) point into the prefix; Debian's alternatives (mpicc,
    # mpirun, aclocal, automake) are made as links.
    while read -r l; do
        t=$(readlink "$l")
        for c in "$P$t" "$P/usr$t" "$P${t#/usr}"; do
            if [ -e "$c" ]; then ln -sfn "$c" "$l"; break; fi
        done
    done < <(find "$P" -type l -lname '/*')
    for b in mpicc mpicxx mpic++ mpirun mpiexec; do
        if [ -e "$P/usr/bin/$b.openmpi" ]; then ln -sfn "$b.openmpi" "$P/usr/bin/$b"; fi
    done
    ln -sfn aclocal-1.16 "$P/usr/bin/aclocal"; ln -sfn automake-1.16 "$P/usr/bin/automake"
    # The autotools' data paths, compiled into their scripts, moved into the prefix (their
    # first line, the interpreter, stays: perl is the machine's).
    for s in autoconf autoheader autom4te autoreconf autoscan autoupdate ifnames aclocal-1.16 \
             automake-1.16 libtoolize; do
        if [ -f "$P/usr/bin/$s" ]; then
            sed -i "2,\$ s#/usr/share/#$P/usr/share/#g; 2,\$ s#'/usr/bin/#'$P/usr/bin/#g" \
                "$P/usr/bin/$s"
        fi
    done
    sed -i "s#/usr/share/#$P/usr/share/#g" "$P/usr/share/autoconf/autom4te.cfg" \
        "$P/usr/share/automake-1.16/Automake/Config.pm" 2>/dev/null
    # pkg-config: libmicrohttpd.pc names gnutls (Requires.private), whose -dev is not shipped.
    mkdir -p "$P/stubpc"
    printf 'Name: gnutls\nDescription: stub (device-check.sh)\nVersion: 3.7.9\n' \
        >"$P/stubpc/gnutls.pc"
    # The loader's view: libraries of the prefix that win (stacklib) and gap fillers (gaplib).
    mkdir -p "$P/stacklib" "$P/gaplib"
    known=$(ldconfig -p 2>/dev/null | awk '{ print $1 }' | sort -u)
    for d in "$ML" "$P/lib/x86_64-linux-gnu"; do
        for f in "$d"/lib*.so.*; do
            n=$(basename "$f")
            # sonames only (libz.so.1, not the file libz.so.1.2.13 it points to)
            [[ -e $f && $n =~ \.so\.[0-9]+$ ]] || continue
            if [[ $n =~ $generic_re ]]; then
                printf '%s\n' "$known" | grep -qxF "$n" || ln -sfn "$f" "$P/gaplib/$n"
            else
                ln -sfn "$f" "$P/stacklib/$n"
            fi
        done
    done
    ln -sfn "$ML/ucx" "$P/stacklib/ucx"
    echo "loader: $(ls "$P/stacklib" | wc -l) prefix libraries first; Debian 12 libraries" \
        "the machine lacks: $(ls "$P/gaplib" | tr '\n' ' ')"
    PATH=$P/usr/bin:$PATH OPAL_PREFIX=$P/usr mpirun --version | head -n 1
}
export -f deps
tdeps_env() {
    export PATH="$P/usr/bin:$PATH"
    export OPAL_PREFIX=$P/usr PMIX_PREFIX=$ML/pmix2 UCX_MODULE_DIR=$ML/ucx
    LD_LIBRARY_PATH="$ML/openmpi/lib:$ML/hdf5/openmpi:$ML/openblas-pthread:$P/stacklib:$P/gaplib$(
        )${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    export PKG_CONFIG="$P/usr/bin/pkg-config"
    PKG_CONFIG_LIBDIR="$ML/pkgconfig:$ML/openmpi/lib/pkgconfig:$ML/openblas-pthread/pkgconfig"
    export PKG_CONFIG_LIBDIR="$PKG_CONFIG_LIBDIR:$P/usr/share/pkgconfig:$P/stubpc"
    export PKG_CONFIG_SYSROOT_DIR=$P
    export CPATH="$P/usr/include${CPATH:+:$CPATH}"
    export M4=$P/usr/bin/m4 MPICC=$P/usr/bin/mpicc MPIRUN=$P/usr/bin/mpirun
    # Open MPI's shared-memory transport without CMA (refused in some containers).
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
}
if phase deps 120 deps; then
    tdeps_env
else
    say "deps failed: going on with what the machine has"
fi

# ---- autotools: the generated build system -------------------------------------------------
autotools() {
    if [ -f "$devpkgs/generated.tar.gz" ] && tar -xzf "$devpkgs/generated.tar.gz" &&
        sha256sum --quiet -c "$devpkgs/generated.sums"; then
        echo "generated files from device-prep.sh match configure.ac, Makefile.am and m4/"
        # Inputs older than outputs, so that make's rebuild rules stay quiet.
        now=$(date +%s)
        touch -d "@$((now - 120))" configure.ac Makefile.am m4/*.m4
        touch -d "@$((now - 60))" aclocal.m4
        touch -d "@$((now - 30))" configure config.h.in Makefile.in
        return 0
    fi
    echo "the generated build system is missing or stale: autoreconf -fi" \
        "($(command -v autoreconf || echo 'no autoreconf'))"
    autoreconf -fi
}
export -f autotools
phase autotools 150 autotools

# ---- configure -----------------------------------------------------------------------------
# cuBLAS or NCCL that the toolkit lacks: python3's nvidia-* packages hold them. cuda_extra LIB
# HEADER: prints "INCDIR LIBDIR" of the first copy found (LIBDIR gets a libLIB.so link).
pysite=$(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [sys.prefix]))' \
    2>/dev/null || true)
cuda_extra() {
    local lib=$1 hdr=$2 so d inc
    so=$(find $pysite -name "lib$lib.so.[0-9]*" 2>/dev/null | sort | head -n 1)
    [ -n "$so" ] || return 1
    d=$(dirname "$so")
    inc=$(find "$(dirname "$d")" $pysite -name "$hdr" 2>/dev/null | head -n 1)
    [ -n "$inc" ] || return 1
    mkdir -p "$P/cudalib" && ln -sfn "$so" "$P/cudalib/lib$lib.so"
    echo "$(dirname "$inc") $d"
}
nvcc_path=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
cuda_home=""
[ -n "$nvcc_path" ] && cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")
cfg_cppflags="" cfg_ldflags="" nccl_make=()
if [ -n "$cuda_home" ] && [ ! -f "$cuda_home/include/cublas_v2.h" ] &&
    x=$(cuda_extra cublas cublas_v2.h); then
    cfg_cppflags="-I${x% *}" cfg_ldflags="-L$P/cudalib -Wl,-rpath,${x#* }"
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:${x#* }"
    phase_note="cuBLAS from ${x#* }"
fi
nccl_dir=""
if [ -n "$cuda_home" ]; then
    if [ -f "$cuda_home/include/nccl.h" ] && ls "$cuda_home"/lib64/libnccl.so >/dev/null 2>&1; then
        nccl_dir=$cuda_home/lib64
    elif x=$(cuda_extra nccl nccl.h); then
        nccl_dir=${x#* }
        nccl_make=("NCCL_CFLAGS=-I${x% *}" "NCCL_LINKFLAGS=-L$P/cudalib -Wl,-rpath,$nccl_dir")
        export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$nccl_dir"
    fi
fi
configure_tidal() {
    mkdir -p "$B" && cd "$B" &&
        "$top/configure" ${cfg_cppflags:+CPPFLAGS="$cfg_cppflags"} \
            ${cfg_ldflags:+LDFLAGS="$cfg_ldflags"} || return
    if grep -q 'define TIDAL_HAVE_CUDA 1' config.h; then
        echo "== CUDA backend: built"
    else
        echo "== CUDA backend: NOT built (see config.log)"
    fi
}
export -f configure_tidal
export top B cfg_cppflags cfg_ldflags
rm -rf "$B"
phase configure 150 configure_tidal
cuda_built=0
grep -q 'define TIDAL_HAVE_CUDA 1' "$B/config.h" 2>/dev/null && cuda_built=1

# ---- build ---------------------------------------------------------------------------------
build() {
    local prog
    make -C "$B" -j"$jobs" "$@" && make -C "$B" -j"$jobs" "$@" check TESTS= >/dev/null || return
    # bench/run gpu-setup makes bench/gpu_setup without the NCCL flags: build it here with them.
    if [ "$cuda_built" = 1 ]; then
        make -C "$B" "$@" bench/gpu_setup || echo "== bench/gpu_setup: NOT built (NCCL?)"
    fi
    # Where the program's libraries come from: the prefix's MPI stack, the toolkit's CUDA.
    prog=$(ls "$B"/src/.libs/lt-tidal "$B"/src/.libs/tidal 2>/dev/null | head -n 1)
    echo "== ldd $prog"
    LD_LIBRARY_PATH=$B/src/.libs:$LD_LIBRARY_PATH ldd "$prog" >"$B/ldd.txt"
    grep -E 'not found|mpi|ucp|ucs|hdf5|openblas|pmix|cublas|cudart|nccl|png|jansson|microhttpd' \
        "$B/ldd.txt"
    ! grep -q 'not found' "$B/ldd.txt"
}
export -f build
export jobs cuda_built
phase_note="NCCL: ${nccl_dir:-not found}"
phase build 300 build "${nccl_make[@]}"

# ---- GPU tests -----------------------------------------------------------------------------
# GPU_TESTS of Makefile.am, continuation lines and += included.
gpu_tests=$(awk '/^GPU_TESTS[ \t]*\+?=/ { on = 1; sub(/^[^=]*=/, "") }
                 on { l = $0; more = sub(/\\[ \t]*$/, "", l); printf "%s ", l; on = more }' \
    Makefile.am | xargs)
gpu_check() { make -C "$B" "$@" check TESTS="$gpu_tests"; }
export -f gpu_check
export gpu_tests
phase_note="$gpu_tests"
phase gpu-tests 150 gpu_check "${nccl_make[@]}"
# The suite's make check deletes these logs before it runs the tests again: keep them.
mkdir -p "$logs/gpu-tests"
for t in $gpu_tests; do
    cp "$B/${t%.gpu}.log" "$B/${t%.gpu}.trs" "$logs/gpu-tests/" 2>/dev/null
done

# ---- GPU benchmarks ------------------------------------------------------------------------
export TIDAL_BUILDDIR=$B
export TIDAL_BENCH_TIMEOUT=${TIDAL_BENCH_TIMEOUT:-60}   # per launch inside a benchmark
bench() {
    local name=$1
    bench/run --list 2>/dev/null | awk '{ print $1 }' | grep -qx "$name" ||
        { echo "bench/run has no $name: skipped"; return 77; }
    bench/run "$name" >"$logs/bench-$name.out"
}
export -f bench
export logs
for b in gpu-train:200 gpu-setup:100 gpu-codec:90; do
    phase "bench-${b%%:*}" "${b#*:}" bench "${b%%:*}"
done

# ---- the test suite ------------------------------------------------------------------------
suite() {
    if [ "$have_gpu" = 1 ] && [ "$cuda_built" = 1 ]; then
        export TIDAL_DEVICE=cuda
        echo "== TIDAL_DEVICE=cuda"
    else
        echo "== no GPU or no CUDA build: the suite as on a CPU machine (TIDAL_DEVICE unset)"
    fi
    make -C "$B" -j"$((jobs > 8 ? 8 : jobs))" "$@" check
}
export -f suite
export have_gpu cuda_built
phase suite $((deadline - $(date +%s))) suite "${nccl_make[@]}"

# ---- results -------------------------------------------------------------------------------
# Test outcomes from the .trs files (there even when the suite was stopped).
tests_line() {
    find "$B/tests" -name '*.trs' -exec grep -h '^:global-test-result:' {} + 2>/dev/null |
        awk '{ n[$2]++; t++ }
             END { printf "%d tests: PASS %d, FAIL %d, SKIP %d, ERROR %d, XFAIL %d", t,
                   n["PASS"], n["FAIL"], n["SKIP"], n["ERROR"], n["XFAIL"] }'
}
bad_tests() {
    find "$B/tests" -name '*.trs' -exec grep -lE '^:test-result: (FAIL|ERROR)' {} + 2>/dev/null |
        sed "s|^$B/||; s|\.trs$||" | tr '\n' ' '
}
{
    echo "== device-check: $(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - t_start)) s of" \
        "$budget; GPU: $([ $have_gpu = 1 ] && nvidia-smi -L 2>/dev/null | head -n 4 |
            tr '\n' ';' || echo none); CUDA built: $([ $cuda_built = 1 ] && echo yes || echo no)"
    printf '%-16s %-12s %6s  %s\n' phase status seconds note
    for s in "${summary[@]}"; do
        IFS='|' read -r a b c d <<<"$s"
        printf '%-16s %-12s %6s  %s\n' "$a" "$b" "$c" "$d"
    done
    echo "== $(tests_line) (the .trs files: tests stopped by the budget are missing)"
    bt=$(bad_tests); [ -n "$bt" ] && echo "== FAIL/ERROR: $bt"
    echo "== GPU tests (phase gpu-tests):"
    for t in $gpu_tests; do
        f=$logs/gpu-tests/$(basename "${t%.gpu}")
        r=$(sed -n 's/^:global-test-result: //p' "$f.trs" 2>/dev/null | head -n 1)
        # the test's own first line: its skip reason, or what it saw
        echo "   $t: ${r:-not run} -- $(head -n 1 "$f.log" 2>/dev/null)"
    done
    for f in "$logs"/bench-*.out; do
        [ -s "$f" ] || continue
        echo "== $(basename "$f" .out) (bench/run's last lines)"
        grep -E '^(# target|# FAILED|[a-z0-9_]+: )' "$f" | tail -n 30
    done
} >"$OUT/summary.txt" 2>&1

# At most 8 files come back: pack the logs and the benchmark results.
cp "$B/config.log" "$B/test-suite.log" "$logs/" 2>/dev/null
(cd "$B" && find tests -name '*.log' -o -name '*.trs' | tar -czf "$logs/tests.tar.gz" -T -) \
    2>/dev/null
tar -czf "$OUT/logs.tar.gz" -C "$work" logs 2>/dev/null
if [ "$(stat -c %s "$OUT/logs.tar.gz" 2>/dev/null || echo 0)" -gt 15000000 ]; then
    rm -f "$logs/tests.tar.gz"
    tar -czf "$OUT/logs.tar.gz" -C "$work" logs 2>/dev/null
fi
(cd "$results" && ls gpu-* >/dev/null 2>&1 &&
    tar -czf "$OUT/results.tar.gz" gpu-*.md gpu-*.csv gpu-*.png gpu-*.log 2>/dev/null)
for f in "$results"/gpu-*.md; do [ -f "$f" ] && cp "$f" "$OUT/"; done
cat "$OUT/summary.txt"
echo "== $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $failed
