#!/bin/bash
# --num-gpus=1 against 2 for one process, on the process's own context and
# through the GPU service: gmm-align-acc-compiled (the fused align +
# accumulate) and gmm-align-compiled.
#   1. Identity, small (COPIES_CPU, default 40 = 1.6 h): every GPU run's
#      alignments and statistics against the CPU path's (--use-gpu=no).
#   2. Timing over ~97.5 h (COPIES, default 2480: the tri2 fixture
#      replicated), REPS runs each (default 2), outputs compared with the
#      own context's --num-gpus=1; through the service --num-gpus=2 also
#      with balanced shares of each batch (KALDI_GPU_DEV_SERVICE_BALANCE=1);
#      the --verbose=2 lines that say where the time went (the Time: line,
#      each connection's frames, share and wait, where the statistics were
#      accumulated) printed, the logs and the service's in
#      $OUT/num-gpus-logs.tgz.
# Runs from dev/device/device-pack.sh's .carry with tests/data in the tree
# (the nvidia-h200-x2 kind):
#   dev/device/num-gpus-scaling.sh      (env COPIES, COPIES_CPU, REPS, OUT)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$top/.carry/gmmbin-gpu tools=$top/.carry/build/tools fix=$top/tests/data
export LD_LIBRARY_PATH="$top/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
copies=${COPIES:-2480} copies_cpu=${COPIES_CPU:-40} reps=${REPS:-2}
w=$(mktemp -d /tmp/numgpus.XXXXXX)
logs=${OUT:-$w}/num-gpus-logs
mkdir -p "$logs"
echo "num-gpus-scaling: $(nvidia-smi -L | wc -l) GPU(s): $(nvidia-smi -L | head -n 1 | cut -d'(' -f1), $(nproc) cores"
opts=(--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40)
mdl=$fix/models/tri2/final.mdl
export KALDI_GPU_SERVICE_DIR=$w/svc KALDI_GPU_SERVICE_VERBOSE=1  # a service of this build's own
mkdir -m 700 "$w/svc"
# run PROG WHERE(own|svc|cpu) K FEATS GRAPHS TAG [extra options]: outputs $w/TAG.ali
# (and .acc), log $logs/TAG.log, the seconds on stdout
run() {
  local prog=$1 where=$2 k=$3 feats=$4 graphs=$5 tag=$6; shift 6
  local out=("ark:$w/$tag.ali") svc=no gpu=--use-gpu=yes
  [ "$prog" = gmm-align-acc-compiled ] && out+=("$w/$tag.acc")
  [ "$where" = svc ] && svc=yes
  [ "$where" = cpu ] && gpu=--use-gpu=no
  local t0=$EPOCHREALTIME
  KALDI_GPU_SERVICE=$svc "$bin/$prog" "${opts[@]}" $gpu --num-gpus="$k" --verbose=2 "$@" "$mdl" \
    "ark:$graphs" "ark,s,cs:$feats" "${out[@]}" 2>"$logs/$tag.log"
  local rc=$?
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" 'BEGIN { printf "%.2f s%s", b - a, rc ? " (exit " rc ")" : "" }'
}
same() {  # A B: alignments (and statistics) of runs A and B identical
  local r="alignments $(cmp -s "$w/$1.ali" "$w/$2.ali" && echo identical || echo DIFFERENT)"
  [ -f "$w/$1.acc" ] && r="$r, statistics $(cmp -s "$w/$1.acc" "$w/$2.acc" && echo identical || echo DIFFERENT)"
  echo "$r"
}
where_lines() {  # the log's lines that say where the work went
  grep -h 'connections\|Accumulating on\|Through the GPU service\|Time:\|Using GPU' "$1" | cut -c1-400 | sed 's/^/    /'
}
rep() { "$tools/replicate-archive" --print-args=false --type="$1" --copies="$2" "$3" "$4" 2>/dev/null; }

echo "## 1. identity against the CPU path, x$copies_cpu"
rep matrix "$copies_cpu" "ark:$fix/feats/lda.ark" "ark:$w/s.ark"
rep fst "$copies_cpu" "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$w/s.fsts"
for prog in gmm-align-acc-compiled gmm-align-compiled; do
  echo "$prog --use-gpu=no: $(run $prog cpu 1 "$w/s.ark" "$w/s.fsts" "s.$prog.cpu")"
  for where in own svc; do
    for k in 1 2; do
      t=s.$prog.$where.$k
      echo "$prog $where --num-gpus=$k: $(run $prog $where $k "$w/s.ark" "$w/s.fsts" "$t"); against the CPU: $(same "$t" "s.$prog.cpu")"
    done
  done
done

echo "## 2. timing, x$copies"
rep matrix "$copies" "ark:$fix/feats/lda.ark" "ark:$w/lda.ark"
rep fst "$copies" "ark:gunzip -c $fix/graphs/tri2.fsts.gz|" "ark:$w/g.fsts"
cat "$w/lda.ark" "$w/g.fsts" >/dev/null
# the service started (and its devices initialised) before the first timed run
KALDI_GPU_SERVICE=yes "$bin/gmm-align-compiled" "${opts[@]}" --use-gpu=yes "$mdl" "ark:$w/s.fsts" \
  "ark,s,cs:$w/s.ark" "ark:/dev/null" 2>/dev/null
# WHERE.K[.bal]: bal = KALDI_GPU_DEV_SERVICE_BALANCE=1 (balanced shares of each batch)
for prog in gmm-align-acc-compiled gmm-align-compiled; do
  for cfg in own.1 own.2 svc.1 svc.2 svc.2.bal; do
    IFS=. read -r where k shares <<<"$cfg"
    bal=0; [ -n "$shares" ] && bal=1
    times=""
    for ((r = 1; r <= reps; r++)); do
      times="$times $(KALDI_GPU_DEV_SERVICE_BALANCE=$bal run $prog $where $k "$w/lda.ark" "$w/g.fsts" "$prog.$cfg.$r")"
    done
    echo "$prog $where --num-gpus=$k${shares:+ (balanced shares)}:$times; against own --num-gpus=1: $(same "$prog.$cfg.1" "$prog.own.1.1")"
    where_lines "$logs/$prog.$cfg.$reps.log"
  done
done
cp "$KALDI_GPU_SERVICE_DIR"/service-*.log "$logs/" 2>/dev/null
[ -n "${OUT:-}" ] && tar -C "$OUT" -czf "$OUT/num-gpus-logs.tgz" num-gpus-logs && rm -rf "$logs"
rm -rf "$w"
