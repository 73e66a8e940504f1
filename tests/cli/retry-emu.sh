#!/bin/bash
# The device decoder's retry passes on host threads (KALDI_GPU_DEV_RETRY=host,
# the default) and on the device (=device), on tests/emu's host emulation of
# CUDA (make emu: $EMU_BIN): gmm-align-compiled on its own context and
# through the GPU service, and gmm-align-acc-compiled (the one pass) through
# the service, on the noisy data, where utterances retry and fail: with
# Kaldi's beams 10/40 (alignments equal to Kaldi's recorded ones, Kaldi's
# "Retrying utterance" and "Did not successfully decode" lines in its
# order), and with beams 2/6 (most utterances retry, a quarter fail both
# passes) and one retry thread; every run equal to the CPU path: alignments,
# scores, per-frame log-likelihoods, statistics, messages, exit status.
# Env: BIN (the CPU path), TOP, EMU_BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
. "$TOP/tests/cli/lib/emu-service.sh"
emu_test_start retry-emu 2 gmm-align-compiled
unset KALDI_GPU_DEV_RETRY KALDI_GPU_DEV_RETRY_THREADS
stop_services() { stop_service "$tmp"/svc-*; }  # one service per retry way
trap 'stop_services; [ -n "${RETRY_KEEP:-}" ] || rm -rf "$tmp"' EXIT
graphs="ark:gunzip -c graphs/mono.fsts.gz|"
align() {  # NAME DIR BEAM RETRY [OPTIONS...]: gmm-align-compiled
  local name=$1 dir=$2 b=$3 r=$4; shift 4
  timeout 300 "$dir/gmm-align-compiled" --transition-scale=1.0 --acoustic-scale=0.1 \
    --self-loop-scale=0.1 --beam="$b" --retry-beam="$r" \
    --write-per-frame-acoustic-loglikes="ark,t:$tmp/$name.pf" "$@" models/mono/final.mdl \
    "$graphs" ark:noisy/delta.ark "ark:$tmp/$name.ali" "ark,t:$tmp/$name.scores" 2>"$tmp/$name.log"
  echo $? >"$tmp/$name.rc"
}
onepass() {  # NAME DIR BEAM RETRY [OPTIONS...]: gmm-align-acc-compiled
  local name=$1 dir=$2 b=$3 r=$4; shift 4
  timeout 300 "$dir/gmm-align-acc-compiled" --transition-scale=1.0 --acoustic-scale=0.1 \
    --self-loop-scale=0.1 --beam="$b" --retry-beam="$r" "$@" models/mono/final.mdl "$graphs" \
    ark:noisy/delta.ark "ark:$tmp/$name.ali" "$tmp/$name.acc" 2>"$tmp/$name.log"
  echo $? >"$tmp/$name.rc"
}
same() {  # A B: the same outputs and messages
  local f
  for f in ali scores pf acc rc; do
    [ -f "$tmp/$1.$f" ] || [ -f "$tmp/$2.$f" ] || continue
    cmp -s "$tmp/$1.$f" "$tmp/$2.$f" || fail "$2 vs $1: $f differs"
  done
  diff <(emu_msgs "$tmp/$1.log") <(emu_msgs "$tmp/$2.log") >/dev/null || fail "$2 vs $1: messages differ"
}
emulated() {  # NAME service|own
  local how="\$"; [ "$2" = service ] && how=" (through the GPU service)"
  grep -q "Using GPU: host emulation of a CUDA device$how" "$tmp/$1.log" ||
    fail "$1: not on the emulated device $how: $(grep -m1 galign_aligner_new "$tmp/$1.log")"
}

# the CPU path: the reference (and Kaldi's outputs at 10/40)
align cpu.10 "$BIN" 10 40 --use-gpu=no
align cpu.2 "$BIN" 2 6 --use-gpu=no
onepass cpu1.10 "$BIN" 10 40 --use-gpu=no
onepass cpu1.2 "$BIN" 2 6 --use-gpu=no
cmp -s "$tmp/cpu.10.ali" noisy/mono.ali.ark || fail "CPU path: alignments differ from Kaldi's"
grep -o 'Retrying utterance .*\|Did not successfully decode file .*' noisy/mono.align.log >"$tmp/kaldi.lines"
nk=$(wc -l <"$tmp/kaldi.lines")
grep -q 'Retried 12 out of 40 utterances' "$tmp/cpu.2.log" && grep -q 'Done 29, errors on 11' "$tmp/cpu.2.log" ||
  fail "beams 2/6: not the retries and failures this test is about: $(grep Retried "$tmp/cpu.2.log")"

for way in host device; do
  export KALDI_GPU_DEV_RETRY=$way
  # own context
  KALDI_GPU_SERVICE=no align "own.$way.10" "$EMU_BIN" 10 40
  KALDI_GPU_SERVICE=no align "own.$way.2" "$EMU_BIN" 2 6
  KALDI_GPU_SERVICE=no KALDI_GPU_DEV_BATCH_FRAMES=1500 KALDI_GPU_DEV_RETRY_THREADS=1 \
    align "own.$way.2b" "$EMU_BIN" 2 6
  for n in 10 2 2b; do emulated "own.$way.$n" own; same "cpu.${n%b}" "own.$way.$n"; done
  # through the service (one per way: it takes the way of the job that starts it)
  export KALDI_GPU_SERVICE_DIR=$tmp/svc-$way
  align "svc.$way.10" "$EMU_BIN" 10 40
  align "svc.$way.2" "$EMU_BIN" 2 6 --batch-size=7
  onepass "svc1.$way.10" "$EMU_BIN" 10 40 --batch-size=15
  onepass "svc1.$way.2" "$EMU_BIN" 2 6
  for n in svc.$way.10 svc.$way.2 svc1.$way.10 svc1.$way.2; do emulated "$n" service; done
  same cpu.10 "svc.$way.10"; same cpu.2 "svc.$way.2"
  same cpu1.10 "svc1.$way.10"; same cpu1.2 "svc1.$way.2"
  # Kaldi's lines, in Kaldi's order
  for n in own.$way.10 svc.$way.10; do
    grep -o 'Retrying utterance .*\|Did not successfully decode file .*' "$tmp/$n.log" |
      cmp -s - "$tmp/kaldi.lines" || fail "$n: Kaldi's retry and failure lines differ"
  done
  unset KALDI_GPU_SERVICE_DIR
done
[ "$nk" -ge 11 ] || fail "Kaldi's log: $nk retry/failure lines"
stop_services
# the retries really ran where asked: host threads only with the host way
# (the service's VLOG 2 lines come in the job's log)
for n in svc.host.10 svc.host.2 svc1.host.10 svc1.host.2; do
  grep -q 'Retry passes on host threads' "$tmp/$n.log" || fail "$n: no retry pass on host threads"
done
grep -l 'Retry passes on host threads' "$tmp"/*device*.log &&
  fail "device way: retry passes on host threads"
KALDI_GPU_SERVICE=no KALDI_GPU_DEV_RETRY=host align own.v "$EMU_BIN" 10 40 --verbose=2
grep -q 'Retry passes on host threads' "$tmp/own.v.log" || fail "own context: no host retry logged"
grep -q 'Restarting\|ERROR\|WARNING' "$tmp"/svc-*/service-*.log &&
  fail "the services: $(grep -m1 'Restarting\|ERROR\|WARNING' "$tmp"/svc-*/service-*.log)"

emu_test_end retry-emu.sh
