# Sourced by the cli tests that run jobs through the GPU service started on
# demand (numgpus-emu.sh, retry-emu.sh, service-acc.sh, service-accpool.sh,
# service-alignpool.sh, service-emu.sh),
# mostly on tests/emu's host emulation of CUDA (make emu: $EMU_BIN).

# emu_need DIR PROG...: SKIP (exit 77) unless every DIR/PROG is built.
emu_need() {
  local dir=$1 p
  shift
  for p in "$@"; do
    [ -x "$dir/$p" ] || { echo "SKIP: $dir/$p not built (make emu; needs the CUDA headers)"; exit 77; }
  done
}

# emu_service_env VERBOSE: every job through the service (even without a GPU
# device node; small accumulation jobs too), the service the jobs start
# being the one beside the program run, up for 30 s without clients,
# logging at VERBOSE; none of the fault hooks, the CPU backend or a
# KALDI_GPU_SERVICE choice that the caller's environment may hold.
emu_service_env() {
  export KALDI_GPU_TEST_SERVICE_FORCE=1 KALDI_GPU_TEST_NO_SMALL_JOB=1 KALDI_GPU_SERVICE_IDLE=30
  export KALDI_GPU_SERVICE_VERBOSE=$1
  unset KALDI_GPU_SERVICE_BIN KALDI_GPU_TEST_SERVICE_CPU KALDI_GPU_TEST_SERVICE_DROP
  unset KALDI_GPU_TEST_SERVICE_SLOW KALDI_GPU_SERVICE
}

# emu_device_env: the emulated device's identity; jobs wait 20 s without a
# sign of life from the service before going on by themselves.
emu_device_env() {
  export KALDI_GPU_TEST_GPU_UUIDS=GPU-emu KALDI_GPU_SERVICE_TIMEOUT=20
}

# stop_service [DIR...]: ends the services that serve DIR (default
# $KALDI_GPU_SERVICE_DIR), their pids from their logs ("Serving jobs on ...
# (pid N)"), and gives them a moment to go.
stop_service() {
  local pid d
  [ $# -gt 0 ] || set -- "${KALDI_GPU_SERVICE_DIR:-}"
  for d in "$@"; do
    [ -n "$d" ] || continue
    for pid in $(sed -n 's/.*Serving jobs on .* (pid \([0-9]*\)).*/\1/p' "$d"/service-*.log 2>/dev/null); do
      kill "$pid" 2>/dev/null
    done
  done
  sleep 0.3
}

# emu_msgs LOG: a job's messages without its command line and the lines
# that name the path taken (CPU, device, service) or its times, the
# function and place stripped: what the CPU path and the device path share.
emu_msgs() {
  sed -e 1d -e "/:galign_aligner_new()/d" -e "/:make_acc()/d" -e "/:pick_device()/d" \
    -e "/VLOG/d" "$1" | sed 's/^\([A-Z]*\) ([^)]*) /\1 /'
}

# emu_both_backends NAME [AFTER_CPU]: the caller's run_mode (reading $mode
# and $bin) on the service's CPU test backend with the programs in $BIN,
# then AFTER_CPU (a command, e.g. stop_service), then on the emulated
# device with $EMU_BIN's programs, or a note that that part did not run.
emu_both_backends() {
  mode=cpu bin=$BIN
  export KALDI_GPU_TEST_SERVICE_CPU=1
  run_mode
  [ -z "${2:-}" ] || eval "$2"
  unset KALDI_GPU_TEST_SERVICE_CPU
  if [ -x "$EMU_BIN/gmm-acc-stats-ali" ] && [ -x "$EMU_BIN/kaldi-gpu-service" ]; then
    mode=emu bin=$(cd "$EMU_BIN" && pwd)
    emu_device_env
    run_mode
  else
    echo "$1: the emulated device's part not run ($EMU_BIN not built: make emu)"
  fi
}

# emu_test_start NAME VERBOSE PROG: the start of a test of the emulated
# device's programs beside the CPU path's (BIN, EMU_BIN: default
# $TOP/build/emu/bin): SKIP (exit 77) unless the emulated
# gmm-align-acc-compiled, gmm-align-compiled and kaldi-gpu-service and
# $BIN/PROG are built; BIN and EMU_BIN made absolute, the working directory
# tests/data, $tmp a fresh directory (/tmp/NAME.XXXXXX), the service's
# environment (emu_service_env VERBOSE, emu_device_env), the OpenBLAS
# rounding profile skx, fails=0 and fail MESSAGE counting failures.
emu_test_start() {
  local name=$1 verbose=$2 prog=$3
  export KALDI_GPU_BLAS_PROFILE=skx
  EMU_BIN=${EMU_BIN:-$TOP/build/emu/bin}
  emu_need "$EMU_BIN" gmm-align-acc-compiled gmm-align-compiled kaldi-gpu-service
  [ -x "$BIN/$prog" ] || { echo "SKIP: $BIN/$prog not built"; exit 77; }
  BIN=$(cd "$BIN" && pwd) && EMU_BIN=$(cd "$EMU_BIN" && pwd) || exit 1
  cd "$TOP/tests/data" || exit 1
  tmp=$(mktemp -d "/tmp/$name.XXXXXX") || exit 1
  emu_service_env "$verbose"
  emu_device_env
  fails=0
}
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# emu_test_end NAME: exit 1 with the failure count, else 0.
emu_test_end() {
  [ "$fails" = 0 ] || { echo "$1: $fails failure(s)"; exit 1; }
  echo "$1: all passed"
  exit 0
}
