#!/bin/bash
# gmm-acc-stats-twofeats, ours against Kaldi's (train_sat.sh's last
# accumulation: posteriors from the first features, statistics of the
# second), on the tri2 fixture replicated BENCH_TWOFEATS_COPIES times
# (default 40: ~566k frames, one --nj 16 job of data/train_x4): the LDA
# features first, the delta features second, ali-to-post's posteriors. Each
# side runs BENCH_TWOFEATS_REPEAT times (default 3); prints the median wall
# seconds and whether the statistics are identical. Env: KALDI_BUNDLE or
# KALDI_ROOT (without it only our figure), BIN (our programs).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${BIN:-$top/gmmbin-gpu}" && pwd)
copies=${BENCH_TWOFEATS_COPIES:-40}
repeat=${BENCH_TWOFEATS_REPEAT:-3}
fix=$top/tests/data
rep=$top/build/tools/replicate-archive
[ -x "$bin/gmm-acc-stats-twofeats" ] && [ -x "$rep" ] || { echo "twofeats-bench: not built"; exit 1; }
out=$top/bench-data/twofeats
mkdir -p "$out"
kbin=""
root=${KALDI_ROOT:-${KALDI_BUNDLE:-}}
if [ -n "$root" ]; then
  for d in "$root/src/gmmbin" "$root/bin"; do [ -x "$d/gmm-acc-stats-twofeats" ] && kbin=$d; done
  [ -d "$root/lib" ] && export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ ! -f "$out/post.$copies.ark" ]; then
  "$rep" --copies="$copies" "ark:$fix/feats/lda.ark" "ark:$out/lda.$copies.ark" 2>/dev/null &&
    "$rep" --copies="$copies" "ark:$fix/feats/delta.ark" "ark:$out/delta.$copies.ark" 2>/dev/null &&
    "$rep" --type=ali --copies="$copies" "ark:$fix/kaldi/tri2/ali.ark" "ark:$out/ali.$copies.ark" 2>/dev/null &&
    "$bin/ali-to-post" "ark:$out/ali.$copies.ark" "ark:$out/post.$copies.ark" 2>/dev/null ||
    { echo "twofeats-bench: could not make the data"; exit 1; }
fi
args=("$fix/models/tri2/final.mdl" "ark:$out/lda.$copies.ark" "ark,s,cs:$out/delta.$copies.ark"
      "ark,s,cs:$out/post.$copies.ark")
median() {  # median wall seconds of $repeat runs of PROGRAM OUT
  local t=()
  for _ in $(seq "$repeat"); do
    local s e
    s=$(date +%s.%N)
    "$1" "${args[@]}" "$2" 2>/dev/null || return 1
    e=$(date +%s.%N)
    t+=("$(echo "$e - $s" | bc)")
  done
  printf "%.2f\n" "${t[@]}" | sort -n | sed -n "$(( (repeat + 1) / 2 ))p"
}
frames=$(( copies * 14158 ))
echo "| program | frames | Kaldi s | ours s | speed-up | identical |"
echo "|---|---:|---:|---:|---:|---|"
o=$(median "$bin/gmm-acc-stats-twofeats" "$out/ours.acc") || { echo "twofeats-bench: ours failed"; exit 1; }
if [ -n "$kbin" ]; then
  k=$(median "$kbin/gmm-acc-stats-twofeats" "$out/kaldi.acc") || { echo "twofeats-bench: Kaldi's failed"; exit 1; }
  same=no; cmp -s "$out/ours.acc" "$out/kaldi.acc" && same=yes
  echo "| gmm-acc-stats-twofeats | $frames | $k | $o | $(echo "scale=2; $k / $o" | bc)x | $same |"
else
  echo "| gmm-acc-stats-twofeats | $frames | - | $o | - | - |"
fi
