#!/bin/bash
# gmm-acc-stats-ali and gmm-align-acc-compiled with --use-gpu=yes: acc.sh's
# parity runs against Kaldi, align-acc.sh's one-pass equivalence and
# small-dim.sh's dims 4 and 8, on the GPU. Env: BIN, TOP. Exit 0 pass,
# 1 fail, 77 skip (no GPU, unless KIO_REQUIRE_GPU=1).
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
prog="$BIN/gmm-acc-stats-ali"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/gpu-acc-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$TOP/tests/data" || exit 1
. "$here/lib/gpu-probe.sh"
"$prog" --use-gpu=yes models/mono/final.mdl ark:edge/feats.ark ark:edge/ali.ark \
  "$tmp/probe.acc" >"$tmp/probe.log" 2>&1
gpu_probe_verdict $? "$tmp/probe.log"
grep -q 'Accumulating on the GPU' "$tmp/probe.log" || { echo "FAIL: no GPU backend line"; exit 1; }
fails=0
USE_GPU=yes bash "$here/acc.sh" || fails=$((fails + 1))
if [ -x "$BIN/gmm-align-acc-compiled" ]; then
  USE_GPU=yes bash "$here/align-acc.sh" || fails=$((fails + 1))
fi
# dims 4 and 8 (SkylakeX's small-m sgemv kernel): acc, align, align-acc
USE_GPU=yes bash "$here/small-dim.sh" || fails=$((fails + 1))
if [ $fails -ne 0 ]; then echo "$fails script(s) failed"; exit 1; fi
echo "all GPU accumulation checks passed"
exit 0
