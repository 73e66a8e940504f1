#!/bin/bash
# A killed job never leaves an output that reads as complete (base/io/output.c):
# SIGKILL to the job's process group (a job killer, scancel) or to the job
# alone (the OOM killer) mid-run, with its alignments going to
# "ark:|gzip -c >ali.gz": the gzip stream is never closed, so gunzip -t
# fails (Kaldi's own program, whose gzip shares its process group, leaves an
# invalid stream too when the group is killed). An undisturbed run's stream
# is whole. Env: BIN, TOP. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
for p in gmm-align-compiled gmm-align-acc-compiled; do
  [ -x "$BIN/$p" ] || { echo "SKIP: $BIN/$p not built"; exit 77; }
done
command -v gzip >/dev/null || { echo "SKIP: no gzip"; exit 77; }
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/killed-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export KALDI_GPU_SERVICE=no
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
# Features that stop coming after 20 utterances: the job is mid-run, its
# output pipe open, until it is killed.
line=$(sed -n 21p feats/delta.scp)
key=${line%% *}
off=${line##*:}
cut=$((off - ${#key} - 1))
stall="ark:(head -c $cut feats/delta.ark; sleep 60; tail -c +$((cut + 1)) feats/delta.ark)|"

run_killed() {  # NAME PROGRAM WHAT(group|job) [EXTRA ARG]
  local name=$1 prog=$2 what=$3 out=$tmp/$1.gz
  set -m  # the job leads a process group of its own, as under a job runner
  "$BIN/$prog" $opts --batch-size=4 models/mono/final.mdl "ark:gunzip -c graphs/mono.fsts.gz|" \
    "$stall" "ark:|gzip -c >$out" ${4:+"$4"} 2>"$tmp/$name.log" &
  local job=$!
  set +m
  for _ in $(seq 100); do [ -e "$out" ] && break; sleep 0.05; done
  sleep 0.5
  [ -e "$out" ] || fail "$name: the output pipe never started"
  if [ "$what" = group ]; then kill -9 -- "-$job"; else kill -9 "$job"; fi
  wait "$job" 2>/dev/null
  kill -9 -- "-$job" 2>/dev/null  # the stalled input's processes
  sleep 0.3
  if gzip -t "$out" 2>/dev/null; then
    fail "$name: killed mid-run ($what), it left a valid gzip stream of $(gzip -dc "$out" | wc -c) bytes"
  fi
}
run_killed align-group gmm-align-compiled group
run_killed align-job gmm-align-compiled job
run_killed onepass-group gmm-align-acc-compiled group "$tmp/x.acc"
[ -e "$tmp/x.acc" ] && fail "onepass-group: statistics written by a killed job"

# Undisturbed: the stream is whole and holds every alignment.
"$BIN/gmm-align-compiled" $opts models/mono/final.mdl "ark:gunzip -c graphs/mono.fsts.gz|" \
  ark:feats/delta.ark "ark:|gzip -c >$tmp/whole.gz" 2>"$tmp/whole.log" || fail "undisturbed run failed"
gzip -t "$tmp/whole.gz" 2>/dev/null || fail "undisturbed run: invalid gzip stream"
gzip -dc "$tmp/whole.gz" | cmp -s - kaldi/mono/ali.ark || fail "undisturbed run: alignments differ"

[ $fails = 0 ] || { echo "killed.sh: $fails failure(s)"; exit 1; }
echo "killed.sh: all passed"
