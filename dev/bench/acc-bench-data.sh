# Sourced by dev/bench/acc-bench.sh, acc-service-bench.sh and acc-read-bench.sh:
# builds their data once under $data (the fixture's 40 utterances, features
# and Kaldi's alignment, replicated $copies times) with $tools/replicate-archive
# from $fix. Arguments: the model's fixture name (tri1, default: delta
# features; tri2: LDA features). Returns 1 (with replicate-archive's log) when
# that fails.
acc_bench_data() {
  local model=${1:-tri1} feats=delta
  [ "$model" = tri2 ] && feats=lda
  mkdir -p "$data/out"
  [ "$(cat "$data/stamp" 2>/dev/null)" = "$copies" ] && return 0
  rm -f "$data/stamp"
  "$tools/replicate-archive" --print-args=false --type=matrix --copies="$copies" \
    "ark:$fix/feats/$feats.ark" "ark:$data/feats.ark" 2>"$data/out/rep.log" &&
  "$tools/replicate-archive" --print-args=false --type=ali --copies="$copies" \
    "ark:$fix/kaldi/$model/ali.ark" "ark:$data/ali.ark" 2>>"$data/out/rep.log" ||
    { cat "$data/out/rep.log"; return 1; }
  echo "$copies" >"$data/stamp"
}
