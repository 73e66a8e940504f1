# Sourced by dev/bench/acc-bench.sh and dev/bench/acc-service-bench.sh: builds their
# data once under $data (the fixture's 40 utterances, delta features and
# Kaldi's tri1 alignment, replicated $copies times) with $tools/replicate-archive
# from $fix. Returns 1 (with replicate-archive's log) when that fails.
acc_bench_data() {
  mkdir -p "$data/out"
  [ "$(cat "$data/stamp" 2>/dev/null)" = "$copies" ] && return 0
  rm -f "$data/stamp"
  "$tools/replicate-archive" --print-args=false --type=matrix --copies="$copies" \
    "ark:$fix/feats/delta.ark" "ark:$data/feats.ark" 2>"$data/out/rep.log" &&
  "$tools/replicate-archive" --print-args=false --type=ali --copies="$copies" \
    "ark:$fix/kaldi/tri1/ali.ark" "ark:$data/ali.ark" 2>>"$data/out/rep.log" ||
    { cat "$data/out/rep.log"; return 1; }
  echo "$copies" >"$data/stamp"
}
