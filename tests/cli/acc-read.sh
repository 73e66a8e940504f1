#!/bin/bash
# gmm-acc-stats-ali's input read ahead (KALDI_GPU_DEV_READ_THREADS: the
# feature archive parsed on threads, the alignment archive in a thread)
# against reading in order (=0): the same statistics bytes, the same stderr
# line for line, the same exit code, for good input and bad (missing and
# short alignments, a transition-id beyond the model, feature and alignment
# archives cut short or corrupt), on the CPU and, when built, on the
# emulated device (EMU_BIN: tests/emu, batches in flight while reading).
# Env: BIN, TOP, TOOLS; optional EMU_BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}" "${TOOLS:?}"
prog="$BIN/gmm-acc-stats-ali"
[ -x "$prog" ] || { echo "SKIP: $prog not built"; exit 77; }
[ -x "$TOOLS/replicate-archive" ] || { echo "SKIP: $TOOLS/replicate-archive not built"; exit 77; }
cd "$TOP/tests/data" || exit 1
export KALDI_GPU_BLAS_PROFILE=skx
tmp=$(mktemp -d /tmp/acc-read.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 120 utterances (the tri2 fixture x3: progress lines every 50)
"$TOOLS/replicate-archive" --print-args=false --type=matrix --copies=3 ark:feats/lda.ark \
  "ark:$tmp/f.ark" 2>/dev/null &&
"$TOOLS/replicate-archive" --print-args=false --type=ali --copies=3 ark:kaldi/tri2/ali.ark \
  "ark:$tmp/a.ark" 2>/dev/null || { echo "FAIL: replicate-archive"; exit 1; }
mdl=models/tri2/final.mdl
"$TOOLS/replicate-archive" --print-args=false --type=ali --copies=3 ark:kaldi/tri2/ali.ark \
  "ark,t:$tmp/a.txt" 2>/dev/null || { echo "FAIL: replicate-archive (text)"; exit 1; }

# Byte offset where KEY's entry of a binary archive starts.
entry_at() {  # ARK KEY
  grep -a -b -o -- "$2 " "$1" | head -n 1 | cut -d: -f1
}
k70=$(sed -n 70p "$tmp/a.txt" | cut -d' ' -f1)
k71=$(sed -n 71p "$tmp/a.txt" | cut -d' ' -f1)
k90=$(sed -n 90p "$tmp/a.txt" | cut -d' ' -f1)
o70=$(entry_at "$tmp/f.ark" "$k70")
o71=$(entry_at "$tmp/f.ark" "$k71")
[ -n "$o70" ] && [ -n "$o71" ] || { echo "FAIL: offsets of $k70/$k71"; exit 1; }

# inputs: missing alignments (every 7th), a short one, a bad transition-id,
# cut and corrupt archives
awk 'NR % 7 != 3' "$tmp/a.txt" >"$tmp/miss.txt"
awk 'NR == 20 {NF = NF - 1; $0 = $0 " "} {print}' "$tmp/a.txt" >"$tmp/short.txt"
awk 'NR == 90 {$3 = 99999; $0 = $0 " "} {print}' "$tmp/a.txt" >"$tmp/badtid.txt"
head -c $(( (o70 + o71) / 2 )) "$tmp/f.ark" >"$tmp/cut-body.ark"
head -c $(( o70 + ${#k70} + 6 )) "$tmp/f.ark" >"$tmp/cut-head.ark"
cp "$tmp/f.ark" "$tmp/bad-token.ark"
printf 'X' | dd of="$tmp/bad-token.ark" bs=1 seek=$(( o70 + ${#k70} + 3 )) conv=notrunc 2>/dev/null
cp "$tmp/f.ark" "$tmp/bad-rows.ark"  # rows + 65536: past the end of the file
printf '\x01' | dd of="$tmp/bad-rows.ark" bs=1 seek=$(( o70 + ${#k70} + 9 )) conv=notrunc 2>/dev/null
# (inside the first alignment of the third copy)
head -c $(( $(stat -c %s "$tmp/a.ark") * 2 / 3 + 60 )) "$tmp/a.ark" >"$tmp/cut-ali.ark"

# same NAME PROG ARGS...: in order (0) against $threads threads; rc0: the
# exit code in order
same() {
  local name=$1 p=$2; shift 2
  KALDI_GPU_DEV_READ_THREADS=0 "$p" "$@" "$tmp/$name.0.acc" 2>"$tmp/$name.0.log"
  rc0=$?
  for t in $threads; do
    KALDI_GPU_DEV_READ_THREADS=$t "$p" "$@" "$tmp/$name.$t.acc" 2>"$tmp/$name.$t.log"
    local rc=$?
    [ $rc = $rc0 ] || fail "$name ($t threads): exit $rc, in order $rc0"
    if [ -e "$tmp/$name.0.acc" ]; then
      cmp -s "$tmp/$name.0.acc" "$tmp/$name.$t.acc" || fail "$name ($t threads): statistics differ"
    else
      [ ! -e "$tmp/$name.$t.acc" ] || fail "$name ($t threads): statistics written"
    fi
    # (the stack trace's addresses change from run to run)
    sed -E "1s|$tmp/$name.$t.acc|OUT|; s/\[0x[0-9a-f]+\]$/[ADDR]/" "$tmp/$name.$t.log" >"$tmp/got.log"
    sed -E "1s|$tmp/$name.0.acc|OUT|; s/\[0x[0-9a-f]+\]$/[ADDR]/" "$tmp/$name.0.log" >"$tmp/want.log"
    diff "$tmp/want.log" "$tmp/got.log" >"$tmp/d.log" ||
      { fail "$name ($t threads): stderr differs"; head -n 20 "$tmp/d.log"; }
  done
}

check() {  # NAME WANT_RC GREP_PATTERN FEATS ALI
  local name=$mode-$1 want=$2 pat=$3
  same "$name" "$p" "$opt" "$mdl" "$4" "$5"
  [ "$rc0" = "$want" ] || fail "$name: exit $rc0, want $want"
  grep -q -E -- "$pat" "$tmp/$name.0.log" || fail "$name: no line matching '$pat'"
}
mode=cpu p=$prog opt=--use-gpu=no threads="1 4"
check good 0 'Done 120 files, 0 with errors\.' "ark:$tmp/f.ark" "ark:$tmp/a.ark"
check good-scs 0 'Processed 100 utterances' "ark,s,cs:$tmp/f.ark" "ark:$tmp/a.ark"
check missing 0 'Done 103 files, 17 with errors\.' "ark:$tmp/f.ark" "ark,t:$tmp/miss.txt"
check short 0 'WARNING .* Alignments has wrong size' "ark:$tmp/f.ark" "ark,t:$tmp/short.txt"
check badtid 255 "ERROR .*$k90" "ark:$tmp/f.ark" "ark,t:$tmp/badtid.txt"
check cut-body 255 "ERROR .*read error at key $k70" "ark:$tmp/cut-body.ark" "ark:$tmp/a.ark"
check cut-head 255 "ERROR .*read error at key $k70" "ark:$tmp/cut-head.ark" "ark:$tmp/a.ark"
check bad-token 255 "ERROR .*read error at key $k70" "ark:$tmp/bad-token.ark" "ark:$tmp/a.ark"
check bad-rows 255 "ERROR .*read error at key $k70" "ark:$tmp/bad-rows.ark" "ark:$tmp/a.ark"
check cut-ali 255 "ERROR .*Error closing RandomAccessTableReader: .*at key" "ark:$tmp/f.ark" \
  "ark:$tmp/cut-ali.ark"
check pipe 0 'Done 120 files' "ark:cat $tmp/f.ark |" "ark:$tmp/a.ark"
cmp -s "$tmp/cpu-good.0.acc" "$tmp/cpu-good-scs.0.acc" || fail "ark and ark,s,cs statistics differ"

# The emulated device (slow: fewer cases): 560 utterances are two batches,
# the second read while the first is accumulated; the same bits as the CPU.
p=${EMU_BIN:-}/gmm-acc-stats-ali
if [ -n "${EMU_BIN:-}" ] && [ -x "$p" ]; then
  mode=emu opt=--use-gpu=yes threads=3
  "$TOOLS/replicate-archive" --print-args=false --type=matrix --copies=14 ark:feats/lda.ark \
    "ark:$tmp/f14.ark" 2>/dev/null &&
  "$TOOLS/replicate-archive" --print-args=false --type=ali --copies=14 ark:kaldi/tri2/ali.ark \
    "ark:$tmp/a14.ark" 2>/dev/null || fail "replicate-archive (x14)"
  check good14 0 'Done 560 files, 0 with errors\.' "ark:$tmp/f14.ark" "ark:$tmp/a14.ark"
  "$prog" --use-gpu=no "$mdl" "ark:$tmp/f14.ark" "ark:$tmp/a14.ark" "$tmp/cpu14.acc" 2>/dev/null
  cmp -s "$tmp/cpu14.acc" "$tmp/emu-good14.3.acc" || fail "emulated device: statistics differ from the CPU's"
  check badtid 255 "ERROR .*$k90" "ark:$tmp/f.ark" "ark,t:$tmp/badtid.txt"
  check cut-body 255 "ERROR .*read error at key $k70" "ark:$tmp/cut-body.ark" "ark:$tmp/a.ark"
else
  echo "note: no emulated device build (EMU_BIN): the CPU only"
fi
cmp -s "$tmp/cpu-good.0.acc" "$tmp/cpu-good-scs.0.acc" || fail "ark and ark,s,cs statistics differ"

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all acc-read checks passed"
exit 0
