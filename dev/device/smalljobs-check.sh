#!/bin/bash
# smalljobs-check: the fixed cost of a recipe's small jobs through the GPU
# service (issue 26, item 1: train_mono's 336 gmm-align-compiled calls of
# ~94 utterances), before and after the in-process gmm-boost-silence stage
# and the cached rounding-profile probe, and the service's accumulation of
# 16 concurrent train_deltas-sized jobs. One device call; logs under $OUT.
#
#   here:  make -j2 all && dev/device/device-pack.sh
#   there: carry [".carry"], dev/device/smalljobs-check.sh
#
# Needs only the build (.carry) and tests/data; the Kaldi bundle (KALDI_BUNDLE,
# recipe-device.sh's stash or shared/kaldi/kaldi-bin.tar.xz) for the "old"
# variant (Kaldi's gmm-boost-silence as the real pipe, the probe run by
# every job, as main did): without it that variant is skipped.
#
# Part A: N (16) gmm-align-compiled jobs at once, each the mono fixture x2
# (80 utterances, 28k frames) with the steps scripts' model rspecifier
# "gmm-boost-silence --boost=1.0 SIL MDL - |", through one warm service, REPS
# rounds per variant, variants interleaved:
#   new   default (model stage in process, probe cached)
#   old   KALDI_GPU_FEATS_PIPE=0 KALDI_GPU_DEV_BLAS_CACHE=0 (Kaldi's pipe)
#   file  the model as a file (no pipe at all: what is left of the model's cost)
#   cpu   --use-gpu=no (would a small job be faster on its own core?)
# Prints per variant the job wall seconds (min / median / max over all jobs
# of all rounds), the rounds' wall (best, median) and the median of the
# jobs' own "total" (--verbose=1): wall - total is the cost outside the
# program's own timing. Checks: every alignment equals the first one; the
# jobs' lines of new and old the same (versions aside, sorted).
# Part B: dev/bench/acc-service-bench.sh 1 16 (tri1 x41 = 580k frames a job,
# the service's split with KALDI_GPU_SERVICE_VERBOSE=2).
#
# Expected: "new" about 20-40 ms a job less than "old" (one Kaldi process and
# two probe processes fewer per job), "file" within a few ms of "new";
# every check "same". Exit 1 if a check fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
if [ -d .carry/gmmbin-gpu ]; then
  export LD_LIBRARY_PATH="$top/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  cp .carry/gmmbin-gpu/* gmmbin-gpu/
  export BUILD=${BUILD:-.carry/build}
fi
BUILD=${BUILD:-build}
tools=$top/$BUILD/tools
bin=${BIN:-$top/gmmbin-gpu}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
N=${N:-16}
REPS=${REPS:-5}
work=$(mktemp -d /tmp/smalljobs.XXXXXX)
chmod 700 "$work"
trap 'pkill -f -- "--socket=$work/" 2>/dev/null; rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*" | tee -a "$OUT/smalljobs.txt"; fails=$((fails + 1)); }
log() { echo "$*" | tee -a "$OUT/smalljobs.txt"; }
now() { date +%s.%N; }

kb=${KALDI_BUNDLE:-}
for t in "$kb" /tmp/recipe-device/in/kaldi-bin.tar.xz shared/kaldi/kaldi-bin.tar.xz \
         ../shared/kaldi/kaldi-bin.tar.xz; do
  [ -n "$t" ] || continue
  if [ -d "$t" ] && [ -x "$t/bin/gmm-boost-silence" ]; then kb=$(cd "$t" && pwd); break; fi
  if [ -f "$t" ]; then mkdir -p "$work/k" && tar -C "$work/k" -xJf "$t" && kb=$work/k/kb && break; fi
done
variants="new file cpu"
if [ -n "$kb" ] && [ -x "$kb/bin/gmm-boost-silence" ]; then
  export PATH="$kb/bin:$PATH"
  variants="new old file cpu"
else
  kb=""
fi
{ date -u; nvidia-smi -L; nproc; echo "Kaldi bundle: ${kb:-none (variant old skipped)}"; } 2>&1 |
  tee "$OUT/env.txt"

# ---- Part A ----
fix=$top/tests/data
"$tools/replicate-archive" --print-args=false --type=fst --copies=2 \
  "ark:gunzip -c $fix/graphs/mono.fsts.gz|" "ark:$work/mono.fsts" 2>"$work/rep.log" &&
"$tools/replicate-archive" --print-args=false --type=matrix --copies=2 \
  "ark:$fix/feats/delta.ark" "ark:$work/mono.ark" 2>>"$work/rep.log" ||
  { cat "$work/rep.log"; exit 1; }
sil=$(cat "$fix/models/silence.csl")
mdl=$fix/models/mono/final.mdl
opts="--verbose=1 --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 --careful=false"
export KALDI_GPU_SERVICE_DIR=$work/svc KALDI_GPU_SERVICE_VERBOSE=2 KALDI_GPU_SERVICE_IDLE=120
mkdir -m 700 "$work/svc"
unset KALDI_GPU_FEATS_PIPE KALDI_GPU_DEV_BLAS_CACHE KALDI_GPU_SERVICE

job() {  # VARIANT ROUND J: one job, "rc wall" into $work/t.V.R.J
  local v=$1 r=$2 j=$3 m="gmm-boost-silence --boost=1.0 $sil $mdl - |" e=() o=""
  case $v in
    old) e=(KALDI_GPU_FEATS_PIPE=0 KALDI_GPU_DEV_BLAS_CACHE=0) ;;
    file) m=$mdl ;;
    cpu) o=--use-gpu=no ;;
  esac
  local s; s=$(now)
  # shellcheck disable=SC2086
  env "${e[@]}" "$bin/gmm-align-compiled" $opts $o "$m" "ark:$work/mono.fsts" \
    "ark,s,cs:$work/mono.ark" "ark,t:|gzip -c >$work/a.$v.$r.$j.gz" 2>"$work/l.$v.$r.$j"
  echo "$? $(awk -v a="$s" -v b="$(now)" 'BEGIN {printf "%.4f", b - a}')" >"$work/t.$v.$r.$j"
}
# warm: the service started, the probe's answer kept
job new 0 0
grep -q "through the GPU service" "$work/l.new.0.0" ||
  { fail "the service was not used"; cat "$work/l.new.0.0"; }
for r in $(seq 1 "$REPS"); do
  for v in $variants; do
    s=$(now)
    for j in $(seq 1 "$N"); do job "$v" "$r" "$j" & done
    wait
    awk -v a="$s" -v b="$(now)" 'BEGIN {printf "%.4f\n", b - a}' >>"$work/round.$v"
  done
done
stats() { sort -n | awk '{v[NR]=$1} END {if (NR) printf "%.3f / %.3f / %.3f", v[1], v[int((NR+1)/2)], v[NR]; else printf "-"}'; }
log ""
log "Part A: $N gmm-align-compiled jobs at once (mono x2: 80 utterances), $REPS rounds"
log ""
log "| variant | job wall s min / median / max | round wall s best / median | jobs' own total (median) | wall - total (median) |"
log "|---|---|---|---:|---:|"
ref=$(gunzip -c "$work/a.new.0.0.gz" | md5sum)
for v in $variants; do
  for f in "$work"/t.$v.*; do
    read -r rc w <"$f"
    [ "$rc" = 0 ] || fail "$v $(basename "$f"): exit $rc"
  done
  walls=$(cat "$work"/t.$v.* | awk '{print $2}' | stats)
  rounds=$(stats <"$work/round.$v" | awk -F' / ' '{print $1 " / " $2}')
  tot=$(sed -n 's/.*, total \([0-9.]*\) s$/\1/p' "$work"/l.$v.* | stats | awk -F' / ' '{print $2}')
  out=$(for f in "$work"/l.$v.*; do
          t=$(sed -n 's/.*, total \([0-9.]*\) s$/\1/p' "$f")
          k=${f##*/l.}
          read -r _ w <"$work/t.$k"
          [ -n "$t" ] && awk -v a="$w" -v b="$t" 'BEGIN {printf "%.4f\n", a - b}'
        done | stats | awk -F' / ' '{print $2}')
  log "| $v | $walls | $rounds | $tot | $out |"
  for f in "$work"/a.$v.*.gz; do
    [ "$(gunzip -c "$f" | md5sum)" = "$ref" ] || fail "$v: $(basename "$f") differs from the first alignment"
  done
done
# the lines of new and old: the same, versions and our timing lines aside
norm() { grep -v 'VLOG\|^/\|kio_log_ours' "$1" | sed -e 's/\[[0-9.~a-z-]*\]:/[V]:/' | sort; }
if [ -n "$kb" ]; then
  if diff <(norm "$work/l.new.1.1") <(norm "$work/l.old.1.1") >"$work/lines.diff"; then
    log "lines of new and old: same"
  else
    fail "lines of new and old differ"; head -20 "$work/lines.diff" | tee -a "$OUT/smalljobs.txt"
  fi
fi
log "alignments of every variant: $([ $fails = 0 ] && echo same || echo see FAIL lines)"
cp "$work/l.new.1.1" "$OUT/job-new.log"
[ -n "$kb" ] && cp "$work/l.old.1.1" "$OUT/job-old.log"
cp "$work/l.cpu.1.1" "$OUT/job-cpu.log"
ls "$work"/svc/*.log >/dev/null 2>&1 && cp "$work"/svc/*.log "$OUT/" 2>/dev/null
pkill -f -- "--socket=$work/" 2>/dev/null

# ---- Part B ----
log ""
log "Part B: dev/bench/acc-service-bench.sh 1 16"
BIN=$bin TOOLS=$tools bash dev/bench/acc-service-bench.sh 1 16 2>&1 | tee -a "$OUT/smalljobs.txt"
[ "${PIPESTATUS[0]}" = 0 ] || fail "acc-service-bench"
cp -r "$top/bench-data/acc/out" "$OUT/acc-out" 2>/dev/null
rm -f "$OUT"/acc-out/*.acc

[ $fails = 0 ] && log "smalljobs-check: PASS" && exit 0
log "smalljobs-check: $fails failure(s)"
exit 1
