#!/bin/bash
# gmm-acc-stats-ali through the GPU service: the accumulators the service
# keeps between connections (gpu-service/svc-acc.c). On the service's CPU
# test backend (KALDI_GPU_TEST_SERVICE_CPU=1) and, where `make emu` built
# them, on tests/emu's emulated device (the device accumulator reused:
# statistics zeroed on the device, buffers kept). Checked: a second job of
# the same model gets the first one's accumulator and Kaldi's statistics; a
# job killed in the middle of its batch leaves the service serving and the
# accumulator's next job right; another model gets its own; sixteen jobs at
# once twice: every output Kaldi's, the second round on pooled ones; the
# service's time split (KALDI_GPU_SERVICE_VERBOSE=2) is logged per
# connection. Env: TEST_BIN, TOP, TOOLS, EMU_BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
export KALDI_GPU_BLAS_PROFILE=skx
: "${TEST_BIN:?}" "${TOP:?}"
EMU_BIN=${EMU_BIN:-$TOP/build/emu/bin}
. "$TOP/tests/cli/lib/emu-service.sh"
BIN=$(cd "$TEST_BIN" && pwd) || exit 1
for p in gmm-acc-stats-ali kaldi-gpu-service; do
  [ -x "$BIN/$p" ] || { echo "SKIP: $BIN/$p not built"; exit 77; }
done
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/service-acc.XXXXXX)
emu_service_env 2
trap 'stop_service; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
acc() {  # NAME MODEL FEATS ALI
  "$bin/gmm-acc-stats-ali" "$2" "$3" "$4" "$tmp/$1.acc" 2>"$tmp/$1.log"
  echo $? >"$tmp/$1.rc"
}
tri2() { acc "$1" models/tri2/final.mdl ark:feats/lda.ark ark:kaldi/tri2/ali.ark; }
mono() { acc "$1" models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark; }
right() {  # NAME REF: through the service, exit 0, the reference's statistics
  grep -q 'through the GPU service' "$tmp/$1.log" || fail "$mode $1: the service was not used: $(grep -m1 -i 'accumulat' "$tmp/$1.log")"
  [ "$(cat "$tmp/$1.rc")" = 0 ] || fail "$mode $1: exit $(cat "$tmp/$1.rc")"
  cmp -s "$tmp/$1.acc" "$2" || fail "$mode $1: statistics differ from Kaldi's"
}
log() { cat "$KALDI_GPU_SERVICE_DIR"/service-*.log; }
count() { log | grep -c "$1"; }

run_mode() {
  export KALDI_GPU_SERVICE_DIR=$tmp/svc.$mode
  mono_ref=$tmp/mono.ref.acc
  "$BIN/gmm-acc-stats-ali" --use-gpu=no models/mono/final.mdl ark:feats/delta.ark \
    ark:kaldi/mono/ali.ark "$mono_ref" 2>/dev/null || fail "mono reference on the CPU"
  # 1. Two jobs in turn: the second on the first one's accumulator.
  tri2 "$mode.first"
  right "$mode.first" kaldi/tri2/final.acc
  tri2 "$mode.second"
  right "$mode.second" kaldi/tri2/final.acc
  [ "$(count 'setting up (new accumulator)')" = 1 ] || fail "$mode: not one new accumulator: $(log | grep 'acc connection')"
  [ "$(count 'setting up (pooled accumulator)')" = 1 ] || fail "$mode: the second job's accumulator was not the pooled one"
  [ "$(count 'acc connection: .* pooling the accumulator')" = 2 ] || fail "$mode: accumulators not kept"
  [ "$(count 'acc connection (device [0-9]*): 2 requests')" = 2 ] || fail "$mode: request counts: $(log | grep 'requests,')"
  [ $mode = cpu ] || log | grep -q "acc connection (device [0-9]*): pooled accumulator; 1 batches, [1-9][0-9]* frames; host sort" ||
    fail "$mode: no time split of the pooled connection: $(log | grep 'accumulator;')"
  log | grep -q 'acc connection (device [0-9]*): 2 requests (1 through shared memory)' ||
    fail "$mode: the features did not come through shared memory"
  # 1b. Features inline (KALDI_GPU_TEST_SERVICE_SHM=0) and every batch
  #     through shared memory, several batches a job (the fixture x15: 600
  #     utterances, two batches) with checkpoints between them (STATS
  #     requests: KALDI_GPU_TEST_ACC_KEEP_BYTES): the CPU path's statistics.
  local shm
  for shm in 0 1; do
    KALDI_GPU_TEST_SERVICE_SHM=$shm tri2 "$mode.shm$shm"
    right "$mode.shm$shm" kaldi/tri2/final.acc
    KALDI_GPU_TEST_SERVICE_SHM=$shm KALDI_GPU_TEST_ACC_KEEP_BYTES=1000000 \
      acc "$mode.big$shm" models/tri2/final.mdl "ark:$tmp/big.ark" "ark:$tmp/big.ali"
    right "$mode.big$shm" "$tmp/big.ref.acc"
  done
  log | grep -q 'acc connection (device [0-9]*): 2 requests (0 through shared memory)' ||
    fail "$mode: no request inline: $(log | grep -o '[0-9]* requests ([0-9]* through shared memory)' | sort | uniq -c)"
  log | grep -q 'acc connection (device [0-9]*): 4 requests (2 through shared memory)' ||
    fail "$mode: not two batches through shared memory: $(log | grep -o '[0-9]* requests ([0-9]* through shared memory)' | sort | uniq -c)"
  log | grep -q 'acc connection (device [0-9]*): 4 requests (0 through shared memory)' ||
    fail "$mode: not two batches inline: $(log | grep -o '[0-9]* requests ([0-9]* through shared memory)' | sort | uniq -c)"
  # 2. Another model: its own accumulator; then the first model's again.
  mono "$mode.mono"
  right "$mode.mono" "$mono_ref"
  [ "$(count 'setting up (new accumulator)')" = 2 ] || fail "$mode: another model did not get its own accumulator"
  # 3. A job killed while the service accumulates its batch: the service
  #    serves on; the next job (the killed one's accumulator, which had
  #    added part of a job) has Kaldi's statistics.
  local kept
  stop_service  # a service whose batches take a second more
  kept=$(count 'pooling the accumulator')
  KALDI_GPU_TEST_SERVICE_SLOW=1 tri2 "$mode.victim" & pv=$!
  sleep 0.6
  kill -9 $pv 2>/dev/null; wait $pv 2>/dev/null
  for _ in $(seq 50); do [ "$(count 'pooling the accumulator')" -gt "$kept" ] && break; sleep 0.1; done
  [ "$(count 'pooling the accumulator')" -gt "$kept" ] || fail "$mode: the killed job's connection did not end"
  kept=$(count 'setting up (pooled accumulator)')
  tri2 "$mode.after"
  right "$mode.after" kaldi/tri2/final.acc
  [ "$(count 'setting up (pooled accumulator)')" = $((kept + 1)) ] || fail "$mode: the job after a killed one was not on its accumulator"
  # 4. Sixteen jobs at once, twice: every output right; the second round
  #    takes the accumulators the first one left.
  local pooled
  stop_service
  for r in 1 2; do
    pooled=$(count 'setting up (pooled accumulator)')
    for j in $(seq 16); do tri2 "$mode.par$r.$j" & done
    wait
    for j in $(seq 16); do right "$mode.par$r.$j" kaldi/tri2/final.acc; done
    sleep 0.3  # the last connections' accumulators back in the pool
  done
  [ $(( $(count 'setting up (pooled accumulator)') - pooled )) -ge 12 ] ||
    fail "$mode: the second round did not reuse the first one's accumulators: $(log | grep -c 'pooled accumulator)') of $(log | grep -c 'acc connection (')"
  [ "$(pgrep -f -- "--socket=$KALDI_GPU_SERVICE_DIR/" | wc -l)" = 1 ] || fail "$mode: not exactly one service"
  stop_service
  [ $mode = emu ] || return
  # 5. The device memory of the kept accumulators (two models, jobs at once
  #    and in turn) is all given back when the service ends idle.
  KALDI_GPU_TEST_MEMORY_REPORT=1 KALDI_GPU_SERVICE_IDLE=2 tri2 "$mode.mem1" &
  KALDI_GPU_TEST_MEMORY_REPORT=1 KALDI_GPU_SERVICE_IDLE=2 tri2 "$mode.mem2" &
  wait
  KALDI_GPU_TEST_MEMORY_REPORT=1 KALDI_GPU_SERVICE_IDLE=2 mono "$mode.mem3"
  right "$mode.mem1" kaldi/tri2/final.acc
  right "$mode.mem3" "$mono_ref"
  for _ in $(seq 100); do [ "$(count 'Idle for 2 s: exiting')" -ge 1 ] && break; sleep 0.1; done
  sleep 0.3
  log | grep '^kio-gpu:' | tail -1 | grep -q ' 0 bytes in 0 blocks at exit$' ||
    fail "$mode: device memory held when the service ended: $(log | grep '^kio-gpu:' | tail -1)"
}

TOOLS=${TOOLS:-$TOP/build/tools}
[ -x "$TOOLS/replicate-archive" ] || { echo "SKIP: $TOOLS/replicate-archive not built"; exit 77; }
"$TOOLS/replicate-archive" --print-args=false --type=matrix --copies=15 ark:feats/lda.ark \
  "ark:$tmp/big.ark" 2>/dev/null &&
  "$TOOLS/replicate-archive" --print-args=false --type=ali --copies=15 \
    ark:kaldi/tri2/ali.ark "ark:$tmp/big.ali" 2>/dev/null &&
  "$BIN/gmm-acc-stats-ali" --use-gpu=no models/tri2/final.mdl "ark:$tmp/big.ark" "ark:$tmp/big.ali" \
    "$tmp/big.ref.acc" 2>/dev/null || { echo "FAIL: the x15 data or its CPU statistics"; exit 1; }
emu_both_backends service-acc
[ $fails = 0 ] && echo "service-acc: OK" || exit 1
