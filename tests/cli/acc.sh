#!/bin/bash
# gmm-acc-stats-ali against Kaldi: the exact commands of the acc logs must
# give the same stats files and the same log messages; plus the text form,
# bad input, exit codes. Env: BIN = directory of the programs, TOP = repo
# root; optional USE_GPU (yes|no|optional|wait: passed as --use-gpu to the
# replayed Kaldi commands; default: the program's default). Exit 0 pass,
# 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
prog="$BIN/gmm-acc-stats-ali"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
cd "$TOP/tests/data" || exit 1
export PATH="$BIN:$PATH"
# The fixtures come from a Kaldi whose OpenBLAS rounds as our "skx" CPU
# profile (gpu-acc/acc-cpu-fast.c; tests/cli/acc-fast.sh checks the others).
export KALDI_GPU_BLAS_PROFILE=skx
tmp=$(mktemp -d /tmp/acc-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Structural comparison tool, if built (used only when bytes differ).
cmp_tool=""
for c in "${ACC_COMPARE:-}" "$BIN/../build/tools/acc-compare" "$TOP/build/tools/acc-compare"; do
  [ -n "$c" ] && [ -x "$c" ] && { cmp_tool=$c; break; }
done

# Message part of a log ("LEVEL message"), without stack traces, blank
# lines and our lines naming the backend (Kaldi has no GPU) and the rounding.
norm() {
  awk '/^$/ {next}
       /^\[ Stack-Trace: \]$/ {skip=1; next}
       skip && /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG)/ {skip=0}
       skip {next}
       /^LOG \([^)]*:kio_log_ours\(\)/ {next}
       /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG\[[0-9]+\]) \(/ {
         lvl=$1; i=index($0, ") "); print lvl " " substr($0, i + 2); next }
       {print}' "$1" | grep -v -E '^LOG (Accumulating on the|No GPU found; accumulating|GPU not usable; accumulating|Rounding as )'
}

# same_stats OURS KALDI [LOG]: identical bytes; when LOG shows the GPU did
# the work, also (with the tool) equal within 1e-6. The CPU path must give
# Kaldi's bytes.
same_stats() {
  cmp -s "$1" "$2" && return 0
  [ -n "${3:-}" ] && grep -q 'Accumulating on the GPU' "$3" || return 1
  if [ -n "$cmp_tool" ]; then
    "$cmp_tool" "$1" "$2"
    return $?
  fi
  return 1
}

# run_case NAME KALDI_LOG KALDI_ACC: replays the log's command line with the
# stats written into $tmp; compares exit code, stats and messages.
run_case() {
  local name=$1 klog=$2 kacc=$3
  local cmd; cmd=$(head -n 1 "$klog")
  local ours="$tmp/$name.acc"
  local mycmd=${cmd% }
  mycmd="${mycmd% $kacc} $ours"
  [ "$mycmd" != "${cmd% }" ] || { fail "$name: $kacc not at the end of: $cmd"; return; }
  local opt=""
  [ -z "${USE_GPU:-}" ] || opt="--use-gpu=$USE_GPU "
  mycmd="${mycmd/#gmm-acc-stats-ali /gmm-acc-stats-ali $opt}"
  eval "$mycmd" 2>"$tmp/$name.log"
  local rc=$?
  [ "$rc" = 0 ] || fail "$name: exit $rc, want 0"
  same_stats "$ours" "$kacc" "$tmp/$name.log" || fail "$name: $ours differs from $kacc"
  sed -e "1s|$kacc |$ours |" -e "1s|^gmm-acc-stats-ali |gmm-acc-stats-ali $opt|" "$klog" \
    >"$tmp/$name.want"
  norm "$tmp/$name.want" >"$tmp/$name.want.norm"
  norm "$tmp/$name.log" >"$tmp/$name.got.norm"
  if ! diff "$tmp/$name.want.norm" "$tmp/$name.got.norm" >"$tmp/$name.diff"; then
    fail "$name: log messages differ from $klog:"; cat "$tmp/$name.diff"
  fi
}

run_case mono kaldi/mono/acc.log kaldi/mono/final.acc
run_case mono-text kaldi/mono/acc-text.log kaldi/mono/final.txt.acc
run_case tri2 kaldi/tri2/acc.log kaldi/tri2/final.acc
run_case noisy noisy/mono.acc.log noisy/mono.acc

# The CPU backend on request says so, and gives the same file.
gmm-acc-stats-ali --use-gpu=no models/mono/final.mdl ark:feats/delta.ark \
  ark:kaldi/mono/ali.ark "$tmp/cpu.acc" 2>"$tmp/cpu.log"
rc=$?
[ $rc = 0 ] || fail "--use-gpu=no: exit $rc"
grep -q '^LOG (.*) Accumulating on the CPU' "$tmp/cpu.log" || fail "--use-gpu=no: no backend line"
same_stats "$tmp/cpu.acc" kaldi/mono/final.acc "$tmp/cpu.log" || fail "--use-gpu=no: stats differ"

# Features through an scp (random order of reading irrelevant), stats to stdout.
gmm-acc-stats-ali models/mono/final.mdl scp:feats/delta.scp ark:kaldi/mono/ali.ark - \
  >"$tmp/stdout.acc" 2>"$tmp/stdout.log"
rc=$?
[ $rc = 0 ] || fail "scp + stdout: exit $rc"
same_stats "$tmp/stdout.acc" kaldi/mono/final.acc "$tmp/stdout.log" || fail "scp + stdout: stats differ"

# More than 50 utterances: the progress line every 50 (keys renamed so the
# 40 utterances appear twice).
{ cat feats/delta.scp; sed 's/^\([^ ]*\) /\1-b /' feats/delta.scp; } >"$tmp/80.scp"
{ cat kaldi/mono/ali.txt; sed 's/^\([^ ]*\) /\1-b /' kaldi/mono/ali.txt; } >"$tmp/80.ali"
key50=$(sed -n '10p' feats/delta.scp | cut -d' ' -f1)-b
gmm-acc-stats-ali models/mono/final.mdl "scp:$tmp/80.scp" "ark,t:$tmp/80.ali" \
  "$tmp/80.acc" 2>"$tmp/80.log"
rc=$?
[ $rc = 0 ] || fail "80 utterances: exit $rc"
grep -q -E "^LOG \(.*\) Processed 50 utterances; for utterance $key50 avg\. like is -?[0-9.e+-]+ over [0-9]+ frames\.$" \
  "$tmp/80.log" || fail "80 utterances: no 'Processed 50 utterances' line for $key50"
grep -q 'Done 80 files, 0 with errors\.' "$tmp/80.log" || fail "80 utterances: summary"
grep -q 'Overall avg like per frame (Gaussian only) = -95.5459 over 28316 frames\.' "$tmp/80.log" ||
  fail "80 utterances: overall likelihood"

# A short alignment: the warning, counted as an error.
first=$(head -n 1 kaldi/mono/ali.txt | cut -d' ' -f1)
{ head -n 1 kaldi/mono/ali.txt | awk '{NF=NF-1; print $0 " "}'; tail -n +2 kaldi/mono/ali.txt; } >"$tmp/short.ali"
gmm-acc-stats-ali models/mono/final.mdl ark:feats/delta.ark "ark,t:$tmp/short.ali" \
  "$tmp/short.acc" 2>"$tmp/short.log"
rc=$?
[ $rc = 0 ] || fail "short alignment: exit $rc"
rows=$(head -n 1 kaldi/mono/ali.txt | awk '{print NF-1}')
grep -q "^WARNING (.*) Alignments has wrong size $((rows - 1)) vs\. $rows$" "$tmp/short.log" ||
  fail "short alignment: no 'Alignments has wrong size' warning"
grep -q 'Done 39 files, 1 with errors\.' "$tmp/short.log" || fail "short alignment: summary"

# No alignments at all: every utterance a warning, stats still written, exit 1.
: >"$tmp/none.ali"
gmm-acc-stats-ali models/mono/final.mdl ark:feats/delta.ark "ark:$tmp/none.ali" \
  "$tmp/none.acc" 2>"$tmp/none.log"
rc=$?
[ $rc = 1 ] || fail "no alignments: exit $rc, want 1"
[ -s "$tmp/none.acc" ] || fail "no alignments: stats file not written"
[ "$(grep -c "^WARNING (.*) No alignment for utterance $first\$" "$tmp/none.log")" = 1 ] ||
  fail "no alignments: warning for $first"
grep -q 'Done 0 files, 40 with errors\.' "$tmp/none.log" || fail "no alignments: summary"
grep -q 'Overall avg like per frame (Gaussian only) = -nan over 0 frames\.' "$tmp/none.log" ||
  fail "no alignments: overall line"
grep -q 'Written accs\.' "$tmp/none.log" || fail "no alignments: 'Written accs.'"

# A transition-id beyond the model: fatal (ERROR naming the utterance, 255).
{ head -n 1 kaldi/mono/ali.txt | awk '{$3=99999; print $0 " "}'; } >"$tmp/badtid.ali"
gmm-acc-stats-ali models/mono/final.mdl ark:feats/delta.ark "ark,t:$tmp/badtid.ali" \
  "$tmp/badtid.acc" 2>"$tmp/badtid.log"
rc=$?
[ $rc = 255 ] || fail "bad transition-id: exit $rc, want 255"
grep -q "^ERROR (.*$first" "$tmp/badtid.log" || fail "bad transition-id: ERROR naming $first"
! grep -q -E 'KaldiFatalError|terminate called|what\(\)' "$tmp/badtid.log" || fail "bad transition-id: C++ runtime text"
[ ! -e "$tmp/badtid.acc" ] || fail "bad transition-id: stats file written"

# Same in the third utterance after a missing second alignment: the warning
# comes first, as in Kaldi (which dies on reaching the third).
second=$(sed -n 2p kaldi/mono/ali.txt | cut -d' ' -f1)
third=$(sed -n 3p kaldi/mono/ali.txt | cut -d' ' -f1)
{ head -n 1 kaldi/mono/ali.txt; sed -n 3p kaldi/mono/ali.txt | awk '{$3=99999; print $0 " "}'; } \
  >"$tmp/badtid3.ali"
gmm-acc-stats-ali models/mono/final.mdl ark:feats/delta.ark "ark,t:$tmp/badtid3.ali" \
  "$tmp/badtid3.acc" 2>"$tmp/badtid3.log"
rc=$?
[ $rc = 255 ] || fail "bad transition-id (3rd): exit $rc, want 255"
norm "$tmp/badtid3.log" | grep -E '^(WARNING|ERROR)' | cut -c1-60 >"$tmp/badtid3.got"
w=$(grep -n "^WARNING No alignment for utterance $second" "$tmp/badtid3.got" | cut -d: -f1)
e=$(grep -n "^ERROR .*" "$tmp/badtid3.got" | cut -d: -f1)
[ -n "$w" ] && [ -n "$e" ] && [ "$w" -lt "$e" ] && [ "$(wc -l <"$tmp/badtid3.got")" = 2 ] ||
  { fail "bad transition-id (3rd): want the warning for $second, then one ERROR"; cat "$tmp/badtid3.got"; }
grep -q "^ERROR (.*$third" "$tmp/badtid3.log" || fail "bad transition-id (3rd): ERROR naming $third"

# Missing model: one ERROR line, exit 255, no C++ runtime text.
gmm-acc-stats-ali no-such.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark "$tmp/x.acc" \
  2>"$tmp/nomodel.log"
rc=$?
[ $rc = 255 ] || fail "missing model: exit $rc, want 255"
[ "$(grep -c '^ERROR (' "$tmp/nomodel.log")" = 1 ] || fail "missing model: want one ERROR line"
! grep -q -E 'KaldiFatalError|terminate called|what\(\)' "$tmp/nomodel.log" || fail "missing model: C++ runtime text"

# Wrong argument count: usage, exit 1.
gmm-acc-stats-ali models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark \
  >"$tmp/usage.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "three arguments: exit $rc, want 1"
grep -q 'Usage:  gmm-acc-stats-ali \[options\] <model-in> <feature-rspecifier> <alignments-rspecifier> <stats-out>' \
  "$tmp/usage.out" || fail "three arguments: no usage text"
grep -q -- '--binary' "$tmp/usage.out" || fail "usage does not list --binary"

# Bad --use-gpu value and unknown options: fatal.
gmm-acc-stats-ali --use-gpu=maybe models/mono/final.mdl ark:feats/delta.ark \
  ark:kaldi/mono/ali.ark "$tmp/y.acc" >"$tmp/usegpu.out" 2>&1
rc=$?
[ $rc = 255 ] || fail "--use-gpu=maybe: exit $rc, want 255"
gmm-acc-stats-ali --no-such-option=1 a b c d >"$tmp/unknown.out" 2>&1
rc=$?
[ $rc = 255 ] || fail "unknown option: exit $rc, want 255"

# --help: usage, exit 0.
gmm-acc-stats-ali --help >"$tmp/help.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "--help: exit $rc, want 0"

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all gmm-acc-stats-ali checks passed"
exit 0
