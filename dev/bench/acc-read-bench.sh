#!/bin/bash
# acc-read-bench: gmm-acc-stats-ali's reading (what a one-process GPU run's
# reading thread does: features in order, alignments by key) read in order
# against read ahead on threads (build/tools/acc-read-bench --threads=N,
# kio_seq_read_ahead + kio_ra_read_ahead), and the whole program on the CPU
# (--use-gpu=no) with KALDI_GPU_DEV_READ_THREADS=0 against its default.
# Data: the tri2 fixture's LDA features and Kaldi's alignment replicated
# ACC_READ_COPIES times (default 200: 2.8M frames, 0.45 GB; 800 = 1.8 GB;
# dev/device/onepass-regress.sh uses 2,480 = 97.5 h), built once under
# bench-data/acc-read/ and read once before timing (page cache).
# Env: BIN, TOOLS, ACC_READ_COPIES, ACC_READ_REPS (3), ACC_READ_THREADS
# ("0 1 2 4 8"), ACC_READ_PROGRAM (1: also the program; 0: not).
# Prints a markdown table: wall seconds (min-max), the reading thread's CPU
# seconds, all threads' CPU seconds, and whether every run read the same
# values (checksum) / wrote the same statistics.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$top/gmmbin-gpu}
tools=${TOOLS:-$top/${BUILD:-build}/tools}
copies=${ACC_READ_COPIES:-200}
reps=${ACC_READ_REPS:-3}
threads_list=${ACC_READ_THREADS:-0 1 2 4 8}
data=$top/bench-data/acc-read
fix=$top/tests/data
for p in "$bin/gmm-acc-stats-ali" "$tools/replicate-archive" "$tools/acc-read-bench"; do
  [ -x "$p" ] || { echo "acc-read-bench: $p not built (run make)"; exit 1; }
done
. "$top/dev/bench/acc-bench-data.sh"
acc_bench_data tri2 || exit 1
cat "$data/feats.ark" "$data/ali.ark" >/dev/null
mdl=$fix/models/tri2/final.mdl
feats="ark,s,cs:$data/feats.ark" ali="ark:$data/ali.ark"

echo "acc-read-bench: $(du -h "$data/feats.ark" | cut -f1) of features ($copies copies), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| reader | wall s | reading thread CPU s | all threads CPU s | same values |"
echo "|---|---:|---:|---:|---|"
ref="" bad=0
# range VALUES...: "min-max" (or one value)
range() { printf '%s\n' "$@" | sort -g | sed -n '1p;$p' | paste -sd- | sed 's/^\([^-]*\)-\1$/\1/'; }
for t in $threads_list; do
  walls=() cpus=() alls=() same=yes
  for r in $(seq 1 "$reps"); do
    line=$("$tools/acc-read-bench" --print-args=false --threads="$t" "$mdl" "$feats" "$ali" 2>"$data/out/read.log") ||
      { echo "acc-read-bench failed (threads $t):"; cat "$data/out/read.log"; exit 1; }
    walls+=("$(sed -n 's/.* frames, \([0-9.]*\) s,.*/\1/p' <<<"$line")")
    cpus+=("$(sed -n 's/.*this thread \([0-9.]*\) s.*/\1/p' <<<"$line")")
    alls+=("$(sed -n 's/.*all threads \([0-9.]*\) s.*/\1/p' <<<"$line")")
    sum=$(sed -n 's/.*checksum \([0-9a-f]*\).*/\1/p' <<<"$line")
    [ -n "$ref" ] || ref=$sum
    [ "$sum" = "$ref" ] || { same=no; bad=1; }
  done
  name="in order"; [ "$t" = 0 ] || name="ahead, $t threads"
  echo "| $name | $(range "${walls[@]}") | $(range "${cpus[@]}") | $(range "${alls[@]}") | $same |"
done

if [ "${ACC_READ_PROGRAM:-1}" = 1 ]; then
  echo
  echo "gmm-acc-stats-ali --use-gpu=no (the CPU accumulates on the reading thread):"
  echo
  echo "| KALDI_GPU_DEV_READ_THREADS | wall s | same statistics |"
  echo "|---|---:|---|"
  for t in 0 default; do
    walls=() same=yes
    for r in $(seq 1 "$reps"); do
      s0=$(date +%s.%N)
      if [ "$t" = default ]; then
        "$bin/gmm-acc-stats-ali" --use-gpu=no "$mdl" "$feats" "$ali" "$data/out/$t.acc" 2>"$data/out/prog.log"
      else
        KALDI_GPU_DEV_READ_THREADS=$t "$bin/gmm-acc-stats-ali" --use-gpu=no "$mdl" "$feats" "$ali" \
          "$data/out/$t.acc" 2>"$data/out/prog.log"
      fi || { echo "gmm-acc-stats-ali failed:"; tail -n 5 "$data/out/prog.log"; exit 1; }
      walls+=("$(awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')")
    done
    [ "$t" = 0 ] || cmp -s "$data/out/0.acc" "$data/out/$t.acc" || { same=no; bad=1; }
    echo "| $t | $(range "${walls[@]}") | $same |"
  done
fi
exit $bad
