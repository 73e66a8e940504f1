#!/bin/bash
# Graph compilation speed: our compile-train-graphs (all cores) against
# Kaldi's (one process), graphs per second, on the fixture transcripts
# (kaldi/text.int, 40 utterances) replicated BENCH_GRAPH_COPIES times (keys
# rNNNN-...), for the mono, tri1 and tri2 fixture models. Both write their
# archive into md5sum, so the check that the outputs are byte-identical costs
# both sides the same.
# Env: KALDI_ROOT or KALDI_BUNDLE (a Kaldi tree with src/bin/, or a bundle with bin/ and lib/;
# without it only our figures), BIN (our programs), BENCH_GRAPH_COPIES
# (default 50 = 2,000 graphs per model), BENCH_GRAPH_MODELS (default
# "mono tri1 tri2"), BENCH_GRAPH_THREADS (our --num-threads, default 0 = all
# cores). Prints a markdown table.
set -u
calc() { awk "BEGIN {print $*}"; }
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$top/gmmbin-gpu}
copies=${BENCH_GRAPH_COPIES:-50}
models=${BENCH_GRAPH_MODELS:-mono tri1 tri2}
threads=${BENCH_GRAPH_THREADS:-0}
fix=$top/tests/data
out=$top/bench-data/graphs
mkdir -p "$out"
[ -x "$bin/compile-train-graphs" ] || { echo "bench-graphs: $bin/compile-train-graphs not built"; exit 1; }

kaldi=""
root=${KALDI_ROOT:-${KALDI_BUNDLE:-}}
if [ -n "$root" ]; then
  for p in "$root/src/bin/compile-train-graphs" "$root/bin/compile-train-graphs"; do
    [ -x "$p" ] && { kaldi=$p; break; }
  done
  [ -d "$root/lib" ] && export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -n "$kaldi" ] || echo "bench-graphs: no compile-train-graphs under $root"
fi

text=$out/text.$copies.int
if [ ! -s "$text" ]; then
  awk -v n="$copies" '{ line[NR] = $0 } END {
      for (c = 1; c <= n; c++) for (i = 1; i <= NR; i++) printf "r%04d-%s\n", c, line[i] }' \
    "$fix/kaldi/text.int" >"$text"
fi
ngraphs=$(wc -l <"$text")
cores=$(nproc)
echo "bench-graphs: $ngraphs graphs per model, $cores cores, our --num-threads=$threads"
echo
echo "| model | graphs | Kaldi s | Kaldi graphs/s | ours s | ours graphs/s | speed-up | identical |"
echo "|---|---|---|---|---|---|---|---|"
fails=0
run() {  # tag prog opts... ; sets secs
  local tag=$1 prog=$2; shift 2
  local t0 t1
  t0=$(date +%s.%N)
  "$prog" "$@" --read-disambig-syms="$fix/models/disambig.int" "$fix/models/$m/tree" \
    "$fix/models/$m/final.mdl" "$fix/models/L.fst" "ark:$text" \
    "ark:| md5sum > $out/$m.$tag.md5" 2>"$out/$m.$tag.log"
  local rc=$?
  t1=$(date +%s.%N)
  secs=$(calc "$t1 - $t0")
  [ $rc = 0 ] || { echo "bench-graphs: $tag failed on $m (exit $rc), see $out/$m.$tag.log"; fails=1; }
}
for m in $models; do
  run ours "$bin/compile-train-graphs" --num-threads="$threads"
  ours=$secs
  if [ -n "$kaldi" ]; then
    run kaldi "$kaldi"
    k=$secs
    same=no; cmp -s "$out/$m.ours.md5" "$out/$m.kaldi.md5" && same=yes
    [ $same = yes ] || fails=1
    printf '| %s | %d | %.2f | %.0f | %.2f | %.0f | %.2fx | %s |\n' "$m" "$ngraphs" "$k" \
      "$(calc "$ngraphs / $k")" "$ours" "$(calc "$ngraphs / $ours")" "$(calc "$k / $ours")" "$same"
  else
    printf '| %s | %d | - | - | %.2f | %.0f | - | - |\n' "$m" "$ngraphs" "$ours" \
      "$(calc "$ngraphs / $ours")"
  fi
done
exit $fails
