#!/bin/bash
# One process at full speed: where the time of gmm-align-acc-compiled,
# gmm-align-compiled and gmm-acc-stats-ali goes over ~97.5 h (the tri2
# fixture with its LDA features, graphs and Kaldi's alignment, replicated),
# in one device call of at most 8 minutes on one GPU, each program under
# the variants that isolate a cause:
#   budget   the job's device-memory budget: the shared default
#            (KALDI_GPU_MEMORY=2G) against a job alone (the default now:
#            1/4 of the device) or BIG
#   stats    the statistics kernel: KALDI_GPU_DEV_ACC_STATS=cells (a pdf's
#            cells over many blocks) or tiled (one block per pdf)
#   service  own context (KALDI_GPU_SERVICE=no) or the GPU service (a fresh,
#            warmed-up one per variant), its blocking waits
#            (KALDI_GPU_DEV_SERVICE_SYNC=spin; KALDI_GPU_DEV_SERVICE_SPIN_US=0:
#            no polling before a wait sleeps), the job's requests in
#            flight and their size (KALDI_GPU_DEV_SERVICE_INFLIGHT,
#            KALDI_GPU_DEV_SERVICE_REQUEST_KB)
#   old      other builds' programs (packed as NAME=DIR), same data
#   svc      this build and every old one through the GPU service (a fresh
#            service each: the one pass, the aligner, the accumulator),
#            then the accumulator on its own context
# and gmm-acc-stats-ali as 16 jobs of 1/16 of the data at once through the
# service: what one process should match; then, where the host has nsys,
# the kernels of one default one-pass run. Each output is compared with the
# first run's of its kind (identical bytes expected, except a build whose
# statistics were summed with atomics). --verbose=2 time splits in the logs.
#
# Here:  make -j2 all && dev/device/onepass-regress.sh pack [NAME=DIR ...]
#        .carry/ then holds only onepass.tar.xz (these programs, the
#        service, replicate-archive and each DIR's gmmbin-gpu programs as
#        old/NAME, DIR/VERSION or its git log line naming it; xz: ~1 MB a
#        build), so the tree (tests/data included) and the carry stay under
#        the call's 64 MiB.
# There: carry [".carry"], command "dev/device/onepass-regress.sh run"
#        (also runs from dev/device/device-pack.sh's .carry, without old
#        builds, where that fits).
# Writes $OUT/onepass-regress.md (the table), $OUT/logs.tgz (the runs'
# logs) and, with nsys, $OUT/nsys-kernels.csv.
# Env: HOURS (97.5), STEPS ("fused align acc jobs old"), BIG (35G),
# LIMIT_S (430: later runs are skipped, and said so, past it), RUN_S (120:
# one run's limit), WORK (/tmp/onepass).
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
progs="gmm-align-acc-compiled gmm-align-compiled gmm-acc-stats-ali kaldi-gpu-service"

if [ "${1:-}" = pack ]; then
  shift
  st=$(mktemp -d /tmp/onepass-pack.XXXXXX)
  mkdir -p "$st/new" "$st/tools"
  for p in $progs; do strip -o "$st/new/$p" "gmmbin-gpu/$p" || exit 1; done
  strip -o "$st/tools/replicate-archive" build/tools/replicate-archive || exit 1
  for nd in "$@"; do
    name=${nd%%=*} dir=${nd#*=}
    mkdir -p "$st/old/$name"
    for p in $progs; do
      [ -x "$dir/gmmbin-gpu/$p" ] && strip -o "$st/old/$name/$p" "$dir/gmmbin-gpu/$p"
    done
    if [ -f "$dir/VERSION" ]; then cp "$dir/VERSION" "$st/old/$name/VERSION"
    else git -C "$dir" log -1 --format='%h %ad %s' --date=iso >"$st/old/$name/VERSION" 2>/dev/null; fi
  done
  git log -1 --format='%h %ad %s' --date=iso >"$st/new/VERSION"
  rm -rf .carry && mkdir .carry && tar -C "$st" -cJf .carry/onepass.tar.xz . || exit 1
  rm -rf "$st"
  du -sh .carry
  echo "tree (tracked): $(git ls-files -z | du -ch --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)"
  exit 0
fi
[ "${1:-}" = run ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 1; }

OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${WORK:-/tmp/onepass}; mkdir -p "$W"; chmod 700 "$W"
# a call brings back at most 8 files: the logs travel as one archive,
# written also when the call's time limit stops the script
L=$W/logs; rm -rf "$L"; mkdir -p "$L"
pack_logs() { tar -C "$W" -czf "$OUT/logs.tgz" logs 2>/dev/null; }
trap 'pack_logs; exit 143' TERM INT
T0=$EPOCHREALTIME
limit=${LIMIT_S:-430}
elapsed() { awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", b - a }'; }
if [ -f .carry/onepass.tar.xz ]; then
  rm -rf "$W/p" && mkdir -p "$W/p" && tar -C "$W/p" -xJf .carry/onepass.tar.xz || exit 1
  NEW=$W/p/new TOOLS=$W/p/tools
else  # dev/device/device-pack.sh's layout
  NEW=$top/.carry/gmmbin-gpu TOOLS=$top/.carry/build/tools
  export LD_LIBRARY_PATH="$top/.carry/lib:${LD_LIBRARY_PATH:-}"
fi
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
md=$OUT/onepass-regress.md
{
  echo "# One process over the replicated tri2 fixture ($(date -u +%FT%TZ))"
  echo
  echo "$(nvidia-smi -L 2>/dev/null | head -n 1); $(nproc) cores; driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  echo "new: $(cat "$NEW/VERSION" 2>/dev/null || echo this tree)"
  for d in "$W"/p/old/*/; do [ -d "$d" ] && echo "old $(basename "$d"): $(cat "$d/VERSION" 2>/dev/null)"; done
} >"$md"

# ---- data: HOURS of the fixture, page-cached ----
fix=tests/data
per=$(sed -n 's/.*over \([0-9]*\) frames\..*/\1/p' "$fix/kaldi/tri2/align.log")
copies=$(awk -v h="${HOURS:-97.5}" -v p="$per" 'BEGIN { c = int(h * 360000 / p); if (c * p < h * 360000) c++; print c }')
part=$(( (copies + 15) / 16 ))
frames=$(( copies * per ))
rep() { "$TOOLS/replicate-archive" --print-args=false "$@" 2>>"$L/replicate.log"; }
if [ ! -s "$W/done.$copies" ]; then
  rm -f "$W"/*.ark "$W"/*.fsts "$W"/done.*
  rep --type=matrix --copies="$copies" "ark:$fix/feats/lda.ark" "ark:$W/lda.ark" &&
  rep --type=fst --copies="$copies" "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$W/tri2.fsts" &&
  rep --type=ali --copies="$copies" "ark:$fix/kaldi/tri2/ali.ark" "ark:$W/ali.ark" &&
  rep --type=matrix --copies="$part" "ark:$fix/feats/lda.ark" "ark:$W/lda16.ark" &&
  rep --type=ali --copies="$part" "ark:$fix/kaldi/tri2/ali.ark" "ark:$W/ali16.ark" &&
  touch "$W/done.$copies" || { echo "replicate-archive failed (logs/replicate.log)" >>"$md"; exit 1; }
fi
cat "$W"/*.ark "$W"/*.fsts >/dev/null
{
  echo "data: $copies copies of tests/data (tri2, LDA) = $frames frames = $(awk -v f="$frames" 'BEGIN { printf "%.1f", f / 360000 }') h (prepared by $(elapsed) s)"
  echo
  echo "| # | program | where | variant | wall s | output | time split (--verbose=2) |"
  echo "|---|---|---|---|---:|---|---|"
} >>"$md"

mdl=$fix/models/tri2/final.mdl
opts=(--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40)
graphs="ark:$W/tri2.fsts" feats="ark,s,cs:$W/lda.ark"
n=0
declare -A first  # kind -> the first output of that kind
# the splits worth a column: the aligner's and the accumulator's totals
split_of() {
  local subs; subs=$(sed -n 's/^device sub-batches: //p' "$1")
  { grep -h -o -E 'budget [0-9.]+ MiB \([a-z ]+\)|reading [0-9.]+ s|alignment [0-9.]+ s|Viterbi [0-9.]+ s|per-batch hook [0-9.]+ s|peak [0-9.]+ MiB|[0-9]+ batches, [0-9]+ frames|staging [0-9.]+ s|waiting for the device [0-9.]+ s|[0-9.]+ s in the accumulator|total [0-9.]+ s|[0-9]+ requests in [0-9]+ batches \([0-9]+ sent ahead\)|sending [0-9.]+ s|shared memory copies [0-9.]+ s|keeping the batches [0-9.]+ s|graphs [0-9.]+ MB|waiting for replies [0-9.]+ s' "$1"
    [ "${subs:-0}" -gt 0 ] && echo "$subs device sub-batches"; } | awk '!seen[$0]++' | tr '\n' ';' | sed 's/;$//; s/;/; /g'
}
same() {  # kind file: sets res (identical to the first output of that kind?)
  if [ ! -s "$2" ]; then res=none
  elif [ -z "${first[$1]:-}" ]; then first[$1]=$2; res=first
  elif cmp -s "${first[$1]}" "$2"; then res="= #$(basename "${first[$1]}" | sed 's/^o//; s/\..*//')"
  else res="DIFFERS from #$(basename "${first[$1]}" | sed 's/^o//; s/\..*//')"
  fi
}
# row PROGRAM_DIR PROGRAM WHERE VARIANT [VAR=VALUE ...] -- ARGS...: one timed run
row() {
  local dir=$1 prog=$2 where=$3 variant=$4; shift 4
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  n=$((n + 1))
  if [ "$(elapsed)" -ge "$limit" ]; then
    echo "| $n | $prog | $where | $variant | | skipped: the call's time | |" >>"$md"; return
  fi
  local log=$L/$n.$prog.log svc=()
  if [ "$where" = own ]; then svc=(KALDI_GPU_SERVICE=no); else svc=(KALDI_GPU_SERVICE=yes); fi
  local t0=$EPOCHREALTIME
  timeout -k 5 "${RUN_S:-120}" env "${svc[@]}" "${envs[@]}" "$dir/$prog" --verbose=2 "$@" 2>"$log.all"
  local rc=$? t1=$EPOCHREALTIME
  # the per-utterance lines (~99,000) stay here: the logs must come back
  grep -v -E 'gmm-align-compiled.cc:127\)|Device sub-batch' "$log.all" >"$log"
  grep -c 'Device sub-batch' "$log.all" | sed 's/^/device sub-batches: /' >>"$log"
  rm -f "$log.all"
  local wall; wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  local outs="" f
  for f in "$W"/o"$n".*; do
    [ -e "$f" ] || continue
    same "${f##*.}" "$f"
    outs="$outs${outs:+, }${f##*.}: $res"
    [ "$res" = first ] || rm -f "$f"  # ~150 MB a run
  done
  [ $rc = 0 ] || outs="exit $rc; $outs"
  echo "| $n | $prog | $where | $variant | $wall | $outs | $(split_of "$log") |" >>"$md"
  echo "$n $prog $where $variant: $wall s ($outs)"
}
fused() { local d=$1 w=$2 v=$3; shift 3
  row "$d" gmm-align-acc-compiled "$w" "$v" "$@" -- "${opts[@]}" "$mdl" "$graphs" "$feats" \
    "ark:$W/o$((n + 1)).ali" "$W/o$((n + 1)).acc"; }
align() { local d=$1 w=$2 v=$3; shift 3
  row "$d" gmm-align-compiled "$w" "$v" "$@" -- "${opts[@]}" "$mdl" "$graphs" "$feats" \
    "ark:$W/o$((n + 1)).ali"; }
acc() { local d=$1 w=$2 v=$3; shift 3
  row "$d" gmm-acc-stats-ali "$w" "$v" "$@" -- "$mdl" "$feats" "ark:$W/ali.ark" \
    "$W/o$((n + 1)).sacc"; }

# GPU service variants: a fresh service directory per variant, warmed up by
# a small run (context and model), stopped afterwards (by its pid: the
# processes whose executable is that service binary).
svc_n=0
svc_start() {  # VAR=VALUE ...: the service's environment (inherited at start)
  svc_n=$((svc_n + 1))
  export KALDI_GPU_SERVICE_DIR=$W/svc$svc_n KALDI_GPU_SERVICE_IDLE=30 KALDI_GPU_SERVICE_VERBOSE=2
  export KALDI_GPU_SERVICE_BIN=$1; shift
  env "$@" KALDI_GPU_SERVICE=yes "$(dirname "$KALDI_GPU_SERVICE_BIN")/gmm-align-compiled" "${opts[@]}" \
    "$mdl" "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$fix/feats/lda.ark" ark:/dev/null \
    2>"$L/svc$svc_n.warmup.log"
}
svc_stop() {  # the service(s) of this binary: started by this script
  local bin e
  bin=$(readlink -f "$KALDI_GPU_SERVICE_BIN")
  for e in /proc/[0-9]*/exe; do
    [ "$(readlink -f "$e" 2>/dev/null)" = "$bin" ] || continue
    e=${e#/proc/}; kill "${e%/exe}" 2>/dev/null
  done
  sleep 1
  cp "$KALDI_GPU_SERVICE_DIR"/service-*.log "$L/svc$svc_n.service.log" 2>/dev/null
  unset KALDI_GPU_SERVICE_DIR KALDI_GPU_SERVICE_BIN
}

steps=" ${STEPS:-fused align acc jobs old} "
big=${BIG:-35G}
# ---- own context first (a service alive would make a job not alone) ----
case $steps in *" fused "*)
  fused "$NEW" own "default (a job alone: 1/4 of the device), cells"
  fused "$NEW" own "KALDI_GPU_MEMORY=2G (shared default), cells" KALDI_GPU_MEMORY=2G
  fused "$NEW" own "KALDI_GPU_MEMORY=2G, tiled (= main of 2026-11-27)" KALDI_GPU_MEMORY=2G KALDI_GPU_DEV_ACC_STATS=tiled
  fused "$NEW" own "KALDI_GPU_MEMORY=$big, tiled (= no budgets, 2026-11-26)" KALDI_GPU_MEMORY=$big KALDI_GPU_DEV_ACC_STATS=tiled
  fused "$NEW" own "KALDI_GPU_MEMORY=$big, cells" KALDI_GPU_MEMORY=$big
  fused "$NEW" own "default, cells (again)"
  fused "$NEW" own "features on one reading thread (KALDI_GPU_DEV_READ_THREADS=0)" KALDI_GPU_DEV_READ_THREADS=0
;; esac
case $steps in *" align "*)
  align "$NEW" own "default (alone)"
  align "$NEW" own "KALDI_GPU_MEMORY=2G" KALDI_GPU_MEMORY=2G
  align "$NEW" own "features on one reading thread (KALDI_GPU_DEV_READ_THREADS=0)" KALDI_GPU_DEV_READ_THREADS=0
;; esac
case $steps in *" acc "*)
  acc "$NEW" own "default, cells, reading overlapped"
  acc "$NEW" own "tiled" KALDI_GPU_DEV_ACC_STATS=tiled
  acc "$NEW" own "KALDI_GPU_MEMORY=2G, cells" KALDI_GPU_MEMORY=2G
  acc "$NEW" own "reading in order (KALDI_GPU_DEV_READ_THREADS=0)" KALDI_GPU_DEV_READ_THREADS=0
;; esac
case $steps in *" old "*)
  for d in "$W"/p/old/*/; do
    [ -x "$d/gmm-align-acc-compiled" ] || continue
    o=$(basename "$d")
    fused "${d%/}" own "build $o"
    align "${d%/}" own "build $o"
    acc "${d%/}" own "build $o"
  done
;; esac
# ---- through the service ----
case $steps in *" fused "*)
  svc_start "$NEW/kaldi-gpu-service"
  fused "$NEW" svc "default, cells"
  fused "$NEW" svc "features on one reading thread (KALDI_GPU_DEV_READ_THREADS=0)" KALDI_GPU_DEV_READ_THREADS=0
  acc "$NEW" svc "default, cells"
  align "$NEW" svc "default"
  # the job's requests: one at a time (no transfer overlapped), or smaller
  # and more of them in flight
  fused "$NEW" svc "one request in flight: none sent ahead (KALDI_GPU_DEV_SERVICE_INFLIGHT=1)" KALDI_GPU_DEV_SERVICE_INFLIGHT=1
  fused "$NEW" svc "3 in flight, batches in 64 MB requests (KALDI_GPU_DEV_SERVICE_REQUEST_KB=65536)" KALDI_GPU_DEV_SERVICE_INFLIGHT=3 KALDI_GPU_DEV_SERVICE_REQUEST_KB=65536
  svc_stop
  svc_start "$NEW/kaldi-gpu-service" KALDI_GPU_DEV_SERVICE_SYNC=spin
  fused "$NEW" svc "service spinning (KALDI_GPU_DEV_SERVICE_SYNC=spin)"
  svc_stop
  svc_start "$NEW/kaldi-gpu-service" KALDI_GPU_DEV_SERVICE_SPIN_US=0
  fused "$NEW" svc "service waits sleep at once (KALDI_GPU_DEV_SERVICE_SPIN_US=0)"
  svc_stop
  svc_start "$NEW/kaldi-gpu-service" KALDI_GPU_DEV_ACC_STATS=tiled
  fused "$NEW" svc "tiled (the service's kernel)"
  svc_stop
;; esac
# every build through the service, each with a fresh service of its own:
# the one pass, the aligner and the accumulator (the service's time split
# in logs/svc*.service.log), then the accumulator on its own context
case $steps in *" svc "*)
  for d in "$NEW" "$W"/p/old/*/; do
    d=${d%/}
    [ -x "$d/kaldi-gpu-service" ] || continue
    o=new; [ "$d" = "$NEW" ] || o=$(basename "$d")
    svc_start "$d/kaldi-gpu-service"
    fused "$d" svc "build $o"
    align "$d" svc "build $o"
    acc "$d" svc "build $o"
    # this build's accumulator with one ACC request at a time (as before
    # two were kept in flight)
    [ "$d" = "$NEW" ] && acc "$d" svc "build $o, one ACC request in flight (KALDI_GPU_DEV_SERVICE_ACC_INFLIGHT=1)" KALDI_GPU_DEV_SERVICE_ACC_INFLIGHT=1
    svc_stop
    acc "$d" own "build $o"
  done
;; esac
case $steps in *" jobs "*)
  svc_start "$NEW/kaldi-gpu-service"
  n=$((n + 1))
  if [ "$(elapsed)" -lt "$limit" ]; then
    t0=$EPOCHREALTIME pids=()
    for i in $(seq 1 16); do
      KALDI_GPU_SERVICE=yes timeout -k 5 "${RUN_S:-120}" "$NEW/gmm-acc-stats-ali" "$mdl" "ark,s,cs:$W/lda16.ark" "ark:$W/ali16.ark" \
        "$W/j$i.acc" 2>"$L/$n.job$i.log" & pids+=($!)
    done
    bad=0; for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
    t1=$EPOCHREALTIME
    diff=0; for i in $(seq 2 16); do cmp -s "$W/j1.acc" "$W/j$i.acc" || diff=$((diff + 1)); done
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    echo "| $n | gmm-acc-stats-ali x16 | svc | 16 jobs of $part copies each (the same data in all) | $wall | $bad failed, $diff of 15 differ from job 1 | |" >>"$md"
  else
    echo "| $n | gmm-acc-stats-ali x16 | svc | | | skipped: the call's time | |" >>"$md"
  fi
  svc_stop
;; esac
for d in "$W"/p/old/*/; do
  case $steps in *" old "*) ;; *) break ;; esac
  [ -x "$d/kaldi-gpu-service" ] || continue
  o=$(basename "$d")
  svc_start "${d%/}/kaldi-gpu-service"
  fused "${d%/}" svc "build $o"
  svc_stop
done
# ---- nsys (if the host has it): the kernels of one default one-pass run ----
if command -v nsys >/dev/null && [ "$(elapsed)" -lt $((limit - 60)) ]; then
  KALDI_GPU_SERVICE=no nsys profile -t cuda -o "$W/prof" --force-overwrite true \
    "$NEW/gmm-align-acc-compiled" "${opts[@]}" "$mdl" "$graphs" "$feats" ark:/dev/null /dev/null \
    >"$L/nsys.log" 2>&1 &&
    nsys stats --report cuda_gpu_kern_sum --format csv "$W/prof.nsys-rep" >"$OUT/nsys-kernels.csv" 2>>"$L/nsys.log"
  echo "nsys: kernels of a default one-pass run in nsys-kernels.csv" >>"$md"
fi
{
  echo
  echo "Outputs: ali = alignments, acc = the one pass's statistics, sacc = gmm-acc-stats-ali's (Kaldi's alignment);"
  echo "\"= #k\": identical to run k's (builds before 2026-11-24 summed the statistics with double atomics: theirs differ in the last bits)."
  echo "Total $(elapsed) s. Logs (logs.tgz): logs/N.PROGRAM.log (--verbose=2; per-utterance lines left out), logs/svc*.service.log."
} >>"$md"
pack_logs
cat "$md"
rm -f "$W"/o*.* "$W"/j*.acc
