#!/bin/bash
# acc-service-bench: N gmm-acc-stats-ali jobs at once through one warm GPU
# service, the way a training iteration of train_deltas runs them (issue
# 12): where the time of a job goes when the service is shared. Data as
# dev/bench/acc-bench.sh (tri1 fixture x ACC_BENCH_COPIES, default 41 = 580k
# frames per job, 15,053 Gaussians; bench-data/acc/).
#
#   dev/bench/acc-service-bench.sh [N...]      (default: 1 16)
#
# Per N: wall seconds of each job (min / median / max) over ACC_BENCH_REPS
# rounds (default 3), the jobs' own time split (--verbose=1) and the
# service's (KALDI_GPU_SERVICE_VERBOSE=2: set-up, host sort, staging,
# waiting for the device, likelihoods, fetching; medians of the last
# round's connections; the log kept as bench-data/acc/out/service.log);
# every output must equal the first
# (CPU path) byte for byte. Needs a GPU.
#
# ACC_BENCH_MODELS=2: the model changes every round, as in a training script
# (a new model every iteration, mixing up changes its Gaussian count): the
# rounds alternate between tri1 and tri1 re-estimated from the bench data's
# statistics with our gmm-est --mix-up=18800 (the
# Gaussians the bench data does not reach are dropped first: its count
# differs from tri1's 15,053; the line printed says how), so that the
# service's pooled accumulators are rebound to another model each round
# (the warm-up job has tri1: the first round's are pooled as they were).
# Each output is compared with its own model's CPU statistics. EST: the
# gmm-est to use (default: BIN's).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$top/gmmbin-gpu}
tools=${TOOLS:-$top/${BUILD:-build}/tools}
copies=${ACC_BENCH_COPIES:-41}
reps=${ACC_BENCH_REPS:-3}
data=$top/bench-data/acc
fix=${ACC_BENCH_FIX:-$top/tests/data}
[ -e /dev/nvidiactl ] || { echo "acc-service-bench: SKIP (no GPU)"; exit 0; }
. "$top/dev/bench/acc-bench-data.sh"
acc_bench_data || exit 1
mdl=$fix/models/tri1/final.mdl
svc=$(mktemp -d /tmp/acc-service-bench.XXXXXX)
chmod 700 "$svc"
export KALDI_GPU_SERVICE_DIR=$svc KALDI_GPU_SERVICE_VERBOSE=2 KALDI_GPU_SERVICE_IDLE=30
trap 'rm -rf "$svc"' EXIT
now() { date +%s.%N; }

"$bin/gmm-acc-stats-ali" --use-gpu=no "$mdl" "ark:$data/feats.ark" "ark:$data/ali.ark" \
  "$data/out/ref.acc" 2>"$data/out/ref.log" || { cat "$data/out/ref.log"; exit 1; }
# warm the service (first job starts it)
"$bin/gmm-acc-stats-ali" "$mdl" "ark:$data/feats.ark" "ark:$data/ali.ark" "$data/out/warm.acc" \
  2>"$data/out/warm.log" || { cat "$data/out/warm.log"; exit 1; }
grep -q "through the GPU service" "$data/out/warm.log" || { echo "acc-service-bench: the service was not used:"; cat "$data/out/warm.log"; exit 1; }
models=${ACC_BENCH_MODELS:-1}
mdls=("$mdl") refs=("$data/out/ref.acc")
if [ "$models" = 2 ]; then
  "${EST:-$bin/gmm-est}" --mix-up=18800 "$mdl" "$data/out/ref.acc" "$data/out/mixed.mdl" \
    2>"$data/out/mixed.log" &&
    "$bin/gmm-acc-stats-ali" --use-gpu=no "$data/out/mixed.mdl" "ark:$data/feats.ark" \
      "ark:$data/ali.ark" "$data/out/ref2.acc" 2>"$data/out/ref2.log" ||
    { echo "acc-service-bench: the second model:"; tail -3 "$data/out/mixed.log" "$data/out/ref2.log"; exit 1; }
  mdls+=("$data/out/mixed.mdl") refs+=("$data/out/ref2.acc")
  echo "acc-service-bench: two models alternating: tri1 and $(grep -o 'split #Gauss from [0-9]* to [0-9]*' "$data/out/mixed.log" | tail -1)"
elif [ "$models" != 1 ]; then
  echo "acc-service-bench: ACC_BENCH_MODELS is 1 or 2"; exit 1
fi

echo "acc-service-bench: tri1, $copies copies per job, $reps rounds, $(nproc) cores, $(nvidia-smi -L 2>/dev/null | head -1)"
echo
echo "| jobs at once | job wall s min / median / max | round wall s (best) | frames/s (best round) |"
echo "|---:|---|---:|---:|"
frames=$(sed -n 's/.*over \([0-9]*\) frames\..*/\1/p' "$data/out/ref.log" | tail -1)
ok=1
for n in ${@:-1 16}; do
  walls=(); best=""
  for r in $(seq 1 "$reps"); do
    k=$(( (r - 1) % models ))
    t0=$(now)
    for j in $(seq 1 "$n"); do
      ( s=$(now)
        "$bin/gmm-acc-stats-ali" --verbose=1 "${mdls[k]}" "ark:$data/feats.ark" "ark:$data/ali.ark" \
          "$data/out/job.$j.acc" 2>"$data/out/job.$n.$j.log"
        echo $? "$(awk -v a="$s" -v b="$(now)" 'BEGIN {printf "%.3f", b - a}')" >"$data/out/job.$j.t" ) &
    done
    wait
    w=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.3f", b - a}')
    [ -z "$best" ] || [ "$(awk -v a="$w" -v b="$best" 'BEGIN {print (a < b)}')" = 1 ] && best=$w
    for j in $(seq 1 "$n"); do
      read -r rc t <"$data/out/job.$j.t"
      walls+=("$t")
      [ "$rc" = 0 ] && cmp -s "$data/out/job.$j.acc" "${refs[k]}" || { ok=0; echo "job $j of $n (model $((k + 1))): exit $rc or different stats"; }
    done
  done
  stats=$(printf '%s\n' "${walls[@]}" | sort -g | awk '{v[NR]=$1} END {printf "%s / %s / %s", v[1], v[int((NR+1)/2)], v[NR]}')
  echo "| $n | $stats | $best | $(awk -v f="$frames" -v n="$n" -v w="$best" 'BEGIN {printf "%.0f", f * n / w}') |"
  grep -h "Time:" "$data/out/job.$n."*.log | sed 's/.*Time: /    job: /' | sort | head -n 3
done
echo
# The service's split per connection (svc-acc.c's line; an older service
# has none): medians over the last round's connections.
log=$(ls "$svc"/service-*.log 2>/dev/null | head -1)
medians() {  # columns on stdin: the median of each, on one line
  local f; f=$(mktemp); cat >"$f"
  [ -s "$f" ] || { echo "    (none: a service without this line)"; rm -f "$f"; return; }
  for c in $(seq "$(head -1 "$f" | wc -w)"); do
    awk -v c="$c" '{print $c}' "$f" | sort -g | awk '{v[NR] = $1} END {printf "    %s", v[int((NR + 1) / 2)]}'
  done
  echo; rm -f "$f"
}
if [ -n "$log" ]; then
  cp "$log" "$data/out/service.log"
  last=${*: -1}; last=${last:-16}
  echo "service, the last $last connections (median s: set-up, accumulating, connected):"
  grep -h 'acc connection (device [0-9]*): [0-9]* requests' "$log" | tail -n "$last" |
    sed -n 's/.*, \([0-9.]*\) s setting up.*, \([0-9.]*\) s accumulating, \([0-9.]*\) s connected.*/\1 \2 \3/p' | medians
  echo "service split (median s: host sort, staging, waiting for the device, likelihoods, fetching):"
  grep -h 'accumulator; [0-9]* batches' "$log" | tail -n "$last" |
    sed -n 's/.*host sort \([0-9.]*\) s, staging \([0-9.]*\) s, waiting for the device \([0-9.]*\) s, likelihoods \([0-9.]*\) s, fetching statistics \([0-9.]*\) s.*/\1 \2 \3 \4 \5/p' | medians
  echo "service log (last lines):"
  tail -n 6 "$log" | sed 's/^/    /'
else
  echo "service log: none in $svc"
fi
[ $ok = 1 ] && echo "acc-service-bench: every output equal to the CPU path's" || { echo "acc-service-bench: OUTPUTS DIFFER"; exit 1; }
