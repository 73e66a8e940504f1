#!/bin/bash
# make demo: aligns the bundled sample (tests/data: the tri2 LDA+MLLT model,
# its 40 training graphs and features) with the options Kaldi's recipes use,
# on the GPU if one is usable (else the CPU), and prints utterances, frames,
# speed (x real time, 100 frames = 1 s, wall time of the whole program run)
# and the agreement with Kaldi's own alignment of the same data.
# Env: BIN (programs, default gmmbin-gpu/), TOOLS (default build/tools/),
# USE_GPU (default optional).
set -u
calc() { awk "BEGIN {print $*}"; }
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$top/gmmbin-gpu}
tools=${TOOLS:-$top/${BUILD:-build}/tools}
bin=$(cd "$bin" 2>/dev/null && pwd || echo "$bin"); tools=$(cd "$tools" 2>/dev/null && pwd || echo "$tools")
for p in "$bin/gmm-align-compiled" "$tools/ali-compare"; do
  [ -x "$p" ] || { echo "demo: $p not built (run make)"; exit 1; }
done
cd "$top/tests/data" || exit 1
tmp=$(mktemp -d /tmp/demo.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

cmd=("$bin/gmm-align-compiled" "--use-gpu=${USE_GPU:-optional}"
     --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1
     --beam=10 --retry-beam=40 --careful=false
     models/tri2/final.mdl "ark:gunzip -c graphs/tri2.fsts.gz|" ark:feats/lda.ark
     "ark:$tmp/ali.ark")
echo "Aligning the bundled sample (tests/data, tri2 model, 40 utterances):"
shown="gmm-align-compiled"
for a in "${cmd[@]:1}"; do case $a in *\ *|*\|*) shown+=" '$a'" ;; *) shown+=" $a" ;; esac; done
echo "  ${shown//$tmp\//}"
t0=$(date +%s.%N)
"${cmd[@]}" 2>"$tmp/log"
rc=$?
t1=$(date +%s.%N)
if [ $rc != 0 ]; then echo "demo: gmm-align-compiled failed (exit $rc):"; tail -20 "$tmp/log"; exit 1; fi

backend=$(grep -m1 -E '^LOG \([^)]*:(galign_|kio_cuda_)' "$tmp/log" | sed 's/^LOG ([^ ]*) //')
frames=$(sed -n 's/.*Overall log-likelihood per frame is \(.*\) over \([0-9]*\) frames\./\2/p' "$tmp/log")
like=$(sed -n 's/.*Overall log-likelihood per frame is \(.*\) over \([0-9]*\) frames\./\1/p' "$tmp/log")
done_line=$(sed -n 's/.*) \(Done [0-9]*, errors on [0-9]*\)$/\1/p' "$tmp/log")
wall=$(calc "$t1 - $t0")
"$tools/ali-compare" --print-args=false ark:kaldi/tri2/ali.ark "ark:$tmp/ali.ark" \
  >"$tmp/cmp" 2>/dev/null
val() { awk -v k="$1" '$1 == k {print $2}' "$tmp/cmp"; }

echo
echo "  backend:            ${backend:-unknown}"
echo "  utterances:         $done_line"
printf '  frames:             %s (%.1f s of audio)\n' "$frames" "$(calc "$frames / 100")"
echo "  log-likelihood:     $like per frame (Kaldi: $(sed -n 's/.*per frame is \([^ ]*\) over.*/\1/p' kaldi/tri2/align.log))"
printf '  wall time:          %.3f s (whole program: model, graphs, features, writing)\n' "$wall"
printf '  speed:              %.0f x real time\n' "$(calc "$frames / 100 / $wall")"
printf '  agreement w. Kaldi: %s of %s frames equal (%s%%), %s of %s utterances in common\n' \
  "$(val frames-equal)" "$(val frames-compared)" "$(val percent-equal)" \
  "$(val utterances-common)" "$(val utterances-first)"
echo
echo "(The sample is small: start-up, model upload and reading dominate; see 'make bench' for 10 hours of audio.)"
