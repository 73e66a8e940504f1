#!/bin/bash
# gmm-align and align-equal (graphs compiled in-process) against Kaldi: the
# commands of tests/data/text/*.log (made by text/make-refs.sh with the stock
# Kaldi bundle) must give byte-identical alignment archives, the same log
# messages in the same order and the same exit codes (a Kaldi assertion,
# exit 134, is our fatal error, exit 255); graph scales other than 0/0 give
# Kaldi's graphs. Env: BIN, TOP; USE_GPU (default no) picks gmm-align's
# backend. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
for p in gmm-align align-equal compile-train-graphs; do
  [ -x "$BIN/$p" ] || { echo "SKIP: $BIN/$p not built"; exit 77; }
done
cd "$TOP/tests/data" || exit 1
export PATH="$BIN:$PATH"
use_gpu=${USE_GPU:-no}
tmp=$(mktemp -d /tmp/align-text-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
norm() {  # message part of Kaldi log lines; no stack traces, blank lines, backend line
  awk '/^$/ {next}
       /^exit=[0-9]+$/ {next}
       /^\[ Stack-Trace: \]$/ {skip=1; next}
       skip && /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG)/ {skip=0}
       skip {next}
       /^LOG \([^)]*:(galign_|kio_cuda_|kio_blas_|gsvc_)[a-z_]*\(\)/ {next}
       /^LOG \([^)]*:kio_log_ours\(\)/ {next}
       /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG\[[0-9]+\]) \(/ {
         lvl=$1; i=index($0, ") "); print lvl " " substr($0, i + 2); next }
       {print}' "$1"
}

# run_case NAME: replays text/NAME.log's command, output into $tmp.
run_case() {
  local name=$1 klog=text/$1.log cmd want_rc
  cmd=$(head -n 1 "$klog")
  cmd=${cmd//ark:text\/$name.ark/ark:$tmp\/$name.ark}
  case "$cmd" in gmm-align*) cmd="gmm-align --use-gpu=$use_gpu ${cmd#gmm-align }" ;; esac
  want_rc=$(sed -n 's/^exit=\([0-9]*\)$/\1/p' "$klog")
  [ "$want_rc" = 134 ] && want_rc=255
  eval "$cmd" 2>"$tmp/$name.log"
  local rc=$?
  [ "$rc" = "$want_rc" ] || fail "$name: exit $rc, want $want_rc"
  if [ -f "text/$name.ark" ]; then
    cmp -s "$tmp/$name.ark" "text/$name.ark" || fail "$name: alignments differ from text/$name.ark"
  else
    [ ! -s "$tmp/$name.ark" ] || fail "$name: output left behind after a fatal error"
  fi
  sed 1d "$klog" | norm /dev/stdin >"$tmp/$name.want"
  sed 1d "$tmp/$name.log" | norm /dev/stdin >"$tmp/$name.got"
  diff "$tmp/$name.want" "$tmp/$name.got" >"$tmp/$name.diff" ||
    { fail "$name: log messages differ"; cat "$tmp/$name.diff"; }
}
for c in gmm-align-mono gmm-align-tri2 gmm-align-text4 gmm-align-edge-tr gmm-align-oov \
         align-equal-tri1 align-equal-text4 align-equal-edge-tr; do
  run_case $c
done

# The graphs gmm-align and align-equal compile (scales 1/1 and others).
for x in "mono --transition-scale=1.0 --self-loop-scale=1.0" \
         "tri2 --transition-scale=1.0 --self-loop-scale=0.1 --reorder=false"; do
  set -- $x; m=$1; shift
  got=$(compile-train-graphs "$@" --read-disambig-syms=models/disambig.int models/$m/tree \
        models/$m/final.mdl models/L.fst ark:kaldi/text.int ark:- 2>/dev/null | md5sum | cut -d' ' -f1)
  [ "$got" = "$(cat text/scales-$m.md5)" ] || fail "scales $m $*: graphs differ from Kaldi's"
done

# Wrong arguments: usage, exit 1.
gmm-align a b c >/dev/null 2>&1; rc=$?
[ $rc = 1 ] || fail "gmm-align usage: exit $rc"
align-equal a b >/dev/null 2>&1; rc=$?
[ $rc = 1 ] || fail "align-equal usage: exit $rc"

[ $fails -eq 0 ] || exit 1
echo "align-text: all cases passed"
