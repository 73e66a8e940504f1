#!/bin/bash
# acc-bench: our CPU gmm-acc-stats-ali (--use-gpu=no) against stock Kaldi's
# on the same inputs, one job and N concurrent jobs (what run.pl starts in a
# training iteration). Data: the 40 fixture utterances with Kaldi's tri1
# alignment, replicated ACC_BENCH_COPIES times (default 41 = 580k frames,
# like one job of train_deltas on data/train --nj 4), tri1 model (1240 pdfs,
# 15053 Gaussians, 39 dims), built once under bench-data/acc/.
# Kaldi: $KALDI_BUNDLE/bin (with its lib/) or $KALDI_ROOT/src/gmmbin.
# Env: BIN, TOOLS, ACC_BENCH_COPIES, ACC_BENCH_REPS (3), ACC_BENCH_JOBS
# ("1 2"), ACC_BENCH_PIPE=1 (features through "ark,s,cs:cat FILE |").
# Prints a markdown table (wall seconds, min-max over the reps) and whether
# every output has Kaldi's bytes.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$top/gmmbin-gpu}
tools=${TOOLS:-$top/${BUILD:-build}/tools}
copies=${ACC_BENCH_COPIES:-41}
reps=${ACC_BENCH_REPS:-3}
jobs_list=${ACC_BENCH_JOBS:-1 2}
data=$top/bench-data/acc
fix=$top/tests/data
for p in "$bin/gmm-acc-stats-ali" "$tools/replicate-archive"; do
  [ -x "$p" ] || { echo "acc-bench: $p not built (run make)"; exit 1; }
done
kaldi=""
if [ -n "${KALDI_BUNDLE:-}" ] && [ -x "$KALDI_BUNDLE/bin/gmm-acc-stats-ali" ]; then
  kaldi=$KALDI_BUNDLE/bin/gmm-acc-stats-ali
  export LD_LIBRARY_PATH="$KALDI_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # on PATH as a user's Kaldi is: ours matches its rounding by finding it there
  export PATH="$KALDI_BUNDLE/bin:$PATH"
elif [ -n "${KALDI_ROOT:-}" ] && [ -x "$KALDI_ROOT/src/gmmbin/gmm-acc-stats-ali" ]; then
  kaldi=$KALDI_ROOT/src/gmmbin/gmm-acc-stats-ali
fi

. "$top/dev/bench/acc-bench-data.sh"
acc_bench_data || exit 1
feats="ark:$data/feats.ark"
[ "${ACC_BENCH_PIPE:-0}" = 1 ] && feats="ark,s,cs:cat $data/feats.ark |"
mdl=$fix/models/tri1/final.mdl

now() { date +%s.%N; }
# run_jobs NAME N PROG ARGS...: N copies at once; prints wall seconds.
run_jobs() {
  local name=$1 n=$2; shift 2
  local t0; t0=$(now)
  for j in $(seq 1 "$n"); do
    "$@" "$mdl" "$feats" "ark:$data/ali.ark" "$data/out/$name.$n.$j.acc" \
      2>"$data/out/$name.$n.$j.log" &
  done
  wait
  awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}'
}

frames=$(( copies * $(sed -n 's/.*over \([0-9]*\) frames\..*/\1/p' "$fix/kaldi/mono/align.log") ))
echo "acc-bench: tri1, $frames frames per job, $reps reps, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo
echo "| jobs at once | Kaldi (s) | ours --use-gpu=no (s) | Kaldi/ours |"
echo "|---:|---:|---:|---:|"
same=1
for n in $jobs_list; do
  ks=(); os=()
  for r in $(seq 1 "$reps"); do
    [ -n "$kaldi" ] && ks+=("$(run_jobs kaldi "$n" "$kaldi")")
    os+=("$(run_jobs ours "$n" "$bin/gmm-acc-stats-ali" --use-gpu=no)")
    for j in $(seq 1 "$n"); do
      grep -q "Written accs" "$data/out/ours.$n.$j.log" || { echo "acc-bench: ours failed:"; cat "$data/out/ours.$n.$j.log"; exit 1; }
      [ -z "$kaldi" ] || cmp -s "$data/out/ours.$n.$j.acc" "$data/out/kaldi.$n.$j.acc" || same=0
    done
  done
  range() { printf '%s\n' "$@" | sort -g | awk 'NR==1{a=$1} {b=$1} END{printf (a==b ? "%s" : "%s-%s"), a, b}'; }
  kr=-; ratio=-
  if [ -n "$kaldi" ]; then
    kr=$(range "${ks[@]}")
    ratio=$(printf '%s\n' "${ks[@]}" | sort -g | sed -n 1p | awk -v o="$(printf '%s\n' "${os[@]}" | sort -g | sed -n 1p)" '{printf "%.1fx", $1 / o}')
  fi
  echo "| $n | $kr | $(range "${os[@]}") | $ratio (best/best) |"
done
echo
if [ -z "$kaldi" ]; then
  echo "acc-bench: Kaldi skipped (set KALDI_BUNDLE or KALDI_ROOT)"
elif [ $same = 1 ]; then
  echo "acc-bench: every output byte-identical to Kaldi's"
else
  echo "acc-bench: OUTPUTS DIFFER from Kaldi's"; exit 1
fi
