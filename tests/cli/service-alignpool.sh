#!/bin/bash
# The GPU service's aligners pooled per device and rebound to each
# connection's model and options (gpu-service/svc-align.c, galign_rebind),
# as a recipe needs: a new model with every alignment job; and the fused
# connections' accumulators taken from the accumulators' pool. On the
# service's CPU test backend and, where `make emu` built them, on
# tests/emu's emulated device. Models: A mono, D tri1 (more pdfs and
# Gaussians, its own graphs); decoding options W, N, R below. Checked: alignment jobs of A and D in turn
# with different beams, then the one pass (gmm-align-acc-compiled) of A and
# D in turn, then jobs of both at once: every output the CPU path's
# (--use-gpu=no), byte for byte; one aligner made for the jobs in turn, the
# others rebound ("pooled aligner, rebound to a new model") or, for the
# same model and options, "pooled aligner"; the one pass's accumulator
# pooled too; never more aligners than jobs ran at once; after the
# service's idle exit every aligner freed (and on the emulated device no
# device memory held); on the emulated device, with device memory short,
# the idle aligners freed before a batch.
# Env: TEST_BIN, TOP, EMU_BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
export KALDI_GPU_BLAS_PROFILE=skx
: "${TEST_BIN:?}" "${TOP:?}"
EMU_BIN=${EMU_BIN:-$TOP/build/emu/bin}
BIN=$(cd "$TEST_BIN" && pwd) || exit 1
for p in gmm-align-compiled gmm-align-acc-compiled kaldi-gpu-service; do
  [ -x "$BIN/$p" ] || { echo "SKIP: $BIN/$p not built"; exit 77; }
done
. "$TOP/tests/cli/lib/emu-service.sh"
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/service-alignpool.XXXXXX)
emu_service_env 1
trap 'stop_service "$tmp"/svc.*; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
declare -A MDL=([A]=models/mono/final.mdl [D]=models/tri1/final.mdl)
declare -A GRAPHS=([A]="ark:gunzip -c graphs/mono.fsts.gz|" [D]="ark:gunzip -c graphs/tri1.fsts.gz|")
# decoding options and data: W the fixtures', N narrow beams on the noisy
# data (retries, failed utterances), R another acoustic scale and no retry
# beam
declare -A BEAMS=([W]="--beam=10 --retry-beam=40 --acoustic-scale=0.1"
                  [N]="--beam=2 --retry-beam=6 --acoustic-scale=0.1"
                  [R]="--beam=6 --retry-beam=0 --acoustic-scale=0.08")
# (6 utterances of the clean data: the emulated device is slow)
clean="scp:head -n 6 feats/delta.scp|"
declare -A FEATS=([W]=$clean [N]=ark:noisy/delta.ark [R]=$clean)
scales="--transition-scale=1.0 --self-loop-scale=0.1"
align() {  # NAME MODEL-LETTER BEAM-LETTER [BIN [OPTIONS...]]
  local name=$1 m=$2 b=$3 dir=${4:-$bin}
  shift 3; [ $# -gt 0 ] && shift
  timeout 300 "$dir/gmm-align-compiled" $scales ${BEAMS[$b]} "$@" "${MDL[$m]}" "${GRAPHS[$m]}" \
    "${FEATS[$b]}" "ark,t:$tmp/$name.ali" 2>"$tmp/$name.log"
  echo $? >"$tmp/$name.rc"
}
onepass() {  # NAME MODEL-LETTER BEAM-LETTER [BIN [OPTIONS...]]
  local name=$1 m=$2 b=$3 dir=${4:-$bin}
  shift 3; [ $# -gt 0 ] && shift
  timeout 300 "$dir/gmm-align-acc-compiled" $scales ${BEAMS[$b]} "$@" "${MDL[$m]}" \
    "${GRAPHS[$m]}" "${FEATS[$b]}" "ark,t:$tmp/$name.ali" "$tmp/$name.acc" 2>"$tmp/$name.log"
  echo $? >"$tmp/$name.rc"
}
right() {  # NAME REFERENCE: through the service, the CPU path's exit code and bytes
  grep -q 'through the GPU service' "$tmp/$1.log" ||
    fail "$mode $1: the service was not used: $(grep -m1 'Using\|GPU service' "$tmp/$1.log")"
  grep -q 'GPU service lost\|GPU service not usable' "$tmp/$1.log" &&
    fail "$mode $1: $(grep -m1 'GPU service lost\|GPU service not usable' "$tmp/$1.log")"
  cmp -s "$tmp/$1.rc" "$tmp/$2.rc" || fail "$mode $1: exit $(cat "$tmp/$1.rc"), not $(cat "$tmp/$2.rc")"
  cmp -s "$tmp/$1.ali" "$tmp/$2.ali" || fail "$mode $1: alignments differ from the CPU path's ($2)"
  [ ! -e "$tmp/$2.acc" ] || cmp -s "$tmp/$1.acc" "$tmp/$2.acc" ||
    fail "$mode $1: statistics differ from the CPU path's ($2)"
}
log() { cat "$KALDI_GPU_SERVICE_DIR"/service-*.log; }
count() { log | grep -c -- "$1"; }
NEW='setting up (new aligner)'
REBOUND='setting up (pooled aligner, rebound to a new model)'
SAME='setting up (pooled aligner)'
# the aligners back in the pool (or freed) after the connections ended
settle() {
  for _ in $(seq 100); do
    [ "$(count 'the aligner (')" -ge "$(count 'setting up ([a-z]* aligner')" ] && return
    sleep 0.1
  done
}
# aligners the device's memory pressure freed (a connection may then make one)
pressed() { log | sed -n 's/.*memory short for a batch; \([0-9]*\) idle aligner(s) freed.*/\1/p' | awk '{s += $1} END {print s + 0}'; }
most_idle() { log | sed -n 's/.*pooling the aligner (\([0-9]*\) idle on device.*/\1/p' | sort -n | tail -1; }

run_mode() {
  # 1. In turn: one aligner, rebound to each new model or options; the same
  #    model and options again: pooled as it was.
  export KALDI_GPU_SERVICE_DIR=$tmp/svc.$mode.1
  local i=0 s
  for s in AW DW AN DR AW AW; do
    i=$((i + 1))
    align "$mode.turn$i" ${s:0:1} ${s:1:1}
    right "$mode.turn$i" "ref.${s:0:1}${s:1:1}"
    settle
  done
  [ "$(count "$NEW")" = 1 ] || fail "$mode: jobs in turn made $(count "$NEW") aligners, not 1"
  [ "$(count "$REBOUND")" = 4 ] || fail "$mode: $(count "$REBOUND") of 4 jobs rebound: $(log | grep 'setting up')"
  [ "$(count "$SAME")" = 1 ] || fail "$mode: the same model and options again was not on the pooled aligner as it was"
  [ "$(most_idle)" = 1 ] || fail "$mode: jobs in turn left $(most_idle) idle aligners"
  # 2. The one pass in turn: the aligners of the jobs before, the
  #    accumulator of the first pooled for the others.
  for s in AW DW AN; do
    i=$((i + 1))
    onepass "$mode.turn$i" ${s:0:1} ${s:1:1}
    right "$mode.turn$i" "ref1.${s:0:1}${s:1:1}"
    settle
  done
  [ "$(count "$NEW")" = 1 ] || fail "$mode: the one pass made another aligner"
  log | grep -q 'accumulated here.*(new accumulator)' ||
    fail "$mode: the one pass's first accumulator: $(log | grep -m1 'accumulated here')"
  [ "$(count 'accumulated here.*(pooled accumulator')" = 2 ] ||
    fail "$mode: the one pass's accumulators were not pooled: $(log | grep 'accumulated here')"
  # 3. Jobs of both models at once, twice: never more aligners than jobs at
  #    once (4), the second round on the first one's.
  local r j pooled
  for r in 1 2; do
    pooled=$(( $(count "$REBOUND") + $(count "$SAME") ))
    for j in 1 2 3 4; do
      s=$(echo "AW DW AN DR" | cut -d' ' -f$(( (j + r) % 4 + 1 )))
      align "$mode.par$r.$j" ${s:0:1} ${s:1:1} & echo "$s" >"$tmp/$mode.par$r.$j.s"
    done
    wait
    for j in 1 2 3 4; do right "$mode.par$r.$j" "ref.$(cat "$tmp/$mode.par$r.$j.s")"; done
    settle
  done
  [ "$(count "$NEW")" -le $((4 + $(pressed))) ] ||
    fail "$mode: $(count "$NEW") aligners for at most 4 jobs at once ($(pressed) freed under pressure)"
  [ "$(most_idle)" -le "$(count "$NEW")" ] || fail "$mode: $(most_idle) idle of $(count "$NEW") made"
  [ "$(( $(count "$REBOUND") + $(count "$SAME") - pooled ))" -ge 3 ] ||
    fail "$mode: the second round did not take the first one's aligners: $(log | grep 'setting up (')"
  stop_service
  # 4. The service's idle exit frees every aligner (and their device
  #    memory: the emulated device's report).
  export KALDI_GPU_SERVICE_DIR=$tmp/svc.$mode.4
  KALDI_GPU_TEST_MEMORY_REPORT=1 KALDI_GPU_SERVICE_IDLE=2 align "$mode.idle1" A W &
  KALDI_GPU_TEST_MEMORY_REPORT=1 KALDI_GPU_SERVICE_IDLE=2 align "$mode.idle2" D W &
  wait
  settle
  KALDI_GPU_TEST_MEMORY_REPORT=1 KALDI_GPU_SERVICE_IDLE=2 align "$mode.idle3" D R
  right "$mode.idle1" ref.AW
  right "$mode.idle2" ref.DW
  right "$mode.idle3" ref.DR
  for _ in $(seq 100); do [ "$(count 'Idle for 2 s: exiting')" -ge 1 ] && break; sleep 0.1; done
  sleep 0.3
  local made freed
  made=$(count "$NEW")
  freed=$(log | sed -n 's/.* \([0-9]*\) idle aligner(s) freed.*/\1/p' | awk '{s += $1} END {print s + 0}')
  [ "$made" -ge 1 ] && [ "$freed" = "$made" ] || fail "$mode: $made aligners made, $freed freed at the idle exit"
  [ $mode = emu ] || return
  log | grep '^kio-gpu:' | tail -1 | grep -q ' 0 bytes in 0 blocks at exit$' ||
    fail "$mode: device memory held when the service ended: $(log | grep '^kio-gpu:' | tail -1)"
  # 5. Device memory short (a 64 MiB service, four tri1 aligners idle: slow
  #    batches keep the four jobs connected at once): the next job's batch
  #    frees the idle ones first; outputs still right.
  export KALDI_GPU_SERVICE_DIR=$tmp/svc.$mode.5
  for j in 1 2 3 4; do
    KALDI_GPU_SERVICE_MEMORY=64M KALDI_GPU_TEST_SERVICE_SLOW=1 align "$mode.short$j" D W &
  done
  wait
  settle
  KALDI_GPU_SERVICE_MEMORY=64M align "$mode.short5" D W
  for j in 1 2 3 4 5; do right "$mode.short$j" ref.DW; done
  [ "$(count "$NEW")" = 4 ] || fail "$mode: $(count "$NEW") aligners for four slow jobs at once"
  log | grep -q 'memory short for a batch; [1-9][0-9]* idle aligner(s) freed' ||
    fail "$mode: the idle aligners were not freed when memory was short: $(log | grep 'freed\|pooling')"
  [ "$(log | sed -n 's/.*pooling the aligner (\([0-9]*\) idle.*/\1/p' | tail -1)" -lt 4 ] ||
    fail "$mode: the pool did not shrink when memory was short"
  stop_service
}

# the CPU path's outputs: the references
for s in AW DW AN DR; do
  mode=ref bin=$BIN align "ref.$s" ${s:0:1} ${s:1:1} "$BIN" --use-gpu=no
  [ "$(cat "$tmp/ref.$s.rc")" = 0 ] || { echo "FAIL: the CPU path's alignments ($s)"; exit 1; }
done
for s in AW DW AN; do
  mode=ref bin=$BIN onepass "ref1.$s" ${s:0:1} ${s:1:1} "$BIN" --use-gpu=no
  [ "$(cat "$tmp/ref1.$s.rc")" = 0 ] || { echo "FAIL: the CPU path's one pass ($s)"; exit 1; }
done
grep -q 'Retrying' "$tmp/ref.AN.log" || { echo "FAIL: the narrow beams retry nothing"; exit 1; }
cmp -s "$tmp/ref.DW.ali" "$tmp/ref.DR.ali" && { echo "FAIL: the other scale changes nothing"; exit 1; }
emu_both_backends service-alignpool 'stop_service "$tmp"/svc.*'
[ $fails = 0 ] && echo "service-alignpool: OK" || exit 1
