#!/bin/bash
# Makes tests/data/fmllr with Kaldi's own gmm-est-fmllr (a Kaldi bundle, or
# Kaldi's bin/gmmbin on PATH): for each case of tests/cli/lib/fmllr-cases.sh
# the md5 of the transforms per OpenBLAS core (expect.txt: CASE CORE MD5
# EXIT; OPENBLAS_CORETYPE picks the kernels, the bundle's OpenBLAS being
# DYNAMIC_ARCH; SkylakeX needs an AVX-512 host) and its log lines with the
# Haswell kernels (CASE.log). The inputs are tests/data/mllt's posteriors
# (dev/oracles/mllt-refs.sh).
# usage: dev/oracles/fmllr-refs.sh [CORES...] (default: Haswell Sandybridge
# Nehalem Prescott); run from anywhere; needs KALDI_BUNDLE or Kaldi on PATH.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/tests/data/fmllr
[ -n "${KALDI_BUNDLE:-}" ] && . "$KALDI_BUNDLE/env.sh"
# one OpenBLAS thread: the feature pipes' transform-feats splits its sgemm
# over threads, so the outputs would depend on the cores of this machine
export OPENBLAS_NUM_THREADS=1
cores=${*:-Haswell Sandybridge Nehalem Prescott}
mkdir -p "$out"
cd "$top/tests/data"
. "$top/tests/cli/lib/fmllr-cases.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fmllr_inputs "$tmp" mllt
: >"$out/expect.txt"
for core in $cores; do
  for c in "${fmllr_cases[@]}"; do
    name=${c%%|*}
    rm -f "$tmp/out"
    set +e
    if [ "$name" = usage ]; then
      eval "OPENBLAS_CORETYPE=$core gmm-est-fmllr ${c#*|}" 2>"$tmp/log"
    else
      eval "OPENBLAS_CORETYPE=$core gmm-est-fmllr ${c#*|} $(fmllr_wspec "$name" "$tmp/out")" 2>"$tmp/log"
    fi
    rc=$?
    set -e
    sum=$( [ -s "$tmp/out" ] && md5sum <"$tmp/out" | cut -d' ' -f1 || echo none)
    echo "$name $core $sum $rc" >>"$out/expect.txt"
    if [ "$core" = Haswell ]; then
      grep -E "gmm-est-fmllr\.cc:|fmllr-diag-gmm\.cc:|diag-gmm\.cc:|^(Usage|Estimate)" "$tmp/log" |
        sed 's/\[[^]]*\]//' >"$out/$name.log" || true
    fi
  done
done
