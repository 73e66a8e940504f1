#!/bin/bash
# gmm-est-fmllr on a GPU host (one device call, a few minutes; no GPU used):
#   1. tests/cli/fmllr.sh with the bundle: ours against Kaldi's recorded
#      transforms per OpenBLAS core, and against Kaldi's gmm-est-fmllr run
#      there with the core that host's OpenBLAS picks (SkylakeX where the
#      host has AVX-512: not checked on the helpers);
#   2. dev/bench/fmllr-bench.sh with BENCH_FMLLR_JOBS jobs at once (default 16,
#      the stage's --nj) of 1500 utterances each: the fMLLR phase of
#      train_sat.sh, Kaldi's pipeline against ours.
# Needs the programs built (make all; or .carry/gmmbin-gpu as gpu-session.sh
# carries them), the corpus and Kaldi unpacked by `dev/device/recipe-device.sh
# prepare` (its WORK: synth-s5 and kaldi/kb under RECIPE_DEVICE_BASE's work folder,
# as trainer-device.sh finds them) or RECIPE_DIR and
# KALDI_BUNDLE set. Writes $OUT/fmllr.log (default OUT=/tmp/out). Usage:
#   dev/device/fmllr-device.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bin=$top/gmmbin-gpu
[ -d .carry/gmmbin-gpu ] && [ ! -x "$bin/gmm-est-fmllr" ] && bin=$top/.carry/gmmbin-gpu
base=${RECIPE_DEVICE_BASE:-/tmp/recipe-device}  # recipe-device.sh's folder on the device host
w=$base/work
rec=${RECIPE_DIR:-$w/synth-s5}
export KALDI_BUNDLE=${KALDI_BUNDLE:-$w/kaldi/kb}
exec > >(tee "$OUT/fmllr.log") 2>&1
[ -x "$bin/gmm-est-fmllr" ] || { echo "no $bin/gmm-est-fmllr: build first"; exit 1; }
[ -d "$rec/data" ] && [ -x "$KALDI_BUNDLE/bin/gmm-est-fmllr" ] ||
  { echo "no corpus ($rec) or bundle ($KALDI_BUNDLE): dev/device/recipe-device.sh prepare"; exit 1; }
echo "== host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== 1. tests/cli/fmllr.sh with the bundle"
BIN=$bin TOP=$top bash tests/cli/fmllr.sh; t=$?
echo "== 2. dev/bench/fmllr-bench.sh, ${BENCH_FMLLR_JOBS:-16} jobs"
BIN=$bin BENCH_FMLLR_JOBS=${BENCH_FMLLR_JOBS:-16} BENCH_FMLLR_DIR=/tmp/fmllr-bench \
  dev/bench/fmllr-bench.sh "$rec"; b=$?
exit $((t | b))
