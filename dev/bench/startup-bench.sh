#!/bin/bash
# Start-up cost as a recipe sees it: N gmm-acc-stats-ali jobs started at the
# same moment on small data (the tri2 fixture, 40 utterances), the way run.pl
# starts the jobs of one training iteration. Each job's wall time is taken by
# the shell around it; min / median / max per mode, outputs compared.
#
#   dev/bench/startup-bench.sh [N]        (default 16)
#
# Modes: kaldi (KALDI_ROOT or KALDI_BIN set), ours on the CPU (--use-gpu=no),
# ours on its own CUDA context (KALDI_GPU_SERVICE=no), ours through the GPU
# service started by the first job (cold), and again with it running (warm).
# GPU modes are skipped without /dev/nvidiactl.
set -uo pipefail
cd "$(dirname "$0")/../.."
N=${1:-16}
DATA=${STARTUP_DATA:-tests/data}
BIN=${GPU_BIN:-$PWD/gmmbin-gpu}
KBIN=${KALDI_BIN:-${KALDI_ROOT:+$KALDI_ROOT/src/gmmbin}}
[ -n "$KBIN" ] && [ ! -x "$KBIN/gmm-acc-stats-ali" ] && [ -x "$KALDI_ROOT/bin/gmm-acc-stats-ali" ] && KBIN=$KALDI_ROOT/bin
work=$(mktemp -d /tmp/startup-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
mdl=$DATA/models/tri2/final.mdl feats=ark:$DATA/feats/lda.ark ali=ark:$DATA/kaldi/tri2/ali.ark

# run_mode LABEL PROGRAM [ENV=VALUE...] -- [OPTIONS...]
run_mode() {
  local label=$1 prog=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  mkdir -p "$work/$label"
  local i
  for i in $(seq 1 "$N"); do
    ( s=$EPOCHREALTIME
      env "${envs[@]}" "$prog" "$@" "$mdl" "$feats" "$ali" "$work/$label/$i.acc" 2>"$work/$label/$i.log"
      rc=$?
      echo "$s $EPOCHREALTIME $rc" > "$work/$label/$i.time" ) &
  done
  wait
  local bad
  bad=$(awk '$3 != 0' "$work/$label"/*.time | wc -l)
  awk '{ printf "%.3f\n", $2 - $1 }' "$work/$label"/*.time | sort -n |
    awk -v label="$label" -v bad="$bad" '{ v[NR] = $1 }
      END { printf "%-20s jobs %3d  min %6.3f  median %6.3f  max %6.3f s%s\n",
            label, NR, v[1], v[int((NR + 1) / 2)], v[NR], (bad > 0 ? "  (" bad " failed)" : "") }'
  local same=""
  for ref in kaldi ours-cpu; do
    [ "$ref" != "$label" ] && [ -f "$work/$ref/1.acc" ] &&
      if cmp -s "$work/$label/1.acc" "$work/$ref/1.acc"; then same+=" =$ref"; else same+=" !=$ref"; fi
  done
  [ -n "$same" ] && echo "   output:$same"
  grep -h -m1 -E 'Using GPU|GPU service not usable|on the CPU' "$work/$label/1.log" | sed 's/^/   log: /' | head -n 1
}

echo "startup-bench: $N jobs at once, $(nproc) cores, data $DATA ($(date -u +%F))"
[ -n "$KBIN" ] && run_mode kaldi "$KBIN/gmm-acc-stats-ali" KIO_X=1 --
run_mode ours-cpu "$BIN/gmm-acc-stats-ali" KALDI_GPU_SERVICE=no -- --use-gpu=no
if [ -e /dev/nvidiactl ]; then
  run_mode ours-own-context "$BIN/gmm-acc-stats-ali" KALDI_GPU_SERVICE=no -- --use-gpu=yes
  export KALDI_GPU_SERVICE_DIR=$work/svc
  run_mode ours-service-cold "$BIN/gmm-acc-stats-ali" KIO_X=1 -- --use-gpu=yes
  run_mode ours-service-warm "$BIN/gmm-acc-stats-ali" KIO_X=1 -- --use-gpu=yes
  run_mode ours-service-warm2 "$BIN/gmm-acc-stats-ali" KIO_X=1 -- --use-gpu=yes
else
  echo "GPU modes: SKIP (no /dev/nvidiactl)"
fi
