#!/bin/bash
# One process over ~97.5 h (the tri2 fixture replicated) through the GPU
# service with --num-gpus=1 and 2: gmm-align-acc-compiled and
# gmm-align-compiled, two runs each, outputs compared with --num-gpus=1's.
# Runs from dev/device/device-pack.sh's .carry with tests/data in the tree:
#   dev/device/num-gpus-scaling.sh        (env COPIES, default 2480 = 97.5 h)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$top/.carry/gmmbin-gpu tools=$top/.carry/build/tools fix=$top/tests/data
export LD_LIBRARY_PATH="$top/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
copies=${COPIES:-2480}
w=$(mktemp -d /tmp/numgpus.XXXXXX)
echo "num-gpus-scaling: $(nvidia-smi -L | wc -l) GPU(s): $(nvidia-smi -L | head -n 1 | cut -d'(' -f1), $(nproc) cores"
"$tools/replicate-archive" --print-args=false --type=matrix --copies="$copies" "ark:$fix/feats/lda.ark" "ark:$w/lda.ark" 2>/dev/null
"$tools/replicate-archive" --print-args=false --type=fst --copies="$copies" "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$w/g.fsts" 2>/dev/null
cat "$w/lda.ark" "$w/g.fsts" >/dev/null
opts=(--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 --use-gpu=yes)
mdl=$fix/models/tri2/final.mdl
"$bin/gmm-align-compiled" "${opts[@]}" "$mdl" "ark:$w/g.fsts" "ark,s,cs:$fix/feats/lda.ark" "ark:/dev/null" 2>/dev/null  # starts the service
for prog in gmm-align-acc-compiled gmm-align-compiled; do
  for k in 1 2; do
    for rep in 1 2; do
      out=("ark:$w/$prog.$k.ali"); [ $prog = gmm-align-acc-compiled ] && out+=("$w/$prog.$k.acc")
      t0=$EPOCHREALTIME
      KALDI_GPU_SERVICE=yes "$bin/$prog" "${opts[@]}" --num-gpus=$k "$mdl" "ark:$w/g.fsts" "ark,s,cs:$w/lda.ark" "${out[@]}" 2>"$w/$prog.$k.log"
      rc=$?
      awk -v p="$prog" -v k="$k" -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" 'BEGIN { printf "%s --num-gpus=%d: %.2f s (exit %d)\n", p, k, b - a, rc }'
    done
    grep -h 'connections\|Time:' "$w/$prog.$k.log" | tail -n 2 | cut -c1-300
  done
  cmp -s "$w/$prog.1.ali" "$w/$prog.2.ali" && echo "  alignments: identical" || echo "  alignments: DIFFERENT"
  [ $prog = gmm-align-acc-compiled ] && { cmp -s "$w/$prog.1.acc" "$w/$prog.2.acc" && echo "  statistics: identical" || echo "  statistics: DIFFERENT"; }
done
rm -rf "$w"
