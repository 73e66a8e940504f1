#!/bin/bash
# alignpool-check: the GPU service's aligners pooled per device and rebound
# to each connection's model (gpu-service/svc-align.c, galign_rebind) on a
# real GPU. One device call; logs under $OUT.
#
#   here:  make -j2 all && dev/device/device-pack.sh
#   there: carry [".carry"], dev/device/alignpool-check.sh
#
# Part A: tests/gpu/check_gpu_rebind (every case: rebound aligners align
# as fresh ones, bit for bit, on the device and the CPU), then its quick
# case under compute-sanitizer memcheck.
# Part B: gmm-align-compiled jobs in turn through one service (test build:
# KALDI_GPU_TEST_NO_SMALL_JOB=1 sends the fixtures' small jobs there), the
# models mono and tri1 alternating, REPS rounds, the second mono with other
# beams; every alignment compared with the CPU path's (--use-gpu=no); the
# service's "setting up (...)" seconds per kind of aligner (new, pooled,
# rebound) printed.
#
# Expected: A passes, memcheck 0 errors; B "same" for every job, one "new
# aligner", the others "rebound" or "pooled", their set-up seconds below
# the new one's. Exit 1 if a check fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
if [ -d .carry/gmmbin-gpu ]; then
  export LD_LIBRARY_PATH="$top/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  export BUILD=${BUILD:-.carry/build}
fi
BUILD=${BUILD:-build}
tbin=$top/$BUILD/test-bin
OUT=${OUT:-/tmp/out}
REPS=${REPS:-3}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/alignpool.XXXXXX)
chmod 700 "$work"
svcdir=$work/svc
trap 'for p in $(sed -n "s/.*Serving jobs on .* (pid \([0-9]*\)).*/\1/p" "$svcdir"/service-*.log 2>/dev/null); do kill "$p"; done; rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*" | tee -a "$OUT/alignpool.txt"; fails=$((fails + 1)); }
log() { echo "$*" | tee -a "$OUT/alignpool.txt"; }
{ date -u; nvidia-smi -L; } 2>&1 | tee "$OUT/env.txt"
cd tests/data || exit 1
export KALDI_GPU_BLAS_PROFILE=skx

# ---- Part A ----
"$top/$BUILD/tests/gpu/check_gpu_rebind" >"$OUT/check_gpu_rebind.log" 2>&1 ||
  fail "check_gpu_rebind: $(grep -m3 'Checks\|:F:\|:E:' "$OUT/check_gpu_rebind.log")"
log "check_gpu_rebind: $(grep -m1 'Checks' "$OUT/check_gpu_rebind.log")"
CK_FORK=no CK_RUN_CASE=quick compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$top/$BUILD/tests/gpu/check_gpu_rebind" >"$OUT/sanitize-rebind.log" 2>&1 ||
  fail "check_gpu_rebind (quick) under compute-sanitizer: exit $?"
log "memcheck: $(grep -m1 'ERROR SUMMARY' "$OUT/sanitize-rebind.log")"

# ---- Part B ----
scales="--transition-scale=1.0 --self-loop-scale=0.1 --acoustic-scale=0.1"
align() {  # NAME MODEL BEAMS [OPTIONS...]
  local name=$1 m=$2 b=$3
  shift 3
  "$tbin/gmm-align-compiled" $scales $b "$@" "models/$m/final.mdl" \
    "ark:gunzip -c graphs/$m.fsts.gz|" ark:feats/delta.ark "ark:$work/$name.ali" 2>"$work/$name.log"
}
seq="mono:--beam=10_--retry-beam=40 tri1:--beam=10_--retry-beam=40 mono:--beam=6_--retry-beam=20"
for s in $seq; do
  m=${s%%:*} b=${s#*:}
  align "cpu.$m.$b" "$m" "${b//_/ }" --use-gpu=no || fail "CPU path $m $b"
done
export KALDI_GPU_SERVICE_DIR=$svcdir KALDI_GPU_SERVICE_VERBOSE=1 KALDI_GPU_TEST_NO_SMALL_JOB=1
for r in $(seq "$REPS"); do
  for s in $seq; do
    m=${s%%:*} b=${s#*:}
    align "gpu.$r.$m.$b" "$m" "${b//_/ }" --use-gpu=yes || fail "GPU $r $m $b: exit $?"
    grep -q 'through the GPU service' "$work/gpu.$r.$m.$b.log" || fail "GPU $r $m $b: not through the service"
    cmp -s "$work/gpu.$r.$m.$b.ali" "$work/cpu.$m.$b.ali" && log "same: $r $m $b" ||
      fail "GPU $r $m $b: alignments differ from the CPU path's"
  done
done
cat "$svcdir"/service-*.log >"$OUT/service.log"
for k in "new aligner" "pooled aligner" "pooled aligner, rebound to a new model"; do
  log "$k: $(sed -n "s/.* \([0-9.]*\) s setting up ($k).*/\1/p" "$OUT/service.log" | tr '\n' ' ')"
done
[ "$(grep -c 'setting up (new aligner)' "$OUT/service.log")" = 1 ] ||
  fail "not one new aligner: $(grep -c 'setting up (new aligner)' "$OUT/service.log")"
[ $fails = 0 ] && log "alignpool-check: OK" || exit 1
