#!/bin/bash
# The GPU service's accumulators pooled per device and rebound to each
# connection's model (gpu-service/svc-acc.c, gacc_rebind), as a training
# script needs: a new model every iteration, its Gaussian count changed by
# mixing up. On the service's CPU test backend and, where `make emu` built
# them, on tests/emu's emulated device. Models of one feature dimension:
# A mono (975 Gaussians), B A mixed up to 1500, C A mixed up to 623 (fewer
# than A), D tri1 (more pdfs). Checked: jobs of A, B, C, A, D, A in turn,
# then A again, then jobs of several models at once: every output the CPU
# path's (--use-gpu=no), byte for byte; one accumulator made for the jobs
# in turn, the others rebound ("pooled accumulator, rebound to a new
# model") or, for the same model, "pooled accumulator"; never more
# accumulators than jobs ran at once; after the service's idle exit every
# accumulator freed (and on the emulated device no device memory held);
# on the emulated device, with device memory short, the idle accumulators
# freed before a batch.
# Env: TEST_BIN, TOP, EMU_BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
export KALDI_GPU_BLAS_PROFILE=skx
: "${TEST_BIN:?}" "${TOP:?}"
EMU_BIN=${EMU_BIN:-$TOP/build/emu/bin}
BIN=$(cd "$TEST_BIN" && pwd) || exit 1
for p in gmm-acc-stats-ali gmm-est kaldi-gpu-service; do
  [ -x "$BIN/$p" ] || { echo "SKIP: $BIN/$p not built"; exit 77; }
done
. "$TOP/tests/cli/lib/emu-service.sh"
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/service-accpool.XXXXXX)
emu_service_env 1
trap 'stop_service "$tmp"/svc.*; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
declare -A MDL=([A]=models/mono/final.mdl [B]=$tmp/B.mdl [C]=$tmp/C.mdl [D]=models/tri1/final.mdl)
declare -A ALI=([A]=kaldi/mono/ali.ark [B]=kaldi/mono/ali.ark [C]=kaldi/mono/ali.ark [D]=kaldi/tri1/ali.ark)
acc() {  # NAME MODEL-LETTER [BIN]
  "${3:-$bin}/gmm-acc-stats-ali" "${MDL[$2]}" ark:feats/delta.ark "ark:${ALI[$2]}" \
    "$tmp/$1.acc" 2>"$tmp/$1.log"
  echo $? >"$tmp/$1.rc"
}
right() {  # NAME MODEL-LETTER: through the service, exit 0, the CPU path's bytes
  grep -q 'through the GPU service' "$tmp/$1.log" || fail "$mode $1: the service was not used: $(grep -m1 -i 'accumulat' "$tmp/$1.log")"
  [ "$(cat "$tmp/$1.rc")" = 0 ] || fail "$mode $1: exit $(cat "$tmp/$1.rc")"
  cmp -s "$tmp/$1.acc" "$tmp/ref.$2.acc" || fail "$mode $1: statistics differ from the CPU path's ($2)"
}
log() { cat "$KALDI_GPU_SERVICE_DIR"/service-*.log; }
count() { log | grep -c -- "$1"; }
NEW='setting up (new accumulator)'
REBOUND='setting up (pooled accumulator, rebound to a new model)'
SAME='setting up (pooled accumulator)'
most_idle() { log | sed -n 's/.*pooling the accumulator (\([0-9]*\) idle on device.*/\1/p' | sort -n | tail -1; }

run_mode() {
  # 1. In turn: one accumulator, rebound to each new model; then the same
  #    model again: pooled without a rebinding.
  export KALDI_GPU_SERVICE_DIR=$tmp/svc.$mode.1
  local i=0 m
  for m in A B C A D A; do
    i=$((i + 1))
    acc "$mode.turn$i" $m
    right "$mode.turn$i" $m
  done
  [ "$(count "$NEW")" = 1 ] || fail "$mode: jobs in turn made $(count "$NEW") accumulators, not 1"
  [ "$(count "$REBOUND")" = 5 ] || fail "$mode: $(count "$REBOUND") of 5 jobs rebound: $(log | grep 'setting up')"
  acc "$mode.again" A
  right "$mode.again" A
  [ "$(count "$SAME")" = 1 ] || fail "$mode: the same model again was not on the pooled accumulator as it was"
  [ "$(most_idle)" = 1 ] || fail "$mode: jobs in turn left $(most_idle) idle accumulators"
  # 2. Jobs of several models at once, twice: never more accumulators
  #    than jobs at once (6), the second round on the first one's.
  local r j pooled
  for r in 1 2; do
    pooled=$(( $(count "$REBOUND") + $(count "$SAME") ))
    for j in 1 2 3 4 5 6; do
      m=$(echo ABDBAC | cut -c$(( (j + r) % 6 + 1 )))
      acc "$mode.par$r.$j" $m & echo $m >"$tmp/$mode.par$r.$j.m"
    done
    wait
    for j in 1 2 3 4 5 6; do right "$mode.par$r.$j" "$(cat "$tmp/$mode.par$r.$j.m")"; done
    sleep 0.3  # the last connections' accumulators back in the pool
  done
  [ "$(count "$NEW")" -le 6 ] || fail "$mode: $(count "$NEW") accumulators for at most 6 jobs at once"
  [ "$(most_idle)" -le "$(count "$NEW")" ] || fail "$mode: $(most_idle) idle of $(count "$NEW") made"
  [ "$(( $(count "$REBOUND") + $(count "$SAME") - pooled ))" -ge 4 ] ||
    fail "$mode: the second round did not take the first one's accumulators: $(log | grep 'setting up (')"
  stop_service
  # 3. The service's idle exit frees every accumulator (and their device
  #    memory: the emulated device's report).
  export KALDI_GPU_SERVICE_DIR=$tmp/svc.$mode.3
  KALDI_GPU_TEST_MEMORY_REPORT=1 KALDI_GPU_SERVICE_IDLE=2 acc "$mode.idle1" B &
  KALDI_GPU_TEST_MEMORY_REPORT=1 KALDI_GPU_SERVICE_IDLE=2 acc "$mode.idle2" D &
  wait
  KALDI_GPU_TEST_MEMORY_REPORT=1 KALDI_GPU_SERVICE_IDLE=2 acc "$mode.idle3" C
  right "$mode.idle1" B
  right "$mode.idle2" D
  right "$mode.idle3" C
  for _ in $(seq 100); do [ "$(count 'Idle for 2 s: exiting')" -ge 1 ] && break; sleep 0.1; done
  sleep 0.3
  local made freed
  made=$(count "$NEW")
  freed=$(log | sed -n 's/.* \([0-9]*\) idle accumulator(s) freed.*/\1/p' | awk '{s += $1} END {print s + 0}')
  [ "$made" -ge 1 ] && [ "$freed" = "$made" ] || fail "$mode: $made accumulators made, $freed freed at the idle exit"
  [ $mode = emu ] || return
  log | grep '^kio-gpu:' | tail -1 | grep -q ' 0 bytes in 0 blocks at exit$' ||
    fail "$mode: device memory held when the service ended: $(log | grep '^kio-gpu:' | tail -1)"
  # 4. Device memory short (a 64 MiB service, six tri1 accumulators of
  #    ~14 MiB idle: slow batches keep the six jobs connected at once): the
  #    next job's batch frees the idle ones first; outputs still right.
  export KALDI_GPU_SERVICE_DIR=$tmp/svc.$mode.4
  for j in 1 2 3 4 5 6; do
    KALDI_GPU_SERVICE_MEMORY=64M KALDI_GPU_TEST_SERVICE_SLOW=1 acc "$mode.short$j" D &
  done
  wait
  sleep 0.3
  acc "$mode.short7" D
  for j in 1 2 3 4 5 6 7; do right "$mode.short$j" D; done
  [ "$(count "$NEW")" = 6 ] || fail "$mode: $(count "$NEW") accumulators for six slow jobs at once"
  log | grep -q 'memory short for a batch; [1-9][0-9]* idle accumulator(s) freed' ||
    fail "$mode: the idle accumulators were not freed when memory was short: $(log | grep -c 'freed')"
  [ "$(log | sed -n 's/.*pooling the accumulator (\([0-9]*\) idle.*/\1/p' | tail -1)" -lt 6 ] ||
    fail "$mode: the pool did not shrink when memory was short"
  stop_service
}

"$BIN/gmm-est" --min-count=2 --mix-up=1500 models/mono/final.mdl kaldi/mono/final.acc "$tmp/B.mdl" 2>/dev/null &&
  "$BIN/gmm-est" --mix-up=600 models/mono/final.mdl kaldi/mono/final.acc "$tmp/C.mdl" 2>/dev/null ||
  { echo "FAIL: the mixed-up models"; exit 1; }
cmp -s "$tmp/B.mdl" "$tmp/C.mdl" && { echo "FAIL: the mixed-up models are the same"; exit 1; }
for m in A B C D; do
  "$BIN/gmm-acc-stats-ali" --use-gpu=no "${MDL[$m]}" ark:feats/delta.ark \
    "ark:${ALI[$m]}" "$tmp/ref.$m.acc" 2>/dev/null || { echo "FAIL: the CPU path's statistics of $m"; exit 1; }
done
emu_both_backends service-accpool 'stop_service "$tmp"/svc.*'
[ $fails = 0 ] && echo "service-accpool: OK" || exit 1
