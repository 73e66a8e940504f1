#!/bin/bash
# The aligning programs' graph archive read ahead on threads
# (KALDI_GPU_DEV_READ_THREADS >= 3: a plain file of binary graphs parsed at
# the offsets kio_fst_body_bytes finds) against reading in order (=0): the
# same alignments and scores, the same stderr line for line, the same exit
# code, for good input and bad (an archive cut in a graph, a state's arc
# count made huge, or off), on the CPU; then, with the test programs
# (TEST_BIN), through the GPU service's CPU backend in several batches: the
# CPU path's outputs, the shared-memory regions faulted in ahead.
# Env: BIN, TOP, TOOLS; optional TEST_BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}" "${TOOLS:?}"
prog="$BIN/gmm-align-compiled"
[ -x "$prog" ] || { echo "SKIP: $prog not built"; exit 77; }
[ -x "$TOOLS/replicate-archive" ] || { echo "SKIP: $TOOLS/replicate-archive not built"; exit 77; }
cd "$TOP/tests/data" || exit 1
export KALDI_GPU_BLAS_PROFILE=skx
tmp=$(mktemp -d /tmp/graph-read.XXXXXX)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mdl=models/tri2/final.mdl
opts=(--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40)

# 120 utterances (the tri2 fixture x3)
"$TOOLS/replicate-archive" --print-args=false --type=matrix --copies=3 ark:feats/lda.ark \
  "ark:$tmp/f.ark" 2>/dev/null &&
"$TOOLS/replicate-archive" --print-args=false --type=fst --copies=3 \
  "ark:gunzip -c graphs/tri2.fsts.gz|" "ark:$tmp/g.fsts" 2>/dev/null ||
  { echo "FAIL: replicate-archive"; rm -rf "$tmp"; exit 1; }
"$prog" "${opts[@]}" --use-gpu=no "$mdl" "ark:$tmp/g.fsts" "ark:$tmp/f.ark" "ark,t:$tmp/ref.ali" \
  2>/dev/null || { echo "FAIL: reference run"; rm -rf "$tmp"; exit 1; }
entry_at() { grep -a -b -o -- "$2 " "$1" | head -n 1 | cut -d: -f1; }  # ARK KEY
k70=$(sed -n 70p "$tmp/ref.ali" | cut -d' ' -f1)
k71=$(sed -n 71p "$tmp/ref.ali" | cut -d' ' -f1)
o70=$(entry_at "$tmp/g.fsts" "$k70")
o71=$(entry_at "$tmp/g.fsts" "$k71")
[ -n "$o70" ] && [ -n "$o71" ] || { echo "FAIL: offsets of $k70/$k71"; rm -rf "$tmp"; exit 1; }
# the first state's arc count: after the key, its space and the 66-byte
# header ("vector", "standard"), the state's 4-byte final weight
narcs=$(( o70 + ${#k70} + 1 + 66 + 4 ))
head -c $(( (o70 + o71) / 2 )) "$tmp/g.fsts" >"$tmp/cut.fsts"
cp "$tmp/g.fsts" "$tmp/huge.fsts"
printf '\x7f' | dd of="$tmp/huge.fsts" bs=1 seek=$(( narcs + 7 )) conv=notrunc 2>/dev/null
cp "$tmp/g.fsts" "$tmp/off.fsts"
printf '\x05' | dd of="$tmp/off.fsts" bs=1 seek=$narcs conv=notrunc 2>/dev/null

# check NAME WANT_RC PATTERN GRAPHS: in order against 3 and 4 threads
check() {
  local name=$1 want=$2 pat=$3 g=$4 t
  KALDI_GPU_DEV_READ_THREADS=0 "$prog" "${opts[@]}" --use-gpu=no "$mdl" "ark:$g" "ark:$tmp/f.ark" \
    "ark,t:$tmp/$name.0.ali" "ark,t:$tmp/$name.0.sc" 2>"$tmp/$name.0.log"
  local rc0=$?
  [ "$rc0" = "$want" ] || fail "$name: exit $rc0, want $want"
  grep -q -E -- "$pat" "$tmp/$name.0.log" || fail "$name: no line matching '$pat'"
  for t in 3 4; do
    KALDI_GPU_DEV_READ_THREADS=$t "$prog" "${opts[@]}" --use-gpu=no "$mdl" "ark:$g" \
      "ark:$tmp/f.ark" "ark,t:$tmp/$name.$t.ali" "ark,t:$tmp/$name.$t.sc" 2>"$tmp/$name.$t.log"
    local rc=$?
    [ $rc = "$rc0" ] || fail "$name ($t threads): exit $rc, in order $rc0"
    for x in ali sc; do
      if [ -e "$tmp/$name.0.$x" ]; then
        cmp -s "$tmp/$name.0.$x" "$tmp/$name.$t.$x" || fail "$name ($t threads): $x differs"
      else
        [ ! -e "$tmp/$name.$t.$x" ] || fail "$name ($t threads): $x written, not in order"
      fi
    done
    # (the stack trace's addresses change from run to run)
    diff <(sed -E "1d; s/\[0x[0-9a-f]+\]$/[ADDR]/" "$tmp/$name.0.log") \
      <(sed -E "1d; s/\[0x[0-9a-f]+\]$/[ADDR]/" "$tmp/$name.$t.log") >"$tmp/d.log" ||
      { fail "$name ($t threads): stderr differs"; head -n 20 "$tmp/d.log"; }
  done
}
check good 0 'Done 120, errors on 0' "$tmp/g.fsts"
cmp -s "$tmp/ref.ali" "$tmp/good.4.ali" || fail "good: not the reference alignments"
check cut 255 "ERROR .*$k70" "$tmp/cut.fsts"
check huge 255 "ERROR .*$k70" "$tmp/huge.fsts"
check off 255 "ERROR" "$tmp/off.fsts"

# Through the service (CPU backend) in batches of 25: the regions after the
# first faulted in ahead, the outputs the CPU path's.
if [ -n "${TEST_BIN:-}" ] && [ -x "$TEST_BIN/gmm-align-compiled" ] &&
  [ -x "$TEST_BIN/kaldi-gpu-service" ]; then
  export KALDI_GPU_SERVICE_DIR=$tmp/svc KALDI_GPU_TEST_SERVICE_FORCE=1 KALDI_GPU_TEST_SERVICE_CPU=1
  export KALDI_GPU_TEST_NO_SMALL_JOB=1 KALDI_GPU_SERVICE_IDLE=10
  unset KALDI_GPU_SERVICE_BIN KALDI_GPU_TEST_SERVICE_DROP KALDI_GPU_SERVICE
  mkdir -m 700 "$tmp/svc"
  KALDI_GPU_DEV_READ_THREADS=4 "$TEST_BIN/gmm-align-compiled" "${opts[@]}" --batch-size=25 \
    --verbose=2 "$mdl" "ark:$tmp/g.fsts" "ark:$tmp/f.ark" "ark,t:$tmp/svc.ali" 2>"$tmp/svc.log" ||
    fail "service: exit $?"
  grep -q 'through the GPU service' "$tmp/svc.log" || fail "service: not used"
  cmp -s "$tmp/ref.ali" "$tmp/svc.ali" || fail "service: alignments differ from the CPU path's"
  # five batches of about 11 MB: regions 1 and 2 of the ring made ahead
  grep -q -E 'through shared memory \(graphs [0-9.]+ MB; 2 region\(s\) faulted in ahead\)' "$tmp/svc.log" ||
    fail "service: $(grep -o 'through shared memory[^;]*' "$tmp/svc.log")"
  for pid in $(sed -n 's/.*Serving jobs on .* (pid \([0-9]*\)).*/\1/p' "$tmp"/svc/service-*.log 2>/dev/null); do
    kill "$pid" 2>/dev/null
  done
else
  echo "note: no test programs (TEST_BIN): the service part did not run"
fi
rm -rf "$tmp"
if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all graph-read checks passed"
