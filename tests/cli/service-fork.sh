#!/bin/bash
# A job that starts the GPU service itself while it reads its archives
# (device/svc-start.c forks to start it): the forked children share the
# job's open files and their offsets, so they must end without touching
# them. gmm-acc-stats-ali on the tri2 fixture x15 (600 utterances, two
# batches: the service is started after the first batch was read, with
# the rest of the archives unread in the readers' buffers), its features
# from a regular file, from stdin redirected from a regular file (ark:-)
# and its alignments from a pipe, each job with a fresh service directory
# (no service yet: the job starts it), read-ahead threads on and off:
# statistics and messages of the CPU path. Natively, on the service's CPU
# test backend and (where `make emu` built them) the emulated device; then,
# where valgrind is installed, the same jobs under valgrind with its default
# options, which run glibc's exit-time clean-up in every exiting process,
# forked children too (its stdio sync seeks shared input files back).
# Env: TEST_BIN, TOP, TOOLS, EMU_BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
export KALDI_GPU_BLAS_PROFILE=skx
: "${TEST_BIN:?}" "${TOP:?}"
EMU_BIN=${EMU_BIN:-$TOP/build/emu/bin}
. "$TOP/tests/cli/lib/emu-service.sh"
BIN=$(cd "$TEST_BIN" && pwd) || exit 1
for p in gmm-acc-stats-ali kaldi-gpu-service; do
  [ -x "$BIN/$p" ] || { echo "SKIP: $BIN/$p not built"; exit 77; }
done
TOOLS=${TOOLS:-$TOP/build/tools}
[ -x "$TOOLS/replicate-archive" ] || { echo "SKIP: $TOOLS/replicate-archive not built"; exit 77; }
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/service-fork.XXXXXX) || exit 1
emu_service_env 0
export KALDI_GPU_SERVICE_IDLE=2
dirs=()
trap 'stop_service "${dirs[@]}"; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

mdl=models/tri2/final.mdl
"$TOOLS/replicate-archive" --print-args=false --type=matrix --copies=15 ark:feats/lda.ark \
  "ark:$tmp/big.ark" 2>/dev/null &&
  "$TOOLS/replicate-archive" --print-args=false --type=ali --copies=15 \
    ark:kaldi/tri2/ali.ark "ark:$tmp/big.ali" 2>/dev/null &&
  "$BIN/gmm-acc-stats-ali" --use-gpu=no "$mdl" "ark:$tmp/big.ark" "ark:$tmp/big.ali" \
    "$tmp/ref.acc" 2>"$tmp/ref.log" || { echo "FAIL: the x15 data or its CPU statistics"; exit 1; }
# (the rounding profile's line: the CPU path logs it once, a job through the
# service twice)
emu_msgs "$tmp/ref.log" | grep -a -v 'Rounding as' >"$tmp/ref.msgs"

n=0
# job NAME WRAPPER... -- : gmm-acc-stats-ali with $feats_how and $ali_how,
# the service started by the job into a fresh directory; checked against
# the CPU path.
job() {
  local name=$1
  shift
  local wrap=()
  while [ "$1" != -- ]; do wrap+=("$1"); shift; done
  n=$((n + 1))
  export KALDI_GPU_SERVICE_DIR=$tmp/svc.$n
  dirs+=("$KALDI_GPU_SERVICE_DIR")
  local feats="ark:$tmp/big.ark" in=/dev/null
  [ "$feats_how" = stdin ] && { feats=ark:-; in=$tmp/big.ark; }
  local ali="ark:$tmp/big.ali"
  [ "$ali_how" = pipe ] && ali="ark:cat $tmp/big.ali |"
  "${wrap[@]}" "$bin/gmm-acc-stats-ali" "$mdl" "$feats" "$ali" "$tmp/$name.acc" \
    <"$in" 2>"$tmp/$name.log"
  local rc=$?
  local what="$mode $name (features $feats_how, alignments $ali_how, read threads $threads)"
  grep -a -q 'through the GPU service' "$tmp/$name.log" ||
    fail "$what: the service was not used: $(grep -a -m1 -i 'accumulat' "$tmp/$name.log")"
  grep -q 'Serving jobs on' "$KALDI_GPU_SERVICE_DIR"/service-*.log 2>/dev/null ||
    fail "$what: the job did not start a service"
  [ $rc = 0 ] || fail "$what: exit $rc: $(grep -a -m2 -E 'ERROR|WARNING|==[0-9]+==' "$tmp/$name.log")"
  cmp -s "$tmp/$name.acc" "$tmp/ref.acc" || fail "$what: statistics differ from the CPU path's"
  emu_msgs "$tmp/$name.log" | grep -a -v -e 'Rounding as' -e '^==[0-9]*==' >"$tmp/$name.msgs"
  cmp -s "$tmp/$name.msgs" "$tmp/ref.msgs" ||
    fail "$what: messages differ from the CPU path's: $(diff -a "$tmp/ref.msgs" "$tmp/$name.msgs" | head -4 | cut -c1-200)"
}

cases() {  # WRAPPER...: every way of reading, both read-ahead settings
  for threads in 0 default; do
    for how in "file file" "stdin pipe"; do
      read -r feats_how ali_how <<<"$how"
      if [ $threads = 0 ]; then
        KALDI_GPU_DEV_READ_THREADS=0 job "$mode.$n" "$@" --
      else
        job "$mode.$n" "$@" --
      fi
    done
  done
}

run_mode() {
  cases env
}
emu_both_backends service-fork

# Under valgrind (memcheck, default options: --run-libc-freeres=yes), the
# CPU backend; the job's own errors fail it too.
if grep -q -a __asan_init "$BIN/gmm-acc-stats-ali"; then
  echo "SKIP (part): the programs are built with AddressSanitizer, which valgrind cannot run (the rest counts)"
elif command -v valgrind >/dev/null; then
  mode=valgrind bin=$BIN
  export KALDI_GPU_TEST_SERVICE_CPU=1 KALDI_GPU_SERVICE_TIMEOUT=60
  unset KALDI_GPU_TEST_GPU_UUIDS
  cases valgrind -q --error-exitcode=3
else
  echo "SKIP (part): valgrind not installed (the jobs under valgrind not run; the rest counts)"
fi

[ $fails = 0 ] && echo "service-fork: OK ($n jobs)" || { echo "service-fork: $fails failure(s)"; exit 1; }
