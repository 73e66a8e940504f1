#!/bin/bash
# make bench: end-to-end speed of gmm-align-compiled on >= 10 hours of audio.
# Builds bench-data/ once (the 40 fixture utterances replicated with
# tools/replicate-archive, keys rNNN-..., sorted), then for the mono and tri2
# models runs, with the recipe options (beam 10, retry 40, scales 1/0.1/0.1),
# graphs "ark:gunzip -c bench-data/M.fsts.gz|" and features ark,s,cs:...:
#   our CPU path (--use-gpu=no), our GPU path (--use-gpu=yes, if a GPU is
#   usable; once more with KALDI_GPU_GUNZIP_PIPE=1, i.e. the graphs through a real
#   gunzip process instead of base/io/gzip-input.c), Kaldi's gmm-align-compiled
#   (KALDI_BUNDLE, KALDI_ROOT, or the shared bundle ../shared/kaldi unpacked
#   into bench-data/kaldi), and Kaldi's gmm-acc-stats-ali beside ours.
# Prints a markdown table (wall seconds, x real time, speed-up) and the
# agreement of the alignments. Env: BIN, TOOLS, KALDI_ROOT, BENCH_COPIES
# (default 255 = 10.03 h), BENCH_MODELS (default "mono tri2"), BENCH_SKIP
# (e.g. "cpu" or "kaldi" to leave a path out).
set -u
calc() { awk "BEGIN {print $*}"; }
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$top/gmmbin-gpu}
tools=${TOOLS:-$top/${BUILD:-build}/tools}
bin=$(cd "$bin" 2>/dev/null && pwd || echo "$bin"); tools=$(cd "$tools" 2>/dev/null && pwd || echo "$tools")
copies=${BENCH_COPIES:-255}
models=${BENCH_MODELS:-mono tri2}
skip=${BENCH_SKIP:-}
BENCH_OPTS=${BENCH_OPTS:-}  # extra options for our program, e.g. --batch-size=4096
data=$top/bench-data
fix=$top/tests/data
for p in "$bin/gmm-align-compiled" "$tools/ali-compare" "$tools/replicate-archive"; do
  [ -x "$p" ] || { echo "bench: $p not built (run make)"; exit 1; }
done
frames_per_copy=$(sed -n 's/.*over \([0-9]*\) frames\..*/\1/p' "$fix/kaldi/mono/align.log")
audio_s=$(calc "$copies * $frames_per_copy / 100")

# ---- data (once per number of copies) ----
mkdir -p "$data/out"
if [ "$(cat "$data/stamp" 2>/dev/null)" != "$copies.2" ]; then
  printf 'bench: building bench-data/ (%d copies = %.2f h of audio) ...\n' "$copies" \
    "$(calc "$audio_s / 3600")"
  rm -f "$data/stamp"
  rlog=$data/out/replicate.log
  for f in delta lda; do
    "$tools/replicate-archive" --print-args=false --type=matrix --copies="$copies" \
      "ark:$fix/feats/$f.ark" "ark:$data/$f.ark" 2>>"$rlog" || { cat "$rlog"; exit 1; }
  done
  for m in mono tri2; do
    "$tools/replicate-archive" --print-args=false --type=fst --copies="$copies" \
      "ark:gunzip -c $fix/graphs/$m.fsts.gz|" "ark:|gzip -c >$data/$m.fsts.gz" 2>>"$rlog" ||
      { cat "$rlog"; exit 1; }
    # Kaldi's own alignment of the fixtures (same options), replicated alike.
    "$tools/replicate-archive" --print-args=false --type=ali --copies="$copies" \
      "ark:$fix/kaldi/$m/ali.ark" "ark:$data/$m.fixture.ali" 2>>"$rlog" || { cat "$rlog"; exit 1; }
  done
  echo "$copies.2" >"$data/stamp"
fi

# ---- runs ----
# Kaldi side by side: KALDI_BUNDLE (an unpacked bundle: bin/ lib/), else
# KALDI_ROOT (a built tree), else the shared bundle tarball (dev/device/recipe-env.sh),
# unpacked once into bench-data/kaldi.
kaldi_bin=""
if [ -n "${KALDI_BUNDLE:-}" ] && [ -x "$KALDI_BUNDLE/bin/gmm-align-compiled" ]; then
  kaldi_bin=$KALDI_BUNDLE/bin
elif [ -n "${KALDI_ROOT:-}" ] && [ -x "$KALDI_ROOT/src/gmmbin/gmm-align-compiled" ]; then
  kaldi_bin=$KALDI_ROOT/src/gmmbin
else
  . "$top/dev/device/recipe-env.sh"
  if [ -n "$KALDI_BUNDLE_TAR" ]; then
    if [ ! -x "$data/kaldi/kb/bin/gmm-align-compiled" ]; then
      echo "bench: unpacking $KALDI_BUNDLE_TAR into bench-data/kaldi"
      rm -rf "$data/kaldi"; mkdir -p "$data/kaldi"
      tar -C "$data/kaldi" -xJf "$KALDI_BUNDLE_TAR" || rm -rf "$data/kaldi"
    fi
    [ -x "$data/kaldi/kb/bin/gmm-align-compiled" ] && kaldi_bin=$data/kaldi/kb/bin
  fi
fi
kaldi_prog=${kaldi_bin:+$kaldi_bin/gmm-align-compiled}
gpu_ok=0
if "$bin/gmm-align-compiled" --use-gpu=yes --acoustic-scale=0.1 --self-loop-scale=0.1 \
     "$fix/models/mono/final.mdl" "ark:gunzip -c $fix/edge/mono.fsts.gz|" \
     "ark:$fix/edge/feats.ark" ark:/dev/null >"$data/out/probe.log" 2>&1; then
  gpu_ok=1
elif grep -q 'Using GPU' "$data/out/probe.log"; then
  echo "bench: the GPU path FAILED on a usable GPU:"; grep -m1 '^ERROR' "$data/out/probe.log"
fi

declare -A wall
run() {  # model tag program extra-opts...
  local m=$1 tag=$2 prog=$3; shift 3
  local f=delta; [ "$m" = tri2 ] && f=lda
  local t0 t1
  t0=$(date +%s.%N)
  "$prog" "$@" --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 \
    --beam=10 --retry-beam=40 --careful=false "$fix/models/$m/final.mdl" \
    "ark:gunzip -c $data/$m.fsts.gz|" "ark,s,cs:$data/$f.ark" "ark:$data/out/$m.$tag.ali" \
    2>"$data/out/$m.$tag.log"
  local rc=$?
  t1=$(date +%s.%N)
  if [ $rc != 0 ]; then
    echo "bench: $m $tag failed (exit $rc), see bench-data/out/$m.$tag.log"; tail -3 "$data/out/$m.$tag.log"
    return
  fi
  wall[$m.$tag]=$(calc "$t1 - $t0")
  printf 'bench: %-5s %-6s %8.2f s  %s\n' "$m" "$tag" "${wall[$m.$tag]}" \
    "$(grep -h 'Done [0-9]*, errors' "$data/out/$m.$tag.log" | sed 's/.*) //')"
  grep -h '^VLOG\[1\].* Time: ' "$data/out/$m.$tag.log" | sed 's/^[^ ]* ([^ ]*) /         /' 
}
for m in $models; do
  case " $skip " in *" cpu "*) ;; *) run "$m" cpu "$bin/gmm-align-compiled" --use-gpu=no --verbose=1 $BENCH_OPTS ;; esac
  if [ $gpu_ok = 1 ]; then run "$m" gpu "$bin/gmm-align-compiled" --use-gpu=yes --verbose=1 $BENCH_OPTS
    # the same with the graphs through a real gunzip process (no in-process zlib)
    KALDI_GPU_GUNZIP_PIPE=1 run "$m" gpupipe "$bin/gmm-align-compiled" --use-gpu=yes --verbose=1 $BENCH_OPTS
  elif grep -q 'Using GPU' "$data/out/probe.log"; then echo "bench: GPU path skipped (it failed, see above)"
  else echo "bench: GPU path skipped: no usable GPU ($(grep -m1 '^ERROR' "$data/out/probe.log" | sed 's/^ERROR ([^ ]*) //'))"; fi
  if [ -n "$kaldi_prog" ]; then
    case " $skip " in *" kaldi "*) ;; *) run "$m" kaldi "$kaldi_prog" ;; esac
  fi
done
# Accumulation (gmm-acc-stats-ali on our CPU alignment) and the one-pass
# program (gmm-align-acc-compiled), CPU and GPU, same data.
timed() {  # key logfile command...  -> wall[key]
  local key=$1 log=$2; shift 2
  local t0 t1; t0=$(date +%s.%N)
  "$@" 2>"$log"; local rc=$?
  t1=$(date +%s.%N)
  if [ $rc != 0 ]; then echo "bench: $key failed (exit $rc), see $log"; tail -3 "$log"; return; fi
  wall[$key]=$(calc "$t1 - $t0")
  printf 'bench: %-14s %8.2f s\n' "$key" "${wall[$key]}"
}
for m in $models; do
  f=delta; [ "$m" = tri2 ] && f=lda
  [ -f "$data/out/$m.cpu.ali" ] || continue
  if [ -n "$kaldi_bin" ] && [ -x "$kaldi_bin/gmm-acc-stats-ali" ]; then
    case " $skip " in *" kaldi "*) ;; *)
      timed "$m.acc-kaldi" "$data/out/$m.acc-kaldi.log" "$kaldi_bin/gmm-acc-stats-ali" \
        "$fix/models/$m/final.mdl" "ark:$data/$f.ark" "ark:$data/out/$m.cpu.ali" "$data/out/$m.kaldi.acc" ;;
    esac
  fi
  for tag in cpu gpu; do
    [ $tag = gpu ] && [ $gpu_ok != 1 ] && continue
    ug=no; [ $tag = gpu ] && ug=yes
    timed "$m.acc-$tag" "$data/out/$m.acc-$tag.log" "$bin/gmm-acc-stats-ali" --use-gpu=$ug \
      "$fix/models/$m/final.mdl" "ark:$data/$f.ark" "ark:$data/out/$m.cpu.ali" "$data/out/$m.$tag.acc"
    [ -x "$bin/gmm-align-acc-compiled" ] &&
    timed "$m.onepass-$tag" "$data/out/$m.onepass-$tag.log" "$bin/gmm-align-acc-compiled" --use-gpu=$ug \
      --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 \
      "$fix/models/$m/final.mdl" "ark:gunzip -c $data/$m.fsts.gz|" "ark,s,cs:$data/$f.ark" \
      "ark:$data/out/$m.onepass-$tag.ali" "$data/out/$m.onepass-$tag.acc"
  done
done
[ -n "$kaldi_prog" ] || echo "bench: Kaldi skipped (no KALDI_BUNDLE, KALDI_ROOT or ../shared/kaldi/kaldi-bin.tar.xz)"

# ---- table ----
wall[mono.fixture]=0; wall[tri2.fixture]=0
agree() {  # model tagA tagB -> "P% of F frames"
  local a="$data/out/$1.$2.ali" b="$data/out/$1.$3.ali"
  [ "$2" = fixture ] && a="$data/$1.fixture.ali"
  [ -n "${wall[$1.$2]:-}" ] && [ -n "${wall[$1.$3]:-}" ] || { echo "-"; return; }
  "$tools/ali-compare" --print-args=false "ark:$a" "ark:$b" 2>/dev/null |
    awk '{v[$1]=$2} END {printf "%s%% of %d frames", v["percent-equal"], v["frames-compared"]}'
}
ratio() { [ -n "${wall[$1]:-}" ] && [ -n "${wall[$2]:-}" ] && printf '%.1fx' "$(calc "${wall[$2]} / ${wall[$1]}")" || echo "-"; }
host_cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')
gpu_name=$(grep -h -m1 -E '^LOG \([^)]*:(galign_|kio_cuda_)' "$data/out/"*.gpu.log 2>/dev/null | sed 's/^[^ ]* ([^ ]*) //')
echo
printf 'Audio: %.2f h (%d x the 40 fixture utterances, %d frames); CPU: %s (%d cores)%s\n' \
  "$(calc "$audio_s / 3600")" "$copies" "$((copies * frames_per_copy))" "$host_cpu" "$(nproc)" \
  "${gpu_name:+; GPU: $gpu_name}"
echo
echo "| model | program | wall s | x real time | speed-up vs Kaldi | speed-up vs our CPU |"
echo "|---|---|---:|---:|---:|---:|"
for m in $models; do
  for tag in kaldi cpu gpu gpupipe; do
    [ -n "${wall[$m.$tag]:-}" ] || continue
    case $tag in kaldi) name="Kaldi gmm-align-compiled" ;; cpu) name="ours, --use-gpu=no" ;; gpu) name="ours, --use-gpu=yes" ;;
      gpupipe) name="ours, --use-gpu=yes, KALDI_GPU_GUNZIP_PIPE=1 (graphs through a gunzip process)" ;; esac
    printf '| %s | %s | %.2f | %.0f | %s | %s |\n' "$m" "$name" "${wall[$m.$tag]}" \
      "$(calc "$audio_s / ${wall[$m.$tag]}")" "$(ratio "$m.$tag" "$m.kaldi")" "$(ratio "$m.$tag" "$m.cpu")"
  done
done
echo
echo "Agreement of the alignments (frames with the same transition-id; \"Kaldi fixture\" ="
echo "tests/data/kaldi/M/ali.ark, Kaldi's alignment of the same data, replicated alike):"
echo
echo "| model | GPU vs CPU | CPU vs Kaldi fixture | GPU vs Kaldi fixture | CPU vs Kaldi run | GPU vs Kaldi run |"
echo "|---|---|---|---|---|---|"
for m in $models; do
  echo "| $m | $(agree "$m" cpu gpu) | $(agree "$m" fixture cpu) | $(agree "$m" fixture gpu) | $(agree "$m" kaldi cpu) | $(agree "$m" kaldi gpu) |"
done
echo
echo "Accumulation (gmm-acc-stats-ali, given the alignment) and one pass (gmm-align-acc-compiled = align + accumulate):"
echo
echo "| model | program | wall s | x real time | speed-up vs our CPU | stats vs Kaldi's |"
echo "|---|---|---:|---:|---:|---|"
for m in $models; do
  if [ -n "${wall[$m.acc-kaldi]:-}" ]; then
    printf '| %s | Kaldi gmm-acc-stats-ali | %.2f | %.0f | %s | |\n' "$m" "${wall[$m.acc-kaldi]}" \
      "$(calc "$audio_s / ${wall[$m.acc-kaldi]}")" "$(ratio "$m.acc-kaldi" "$m.acc-cpu")"
  fi
  for k in acc onepass; do
    for tag in cpu gpu; do
      [ -n "${wall[$m.$k-$tag]:-}" ] || continue
      name="gmm-acc-stats-ali"; [ $k = onepass ] && name="gmm-align-acc-compiled"
      af=$data/out/$m.$tag.acc; [ $k = onepass ] && af=$data/out/$m.onepass-$tag.acc
      same="-"
      [ -n "${wall[$m.acc-kaldi]:-}" ] && { cmp -s "$af" "$data/out/$m.kaldi.acc" && same="identical bytes" || same="differ"; }
      printf '| %s | %s --use-gpu=%s | %.2f | %.0f | %s | %s |\n' "$m" "$name" "$([ $tag = gpu ] && echo yes || echo no)" \
        "${wall[$m.$k-$tag]}" "$(calc "$audio_s / ${wall[$m.$k-$tag]}")" "$(ratio "$m.$k-$tag" "$m.$k-cpu")" "$same"
    done
  done
done
