#!/bin/bash
# The job's own side through the GPU service, on the GPU host's cores
# (no GPU used): the tri2 fixture's graphs replicated (COPIES, default
# 2480 = ~97.5 h) read as the aligning programs read them, in order (one
# thread, as before) and ahead on threads (the default now), and the
# shared-memory copies of 12 and 6 batches of 460 MB (97.5 h and 48.75 h
# in --batch-size=8192 batches) with fresh regions faulted by the copy (as
# before) and faulted in ahead (the default now). REPS runs each (default 3).
# Runs from dev/device/device-pack.sh's .carry with tests/data in the tree:
#   dev/device/jobside-bench.sh        (env COPIES, REPS)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
tools=${TOOLS:-$top/.carry/build/tools} fix=$top/tests/data
export LD_LIBRARY_PATH="$top/.carry/lib:${LD_LIBRARY_PATH:-}"
copies=${COPIES:-2480} reps=${REPS:-3}
w=$(mktemp -d /tmp/jobside.XXXXXX)
trap 'rm -rf "$w"' EXIT
echo "jobside-bench: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
"$tools/replicate-archive" --print-args=false --type=fst --copies="$copies" \
  "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$w/g.fsts" 2>/dev/null
cat "$w/g.fsts" >/dev/null  # in the page cache, as a second iteration finds it
echo "## graphs, x$copies ($(du -m "$w/g.fsts" | cut -f1) MB)"
t=$(nproc); [ "$t" -gt 8 ] && t=8
for ((r = 1; r <= reps; r++)); do
  "$tools/graph-read-bench" --print-args=false --threads=0 "ark:$w/g.fsts" 2>/dev/null
  "$tools/graph-read-bench" --print-args=false --threads=$t "ark:$w/g.fsts" 2>/dev/null
  "$tools/graph-read-bench" --print-args=false --scan "$w/g.fsts" 2>/dev/null
done
echo "## shared-memory copies"
for b in 12 6; do
  for ((r = 1; r <= reps; r++)); do
    for warm in false true; do
      "$tools/shm-send-bench" --print-args=false --warm=$warm --batches=$b --batch-mb=460 2>/dev/null
    done
  done
done
