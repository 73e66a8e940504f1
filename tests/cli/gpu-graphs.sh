#!/bin/bash
# gmm-align --use-gpu=yes (graphs compiled in-process, aligned on the GPU):
# the parity runs of align-text.sh against Kaldi's alignments and logs.
# Env: BIN, TOP. Exit 0 pass, 1 fail, 77 skip (no GPU, unless KIO_REQUIRE_GPU=1).
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
prog="$BIN/gmm-align"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/gpu-graphs-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$TOP/tests/data" || exit 1
# Is a GPU usable? Ask the program itself on the edge utterances.
"$prog" --use-gpu=yes --read-disambig-syms=models/disambig.int --acoustic-scale=0.1 \
  --self-loop-scale=0.1 models/mono/tree models/mono/final.mdl models/L.fst \
  ark:edge/feats.ark ark:edge/text4.int "ark:$tmp/probe.ark" >"$tmp/probe.log" 2>&1
rc=$?
if [ $rc != 0 ]; then
  if [ "${KIO_REQUIRE_GPU:-0}" = 1 ] || grep -q 'Using GPU' "$tmp/probe.log"; then
    echo "FAIL: --use-gpu=yes does not work (exit $rc):"; tail -5 "$tmp/probe.log"; exit 1
  fi
  echo "SKIP: no usable GPU ($(grep -m1 '^ERROR' "$tmp/probe.log" | sed 's/^ERROR ([^ ]*) //'))"
  exit 77
fi
USE_GPU=yes BIN="$BIN" TOP="$TOP" bash "$here/align-text.sh"
