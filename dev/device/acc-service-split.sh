#!/bin/bash
# acc-service-split: where a gmm-acc-stats-ali job's time goes when 16 of
# them share the warm GPU service (issue 26, item 1: train_deltas), before
# and after the service kept its accumulators between connections. One
# device call; logs under $OUT.
#
#   here:  make -j2 all && dev/device/device-pack.sh
#          the build before (optional): its gmm-acc-stats-ali and
#          kaldi-gpu-service (stripped) into .carry/old-gmmbin/
#   there: carry [".carry"], dev/device/acc-service-split.sh
#
# Per build (old if carried, then new): dev/bench/acc-service-bench.sh 1 16
# (tri1 fixture x41 = 580k frames a job, ACC_BENCH_REPS rounds, default 3)
# with KALDI_GPU_SERVICE_VERBOSE=2: the jobs' wall (min / median / max), the
# round's wall, the service's per-connection set-up / accumulating /
# connected and (new build) its split: host sort, staging, waiting for the
# device, the per-frame likelihoods, fetching the statistics. Every output
# is checked against the CPU path's, byte for byte.
#
# ACC_SPLIT_MODELS (default "1 2"): with 2, the same with the model changing
# every round (acc-service-bench's ACC_BENCH_MODELS=2, as train_deltas'
# iterations): logs bench-V-models2.log, service-V-models2.log. Expected
# there: the old build's "new accumulator" every round (pooled per model),
# the new one's "pooled accumulator, rebound to a new model" from the
# second round on, its staging and accumulating near the same-model
# rounds' (~0.04 s and ~0.08 s a job on the H200), not ~0.3 and ~0.5 s.
#
# Expected: the new build's set-up ~0.000 s ("pooled accumulator") from the
# second job of a round on and no "freeing" after a connection; round wall a
# few tens of ms below the old one's; the split says which part of the
# ~0.3 s in the accumulator is the host (sort, staging: copies into pinned
# memory) and which the device. Exit 1 if an output differs.
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
if [ -d .carry/gmmbin-gpu ]; then
  export LD_LIBRARY_PATH="$top/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  cp .carry/gmmbin-gpu/* gmmbin-gpu/
  export TOOLS=$top/.carry/build/tools
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ date -u; nvidia-smi -L; nproc; } 2>&1 | tee "$OUT/env.txt"
rc=0
variants=new
[ -x .carry/old-gmmbin/gmm-acc-stats-ali ] && [ -x .carry/old-gmmbin/kaldi-gpu-service ] &&
  variants="old new"
for m in ${ACC_SPLIT_MODELS:-1 2}; do
  sfx=""
  [ "$m" = 1 ] || sfx=-models$m
  for v in $variants; do
    bin=$top/gmmbin-gpu
    [ $v = old ] && bin=$top/.carry/old-gmmbin
    echo "=== $v, $m model(s) ($bin, $(date -u +%T)) ==="
    ACC_BENCH_MODELS=$m EST=$top/gmmbin-gpu/gmm-est BIN=$bin dev/bench/acc-service-bench.sh 1 16 2>&1 |
      tee "$OUT/bench-$v$sfx.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    cp bench-data/acc/out/service.log "$OUT/service-$v$sfx.log" 2>/dev/null
    grep -h "Time:\\|accumulator" bench-data/acc/out/job.16.*.log >"$OUT/jobs-$v$sfx.txt" 2>/dev/null
  done
done
exit $rc
