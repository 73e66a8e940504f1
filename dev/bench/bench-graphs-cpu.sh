#!/bin/bash
# compile-train-graphs' CPU per job: Kaldi's and ours (all cores, and one
# thread) on one align_si job's share of transcripts, CPU seconds (user+sys)
# and wall seconds, outputs compared with cmp.
#   mono: the first BENCH_CPU_UTTS (default 1500) transcripts of the synthetic
#         recipe's data/train_x4 with a mono tree and 0.mdl from gmm-init-mono
#         (needs RECIPE = the unpacked recipe's synth-s5 directory);
#   tri1: the fixtures' tri1 tree and model, the fixture transcripts
#         (kaldi/text.int, 40 utterances) replicated to about BENCH_CPU_UTTS.
# Env: KALDI_ROOT or KALDI_BUNDLE (a Kaldi tree with src/bin/ and
# src/gmmbin/, or a bundle with bin/ and lib/; required), BIN (our programs),
# BASE_BIN (optional: another build's programs, a "base" row each), RECIPE,
# BENCH_CPU_UTTS, BENCH_CPU_RUNS (runs per row, default 3: the row shows the
# one with the least CPU). Prints a markdown table.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$top/gmmbin-gpu}
base=${BASE_BIN:-}
utts=${BENCH_CPU_UTTS:-1500}
runs=${BENCH_CPU_RUNS:-3}
fix=$top/tests/data
out=$top/bench-data/graphs-cpu
mkdir -p "$out"
[ -x "$bin/compile-train-graphs" ] || { echo "bench-graphs-cpu: $bin/compile-train-graphs not built"; exit 1; }
root=${KALDI_ROOT:-${KALDI_BUNDLE:-}}
kaldi="" kbin=""
for d in "$root/src/bin" "$root/bin"; do
  [ -x "$d/compile-train-graphs" ] && { kaldi=$d/compile-train-graphs; kbin=$d; break; }
done
[ -n "$kaldi" ] || { echo "bench-graphs-cpu: set KALDI_ROOT or KALDI_BUNDLE"; exit 1; }
[ -d "$root/lib" ] && export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
initmono=$kbin/gmm-init-mono
[ -x "$initmono" ] || initmono=$root/src/gmmbin/gmm-init-mono

# Sets tree, mdl, lex, dis, text for model $1; returns 1 when it is missing.
inputs() {
  case $1 in
    mono)
      local r=${RECIPE:-}
      [ -n "$r" ] && [ -s "$r/data/train_x4/text" ] || return 1
      local l=$r/data/lang
      tree=$out/mono.tree mdl=$out/mono.0.mdl lex=$l/L.fst dis=$l/phones/disambig.int
      text=$out/mono.$utts.int
      [ -s "$mdl" ] || "$initmono" "$l/topo" 39 "$mdl" "$tree" 2>"$out/init.log" || return 1
      [ -s "$text" ] || head -n "$utts" "$r/data/train_x4/text" |
        "$r/utils/sym2int.pl" --map-oov "$(cat "$l/oov.int")" -f 2- "$l/words.txt" >"$text"
      ;;
    tri1)
      tree=$fix/models/tri1/tree mdl=$fix/models/tri1/final.mdl lex=$fix/models/L.fst
      dis=$fix/models/disambig.int text=$out/tri1.$utts.int
      [ -s "$text" ] || awk -v n="$utts" '{ line[NR] = $0 } END {
          for (c = 1; c * NR <= n; c++) for (i = 1; i <= NR; i++) printf "r%04d-%s\n", c, line[i] }' \
        "$fix/kaldi/text.int" >"$text"
      ;;
  esac
}

# run tag prog opts...: the least-CPU run of $runs; sets cpu wall.
run() {
  local tag=$1 prog=$2; shift 2
  local i t best_cpu="" best_wall=""
  for ((i = 0; i < runs; i++)); do
    t=$( { TIMEFORMAT='%R %U %S'; time "$prog" "$@" --read-disambig-syms="$dis" "$tree" "$mdl" "$lex" \
           "ark:$text" "ark:$out/$m.$tag.fsts" 2>"$out/$m.$tag.log"; } 2>&1 )
    local w u s c
    read -r w u s <<<"$t"
    c=$(awk "BEGIN {print $u + $s}")
    if [ -z "$best_cpu" ] || awk "BEGIN {exit !($c < $best_cpu)}"; then best_cpu=$c best_wall=$w; fi
  done
  cpu=$best_cpu wall=$best_wall
}

echo "bench-graphs-cpu: ~$utts transcripts per model, $(nproc) cores, least-CPU run of $runs"
echo
echo "| model | graphs | program | CPU s (user+sys) | wall s | CPU vs Kaldi | identical to Kaldi |"
echo "|---|---|---|---|---|---|---|"
fails=0
for m in mono tri1; do
  inputs $m || { echo "| $m | - | SKIP: no inputs (RECIPE unset or incomplete) | | | | |"; continue; }
  n=$(wc -l <"$text")
  run kaldi "$kaldi"
  kcpu=$cpu
  printf '| %s | %d | Kaldi | %.2f | %.2f | 1.00 | - |\n' "$m" "$n" "$cpu" "$wall"
  rows=("ours:$bin:0" "ours-1thread:$bin:1")
  [ -n "$base" ] && rows+=("base:$base:0" "base-1thread:$base:1")
  for r in "${rows[@]}"; do
    IFS=: read -r tag dir th <<<"$r"
    run "$tag" "$dir/compile-train-graphs" --num-threads="$th"
    same=no
    cmp -s "$out/$m.kaldi.fsts" "$out/$m.$tag.fsts" && same=yes
    [ $same = yes ] || fails=1
    printf '| %s | %d | %s | %.2f | %.2f | %.2f | %s |\n' "$m" "$n" "$tag" "$cpu" "$wall" \
      "$(awk "BEGIN {print $cpu / $kcpu}")" "$same"
  done
done
exit $fails
