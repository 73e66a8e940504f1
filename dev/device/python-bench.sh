#!/bin/bash
# One device call for the Python binding: its GPU-path tests, then one
# Aligner.align_archive over ~100 h of tests/data replicated against
# gmm-align-compiled on the same data (own CUDA context for both, recipe
# options, the same process start to exit measured for both; the goal: the
# Python run within 1.2x of the program's). Logs under $OUT.
# On the GPU host (like gpu-session.sh it copies .carry's programs over
# gmmbin-gpu/). Prepare here: make all && dev/device/device-pack.sh   (PACK_NUMPY=1 also
# carries this machine's numpy, for a GPU host without python3-numpy).
# Run: carry [".carry"], command dev/device/python-bench.sh [tests] [bench]
# Env: PYBENCH_HOURS (100), PYBENCH_MODELS ("tri2"; "tri2 mono" for both), PYBENCH_REPS (2),
# PYBENCH_WORK (work folder, /tmp/pybench), PYBENCH_USE_GPU (yes).
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
export LD_LIBRARY_PATH="$top/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
BUILD=.carry/build
cp .carry/gmmbin-gpu/* gmmbin-gpu/ 2>/dev/null
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
steps=${*:-tests bench}
py=""
find_py() { for c in ${PYTHON:-} $(type -ap python3); do "$c" -c "import numpy" 2>/dev/null && { py=$c; return 0; }; done; return 1; }
find_py || { [ -d .carry/py ] && export PYTHONPATH=$top/.carry/py && find_py; }
export PYTHON=$py KALDI_GPU_LIBRARY=$top/$BUILD/libkaldi-gpu-align.so
export PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH}
{ date -u; nvidia-smi -L; nproc; echo "python: ${py:-none with numpy}"; } 2>&1 | tee "$OUT/env.txt"
[ -n "$py" ] || { echo "no python3 with numpy: run device-pack.sh with PACK_NUMPY=1" | tee -a "$OUT/env.txt"; exit 1; }
gpu=${PYBENCH_USE_GPU:-yes}  # no: a dry run on a machine without a GPU
opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
for s in $steps; do
  echo "=== $s ($(date -u +%T)) ==="
  case $s in
    tests)
      for t in "test_binding.py --gpu" test_binding.py test_kalpy_layer.py \
               "kalpy_side_by_side.py --impl ours" torch_coexist.py; do
        KIO_REQUIRE_GPU=1 bash python/tests/run.sh "$BUILD" $t >"$OUT/py-${t%% *}${t#*.py}.log" 2>&1
        echo "python/tests/$t: exit $?  ($(tail -n 1 "$OUT/py-${t%% *}${t#*.py}.log"))"
      done 2>&1 | tee "$OUT/py-tests.log" ;;
    bench)
      work=${PYBENCH_WORK:-/tmp/pybench}; mkdir -p "$work"
      hours=${PYBENCH_HOURS:-100}
      per=$(sed -n 's/.*over \([0-9]*\) frames\..*/\1/p' tests/data/kaldi/mono/align.log)  # frames per copy
      copies=$(( (hours * 360000 + per - 1) / per ))
      echo "data: $copies copies of tests/data = $(awk "BEGIN{printf \"%.1f\", $copies*$per/360000}") h" | tee "$OUT/bench.log"
      for m in ${PYBENCH_MODELS:-tri2}; do
        f=delta; [ $m = tri2 ] && f=lda
        [ -s "$work/$f.ark" ] || $BUILD/tools/replicate-archive --print-args=false --type=matrix \
          --copies=$copies "ark:tests/data/feats/$f.ark" "ark:$work/$f.ark" 2>>"$OUT/replicate.log"
        # graphs uncompressed: gzip would take minutes to write them
        [ -s "$work/$m.fsts" ] || $BUILD/tools/replicate-archive --print-args=false --type=fst \
          --copies=$copies "ark:gunzip -c tests/data/graphs/$m.fsts.gz|" "ark:$work/$m.fsts" 2>>"$OUT/replicate.log"
        cat "$work/$f.ark" "$work/$m.fsts" >/dev/null  # page cache, for both alike
        g="ark:$work/$m.fsts" x="ark,s,cs:$work/$f.ark"
        for r in $(seq 1 "${PYBENCH_REPS:-2}"); do
          s0=$(date +%s.%N)
          KALDI_GPU_SERVICE=no gmmbin-gpu/gmm-align-compiled --use-gpu=$gpu $opts tests/data/models/$m/final.mdl \
            "$g" "$x" "ark:$work/$m.prog.ali" 2>"$OUT/$m.prog.$r.log"
          rc=$?; s1=$(date +%s.%N)
          KALDI_GPU_SERVICE=no "$py" dev/bench/py-align-bench.py --use-gpu=$gpu tests/data/models/$m/final.mdl "$g" "$x" \
            >"$OUT/$m.py.$r.log" 2>&1
          rp=$?; s2=$(date +%s.%N)
          tp=$(awk "BEGIN{print $s1-$s0}"); tq=$(awk "BEGIN{print $s2-$s1}")
          echo "$m rep $r: gmm-align-compiled ${tp} s (exit $rc; $(tail -n 1 "$OUT/$m.prog.$r.log")); Aligner.align_archive ${tq} s (exit $rp; $(tr '\n' ' ' <"$OUT/$m.py.$r.log")); ratio $(awk "BEGIN{printf \"%.3f\", $tq/$tp}")" | tee -a "$OUT/bench.log"
        done
        # the same alignments (untimed)
        KALDI_GPU_SERVICE=no "$py" dev/bench/py-align-bench.py --use-gpu=$gpu tests/data/models/$m/final.mdl "$g" "$x" \
          --check "ark:$work/$m.prog.ali" 2>&1 | tail -n 1 | sed "s/^/$m: /" | tee -a "$OUT/bench.log"
      done ;;
  esac
done
