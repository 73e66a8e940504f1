#!/bin/bash
# The tree statistics of a triphone stage (steps/train_deltas.sh stage -3):
# NJ jobs of
#   acc-tree-stats --ci-phones=CI ALI/final.mdl "apply-cmvn ... | add-deltas ... |"
#     "ark:gunzip -c ALI/ali.JOB.gz|" JOB.treeacc
# at once (as run.pl starts them), then sum-tree-stats treeacc *.treeacc,
# then cluster-phones treeacc sets.int questions.int, (Kaldi's compile-questions
# on both sides) and build-tree --verbose=1 --max-leaves=LEAVES treeacc roots.int
# questions.qst topo tree:
# Kaldi's programs against ours, each side REPEAT times (median wall
# seconds), and whether the treeacc files, questions and trees are identical.
# usage: dev/bench/tree-bench.sh CORPUS ALI_DIR [DATA]
#   CORPUS: a synth-s5 corpus dir (egs/synth/s5/run.sh --work), ALI_DIR: an
#   alignment dir in it (e.g. exp_kaldi/mono_ali: ali.*.gz, final.mdl,
#   num_jobs), DATA the data dir the alignments are of (data/train; its
#   splitNJ made by run.sh, NJ = ALI_DIR/num_jobs).
# Env: KALDI_BUNDLE or KALDI_ROOT (Kaldi's programs: required), BIN (ours),
# REPEAT (3), LEAVES (2000, train_deltas' count in the recipe). Prints a
# markdown table.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${BIN:-$top/gmmbin-gpu}" && pwd)
[ $# -ge 2 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
corpus=$(cd "$1" && pwd) ali=$2 data=${3:-data/train}
repeat=${REPEAT:-3} leaves=${LEAVES:-2000}
kb=""
for d in "${KALDI_BUNDLE:-}/bin" "${KALDI_ROOT:-}/src/bin"; do
  [ -x "$d/acc-tree-stats" ] && kb=$(cd "$d" && pwd) && break
done
[ -n "$kb" ] || { echo "tree-bench: no Kaldi (KALDI_BUNDLE or KALDI_ROOT)"; exit 1; }
[ -n "${KALDI_BUNDLE:-}" ] && export LD_LIBRARY_PATH=$KALDI_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cd "$corpus" || exit 1
nj=$(cat "$ali/num_jobs")
sdata=$data/split$nj
[ -d "$sdata/1" ] || { echo "tree-bench: no $sdata (run the recipe's stages first)"; exit 1; }
ci=$(cat data/lang/phones/context_indep.csl)
tmp=$(mktemp -d /tmp/tree-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# apply-cmvn and add-deltas are Kaldi's on both sides (ours computes that
# pipe in process); ours rounds as the Kaldi on PATH
export PATH=$kb:$PATH LC_ALL=C

lang=data/lang
side() {  # side NAME BINDIR: the jobs, the sum, the questions, the tree; seconds
  local d=$tmp/$1 j t0 t1 t2 t3 t4 t5
  rm -rf "$d"
  mkdir -p "$d"
  t0=$(date +%s.%N)
  for j in $(seq "$nj"); do
    "$2/acc-tree-stats" --ci-phones="$ci" "$ali/final.mdl" \
      "ark,s,cs:apply-cmvn --utt2spk=ark:$sdata/$j/utt2spk scp:$sdata/$j/cmvn.scp scp:$sdata/$j/feats.scp ark:- | add-deltas ark:- ark:- |" \
      "ark:gunzip -c $ali/ali.$j.gz|" "$d/$j.treeacc" 2>"$d/acc.$j.log" &
  done
  wait
  t1=$(date +%s.%N)
  "$2/sum-tree-stats" "$d/treeacc" "$d"/*.treeacc 2>"$d/sum.log"
  t2=$(date +%s.%N)
  "$2/cluster-phones" "$d/treeacc" $lang/phones/sets.int "$d/questions.int" 2>"$d/cp.log"
  t3=$(date +%s.%N)
  cat $lang/phones/extra_questions.int >>"$d/questions.int"
  "$kb/compile-questions" $lang/topo "$d/questions.int" "$d/questions.qst" 2>/dev/null
  t4=$(date +%s.%N)
  "$2/build-tree" --verbose=1 --max-leaves="$leaves" "$d/treeacc" $lang/phones/roots.int \
    "$d/questions.qst" $lang/topo "$d/tree" 2>"$d/tree.log"
  t5=$(date +%s.%N)
  echo "$t0 $t1 $t2 $t3 $t4 $t5" |
    awk '{ printf "%.3f %.3f %.3f %.3f\n", $2 - $1, $3 - $2, $4 - $3, $6 - $5 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for s in kaldi ours; do
  b=$kb
  [ $s = ours ] && b=$bin
  for r in $(seq "$repeat"); do side $s "$b"; done >"$tmp/$s.times"
done
same=no
cmp -s "$tmp/kaldi/treeacc" "$tmp/ours/treeacc" && same=yes
for j in $(seq "$nj"); do cmp -s "$tmp/kaldi/$j.treeacc" "$tmp/ours/$j.treeacc" || same=no; done
tsame=no
cmp -s "$tmp/kaldi/questions.int" "$tmp/ours/questions.int" && cmp -s "$tmp/kaldi/tree" "$tmp/ours/tree" &&
  tsame=yes
kc=$(cut -d' ' -f3 "$tmp/kaldi.times" | median) oc=$(cut -d' ' -f3 "$tmp/ours.times" | median)
kt=$(cut -d' ' -f4 "$tmp/kaldi.times" | median) ot=$(cut -d' ' -f4 "$tmp/ours.times" | median)
ka=$(cut -d' ' -f1 "$tmp/kaldi.times" | median) ks=$(cut -d' ' -f2 "$tmp/kaldi.times" | median)
oa=$(cut -d' ' -f1 "$tmp/ours.times" | median) os=$(cut -d' ' -f2 "$tmp/ours.times" | median)
echo "| step ($nj jobs, $(nproc) cores; median of $repeat) | Kaldi s | ours s | speed-up |"
echo "|---|---|---|---|"
awk -v k="$ka" -v o="$oa" 'BEGIN { printf "| acc-tree-stats (all jobs) | %.2f | %.2f | %.1fx |\n", k, o, k / o }'
awk -v k="$ks" -v o="$os" 'BEGIN { printf "| sum-tree-stats | %.2f | %.2f | %.1fx |\n", k, o, k / o }'
awk -v k="$kc" -v o="$oc" 'BEGIN { printf "| cluster-phones | %.2f | %.2f | %.1fx |\n", k, o, k / o }'
awk -v k="$kt" -v o="$ot" -v l="$leaves" \
  'BEGIN { printf "| build-tree (--max-leaves %d) | %.2f | %.2f | %.1fx |\n", l, k, o, k / o }'
echo "treeacc files identical (each job's and the sum): $same; questions and trees: $tsame"
[ $same = yes ] && [ $tsame = yes ]
