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
. "$here/lib/gpu-probe.sh"
# Is a GPU usable? Ask the program itself on the edge utterances.
"$prog" --use-gpu=yes --read-disambig-syms=models/disambig.int --acoustic-scale=0.1 \
  --self-loop-scale=0.1 models/mono/tree models/mono/final.mdl models/L.fst \
  ark:edge/feats.ark ark:edge/text4.int "ark:$tmp/probe.ark" >"$tmp/probe.log" 2>&1
gpu_probe_verdict $? "$tmp/probe.log" 'Using GPU'
USE_GPU=yes BIN="$BIN" TOP="$TOP" bash "$here/align-text.sh"
