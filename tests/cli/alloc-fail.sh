#!/bin/bash
# Device memory running out at every point of a job, without a GPU: the
# programs built on tests/emu's host emulation of CUDA with the test hooks
# (make emu: $EMU_BIN), KALDI_GPU_TEST_FAIL_ALLOC failing device
# allocations as out of memory (device/gpu-mem.c). Every output must be the
# CPU path's, every run must end as its --use-gpu promises, no device memory
# may be held at exit (KALDI_GPU_TEST_MEMORY_REPORT), and at most one LOG
# line says what happened:
#  1. gmm-align-acc-compiled --use-gpu=optional: the Nth allocation fails,
#     for every N of an undisturbed run (set-up, batches, statistics), then
#     every allocation from the Nth on; the same with long utterances (the
#     chunked likelihoods of worker threads);
#  2. --use-gpu=wait: a shortage that passes (K failures) and one that
#     lasts (the CPU after KALDI_GPU_WAIT seconds, one wait per job);
#  3. --use-gpu=yes: a shortage that passes; one that lasts (ERROR, 255
#     after the wait); a budget too small for one utterance (ERROR, 255 at
#     once, no wait);
#  4. budgets: --gpu-memory / KALDI_GPU_MEMORY small enough that batches
#     are planned in pieces (the peak stays within it); the emulated device
#     smaller than the budget
#     (KALDI_GPU_TEST_EMU_MEMORY: the device's own out of memory);
#  5. gmm-align-compiled and gmm-acc-stats-ali alone, every N from-on;
#  6. valgrind (when installed): no host memory lost at a few failure
#     points (else that part prints SKIP and the rest still counts).
# Env: BIN (the programs: the CPU path's outputs), TOP, EMU_BIN. Exit 0
# pass, 1 fail, 77 skip (no emulator build: ./configure without CUDA).
set -u
: "${BIN:?}" "${TOP:?}"
EMU_BIN=${EMU_BIN:-$TOP/build/emu/bin}
for p in gmm-align-acc-compiled gmm-align-compiled gmm-acc-stats-ali; do
  [ -x "$EMU_BIN/$p" ] || { echo "SKIP: $EMU_BIN/$p not built (make emu; needs the CUDA headers)"; exit 77; }
  [ -x "$BIN/$p" ] || { echo "SKIP: $BIN/$p not built"; exit 77; }
done
BIN=$(cd "$BIN" && pwd) && EMU_BIN=$(cd "$EMU_BIN" && pwd) || exit 1
TOOLS=${TOOLS:-$TOP/build/tools}
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/alloc-fail-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# failures counted in a file: runs go on in the background two at a time
fail() { echo "FAIL: $*"; echo x >>"$tmp/failures"; }
export KALDI_GPU_SERVICE=no KALDI_GPU_TEST_MEMORY_REPORT=1
unset KALDI_GPU_MEMORY KALDI_GPU_WAIT KALDI_GPU_TEST_FAIL_ALLOC KALDI_GPU_TEST_EMU_MEMORY

# Four utterances in batches of two: set-up, two batches, statistics.
"$TOOLS/feat-copy" --keys=<(head -n 4 utts.txt) ark:feats/delta.ark "ark:$tmp/feats.ark" \
  2>/dev/null || { echo "FAIL: feat-copy"; exit 1; }
mdl=models/mono/final.mdl
graphs="ark:gunzip -c graphs/mono.fsts.gz|"
opts=(--batch-size=2 --beam=10 --retry-beam=40 --transition-scale=1.0 --acoustic-scale=0.1
      --self-loop-scale=0.1)
"$BIN/gmm-align-acc-compiled" --use-gpu=no "${opts[@]}" "$mdl" "$graphs" "ark:$tmp/feats.ark" \
  "ark:$tmp/cpu.ali" "$tmp/cpu.acc" 2>"$tmp/cpu.log" || { echo "FAIL: CPU reference"; exit 1; }

# run NAME PROGRAM WANT_RC [ENV=VALUE...] -- [OPTIONS...]: the one-pass run
# (or PROGRAM's) on the emulated device, checked against the CPU path.
run() {
  local name=$1 prog=$2 want=$3; shift 3
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local out="$tmp/$name"
  case $prog in
    gmm-align-acc-compiled)
      env "${envs[@]}" "$EMU_BIN/$prog" "${opts[@]}" "$@" "$mdl" "$graphs" "ark:$tmp/feats.ark" \
        "ark:$out.ali" "$out.acc" 2>"$out.log" ;;
    gmm-align-compiled)
      env "${envs[@]}" "$EMU_BIN/$prog" "${opts[@]}" "$@" "$mdl" "$graphs" "ark:$tmp/feats.ark" \
        "ark:$out.ali" 2>"$out.log" ;;
    gmm-acc-stats-ali)
      env "${envs[@]}" "$EMU_BIN/$prog" "$@" "$mdl" "ark:$tmp/feats.ark" "ark:$tmp/cpu.ali" \
        "$out.acc" 2>"$out.log" ;;
  esac
  local rc=$?
  [ "$rc" = "$want" ] || { fail "$name: exit $rc, expected $want"; tail -n 3 "$out.log"; return; }
  local short
  short=$(grep -c 'Device memory short' "$out.log")
  [ "$short" -le 1 ] || fail "$name: $short LOG lines about device memory"
  if [ "$rc" = 0 ]; then
    [ "$prog" = gmm-acc-stats-ali ] || cmp -s "$out.ali" "$tmp/cpu.ali" || fail "$name: alignments differ"
    [ "$prog" = gmm-align-compiled ] || cmp -s "$out.acc" "$tmp/cpu.acc" || fail "$name: statistics differ"
    grep -q '^kio-gpu: .* 0 bytes in 0 blocks at exit$' "$out.log" ||
      fail "$name: device memory held at exit: $(grep '^kio-gpu' "$out.log")"
    ! grep -q '^ERROR' "$out.log" || fail "$name: ERROR in a run that succeeded"
  else
    grep -q '^ERROR' "$out.log" || fail "$name: exit $rc without an ERROR line"
  fi
}
# Runs its arguments, two at a time (the machine's cores).
par() { "$@" & [ "$(jobs -rp | wc -l)" -lt 2 ] || wait -n; }

run undisturbed gmm-align-acc-compiled 0 X=1 -- --use-gpu=yes
n=$(sed -n 's/^kio-gpu: \([0-9]*\) allocations.*/\1/p' "$tmp/undisturbed.log")
[ -n "$n" ] && [ "$n" -gt 10 ] || { echo "FAIL: no device allocations counted ($n)"; exit 1; }
echo "an undisturbed one-pass run makes $n device allocations"

echo "== 1. --use-gpu=optional: allocation N fails, and every one from N on (N = 1..$n) ($SECONDS s)"
for k in $(seq 1 "$n"); do
  par run "one$k" gmm-align-acc-compiled 0 KALDI_GPU_TEST_FAIL_ALLOC="$k" -- --use-gpu=optional
  par run "from$k" gmm-align-acc-compiled 0 KALDI_GPU_TEST_FAIL_ALLOC="$k+" -- --use-gpu=optional
done
wait
for k in $(seq 1 "$n"); do
  grep -q -E 'Device memory short|GPU not usable' "$tmp/from$k.log" ||
    fail "from$k: no LOG line says what happened"
done
grep -q 'work that does not fit alone runs on the CPU' "$tmp/from$((n - 2)).log" ||
  fail "from$((n - 2)): no LOG line about work on the CPU"
long=(KALDI_GPU_DEV_LONG_FRAMES=200 KALDI_GPU_DEV_CHUNK_FRAMES=100)
run long gmm-align-acc-compiled 0 "${long[@]}" -- --use-gpu=yes
nl=$(sed -n 's/^kio-gpu: \([0-9]*\) allocations.*/\1/p' "$tmp/long.log")
for k in $(seq 1 "${nl:-0}"); do
  par run "long-from$k" gmm-align-acc-compiled 0 "${long[@]}" KALDI_GPU_TEST_FAIL_ALLOC="$k+" -- \
    --use-gpu=optional
done
wait

echo "== 2. --use-gpu=wait ($SECONDS s)"
run wait-passes gmm-align-acc-compiled 0 KALDI_GPU_WAIT=5 KALDI_GPU_TEST_FAIL_ALLOC=20:6 -- --use-gpu=wait
grep -q 'waits for memory (--use-gpu=wait' "$tmp/wait-passes.log" || fail "wait-passes: no LOG line"
t0=$EPOCHREALTIME
run wait-lasts gmm-align-acc-compiled 0 KALDI_GPU_WAIT=1 KALDI_GPU_TEST_FAIL_ALLOC=20+ -- --use-gpu=wait
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {exit !(b - a < 10)}' ||
  fail "wait-lasts: waited more than once per part of the job"
run wait-setup gmm-align-acc-compiled 0 KALDI_GPU_WAIT=1 KALDI_GPU_TEST_FAIL_ALLOC=1+ -- --use-gpu=wait
grep -q 'GPU not usable; aligning on the CPU (.*after waiting)' "$tmp/wait-setup.log" ||
  fail "wait-setup: $(grep -m1 'GPU' "$tmp/wait-setup.log")"

echo "== 3. --use-gpu=yes ($SECONDS s)"
run yes-passes gmm-align-acc-compiled 0 KALDI_GPU_WAIT=5 KALDI_GPU_TEST_FAIL_ALLOC=20:6 -- --use-gpu=yes
run yes-lasts gmm-align-acc-compiled 255 KALDI_GPU_WAIT=1 KALDI_GPU_TEST_FAIL_ALLOC=20+ -- --use-gpu=yes
grep -q 'Not enough device memory for the aligner even for one utterance after waiting' \
  "$tmp/yes-lasts.log" || fail "yes-lasts: no ERROR saying what did not fit"
run yes-setup gmm-align-acc-compiled 255 KALDI_GPU_WAIT=1 KALDI_GPU_TEST_FAIL_ALLOC=1+ -- --use-gpu=yes
t0=$EPOCHREALTIME
run yes-never gmm-align-acc-compiled 255 KALDI_GPU_WAIT=30 -- --use-gpu=yes --gpu-memory=100K
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {exit !(b - a < 10)}' ||
  fail "yes-never: waited for memory that can never fit"
grep -q 'within the budget' "$tmp/yes-never.log" || fail "yes-never: $(grep -m1 ERROR "$tmp/yes-never.log")"
run bad-option gmm-align-acc-compiled 255 X=1 -- --gpu-memory=lots

echo "== 4. budgets ($SECONDS s)"
# A batch of four utterances does not fit the aligner's 3 MiB (3/4 of 4M):
# planned in pieces, within the budget, nothing to report.
run budget gmm-align-compiled 0 KALDI_GPU_MEMORY=4M -- --use-gpu=yes --batch-size=4
peak=$(sed -n 's/^kio-gpu: .* peak \([0-9]*\) bytes.*/\1/p' "$tmp/budget.log")
[ -n "$peak" ] && [ "$peak" -le $((4 << 20)) ] || fail "budget: peak $peak bytes over 4 MiB"
run budget-opt gmm-align-acc-compiled 0 X=1 -- --use-gpu=wait --gpu-memory=4M
run budget-pct gmm-align-acc-compiled 0 KALDI_GPU_TEST_EMU_MEMORY=256M -- --use-gpu=yes --gpu-memory=2%
run emu-small gmm-align-acc-compiled 0 KALDI_GPU_TEST_EMU_MEMORY=3M KALDI_GPU_WAIT=1 -- \
  --use-gpu=optional
grep -q -E 'Device memory short|GPU not usable' "$tmp/emu-small.log" || fail "emu-small: no shortage"
run large gmm-align-acc-compiled 0 KALDI_GPU_TEST_FAIL_ALLOC='>200K' -- --use-gpu=optional

echo "== 5. the two programs alone ($SECONDS s)"
run align-undisturbed gmm-align-compiled 0 X=1 -- --use-gpu=yes
run acc-undisturbed gmm-acc-stats-ali 0 X=1 -- --use-gpu=yes
na=$(sed -n 's/^kio-gpu: \([0-9]*\) allocations.*/\1/p' "$tmp/align-undisturbed.log")
nc=$(sed -n 's/^kio-gpu: \([0-9]*\) allocations.*/\1/p' "$tmp/acc-undisturbed.log")
for k in $(seq 1 "${na:-0}"); do
  par run "align-from$k" gmm-align-compiled 0 KALDI_GPU_TEST_FAIL_ALLOC="$k+" -- --use-gpu=optional
done
for k in $(seq 1 "${nc:-0}"); do
  par run "acc-from$k" gmm-acc-stats-ali 0 KALDI_GPU_TEST_FAIL_ALLOC="$k+" -- --use-gpu=optional
  par run "acc-one$k" gmm-acc-stats-ali 0 KALDI_GPU_TEST_FAIL_ALLOC="$k" -- --use-gpu=yes
done
wait

echo "== 6. host memory (valgrind) ($SECONDS s)"
if command -v valgrind >/dev/null; then
  for spec in 20+ $((n - 1))+; do
    KALDI_GPU_TEST_FAIL_ALLOC="$spec" valgrind -q --leak-check=full \
      --errors-for-leak-kinds=definite --error-exitcode=3 "$EMU_BIN/gmm-align-acc-compiled" --use-gpu=optional \
      "${opts[@]}" "$mdl" "$graphs" "ark:$tmp/feats.ark" "ark:$tmp/vg.ali" "$tmp/vg.acc" \
      2>"$tmp/vg.log"
    rc=$?
    [ $rc = 0 ] || { fail "valgrind at $spec: exit $rc"; grep -A12 'definitely lost' "$tmp/vg.log" | head -n 20; }
    cmp -s "$tmp/vg.ali" "$tmp/cpu.ali" && cmp -s "$tmp/vg.acc" "$tmp/cpu.acc" ||
      fail "valgrind at $spec: outputs differ"
  done
else
  echo "SKIP: valgrind not installed (host memory not checked; the rest counts)"
fi

wait
fails=$(cat "$tmp/failures" 2>/dev/null | wc -l)
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "alloc-fail: all passed"
