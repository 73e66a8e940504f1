#!/bin/bash
# Where train_deltas.sh's stages before the loop spent their time, from the
# modification times of the files they leave (nanoseconds; run.pl's logs
# have whole seconds only): each step's end is the last write of its log,
# its span the time since the previous step's end.
#   dev/bench/tree-stage-split.sh EXP   (a train_deltas experiment directory)
# Prints one line: the steps' spans in seconds, from num_jobs (written
# after the data split) to the last convert.JOB.log.
set -u
d=${1:?usage: tree-stage-split.sh EXP}
mt() { stat -c %.9Y "$@" 2>/dev/null | sort -n | tail -n 1; }
t0=$(mt "$d/num_jobs")
[ -n "$t0" ] || { echo "tree-stage-split: no $d/num_jobs"; exit 1; }
line="tree stage of $d:" prev=$t0 total=0
for step in "acc-tree-stats:acc_tree.*.log" "sum-tree-stats:sum_tree_acc.log" \
            "cluster-phones:questions.log" "compile-questions:compile_questions.log" \
            "build-tree:build_tree.log" "gmm-init-model:init_model.log" "gmm-mixup:mixup.log" \
            "convert-ali:convert.*.log"; do
  name=${step%%:*}
  # shellcheck disable=SC2086
  t=$(mt $d/log/${step#*:})
  [ -n "$t" ] || { line="$line $name -,"; continue; }
  line="$line $(awk -v a="$prev" -v b="$t" 'BEGIN { printf "%.2f", b - a }') $name,"
  prev=$t
done
echo "${line%,}; in all $(awk -v a="$t0" -v b="$prev" 'BEGIN { printf "%.2f", b - a }') s"
