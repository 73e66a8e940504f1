#!/bin/sh
# Builds and runs the libFuzzer harnesses of tests/fuzz/ (see README.md).
#   tests/fuzz/run.sh [harness...]      default: all tests/fuzz/fuzz_*.c
# Env: FUZZ_SECONDS (per harness, default 60), FUZZ_JOBS (harnesses run at
# once, default 1), FUZZ_BUILD (default build-fuzz), FUZZ_NO_BUILD=1.
# First every saved reproducer under tests/fuzz/regressions/<harness>/ is
# replayed; then each harness runs from a seed corpus cut from tests/data
# plus its own growing corpus in $FUZZ_BUILD/corpus/<harness>/. Crashes,
# leaks, hangs (> 10 s per input) and allocations over 512 MB fail the run;
# the offending input is left in $FUZZ_BUILD/artifacts/.
set -u
cd "$(dirname "$0")/../.."
B=${FUZZ_BUILD:-build-fuzz}
mkdir -p "$B" && B=$(cd "$B" && pwd)  # absolute: make-seeds runs from tests/data
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-1}
export FUZZ_BUILD="$B"

if [ $# -eq 0 ]; then
  set --
  for h in tests/fuzz/fuzz_*.c tests/fuzz/fuzz_*.cc; do
    set -- "$@" "$(basename "$(basename "$h" .c)" .cc)"
  done
fi
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
  tests/fuzz/build.sh "$@" | grep -v '^  ' || true
  [ -x "$B/make-seeds" ] || { echo "fuzz: build failed" >&2; exit 1; }
fi
(cd tests/data && "$B/make-seeds" "$B/seeds") >/dev/null || {
  echo "fuzz: make-seeds failed" >&2; exit 1; }
mkdir -p "$B/artifacts" "$B/logs"

# Per-harness: seed directory and maximum input length.
seeds_of() {
  case "$1" in
    fuzz_matrix) echo matrix ;; fuzz_archive|fuzz_posterior) echo archive ;; fuzz_fst*|fuzz_tgraph) echo fst ;;
    fuzz_model) echo model ;; fuzz_specifier) echo specifier ;; *) echo options ;;
  esac
}
maxlen_of() {
  case "$1" in
    fuzz_matrix) echo 4096 ;; fuzz_archive|fuzz_posterior|fuzz_fst*|fuzz_gzip|fuzz_tgraph) echo 8192 ;;
    fuzz_model) echo 16384 ;; fuzz_specifier) echo 512 ;; *) echo 1024 ;;
  esac
}
# ASan: leaks are errors; the fuzzer's malloc limit catches huge allocations.
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
COMMON="-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1"

fail=0
# 1. Replay the saved reproducers (each must now run clean).
for h in "$@"; do
  d=tests/fuzz/regressions/$h
  [ -d "$d" ] || continue
  files=$(find "$d" -type f | sort)
  [ -n "$files" ] || continue
  n=$(echo "$files" | wc -l)
  if "$B/$h" $COMMON -close_fd_mask=3 $files >"$B/logs/$h.replay.log" 2>&1; then
    echo "fuzz: $h: $n regression input(s) OK"
  else
    echo "fuzz: $h: REGRESSION (see $B/logs/$h.replay.log)"; fail=1
  fi
done

# 2. Fuzz.
run_one() {
  h=$1
  mkdir -p "$B/corpus/$h"
  mask=0
  [ "$h" = fuzz_options ] && mask=3  # usage text goes to stdout/stderr
  "$B/$h" $COMMON -max_total_time="$SECS" -max_len="$(maxlen_of "$h")" \
    -close_fd_mask=$mask -artifact_prefix="$B/artifacts/$h-" \
    "$B/corpus/$h" "$B/seeds/$(seeds_of "$h")" >"$B/logs/$h.log" 2>&1
  rc=$?
  stats=$(grep -E '^stat::number_of_executed_units' "$B/logs/$h.log" | awk '{print $2}')
  cov=$(grep -oE 'cov: [0-9]+' "$B/logs/$h.log" | tail -1)
  if [ $rc -eq 0 ]; then
    echo "fuzz: $h: OK (${SECS}s, ${stats:-?} runs, $cov)"
  else
    art=$(grep -oE "Test unit written to [^ ]+" "$B/logs/$h.log" | tail -1 | sed 's/.* to //')
    echo "fuzz: $h: FAILED (rc $rc) - log $B/logs/$h.log, input ${art:-?}"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$B/logs/$h.log" | head -3
    return 1
  fi
}

running=0
pids=""
for h in "$@"; do
  run_one "$h" &
  pids="$pids $!"
  running=$((running + 1))
  if [ $running -ge "$JOBS" ]; then
    for p in $pids; do wait "$p" || fail=1; done
    pids=""
    running=0
  fi
done
for p in $pids; do wait "$p" || fail=1; done

if [ $fail -ne 0 ]; then
  echo "fuzz: FAILED. Reproduce: $B/<harness> <input>; save fixed inputs under tests/fuzz/regressions/<harness>/"
  exit 1
fi
echo "fuzz: all harnesses passed"
