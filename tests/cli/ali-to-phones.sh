#!/bin/bash
# ali-to-phones against the Kaldi bundle's: every mode (phone sequence,
# --per-frame, --write-lengths) into binary and text archives, mono, tri1
# and tri2 alignments, an empty alignment and one cut inside a phone (Kaldi
# writes the pieces as they split): the same bytes, the same "Done N
# utterances." line and exit status. --ctm-output runs Kaldi's own program
# (the same bytes), and stops with an ERROR when none is on PATH. Bad input:
# a transition-id outside the model names the utterance (exit 255); the
# incompatible options stop with an ERROR (Kaldi asserts); wrong arguments
# give the usage (exit 1). Needs the bundle (SKIP without it).
# Env: BIN, TOP. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
if [ ! -x "$BIN/ali-to-phones" ]; then echo "SKIP: $BIN/ali-to-phones not built"; exit 77; fi
tmp=$(mktemp -d /tmp/ali2phones-cli.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
. "$TOP/tests/cli/lib/kaldi-bundle.sh"
kb=$(find_kaldi_bundle "$tmp")
if [ -z "$kb" ] || [ ! -x "$kb/bin/ali-to-phones" ]; then
  echo "SKIP: no Kaldi bundle with ali-to-phones (KALDI_BUNDLE)"; exit 77
fi
cd "$TOP/tests/data" || exit 1
K=$kb/bin/ali-to-phones
O=$BIN/ali-to-phones
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# the messages, the command line and our version line aside
msg() { grep -E '^(LOG|WARNING|ERROR|VLOG)' "$1" | sed 's/\[[0-9.~a-z-]*\]:/[V]:/' | grep -v 'kio_log_ours'; }

# mono's alignments with an empty one and one cut in the middle of a phone
{
  "$kb/bin/copy-int-vector" ark:kaldi/mono/ali.ark ark,t:- 2>/dev/null | head -3
  echo "empty-utt "
  "$kb/bin/copy-int-vector" ark:kaldi/mono/ali.ark ark,t:- 2>/dev/null | sed -n 4p |
    awk '{ printf "cut-utt"; for (i = 2; i <= NF - 7; i++) printf " %s", $i; print "" }'
} >"$tmp/odd.txt"
[ -s "$tmp/odd.txt" ] || fail "could not make the odd alignments"

n=0
for set in "models/mono/final.mdl kaldi/mono/ali.ark" "models/tri1/final.mdl kaldi/tri1/ali.ark" \
           "models/tri2/final.mdl kaldi/tri2/ali.ark" "models/mono/final.mdl ark,t:$tmp/odd.txt"; do
  read -r mdl ali <<<"$set"
  case $ali in ark*) ;; *) ali=ark:$ali ;; esac
  for o in "" "--per-frame=true" "--write-lengths=true"; do
    for wf in ark:- ark,t:-; do
      # shellcheck disable=SC2086
      "$K" $o "$mdl" "$ali" "$wf" >"$tmp/k.out" 2>"$tmp/k.err"; kr=$?
      # shellcheck disable=SC2086
      "$O" $o "$mdl" "$ali" "$wf" >"$tmp/o.out" 2>"$tmp/o.err"; orc=$?
      n=$((n + 1))
      [ $kr = $orc ] || fail "$mdl $ali $o $wf: exit $orc, Kaldi's $kr"
      cmp -s "$tmp/k.out" "$tmp/o.out" || fail "$mdl $ali $o $wf: output differs from Kaldi's"
      [ "$(msg "$tmp/k.err")" = "$(msg "$tmp/o.err")" ] || fail "$mdl $ali $o $wf: log differs: $(msg "$tmp/o.err")"
      [ -s "$tmp/o.out" ] || fail "$mdl $ali $o $wf: no output"
    done
  done
done
echo "compared $n runs with Kaldi's"

# --ctm-output: Kaldi's own program from PATH
PATH="$kb/bin:$PATH" "$O" --ctm-output --frame-shift=0.03 models/mono/final.mdl ark:kaldi/mono/ali.ark \
  "$tmp/o.ctm" 2>"$tmp/o.err" || fail "--ctm-output: exit $?"
"$K" --ctm-output --frame-shift=0.03 models/mono/final.mdl ark:kaldi/mono/ali.ark "$tmp/k.ctm" 2>/dev/null
cmp -s "$tmp/o.ctm" "$tmp/k.ctm" || fail "--ctm-output: not Kaldi's ctm"
grep -q "running Kaldi's" "$tmp/o.err" || fail "--ctm-output: no line saying Kaldi's program runs"
env PATH=/usr/bin:/bin KALDI_ROOT=/nonexistent "$O" --ctm-output models/mono/final.mdl \
  ark:kaldi/mono/ali.ark "$tmp/x.ctm" 2>"$tmp/o.err"
r=$?
[ $r = 255 ] && grep -q "^ERROR (ali-to-phones" "$tmp/o.err" || fail "--ctm-output without Kaldi: exit $r"

# bad input
printf 'bad-utt 2 3 99999 4\n' >"$tmp/bad.txt"
"$O" models/mono/final.mdl "ark,t:$tmp/bad.txt" ark,t:- >/dev/null 2>"$tmp/o.err"
r=$?
[ $r = 255 ] && grep -q "^ERROR (ali-to-phones.*bad-utt" "$tmp/o.err" || fail "bad transition-id: exit $r: $(cat "$tmp/o.err")"
"$O" --per-frame=true --write-lengths=true models/mono/final.mdl ark:kaldi/mono/ali.ark ark,t:- \
  >/dev/null 2>"$tmp/o.err"
r=$?
[ $r = 255 ] && grep -q "^ERROR (ali-to-phones.*Incompatible" "$tmp/o.err" || fail "incompatible options: exit $r"
"$O" models/mono/final.mdl ark:kaldi/mono/ali.ark >/dev/null 2>"$tmp/o.err"
r=$?
[ $r = 1 ] && grep -q "Usage:  ali-to-phones" "$tmp/o.err" || fail "two arguments: exit $r"
"$O" models/mono/nonexistent.mdl ark:kaldi/mono/ali.ark ark,t:- >/dev/null 2>"$tmp/o.err"
r=$?
[ $r = 255 ] && grep -q "^ERROR" "$tmp/o.err" || fail "missing model: exit $r"

if [ $fails -ne 0 ]; then echo "ali-to-phones.sh: $fails failure(s)"; exit 1; fi
echo "ali-to-phones.sh: all passed"
