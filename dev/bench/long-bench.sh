#!/bin/bash
# Time and peak memory of one long utterance (issue 11), ours and Kaldi's:
#   dev/bench/long-bench.sh DIR...
# DIR: made by dev/oracles/long-utterance.sh (feats.ark, graph.fsts.gz, kaldi.ali,
# kaldi.time, info). Runs gmm-align-compiled with the recipe options:
#   cpu      --use-gpu=no
#   gpu      --use-gpu=yes: utterances over KALDI_GPU_DEV_LONG_FRAMES (default
#            6000) take the chunked device path (host decoder, device
#            likelihoods in frame chunks, bounded memory)
#   gpu-batch --use-gpu=yes with KALDI_GPU_DEV_LONG_FRAMES=1000000000 (the
#            device batch path: likelihoods frames x pdfs, ~128 tokens per
#            frame, one GPU thread decodes; may run out of device memory for
#            an hour)
#   gpu-cpu  --use-gpu=yes with KALDI_GPU_DEV_LIKELIHOODS=gemm: long utterances on the
#            CPU path inside the GPU run (what GPU runs did before)
#   kaldi    from DIR/kaldi.time, or run when $KALDI_BUNDLE is set
# Peak host memory: /usr/bin/time; device memory: the peak of nvidia-smi's
# memory.used sampled every 50 ms, less the value before the run (the CUDA
# context included), and "chunk MB": the chunked path's own device buffers
# per thread (its --verbose=1 line). Prints a markdown table with agreement
# with Kaldi's alignment. Env: BIN, TOOLS, LONG_SKIP (e.g. "gpu-batch
# gpu-cpu"), KALDI_GPU_DEV_CHUNK_FRAMES (passed on).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${BIN:-$top/gmmbin-gpu}" && pwd) || exit 1
tools=$(cd "${TOOLS:-$top/build/tools}" && pwd) || exit 1
skip=${LONG_SKIP:-}
opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
smi() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1; }
echo "| utterance | run | seconds | peak RSS MB | device MB | chunk MB | % frames = Kaldi |"
echo "|---|---|---|---|---|---|---|"
for dir in "$@"; do
  dir=$(cd "$dir" && pwd) || continue
  frames=$(awk '$1 == "frames" {print $2}' "$dir/info")
  model=$(awk '$1 == "model" {print $2}' "$dir/info"); model=${model:-tri1}
  mdl=$top/tests/data/models/$model/final.mdl
  label="$(awk -v f="$frames" 'BEGIN {printf "%.1f min", f / 6000}')"
  for run in cpu gpu gpu-batch gpu-cpu kaldi; do
    case " $skip " in *" $run "*) continue ;; esac
    env=(); u=no; prog="$bin/gmm-align-compiled"
    case $run in
      gpu) u=yes ;;
      gpu-batch) u=yes; env=(KALDI_GPU_DEV_LONG_FRAMES=1000000000) ;;
      gpu-cpu) u=yes; env=(KALDI_GPU_DEV_LIKELIHOODS=gemm) ;;
      kaldi)
        if [ -z "${KALDI_BUNDLE:-}" ]; then
          read -r s _ kb _ <"$dir/kaldi.time"
          awk -v l="$label" -v s="$s" -v kb="$kb" 'BEGIN {printf "| %s | kaldi (recorded) | %.2f | %.0f | | | 100 |\n", l, s, kb / 1024}'
          continue
        fi
        prog="$KALDI_BUNDLE/bin/gmm-align-compiled"
        env=(LD_LIBRARY_PATH="$KALDI_BUNDLE/lib") ;;
    esac
    uopt="--use-gpu=$u"; [ $run = kaldi ] && uopt=""
    [ $run = gpu ] && uopt="$uopt --verbose=1"
    base=$(smi); peak=${base:-0}
    ( while :; do v=$(smi); [ -n "$v" ] && echo "$v"; sleep 0.05; done ) >"$dir/$run.smi" 2>/dev/null &
    mon=$!
    env "${env[@]}" /usr/bin/time -f '%e %M' -o "$dir/$run.time" "$prog" $uopt $opts "$mdl" \
      "ark:gunzip -c $dir/graph.fsts.gz|" "ark:$dir/feats.ark" "ark,t:$dir/$run.ali" 2>"$dir/$run.log"
    rc=$?
    kill "$mon" 2>/dev/null; wait "$mon" 2>/dev/null
    dev=""
    [ -n "$base" ] && dev=$(sort -n "$dir/$run.smi" | tail -1 | awk -v b="$base" '{print $1 - b}')
    read -r s kb <"$dir/$run.time"
    ch=$(sed -n 's/.*device buffers of a thread at most \([0-9.]*\) MB.*/\1/p' "$dir/$run.log" | tail -1)
    pct=$("$tools/ali-compare" --print-args=false "ark,t:$dir/kaldi.ali" "ark,t:$dir/$run.ali" 2>/dev/null |
          awk '$1 == "percent-equal" {print $2}')
    awk -v l="$label" -v r="$run" -v s="$s" -v kb="$kb" -v d="$dev" -v p="$pct" -v rc="$rc" -v ch="$ch" \
      'BEGIN {printf "| %s | %s%s | %.2f | %.0f | %s | %s | %s |\n", l, r, rc ? " (exit " rc ")" : "", s, kb / 1024, d, ch, p}'
  done
done
