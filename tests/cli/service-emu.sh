#!/bin/bash
# The GPU service's device path without a GPU: the service and the programs
# built on tests/emu's host emulation of CUDA (make emu: $EMU_BIN; the
# service's device memory accounts and admission, the device aligner and
# accumulator). The one pass with several requests in flight on its
# connection (KALDI_GPU_DEV_SERVICE_INFLIGHT, small requests:
# KALDI_GPU_DEV_SERVICE_REQUEST_KB), where the service accumulates one
# request beside the next one's alignment: Kaldi's alignments and
# statistics on the clean data, the CPU path's outputs and messages on the
# noisy data (retries, a failed utterance), no loss, more than one request
# in flight; the aligner alone the same way.
# Env: BIN (the CPU path), TOP, EMU_BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
. "$TOP/tests/cli/lib/emu-service.sh"
emu_test_start service-emu 1 gmm-align-acc-compiled
export KALDI_GPU_SERVICE_DIR=$tmp/svc
trap 'stop_service; rm -rf "$tmp"' EXIT
opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
graphs="ark:gunzip -c graphs/mono.fsts.gz|"
onepass() {  # NAME DIR FEATS [OPTIONS...]
  local name=$1 dir=$2 feats=$3; shift 3
  timeout 300 "$dir/gmm-align-acc-compiled" $opts "$@" models/mono/final.mdl "$graphs" "$feats" \
    "ark,t:$tmp/$name.ali" "$tmp/$name.acc" 2>"$tmp/$name.log"
  echo $? >"$tmp/$name.rc"
}
same() {  # A B
  cmp -s "$tmp/$1.ali" "$tmp/$2.ali" || fail "$1 vs $2: alignments differ"
  cmp -s "$tmp/$1.acc" "$tmp/$2.acc" || fail "$1 vs $2: statistics differ"
  cmp -s "$tmp/$1.rc" "$tmp/$2.rc" || fail "$1 vs $2: exit codes differ"
  diff <(emu_msgs "$tmp/$1.log") <(emu_msgs "$tmp/$2.log") >/dev/null || fail "$1 vs $2: messages differ"
}
used() {  # NAME: through the service's (emulated) device, nothing lost
  grep -q 'Using GPU: host emulation of a CUDA device (through the GPU service)' "$tmp/$1.log" ||
    fail "$1: not through the service: $(grep -m1 galign_aligner_new "$tmp/$1.log")"
  grep -q 'GPU service lost\|GPU service not usable' "$tmp/$1.log" &&
    fail "$1: $(grep -m1 'GPU service lost\|GPU service not usable' "$tmp/$1.log")"
}

# CPU path: the reference of the noisy data
onepass cpu.clean "$BIN" ark:feats/delta.ark --use-gpu=no
onepass cpu.noisy "$BIN" ark:noisy/delta.ark --use-gpu=no
cmp -s "$tmp/cpu.clean.acc" kaldi/mono/final.acc || fail "CPU path: statistics differ from Kaldi's"
for v in 3.16 2.64 1.65536; do
  inflight=${v%.*} kb=${v#*.}
  for d in clean noisy; do
    f=ark:feats/delta.ark; [ $d = noisy ] && f=ark:noisy/delta.ark
    KALDI_GPU_DEV_SERVICE_INFLIGHT=$inflight KALDI_GPU_DEV_SERVICE_REQUEST_KB=$kb \
      onepass "emu.$d.$v" "$EMU_BIN" "$f" --batch-size=15
    used "emu.$d.$v"
    same "cpu.$d" "emu.$d.$v"
  done
done
timeout 300 "$EMU_BIN/gmm-align-compiled" $opts models/mono/final.mdl "$graphs" ark:noisy/delta.ark \
  "ark,t:$tmp/ali.ali" 2>"$tmp/ali.log"
used ali
cmp -s "$tmp/ali.ali" "$tmp/cpu.noisy.ali" || fail "gmm-align-compiled: alignments differ"
stop_service
# the service's account of each connection: requests, the most in flight,
# accumulations (one per request of the one pass)
sed -n 's/.*align connection.*, \([0-9]*\) requests (up to \([0-9]*\) in flight).*; \([0-9]*\) accumulated here.*/\1 \2 \3/p' \
  "$KALDI_GPU_SERVICE_DIR"/service-*.log >"$tmp/counts"
[ "$(wc -l <"$tmp/counts")" = 7 ] || fail "$(wc -l <"$tmp/counts") connections logged, 7 expected"
read -r nreq most nacc < <(head -n 1 "$tmp/counts")
[ "${most:-0}" = 3 ] || fail "3 in flight asked for, the service saw ${most:-none}"
[ "${nacc:-0}" -ge 40 ] || fail "one request per utterance: ${nacc:-0} accumulated"
[ "${nreq:-0}" -gt "${nacc:-0}" ] || fail "$nreq requests for $nacc accumulations"
grep -q 'Restarting\|ERROR\|WARNING' "$KALDI_GPU_SERVICE_DIR"/service-*.log &&
  fail "the service: $(grep -m1 'Restarting\|ERROR\|WARNING' "$KALDI_GPU_SERVICE_DIR"/service-*.log)"

emu_test_end service-emu.sh
