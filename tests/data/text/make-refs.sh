#!/bin/bash
# Makes Kaldi's reference outputs of tests/cli/graphs.sh with the stock Kaldi
# bundle (KALDI_BUNDLE, default /work/kb/kb). Run from this directory; the
# command line is the first line of each log, the exit status appended.
set -u
. "${KALDI_BUNDLE:-/work/kb/kb}/env.sh"
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
