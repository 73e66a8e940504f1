#!/bin/bash
# compile-train-graphs against Kaldi: the graphs of every fixture model
# (graphs/M.fsts.gz, made by Kaldi's compile-train-graphs from
# kaldi/text.int) must come out byte-identical, whatever the batch size and
# number of threads; Kaldi's text form, log lines and exit codes on the edge
# cases of text/ (made by text/make-refs.sh with the stock Kaldi bundle).
# Env: BIN = directory of the programs, TOP = repo root. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
prog="$BIN/compile-train-graphs"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
cd "$TOP/tests/data" || exit 1
export PATH="$BIN:$PATH"
tmp=$(mktemp -d /tmp/graphs-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
norm() {  # message part of Kaldi log lines, no stack traces, no blank lines
  awk '/^$/ {next}
       /^exit=[0-9]+$/ {next}
       /^\[ Stack-Trace: \]$/ {skip=1; next}
       skip && /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG)/ {skip=0}
       skip {next}
       /^LOG \([^)]*:kio_log_ours\(\)/ {next}
       /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG\[[0-9]+\]) \(/ {
         lvl=$1; i=index($0, ") "); print lvl " " substr($0, i + 2); next }
       {print}' "$1"
}
D=models

for m in mono tri1 tri2; do
  gunzip -c graphs/$m.fsts.gz >"$tmp/$m.kaldi"
  for opts in "" "--num-threads=1" "--num-threads=3 --batch-size=7" "--batch-size=1"; do
    compile-train-graphs $opts --read-disambig-syms=$D/disambig.int $D/$m/tree \
      $D/$m/final.mdl $D/L.fst ark:kaldi/text.int ark:"$tmp/$m.ours" 2>"$tmp/$m.log"
    rc=$?
    [ $rc = 0 ] || fail "$m $opts: exit $rc"
    cmp -s "$tmp/$m.kaldi" "$tmp/$m.ours" || fail "$m $opts: graphs differ from graphs/$m.fsts.gz"
    grep -q "compile-train-graphs: succeeded for 40 graphs, failed for 0" "$tmp/$m.log" ||
      fail "$m $opts: log line missing"
  done
done

# Through a gzip pipe, as the recipes write them.
compile-train-graphs --read-disambig-syms=$D/disambig.int $D/tri1/tree $D/tri1/final.mdl \
  $D/L.fst ark:kaldi/text.int "ark:| gzip -c > $tmp/tri1.gz" 2>/dev/null || fail "gzip pipe: exit"
gunzip -c "$tmp/tri1.gz" | cmp -s - "$tmp/tri1.kaldi" || fail "gzip pipe: graphs differ"

# run_case NAME: replays text/NAME.log's command (outputs into $tmp).
run_case() {
  local name=$1 want_rc=$2
  local klog=text/$name.log cmd
  cmd=$(head -n 1 "$klog")
  cmd=${cmd//ark,t:text\//ark,t:$tmp\/}
  cmd=${cmd//ark:text\/$name.fsts/ark:$tmp\/$name.fsts}
  eval "$cmd" 2>"$tmp/$name.log"
  local rc=$?
  [ "$rc" = "$want_rc" ] || fail "$name: exit $rc, want $want_rc (Kaldi: $(tail -n 1 "$klog"))"
  sed 1d "$klog" | norm /dev/stdin >"$tmp/$name.want"
  sed 1d "$tmp/$name.log" | norm /dev/stdin >"$tmp/$name.got"
  diff "$tmp/$name.want" "$tmp/$name.got" >"$tmp/$name.diff" ||
    { fail "$name: log messages differ"; cat "$tmp/$name.diff"; }
}
# An empty transcript and a short one, written in text form.
run_case edge 0
cmp -s "$tmp/edge.txt.fsts" text/edge.txt.fsts || fail "edge: text-form graphs differ"
# A word the lexicon lacks: Kaldi's assertion (Kaldi aborts with 134; our
# fatal errors exit 255) and nothing left as if complete.
run_case oov 255
[ ! -s "$tmp/oov.fsts" ] || fail "oov: output archive left behind"

# Wrong arguments: usage, exit 1.
compile-train-graphs a b c >/dev/null 2>&1; rc=$?
[ $rc = 1 ] || fail "usage: exit $rc"
# A missing lexicon: ERROR, 255.
compile-train-graphs $D/tri1/tree $D/tri1/final.mdl /nonexistent ark:kaldi/text.int \
  ark:/dev/null 2>"$tmp/nolex.log"; rc=$?
[ $rc = 255 ] || fail "missing lexicon: exit $rc"
grep -q '^ERROR' "$tmp/nolex.log" || fail "missing lexicon: no ERROR line"
# A disambiguation symbol that is a phone.
echo 5 >"$tmp/dis.int"
compile-train-graphs --read-disambig-syms="$tmp/dis.int" $D/tri1/tree $D/tri1/final.mdl \
  $D/L.fst ark:kaldi/text.int ark:/dev/null 2>"$tmp/dis.log"; rc=$?
[ $rc = 255 ] || fail "disambig phone: exit $rc"
grep -q 'Disambiguation symbol 5 is also a phone' "$tmp/dis.log" || fail "disambig phone: message"

[ $fails -eq 0 ] || exit 1
echo "graphs: all cases passed"
