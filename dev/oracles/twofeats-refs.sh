#!/bin/bash
# Makes tests/data/twofeats with Kaldi's own gmm-acc-stats-twofeats (a Kaldi
# bundle, or Kaldi's programs on PATH): multi.txt.gz (posteriors of the
# first 6 fixture utterances with up to 40 random pairs per frame, some of
# weight 0, so that frames name several pdfs: Kaldi's ConvertPosteriorToPdfs
# order counts), and for each case of tests/cli/lib/twofeats-cases.sh the md5
# of Kaldi's statistics per OpenBLAS core (expect.txt: CASE PROFILE MD5
# EXIT; OPENBLAS_CORETYPE picks the kernels of the bundle's DYNAMIC_ARCH
# OpenBLAS) and its log lines with the Haswell kernels (CASE.log).
# usage: dev/oracles/twofeats-refs.sh [CORES...] (default: Haswell Sandybridge
# Nehalem Prescott); needs KALDI_BUNDLE or Kaldi on PATH.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/tests/data/twofeats
[ -n "${KALDI_BUNDLE:-}" ] && . "$KALDI_BUNDLE/env.sh"
cores=${*:-Haswell Sandybridge Nehalem Prescott}
mkdir -p "$out"
cd "$top/tests/data"
gunzip -c mllt/allpost.txt.gz | head -6 |
  awk 'BEGIN { srand(40) }
       { printf "%s", $1
         for (i = 2; i <= NF; i++) if ($i == "[") {
           n = int(rand() * 40); printf " ["
           for (k = 0; k < n; k++) printf " %d %g", 1 + int(rand() * (rand() < 0.5 ? 300 : 13000)), rand() < 0.1 ? 0 : rand()
           printf " %s %s ]", $(i + 1), $(i + 2); i += 3 }
         printf "\n" }' | gzip -9n >"$out/multi.txt.gz"
. "$top/tests/cli/lib/twofeats-cases.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
twofeats_inputs "$tmp" twofeats
: >"$out/expect.txt"
for core in $cores; do
  case $core in
    Haswell) p=hsw ;; Sandybridge) p=snb ;; Nehalem) p=nhm ;; Prescott) p=sse ;;
    SkylakeX) p=skx ;; Cooperlake) p=cpl ;; *) echo "unknown core $core" >&2; exit 1 ;;
  esac
  for c in "${twofeats_cases[@]}"; do
    name=${c%%|*}
    rm -f "$tmp/out"
    set +e
    eval "OPENBLAS_CORETYPE=$core gmm-acc-stats-twofeats ${c#*|} $tmp/out" 2>"$tmp/log"
    rc=$?
    set -e
    sum=$( [ -f "$tmp/out" ] && md5sum <"$tmp/out" | cut -d' ' -f1 || echo none)
    echo "$name $p $sum $rc" >>"$out/expect.txt"
    [ "$p" = hsw ] || continue
    grep -E "(gmm-acc-stats-twofeats|ali-to-post|diag-gmm)\.cc:[0-9]+\)|^(Usage|Accumulate)" "$tmp/log" |
      sed 's/\[[^]]*\]//' >"$out/$name.log" || true
  done
done
