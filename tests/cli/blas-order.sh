#!/bin/bash
# Our per-Gaussian log-likelihood order (gpu-align/gmm-core.h) against an
# installed OpenBLAS's cblas_sgemv, bit for bit (tools/sgemv-order-check):
# on SkylakeX/Cooperlake cores (the reference build's) our order must match
# every case; on Haswell/Zen cores the same kernels with that build's tail
# must (this checks the 4x4/4x2/4x1 kernel model our order shares with it).
# The library: $OPENBLAS_LIB, else $KALDI_BUNDLE/lib/libopenblas.so.0, else
# the system's libopenblas.so.0. SKIP (77) when none is there or the core is
# another one.
set -u
: "${TOP:?}"
tool="${TOOLS:-$TOP/build/tools}/sgemv-order-check"
[ -x "$tool" ] || { echo "SKIP: $tool not built"; exit 77; }
out=$("$tool" 2>&1)
rc=$?
if [ $rc = 2 ]; then echo "SKIP: no OpenBLAS to compare with ($out)"; exit 77; fi
[ $rc = 0 ] || { echo "FAIL: sgemv-order-check exit $rc: $out"; exit 1; }
echo "$out"
core=$(echo "$out" | awk '$1 == "core" {print $2}')
ours=$(echo "$out" | awk '$2 == "ours" {print $4}')
hsw=$(echo "$out" | awk '$2 == "haswell" {print $4}')
case "$core" in
  SkylakeX|Cooperlake|SapphireRapids)
    [ "$ours" = 0 ] || { echo "FAIL: $core: our order differs in $ours cases"; exit 1; } ;;
  Haswell|Zen)
    [ "$hsw" = 0 ] || { echo "FAIL: $core: kernel model differs in $hsw cases"; exit 1; } ;;
  *) echo "SKIP: OpenBLAS core $core: order not modelled"; exit 77 ;;
esac
echo "blas order checks passed ($core)"
