#!/bin/bash
# gmm-acc-mllt on a GPU host (one device call, a few minutes; no GPU used):
#   1. tests/cli/mllt.sh with the bundle: ours against Kaldi's gmm-acc-mllt
#      run there, with the rounding profile our program picks on that CPU
#      (SkylakeX where the host has AVX-512: not checked on the helpers);
#   2. dev/bench/mllt-bench.sh with BENCH_MLLT_JOBS jobs at once (default 16,
#      the stage's --nj) of 1500 utterances each: the MLLT phase of
#      train_lda_mllt.sh, Kaldi's pipeline against ours.
# Needs the programs built (make all; or .carry/gmmbin-gpu as gpu-session.sh
# carries them), the corpus and Kaldi unpacked by `dev/device/recipe-device.sh
# prepare` (its WORK: synth-s5 and kaldi/kb under RECIPE_DEVICE_BASE's work folder,
# as trainer-device.sh finds them) or RECIPE_DIR and
# KALDI_BUNDLE set. Writes $OUT/mllt.log (default OUT=/tmp/out). Usage:
#   dev/device/mllt-device.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bin=$top/gmmbin-gpu
[ -d .carry/gmmbin-gpu ] && [ ! -x "$bin/gmm-acc-mllt" ] && bin=$top/.carry/gmmbin-gpu
base=${RECIPE_DEVICE_BASE:-/tmp/recipe-device}  # recipe-device.sh's folder on the device host
w=$base/work
rec=${RECIPE_DIR:-$w/synth-s5}
export KALDI_BUNDLE=${KALDI_BUNDLE:-$w/kaldi/kb}
exec > >(tee "$OUT/mllt.log") 2>&1
[ -x "$bin/gmm-acc-mllt" ] || { echo "no $bin/gmm-acc-mllt: build first"; exit 1; }
[ -d "$rec/data" ] && [ -x "$KALDI_BUNDLE/bin/gmm-acc-mllt" ] ||
  { echo "no corpus ($rec) or bundle ($KALDI_BUNDLE): dev/device/recipe-device.sh prepare"; exit 1; }
echo "== host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== 1. tests/cli/mllt.sh with the bundle"
BIN=$bin TOP=$top bash tests/cli/mllt.sh; t=$?
echo "== 2. dev/bench/mllt-bench.sh, ${BENCH_MLLT_JOBS:-16} jobs"
BIN=$bin BENCH_MLLT_JOBS=${BENCH_MLLT_JOBS:-16} BENCH_MLLT_DIR=/tmp/mllt-bench \
  dev/bench/mllt-bench.sh "$rec"; b=$?
exit $((t | b))
