#!/bin/bash
# The synth-s5 recipe on a GPU host, stock Kaldi then ours, and the
# comparison report:
#   dev/device/recipe-device.sh [options] INPUT_DIR OUT_DIR
# INPUT_DIR holds kaldi-bin.tar.xz, synth-s5.tar.xz and unpack.sh (and, if
# packed with `pack` below, gmmbin-gpu/, tools/ali-compare and
# tools/blas-order-check). Unpacks into
# WORK (default: the folder work under /tmp/recipe-device), runs egs/synth/s5/run.sh all-Kaldi
# (--exp exp_kaldi), then with our programs (--exp exp_ours), one after the
# other, then tools/compare-recipe.sh. Writes into OUT_DIR: progress.log
# (one line per stage and side), report.md, stage_times.{kaldi,ours},
# run_info.{kaldi,ours}, results.{kaldi,ours}, logs.tgz (every exp log dir),
# status (the exit status, written last).
# Options: --stages A-B (or N; default 1-12), --nj N (16), --train DIR
# (data/train_x4), --gpu-bin DIR (INPUT_DIR/gmmbin-gpu, else .carry/gmmbin-gpu,
# else gmmbin-gpu), --work DIR, --sides "kaldi ours" (which, in this order;
# "oursN" = ours with CUDA_VISIBLE_DEVICES=0..N-1, e.g. "kaldi ours ours1" on a
# 2-GPU host: all GPUs, then one; each extra side gets report.oursN.md),
# --mono-utts N, --mono-opts "OPTS" (passed to run.sh), --cross true (then
# dev/device/recipe-cross.sh: our align_si from the Kaldi side's models, cross.md).
#
# Getting the inputs onto a device host whose calls carry at most 64 MiB
# (the repo's tracked files already take ~35 MB):
#   here:    dev/device/recipe-device.sh pack .rc     -> .rc/part.NN (RECIPE_PART_SIZE, default 24M) + .rc/sha256
#   device:  dev/device/recipe-device.sh stash .rc    (one call per part, carry [".rc/part.NN", ".rc/sha256"];
#            appends to /tmp/recipe-device/in, which lives while the machine stays warm)
#   device:  dev/device/recipe-device.sh start [options]   (checks and unpacks the parts, then
#            runs `INPUT_DIR=/tmp/recipe-device/in, OUT_DIR=/tmp/recipe-device/out` under
#            setsid nohup and returns at once)
#   device:  dev/device/recipe-device.sh poll         (prints progress; copies OUT_DIR's files to $OUT)
#   device:  dev/device/recipe-device.sh wait SECONDS (until finished or SECONDS pass, then poll)
#   device:  dev/device/recipe-device.sh models       (both sides' tri2/tri3 models into $OUT, in parts)
#   device:  dev/device/recipe-device.sh prepare      (unpacks the parts, the corpus and Kaldi into the
#            work dir without running anything, for other benchmarks on the same corpus)
# Starting from trained models (e.g. stages 6-7 only): `RECIPE_SEED=seed.tgz ... pack` adds a
# tarball of exp dirs (tri2/final.mdl, tree, final.mat, *_opts, ...; made elsewhere);
# each side's exp_SIDE gets a copy before its stages run, so both sides start from the
# same models (the seed is also unpacked in WORK/seed).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
base=/tmp/recipe-device
case ${1:-} in
  pack)
    [ $# -eq 2 ] || { echo "usage: $0 pack DIR" >&2; exit 1; }
    . "$top/dev/device/recipe-env.sh"
    [ -n "$KALDI_BUNDLE_TAR" ] && [ -n "$SYNTH_CORPUS_TAR" ] || { echo "pack: no shared inputs found" >&2; exit 1; }
    s=$(mktemp -d); mkdir -p "$s/in/gmmbin-gpu" "$s/in/tools"
    cp "$KALDI_BUNDLE_TAR" "$SYNTH_CORPUS_TAR" "$SYNTH_CORPUS_DIR/unpack.sh" "$s/in/"
    [ -z "${RECIPE_SEED:-}" ] || cp "$RECIPE_SEED" "$s/in/seed.tgz" || exit 1
    for f in "$top"/gmmbin-gpu/*; do case $f in *.c|*.h) ;; *) [ -x "$f" ] && strip -o "$s/in/gmmbin-gpu/${f##*/}" "$f" ;; esac; done
    strip -o "$s/in/tools/ali-compare" "$top/build/tools/ali-compare" || exit 1
    strip -o "$s/in/tools/blas-order-check" "$top/build/tools/blas-order-check" || exit 1
    chmod +x "$s/in/gmmbin-gpu"/* "$s/in/tools"/*
    rm -rf "$2"; mkdir -p "$2"
    tar -C "$s/in" -cf - . | split -b "${RECIPE_PART_SIZE:-24M}" -d - "$2/part."
    (cd "$2" && sha256sum part.* >sha256)
    rm -rf "$s"; ls -l "$2"; exit 0 ;;
  stash)
    [ $# -eq 2 ] || { echo "usage: $0 stash DIR" >&2; exit 1; }
    mkdir -p "$base/parts"
    for f in "$2"/part.* "$2"/sha256; do [ -f "$f" ] && cp "$f" "$base/parts/"; done
    ls -l "$base/parts"; exit 0 ;;
  start)
    shift
    if [ -f "$base/pid" ] && kill -0 "$(cat "$base/pid")" 2>/dev/null; then
      echo "start: a run is in progress (pid $(cat "$base/pid")); poll it" >&2; exit 1
    fi
    (cd "$base/parts" && sha256sum -c --quiet sha256) || { echo "start: parts missing or damaged" >&2; exit 1; }
    rm -rf "$base/in" "$base/out"; mkdir -p "$base/in" "$base/out"
    cat "$base/parts"/part.* | tar -C "$base/in" -xf - || exit 1
    setsid nohup "$0" "$@" "$base/in" "$base/out" >"$base/nohup.log" 2>&1 </dev/null &
    echo $! >"$base/pid"; echo "started (pid $!): poll with $0 poll"; sleep 2; cat "$base/out/progress.log" 2>/dev/null; exit 0 ;;
  prepare)
    (cd "$base/parts" && sha256sum -c --quiet sha256) || { echo "prepare: parts missing or damaged" >&2; exit 1; }
    rm -rf "$base/in"; mkdir -p "$base/in" "$base/work"
    cat "$base/parts"/part.* | tar -C "$base/in" -xf - || exit 1
    w=$base/work
    if [ ! -f "$w/synth-s5/.unpacked" ]; then
      rm -rf "$w/synth-s5"; "$base/in/unpack.sh" "$w" >/dev/null && touch "$w/synth-s5/.unpacked" || exit 1
    fi
    if [ ! -x "$w/kaldi/kb/bin/gmm-est" ]; then
      rm -rf "$w/kaldi"; mkdir -p "$w/kaldi"; tar -C "$w/kaldi" -xJf "$base/in/kaldi-bin.tar.xz" || exit 1
    fi
    if [ -f "$base/in/seed.tgz" ]; then rm -rf "$w/seed"; mkdir -p "$w/seed"; tar -C "$w/seed" -xzf "$base/in/seed.tgz" || exit 1; fi
    ls "$w" "$w/seed" 2>/dev/null; exit 0 ;;
  models)
    # The trained tri2/tri3 models of both sides (what decoding needs), into
    # $OUT as models.part.NN of at most 15 MB (a device call returns files of
    # at most 16 MiB): decode them elsewhere with run.sh --stage 8.
    w=$base/work; c=$w/synth-s5
    [ -n "${OUT:-}" ] && [ -d "$c" ] || { echo "models: no \$OUT or no $c" >&2; exit 1; }
    # final.mdl is a symbolic link (to N.mdl): -type l too, and tar -h.
    (cd "$c" && find exp_kaldi exp_ours -maxdepth 3 \( -path '*/tri2/*' -o -path '*/tri3/*' \) \( -type f -o -type l \) \
       \( -name 'final.*' -o -name tree -o -name '*_opts' -o -name 'phones.txt' -o -name num_jobs \
          -o -name 'final.mat' -o -name 'full.mat' \) -print0 | tar --null -h -cJf - -T -) | split -b 15M -d - "$OUT/models.part."
    ls -l "$OUT"/models.part.*; exit 0 ;;
  wait)
    # wait SECONDS: until the run finishes or SECONDS pass, then poll.
    [ $# -eq 2 ] || { echo "usage: $0 wait SECONDS" >&2; exit 1; }
    end=$((SECONDS + $2))
    while [ $SECONDS -lt $end ] && [ ! -f "$base/out/status" ]; do sleep 5; done
    exec "$0" poll ;;
  poll)
    o=$base/out
    tail -n 30 "$o/progress.log" 2>/dev/null; tail -n 5 "$base/nohup.log" 2>/dev/null
    [ -f "$o/status" ] && echo "finished, status $(cat "$o/status")" || echo "running"
    if [ -n "${OUT:-}" ]; then
      for f in "$o"/report*.md "$o"/cross.md "$o"/progress.log "$o"/logs.tgz "$o"/status; do [ -f "$f" ] && cp "$f" "$OUT/"; done
      tar -C "$o" -czf "$OUT/side-files.tgz" --exclude=report.md --exclude=logs.tgz --exclude=progress.log . 2>/dev/null
      # the GPU service's own log (what a job waited for inside the service)
      for d in "${XDG_RUNTIME_DIR:-/nonexistent}/kaldi-gpu" "/tmp/kaldi-gpu-$(id -u)"; do
        l=$(ls -t "$d"/service*.log 2>/dev/null | head -1)  # service-HOST.log
        [ -n "$l" ] && tail -c 4000000 "$l" | gzip -c >"$OUT/service.log.gz" && break
      done
    fi
    exit 0 ;;
esac

stages=1-12 nj=16 train=data/train_x4 gpu_bin="" work=$base/work sides="kaldi ours" mono=() cross=false
while [ $# -gt 2 ]; do
  case $1 in
    --stages) stages=$2 ;; --nj) nj=$2 ;; --train) train=$2 ;; --gpu-bin) gpu_bin=$2 ;;
    --work) work=$2 ;; --sides) sides=$2 ;; --cross) cross=$2 ;;
    --mono-utts|--mono-opts) mono+=("$1" "$2") ;;
    *) echo "recipe-device: unknown option $1" >&2; exit 1 ;;
  esac
  shift 2
done
[ $# -eq 2 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 1; }
in=$(cd "$1" && pwd) || exit 1
mkdir -p "$2"; out=$(cd "$2" && pwd)
a=${stages%-*}; b=${stages#*-}
if [ -z "$gpu_bin" ]; then
  for g in "$in/gmmbin-gpu" "$top/.carry/gmmbin-gpu" "$top/gmmbin-gpu"; do [ -x "$g/gmm-acc-stats-ali" ] && { gpu_bin=$g; break; }; done
fi
[ -d "$top/.carry/lib" ] && export LD_LIBRARY_PATH="$top/.carry/lib:${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
[ -x "$in/tools/ali-compare" ] && export TOOLS=$in/tools
p=$out/progress.log
say() { echo "$(date -u +%T) $*" >>"$p"; }
rm -f "$out/status"
say "recipe-device: stages $a-$b, --nj $nj --train $train, sides: $sides, gpu-bin ${gpu_bin:-none}, work $work"
say "host $(uname -n), $(nproc) cores, GPU: $(nvidia-smi -L 2>/dev/null | head -1)"
rc=0
# The GPU service logs each connection's set-up and busy times (service-HOST.log, collected by
# poll); KALDI_GPU_SERVICE_VERBOSE=2 adds the accumulator's split.
export KALDI_GPU_SERVICE_VERBOSE=${KALDI_GPU_SERVICE_VERBOSE:-1}
for side in $sides; do
  ko=false; [ "$side" = kaldi ] && ko=true
  mask=()
  case $side in ours[0-9]*) mask=(env CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((${side#ours} - 1)))") ;; esac
  if [ -f "$in/seed.tgz" ]; then  # both sides start from the same trained models
    if [ ! -f "$work/synth-s5/.unpacked" ]; then
      rm -rf "$work/synth-s5"; "$in/unpack.sh" "$work" >/dev/null && touch "$work/synth-s5/.unpacked"
    fi
    mkdir -p "$work/synth-s5/exp_$side" && tar -C "$work/synth-s5/exp_$side" -xzf "$in/seed.tgz" &&
      say "side $side: seeded with $(tar -tzf "$in/seed.tgz" | awk -F/ 'NF > 1 { print $1 }' | sort -u | paste -sd' ')"
  fi
  say "side $side: start${mask:+ (${mask[1]})}"
  "${mask[@]}" "$top/egs/synth/s5/run.sh" --work "$work" --corpus "$in" --kaldi-bundle "$in/kaldi-bin.tar.xz" \
    --kaldi-only $ko ${gpu_bin:+--gpu-bin "$gpu_bin"} --exp "exp_$side" --nj "$nj" --train "$train" \
    --stage "$a" --stop-stage "$b" "${mono[@]}" 2>&1 |
    while IFS= read -r l; do case $l in "run.sh: stage"*|"run.sh: WER"*|"run.sh: unpacking"*) say "$side: ${l#run.sh: }" ;; esac; echo "$l"; done \
    >>"$out/run.$side.log"
  r=${PIPESTATUS[0]}
  say "side $side: exit $r"
  e=$work/synth-s5/exp_$side
  for f in stage_times stage_spans run_info results prog_times prog_times.md; do
    [ -f "$e/$f" ] && cp "$e/$f" "$out/$f.$side"
  done
  [ "$r" = 0 ] || { rc=1; tail -n 20 "$out/run.$side.log" | tee -a "$p"; break; }
done
if [ -d "$work/synth-s5/exp_kaldi" ] && [ -d "$work/synth-s5/exp_ours" ]; then
  "$top/tools/compare-recipe.sh" "$work/synth-s5/exp_kaldi" "$work/synth-s5/exp_ours" >"$out/report.md" 2>>"$p" || rc=1
  say "report: $out/report.md"
fi
for side in $sides; do
  case $side in ours[0-9]*) [ -d "$work/synth-s5/exp_$side" ] || continue
    "$top/tools/compare-recipe.sh" "$work/synth-s5/exp_kaldi" "$work/synth-s5/exp_$side" >"$out/report.$side.md" 2>>"$p" || rc=1
    say "report: $out/report.$side.md" ;;
  esac
done
# Our align_si from the Kaldi side's models: single-pass agreement (dev/device/recipe-cross.sh).
if [ "$cross" = true ] && [ -d "$work/synth-s5/exp_kaldi" ] && [ -n "$gpu_bin" ]; then
  say "cross: our align_si from exp_kaldi's models"
  TOOLS=${TOOLS:-$top/build/tools} "$top/dev/device/recipe-cross.sh" "$work/synth-s5" "$gpu_bin" \
    "$work/kaldi/kb" "$nj" "$train" >"$out/cross.md" 2>>"$p" || rc=1
  cat "$out/cross.md" >>"$out/report.md"
  say "cross: done"
fi
(cd "$work/synth-s5" && find exp_* -type d -name log -print0 | tar --null -czf "$out/logs.tgz" -T - ) 2>/dev/null
say "done, status $rc"
echo $rc >"$out/status"
exit $rc
