#!/bin/bash
# On a GPU host (one device call, a few minutes): which OpenBLAS core the
# Kaldi bundle runs there and why, which rounding profile our programs
# choose for it (nothing set), and whether they match that Kaldi:
#   1. the CPU as OpenBLAS 0.3.21 sees it: vendor, family/model/stepping,
#      the vector flags the kernel reports (avx512* only when the OS enables
#      their state: a VM without AVX-512 state gets no SkylakeX kernels);
#   2. the bundle's libopenblas: its build line, the core it picks with no
#      setting (OPENBLAS_VERBOSE=2) and the core it reports;
#   3. kaldi-gpu-service --print-rounding with the bundle on PATH (our
#      automatic choice and why);
#   4. tests/cli/blas-order.sh (the BLAS orders, every core this CPU runs)
#      and tests/cli/rounding.sh (our statistics, alignments and feature
#      chains against the bundle's programs, per core).
# Needs the programs and tools built (make all; or BUILD=.carry/build and
# .carry/gmmbin-gpu as gpu-session.sh carries them) and the bundle: $KALDI_BUNDLE
# (unpacked or the .tar.xz), else /tmp/recipe-device/in/kaldi-bin.tar.xz
# (recipe-device.sh stash), shared/kaldi/ or ../shared/kaldi/kaldi-bin.tar.xz.
# Writes $OUT/rounding.log (default OUT=/tmp/out). Usage:
#   dev/device/rounding-device.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUILD=${BUILD:-build}
bin=$top/gmmbin-gpu
[ -d .carry/gmmbin-gpu ] && [ ! -x "$bin/kaldi-gpu-service" ] && bin=$top/.carry/gmmbin-gpu
tmp=$(mktemp -d /tmp/rounding-device.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
log=$OUT/rounding.log
exec > >(tee "$log") 2>&1

kb=${KALDI_BUNDLE:-}
for t in "$kb" /tmp/recipe-device/in/kaldi-bin.tar.xz shared/kaldi/kaldi-bin.tar.xz \
         ../shared/kaldi/kaldi-bin.tar.xz; do
  [ -n "$t" ] || continue
  if [ -d "$t" ] && [ -x "$t/bin/gmm-est" ]; then kb=$(cd "$t" && pwd); break; fi
  if [ -f "$t" ]; then mkdir -p "$tmp/k" && tar -C "$tmp/k" -xJf "$t" && kb=$tmp/k/kb && break; fi
done
[ -n "$kb" ] && [ -x "$kb/bin/gmm-est" ] || { echo "no Kaldi bundle (KALDI_BUNDLE)"; exit 1; }

echo "=== 1. the CPU ($(date -u '+%F %T UTC'), $(nproc) CPUs)"
awk -F': ' '/^(vendor_id|model name|cpu family|model|stepping|microcode)[[:space:]]*:/ && !seen[$1]++ {
  sub(/[[:space:]]+$/, "", $1); printf "%s: %s\n", $1, $2}' /proc/cpuinfo
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(pni|ssse3|sse4_2|avx|avx2|fma|xsave|avx512f|avx512bw|avx512vl|avx512dq|avx512_bf16|avx512_fp16|amx_bf16|amx_tile)$' | tr '\n' ' ')"
grep -q -w avx512f /proc/cpuinfo || echo "no avx512f flag: the OS does not enable AVX-512 here (a VM without its state?), so OpenBLAS cannot take its SkylakeX/Cooperlake kernels"
echo "hypervisor: $(grep -q -w hypervisor /proc/cpuinfo && echo yes || echo no)"

echo "=== 2. the bundle's OpenBLAS ($kb/lib/libopenblas.so.0)"
printf '#include <dlfcn.h>\n#include <stdio.h>\nint main(int c,char**v){void*h=dlopen(v[1],RTLD_LAZY);if(!h)return 2;const char*(*f)(void)=dlsym(h,"openblas_get_config");const char*(*g)(void)=dlsym(h,"openblas_get_corename");printf("config: %%s\\ncore: %%s\\n",f?f():"?",g?g():"?");return 0;}\n' >"$tmp/q.c"
if cc -o "$tmp/q" "$tmp/q.c" -ldl 2>/dev/null; then OPENBLAS_NUM_THREADS=1 "$tmp/q" "$kb/lib/libopenblas.so.0"; fi
echo "OPENBLAS_VERBOSE=2 (what Kaldi's programs print at start):"
OPENBLAS_VERBOSE=2 "$kb/bin/gmm-est" 2>&1 | grep -E '^ *Core:|[Ff]alling back|[Uu]nknown' | sed 's/^/  /'

echo "=== 3. our automatic choice (bundle on PATH, nothing set)"
env -u KALDI_GPU_BLAS_PROFILE PATH="$kb/bin:$PATH" "$bin/kaldi-gpu-service" --print-rounding 2>&1

echo "=== 4. orders and outputs against the bundle, every core this CPU runs"
env -u KALDI_GPU_BLAS_PROFILE KALDI_BUNDLE="$kb" TOP="$top" TOOLS="$top/$BUILD/tools" \
  bash tests/cli/blas-order.sh; echo "blas-order.sh: exit $?"
env -u KALDI_GPU_BLAS_PROFILE KALDI_BUNDLE="$kb" BIN="$bin" TOP="$top" TOOLS="$top/$BUILD/tools" \
  bash tests/cli/rounding.sh; echo "rounding.sh: exit $?"
