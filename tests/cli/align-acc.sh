#!/bin/bash
# gmm-align-acc-compiled = gmm-align-compiled then gmm-acc-stats-ali, in one
# pass: the same alignment archive, the same stats file, the aligner's log
# messages followed by gmm-acc-stats-ali's closing lines. Compared with the
# two programs of the same build (their parity with Kaldi is checked by
# align.sh and acc.sh). Env: BIN, TOP; optional USE_GPU (passed as
# --use-gpu to all three). Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
for p in gmm-align-acc-compiled gmm-align-compiled gmm-acc-stats-ali; do
  if [ ! -x "$BIN/$p" ]; then echo "SKIP: $BIN/$p not built"; exit 77; fi
done
cd "$TOP/tests/data" || exit 1
export PATH="$BIN:$PATH"
tmp=$(mktemp -d /tmp/align-acc-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
gpu=""
[ -z "${USE_GPU:-}" ] || gpu="--use-gpu=$USE_GPU"

cmp_tool=""
for c in "${ACC_COMPARE:-}" "$BIN/../build/tools/acc-compare" "$TOP/build/tools/acc-compare"; do
  [ -n "$c" ] && [ -x "$c" ] && { cmp_tool=$c; break; }
done
same_stats() {
  cmp -s "$1" "$2" && return 0
  [ -n "$cmp_tool" ] && "$cmp_tool" --tol=1e-9 "$1" "$2" && return 0
  return 1
}
# Messages only (no command line, stack traces, backend lines).
norm() {
  awk 'NR == 1 {next}
       /^\[ Stack-Trace: \]$/ {skip=1; next}
       skip && /^$/ {skip=0; next}
       skip {next}
       /^LOG \([^)]*:(galign_|kio_cuda_|kio_blas_|make_acc)[a-z_]*\(\)/ {next}
       /^LOG \([^)]*:kio_log_ours\(\)/ {next}
       /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG\[[0-9]+\]) \(/ {
         lvl=$1; i=index($0, ") "); print lvl " " substr($0, i + 2); next }
       {print}' "$1" | grep -v -E '^LOG (Accumulating on the|No GPU found; accumulating|GPU not usable; accumulating)'
}

# run_case NAME MODEL GRAPHS FEATS OPTIONS...
run_case() {
  local name=$1 mdl=$2 graphs=$3 feats=$4; shift 4
  gmm-align-acc-compiled $gpu "$@" "$mdl" "$graphs" "$feats" "ark:$tmp/$name.one.ali" \
    "$tmp/$name.one.acc" 2>"$tmp/$name.one.log"
  local rc1=$?
  gmm-align-compiled $gpu "$@" "$mdl" "$graphs" "$feats" "ark:$tmp/$name.two.ali" \
    2>"$tmp/$name.align.log"
  local rc2=$?
  gmm-acc-stats-ali $gpu "$mdl" "$feats" "ark:$tmp/$name.two.ali" "$tmp/$name.two.acc" \
    2>"$tmp/$name.acc.log"
  [ $rc1 = $rc2 ] || fail "$name: exit $rc1, gmm-align-compiled $rc2"
  cmp -s "$tmp/$name.one.ali" "$tmp/$name.two.ali" || fail "$name: alignments differ"
  same_stats "$tmp/$name.one.acc" "$tmp/$name.two.acc" || fail "$name: stats differ"
  # aligner's messages, then the two closing lines of gmm-acc-stats-ali
  { norm "$tmp/$name.align.log"; norm "$tmp/$name.acc.log" | tail -n 2; } >"$tmp/$name.want"
  norm "$tmp/$name.one.log" >"$tmp/$name.got"
  diff "$tmp/$name.want" "$tmp/$name.got" >"$tmp/$name.diff" ||
    { fail "$name: messages differ"; cat "$tmp/$name.diff"; }
}

opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1"
run_case mono models/mono/final.mdl "ark:gunzip -c graphs/mono.fsts.gz|" ark:feats/delta.ark \
  $opts --beam=10 --retry-beam=40 --careful=false
run_case tri2 models/tri2/final.mdl "ark:gunzip -c graphs/tri2.fsts.gz|" ark:feats/lda.ark \
  $opts --beam=10 --retry-beam=40 --careful=true
run_case noisy models/mono/final.mdl "ark:gunzip -c graphs/mono.fsts.gz|" ark:noisy/delta.ark \
  $opts --beam=10 --retry-beam=40 --batch-size=7
run_case edge models/mono/final.mdl "ark:gunzip -c edge/mono.fsts.gz|" ark:edge/feats.ark \
  $opts --beam=10 --retry-beam=40

# Text stats.
gmm-align-acc-compiled $gpu --binary=false $opts models/mono/final.mdl \
  "ark:gunzip -c graphs/mono.fsts.gz|" ark:feats/delta.ark "ark:$tmp/t.ali" "$tmp/t.acc" \
  2>/dev/null
gmm-acc-stats-ali $gpu --binary=false models/mono/final.mdl ark:feats/delta.ark \
  "ark:$tmp/t.ali" "$tmp/t2.acc" 2>/dev/null
cmp -s "$tmp/t.acc" "$tmp/t2.acc" || same_stats "$tmp/t.acc" "$tmp/t2.acc" ||
  fail "--binary=false: stats differ"

# Four arguments: usage, exit 1.
gmm-align-acc-compiled models/mono/final.mdl a b c >"$tmp/usage.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "four arguments: exit $rc, want 1"
grep -q 'Usage:   gmm-align-acc-compiled \[options\]' "$tmp/usage.out" || fail "no usage text"
# Missing model: fatal.
gmm-align-acc-compiled no.mdl a b "ark:$tmp/x.ali" "$tmp/x.acc" >"$tmp/nomodel.out" 2>&1
rc=$?
[ $rc = 255 ] || fail "missing model: exit $rc, want 255"

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all gmm-align-acc-compiled checks passed"
exit 0
