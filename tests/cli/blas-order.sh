#!/bin/bash
# Our BLAS-order arithmetic (base/matrix/blas-order.h, blas-gemm.c) against
# an installed OpenBLAS, bit for bit on random data in Kaldi's layouts
# (tools/blas-order-check: sgemv rows, dger, saxpy, sgemm at 1-16 threads):
# for every core of a DYNAMIC_ARCH library that this CPU can run
# (OPENBLAS_CORETYPE = Prescott, Nehalem, Sandybridge, Haswell, SkylakeX,
# Cooperlake, SapphireRapids; a core whose kernels we do not reproduce is
# reported, not failed). The library: $OPENBLAS_LIB, else the Kaldi bundle's
# (tests/cli/lib/kaldi-bundle.sh); SKIP (77) without one.
set -u
: "${TOP:?}"
tool="${TOOLS:-$TOP/build/tools}/blas-order-check"
[ -x "$tool" ] || { echo "SKIP: $tool not built"; exit 77; }
tmp=$(mktemp -d /tmp/blas-order.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$TOP/tests/cli/lib/kaldi-bundle.sh"
lib=${OPENBLAS_LIB:-}
if [ -z "$lib" ]; then kb=$(find_kaldi_bundle "$tmp") && lib=$kb/lib/libopenblas.so.0; fi
[ -n "$lib" ] && [ -r "$lib" ] || { echo "SKIP: no OpenBLAS to compare with (OPENBLAS_LIB, Kaldi bundle)"; exit 77; }
fails=0 checked=""
for core in Prescott Nehalem Sandybridge Haswell SkylakeX Cooperlake SapphireRapids; do
  (OPENBLAS_CORETYPE=$core "$tool" "$lib" >"$tmp/out" 2>&1) 2>/dev/null  # quiet about SIGILL
  rc=$?
  got=$(awk '$1 == "core" {print $2; exit}' "$tmp/out")
  if [ $rc -ge 128 ]; then echo "blas-order: core $core: this CPU cannot run it"; continue; fi
  case " $checked " in *" $got "*) continue ;; esac
  checked="$checked $got"
  sed "s/^/blas-order: $core: /" "$tmp/out"
  case $rc in
    0) ;;
    3) echo "blas-order: core $got: not reproduced (not compared)" ;;
    *) echo "FAIL: OpenBLAS core $got: our orders differ (exit $rc)"; fails=$((fails + 1)) ;;
  esac
done
[ -n "$checked" ] || { echo "SKIP: no core of $lib runs here"; exit 77; }
[ $fails = 0 ] && echo "blas order checks passed (cores:$checked)" && exit 0
exit 1
