#!/bin/bash
# docs/settings.md is what the settings table says (make settings-doc), and
# every environment variable a program reads is in that table: no getenv()
# outside base/sys/settings.c in the shipped code; test hooks reach the test
# builds of the programs only. Env: TOP, TOOLS, BIN, TEST_BIN.
set -u
: "${TOP:?}" "${TOOLS:?}" "${BIN:?}" "${TEST_BIN:?}"
[ -x "$TOOLS/settings-doc" ] || { echo "SKIP: settings-doc not built"; exit 77; }
fails=0
if ! diff <("$TOOLS/settings-doc") "$TOP/docs/settings.md" >/dev/null; then
  echo "FAIL: docs/settings.md is not what base/sys/settings.h says: run make settings-doc"
  fails=$((fails + 1))
fi
cd "$TOP" || exit 1
stray=$(grep -n 'getenv(' base/*/*.c base/*/*.cc device/*.c device/*.cu train-graphs/*.c train-graphs/*.cc \
  gpu-*/*.c gpu-*/*.cu api/*.c gmmbin-gpu/*.c 2>/dev/null | grep -v '^base/sys/settings.c:')
if [ -n "$stray" ]; then
  echo "FAIL: environment read outside the settings table:"; echo "$stray"
  fails=$((fails + 1))
fi
# The service's test hooks: the test build uses the service without a GPU,
# the shipped program ignores the hook (no service directory appears).
tmp=$(mktemp -d /tmp/settings-cli.XXXXXX)
trap 'pkill -f -- "--socket=$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$TOP/tests/data" || exit 1
run() {  # BINDIR NAME
  KALDI_GPU_SERVICE_DIR=$tmp/$2 KALDI_GPU_TEST_SERVICE_FORCE=1 KALDI_GPU_TEST_SERVICE_CPU=1 \
  KALDI_GPU_SERVICE_IDLE=1 "$1/gmm-acc-stats-ali" models/tri2/final.mdl ark:feats/lda.ark \
    ark:kaldi/tri2/ali.ark "$tmp/$2.acc" 2>"$tmp/$2.log"
}
run "$BIN" shipped || { echo "FAIL: shipped gmm-acc-stats-ali: $(tail -n 3 "$tmp/shipped.log")"; fails=$((fails + 1)); }
[ -e "$tmp/shipped" ] && { echo "FAIL: the shipped program read a test hook (service used)"; fails=$((fails + 1)); }
run "$TEST_BIN" test || { echo "FAIL: test build: $(tail -n 3 "$tmp/test.log")"; fails=$((fails + 1)); }
grep -q 'GPU service' "$tmp/test.log" || { echo "FAIL: the test build did not use the service: $(cat "$tmp/test.log")"; fails=$((fails + 1)); }
cmp -s "$tmp/shipped.acc" "$tmp/test.acc" || { echo "FAIL: statistics differ between the paths"; fails=$((fails + 1)); }
[ $fails -eq 0 ] && echo "settings-doc: docs/settings.md current, no stray getenv"
exit $((fails > 0))
