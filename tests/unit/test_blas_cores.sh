#!/bin/sh
# Each image the same bytes whatever batch it is in, under every OpenBLAS kernel set this CPU can
# run: tensor_linear_forward lets an image share a product with others only where that changes no
# byte (tensor_rows_invariant), which holds for the AVX-512 kernels (SkylakeX) and not for the
# Haswell ones (rows tiled in 12s). test_dit_grad (products of 3 images of 256 tokens) and
# test_dit_batch (whole sampler steps of mixed batches against each trajectory alone) under each.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
export OPENBLAS_NUM_THREADS=1
cores=Haswell
grep -q avx512f /proc/cpuinfo 2>/dev/null && cores="$cores SkylakeX"
for core in $cores; do
    for t in test_dit_grad test_dit_batch; do
        out=`OPENBLAS_CORETYPE=$core "$abs_top_builddir/tests/unit/$t" 2>&1`; rc=$?
        n_ok=`printf '%s\n' "$out" | grep -c '^ok '`
        n_bad=`printf '%s\n' "$out" | grep -c '^not ok '`
        check "OPENBLAS_CORETYPE=$core $t: exit 0, $n_ok ok, $n_bad not ok" \
            sh -c "[ $rc = 0 ] && [ $n_bad = 0 ] && [ $n_ok -gt 10 ]"
        [ $n_bad = 0 ] || printf '%s\n' "$out" | grep '^not ok' | head -5 | sed 's/^/# /'
        [ $t = test_dit_grad ] || continue
        case $out in *"$core, 384 -> 1152"*) ok "$core: the kernels named in the products' lines";;
            *) not_ok "$core: the BLAS did not take OPENBLAS_CORETYPE";; esac
    done
done
done_testing
