#!/bin/bash
# Kaldi's AMI recipe (egs/ami/s5b) run from this directory, so that its
# ". ./path.sh" picks up ours, which puts gmmbin-gpu/ first on PATH. The
# recipe's steps/*.sh then call gmm-align-compiled, align-equal-compiled and
# gmm-acc-stats-ali by name and get ours; nothing else changes.
# Usage: KALDI_ROOT=/path/to/kaldi egs/ami/s5/run.sh [--kaldi-only true] [Kaldi run.sh options]
#   --kaldi-only true: stock Kaldi only (gmmbin-gpu not put on PATH), to compare.
set -e
export KALDI_ONLY=false
if [ "${1:-}" = --kaldi-only ]; then
  case ${2:-} in true|false) KALDI_ONLY=$2 ;; *) echo "$0: --kaldi-only true|false" >&2; exit 1 ;; esac
  shift 2
fi
cd "$(dirname "$0")"
: "${KALDI_ROOT:?set KALDI_ROOT to your Kaldi checkout}"
src="$KALDI_ROOT/egs/ami/s5b"
[ -f "$src/run.sh" ] || { echo "$0: no $src/run.sh; check KALDI_ROOT" >&2; exit 1; }
for f in cmd.sh conf local steps utils; do
  [ -e "$f" ] || ln -sfn "$src/$f" "$f"
done
. ./path.sh
for p in gmm-align-compiled align-equal-compiled gmm-acc-stats-ali; do
  echo "$0: $p -> $(command -v $p)"
done
exec bash "$src/run.sh" "$@"
