#!/bin/bash
# Runs the Check suites (from tests/data, so paths match the Kaldi fixture
# commands) and the command-line tests in tests/cli/. Usage:
#   tests/run-tests.sh [--gpu|--san] BUILD_DIR
# A suite or script exiting 77 was skipped (it prints SKIP and why).
set -u
mode=all
# Check kills a test after 4 s by default: too tight on a loaded 2-core machine.
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-60}
case "${1:-}" in --gpu) mode=gpu; shift ;; --san) mode=san; shift ;; esac
build=${1:-build}
# The fixtures come from a Kaldi whose OpenBLAS ran its SkylakeX kernels: the
# tests compare in that rounding unless they choose another (cli/rounding.sh
# unsets it to test the automatic choice).
export KALDI_GPU_BLAS_PROFILE=skx
# The feature cache would carry chains' outputs from one test into the next
# (and into the user's own): off, but where a test sets its own folder
# (cli/featcache.sh).
export KALDI_GPU_FEATS_CACHE=0
top=$(cd "$(dirname "$0")/.." && pwd)
pass=0; fail=0; skip=0; failed=""
run_one() {  # name, command...
  local name=$1; shift
  local log; log=$(mktemp)
  ( "$@" ) >"$log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "PASS: $name"
  elif [ $rc -eq 77 ]; then skip=$((skip+1)); echo "SKIP: $name: $(grep -m1 SKIP "$log")"
  else fail=$((fail+1)); failed="$failed $name"; echo "FAIL: $name (exit $rc)"; tail -n 40 "$log" | sed 's/^/    /'
  fi
  rm -f "$log"
}
for t in "$top/$build"/tests/*/check_*; do
  [ -x "$t" ] || continue
  n=$(basename "$t")
  case "$mode:$n" in gpu:check_gpu_*|all:*|san:*) ;; *) continue ;; esac
  run_one "$n" bash -c "cd '$top/tests/data' && '$t'"
done
if [ "$mode" != gpu ]; then
  bindir="$top/gmmbin-gpu"; [ "$mode" = san ] && bindir="$top/$build/gmmbin-gpu"
  for s in "$top"/tests/cli/*.sh; do
    [ -f "$s" ] || continue
    run_one "cli/$(basename "$s")" env BIN="$bindir" TEST_BIN="$top/$build/test-bin" TOP="$top" TOOLS="$top/$build/tools" EMU_BIN="$top/$build/emu/bin" bash "$s"
  done
else
  for s in "$top"/tests/cli/gpu-*.sh; do
    [ -f "$s" ] || continue
    run_one "cli/$(basename "$s")" env BIN="$top/gmmbin-gpu" TEST_BIN="$top/$build/test-bin" TOP="$top" TOOLS="$top/$build/tools" bash "$s"
  done
fi
# The Python binding (python/tests; each SKIPs without a python3 with numpy,
# or what else it needs: MFA's sources, torch, kalpy).
py() { run_one "python/$*" bash "$top/python/tests/run.sh" "$build" "$@"; }
if [ "$mode" != gpu ]; then
  py test_binding.py
  py test_kalpy_layer.py
  py kalpy_side_by_side.py --impl ours
  py kalpy_side_by_side.py --impl both
  py test_mfa_switch.py
  py test_pip_install.py
  py torch_coexist.py
else
  py test_binding.py --gpu
  py torch_coexist.py
fi
echo "Summary: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] || { echo "failed:$failed"; exit 1; }
[ $((pass+fail)) -gt 0 ] || { echo "no test ran"; exit 1; }
exit 0
