#!/bin/bash
# The GPU service's failures on a GPU host (step "service" of
# dev/device/gpu-session.sh; usage: dev/device/service-faults.sh BUILD_DIR).
#  1. tests/cli/service-faults.sh and service.sh: the service in its CPU test
#     mode, the jobs' own backend now a GPU context of their own (the
#     accumulator's fallback loads the service's statistics onto it).
#  2. The identity's cost: kaldi-gpu-service --print-identity (cuInit and
#     cuDeviceGetUuid through the driver API, no context): cold (the
#     directory's cache empty), cached, and 16 processes at once asking the
#     driver; per visible GPU (CUDA_VISIBLE_DEVICES=0, 1: other UUIDs).
#  3. A real broken context: the test build's KALDI_GPU_TEST_SERVICE_BREAK on
#     a GPU launches a trapping kernel in the service (a sticky error); the
#     job finishes on its own context with the CPU path's alignments, the
#     service finds the broken context and exits, the next job gets a fresh
#     service. The same for the accumulator.
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
build=${1:-build}
export TEST_BIN=$top/$build/test-bin TOP=$top TOOLS=$top/$build/tools
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

echo "--- 1. fault tests (service in CPU test mode, own-context fallback)"
bash tests/cli/service-faults.sh || fail "service-faults.sh"
bash tests/cli/service.sh || fail "service.sh"

echo "--- 2. identity: cuInit + UUIDs, no context"
d=$(mktemp -d /tmp/svc-id.XXXXXX)
chmod 700 "$d"
export KALDI_GPU_SERVICE_DIR=$d/run
svc=$top/gmmbin-gpu/kaldi-gpu-service
"$svc" --print-identity 2>/dev/null | sed 's/^/cold:   /'
"$svc" --print-identity 2>/dev/null | sed 's/^/cached: /'
for v in 0 1; do CUDA_VISIBLE_DEVICES=$v "$svc" --print-identity 2>/dev/null | sed "s/^/CUDA_VISIBLE_DEVICES=$v: /"; done
t0=$(date +%s.%N)
for i in $(seq 16); do "$svc" --print-identity >"$d/id$i.txt" 2>/dev/null & done
wait
t1=$(date +%s.%N)
echo "16 processes at once: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') s wall;" \
  "per process asking the driver (s): $(grep -h 'asking the driver' "$d"/id*.txt |
  sed 's/.*(the driver, \([0-9.]*\) s).*/\1/' | sort -n | tr '\n' ' ')"
rm -rf "$d"

echo "--- 3. a real broken context"
cd tests/data || exit 1
opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
w=$(mktemp -d /tmp/svc-break.XXXXXX)
chmod 700 "$w"
export KALDI_GPU_SERVICE_DIR=$w/run KALDI_GPU_SERVICE_IDLE=5 KALDI_GPU_SERVICE_TIMEOUT=10
KALDI_GPU_SERVICE=no "$TEST_BIN/gmm-align-compiled" $opts --use-gpu=no models/tri1/final.mdl \
  "ark:gunzip -c graphs/tri1.fsts.gz|" ark:noisy/delta.ark ark:"$w/cpu.ali" 2>/dev/null
KALDI_GPU_TEST_SERVICE_BREAK=2 "$TEST_BIN/gmm-align-compiled" $opts --batch-size=4 \
  models/tri1/final.mdl "ark:gunzip -c graphs/tri1.fsts.gz|" ark:noisy/delta.ark \
  ark:"$w/broken.ali" 2>"$w/broken.log"
echo "job: exit $?; $(grep -E 'Using GPU|not usable' "$w/broken.log" | sed 's/^LOG ([^)]*) //' | tr '\n' ' ')"
cmp -s "$w/broken.ali" "$w/cpu.ali" && echo "alignments = the CPU path's" || fail "alignments differ"
for _ in $(seq 100); do pgrep -f -- "--socket=$KALDI_GPU_SERVICE_DIR/" >/dev/null || break; sleep 0.1; done
pgrep -f -- "--socket=$KALDI_GPU_SERVICE_DIR/" >/dev/null && fail "the service did not exit"
grep -h 'CUDA error\|exiting' "$KALDI_GPU_SERVICE_DIR"/service-*.log | sed 's/^/service: /'
grep -q 'exiting, so that the next job starts a fresh service' "$KALDI_GPU_SERVICE_DIR"/service-*.log ||
  fail "no restart after the broken context"
"$TEST_BIN/gmm-align-compiled" $opts models/tri1/final.mdl "ark:gunzip -c graphs/tri1.fsts.gz|" \
  ark:noisy/delta.ark ark:"$w/fresh.ali" 2>"$w/fresh.log"
grep -q 'through the GPU service' "$w/fresh.log" && echo "next job: a fresh service" ||
  fail "next job: $(grep -E 'Using GPU|not usable' "$w/fresh.log")"
cmp -s "$w/fresh.ali" "$w/cpu.ali" || fail "fresh service: alignments differ"
for p in $(pgrep -f -- "--socket=$KALDI_GPU_SERVICE_DIR/"); do kill "$p"; done
sleep 1
KALDI_GPU_SERVICE=no "$TEST_BIN/gmm-align-acc-compiled" $opts --use-gpu=no models/mono/final.mdl \
  "ark:gunzip -c graphs/mono.fsts.gz|" ark:feats/delta.ark ark:"$w/cpu1.ali" "$w/cpu.acc" 2>/dev/null
KALDI_GPU_TEST_SERVICE_BREAK=3 "$TEST_BIN/gmm-align-acc-compiled" $opts --batch-size=4 \
  models/mono/final.mdl "ark:gunzip -c graphs/mono.fsts.gz|" ark:feats/delta.ark \
  ark:"$w/one.ali" "$w/one.acc" 2>"$w/one.log"
echo "one-pass job: exit $?; $(grep -E 'not usable|lost' "$w/one.log" | sed 's/^LOG ([^)]*) //' | tr '\n' ' ')"
# the device's statistics: the CPU's up to the order of its double atomics
cmp -s "$w/one.ali" "$w/cpu1.ali" && "$TOOLS/acc-compare" --tol=1e-9 "$w/one.acc" "$w/cpu.acc" &&
  echo "one-pass outputs = the CPU path's" || fail "one-pass outputs differ"
for p in $(pgrep -f -- "--socket=$KALDI_GPU_SERVICE_DIR/"); do kill "$p"; done
rm -rf "$w"
[ $fails = 0 ] && echo "service-faults (device): all passed" || echo "service-faults (device): $fails failure(s)"
exit $((fails > 0))
