#!/bin/bash
# Makes Kaldi's reference outputs of tests/cli/graphs.sh with the stock Kaldi
# bundle (KALDI_BUNDLE: the unpacked bundle's directory). Run from this directory; the
# command line is the first line of each log, the exit status appended.
set -u
. "${KALDI_BUNDLE:?set KALDI_BUNDLE to the unpacked Kaldi bundle}/env.sh"
cd ..
D=models
run() {  # log, command...
  local log=$1; shift
  "$@" 2>"text/$log"; echo "exit=$?" >>"text/$log"
}
run edge.log compile-train-graphs --read-disambig-syms=$D/disambig.int $D/tri1/tree \
  $D/tri1/final.mdl $D/L.fst ark:text/edge.int ark,t:text/edge.txt.fsts
run oov.log compile-train-graphs --read-disambig-syms=$D/disambig.int $D/tri1/tree \
  $D/tri1/final.mdl $D/L.fst ark:text/oov.int ark:text/oov.fsts
rm -f text/oov.fsts
# Graph scales other than compile-train-graphs' 0/0 (gmm-align and
# align-equal compile with 1/1): md5 of Kaldi's archives.
for x in "mono --transition-scale=1.0 --self-loop-scale=1.0" \
         "tri2 --transition-scale=1.0 --self-loop-scale=0.1 --reorder=false"; do
  set -- $x; m=$1; shift
  compile-train-graphs "$@" --read-disambig-syms=$D/disambig.int $D/$m/tree $D/$m/final.mdl \
    $D/L.fst ark:kaldi/text.int ark:- 2>/dev/null | md5sum | cut -d' ' -f1 >text/scales-$m.md5
done
# gmm-align with align_si.sh's options and align-equal on the 40 fixture
# utterances; both on edge/feats.ark (a cut utterance, a zero-length one)
# with text4.int and with edge-tr.int (one transcript missing).
GA="--read-disambig-syms=$D/disambig.int --beam=10 --retry-beam=40 --acoustic-scale=0.1 --self-loop-scale=0.1"
for m in mono tri2; do
  f=delta; [ $m = tri2 ] && f=lda
  run gmm-align-$m.log gmm-align $GA $D/$m/tree $D/$m/final.mdl $D/L.fst ark:feats/$f.ark \
    ark:kaldi/text.int ark:text/gmm-align-$m.ark
done
run align-equal-tri1.log align-equal --read-disambig-syms=$D/disambig.int $D/tri1/tree \
  $D/tri1/final.mdl $D/L.fst ark:feats/delta.ark ark:kaldi/text.int ark:text/align-equal-tri1.ark
for t in text4 edge-tr; do
  tf=edge/$t.int; [ $t = edge-tr ] && tf=text/edge-tr.int
  run gmm-align-$t.log gmm-align $GA $D/mono/tree $D/mono/final.mdl $D/L.fst \
    ark:edge/feats.ark ark:$tf ark:text/gmm-align-$t.ark
  run align-equal-$t.log align-equal --read-disambig-syms=$D/disambig.int $D/mono/tree \
    $D/mono/final.mdl $D/L.fst ark:edge/feats.ark ark:$tf ark:text/align-equal-$t.ark
done
run gmm-align-oov.log gmm-align $GA $D/mono/tree $D/mono/final.mdl $D/L.fst \
  ark:feats/delta.ark ark:text/oov-ga.int ark:text/gmm-align-oov.ark
rm -f text/gmm-align-oov.ark
