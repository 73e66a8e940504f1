#!/bin/bash
# The statistics accumulator's two kernels under Nsight Compute: 60 copies
# of the tri2 fixture (~2.4 h) through gmm-acc-stats-ali on the job's own
# context, the 5th and 6th launches of gacc_* (a full batch each): duration,
# occupancy, warp stalls. The cells kernel's length is one thread's chain
# over the most frequent pdf's frames (docs/journal/acc.md).
# Here:  make -j2 all && dev/device/onepass-regress.sh pack
# There: carry [".carry"], command "bash dev/device/acc-cells-ncu.sh"
# Writes $OUT/ncu.txt; prints each kernel's duration.
set -u
W=/tmp/acc-ncu; mkdir -p "$W" && tar -C "$W" -xJf .carry/onepass.tar.xz || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "SKIP: no ncu on this host"; exit 0; }
R=$W/tools/replicate-archive
$R --print-args=false --type=matrix --copies=60 ark:tests/data/feats/lda.ark "ark:$W/lda.ark" 2>/dev/null &&
  $R --print-args=false --type=ali --copies=60 ark:tests/data/kaldi/tri2/ali.ark "ark:$W/ali.ark" 2>/dev/null || exit 1
KALDI_GPU_SERVICE=no timeout 200 "$NCU" --clock-control none -k regex:gacc_ --launch-skip 4 --launch-count 2 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats "$W/new/gmm-acc-stats-ali" tests/data/models/tri2/final.mdl \
  "ark:$W/lda.ark" "ark:$W/ali.ark" "$W/o.acc" >"${OUT:-/tmp}/ncu.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  gacc_|Duration|SM Active Cycles|Elapsed Cycles" "${OUT:-/tmp}/ncu.txt" | sed 's/(const.*) (/(/'
