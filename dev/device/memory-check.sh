#!/bin/bash
# Device memory on real GPUs: the runs of the "bounded memory, no job lost"
# acceptance, in one device call, with a table at the end. Prepare here:
#   make all && dev/device/device-pack.sh
# then on the GPU machine (carry [".carry"]):
#   dev/device/memory-check.sh [PART...]        (default: a b c d)
# Parts (each says SKIP when the machine cannot run it):
#   a  JOBS (16) jobs of HOURS (6.1) h, gmm-align-acc-compiled through the
#      GPU service on one GPU, twice (the service started by the first
#      run, then warm): peak device memory of our processes, outputs = the
#      CPU path's, wall time;
#   b  JOBS_B (32) such jobs; again with another process (build/tools/
#      gpu-hog) holding all but HOG_FREE_GB (4) GB of the card, through a
#      service started after it; and OWN_JOBS (4) jobs on their own contexts
#      beside the hog (default --use-gpu, and yes; KALDI_GPU_WAIT=OWN_WAIT,
#      default 60): every job completes;
#   c  two GPUs: gmm-align-compiled, gmm-acc-stats-ali, gmm-align-acc-compiled,
#      gmm-align on their own contexts and through the service, without and with
#      CUDA_VISIBLE_DEVICES, --num-gpus=1 and 2, outputs = CPU path; the
#      one-pass program under compute-sanitizer with both GPUs visible, on
#      device 0 and (another process busy on 0) on device 1;
#   d  an hour-long recording (LONG_COPIES (26) copies of the 40 fixture
#      utterances in one utterance, 61 min), one job and LONG_JOBS (10) at
#      once, on own contexts and through the service: peak memory against
#      the budgets, outputs = CPU path.
# The data: the tri2 fixture (tests/data: model, graphs, 40 utterances of LDA
# features) replicated with replicate-archive (HOURS h a job: every job
# reads the same archive); the CPU path's outputs of the 40 utterances
# replicated the same way are the alignments' oracle (each copy is aligned
# alone), the statistics' oracle is gmm-acc-stats-ali --use-gpu=no on them.
# Memory: nvidia-smi sampled every 0.2 s (--query-compute-apps: per process,
# the hog and processes that were there before left out; and the devices'
# memory.used less what it was before the runs). Budgets are the user's
# (KALDI_GPU_MEMORY, KALDI_GPU_SERVICE_MEMORY, KALDI_GPU_WAIT pass through).
# Env: OUT (logs and table, default /tmp/out), WORK (/tmp/memory-check),
# BIN (gmmbin-gpu), BUILD (.carry/build when present, else build).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
if [ -d .carry/gmmbin-gpu ]; then  # a device call: the carried build
  export LD_LIBRARY_PATH="$top/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  BUILD=${BUILD:-.carry/build}
  cp .carry/gmmbin-gpu/* gmmbin-gpu/
fi
BUILD=${BUILD:-build}
bin=$(cd "${BIN:-gmmbin-gpu}" && pwd)
tools=$top/$BUILD/tools
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
W=${WORK:-/tmp/memory-check}; mkdir -p "$W"; chmod 700 "$W"
parts=${*:-a b c d}
jobs=${JOBS:-16} jobs_b=${JOBS_B:-32} hours=${HOURS:-6.1} hog_free=${HOG_FREE_GB:-4}
own_jobs=${OWN_JOBS:-4} long_copies=${LONG_COPIES:-26} long_jobs=${LONG_JOBS:-10}
fix=$top/tests/data
table=$OUT/memory-check.md
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
  nproc; env | grep '^KALDI_GPU' || true; } >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "| part | run | jobs | peak MiB (processes) | peak MiB (device) | outputs = CPU | wall s | notes |" >"$table"
echo "|---|---|---:|---:|---:|---|---:|---|" >>"$table"
row() { echo "| $* |" >>"$table"; }
now() { echo "$EPOCHREALTIME"; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
opts=(--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40)
mdl=$fix/models/tri2/final.mdl
frames40=$(sed -n 's/.*over \([0-9]*\) frames\..*/\1/p' "$fix/kaldi/tri2/align.log")

# ---- memory sampling ----
# pids on the GPUs before a run (never counted), and a baseline of memory.used
foreign=""
base_used=""
mem_start() {  # NAME [EXTRA_PID...]: start sampling
  foreign=" $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr '\n' ' ') $* "
  base_used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | tr '\n' ' ')
  nvidia-smi --query-compute-apps=timestamp,pid,used_memory --format=csv,noheader,nounits \
    -lms 200 >"$W/$1.apps.csv" 2>/dev/null & smp1=$!
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 200 \
    >"$W/$1.gpu.csv" 2>/dev/null & smp2=$!
  smp_name=$1
}
mem_stop() {  # sets peak_p (our processes' sum) and peak_d (devices' used less the baseline)
  sleep 0.5
  kill "$smp1" "$smp2" 2>/dev/null; wait "$smp1" "$smp2" 2>/dev/null
  peak_p=$(awk -F', *' -v ex="$foreign" '
    { if (index(ex, " " $2 " ")) next; s[$1] += $3 }
    END { m = 0; for (t in s) if (s[t] > m) m = s[t]; print m }' "$W/$smp_name.apps.csv")
  peak_d=$(awk -F', *' -v b="$base_used" '
    BEGIN { nb = split(b, base, " ") }
    { if ($1 != last) { i = 0; last = $1 } i++; s[$1] += $2 - base[i] }
    END { m = 0; for (t in s) if (s[t] > m) m = s[t]; print m }' "$W/$smp_name.gpu.csv")
  cp "$W/$smp_name.apps.csv" "$W/$smp_name.gpu.csv" "$OUT/" 2>/dev/null
}
# A fresh GPU service per run; waits for the last one to go (idle 5 s).
svc_n=0
svc_new() {
  svc_n=$((svc_n + 1))
  export KALDI_GPU_SERVICE_DIR=$W/svc$svc_n KALDI_GPU_SERVICE_IDLE=${SERVICE_IDLE:-5}
  export KALDI_GPU_SERVICE_VERBOSE=1
  mkdir -p "$W/svc$svc_n"; chmod 700 "$W/svc$svc_n"
}
svc_end() {  # waits for the service of this run to exit; keeps its log
  for _ in $(seq 1 120); do
    pgrep -f "kaldi-gpu-service" >/dev/null || break
    sleep 1
  done
  cp "$KALDI_GPU_SERVICE_DIR/service.log" "$OUT/service$svc_n.log" 2>/dev/null
}
same() { cmp -s "$1" "$2"; }
# run_jobs NAME N ENV... -- PROGRAM ARGS (with @I@ for the job number):
# N at once; sets ok (outputs equal to $want_ali / $want_acc), wall, fails
run_jobs() {
  local name=$1 n=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local t0 t1 pids=() i
  t0=$(now)
  for i in $(seq 1 "$n"); do
    local args=("${@//@I@/$i}")
    env "${envs[@]}" "${args[@]}" 2>"$W/$name.$i.log" & pids+=($!)
  done
  fails=0
  local rcs=()
  for i in "${!pids[@]}"; do wait "${pids[$i]}"; rcs[$i]=$?; [ "${rcs[$i]}" = 0 ] || fails=$((fails + 1)); done
  t1=$(now)
  wall=$(dt "$t0" "$t1")
  ok=0
  for i in $(seq 1 "$n"); do
    [ "${rcs[$((i - 1))]}" = 0 ] &&
    { [ -z "${want_ali:-}" ] || same "$W/$name.$i.ali" "$want_ali"; } &&
      { [ -z "${want_acc:-}" ] || same "$W/$name.$i.acc" "$want_acc"; } && ok=$((ok + 1))
  done
  short=$(cat "$W/$name".*.log | grep -c 'Device memory short' || true)
  cat "$W/$name".*.log >"$OUT/$name.logs"
  rm -f "$W/$name".*.ali "$W/$name".*.acc
}

# ---- data ----
prep_big() {  # HOURS of replicated tri2 fixtures, and the oracles
  [ -f "$W/big.done" ] && return
  local copies
  copies=$(awk -v h="$hours" -v f="$frames40" 'BEGIN { c = int(h * 360000 / f + 0.5); print c < 1 ? 1 : c }')
  echo "data: $copies copies of the 40 tri2 utterances ($hours h a job)"
  "$tools/replicate-archive" --print-args=false --copies="$copies" "ark:$fix/feats/lda.ark" \
    "ark:$W/big.ark" 2>/dev/null &&
  "$tools/replicate-archive" --print-args=false --type=fst --copies="$copies" \
    "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$W/big.fsts" 2>/dev/null &&
  KALDI_GPU_SERVICE=no "$bin/gmm-align-compiled" --use-gpu=no "${opts[@]}" "$mdl" \
    "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$fix/feats/lda.ark" "ark:$W/cpu40.ali" 2>/dev/null &&
  "$tools/replicate-archive" --print-args=false --type=ali --copies="$copies" "ark:$W/cpu40.ali" \
    "ark:$W/big.ali" 2>/dev/null &&
  KALDI_GPU_SERVICE=no "$bin/gmm-acc-stats-ali" --use-gpu=no "$mdl" "ark:$W/big.ark" \
    "ark:$W/big.ali" "$W/big.acc" 2>"$OUT/big-cpu-acc.log" || { echo "data preparation failed"; exit 1; }
  echo "$copies" >"$W/big.done"
}
big_job=("$bin/gmm-align-acc-compiled" "${opts[@]}" "$mdl" "ark:$W/big.fsts" "ark,s,cs:$W/big.ark"
         "ark:$W/@NAME@.@I@.ali" "$W/@NAME@.@I@.acc")
big() {  # NAME: the one-pass job line for run NAME
  local a=("${big_job[@]//@NAME@/$1}"); printf '%s\0' "${a[@]}"
}

part_a() {
  prep_big
  want_ali=$W/big.ali want_acc=$W/big.acc
  for pass in cold warm; do
    [ "$pass" = cold ] && svc_new
    mem_start "a-$pass"
    mapfile -d '' cmd < <(big "a-$pass")
    run_jobs "a-$pass" "$jobs" X=1 -- "${cmd[@]}"
    mem_stop
    row "a | $jobs x $hours h, service ($pass) | $jobs | $peak_p | $peak_d | $ok/$jobs | $wall | $fails failed; $short memory LOG lines"
  done
  svc_end
  # the aligner's sub-batches of one job on its own context (per-frame costs)
  local one=("${cmd[@]//@I@/v}")
  KALDI_GPU_SERVICE=no "${one[0]}" --verbose=2 "${one[@]:1}" 2>"$OUT/a-one-verbose.log" >/dev/null
  grep -h 'Device sub-batch' "$OUT/a-one-verbose.log" | head -n 3 | sed 's/^[^)]*) /  /'
}

part_b() {
  prep_big
  want_ali=$W/big.ali want_acc=$W/big.acc
  svc_new
  mem_start b-service
  mapfile -d '' cmd < <(big b-service)
  run_jobs b-service "$jobs_b" X=1 -- "${cmd[@]}"
  mem_stop
  row "b | $jobs_b x $hours h, service | $jobs_b | $peak_p | $peak_d | $ok/$jobs_b | $wall | $fails failed; $short memory LOG lines"
  svc_end
  [ -x "$tools/gpu-hog" ] || { row "b | gpu-hog not built | | | | | | SKIP"; return; }
  "$tools/gpu-hog" "$hog_free" 0 900 >"$W/hog.out" 2>&1 & hog=$!
  for _ in $(seq 1 60); do grep -q holding "$W/hog.out" && break; sleep 0.5; done
  cat "$W/hog.out"
  svc_new
  mem_start b-hog "$hog"
  mapfile -d '' cmd < <(big b-hog)
  run_jobs b-hog "$jobs_b" X=1 -- "${cmd[@]}"
  mem_stop
  row "b | $jobs_b x $hours h, service, all but $hog_free GB held by another process | $jobs_b | $peak_p | $peak_d | $ok/$jobs_b | $wall | $fails failed; $short memory LOG lines"
  svc_end
  for mode in default yes; do
    mem_start "b-own-$mode" "$hog"
    mapfile -d '' cmd < <(big "b-own-$mode")
    [ "$mode" = yes ] && cmd=("${cmd[0]}" --use-gpu=yes "${cmd[@]:1}")  # options come first
    # a wait for memory bounded at OWN_WAIT (60) s: the call's time limit
    run_jobs "b-own-$mode" "$own_jobs" KALDI_GPU_SERVICE=no KALDI_GPU_WAIT="${OWN_WAIT:-60}" -- \
      "${cmd[@]}"
    mem_stop
    row "b | $own_jobs x $hours h, own contexts ($mode), beside the hog | $own_jobs | $peak_p | $peak_d | $ok/$own_jobs | $wall | $fails failed; $short memory LOG lines"
  done
  kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null
}

part_c() {
  [ "$ngpu" -ge 2 ] || { row "c | two GPUs | | | | | | SKIP: $ngpu GPU(s)"; return; }
  KALDI_GPU_SERVICE=no "$bin/gmm-align-acc-compiled" --use-gpu=no "${opts[@]}" "$mdl" \
    "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$fix/feats/lda.ark" "ark:$W/cpu40.ali" \
    "$W/cpu40.acc" 2>/dev/null
  # 520 utterances (13 copies): several batches
  "$tools/replicate-archive" --print-args=false --copies=13 "ark:$fix/feats/lda.ark" "ark:$W/c.ark" 2>/dev/null
  "$tools/replicate-archive" --print-args=false --type=fst --copies=13 \
    "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$W/c.fsts" 2>/dev/null
  KALDI_GPU_SERVICE=no "$bin/gmm-align-compiled" --use-gpu=no "${opts[@]}" "$mdl" "ark:$W/c.fsts" \
    "ark,s,cs:$W/c.ark" "ark:$W/c-cpu.ali" 2>/dev/null
  KALDI_GPU_SERVICE=no "$bin/gmm-acc-stats-ali" --use-gpu=no "$mdl" "ark,s,cs:$W/c.ark" \
    "ark:$W/c-cpu.ali" "$W/c-cpu.acc" 2>/dev/null
  local n=0 good=0 bad=""
  for ctx in own service; do
    [ "$ctx" = service ] && svc_new
    for mask in none 0 1 1,0; do
      for ng in 1 2; do
        for prog in gmm-align-compiled gmm-acc-stats-ali gmm-align-acc-compiled gmm-align; do
          local e=(X=1) tag="$prog $ctx mask=$mask num-gpus=$ng" args=()
          [ "$ctx" = own ] && e+=(KALDI_GPU_SERVICE=no)
          [ "$mask" != none ] && e+=(CUDA_VISIBLE_DEVICES=$mask)
          rm -f "$W/c.ali" "$W/c.acc"
          case $prog in
            gmm-align-compiled) args=(--num-gpus="$ng" "${opts[@]}" "$mdl" "ark:$W/c.fsts" "ark,s,cs:$W/c.ark" "ark:$W/c.ali") ;;
            gmm-acc-stats-ali) [ "$ng" = 2 ] && continue
                               args=("$mdl" "ark,s,cs:$W/c.ark" "ark:$W/c-cpu.ali" "$W/c.acc") ;;
            gmm-align-acc-compiled) args=(--num-gpus="$ng" "${opts[@]}" "$mdl" "ark:$W/c.fsts" "ark,s,cs:$W/c.ark" "ark:$W/c.ali" "$W/c.acc") ;;
            gmm-align) args=(--num-gpus="$ng" --read-disambig-syms="$fix/models/disambig.int" --beam=10
                             --retry-beam=40 --acoustic-scale=0.1 --self-loop-scale=0.1
                             "$fix/models/tri2/tree" "$mdl" "$fix/models/L.fst" "ark:$fix/feats/lda.ark"
                             "ark:$fix/kaldi/text.int" "ark:$W/c.ali") ;;
          esac
          env "${e[@]}" "$bin/$prog" --use-gpu=yes "${args[@]}" 2>"$W/c.log"
          local rc=$? fine=1
          [ $rc = 0 ] || fine=0
          case $prog in  # gmm-align: the 40 utterances, Kaldi's own output
            gmm-align) same "$W/c.ali" "$fix/text/gmm-align-tri2.ark" || fine=0 ;;
            gmm-acc-stats-ali) same "$W/c.acc" "$W/c-cpu.acc" || fine=0 ;;
            gmm-align-compiled) same "$W/c.ali" "$W/c-cpu.ali" || fine=0 ;;
            *) same "$W/c.ali" "$W/c-cpu.ali" && same "$W/c.acc" "$W/c-cpu.acc" || fine=0 ;;
          esac
          n=$((n + 1))
          if [ $fine = 1 ]; then good=$((good + 1)); else
            [ $((n - good)) -le 3 ] && bad="$bad; $tag (exit $rc)"
            cp "$W/c.log" "$OUT/c-fail-$n.log"; fi
          echo "$tag: exit $rc, $([ $fine = 1 ] && echo '= CPU' || echo DIFFERENT) ($(grep -h -o -m1 'Using GPU: .*\|Accumulating on the GPU: .*' "$W/c.log"))" >>"$OUT/c-runs.txt"
        done
      done
    done
    [ "$ctx" = service ] && svc_end
  done
  row "c | every program, own contexts and the service, masks none/0/1/1,0, --num-gpus=1,2 | $n | | | $good/$n | | ${bad:-all = CPU path}$([ $((n - good)) -gt 3 ] && echo '; ... (c-runs.txt)')"
  # the one-pass program under compute-sanitizer, both GPUs visible
  command -v compute-sanitizer >/dev/null || { row "c | compute-sanitizer | | | | | | SKIP: not installed"; return; }
  local hog=""
  for dev in 0 1; do
    if [ "$dev" = 1 ] && [ -x "$tools/gpu-hog" ]; then  # device 0 busier: the job picks 1
      local free0
      free0=$(nvidia-smi -i 0 --query-gpu=memory.free --format=csv,noheader,nounits)
      "$tools/gpu-hog" "$(awk -v f="$free0" 'BEGIN { printf "%.1f", f / 1024 / 2 }')" 0 600 >"$W/hog0.out" 2>&1 & hog=$!
      for _ in $(seq 1 60); do grep -q holding "$W/hog0.out" && break; sleep 0.5; done
    fi
    KALDI_GPU_SERVICE=no compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$bin/gmm-align-acc-compiled" --use-gpu=yes "${opts[@]}" "$mdl" \
      "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$fix/feats/lda.ark" "ark:$W/san.ali" \
      "$W/san.acc" >"$OUT/c-sanitizer-$dev.log" 2>&1
    local rc=$?
    local on eq=NO
    on=$(grep -h -o 'Using GPU: [^(]*\|GPU [0-9]: free[^)]*)' "$OUT/c-sanitizer-$dev.log" | tr '\n' ' ')
    same "$W/san.ali" "$W/cpu40.ali" && same "$W/san.acc" "$W/cpu40.acc" && eq=yes
    row "c | gmm-align-acc-compiled own context, 2 GPUs visible, compute-sanitizer$([ -n "$hog" ] && echo ', device 0 busy') | 1 | | | $eq | | exit $rc; $(grep -h 'ERROR SUMMARY' "$OUT/c-sanitizer-$dev.log" | tail -n 1); $on"
    [ -n "$hog" ] && { kill "$hog"; wait "$hog" 2>/dev/null; hog=""; }
  done
}

part_d() {
  if [ ! -f "$W/long.done" ]; then
    "$tools/replicate-archive" --print-args=false --copies="$long_copies" --concat=long \
      "ark:$fix/feats/delta.ark" "ark:$W/long.ark" 2>/dev/null
    { printf 'long '; for _ in $(seq 1 "$long_copies"); do cut -d' ' -f2- "$fix/kaldi/text.int" | tr '\n' ' '; done; echo; } |
      sed 's/  */ /g' >"$W/long.text"
    "$bin/compile-train-graphs" --print-args=false --read-disambig-syms="$fix/models/disambig.int" \
      "$fix/models/tri1/tree" "$fix/models/tri1/final.mdl" "$fix/models/L.fst" "ark:$W/long.text" \
      "ark:$W/long.fsts" 2>"$OUT/long-graph.log" || { row "d | long graph failed | | | | | | see long-graph.log"; return; }
    KALDI_GPU_SERVICE=no "$bin/gmm-align-acc-compiled" --use-gpu=no "${opts[@]}" "$fix/models/tri1/final.mdl" \
      "ark:$W/long.fsts" "ark:$W/long.ark" "ark:$W/long-cpu.ali" "$W/long-cpu.acc" 2>"$OUT/long-cpu.log"
    touch "$W/long.done"
  fi
  want_ali=$W/long-cpu.ali want_acc=$W/long-cpu.acc
  local cmd=("$bin/gmm-align-acc-compiled" "${opts[@]}" "$fix/models/tri1/final.mdl" "ark:$W/long.fsts"
             "ark:$W/long.ark" "ark:$W/@N@.@I@.ali" "$W/@N@.@I@.acc")
  local mins
  mins=$(awk -v c="$long_copies" -v f="$frames40" 'BEGIN { printf "%.0f", c * f / 6000 }')
  for ctx in own service; do
    for n in 1 "$long_jobs"; do
      local name="d-$ctx-$n" e=(X=1)
      [ "$ctx" = own ] && e+=(KALDI_GPU_SERVICE=no) || svc_new
      mem_start "$name"
      run_jobs "$name" "$n" "${e[@]}" -- "${cmd[@]//@N@/$name}"
      mem_stop
      [ "$ctx" = service ] && svc_end
      row "d | $n x one $mins-min recording, $ctx | $n | $peak_p | $peak_d | $ok/$n | $wall | $fails failed; $short memory LOG lines"
    done
  done
}

for p in $parts; do
  echo "=== part $p ($(date -u +%T)) ==="
  "part_$p"
done
{
  echo
  echo "Budgets: job $(printenv KALDI_GPU_MEMORY || echo 'default (2 GiB, at most 1/8 of the device)'),"
  echo "service $(printenv KALDI_GPU_SERVICE_MEMORY || echo 'default (12 GiB, at most 1/4 of the device)');"
  echo "peak MiB (processes): nvidia-smi's per-process used_memory summed over our processes (the"
  echo "service and the jobs; contexts included), highest 0.2 s sample; (device): memory.used of all"
  echo "GPUs less its value before the run."
} >>"$table"
echo
cat "$table"
