# Sourced by tests/cli/gpu-*.sh: is a GPU usable? Judged from a probe run of
# one of our programs with --use-gpu=yes (its exit status and log).
# gpu_probe_verdict RC LOG [FOUND_PATTERN]: returns when the probe passed;
# otherwise ends the test: FAIL (exit 1) when KIO_REQUIRE_GPU=1 or the log
# shows a GPU was found (FOUND_PATTERN, a grep pattern; none: never), so a
# broken GPU path is not reported as a skip; else SKIP (exit 77).
gpu_probe_verdict() {
  local rc=$1 log=$2 found=${3:-}
  [ "$rc" = 0 ] && return 0
  if [ "${KIO_REQUIRE_GPU:-0}" = 1 ] || { [ -n "$found" ] && grep -q "$found" "$log"; }; then
    echo "FAIL: --use-gpu=yes does not work (exit $rc):"; tail -5 "$log"; exit 1
  fi
  echo "SKIP: no usable GPU ($(grep -m1 '^ERROR' "$log" | sed 's/^ERROR ([^ ]*) //'))"
  exit 77
}

# gpu_probe_align PROG DIR: PROG (gmm-align-compiled) aligns the edge
# utterances with the mono model (run from tests/data), then the verdict.
gpu_probe_align() {
  "$1" --use-gpu=yes --acoustic-scale=0.1 --self-loop-scale=0.1 models/mono/final.mdl \
    "ark:gunzip -c edge/mono.fsts.gz|" ark:edge/feats.ark "ark:$2/probe.ark" >"$2/probe.log" 2>&1
  gpu_probe_verdict $? "$2/probe.log" 'Using GPU'
}
