#!/bin/bash
# The rounding profile's probe (the Kaldi's BLAS from its loader, the
# library's OpenBLAS core: base/matrix/blas-detect.c) kept in the private
# directory: the first program asks and writes the answer, the next ones
# read it (seen by planting another core in it); another OPENBLAS_CORETYPE,
# another library identity, an answer older than an hour and
# KALDI_GPU_DEV_BLAS_CACHE=0 ask again. Needs the Kaldi bundle (SKIP
# without it).
# Env: BIN, TOP. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
svc=$BIN/kaldi-gpu-service
if [ ! -x "$svc" ]; then echo "SKIP: $svc not built"; exit 77; fi
tmp=$(mktemp -d /tmp/blas-cache.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
. "$TOP/tests/cli/lib/kaldi-bundle.sh"
kb=$(find_kaldi_bundle "$tmp")
if [ -z "$kb" ]; then echo "SKIP: no Kaldi bundle (KALDI_BUNDLE)"; exit 77; fi
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mkdir -m 700 "$tmp/dir"
export KALDI_GPU_SERVICE_DIR=$tmp/dir PATH="$kb/bin:$PATH"
unset KALDI_GPU_BLAS_PROFILE OPENBLAS_CORETYPE KALDI_GPU_DEV_BLAS_CACHE
core() { "$svc" --print-rounding 2>/dev/null | sed -n 's/.*reports core \([A-Za-z]*\).*/\1/p'; }

real=$(core)
[ -n "$real" ] || { echo "FAIL: no core reported"; exit 1; }
n=$(ls "$tmp/dir"/blas-* 2>/dev/null | wc -l)
[ "$n" = 1 ] || fail "$n cache files after the first probe, not 1"
f=$(ls "$tmp/dir"/blas-* | head -1)
grep -q "^core $real\$" "$f" || fail "the cache does not hold core $real"
other=Prescott
[ "$real" = Prescott ] && other=Nehalem
plant() { sed -i "s/^core .*/core $other/" "$f"; }

plant
[ "$(core)" = "$other" ] || fail "the planted answer was not read (the cache is not used)"
[ "$(KALDI_GPU_DEV_BLAS_CACHE=0 core)" = "$real" ] || fail "KALDI_GPU_DEV_BLAS_CACHE=0 read the cache"
[ "$(OPENBLAS_CORETYPE=Nehalem core)" = Nehalem ] || fail "OPENBLAS_CORETYPE=Nehalem: not asked again"
[ "$(ls "$tmp/dir"/blas-* | wc -l)" = 2 ] || fail "OPENBLAS_CORETYPE did not key another file"

plant
sed -i 's/^libid .*/libid 1.2.3.4.5/' "$f"
[ "$(core)" = "$real" ] || fail "another library identity: not asked again"
grep -q "^core $real\$" "$f" || fail "another library identity: the answer not written again"

plant
touch -d '2 hours ago' "$f"
[ "$(core)" = "$real" ] || fail "an answer two hours old was used"

# A private directory that is not private: no cache, the answer still right.
chmod 755 "$tmp/dir"
rm -f "$tmp/dir"/blas-*
[ "$(core)" = "$real" ] || fail "without a private directory: wrong core"
[ -z "$(ls "$tmp/dir"/blas-* 2>/dev/null)" ] || fail "wrote a cache into a directory open to others"

[ $fails = 0 ] && echo "PASS: blas-cache ($real)" && exit 0
exit 1
