#!/bin/bash
# acc-tree-stats, sum-tree-stats, build-tree and cluster-phones against
# Kaldi's own (bin/acc-tree-stats.cc, bin/sum-tree-stats.cc,
# bin/build-tree.cc, bin/cluster-phones.cc): every case of tests/cli/lib/tree-cases.sh (context
# widths, --ci-phones, --phone-map, text and binary, an alignment archive
# with files missing, of another length and ending inside a phone, the
# stage's feature pipe computed in-process, sums of overlapping parts and
# of text and binary inputs; trees of shared, not-shared and one-phone
# roots, --max-leaves below and above the roots' count, --thresh,
# --cluster-thresh, --round-num-leaves=false, text output, roots naming a
# phone the topology lacks or missing one of the statistics; questions of
# the central state and of all three): the output's md5, the exit status and the
# lines of Kaldi's log as recorded by dev/oracles/tree-refs.sh
# (tests/data/tree). Where Kaldi's ERROR does not name the file (a treeacc
# that is not one, a missing input) ours must: checked by its own. Also:
# a truncated input, an alignment with a transition-id out of range (Kaldi
# asserts): ERROR naming the file or utterance, exit 255, no output; the
# parallel sum equal to the one-thread sum of a pipe input.
# Env: BIN, TOP. Exit 0 pass, 1 fail.
set -u
: "${BIN:?}" "${TOP:?}"
for p in acc-tree-stats sum-tree-stats build-tree cluster-phones; do
  if [ ! -x "$BIN/$p" ]; then echo "SKIP: $BIN/$p not built"; exit 77; fi
done
cd "$TOP/tests/data" || exit 1
# the pipe case's add-deltas rounds as the kernels the references had
export KALDI_GPU_BLAS_PROFILE=hsw
tmp=$(mktemp -d /tmp/tree.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$TOP/tests/cli/lib/tree-cases.sh"
tree_inputs "$tmp" "$BIN/acc-tree-stats" || fail "making the inputs"
T=$tmp
n=0
for c in "${tree_cases[@]}"; do
  IFS='|' read -r name prog args <<<"$c"
  o=$tmp/out.$name
  rm -f "$o"
  rc=0
  eval "\"$BIN/$prog\" ${args//@OUT@/$o}" 2>"$tmp/log" || rc=$?
  md5=-
  [ -f "$o" ] && md5=$(md5sum <"$o" | cut -d' ' -f1)
  want=$(grep "^$name " tree/expect.txt)
  case $name in
    btunk2)  # Kaldi asserts (exit 134): ours an ERROR
      want="$name - 255" ;;
    btmiss)  # Kaldi's ERROR comes after writing the tree; ours leaves none
      want="$name - 255" ;;
  esac
  [ "$name $md5 $rc" = "$want" ] || fail "$name: got '$name $md5 $rc', Kaldi '$want'"
  case $name in
    btunk2)
      grep -q "^ERROR .*Phone 400 " "$tmp/log" || fail "$name: no ERROR naming phone 400" ;;
    btnostats|btbadq|cpnostats|cpbadsets)  # Kaldi's ERROR: its stream's words
      f=$tmp/no-such.acc
      [ $name = btbadq ] && f=models/mono/tree
      [ $name = cpbadsets ] && f=$tmp/sets-bad
      grep -q "^ERROR .*$f" "$tmp/log" || fail "$name: no ERROR naming $f"
      ;;
    sumbad|summiss)  # Kaldi's ERROR names no file; ours names it
      f=models/mono/tree
      [ $name = summiss ] && f=$tmp/no-such.acc
      grep -q "^ERROR .*$f" "$tmp/log" || fail "$name: no ERROR naming $f"
      ;;
    *)
      grep -E "$tree_log_lines" "$tmp/log" | sed "$tree_log_sed; s#$tmp#\$T#g" |
        diff -q - "tree/$name.log" >/dev/null ||
        fail "$name: log lines differ from Kaldi's (tests/data/tree/$name.log)"
      ;;
  esac
  n=$((n + 1))
done

# a truncated treeacc: ERROR naming it, 255, no output
head -c 100000 "$tmp/a.acc" >"$tmp/cut.acc"
rc=0
"$BIN/sum-tree-stats" "$tmp/cut-sum" "$tmp/a.acc" "$tmp/cut.acc" 2>"$tmp/log" || rc=$?
[ $rc = 255 ] && [ ! -e "$tmp/cut-sum" ] && grep -q "^ERROR .*cut.acc" "$tmp/log" ||
  fail "truncated input: exit $rc, $(grep -c ERROR "$tmp/log") ERROR lines"
[ "$(grep -c ERROR "$tmp/log")" = 1 ] || fail "truncated input: more than one ERROR"
# a transition-id out of range (Kaldi asserts): ERROR naming the utterance
awk 'NR == 3 { $2 = 99999 } { print }' kaldi/mono/ali.txt >"$tmp/badtid.txt"
rc=0
"$BIN/acc-tree-stats" models/mono/final.mdl ark:feats/delta.ark ark,t:"$tmp/badtid.txt" \
  "$tmp/badtid.acc" 2>"$tmp/log" || rc=$?
u=$(awk 'NR == 3 { print $1 }' kaldi/mono/ali.txt)
[ $rc = 255 ] && [ ! -e "$tmp/badtid.acc" ] && grep -q "^ERROR .*$u" "$tmp/log" ||
  fail "transition-id out of range: exit $rc"
# the threads' sum equals the sum read in order (a pipe input: one thread)
"$BIN/sum-tree-stats" "$tmp/s1" "$tmp/a.acc" "$tmp/b.acc" "$tmp/c.acc" "$tmp/d.acc" 2>/dev/null
"$BIN/sum-tree-stats" "$tmp/s2" "$tmp/a.acc" "$tmp/b.acc" "$tmp/c.acc" "cat $tmp/d.acc |" \
  2>/dev/null
cmp -s "$tmp/s1" "$tmp/s2" || fail "threaded and in-order sums differ"
# Kaldi's own program where ours does not follow Kaldi (here --cluster-thresh=0
# and --mode=k-means): exec'ed from PATH (a stand-in that says so), and
# without one on PATH an ERROR, exit 255, no output
mkdir "$tmp/fake"
for p in build-tree cluster-phones; do
  printf '#!/bin/sh\necho "fake Kaldi %s $*"\n' "$p" >"$tmp/fake/$p"
  chmod +x "$tmp/fake/$p"
done
fb_bt=(--cluster-thresh=0 "$tmp/all.acc" "$tmp/roots" tree/questions.qst models/topo "$tmp/fb.tree")
fb_cp=(--mode=k-means --num-classes=3 "$tmp/all.acc" "$tmp/sets" "$tmp/fb.q")
out=$(PATH=$tmp/fake:$PATH "$BIN/build-tree" "${fb_bt[@]}" 2>/dev/null)
[ "$out" = "fake Kaldi build-tree ${fb_bt[*]}" ] || fail "build-tree --cluster-thresh=0: not Kaldi's ($out)"
out=$(PATH=$tmp/fake:$PATH "$BIN/cluster-phones" "${fb_cp[@]}" 2>/dev/null)
[ "$out" = "fake Kaldi cluster-phones ${fb_cp[*]}" ] || fail "cluster-phones k-means: not Kaldi's ($out)"
rc=0
PATH=/usr/bin:/bin "$BIN/build-tree" "${fb_bt[@]}" 2>"$tmp/log" || rc=$?
[ $rc = 255 ] && [ ! -e "$tmp/fb.tree" ] && grep -q "^ERROR .*not on PATH" "$tmp/log" ||
  fail "build-tree --cluster-thresh=0 without Kaldi: exit $rc"
rc=0
PATH=/usr/bin:/bin "$BIN/cluster-phones" "${fb_cp[@]}" 2>"$tmp/log" || rc=$?
[ $rc = 255 ] && [ ! -e "$tmp/fb.q" ] && grep -q "^ERROR .*not on PATH" "$tmp/log" ||
  fail "cluster-phones k-means without Kaldi: exit $rc"
if [ $fails -gt 0 ]; then echo "tree: $fails failures"; exit 1; fi
echo "tree: $n cases as Kaldi's, plus 3 error and order checks and 4 of Kaldi's programs run instead"
exit 0
