#!/bin/bash
# The fat binary on a GPU host: which architecture the GPU has, which device
# code our programs carry (cuobjdump) and which of it the runtime picked
# (kaldi-gpu-service --describe), then the GPU suites; and a build without
# code for this GPU (sm_80 only): refused with its ERROR under
# --use-gpu=yes, the CPU path (same alignment) under --use-gpu=optional.
#   here:  make -j2 all && dev/device/gpu-arch-check.sh pack    (stages .carry/pack.tar.xz)
#   there: dev/device/gpu-arch-check.sh run      (device call with carry [".carry"];
#          logs under $OUT; last line "gpu-arch-check: N passed, N failed")
set -uo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
pack)
  [ -f config.mk ] || { echo "gpu-arch-check: run ./configure && make first" >&2; exit 1; }
  dev/device/device-pack.sh || exit 1
  cp config.mk .carry/config.mk
  # The same programs with device code for sm_80 alone (an A100 build).
  make -j2 BUILD=build-sm80 CUDA_GENCODE="-gencode=arch=compute_80,code=sm_80" CUDA_SASS=80 CUDA_PTX=0 \
    build-sm80/gmmbin-gpu/gmm-align-compiled build-sm80/gmmbin-gpu/kaldi-gpu-service >/dev/null || exit 1
  rm -rf .carry/arch-sm80 && mkdir -p .carry/arch-sm80
  cp build-sm80/gmmbin-gpu/gmm-align-compiled build-sm80/gmmbin-gpu/kaldi-gpu-service .carry/arch-sm80/
  strip .carry/arch-sm80/*
  # Every program and suite holds the device code of 12 architectures: 96 MB
  # as files, over the device transfer's 64 MiB; xz takes it to ~10 MB.
  tar -C .carry -cJf .carry.tar.xz . && rm -rf .carry && mkdir .carry && mv .carry.tar.xz .carry/pack.tar.xz || exit 1
  du -sh .carry
  exit 0 ;;
run) ;;
*) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac

OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -f .carry/pack.tar.xz ]; then tar -C .carry -xJf .carry/pack.tar.xz || exit 1; fi
export LD_LIBRARY_PATH="$PWD/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
cp .carry/gmmbin-gpu/* gmmbin-gpu/ || exit 1
pass=0 fail=0
ok() { echo "PASS: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
exec > >(tee "$OUT/arch-check.log") 2>&1

nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv,noheader
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
echo "GPU 0 architecture: sm_$cc"
sass=$(sed -n 's/^CUDA_SASS = //p' .carry/config.mk)
ptx=$(sed -n 's/^CUDA_PTX = //p' .carry/config.mk)
echo "configured: SASS $sass, PTX $ptx"

# 1. The device code in the files (cuobjdump of the toolkit on this host).
cuobj=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
if [ -x "$cuobj" ]; then
  for p in gmm-align-compiled gmm-acc-stats-ali kaldi-gpu-service; do
    have=$("$cuobj" --list-elf "gmmbin-gpu/$p" | sed -n 's/.*\.sm_\([0-9]*\)\..*/\1/p' | sort -n -u | tr '\n' ' ')
    hptx=$("$cuobj" --list-ptx "gmmbin-gpu/$p" | sed -n 's/.*\.sm_\([0-9]*\)\..*/\1/p' | sort -n -u | tr '\n' ' ')
    echo "$p: SASS for: $have; PTX for: $hptx"
    [ "$(echo $have)" = "$(echo $sass)" ] && ok "$p holds SASS for every configured architecture" ||
      bad "$p: SASS $have, configured $sass"
    [ "$(echo $hptx)" = "$ptx" ] && ok "$p holds the PTX of compute_$ptx" || bad "$p: PTX $hptx, configured $ptx"
  done
else
  echo "no cuobjdump on this host: the files' device code not listed"
fi

# 2. What the runtime picked for this GPU.
gmmbin-gpu/kaldi-gpu-service --describe --print-args=false | tee "$OUT/describe.txt"
grep -q "^gpu 0: .*, sm_$cc, .*runs this build's SASS sm_$cc$" "$OUT/describe.txt" &&
  ok "the runtime runs the SASS built for sm_$cc" || bad "the runtime did not pick SASS sm_$cc"

# 3. The GPU suites with the fat binary, and the recipe tools with a GPU.
KIO_REQUIRE_GPU=1 tests/run-tests.sh --gpu .carry/build >"$OUT/test-gpu.log" 2>&1 &&
  ok "GPU suites: $(tail -1 "$OUT/test-gpu.log")" || { bad "GPU suites"; grep -E '^(FAIL|Summary)' "$OUT/test-gpu.log"; }
BIN=gmmbin-gpu TOP=$PWD bash tests/cli/enable-recipe.sh >"$OUT/enable-recipe.log" 2>&1 &&
  ok "enable-recipe / check-recipe with a GPU" || { bad "enable-recipe.sh"; tail -5 "$OUT/enable-recipe.log"; }

# 4. A build without code for this GPU (sm_80 only; skipped on an sm_80 GPU).
if [ "$cc" != 80 ] && [ -x .carry/arch-sm80/gmm-align-compiled ]; then
  a=(--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40
     models/tri2/final.mdl "ark:gunzip -c graphs/tri2.fsts.gz|" ark:feats/lda.ark)
  t=$(mktemp -d)
  ( cd tests/data &&
    KALDI_GPU_SERVICE=no ../../gmmbin-gpu/gmm-align-compiled --use-gpu=yes "${a[@]}" "ark:$t/fat.ali" 2>"$t/fat.log"
    echo "fat=$?"
    KALDI_GPU_SERVICE=no ../../.carry/arch-sm80/gmm-align-compiled --use-gpu=yes "${a[@]}" "ark:$t/yes.ali" 2>"$t/yes.log"
    echo "yes=$?"
    KALDI_GPU_SERVICE=no ../../.carry/arch-sm80/gmm-align-compiled "${a[@]}" "ark:$t/opt.ali" 2>"$t/opt.log"
    echo "optional=$?"
    # through its own service (beside it), which cannot use the GPU either
    KALDI_GPU_SERVICE_DIR=$t/svc ../../.carry/arch-sm80/gmm-align-compiled "${a[@]}" "ark:$t/svc.ali" 2>"$t/svc.log"
    echo "service=$?" ) >"$t/rc"
  cat "$t/rc"; grep -h -E 'No device code|Using GPU|not usable|on the CPU' "$t"/*.log | sed 's/^/  /'
  cp "$t"/*.log "$OUT/" 2>/dev/null
  grep -q '^yes=255$' "$t/rc" && grep -q "ERROR .*No device code for .*(sm_$cc) in this build" "$t/yes.log" &&
    ok "sm_80-only build, --use-gpu=yes: refused with the ERROR naming sm_$cc" || bad "sm_80-only build, --use-gpu=yes"
  grep -q '^optional=0$' "$t/rc" && grep -q 'aligning on the CPU' "$t/opt.log" && cmp -s "$t/fat.ali" "$t/opt.ali" &&
    ok "sm_80-only build, --use-gpu=optional: the CPU path, the fat build's alignment" ||
    bad "sm_80-only build, --use-gpu=optional"
  grep -q '^service=0$' "$t/rc" && cmp -s "$t/fat.ali" "$t/svc.ali" &&
    ok "sm_80-only build through its service: falls back, same alignment" || bad "sm_80-only build through its service"
  rm -rf "$t"
fi
echo "gpu-arch-check: $pass passed, $fail failed"
[ $fail -eq 0 ]
