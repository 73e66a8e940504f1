#!/bin/bash
# Several GPUs in one machine (issue 10), for a multi-GPU device call:
#   1. N concurrent gmm-align-compiled jobs through the GPU service: how many
#      ran on each device, outputs identical to the CPU path;
#   2. a job on its own context (KALDI_GPU_SERVICE=no) picks a device by free
#      memory, as Kaldi's programs do;
#   3. CUDA_VISIBLE_DEVICES masking: a service per mask, same outputs;
#   4. one process split over all GPUs (--num-gpus=K): same output, in order;
#   5. scaling: one process on replicated data with --num-gpus=1..K.
# Usage: dev/device/multigpu-check.sh [JOBS] (default 16). Env: COPIES (bench
# data copies for step 5, default 1275 = 50 h), BIN, TOOLS.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$top/gmmbin-gpu}; tools=${TOOLS:-$top/${BUILD:-build}/tools}
jobs=${1:-16}; copies=${COPIES:-1275}
fix=$top/tests/data
work=$(mktemp -d /tmp/multigpu.XXXXXX); chmod 700 "$work"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "multigpu-check: $ngpu GPU(s), $(nproc) cores, $jobs jobs ($(date -u +%F))"
opts=(--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40)
align() {  # out log [env...] -- [options...]
  local out=$1 log=$2; shift 2; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" "$bin/gmm-align-compiled" "${opts[@]}" "$@" "$fix/models/tri2/final.mdl" \
    "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$fix/feats/lda.ark" "ark:$out" 2>"$log"
}
same() { cmp -s "$1" "$2" && echo identical || echo DIFFERENT; }

align "$work/cpu.ali" "$work/cpu.log" KALDI_GPU_SERVICE=no -- --use-gpu=no

echo "== 1. $jobs jobs at once through the service"
export KALDI_GPU_SERVICE_DIR=$work/svc-all
for i in $(seq 1 "$jobs"); do align "$work/j$i.ali" "$work/j$i.log" X=1 -- --use-gpu=yes & done; wait
grep -h -o 'device [0-9]* of [0-9]*\|Using GPU: [^(]*(through the GPU service)' "$work"/j*.log | sort | uniq -c
bad=0; for i in $(seq 1 "$jobs"); do cmp -s "$work/j$i.ali" "$work/cpu.ali" || bad=$((bad + 1)); done
echo "outputs different from the CPU path: $bad of $jobs"

echo "== 2. own context, device chosen by free memory"
align "$work/own.ali" "$work/own.log" KALDI_GPU_SERVICE=no -- --use-gpu=yes
grep -h -E 'Selecting from|GPU [0-9]+:|Using GPU' "$work/own.log" | sed 's/^[^)]*) //'
echo "output vs CPU: $(same "$work/own.ali" "$work/cpu.ali")"

echo "== 3. CUDA_VISIBLE_DEVICES masks"
for mask in $(seq 0 $((ngpu - 1))); do
  align "$work/m$mask.ali" "$work/m$mask.log" CUDA_VISIBLE_DEVICES=$mask -- --use-gpu=yes
  echo "CUDA_VISIBLE_DEVICES=$mask: $(grep -h -o 'Using GPU: .*' "$work/m$mask.log" | head -n 1); vs CPU: $(same "$work/m$mask.ali" "$work/cpu.ali")"
done

echo "== 4. one process over all GPUs (--num-gpus=$ngpu)"
align "$work/split.ali" "$work/split.log" X=1 -- --use-gpu=yes --num-gpus="$ngpu" --batch-size=8
echo "output vs CPU: $(same "$work/split.ali" "$work/cpu.ali")"

echo "== 5. scaling on $copies copies of the tri2 fixture"
[ -x "$tools/replicate-archive" ] || { echo "no $tools/replicate-archive"; exit 1; }
"$tools/replicate-archive" --print-args=false --type=matrix --copies="$copies" \
  "ark:$fix/feats/lda.ark" "ark:$work/lda.ark" 2>/dev/null
"$tools/replicate-archive" --print-args=false --type=fst --copies="$copies" \
  "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$work/tri2.fsts" 2>/dev/null
frames=$(( copies * $(sed -n 's/.*over \([0-9]*\) frames\..*/\1/p' "$fix/kaldi/tri2/align.log") ))
for k in $(seq 1 "$ngpu"); do
  for rep in 1 2; do
    t0=$EPOCHREALTIME
    "$bin/gmm-align-compiled" "${opts[@]}" --use-gpu=yes --num-gpus="$k" "$fix/models/tri2/final.mdl" \
      "ark:$work/tri2.fsts" "ark,s,cs:$work/lda.ark" "ark:$work/s$k.ali" 2>"$work/s$k.log"
    t1=$EPOCHREALTIME
    awk -v k="$k" -v a="$t0" -v b="$t1" -v f="$frames" \
      'BEGIN { printf "--num-gpus=%d: %.2f s, %.0fx real time (%.1f h)\n", k, b - a, f / 100 / (b - a), f / 360000 }'
  done
  [ "$k" -gt 1 ] && echo "  output vs --num-gpus=1: $(same "$work/s$k.ali" "$work/s1.ali")"
done
rm -rf "$work"
