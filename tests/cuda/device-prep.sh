#!/usr/bin/env bash
# tests/cuda/device-prep.sh: run HERE (Debian 12, apt working) before a device session. It fills
# .devpkgs/ (ignored by git) with what tests/cuda/device-check.sh needs THERE, on a machine with
# a GPU, nvcc and PyTorch but no Open MPI, UCX, HDF5, OpenBLAS, libmicrohttpd, jansson, libpng,
# pkg-config or autotools, and no network:
#
#   .devpkgs/debs/*.deb        Debian 12 packages (apt-get download, nothing installed): the
#                              run-time closure of the libraries, their -dev packages (headers,
#                              .so links, .pc files), make, pkgconf, and autoconf/automake/libtool
#                              in case the generated build system below is stale there
#   .devpkgs/generated.tar.gz  configure, Makefile.in, config.h.in, aclocal.m4, build-aux/ and
#                              m4/l*.m4: autoreconf's output, which git ignores and so never
#                              travels with the working tree
#   .devpkgs/generated.sums    sha256 of the autotools inputs it was made from (device-check.sh
#                              regenerates there when they differ)
#   .devpkgs/fmnist/*.gz       the Fashion-MNIST IDX files (the training tests and gpu-train use
#                              them), when installed here and the size allows (--no-fmnist: never)
#   .devpkgs/MANIFEST          what is there, and the sizes
#
# Then call the device tool's `run` with command `bash tests/cuda/device-check.sh`, carry
# [".devpkgs"], timeout_s 590 (doc/gpu.md, "Running the GPU checks").
#
# usage: tests/cuda/device-prep.sh [--no-fmnist] [--gnuplot] [--keep]
#   --gnuplot  also ship gnuplot-nox and its libraries (PNG plots of the GPU benchmarks there)
#   --keep     reuse the .debs already in .devpkgs/debs (no apt-get download of those present)
# Exits 1 when something cannot be downloaded or what would travel is over the limit.
set -u -o pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
dest=$top/.devpkgs
# The device tool sends at most 64 MiB (working tree + carried paths); stay well under it.
limit_mib=${TIDAL_DEVPKGS_LIMIT_MIB:-55}

say() { printf 'device-prep: %s\n' "$*" >&2; }
die() { printf 'device-prep: error: %s\n' "$*" >&2; exit 1; }

fmnist=1 gnuplot=0 keep=0
for a in "$@"; do
    case $a in
    --no-fmnist) fmnist=0 ;;
    --gnuplot) gnuplot=1 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$a' (see --help)" ;;
    esac
done
command -v apt-get >/dev/null && command -v apt-cache >/dev/null || die "needs apt (Debian 12)"
command -v autoreconf >/dev/null ||
    die "needs autoreconf here (Debian: autoconf automake libtool) to generate configure"

# ---- which packages ------------------------------------------------------------------------
# Libraries whose whole run-time closure is shipped (first alternative of each dependency).
RUNTIME_ROOTS="libopenmpi3 openmpi-bin openmpi-common libucx0 ucx-utils libhdf5-openmpi-103-1
  libopenblas0-pthread libpng16-16 zlib1g libmicrohttpd12 libjansson4"
# -dev packages: headers, .so links, .pc files. Their own dependencies (compilers, other -dev
# packages) are not followed: tidal's build needs none of them.
DEV_PKGS="libopenmpi-dev libucx-dev libhdf5-openmpi-dev libopenblas-dev libopenblas-pthread-dev
  zlib1g-dev libpng-dev libmicrohttpd-dev libjansson-dev"
# Tools, also not followed (perl, a C compiler and coreutils are taken from the machine).
TOOL_PKGS="make pkgconf pkgconf-bin libpkgconf3 autoconf automake autotools-dev libtool m4"
GNUPLOT_ROOTS="gnuplot-nox"
# Never shipped: the C library and compiler run-time (a Debian 12 libstdc++ ahead of the
# machine's newer one would break PyTorch there), compilers, perl, the packaging system, and
# optional plug-ins that pull in X11 and OpenCL (hwloc's).
EXCLUDE_RE='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libgcc-s1'
EXCLUDE_RE+='|libstdc\+\+6|gcc-[0-9]+-base|gcc|gcc-[0-9]+|g\+\+|g\+\+-[0-9]+|cpp|cpp-[0-9]+'
EXCLUDE_RE+='|binutils.*|libbinutils|libctf.*|libgprofng0|libsframe.*|gfortran.*|flang-.*'
EXCLUDE_RE+='|lib(gfortran|stdc\+\+|gcc|objc)-[0-9]+-dev|lib(a|t|l|ub|hwa)san[0-9]*|libitm1'
EXCLUDE_RE+='|libatomic1|libcc1-0|libisl[0-9]+|libmpc3|libmpfr6|perl|perl-base|perl-modules-.*'
EXCLUDE_RE+='|libperl.*|debconf|cdebconf|dpkg|dpkg-dev|libdpkg-perl|adduser|passwd|tar'
EXCLUDE_RE+='|debianutils|install-info|libpam.*|libselinux1|libsemanage.*|libsepol.*|libaudit.*'
EXCLUDE_RE+='|libacl1|libattr1|libdb5\.3|libgdbm.*|libdebian-installer4|libnewt.*|libslang2'
EXCLUDE_RE+='|libtextwrap1|readline-common|openssh-client|libjs-.*|libllvm.*|libclang.*|libmlir.*'
EXCLUDE_RE+='|libz3-.*|coreutils|sensible-utils|lsb-base|init-system-helpers|libtinfo6'
EXCLUDE_RE+='|ncurses-base|libncursesw6|libsystemd0|libudev1|file|libmagic.*|libhwloc-plugins'
EXCLUDE_RE+='|libxnvctrl0|ocl-icd-libopencl1|dataset-fashion-mnist|fonts-.*|fontconfig-config)$'

# closure ROOT...: the packages ROOT... and, recursively, their Depends and Pre-Depends: the
# first alternative of each, a virtual package by its first provider; excluded ones (and what
# only they need) are left out.
closure() {
    local -A seen=()
    local queue=("$@") p deps
    while [ ${#queue[@]} -gt 0 ]; do
        p=${queue[0]}; queue=("${queue[@]:1}")
        [ -n "${seen[$p]:-}" ] && continue
        seen[$p]=1
        [[ $p =~ $EXCLUDE_RE ]] && continue
        echo "$p"
        deps=$(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances "$p" 2>/dev/null | awk '
            NR == 1 { next }
            # "  Depends: X" ends an or-group, " |Depends: X" continues it; a virtual "<X>"
            # is followed by its providers, indented by four spaces.
            /^ [ |](Pre)?Depends: / {
                if (!open) { if (pick != "") print pick; pick = ""; virt = 0 }
                name = $2; open = (substr($0, 2, 1) == "|")
                if (name ~ /^</) virt = 1
                else if (pick == "") pick = name
                next }
            /^    / { if (virt && pick == "") pick = $1; next }
            END { if (pick != "") print pick }')
        # shellcheck disable=SC2206
        queue+=($deps)
    done
}

runtime=$(closure $RUNTIME_ROOTS)
[ "$gnuplot" = 1 ] && runtime="$runtime $(closure $GNUPLOT_ROOTS)"
pkgs=$(printf '%s\n' $runtime $DEV_PKGS $TOOL_PKGS | sort -u)
say "$(echo "$pkgs" | wc -l) packages: $(echo $pkgs)"

# ---- download ------------------------------------------------------------------------------
mkdir -p "$dest/debs" || die "cannot create $dest"
if [ "$keep" = 0 ]; then
    rm -f "$dest"/debs/*.deb
fi
todo=""
for p in $pkgs; do
    ls "$dest/debs/${p}_"*.deb >/dev/null 2>&1 || todo="$todo $p"
done
if [ -n "$todo" ]; then
    say "apt-get download:$todo"
    # shellcheck disable=SC2086
    (cd "$dest/debs" && apt-get download -q $todo >/dev/null) ||
        die "apt-get download failed (run apt-get update?)"
fi
# Debs of packages no longer in the list (an earlier --gnuplot, a --keep run) would travel too.
for f in "$dest"/debs/*.deb; do
    p=$(basename "$f"); p=${p%%_*}
    printf '%s\n' $pkgs | grep -qx "$p" || { say "dropping $(basename "$f")"; rm -f "$f"; }
done

# ---- the generated build system ------------------------------------------------------------
# autoreconf in a scratch copy of what travels (tracked and untracked-not-ignored files), so
# that the shared working tree is left alone.
scratch=$(mktemp -d) || die "mktemp failed"
trap 'rm -rf "$scratch"' EXIT
(cd "$top" && git ls-files -z -c -o --exclude-standard |
    xargs -0 -r cp --parents -t "$scratch" 2>/dev/null) || true
[ -f "$scratch/configure.ac" ] || die "could not copy the working tree to $scratch"
say "autoreconf -fi (in a scratch copy)"
(cd "$scratch" && autoreconf -fi >"$scratch/autoreconf.log" 2>&1) ||
    { tail -n 30 "$scratch/autoreconf.log" >&2; die "autoreconf failed"; }
# shellcheck disable=SC2046  # file lists, split on purpose
(cd "$scratch" && tar -czf "$dest/generated.tar.gz" configure Makefile.in config.h.in \
    aclocal.m4 build-aux $(ls m4/libtool.m4 m4/lt*.m4 2>/dev/null)) ||
    die "cannot pack the generated files"
# The inputs: configure.ac, Makefile.am and the tracked m4 files (not libtoolize's output).
# shellcheck disable=SC2046
(cd "$top" && sha256sum configure.ac Makefile.am $(git ls-files 'm4/*.m4')) \
    >"$dest/generated.sums"

# ---- Fashion-MNIST -------------------------------------------------------------------------
fm_src=/usr/share/datasets/fashion-mnist
rm -rf "$dest/fmnist"
if [ "$fmnist" = 1 ] && [ -d "$fm_src" ]; then
    mkdir -p "$dest/fmnist"
    cp "$fm_src"/*-ubyte.gz "$dest/fmnist/" 2>/dev/null || rm -rf "$dest/fmnist"
fi

# ---- sizes ---------------------------------------------------------------------------------
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
bytes_of() { du -cb "$@" 2>/dev/null | tail -n 1 | cut -f1; }
tree_b=$(cd "$top" && git ls-files -z -c -o --exclude-standard | du -cb --files0-from=- 2>/dev/null |
    tail -n 1 | cut -f1)
debs_b=$(bytes_of "$dest"/debs/*.deb)
gen_b=$(bytes_of "$dest/generated.tar.gz")
fm_b=0
[ -d "$dest/fmnist" ] && fm_b=$(bytes_of "$dest/fmnist")
total=$((tree_b + debs_b + gen_b + fm_b))
if [ "$fm_b" -gt 0 ] && [ "$total" -gt $((limit_mib * 1048576)) ]; then
    say "dropping Fashion-MNIST ($(mib "$fm_b") MiB): the total would be $(mib "$total") MiB"
    rm -rf "$dest/fmnist"
    total=$((total - fm_b)) fm_b=0
fi
{
    echo "# .devpkgs for tests/cuda/device-check.sh, made $(date -u '+%Y-%m-%d %H:%M UTC')" \
        "on $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "debs: $(ls "$dest"/debs/*.deb | wc -l) files, $(mib "$debs_b") MiB"
    echo "generated.tar.gz: $(mib "$gen_b") MiB"
    echo "fmnist: $(mib "$fm_b") MiB"
    echo "working tree that travels: $(mib "$tree_b") MiB"
    echo "total: $(mib "$total") MiB (limit here ${limit_mib} MiB; the tool's 64 MiB)"
    echo
    (cd "$dest/debs" && ls -s --block-size=K -1 *.deb | sort -k1 -n -r)
} >"$dest/MANIFEST"
say "debs $(mib "$debs_b") MiB + generated $(mib "$gen_b") MiB + fmnist $(mib "$fm_b") MiB" \
    "+ working tree $(mib "$tree_b") MiB = $(mib "$total") MiB (see .devpkgs/MANIFEST)"
[ "$total" -le $((limit_mib * 1048576)) ] ||
    die "$(mib "$total") MiB is over ${limit_mib} MiB: see the largest debs in .devpkgs/MANIFEST"
git -C "$top" check-ignore -q .devpkgs/MANIFEST ||
    say "warning: .devpkgs/ is not ignored by git: it would travel without carry, and be committed"
say "ready: run \`bash tests/cuda/device-check.sh\` there with carry [\".devpkgs\"], timeout_s 590"
