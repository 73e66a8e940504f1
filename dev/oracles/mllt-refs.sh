#!/bin/bash
# Makes tests/data/mllt with Kaldi's own programs (a Kaldi bundle, or Kaldi's
# bin/gmmbin on PATH), from the fixtures: Kaldi's posteriors of the tri2
# alignment (ali-to-post | weight-silence-post 0.0 silence, as
# steps/train_lda_mllt.sh), that alignment gzipped (the pipe itself) and its
# ali-to-post alone (allpost.txt.gz, weight-silence-post's input), posteriors for tests/data/featpipe's 12
# utterances (their transition-ids taken in turn from the tri2 alignment:
# the stage's feature pipe on real MFCC), and for each case of
# tests/cli/mllt.sh Kaldi's gmm-acc-mllt output: the md5 of the statistics
# per OpenBLAS core (expect.txt: CASE PROFILE MD5 EXIT; OPENBLAS_CORETYPE
# picks the kernels, the bundle's OpenBLAS being DYNAMIC_ARCH; SkylakeX needs
# an AVX-512 host) and its log lines with the Haswell kernels (CASE.log).
# usage: dev/oracles/mllt-refs.sh [CORES...] (default: Haswell Sandybridge
# Nehalem Prescott); run from anywhere; needs KALDI_BUNDLE or Kaldi on PATH.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/tests/data/mllt
[ -n "${KALDI_BUNDLE:-}" ] && . "$KALDI_BUNDLE/env.sh"
cores=${*:-Haswell Sandybridge Nehalem Prescott}
mkdir -p "$out"
cd "$top/tests/data"
sil=$(cat models/silence.csl)
ali-to-post ark:kaldi/tri2/ali.ark ark:- 2>/dev/null |
  weight-silence-post 0.0 "$sil" models/tri2/final.mdl ark:- ark,t:- 2>/dev/null |
  gzip -9n >"$out/post.txt.gz"
gzip -9nc kaldi/tri2/ali.ark >"$out/tri2-ali.gz"
ali-to-post ark:kaldi/tri2/ali.ark ark,t:- 2>/dev/null | gzip -9n >"$out/allpost.txt.gz"
feat-to-len scp:featpipe/feats.scp ark,t:- 2>/dev/null |
  awk 'NR == FNR { for (i = 2; i <= NF; i++) t[n++] = $i; next }
       { printf "%s", $1; for (i = 0; i < $2; i++) printf " %s", t[p++ % n]; printf "\n" }' \
    kaldi/tri2/ali.txt - |
  ali-to-post ark:- ark:- 2>/dev/null |
  weight-silence-post 0.0 "$sil" models/tri2/final.mdl ark:- ark,t:- 2>/dev/null |
  gzip -9n >"$out/pipe-post.txt.gz"
. "$top/tests/cli/lib/mllt-cases.sh"
: >"$out/expect.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mllt_inputs "$tmp" mllt
: >"$out/expect-post.txt"
for c in "${post_cases[@]}"; do
  name=${c%%|*}
  rm -f "$tmp/out"
  set +e
  eval "${c#*|} $(post_wspec "$name" "$tmp/out")" 2>"$tmp/log"
  rc=$?
  set -e
  sum=$( [ -s "$tmp/out" ] && md5sum <"$tmp/out" | cut -d' ' -f1 || echo none)
  echo "$name $sum $rc" >>"$out/expect-post.txt"
  grep -E "^(LOG|WARNING|ERROR) \((ali-to-post|weight-silence-post)|^(Usage|Apply|Convert)" "$tmp/log" |
    sed 's/\[[^]]*\]//' >"$out/$name.log" || true
done
for core in $cores; do
  case $core in
    Haswell) p=hsw ;; Sandybridge) p=snb ;; Nehalem) p=nhm ;; Prescott) p=sse ;;
    SkylakeX) p=skx ;; Cooperlake) p=cpl ;; *) echo "unknown core $core" >&2; exit 1 ;;
  esac
  for c in "${mllt_cases[@]}"; do
    name=${c%%|*}
    rm -f "$tmp/out"
    set +e
    eval "OPENBLAS_CORETYPE=$core gmm-acc-mllt ${c#*|} $tmp/out" 2>"$tmp/log"
    rc=$?
    set -e
    sum=$( [ -f "$tmp/out" ] && md5sum <"$tmp/out" | cut -d' ' -f1 || echo none)
    echo "$name $p $sum $rc" >>"$out/expect.txt"
    [ "$p" = hsw ] || continue  # the log lines: Haswell's likelihoods
    grep -E "^(LOG|WARNING|ERROR|ASSERTION_FAILED) \((gmm-acc-mllt|ali-to-post|weight-silence-post)|^(Usage|Accumulate)" "$tmp/log" |
      sed 's/\[[^]]*\]//' >"$out/$name.log" || true
  done
done
