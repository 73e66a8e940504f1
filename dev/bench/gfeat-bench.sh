#!/bin/bash
# gmm-align-compiled on its own CUDA context with the features' chain on
# the CPU (KALDI_GPU_FEATS_GPU=0: base/feat/feat-chain.c, 1 and all KALDI_GPU_FEATS_THREADS)
# and on the device (KALDI_GPU_FEATS_GPU=1: gpu-feats), on the fixtures'
# utterances replicated COPIES times as a recipe data directory
# (tools/gfeat-testdata: CM-compressed 13-dim input, feats.scp, per-speaker
# CMVN stats, per-speaker fMLLR-like transforms): deltas with tri1,
# LDA+MLLT and LDA+MLLT+fMLLR (SAT's chain) with tri2. Prints wall and CPU
# seconds per run and checks that every run's alignments equal the first's.
# Usage: dev/bench/gfeat-bench.sh [BUILD] (default build); env COPIES (default
# 100: ~2.3 h of audio), REPS (default 2; the best is printed), WORK
# (default /tmp/gfeat-bench), BIN (the programs; default gmmbin-gpu). Exit 1
# when outputs differ.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
[ "${build#/}" = "$build" ] && build=$top/$build
bin=${BIN:-$top/gmmbin-gpu}
copies=${COPIES:-100}
reps=${REPS:-2}
work=${WORK:-/tmp/gfeat-bench}
fix=$top/tests/data
for p in "$bin/gmm-align-compiled" "$build/tools/gfeat-testdata" "$build/tools/replicate-archive"; do
  [ -x "$p" ] || { echo "gfeat-bench: $p not built"; exit 1; }
done
mkdir -p "$work/d"
if [ "$(cat "$work/stamp" 2>/dev/null)" != "$copies.2" ]; then
  echo "gfeat-bench: building $work ($copies copies) ..."
  "$build/tools/gfeat-testdata" --fmllr=40 --copies="$copies" "ark:$fix/feats/delta.ark" "$work/d" || exit 1
  for m in tri1 tri2; do
    "$build/tools/replicate-archive" --print-args=false --type=fst --copies="$copies" \
      "ark:gunzip -c $fix/graphs/$m.fsts.gz|" "ark:$work/$m.fsts" || exit 1
  done
  echo "$copies.2" >"$work/stamp"
fi
export KALDI_GPU_SERVICE=no
ncpu=$(nproc)
d=$work/d
cmvn="apply-cmvn --utt2spk=ark:$d/utt2spk scp:$d/cmvn.scp scp:$d/feats.scp ark:-"
fails=0
printf '%-6s %-22s %8s %8s %8s  %s\n' chain run wall_s user_s sys_s alignments
lda="splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats $fix/models/tri2/final.mat ark:- ark:-"
for chain in delta lda sat; do
  case $chain in
    delta) model=tri1; feats="ark,s,cs:$cmvn | add-deltas ark:- ark:- |" ;;
    lda) model=tri2; feats="ark,s,cs:$cmvn | $lda |" ;;
    sat) model=tri2
      feats="ark,s,cs:$cmvn | $lda | transform-feats --utt2spk=ark:$d/utt2spk ark:$d/trans.ark ark:- ark:- |" ;;
  esac
  first=""
  for run in "cpu KALDI_GPU_FEATS_GPU=0" "cpu-threads=$ncpu KALDI_GPU_FEATS_GPU=0 KALDI_GPU_FEATS_THREADS=$ncpu" \
             "gpu KALDI_GPU_FEATS_GPU=1"; do
    name=${run%% *}; envs=${run#* }
    best=""
    for r in $(seq 1 "$reps"); do
      out=$work/$chain.$name.ali
      rm -f "$out"
      # shellcheck disable=SC2086
      t=$( { /usr/bin/env $envs bash -c 'time -p "$@" 2>"$0"' "$work/$chain.$name.log" \
               "$bin/gmm-align-compiled" --verbose=1 --use-gpu=yes --transition-scale=1.0 \
               --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 \
               "$fix/models/$model/final.mdl" "ark:$work/$model.fsts" "$feats" "ark:$out"; } 2>&1 |
           awk '/^real/{r=$2} /^user/{u=$2} /^sys/{s=$2} END{print r, u, s}')
      if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN{split(a,x," "); split(b,y," "); exit !(x[1] < y[1])}'; then
        best=$t
      fi
    done
    same="-"
    if ! grep -q -E 'Done [1-9][0-9]*, errors on' "$work/$chain.$name.log" || [ ! -s "$out" ]; then
      same="FAILED (see $work/$chain.$name.log)"; fails=$((fails + 1))
    elif [ -z "$first" ]; then first=$out.first; cp "$out" "$first"; same="(reference)"
    elif cmp -s "$first" "$out"; then same="identical"
    else same="DIFFERENT"; fails=$((fails + 1)); fi
    gpu_line=$(grep -m1 -o 'Features computed on the GPU: .*' "$work/$chain.$name.log" || true)
    read -r w u s <<<"$best"
    printf '%-6s %-22s %8s %8s %8s  %s\n' "$chain" "$name" "$w" "$u" "$s" "$same"
    [ -n "$gpu_line" ] && echo "       ($gpu_line)"
    grep -m1 'Time: ' "$work/$chain.$name.log" | sed 's/^.*Time: /       time split: /'
  done
done
frames=$(grep -m1 -o 'over [0-9]* frames' "$work/delta.cpu.log" | awk '{print $2}')
echo "gfeat-bench: $copies copies, $frames frames aligned per run, $ncpu CPUs"
[ $fails -eq 0 ] || { echo "gfeat-bench: $fails runs failed or differ"; exit 1; }
