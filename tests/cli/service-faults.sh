#!/bin/bash
# The GPU service's failures, without a GPU (the service's CPU test mode and
# the test hooks of base/sys/settings.h): whatever becomes of the service
# (gone, stopped, slow, its device context broken, never started, killed
# with the job that started it), every job finishes on its own with the
# outputs of an undisturbed run, after a bounded wait. Checked:
#   A. a lost service during accumulation: the statistics are Kaldi's;
#   B. a stopped service: the jobs give up after KALDI_GPU_SERVICE_TIMEOUT;
#      a slow one (heartbeats) is waited for, a wedged connection is not;
#   C. a broken device context: the job goes on by itself, the service
#      exits, the next job gets a fresh one;
#   D. a service that never starts: the jobs wait side by side, bounded,
#      and the failure is remembered for the next ones;
#   E. clusters: host and physical GPUs in the identity and the file names,
#      the service outside the job's session and CPU affinity, a service
#      killed mid-run;
#   F. a malformed request (a graph or feature offset outside the job's
#      shared memory): refused, the job aligns on its own.
# (The service's own bounds, a silent client, SIGTERM and oversized messages:
# tests/unit/check_svc.c.) Env: TEST_BIN, TOP, TOOLS. Exit 0 pass, 1 fail, 77 skip.
set -u
export KALDI_GPU_BLAS_PROFILE=skx
: "${TEST_BIN:?}" "${TOP:?}"
BIN=$(cd "$TEST_BIN" && pwd) || exit 1
for p in gmm-align-compiled gmm-acc-stats-ali gmm-align-acc-compiled kaldi-gpu-service; do
  if [ ! -x "$BIN/$p" ]; then echo "SKIP: $BIN/$p not built"; exit 77; fi
done
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/service-faults.XXXXXX)
export KALDI_GPU_SERVICE_DIR=$tmp/svc KALDI_GPU_TEST_SERVICE_FORCE=1 KALDI_GPU_TEST_SERVICE_CPU=1
# (the fixtures are small jobs, which a GPU host accumulates on the CPU)
export KALDI_GPU_TEST_NO_SMALL_JOB=1
export KALDI_GPU_SERVICE_IDLE=30 KALDI_GPU_SERVICE_TIMEOUT=1
unset KALDI_GPU_SERVICE_BIN KALDI_GPU_TEST_SERVICE_DROP KALDI_GPU_TEST_SERVICE_BREAK \
  KALDI_GPU_TEST_SERVICE_STOP KALDI_GPU_TEST_SERVICE_SLOW KALDI_GPU_TEST_SERVICE_NO_START \
  KALDI_GPU_TEST_SERVICE_START_WAIT KALDI_GPU_TEST_HOSTNAME KALDI_GPU_TEST_GPU_UUIDS \
  KALDI_GPU_TEST_ACC_KEEP_BYTES CUDA_VISIBLE_DEVICES
# The services of this test: their command lines name its directory.
svc_pids() { pgrep -f -- "--socket=$KALDI_GPU_SERVICE_DIR/"; }
stop_service() {
  local p
  for p in $(svc_pids); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  for _ in $(seq 50); do [ -z "$(svc_pids)" ] && break; sleep 0.05; done
}
trap 'stop_service; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
under() { awk -v t="$1" -v m="$2" 'BEGIN { exit !(t < m) }'; }  # T MAX
opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
G="ark:gunzip -c graphs/mono.fsts.gz|"

align() {  # NAME [OPTIONS...]: the noisy mono fixture (retries, a failure)
  local name=$1; shift
  "$BIN/gmm-align-compiled" $opts "$@" models/mono/final.mdl "$G" ark:noisy/delta.ark \
    "ark,t:$tmp/$name.ali" "ark,t:$tmp/$name.scores" 2>"$tmp/$name.log"
  echo $? >"$tmp/$name.rc"
}
onepass() {  # NAME [OPTIONS...]: Kaldi's mono alignment and statistics
  local name=$1; shift
  "$BIN/gmm-align-acc-compiled" $opts "$@" models/mono/final.mdl "$G" ark:feats/delta.ark \
    "ark:$tmp/$name.ali" "$tmp/$name.acc" 2>"$tmp/$name.log"
  echo $? >"$tmp/$name.rc"
}
acc() {  # NAME [OPTIONS...]: Kaldi's tri2 statistics
  local name=$1; shift
  "$BIN/gmm-acc-stats-ali" "$@" models/tri2/final.mdl ark:feats/lda.ark ark:kaldi/tri2/ali.ark \
    "$tmp/$name.acc" 2>"$tmp/$name.log"
  echo $? >"$tmp/$name.rc"
}
# Messages without the command line and the backend lines.
msgs() {
  sed -e 1d -e "/:galign_aligner_new()/d" -e "/:galign_align_batch().*GPU service not usable/d" \
    -e "/:gacc_remote_fall_back()/d" -e "/:make_acc()/d" -e "/:main().*GPU service not usable/d" \
    -e "/:pick_device()/d" "$1" |
    sed 's/^\([A-Z]*\) ([^)]*) /\1 /'
}
same_align() {  # NAME: = the CPU path's run
  cmp -s "$tmp/$1.ali" "$tmp/cpu.ali" || fail "$1: alignments differ from the CPU path's"
  cmp -s "$tmp/$1.scores" "$tmp/cpu.scores" || fail "$1: scores differ"
  [ "$(cat "$tmp/$1.rc")" = 0 ] || fail "$1: exit code $(cat "$tmp/$1.rc")"
  diff <(msgs "$tmp/$1.log") <(msgs "$tmp/cpu.log") >/dev/null || fail "$1: messages differ"
}
# Statistics: Kaldi's bytes. On a GPU host the jobs fall back to contexts of
# their own, whose asynchronous statistics differ from the CPU's only in the
# order of the device's double atomics (tests/cli/align-acc.sh): 1e-9 there.
acc_cmp=${TOOLS:-$TOP/build/tools}/acc-compare
same_stats() {
  cmp -s "$1" "$2" && return 0
  [ -e /dev/nvidiactl ] && [ -x "$acc_cmp" ] && "$acc_cmp" --tol=1e-9 "$1" "$2" >/dev/null
}
same_onepass() {
  cmp -s "$tmp/$1.ali" kaldi/mono/ali.ark || fail "$1: alignment differs from Kaldi's"
  same_stats "$tmp/$1.acc" kaldi/mono/final.acc || fail "$1: statistics differ from Kaldi's"
  [ "$(cat "$tmp/$1.rc")" = 0 ] || fail "$1: exit code $(cat "$tmp/$1.rc")"
}
same_acc() {
  same_stats "$tmp/$1.acc" kaldi/tri2/final.acc || fail "$1: statistics differ from Kaldi's"
  [ "$(cat "$tmp/$1.rc")" = 0 ] || fail "$1: exit code $(cat "$tmp/$1.rc"): $(grep ERROR "$tmp/$1.log")"
}
said() {  # NAME PATTERN: the job's log says it
  grep -q -- "$2" "$tmp/$1.log" || fail "$1: no line '$2': $(grep -i 'service' "$tmp/$1.log" | tail -n 3)"
}
align cpu --use-gpu=no

# A. The service lost during accumulation: the job redoes what the service
# may have lost from its last statistics (kept batches; a small bound makes
# checkpoints between batches) and writes Kaldi's statistics.
for d in 1 3 6; do
  KALDI_GPU_TEST_SERVICE_DROP=$d KALDI_GPU_TEST_ACC_KEEP_BYTES=300000 onepass "drop$d" --batch-size=4
  same_onepass "drop$d"
  said "drop$d" 'GPU service lost during accumulation'
  stop_service
done
grep -q 'from its last statistics ([1-9][0-9]* utterances redone)' "$tmp/drop6.log" ||
  fail "drop6: $(grep fall_back "$tmp/drop6.log")"
KALDI_GPU_TEST_SERVICE_DROP=1 acc accdrop   # lost when the statistics are asked for
same_acc accdrop
said accdrop 'GPU service lost during accumulation'
stop_service

# A2. Two accumulation requests in flight: gmm-acc-stats-ali sends batch
# k+1 before it reads batch k's reply (x40 of the tri2 fixture: 4 batches;
# its --verbose=2 line counts the most unanswered at once). The service
# lost with two batches unanswered (after 1-3 requests, with and without a
# checkpoint asked for between them): the kept batches redone, the CPU
# path's statistics and messages, in order.
R=${TOOLS:-$TOP/build/tools}/replicate-archive
if [ -x "$R" ] && "$R" --print-args=false --type=matrix --copies=40 ark:feats/lda.ark \
     "ark:$tmp/big.ark" 2>/dev/null &&
   "$R" --print-args=false --type=ali --copies=40 ark:kaldi/tri2/ali.ark "ark:$tmp/big.ali" 2>/dev/null; then
  bigacc() {  # NAME [OPTIONS...]
    local name=$1; shift
    "$BIN/gmm-acc-stats-ali" "$@" models/tri2/final.mdl "ark:$tmp/big.ark" "ark:$tmp/big.ali" \
      "$tmp/$name.acc" 2>"$tmp/$name.log"
    echo $? >"$tmp/$name.rc"
  }
  same_msgs() {  # NAME REF: the Kaldi lines (not the stack trace) the same
    diff <(msgs "$tmp/$1.log" | grep -E '^(LOG|WARNING|ERROR|VLOG)' | grep -v ':kio_blas_resolve()') \
      <(msgs "$tmp/$2.log" | grep -E '^(LOG|WARNING|ERROR|VLOG)' | grep -v ':kio_blas_resolve()') \
      >/dev/null || fail "$1: messages differ from $2's"
  }
  same_big() {
    cmp -s "$tmp/$1.acc" "$tmp/bigcpu.acc" || fail "$1: statistics differ from the CPU path's"
    [ "$(cat "$tmp/$1.rc")" = 0 ] || fail "$1: exit code $(cat "$tmp/$1.rc"): $(grep ERROR "$tmp/$1.log")"
  }
  bigacc bigcpu --use-gpu=no
  bigacc big2 --verbose=2
  same_big big2
  said big2 'through the GPU service'
  said big2 '4 requests (4 with the features taken, not copied; up to 2 in flight'
  said big2 'in flight; 1 region(s) faulted in ahead)'
  KALDI_GPU_DEV_SERVICE_ACC_INFLIGHT=1 bigacc big1 --verbose=2
  same_big big1
  said big1 '4 requests (4 with the features taken, not copied; up to 1 in flight'
  said big1 'in flight; 0 region(s) faulted in ahead)'
  KALDI_GPU_TEST_ACC_KEEP_BYTES=300000 bigacc bigck --verbose=2
  same_big bigck
  grep -q 'up to 2 in flight; [1-9][0-9]* checkpoints asked for behind a request in flight' \
    "$tmp/bigck.log" || fail "bigck: no checkpoint behind a request: $(grep 'in flight' "$tmp/bigck.log")"
  stop_service
  for d in 1 2 3; do
    for keep in 0 300000; do
      n=bigdrop$d.$keep
      if [ $keep = 0 ]; then KALDI_GPU_TEST_SERVICE_DROP=$d bigacc $n
      else KALDI_GPU_TEST_SERVICE_DROP=$d KALDI_GPU_TEST_ACC_KEEP_BYTES=$keep bigacc $n; fi
      same_big $n
      said $n 'GPU service lost during accumulation'
      same_msgs $n bigcpu
      stop_service
    done
  done
  # Batch 3 fails (an infinite likelihood: FLT_MAX in a feature of its
  # utterance r030-en-029-f1-00014, the 1201st): its ERROR after batch 2's
  # messages, as with one request at a time, also with the service lost
  # while batches 2 and 3 are unanswered (batch 3's outcome held until it
  # is collected).
  key=r030-en-029-f1-00014
  cp "$tmp/big.ark" "$tmp/bad.ark"
  off=$(grep -abo "$key " "$tmp/bad.ark" | head -n 1 | cut -d: -f1)
  # the key, " \0B", "FM ", rows and cols (5 bytes each), then frame 3's first value
  printf '\xff\xff\x7f\x7f' | dd of="$tmp/bad.ark" bs=1 seek=$((off + ${#key} + 16 + 4 * 40 * 3)) \
    conv=notrunc status=none
  badacc() {  # NAME: the poisoned features; ERROR and exit 255
    "$BIN/gmm-acc-stats-ali" models/tri2/final.mdl "ark:$tmp/bad.ark" "ark:$tmp/big.ali" \
      "$tmp/$1.acc" 2>"$tmp/$1.log"
    echo $? >"$tmp/$1.rc"
    [ "$(cat "$tmp/$1.rc")" = 255 ] || fail "$1: exit code $(cat "$tmp/$1.rc"), not 255"
    said $1 "ERROR .*Invalid answer .* at frame 3 of utterance $key"
  }
  KALDI_GPU_DEV_SERVICE_ACC_INFLIGHT=1 badacc bad1
  said bad1 'Processed 1000 utterances'
  stop_service
  badacc bad2
  same_msgs bad2 bad1
  stop_service
  for d in 1 2; do
    KALDI_GPU_TEST_SERVICE_DROP=$d badacc baddrop$d
    said baddrop$d 'GPU service lost during accumulation'
    same_msgs baddrop$d bad1
    stop_service
  done
  # the service's device context broken at batch 3 (a failed reply while
  # batch 4 is unanswered)
  KALDI_GPU_TEST_SERVICE_BREAK=2 badacc badbreak
  said badbreak 'GPU service lost during accumulation'
  same_msgs badbreak bad1
  stop_service
else
  fail "the x40 fixture (replicate-archive)"
fi

# B. A stopped service: bounded waits, then the job's own backend. Before
# the job comes (the READY wait), and mid-run (a hook stops the service
# after 2 batches).
align warm
grep -q 'through the GPU service' "$tmp/warm.log" || fail "warm: the service was not used"
kill -STOP $(svc_pids)
t0=$(now)
align stopped & acc accstopped & wait
t=$(took "$t0")
same_align stopped
same_acc accstopped
said stopped 'no sign of life from the GPU service for 1 s'
said accstopped 'no sign of life from the GPU service for 1 s'
under "$t" 6 || fail "stopped service: the jobs took $t s (timeout 1 s)"
stop_service
t0=$(now)
KALDI_GPU_TEST_SERVICE_STOP=2 align stop2 --batch-size=4
KALDI_GPU_TEST_SERVICE_STOP=2 onepass onestop2 --batch-size=4
t=$(took "$t0")
same_align stop2
said stop2 'lost: no sign of life'
same_onepass onestop2
under "$t" 8 || fail "service stopped mid-run: the jobs took $t s"
stop_service
# A slow batch (3 s, timeout 2 s) is no hang: the heartbeats keep the job.
KALDI_GPU_SERVICE_TIMEOUT=2 KALDI_GPU_TEST_SERVICE_SLOW=3 align slow
same_align slow
grep -q 'GPU service not usable' "$tmp/slow.log" && fail "slow: the job gave up on a working service"
grep -q 'through the GPU service' "$tmp/slow.log" || fail "slow: the service was not used"
stop_service
# A wedged connection (its batch never ends) does not keep its job: the
# heartbeats stop after KALDI_GPU_DEV_SERVICE_STUCK_S, the job gives up
# after its timeout and aligns by itself.
t0=$(now)
KALDI_GPU_SERVICE_TIMEOUT=1 KALDI_GPU_DEV_SERVICE_STUCK_S=2 KALDI_GPU_TEST_SERVICE_SLOW=120 align stuck
t=$(took "$t0")
same_align stuck
said stuck 'no sign of life from the GPU service for 1 s'
under "$t" 20 || fail "wedged connection: the job took $t s (no answer for 2 s, timeout 1 s)"
grep -q 'answered nothing for 2 s' "$KALDI_GPU_SERVICE_DIR"/service*.log ||
  fail "wedged connection: the service did not say so"
stop_service

# C. A broken device context: the batch comes back failed, the job aligns
# it itself; the service exits, and the next job starts a fresh one.
KALDI_GPU_TEST_SERVICE_BREAK=2 align broken --batch-size=4
same_align broken
said broken 'lost: the service could not align a batch: the device context is broken'
for _ in $(seq 60); do [ -z "$(svc_pids)" ] && break; sleep 0.05; done
[ -n "$(svc_pids)" ] && fail "broken context: the service did not exit"
grep -q 'exiting, so that the next job starts a fresh service' "$KALDI_GPU_SERVICE_DIR"/service-*.log ||
  fail "broken context: no restart line in the service log"
starts=$(cat "$KALDI_GPU_SERVICE_DIR"/service-*.log | grep -c 'Serving jobs')
align fresh
grep -q 'through the GPU service' "$tmp/fresh.log" || fail "after the restart: the service was not used"
[ "$(cat "$KALDI_GPU_SERVICE_DIR"/service-*.log | grep -c 'Serving jobs')" = $((starts + 1)) ] ||
  fail "after the restart: no fresh service"
same_align fresh
stop_service
KALDI_GPU_TEST_SERVICE_BREAK=3 onepass onebroken --batch-size=4
same_onepass onebroken
stop_service

# D. A service that never starts: exits at once, or hangs before it listens
# (start wait 2 s). Jobs starting together wait together, not in turn; the
# failure is remembered, so the next job does not try.
rm -f "$KALDI_GPU_SERVICE_DIR"/*.failed
t0=$(now)
for i in 1 2 3; do KALDI_GPU_TEST_SERVICE_NO_START=exit align "exit$i" & done; wait
t=$(took "$t0")
for i in 1 2 3; do same_align "exit$i"; said "exit$i" 'GPU service not usable: .*exited at start'; done
under "$t" 5 || fail "a service that exits at start: 3 jobs took $t s"
ls "$KALDI_GPU_SERVICE_DIR"/gpu-*.failed >/dev/null 2>&1 || fail "no marker of the failed start"
rm -f "$KALDI_GPU_SERVICE_DIR"/*.failed
t0=$(now)
for i in 1 2 3; do
  KALDI_GPU_TEST_SERVICE_NO_START=hang KALDI_GPU_TEST_SERVICE_START_WAIT=2 align "hang$i" &
done
wait
t=$(took "$t0")
for i in 1 2 3; do same_align "hang$i"; said "hang$i" 'did not listen within 2 s'; done
under "$t" 5.5 || fail "a service that hangs at start: 3 jobs took $t s (2 s each, together)"
[ -n "$(svc_pids)" ] && fail "the hanging service was left running"
starts=$(cat "$KALDI_GPU_SERVICE_DIR"/service-*.log | grep -c 'kaldi-gpu-service --socket')
KALDI_GPU_TEST_SERVICE_NO_START=hang KALDI_GPU_TEST_SERVICE_START_WAIT=2 align remembered
same_align remembered
said remembered 'its start failed [0-9]* s ago (the service did not listen within 2 s.*), not tried again within 120 s'
[ "$(cat "$KALDI_GPU_SERVICE_DIR"/service-*.log | grep -c 'kaldi-gpu-service --socket')" = "$starts" ] ||
  fail "a service was started although the failure was remembered"
touch -d '-200 seconds' "$KALDI_GPU_SERVICE_DIR"/gpu-*.failed
align retried
grep -q 'through the GPU service' "$tmp/retried.log" || fail "an old failure still kept the jobs off"
stop_service

# E. Clusters. Files name the host: a host never touches another's (a stale
# socket of host A stays when host B's job starts its service).
KALDI_GPU_TEST_HOSTNAME=hostA align hostA
ls "$KALDI_GPU_SERVICE_DIR"/gpu-hostA-*.sock >/dev/null 2>&1 || fail "no socket named for hostA"
ls "$KALDI_GPU_SERVICE_DIR"/service-hostA.log >/dev/null 2>&1 || fail "no log named for hostA"
stop_service   # killed: hostA's socket stays, as another host's would
KALDI_GPU_TEST_HOSTNAME=hostB align hostB
grep -q 'through the GPU service' "$tmp/hostB.log" || fail "hostB: the service was not used"
ls "$KALDI_GPU_SERVICE_DIR"/gpu-hostA-*.sock >/dev/null 2>&1 || fail "hostB's job removed hostA's socket"
stop_service
# The physical GPUs: two jobs that both see device 0 of different cards get
# two services; the same card, one.
export CUDA_VISIBLE_DEVICES=0
KALDI_GPU_TEST_GPU_UUIDS=GPU-aaaa align gpuA1
KALDI_GPU_TEST_GPU_UUIDS=GPU-bbbb align gpuB
KALDI_GPU_TEST_GPU_UUIDS=GPU-aaaa align gpuA2
for n in gpuA1 gpuB gpuA2; do grep -q 'through the GPU service' "$tmp/$n.log" || fail "$n: no service"; done
[ "$(svc_pids | wc -l)" = 2 ] || fail "GPUs by UUID: $(svc_pids | wc -l) services, expected 2"
KALDI_GPU_TEST_GPU_UUIDS=GPU-aaaa "$BIN/kaldi-gpu-service" --print-identity >"$tmp/id.txt" 2>&1
grep -q 'GPUs GPU-aaaa (test stand-in' "$tmp/id.txt" || fail "--print-identity: $(cat "$tmp/id.txt")"
unset CUDA_VISIBLE_DEVICES
stop_service
# Started outside the job: its own session, the machine's CPUs (not the
# CPU the job was bound to), and it survives the job's process group being
# killed mid-run.
if command -v taskset >/dev/null && [ "$(nproc --all)" -gt 1 ]; then
  taskset -c 0 "$BIN/gmm-align-compiled" $opts models/mono/final.mdl "$G" ark:noisy/delta.ark \
    ark:/dev/null 2>"$tmp/pinned.log"
  p=$(svc_pids)
  all=$(grep Cpus_allowed_list /proc/self/status | cut -f2)
  got=$(grep Cpus_allowed_list "/proc/$p/status" 2>/dev/null | cut -f2)
  [ "$got" = "$all" ] || fail "the service kept the job's CPU affinity: $got (machine: $all)"
  grep -q 'CPU affinity' "$KALDI_GPU_SERVICE_DIR"/service-*.log || fail "no affinity line in the log"
fi
stop_service
KALDI_GPU_TEST_SERVICE_SLOW=0.3 align slowsvc   # a service whose batches take 0.3 s
p=$(svc_pids)
[ "$(ps -o sid= -p "$p" | tr -d ' ')" != "$(ps -o sid= -p $$ | tr -d ' ')" ] ||
  fail "the service is in the session of the job that started it"
set -m
align killedjob --batch-size=4 &
job=$!
set +m
sleep 1
kill -9 -- "-$job" 2>/dev/null
wait "$job" 2>/dev/null
kill -0 "$p" 2>/dev/null || fail "the service died with the job's process group"
# The service killed mid-run (its allocation ended under Slurm, say): the
# jobs using it finish on their own.
align midkill --batch-size=4 &
a=$!
onepass onemidkill --batch-size=4 &
b=$!
sleep 1
stop_service
wait "$a" "$b"
same_align midkill
said midkill 'GPU service not usable: lost'
same_onepass onemidkill
stop_service

# F. A malformed request: a graph array's or the features' offset outside
# the job's shared memory (a test hook; every request through it). The
# service refuses the request and drops the connection, as for any
# malformed request; the job aligns on its own (the CPU path's outputs),
# and the service goes on serving the next job.
starts=$(cat "$KALDI_GPU_SERVICE_DIR"/service-*.log | grep -c 'Serving jobs')
for k in 1 2 5 6; do
  KALDI_GPU_TEST_SERVICE_SHM=1 KALDI_GPU_TEST_SERVICE_BAD_OFFSET=$k align "bad$k" --batch-size=4
  same_align "bad$k"
  said "bad$k" 'GPU service not usable: lost: the GPU service closed the connection'
done
[ "$(cat "$KALDI_GPU_SERVICE_DIR"/service-*.log | grep -c 'Malformed alignment request')" = 4 ] ||
  fail "malformed requests: not each refused by the service"
KALDI_GPU_TEST_SERVICE_SHM=1 align goodshm --batch-size=4
same_align goodshm
grep -q 'GPU service not usable' "$tmp/goodshm.log" && fail "goodshm: a well-formed request was refused"
grep -q 'through the GPU service' "$tmp/goodshm.log" || fail "goodshm: the service was not used"
[ "$(cat "$KALDI_GPU_SERVICE_DIR"/service-*.log | grep -c 'Serving jobs')" = $((starts + 1)) ] ||
  fail "malformed requests: the service did not go on serving"
stop_service
[ $fails = 0 ] || { echo "service-faults.sh: $fails failure(s)"; exit 1; }
echo "service-faults.sh: all passed"
