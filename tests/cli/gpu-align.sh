#!/bin/bash
# gmm-align-compiled --use-gpu=yes: the parity runs of align.sh against Kaldi,
# the fatal-error cases of fatal.sh (all programs with --use-gpu=yes),
# margin.sh and long.sh on the GPU, then
# GPU alignments compared with the CPU ones on every fixture (identical,
# or >= 99.9% of frames with the difference printed).
# Env: BIN, TOP (as align.sh). Exit 0 pass, 1 fail, 77 skip (no GPU, unless
# KIO_REQUIRE_GPU=1).
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
[ -z "${TOOLS:-}" ] || TOOLS=$(cd "$TOOLS" && pwd) || exit 1
prog="$BIN/gmm-align-compiled"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/gpu-align-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Is a GPU usable? Ask the program itself on one utterance.
cd "$TOP/tests/data" || exit 1
. "$here/lib/gpu-probe.sh"
gpu_probe_align "$prog" "$tmp"

fails=0
mkdir -p "$tmp/cpu" "$tmp/gpu"
USE_GPU=yes ALIGN_KEEP="$tmp/gpu" bash "$here/align.sh" || fails=$((fails + 1))
# fatal errors on the GPU paths: exit 255, ERROR, outputs abandoned
USE_GPU=yes bash "$here/fatal.sh" || fails=$((fails + 1))
# margin mode on the device decoder (bands packed with the graphs), and long
# utterances (2.4 min): on the chunked device path (default threshold), in
# the device batch (threshold above its length), and on the CPU path (the
# chunks need the exact kernel: KALDI_GPU_DEV_LIKELIHOODS=gemm routes them to the CPU)
USE_GPU=yes bash "$here/margin.sh" || fails=$((fails + 1))
USE_GPU=yes bash "$here/long.sh" || fails=$((fails + 1))
KALDI_GPU_DEV_LONG_FRAMES=1000000000 USE_GPU=yes bash "$here/long.sh" || fails=$((fails + 1))
KALDI_GPU_DEV_LIKELIHOODS=gemm USE_GPU=yes bash "$here/long.sh" || fails=$((fails + 1))
USE_GPU=no ALIGN_KEEP="$tmp/cpu" ALIGN_SKIP_BAD=1 bash "$here/align.sh" >"$tmp/cpu.out" ||
  { echo "FAIL: CPU parity runs failed:"; grep FAIL "$tmp/cpu.out"; fails=$((fails + 1)); }

cmpbin=""
for d in "${TOOLS:-}" "$TOP/build/tools" "$BIN/../build/tools" "$BIN/../tools"; do
  [ -n "$d" ] && [ -x "$d/ali-compare" ] && { cmpbin="$d/ali-compare"; break; }
done
[ -n "$cmpbin" ] || { echo "SKIP: ali-compare not built"; exit 77; }
for f in "$tmp"/cpu/*.ali; do
  n=$(basename "$f" .ali)
  g="$tmp/gpu/$n.ali"
  [ -f "$g" ] || { echo "FAIL: $n: no GPU alignment"; fails=$((fails + 1)); continue; }
  if cmp -s "$f" "$g"; then echo "$n: GPU and CPU alignments identical"; continue; fi
  "$cmpbin" --print-args=false --print-diffs "ark:$f" "ark:$g" >"$tmp/$n.cmp" 2>/dev/null
  pct=$(awk '$1 == "percent-equal" {print $2}' "$tmp/$n.cmp")
  echo "$n: GPU vs CPU: $pct% of frames equal; differing utterances:"
  grep '^diff ' "$tmp/$n.cmp" | sed 's/^/    /'
  awk -v p="$pct" 'BEGIN {exit !(p + 0 >= 99.9)}' ||
    { echo "FAIL: $n: GPU vs CPU agreement $pct% < 99.9%"; fails=$((fails + 1)); }
  awk '{v[$1]=$2} END {exit !(v["utterances-first"] == v["utterances-common"] &&
       v["utterances-second"] == v["utterances-common"])}' "$tmp/$n.cmp" ||
    { echo "FAIL: $n: GPU and CPU aligned different utterances"; fails=$((fails + 1)); }
done

# With several GPUs: a job on its own context on the second device (the
# device free-memory choice can pick it), aligning and accumulating there;
# its worker threads must follow the aligner to that device.
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${ngpu:-0}" -ge 2 ]; then
  o="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
  g="ark:gunzip -c graphs/tri1.fsts.gz|"
  "$BIN/gmm-align-acc-compiled" --use-gpu=no $o models/tri1/final.mdl "$g" ark:noisy/delta.ark \
    "ark:$tmp/d0.ali" "$tmp/d0.acc" 2>"$tmp/d0.log"
  KALDI_GPU_SERVICE=no KALDI_GPU_DEVICE=1 "$BIN/gmm-align-acc-compiled" --use-gpu=yes $o \
    models/tri1/final.mdl "$g" ark:noisy/delta.ark "ark:$tmp/d1.ali" "$tmp/d1.acc" 2>"$tmp/d1.log" ||
    { echo "FAIL: on the second GPU: exit $?"; tail -3 "$tmp/d1.log"; fails=$((fails + 1)); }
  if cmp -s "$tmp/d0.ali" "$tmp/d1.ali" && cmp -s "$tmp/d0.acc" "$tmp/d1.acc"; then
    echo "second GPU (own context): alignments and statistics = CPU path"
  else
    echo "FAIL: second GPU: output differs from the CPU path"; fails=$((fails + 1))
  fi
else
  echo "SKIP: second-GPU check (${ngpu:-0} GPU)"
fi

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all GPU gmm-align-compiled checks passed"
exit 0
