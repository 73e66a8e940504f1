#!/bin/bash
# The feature cache on a GPU host (one device call, about 5 minutes; no GPU
# used):
#   1. tests/cli/featcache.sh with the rounding profile our programs pick
#      on that CPU (SkylakeX where the host has AVX-512);
#   2. dev/bench/featcache-bench.sh on data/train_x4 split 16, the 16 jobs
#      of gmm-acc-stats-ali (--use-gpu=no) at once per iteration, 35
#      iterations per chain (deltas, LDA, LDA+fMLLR): uncached, the first
#      (miss) and the later (hit) iterations' wall time (deltas is not
#      cached: its three rows are the same computation, the control).
# Needs the programs built (make all; or .carry/gmmbin-gpu as gpu-session.sh
# carries them), the corpus and Kaldi unpacked by `dev/device/recipe-device.sh
# prepare` (or RECIPE_DIR and KALDI_BUNDLE set). Writes $OUT/featcache.log and
# $OUT/featcache-bench.md (default OUT=/tmp/out). Usage:
#   dev/device/featcache-device.sh [RUNS]
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bin=$top/gmmbin-gpu
[ -d .carry/gmmbin-gpu ] && [ ! -x "$bin/gmm-acc-stats-ali" ] && bin=$top/.carry/gmmbin-gpu
base=${RECIPE_DEVICE_BASE:-/tmp/recipe-device}  # recipe-device.sh's folder on the device host
w=$base/work
rec=${RECIPE_DIR:-$w/synth-s5}
export KALDI_BUNDLE=${KALDI_BUNDLE:-$w/kaldi/kb}
exec > >(tee "$OUT/featcache.log") 2>&1
[ -x "$bin/gmm-acc-stats-ali" ] || { echo "no $bin/gmm-acc-stats-ali: build first"; exit 1; }
[ -d "$rec/data" ] && [ -x "$KALDI_BUNDLE/bin/gmm-init-mono" ] ||
  { echo "no corpus ($rec) or bundle ($KALDI_BUNDLE): dev/device/recipe-device.sh prepare"; exit 1; }
echo "== host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== 1. tests/cli/featcache.sh"
BIN=$bin TOP=$top TOOLS=$top/build/tools bash tests/cli/featcache.sh; t=$?
echo "== 2. dev/bench/featcache-bench.sh, train_x4, 16 jobs at once"
OUT=$OUT/bench TRAIN=train_x4 BIN=$bin dev/bench/featcache-bench.sh "$rec" 16 1-16 "${1:-35}"; b=$?
cp "$OUT/bench/featcache-bench.md" "$OUT/" 2>/dev/null
exit $((t | b))
