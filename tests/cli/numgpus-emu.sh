#!/bin/bash
# --num-gpus=2 on two emulated devices (tests/emu, EMU_DEVICES=2: one host
# memory presented as two devices), through the GPU service and on the
# job's own context: gmm-align-acc-compiled and gmm-align-compiled give the
# CPU path's alignments, statistics and messages (Kaldi's statistics on the
# clean data), with one and two GPUs; through the service the alignment
# is split over both devices (each logs its connection) and nothing is lost.
# Env: BIN (the CPU path), TOP, EMU_BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
. "$TOP/tests/cli/lib/emu-service.sh"
emu_test_start numgpus-emu 1 gmm-align-acc-compiled
export KALDI_GPU_SERVICE_DIR=$tmp/svc EMU_DEVICES=2
trap 'stop_service; rm -rf "$tmp"' EXIT
opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
graphs="ark:gunzip -c graphs/mono.fsts.gz|"
mdl=models/mono/final.mdl
run() {  # PROG NAME DIR FEATS [OPTIONS...]: PROG's outputs, log, exit code
  local prog=$1 name=$2 dir=$3 feats=$4; shift 4
  local out=("ark,t:$tmp/$name.ali")
  [ "$prog" = gmm-align-acc-compiled ] && out+=("$tmp/$name.acc")
  timeout 300 "$dir/$prog" $opts "$@" $mdl "$graphs" "$feats" "${out[@]}" 2>"$tmp/$name.log"
  echo $? >"$tmp/$name.rc"
}
same() {  # A B
  cmp -s "$tmp/$1.ali" "$tmp/$2.ali" || fail "$1 vs $2: alignments differ"
  [ -f "$tmp/$1.acc" ] && { cmp -s "$tmp/$1.acc" "$tmp/$2.acc" || fail "$1 vs $2: statistics differ"; }
  cmp -s "$tmp/$1.rc" "$tmp/$2.rc" || fail "$1 vs $2: exit codes differ"
  diff <(emu_msgs "$tmp/$1.log") <(emu_msgs "$tmp/$2.log") >/dev/null || fail "$1 vs $2: messages differ"
}
svc_used() {  # NAME K: through the service with K connections, nothing lost
  grep -q 'Using GPU: host emulation of a CUDA device.*(through the GPU service)' "$tmp/$1.log" ||
    fail "$1: not through the service: $(grep -m1 galign_aligner_new "$tmp/$1.log")"
  [ "$2" = 1 ] || grep -q "$2 connections (through the GPU service)" "$tmp/$1.log" ||
    fail "$1: not on $2 connections: $(grep -m1 galign_aligner_new "$tmp/$1.log")"
  grep -q 'GPU service lost\|GPU service not usable' "$tmp/$1.log" &&
    fail "$1: $(grep -m1 'GPU service lost\|GPU service not usable' "$tmp/$1.log")"
}

# (the emulated device is slow: the aligner alone on the noisy data only)
for prog in gmm-align-acc-compiled gmm-align-compiled; do
  for d in clean noisy; do
    [ $prog = gmm-align-compiled ] && [ $d = clean ] && continue
    f=ark:feats/delta.ark; [ $d = noisy ] && f=ark:noisy/delta.ark
    run $prog "$prog.cpu.$d" "$BIN" "$f" --use-gpu=no
    [ $prog = gmm-align-acc-compiled ] && [ $d = clean ] &&
      { cmp -s "$tmp/$prog.cpu.$d.acc" kaldi/mono/final.acc || fail "CPU path: statistics differ from Kaldi's"; }
    for k in 1 2; do
      # a few utterances a batch, one request each: several batches and
      # requests on both devices, sent ahead
      KALDI_GPU_DEV_SERVICE_REQUEST_KB=64 run $prog "$prog.svc.$d.$k" "$EMU_BIN" "$f" \
        --num-gpus=$k --batch-size=9
      svc_used "$prog.svc.$d.$k" $k
      same "$prog.cpu.$d" "$prog.svc.$d.$k"
      [ $k = 2 ] || continue  # (one GPU on its own context: tests/cli/gpu-*.sh)
      KALDI_GPU_SERVICE=no run $prog "$prog.own.$d.$k" "$EMU_BIN" "$f" --num-gpus=$k --batch-size=9
      grep -q 'Using GPU: host emulation of a CUDA device' "$tmp/$prog.own.$d.$k.log" &&
        ! grep -q 'through the GPU service' "$tmp/$prog.own.$d.$k.log" ||
        fail "$prog.own.$d.$k: not on the job's own (emulated) device"
      same "$prog.cpu.$d" "$prog.own.$d.$k"
    done
  done
done
stop_service
# each device aligned: the service's connection lines name both
for dev in 0 1; do
  grep -q "align connection (device $dev)" "$KALDI_GPU_SERVICE_DIR"/service-*.log ||
    fail "the service aligned nothing on device $dev"
done
grep -q '2 device(s)' "$KALDI_GPU_SERVICE_DIR"/service-*.log || fail "the service did not serve 2 devices"
grep -q 'Restarting\|ERROR\|WARNING' "$KALDI_GPU_SERVICE_DIR"/service-*.log &&
  fail "the service: $(grep -m1 'Restarting\|ERROR\|WARNING' "$KALDI_GPU_SERVICE_DIR"/service-*.log)"

emu_test_end numgpus-emu.sh
