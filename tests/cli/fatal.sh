#!/bin/bash
# Fatal errors of the four programs, the Kaldi way without theatre: for each
# bad input (truncated feature / graph / alignment archive, failing input
# pipe, failing output pipe, missing model or features, dimension mismatch)
# the program exits 255 with an ERROR line naming the file or key, prints no
# emulated C++ runtime text, and leaves no output that looks complete: files
# absent, gzip output pipes not valid gzip streams (gunzip -t fails), an
# archive on stdout marked so that the next program fails too (train_mono's
# align-equal-compiled ... ark,t:- | gmm-acc-stats-ali ... ark:-).
# Env: BIN, TOP; optional USE_GPU (our programs' --use-gpu, default no),
# KALDI_BIN: a directory of Kaldi's programs (e.g. a
# bundle's bin/, its env.sh beside it is sourced): every case also runs
# Kaldi's program and prints what it did ("kaldi:" lines), and checks that
# Kaldi fails too where it does. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
for p in gmm-align-compiled gmm-acc-stats-ali align-equal-compiled gmm-align-acc-compiled; do
  if [ ! -x "$BIN/$p" ]; then echo "SKIP: $BIN/$p not built"; exit 77; fi
done
KALDI_BIN=${KALDI_BIN:-}
[ -z "$KALDI_BIN" ] || KALDI_BIN=$(cd "$KALDI_BIN" && pwd) || exit 1
cd "$TOP/tests/data" || exit 1
OURS_PATH="$BIN:$PATH"
tmp=$(mktemp -d /tmp/fatal-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Inputs that break: cut in the middle of an entry.
head -c 1500000 feats/delta.ark >"$tmp/trunc.ark"              # at en-029-f1-00560
gunzip -c graphs/mono.fsts.gz | head -c 300000 >"$tmp/trunc.fsts"  # at en-029-f1-00497
head -c 20000 kaldi/mono/ali.ark >"$tmp/trunc.ali"
M=models/mono/final.mdl
G="ark:gunzip -c graphs/mono.fsts.gz|"
# $O: the aligners' options, $A: gmm-acc-stats-ali's; Kaldi's have no --use-gpu.
K_O="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
OURS_O="--use-gpu=${USE_GPU:-no} $K_O"
OURS_A="--use-gpu=${USE_GPU:-no}"

# outputs_ok NAME OUT...: each output absent, or (*.gz) not a valid gzip stream.
outputs_ok() {
  local name=$1; shift
  local o
  for o in "$@"; do
    case $o in
      *.gz) [ ! -e "$o" ] || ! gunzip -t "$o" 2>/dev/null ||
              fail "$name: $o is a complete gzip stream" ;;
      *) [ ! -e "$o" ] || fail "$name: $o left behind" ;;
    esac
  done
}

# left OUT...: what Kaldi left (for the notes).
left() {
  local o s=""
  for o in "$@"; do
    if [ ! -e "$o" ]; then continue; fi
    case $o in
      *.gz) if gunzip -t "$o" 2>/dev/null; then s="$s ${o##*/}(valid gzip)";
            else s="$s ${o##*/}(truncated gzip)"; fi ;;
      *) s="$s ${o##*/}" ;;
    esac
  done
  echo "${s:- none}"
}

# run_case NAME KALDI ERROR_RE "OUTPUTS" COMMAND: COMMAND (eval'd; $out is a
# fresh directory for its outputs, OUTPUTS are relative to it) must exit 255
# with an ERROR line matching ERROR_RE and no C++ runtime text, its outputs
# absent or broken. KALDI: "fail" (Kaldi must fail too), "ok" (Kaldi exits
# 0: we differ on purpose), "-" (no such Kaldi program).
run_case() {
  local name=$1 kaldi=$2 re=$3 outs=$4 cmd=$5
  local out="$tmp/ours/$name" o
  mkdir -p "$out"
  (PATH=$OURS_PATH; O=$OURS_O; A=$OURS_A; eval "$cmd") 2>"$out.log" </dev/null
  local rc=$?
  [ $rc = 255 ] || { fail "$name: exit $rc, want 255"; tail -n 3 "$out.log"; }
  grep -q -E "^ERROR \(.*\) .*($re)" "$out.log" ||
    { fail "$name: no ERROR line naming /$re/"; grep '^ERROR' "$out.log"; }
  ! grep -q -E 'KaldiFatalError|terminate called|what\(\)' "$out.log" ||
    fail "$name: C++ runtime text"
  local paths=()
  for o in $outs; do paths+=("$out/$o"); done
  outputs_ok "$name" "${paths[@]}"
  [ -n "$KALDI_BIN" ] && [ "$kaldi" != - ] || return 0
  out="$tmp/kaldi/$name"
  mkdir -p "$out"
  (. "$KALDI_BIN/../env.sh" 2>/dev/null; PATH="$KALDI_BIN:$PATH"; O=$K_O; A=""; eval "$cmd") \
    2>"$out.log" </dev/null
  local krc=$?
  paths=()
  for o in $outs; do paths+=("$out/$o"); done
  echo "kaldi: $name: exit $krc, outputs left:$(left "${paths[@]}")," \
    "ERROR lines $(grep -c '^ERROR' "$out.log"), terminate text" \
    "$(grep -q 'terminate called' "$out.log" && echo yes || echo no)"
  case $kaldi in
    fail) [ $krc != 0 ] || fail "$name: Kaldi exits 0 (expected to fail)" ;;
    ok) [ $krc = 0 ] || fail "$name: Kaldi exits $krc (expected 0)" ;;
  esac
}

# ---- gmm-align-compiled ----
run_case align-trunc-feats fail 'trunc\.ark.*at key en-029-f1-00560' "ali.gz" \
  'gmm-align-compiled $O $M "$G" "ark:$tmp/trunc.ark" "ark:|gzip -c >$out/ali.gz"'
gunzip -t "$tmp/ours/align-trunc-feats/ali.gz" 2>&1 | grep -q 'unexpected end of file' ||
  fail "align-trunc-feats: gunzip does not report the truncation"
run_case align-trunc-feats-ark-scp fail 'trunc\.ark' "ali.ark ali.scp scores" \
  'gmm-align-compiled $O $M "$G" "ark:$tmp/trunc.ark" "ark,scp:$out/ali.ark,$out/ali.scp" ark,t:$out/scores'
run_case align-trunc-graphs fail 'trunc\.fsts.*at key en-029-f1-00497' "ali.ark" \
  'gmm-align-compiled $O $M "ark:$tmp/trunc.fsts" ark:feats/delta.ark ark:$out/ali.ark'
run_case align-graphs-pipe fail 'exit 3\|.*input pipe failed' "ali.gz" \
  'gmm-align-compiled $O $M "ark:gunzip -c graphs/mono.fsts.gz; exit 3|" ark:feats/delta.ark "ark:|gzip -c >$out/ali.gz"'
# Kaldi only warns about a failed random-access pipe (exit 0); we do not
# take features that may have been cut short.
run_case align-feats-pipe ok 'cat feats/delta\.ark; exit 3\|.*input pipe failed' "ali.ark" \
  'gmm-align-compiled $O $M "$G" "ark,s,cs:cat feats/delta.ark; exit 3|" ark:$out/ali.ark'
run_case align-output-pipe fail 'nodir/ali\.gz' "" \
  'gmm-align-compiled $O $M "$G" ark:feats/delta.ark "ark,t:|gzip -c >$out/nodir/ali.gz"'
run_case align-missing-model fail 'none\.mdl' "ali.ark" \
  'gmm-align-compiled $O models/none.mdl "$G" ark:feats/delta.ark ark:$out/ali.ark'
run_case align-dim fail 'Dim mismatch' "ali.ark" \
  'gmm-align-compiled $O $M "$G" ark:feats/lda.ark ark:$out/ali.ark'

# ---- gmm-acc-stats-ali ----
run_case acc-trunc-feats fail 'trunc\.ark.*at key en-029-f1-00560' "x.acc" \
  'gmm-acc-stats-ali $A $M "ark:$tmp/trunc.ark" ark:kaldi/mono/ali.ark $out/x.acc'
run_case acc-trunc-ali fail 'trunc\.ali' "x.acc" \
  'gmm-acc-stats-ali $A $M ark:feats/delta.ark "ark:$tmp/trunc.ali" $out/x.acc'
run_case acc-feats-pipe fail 'exit 3\|.*input pipe failed' "x.acc" \
  'gmm-acc-stats-ali $A $M "ark:cat feats/delta.ark; exit 3|" ark:kaldi/mono/ali.ark $out/x.acc'
run_case acc-output-pipe fail 'nodir/x\.acc\.gz' "" \
  'gmm-acc-stats-ali $A $M ark:feats/delta.ark ark:kaldi/mono/ali.ark "|gzip -c >$out/nodir/x.acc.gz"'
run_case acc-missing-model fail 'none\.mdl' "x.acc" \
  'gmm-acc-stats-ali $A models/none.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark $out/x.acc'
run_case acc-dim fail 'en-029-f1-00014 have dimension 40' "x.acc" \
  'gmm-acc-stats-ali $A $M ark:feats/lda.ark ark:kaldi/mono/ali.ark $out/x.acc'

# ---- align-equal-compiled ----
run_case equal-trunc-feats fail 'trunc\.ark.*at key en-029-f1-00560' "ali.gz" \
  'align-equal-compiled "$G" "ark:$tmp/trunc.ark" "ark:|gzip -c >$out/ali.gz"'
run_case equal-trunc-graphs fail 'trunc\.fsts.*at key en-029-f1-00497' "ali.ark" \
  'align-equal-compiled "ark:$tmp/trunc.fsts" ark:feats/delta.ark ark:$out/ali.ark'
run_case equal-graphs-pipe fail 'exit 3\|.*input pipe failed' "ali.ark" \
  'align-equal-compiled "ark:gunzip -c graphs/mono.fsts.gz; exit 3|" ark:feats/delta.ark ark:$out/ali.ark'
run_case equal-output-pipe fail 'nodir/ali\.gz' "" \
  'align-equal-compiled "$G" ark:feats/delta.ark "ark,t:|gzip -c >$out/nodir/ali.gz"'
run_case equal-missing-feats fail 'no-such\.ark' "ali.ark" \
  'align-equal-compiled "$G" ark:no-such.ark ark:$out/ali.ark'

# ---- gmm-align-acc-compiled (ours only) ----
run_case align-acc-trunc-feats - 'trunc\.ark.*at key en-029-f1-00560' "ali.gz x.acc" \
  'gmm-align-acc-compiled $O $M "$G" "ark:$tmp/trunc.ark" "ark:|gzip -c >$out/ali.gz" $out/x.acc'
run_case align-acc-trunc-graphs - 'trunc\.fsts.*at key en-029-f1-00497' "ali.ark x.acc" \
  'gmm-align-acc-compiled $O $M "ark:$tmp/trunc.fsts" ark:feats/delta.ark ark:$out/ali.ark $out/x.acc'
run_case align-acc-graphs-pipe - 'exit 3\|.*input pipe failed' "ali.ark x.acc" \
  'gmm-align-acc-compiled $O $M "ark:gunzip -c graphs/mono.fsts.gz; exit 3|" ark:feats/delta.ark ark:$out/ali.ark $out/x.acc'
run_case align-acc-output-pipe - 'nodir/ali\.gz' "x.acc" \
  'gmm-align-acc-compiled $O $M "$G" ark:feats/delta.ark "ark,t:|gzip -c >$out/nodir/ali.gz" $out/x.acc'
run_case align-acc-missing-model - 'none\.mdl' "ali.ark x.acc" \
  'gmm-align-acc-compiled $O models/none.mdl "$G" ark:feats/delta.ark ark:$out/ali.ark $out/x.acc'
run_case align-acc-dim - 'Dim mismatch' "ali.ark x.acc" \
  'gmm-align-acc-compiled $O $M "$G" ark:feats/lda.ark ark:$out/ali.ark $out/x.acc'

# ---- an archive on stdout, read by the next program (train_mono's pass 0) ----
# The producer dies at the cut graph archive after writing the alignments
# before it; its stdout ends with an entry cut short, so the reader fails
# (255, no stats) instead of accumulating a short archive as if complete.
pass0() {  # PATH_FOR_PRODUCER PATH_FOR_CONSUMER OUT CONSUMER_OPTIONS
  # (2>/dev/null: bash's "Aborted" notes about Kaldi's programs)
  (PATH=$1; align-equal-compiled "ark:$tmp/trunc.fsts" ark:feats/delta.ark ark,t:- \
     2>"$3.equal.log"; echo $? >"$3.equal.rc") 2>/dev/null |
    (PATH=$2; gmm-acc-stats-ali $4 $M ark:feats/delta.ark ark:- "$3.acc" 2>"$3.acc.log"
     echo $? >"$3.acc.rc") 2>/dev/null
}
pass0 "$OURS_PATH" "$OURS_PATH" "$tmp/pass0" "$OURS_A"
[ "$(cat "$tmp/pass0.equal.rc")" = 255 ] || fail "pass 0: align-equal-compiled exit $(cat "$tmp/pass0.equal.rc")"
[ "$(cat "$tmp/pass0.acc.rc")" = 255 ] || fail "pass 0: gmm-acc-stats-ali exit $(cat "$tmp/pass0.acc.rc")"
[ ! -e "$tmp/pass0.acc" ] || fail "pass 0: stats written from a short archive"
grep -q '^ERROR (.*) .*standard input.*align-equal-compiled:fatal-error:incomplete-output' \
  "$tmp/pass0.acc.log" || fail "pass 0: the reader's ERROR does not name the cut"
if [ -n "$KALDI_BIN" ]; then
  kp="$KALDI_BIN:$PATH"
  for combo in "kaldi kaldi" "ours kaldi"; do
    set -- $combo
    p1=$OURS_PATH; [ $1 = kaldi ] && p1=$kp
    (. "$KALDI_BIN/../env.sh" 2>/dev/null; pass0 "$p1" "$kp" "$tmp/pass0-$1-$2" "")
    echo "kaldi: pass 0 ($1 align-equal-compiled | Kaldi's gmm-acc-stats-ali):" \
      "exits $(cat "$tmp/pass0-$1-$2.equal.rc") | $(cat "$tmp/pass0-$1-$2.acc.rc")," \
      "stats $([ -e "$tmp/pass0-$1-$2.acc" ] && echo written || echo absent)"
  done
  [ "$(cat "$tmp/pass0-ours-kaldi.acc.rc")" != 0 ] ||
    fail "pass 0: Kaldi's gmm-acc-stats-ali takes our cut archive as complete"
fi

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all fatal-error checks passed"
exit 0
