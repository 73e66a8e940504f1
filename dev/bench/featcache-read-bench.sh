#!/bin/bash
# A feature-cache hit's reading speed against the chain computed: the LDA
# chain of the recipes (apply-cmvn | splice-feats | transform-feats) over the
# fixtures replicated COPIES times (tools gfeat-testdata; 1300 copies: 18.4M
# frames, 2.9 GB of 40-dim output), read by feat-read-bench (a sequential
# reader summing every value's bits, nothing else). Per build and feature
# thread count: the chain computed (KALDI_GPU_FEATS_CACHE=0), a miss (computed
# and written), RUNS hits; wall, user and system seconds, seconds to the first
# entry (a hit checks the whole entry before it), GB/s. The checksums must
# agree.
# usage: dev/bench/featcache-read-bench.sh [TOOLS_DIR...]
#   TOOLS_DIR: a build's tools folder (default build/tools of this tree);
#   several compare builds (each its own cache entry: the key names the code).
# Env: COPIES (1300), THREADS (feature threads, e.g. "1 16"; default: the
# default count), RUNS (3), WORK (the data and the cache; default a
# temporary folder, removed unless KEEP is set).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -gt 0 ] || set -- "$top/build/tools"
copies=${COPIES:-1300} runs=${RUNS:-3}
w=${WORK:-$(mktemp -d /tmp/featcache-read.XXXXXX)}
mkdir -p "$w/d" || exit 1
[ -n "${WORK:-}" ] || trap '[ -n "${KEEP:-}" ] || rm -rf "$w"' EXIT
if [ ! -s "$w/d/feats.scp" ]; then
  (cd "$top/tests/data" && "$1/gfeat-testdata" --copies="$copies" ark:feats/delta.ark "$w/d" >/dev/null 2>&1) ||
    { echo "featcache-read-bench: gfeat-testdata failed"; exit 1; }
fi
cp "$top/tests/data/models/tri2/final.mat" "$w/final.mat"
f="ark,s,cs:apply-cmvn --utt2spk=ark:$w/d/utt2spk scp:$w/d/cmvn.scp scp:$w/d/feats.scp ark:- | splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats $w/final.mat ark:- ark:- |"
export KALDI_GPU_SERVICE=no KALDI_GPU_FEATS_CACHE=$w/cache KALDI_GPU_FEATS_CACHE_MAX=${KALDI_GPU_FEATS_CACHE_MAX:-64G}
echo "# $(nproc) cores, $copies copies of the fixtures, $(date -u +%FT%TZ)"
echo
echo "| build | threads | run | wall s | user s | sys s | first entry s | GB/s | checksum |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---|"
# one TOOLS THREADS RUN [env...]
one() {
  local t=$1 th=$2 run=$3; shift 3
  local o
  o=$(env ${th:+KALDI_GPU_FEATS_THREADS=$th} "$@" /usr/bin/time -f "TIME %e %U %S" "$t/feat-read-bench" "$f" 2>&1)
  local first gbs sum tm
  first=$(sed -n 's/.*first entry \([0-9.]*\) s.*/\1/p' <<<"$o")
  gbs=$(sed -n 's/.*, \([0-9.]*\) GB\/s.*/\1/p' <<<"$o")
  sum=$(sed -n 's/.*checksum \([0-9a-f]*\).*/\1/p' <<<"$o")
  tm=$(grep '^TIME' <<<"$o" | cut -d' ' -f2-)
  set -- $tm
  echo "| $(basename "$(dirname "$t")")/$(basename "$t") | ${th:-default} | $run | ${1:-?} | ${2:-?} | ${3:-?} | ${first:-?} | ${gbs:-?} | ${sum:-FAILED} |"
}
for t in "$@"; do
  t=$(cd "$t" && pwd)
  for th in ${THREADS:-""}; do
    rm -rf "$w/cache"
    one "$t" "$th" computed KALDI_GPU_FEATS_CACHE=0
    one "$t" "$th" miss
    for i in $(seq 1 "$runs"); do one "$t" "$th" "hit $i"; done
  done
done
