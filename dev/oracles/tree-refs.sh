#!/bin/bash
# Makes tests/data/tree with Kaldi's own acc-tree-stats and sum-tree-stats (a
# Kaldi bundle, or Kaldi's bin/ on PATH): pipe-ali.txt, equal alignments of
# tests/data/featpipe's 12 utterances (a graph of one word each, so the
# stage's feature pipe runs on real MFCC), and for each case of
# tests/cli/lib/tree-cases.sh (build-tree's with questions.qst, made here
# by cluster-phones and compile-questions) the md5 of the output and the exit status
# (expect.txt: CASE MD5 EXIT, MD5 "-" where no output was left) and the
# Kaldi log lines (CASE.log, the scratch folder written $T). The statistics
# add in double without BLAS; only the pipe case's add-deltas rounds as the
# OpenBLAS kernels: Haswell's (OPENBLAS_CORETYPE; the test forces that
# profile).
# usage: dev/oracles/tree-refs.sh; needs KALDI_BUNDLE or Kaldi on PATH.
set -eu
export OPENBLAS_CORETYPE=Haswell
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/tests/data/tree
[ -n "${KALDI_BUNDLE:-}" ] && . "$KALDI_BUNDLE/env.sh"
mkdir -p "$out"
cd "$top/tests/data"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk 'NR == FNR { w[n++] = $2; next } { print $1, w[(FNR - 1) % n] }' kaldi/text.int \
  featpipe/utt2spk >"$tmp/text.int"
compile-train-graphs --read-disambig-syms=models/disambig.int models/mono/tree \
  models/mono/final.mdl models/L.fst ark:"$tmp/text.int" ark:"$tmp/g.fsts" 2>/dev/null
align-equal-compiled ark:"$tmp/g.fsts" scp:featpipe/feats.scp ark,t:"$out/pipe-ali.txt" \
  2>/dev/null
. "$top/tests/cli/lib/tree-cases.sh"
tree_inputs "$tmp" "$(command -v acc-tree-stats)"
# build-tree's questions: the recipe's way (cluster-phones on the sets, then
# compile-questions)
cluster-phones "$tmp/all.acc" "$tmp/sets" "$tmp/questions.int" 2>/dev/null
compile-questions models/topo "$tmp/questions.int" "$out/questions.qst" 2>/dev/null
: >"$out/expect.txt"
T=$tmp
for c in "${tree_cases[@]}"; do
  IFS='|' read -r name prog args <<<"$c"
  o=$tmp/out.$name
  rm -f "$o"
  rc=0
  eval "$prog ${args//@OUT@/$o}" 2>"$tmp/log" || rc=$?
  md5=-
  [ -f "$o" ] && md5=$(md5sum <"$o" | cut -d' ' -f1)
  echo "$name $md5 $rc" >>"$out/expect.txt"
  grep -E "$tree_log_lines" "$tmp/log" | sed "$tree_log_sed; s#$tmp#\$T#g" >"$out/$name.log" ||
    true
done
cat "$out/expect.txt"
