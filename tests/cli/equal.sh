#!/bin/bash
# align-equal-compiled against Kaldi: the exact commands of
# kaldi/mono/align-equal.log and edge/align-equal.log must give byte-identical
# archives, the same log messages in the same order and the same exit codes;
# plus bad input. Env: BIN = directory of the programs, TOP = repo root.
# Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
prog="$BIN/align-equal-compiled"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
cd "$TOP/tests/data" || exit 1
# On PATH, so argv[0] (and the echoed command line) reads as in Kaldi's logs.
export PATH="$BIN:$PATH"
tmp=$(mktemp -d /tmp/equal-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Message part of a log: "LEVEL message" for Kaldi lines (the part in
# parentheses is build dependent), other lines verbatim; no stack traces
# (they run up to the next log line) and no blank lines.
norm() {
  awk '/^$/ {next}
       /^\[ Stack-Trace: \]$/ {skip=1; next}
       skip && /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG)/ {skip=0}
       skip {next}
       /^LOG \([^)]*:kio_log_ours\(\)/ {next}
       /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG\[[0-9]+\]) \(/ {
         lvl=$1; i=index($0, ") "); print lvl " " substr($0, i + 2); next }
       {print}' "$1"
}

# run_case NAME KALDI_LOG KALDI_ARK: replays the command on the log's first
# line with the output redirected into $tmp.
run_case() {
  local name=$1 klog=$2 kark=$3
  local cmd; cmd=$(head -n 1 "$klog")
  local ours="$tmp/$name.ark"
  local mycmd=${cmd//ark:$kark/ark:$ours}
  [ "$mycmd" != "$cmd" ] || { fail "$name: output $kark not in: $cmd"; return; }
  eval "$mycmd" 2>"$tmp/$name.log"
  local rc=$?
  local want_rc; want_rc=$(sed -n 's/^exit=\([0-9]*\)$/\1/p' "$klog")
  [ -n "$want_rc" ] || want_rc=0
  [ "$rc" = "$want_rc" ] || fail "$name: exit $rc, Kaldi $want_rc"
  cmp -s "$ours" "$kark" || fail "$name: $ours differs from $kark"
  # Kaldi's log without the appended exit line; our echoed command line has
  # our output path in place of Kaldi's.
  grep -v '^exit=[0-9]*$' "$klog" | sed "1s|ark:$kark|ark:$ours|" >"$tmp/$name.want"
  norm "$tmp/$name.want" >"$tmp/$name.want.norm"
  norm "$tmp/$name.log" >"$tmp/$name.got.norm"
  if ! diff "$tmp/$name.want.norm" "$tmp/$name.got.norm" >"$tmp/$name.diff"; then
    fail "$name: log messages differ from $klog:"; cat "$tmp/$name.diff"
  fi
  # Not required (locations are build dependent), but say so if the full
  # lines differ: we print Kaldi's own function/file/line.
  diff -q "$tmp/$name.want" "$tmp/$name.log" >/dev/null ||
    echo "note: $name: full log lines differ from Kaldi's (locations)"
}

run_case mono kaldi/mono/align-equal.log kaldi/mono/ali-equal.ark
run_case edge edge/align-equal.log edge/ali-equal.ark

# --binary is accepted and ignored; features through an scp give the same.
align-equal-compiled --binary=false 'ark:gunzip -c graphs/mono.fsts.gz|' \
  scp:feats/delta.scp "ark:$tmp/scp.ark" 2>"$tmp/scp.log"
rc=$?
[ $rc = 0 ] || fail "--binary=false + scp features: exit $rc"
cmp -s "$tmp/scp.ark" kaldi/mono/ali-equal.ark || fail "--binary=false + scp: output differs"
# Text output equals Kaldi's text form.
align-equal-compiled 'ark:gunzip -c graphs/mono.fsts.gz|' ark:feats/delta.ark \
  "ark,t:$tmp/text.txt" 2>/dev/null
cmp -s "$tmp/text.txt" kaldi/mono/ali-equal.txt || fail "ark,t output differs from ali-equal.txt"

# Missing features archive: one ERROR line, exit 255, no C++ runtime text.
align-equal-compiled 'ark:gunzip -c graphs/mono.fsts.gz|' ark:no-such-feats.ark \
  "ark:$tmp/x.ark" 2>"$tmp/missing.log"
rc=$?
[ $rc = 255 ] || fail "missing features: exit $rc, want 255"
n=$(grep -c '^ERROR (' "$tmp/missing.log")
[ "$n" = 1 ] || fail "missing features: $n ERROR lines, want 1"
! grep -q -E 'KaldiFatalError|terminate called|what\(\)' "$tmp/missing.log" || fail "missing features: C++ runtime text"

# Wrong argument count: usage, exit 1.
align-equal-compiled 'ark:gunzip -c graphs/mono.fsts.gz|' ark:feats/delta.ark \
  >"$tmp/usage.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "two arguments: exit $rc, want 1"
grep -q 'Usage:  align-equal-compiled <graphs-rspecifier>' "$tmp/usage.out" ||
  fail "two arguments: no usage text"
grep -q -- '--binary' "$tmp/usage.out" || fail "usage does not list --binary"

# Unknown option: a fatal error (exit 255), with an ERROR line.
align-equal-compiled --no-such-option=1 a b c >"$tmp/unknown.out" 2>&1
rc=$?
[ $rc = 255 ] || fail "unknown option: exit $rc, want 255"
grep -q '^ERROR (' "$tmp/unknown.out" || fail "unknown option: no ERROR line"

# Bad wspecifier: fatal.
align-equal-compiled 'ark:gunzip -c graphs/mono.fsts.gz|' ark:feats/delta.ark \
  "foo:$tmp/y.ark" >"$tmp/badw.out" 2>&1
rc=$?
[ $rc = 255 ] || fail "bad wspecifier: exit $rc, want 255"

# A graph archive that breaks off: the utterances before it are aligned, the
# summary is logged, then the read error is reported at close: a fatal error
# (255; Kaldi's table destructor aborts, 134). Outputs: tests/cli/fatal.sh.
zcat graphs/mono.fsts.gz | head -c 30000 >"$tmp/trunc.fsts"
align-equal-compiled "ark:$tmp/trunc.fsts" ark:feats/delta.ark "ark:$tmp/t.ark" \
  2>"$tmp/trunc.log"
rc=$?
[ $rc = 255 ] || fail "truncated graphs: exit $rc, want 255"
grep -q 'Success: done 2 utterances\.' "$tmp/trunc.log" || fail "truncated graphs: no summary"
[ "$(grep -c '^ERROR (' "$tmp/trunc.log")" = 1 ] || fail "truncated graphs: want one ERROR line"
sed -n '/Success: done/,$p' "$tmp/trunc.log" | grep -q '^ERROR (' ||
  fail "truncated graphs: the ERROR must come after the summary"

# Hand-made text graphs: a dead-end state (Kaldi asserts; we log an ERROR
# and count the utterance as not aligned), no self-loops to stretch, an empty
# graph, and one that aligns.
printf 'u1 \n0 1 5 0\n1 1 6 0\n1 2 7 0\n0 3 8 0\n2\n\nu2 \n0 1 5 0\n1 2 7 0\n2\n\nu4 \n\nu3 \n0 1 5 0\n1 1 6 0\n1 2 7 0\n2\n\n' \
  >"$tmp/g.txt"
printf 'u1  [\n 1 2\n 3 4\n 5 6 ]\nu2  [\n 1 2\n 3 4\n 5 6 ]\nu3  [\n 1 2\n 3 4\n 5 6 ]\nu4  [\n 1 2 ]\n' \
  >"$tmp/f.txt"
align-equal-compiled "ark:$tmp/g.txt" "ark:$tmp/f.txt" "ark,t:$tmp/g.ali" 2>"$tmp/g.log"
rc=$?
[ $rc = 0 ] || fail "text graphs: exit $rc, want 0"
[ "$(cat "$tmp/g.ali")" = "u3 5 6 7 " ] || fail "text graphs: alignment $(cat "$tmp/g.ali")"
norm "$tmp/g.log" | grep -v '^align-equal-compiled ' | sed 's/^\(ERROR\) .*co-accessible.*/\1 co-accessible/' \
  >"$tmp/g.norm"
cat >"$tmp/g.want" <<'EOF'
ERROR co-accessible
WARNING AlignEqual: did not align utterence u1
WARNING No self-loops on chosen path; cannot match length.
WARNING AlignEqual: did not align utterence u2
WARNING Empty decoding graph for u4
WARNING Computed 1 alignments; 0 lacked features, 3 had other errors.
EOF
diff "$tmp/g.want" "$tmp/g.norm" >"$tmp/g.diff" || { fail "text graphs: log"; cat "$tmp/g.diff"; }

# --help: usage, exit 0.
align-equal-compiled --help >"$tmp/help.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "--help: exit $rc, want 0"

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all align-equal-compiled checks passed"
exit 0
