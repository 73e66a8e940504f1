#!/bin/bash
# Feature pipelines: Kaldi's processes vs in-process (base/feat*.c).
# usage: dev/bench/feat-bench.sh [DATA_DIR]   (default: tests/data/featpipe data;
#   a Kaldi data dir with feats.scp, cmvn.scp, utt2spk, e.g. the recipe's
#   data/train or data/train_x4). Needs Kaldi's featbin on PATH (or
#   KALDI_BUNDLE) for the pipe side, python3 for the fMLLR transforms.
# For the deltas, LDA+MLLT and SAT (LDA + per-speaker fMLLR) pipelines of the
# steps scripts, the same consumer (build/tools/feat-copy to /dev/null) reads
#   pipe:       KALDI_GPU_FEATS_PIPE=0 (the real processes, as Kaldi runs them)
#   in-process: the default
#   archive:    the finished archive from a file (the reader's own cost)
# and prints wall seconds, CPU seconds (user+sys, all processes; bash's
# time, ms resolution) and frames/s (frames per wall second and per CPU
# second), each the best of BENCH_REPS runs (default 1). The feature cost of
# a job is a row's CPU minus the archive row's; the last lines give it and
# the pipe / in-process ratio. Env: KALDI_GPU_FEATS_THREADS is passed through.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
[ -n "${KALDI_BUNDLE:-}" ] && . "$KALDI_BUNDLE/env.sh"
# Round as the Kaldi on PATH does (its OpenBLAS kernels), unless told.
. "$top/dev/bench/feat-profile.sh"
feat_profile "$top"
fc=$top/${BUILD:-build}/tools/feat-copy
[ -x "$fc" ] || { echo "feat-bench: $fc not built (run make)"; exit 1; }
command -v apply-cmvn >/dev/null || { echo "feat-bench: Kaldi's apply-cmvn not on PATH (set KALDI_BUNDLE)"; exit 1; }
d=${1:-}
tmp=$(mktemp -d /tmp/feat-bench.XXXXXX); trap 'rm -rf "$tmp"' EXIT
if [ -z "$d" ]; then
  d=$tmp/data; mkdir -p "$d"
  (cd "$top/tests/data" && for f in feats.scp cmvn.scp; do sed "s#featpipe/#$PWD/featpipe/#" featpipe/$f > "$d/$f"; done
   cp featpipe/utt2spk "$d/")
fi
d=$(cd "$d" && pwd)
mat=$top/tests/data/featpipe/final.mat
python3 - "$d/utt2spk" "$tmp/trans.ark" <<'PY'
import sys, struct, random
random.seed(5)
spks = sorted(set(l.split()[1] for l in open(sys.argv[1])))
with open(sys.argv[2], 'wb') as f:
    for s in spks:
        f.write(s.encode() + b' \0BFM \x04' + struct.pack('<i', 40) + b'\x04' + struct.pack('<i', 41))
        v = [(1.0 if i == j else 0.0) + random.uniform(-0.05, 0.05) for i in range(40) for j in range(41)]
        f.write(struct.pack('<%df' % len(v), *v))
PY
frames=$(awk 'NR==FNR {u[$1]; next} ($1 in u) {n += $2} END {print n+0}' "$d/feats.scp" "$d/utt2num_frames" 2>/dev/null)
if [ -z "$frames" ] || [ "$frames" = 0 ]; then
  frames=$(feat-to-len "scp:$d/feats.scp" ark,t:- 2>/dev/null | awk '{n += $2} END {print n}')
fi
cmvn="apply-cmvn --utt2spk=ark:$d/utt2spk scp:$d/cmvn.scp scp:$d/feats.scp ark:-"
lda="$cmvn | splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats $mat ark:- ark:-"
declare -A pipes=(
  [deltas]="$cmvn | add-deltas ark:- ark:-"
  [lda]="$lda"
  [sat]="$lda | transform-feats --utt2spk=ark:$d/utt2spk ark:$tmp/trans.ark ark:- ark:-"
)
reps=${BENCH_REPS:-1}
declare -A cpu
printf '%s frames (%.2f h) from %s, %s CPUs, profile %s (OpenBLAS core %s)\n\n' "$frames" \
  "$(awk "BEGIN {print $frames / 360000}")" "$d" "$(nproc)" "$KALDI_GPU_BLAS_PROFILE" "${FEAT_BLAS_CORE:-not asked}"
echo "| pipeline | how | wall s | CPU s | frames/s (wall) | frames/s (CPU) |"
echo "|---|---|---|---|---|---|"
for name in deltas lda sat; do
  KALDI_GPU_FEATS_PIPE=1 "$fc" "ark,s,cs:${pipes[$name]} |" "ark:$tmp/out.ark" 2>/dev/null
  for how in pipe in-process archive; do
    e=1; [ $how = pipe ] && e=0
    src="ark,s,cs:${pipes[$name]} |"; [ $how = archive ] && src="ark:$tmp/out.ark"
    best_w=""; best_c=""
    for ((r = 0; r < reps; r++)); do
      TIMEFORMAT='%3R %3U %3S'
      { time KALDI_GPU_FEATS_PIPE=$e "$fc" "$src" ark:/dev/null 2>/dev/null >/dev/null; } 2>"$tmp/t"
      read -r w u s < <(tail -n 1 "$tmp/t")
      c=$(awk "BEGIN {print $u + $s}")
      if [ -z "$best_w" ] || awk "BEGIN {exit !($w < $best_w)}"; then best_w=$w; fi
      if [ -z "$best_c" ] || awk "BEGIN {exit !($c < $best_c)}"; then best_c=$c; fi
    done
    [ $how = archive ] && rm -f "$tmp/out.ark"
    cpu[$name.$how]=$best_c
    printf '| %s | %s | %.3f | %.3f | %.0f | %.0f |\n' "$name" "$how" "$best_w" "$best_c" \
      "$(awk "BEGIN {print $frames / ($best_w > 0 ? $best_w : 0.001)}")" "$(awk "BEGIN {print $frames / ($best_c > 0 ? $best_c : 0.001)}")"
  done
done
echo
for name in deltas lda sat; do
  awk -v n=$name -v p="${cpu[$name.pipe]}" -v i="${cpu[$name.in-process]}" -v a="${cpu[$name.archive]}" \
    'BEGIN {kp = p - a; ki = i - a; printf("%s: feature CPU per job, pipe %.3f s, in-process %.3f s: %s\n", n, kp, ki,
            (ki > 0 ? sprintf("%.1fx lower", kp / ki) : "not measurable"))}'
done
