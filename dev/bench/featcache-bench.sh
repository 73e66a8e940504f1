#!/bin/bash
# The feature cache on a recipe-shaped job: one job's part of a Kaldi data
# dir, the steps scripts' three feature chains (deltas, splice+LDA,
# splice+LDA+per-speaker fMLLR trans.JOB), and gmm-acc-stats-ali (--use-gpu=no,
# the CPU path) run RUNS times on the same chain, as a training stage's
# iterations do. Per chain: the uncached run (KALDI_GPU_FEATS_CACHE=0), the
# first run (a miss: computes and writes), the later runs (hits), wall and
# CPU seconds, peak memory, the entry's size on disk. The deltas chain is
# not kept (no transform-feats stage: kio_fcache_worth): its "miss" and "hit"
# rows are the chain computed again, the control.
# usage: dev/bench/featcache-bench.sh RECIPE_DIR [NJ] [JOBS] [RUNS]
#   RECIPE_DIR: the unpacked recipe (synth-s5: data/TRAIN, data/lang; TRAIN
#   from the environment, default train); NJ parts (default 16); JOBS: one
#   job (1) or a range run at once each iteration (1-16; default 1); RUNS
#   iterations (default 35). Needs
#   Kaldi on PATH or KALDI_BUNDLE (gmm-init-mono, utils/split_data.sh), the
#   build's programs (gmmbin-gpu), python3 for the fMLLR transforms.
# Env: OUT (the table and a few logs; default a temporary folder), BIN
# (default gmmbin-gpu), TRAIN, KEEP (keep the work folder).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
r=${1:?usage: featcache-bench.sh RECIPE_DIR [NJ] [JOBS] [RUNS]}
nj=${2:-16} jobs=${3:-1} runs=${4:-35} train=${TRAIN:-train}
job0=${jobs%-*} job1=${jobs#*-}
r=$(cd "$r" && pwd) || exit 1
[ -n "${KALDI_BUNDLE:-}" ] && . "$KALDI_BUNDLE/env.sh"
command -v gmm-init-mono >/dev/null || { echo "featcache-bench: Kaldi's gmm-init-mono not on PATH"; exit 1; }
bin=${BIN:-$top/gmmbin-gpu}
out=${OUT:-$(mktemp -d /tmp/featcache-bench.XXXXXX)}
mkdir -p "$out"
w=$(mktemp -d /tmp/featcache-bench-work.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$w"' EXIT
export KALDI_GPU_SERVICE=no
. "$top/dev/bench/feat-profile.sh"
feat_profile "$top"
(cd "$r" && PATH=$r/utils:$PATH utils/split_data.sh "data/$train" "$nj" >/dev/null) || exit 1
mat=$top/tests/data/featpipe/final.mat
declare -A dims=([deltas]=39 [lda]=40 [sat]=40)
# chain K J: job J's features rspecifier for chain K
chain() {
  local d=$r/data/$train/split$nj/$2
  local cmvn="apply-cmvn --utt2spk=ark:$d/utt2spk scp:$d/cmvn.scp scp:$d/feats.scp ark:- |"
  local lda="$cmvn splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats $mat ark:- ark:- |"
  case $1 in
    deltas) echo "ark,s,cs:$cmvn add-deltas ark:- ark:- |" ;;
    lda) echo "ark,s,cs:$lda" ;;
    sat) echo "ark,s,cs:$lda transform-feats --utt2spk=ark:$d/utt2spk ark:$w/trans.$2 ark:- ark:- |" ;;
  esac
}
frames=0
for j in $(seq "$job0" "$job1"); do
  d=$r/data/$train/split$nj/$j
  python3 - "$d/utt2spk" "$w/trans.$j" <<'PY' || exit 1
import sys, struct, random
random.seed(5)
spks = sorted(set(l.split()[1] for l in open(sys.argv[1])))
with open(sys.argv[2], 'wb') as f:
    for s in spks:
        f.write(s.encode() + b' \0BFM \x04' + struct.pack('<i', 40) + b'\x04' + struct.pack('<i', 41))
        v = [(1.0 if i == j else 0.0) + random.uniform(-0.05, 0.05) for i in range(40) for j in range(41)]
        f.write(struct.pack('<%df' % len(v), *v))
PY
  "$r/utils/sym2int.pl" --map-oov "$(cat "$r/data/lang/oov.int")" -f 2- "$r/data/lang/words.txt" \
    "$d/text" >"$w/text.$j.int" || exit 1
  frames=$((frames + $(awk 'NR==FNR {u[$1]; next} ($1 in u) {n += $2} END {print n+0}' "$d/feats.scp" \
    "$r/data/$train/utt2num_frames")))
done
# acc K J TAG I: job J's gmm-acc-stats-ali on chain K; "K TAG I wall cpu maxrss_kb" into $w/times.raw
acc() {
  /usr/bin/time -f "$1 $3 $4 %e %U %S %M" -a -o "$w/times.$2" "$bin/gmm-acc-stats-ali" --use-gpu=no \
    "$w/$1.mdl" "$(chain "$1" "$2")" "ark:$w/$1.$2.ali" "$w/$1.$2.$3.acc" 2>"$w/$1.$2.$3.log"
}
# iter K TAG I: one iteration: every job at once; its wall time into $w/iters
iter() {
  local t0 t1
  t0=$(date +%s.%N)
  for j in $(seq "$job0" "$job1"); do acc "$1" "$j" "$2" "$3" & done
  wait
  t1=$(date +%s.%N)
  echo "$1 $2 $3 $(awk "BEGIN {print $t1 - $t0}")" >>"$w/iters"
  for j in $(seq "$job0" "$job1"); do
    cmp -s "$w/$1.$j.ref.acc" "$w/$1.$j.$2.acc" || echo "featcache-bench: $1 job $j ($2 $3): statistics differ!"
  done
}
: >"$w/iters"
for k in deltas lda sat; do
  gmm-init-mono "$r/data/lang/topo" "${dims[$k]}" "$w/$k.mdl" "$w/$k.tree" 2>/dev/null || exit 1
  for j in $(seq "$job0" "$job1"); do
    ( "$bin/compile-train-graphs" --read-disambig-syms="$r/data/lang/phones/disambig.int" "$w/$k.tree" \
        "$w/$k.mdl" "$r/data/lang/L.fst" "ark:$w/text.$j.int" "ark:$w/$k.$j.fsts" 2>"$w/$k.$j.graphs.log" &&
      KALDI_GPU_FEATS_CACHE=0 "$bin/align-equal-compiled" "ark:$w/$k.$j.fsts" "$(chain $k "$j")" \
        "ark:$w/$k.$j.ali" 2>"$w/$k.$j.ali.log"
      rm -f "$w/$k.$j.fsts" ) &
  done
  wait
  for j in $(seq "$job0" "$job1"); do
    [ -s "$w/$k.$j.ali" ] || { echo "featcache-bench: $k job $j: no alignments ($w/$k.$j.ali.log)"; exit 1; }
  done
  export KALDI_GPU_FEATS_CACHE=$w/cache.$k
  rm -rf "$KALDI_GPU_FEATS_CACHE"
  KALDI_GPU_FEATS_CACHE=0 iter "$k" ref 0
  for i in $(seq 1 "$runs"); do
    tag=hit
    [ "$i" = 1 ] && tag=miss
    iter "$k" "$tag" "$i"
    [ "$i" = 3 ] && for j in $(seq "$job0" "$job1"); do cp "$w/$k.$j.hit.log" "$out/$k.$j.hit.log"; done
  done
  cp "$w/$k.$job0.ref.log" "$out/$k.$job0.uncached.log"
  du -sb "$KALDI_GPU_FEATS_CACHE" | awk -v k="$k" '{print k, $1}' >>"$w/sizes"
  rm -rf "$KALDI_GPU_FEATS_CACHE" "$w"/*.acc
done
cat "$w"/times.* >"$w/times.raw"
njobs=$((job1 - job0 + 1))
{
  printf '%s frames (%.2f h) in jobs %s-%s of %s (%s at once), %s CPUs, profile %s\n\n' "$frames" \
    "$(awk "BEGIN {print $frames / 360000}")" "$job0" "$job1" "$nj" "$njobs" "$(nproc)" "$KALDI_GPU_BLAS_PROFILE"
  echo "| chain | run | iterations | iteration wall s (median) | job CPU s (median) | job peak RSS MB (max) | cache MB (all jobs) |"
  echo "|---|---|---|---|---|---|---|"
  for k in deltas lda sat; do
    for tag in ref miss hit; do
      wall=$(awk -v k="$k" -v t="$tag" '$1 == k && $2 == t {print $4}' "$w/iters" | sort -n |
        awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)], NR}')
      awk -v k="$k" -v t="$tag" '$1 == k && $2 == t {print $5 + $6, $7}' "$w/times.raw" | sort -n |
        awk -v k="$k" -v t="$tag" -v wall="$wall" \
          -v mb="$(awk -v k="$k" '$1 == k {printf "%.1f", $2 / 1048576}' "$w/sizes")" \
          '{c[NR] = $1; if ($2 > m) m = $2}
           END {split(wall, a, " "); printf "| %s | %s | %d | %.2f | %.2f | %.0f | %s |\n", k,
                (t == "ref" ? "uncached" : t), a[2], a[1], c[int((NR + 1) / 2)], m / 1024, (t == "hit" ? mb : "")}'
    done
  done
} | tee "$out/featcache-bench.md"
