#!/bin/bash
# Builds one long utterance and Kaldi's alignment of it, for the
# long-recording tests and benchmarks (issue 11):
#   dev/oracles/long-utterance.sh MINUTES OUTDIR [MODEL]
# MODEL: mono or tri1 (default tri1; delta features). The 40 fixture
# utterances of tests/data (one speaker, en-029-f1) are concatenated in
# order, repeated until MINUTES minutes (100 frames/s) are reached, with
# their transcripts; the graph is compiled by the bundle's
# compile-train-graphs; Kaldi's gmm-align-compiled (recipe options, beam 10,
# retry 40) aligns it, timed with /usr/bin/time. Needs KALDI_BUNDLE (or
# KALDI_ROOT with src/*bin on PATH). Writes OUTDIR/feats.ark, text.int,
# graph.fsts.gz, kaldi.ali (text), kaldi.log, kaldi.time ("SECONDS s RSS KB"),
# info ("frames N").
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,15p' "$0"; exit 1; }
min=$1; out=$2; model=${3:-tri1}
top=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${KALDI_BUNDLE:-}" ]; then . "$KALDI_BUNDLE/env.sh"; fi
command -v compile-train-graphs >/dev/null || { echo "no Kaldi (set KALDI_BUNDLE)"; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
d="$top/tests/data"
cd "$d"
copy-feats --print-args=false ark:feats/delta.ark "ark,scp:$out/pieces.ark,$out/pieces.scp" 2>/dev/null
frames_one=$(feat-to-len --print-args=false scp:"$out/pieces.scp" ark,t:- 2>/dev/null | awk '{s += $2} END {print s}')
reps=$(awk -v m="$min" -v f="$frames_one" 'BEGIN {r = int(m * 6000 / f + 0.999); print r < 1 ? 1 : r}')
args=()
words=""
for ((r = 0; r < reps; r++)); do
  while read -r key rx; do args+=("$rx"); done <"$out/pieces.scp"
  words="$words $(cut -d' ' -f2- kaldi/text.int | tr '\n' ' ')"
done
concat-feats --print-args=false "${args[@]}" "$out/long.mat" 2>/dev/null
copy-feats --print-args=false "ark:echo long $out/long.mat |" "ark:$out/feats.ark" 2>/dev/null ||
  { printf 'long ' >"$out/feats.ark"; cat "$out/long.mat" >>"$out/feats.ark"; }
echo "long $(echo $words)" >"$out/text.int"
rm -f "$out/pieces.ark" "$out/pieces.scp" "$out/long.mat"
compile-train-graphs --print-args=false --read-disambig-syms=models/disambig.int \
  "models/$model/tree" "models/$model/final.mdl" models/L.fst "ark:$out/text.int" \
  "ark:|gzip -c >$out/graph.fsts.gz" 2>"$out/compile.log"
/usr/bin/time -f '%e s %M KB' -o "$out/kaldi.time" gmm-align-compiled --transition-scale=1.0 \
  --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 "models/$model/final.mdl" \
  "ark:gunzip -c $out/graph.fsts.gz|" "ark:$out/feats.ark" "ark,t:$out/kaldi.ali" 2>"$out/kaldi.log"
echo "frames $(awk '{print NF - 1}' "$out/kaldi.ali")" >"$out/info"
echo "model $model" >>"$out/info"
cat "$out/info" "$out/kaldi.time"
