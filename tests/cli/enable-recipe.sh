#!/bin/bash
# tools/enable-recipe.sh and tools/check-recipe.sh on a stock-style recipe
# directory: a Kaldi tree whose tools/config/common_path.sh puts its
# src/bin and src/gmmbin (fake programs of the same names) first, and a
# recipe whose path.sh sources it, as Kaldi's egs/*/s5/path.sh do. Checked:
# a PATH exported before the recipe loses to Kaldi's (the trap the tools
# exist for) and the check says so; enabling makes a steps-style script run
# ours (its log's first LOG line names us and our version); enabling twice
# changes nothing; undo restores path.sh byte for byte (also one without a
# final newline); a linked path.sh is refused; KALDI_ONLY=true; path.sh's
# own CUDA_VISIBLE_DEVICES / KALDI_GPU_BLAS_PROFILE reach the check; a failing
# path.sh is reported. Then every program's first LOG line.
# Env: BIN = dir of our programs, TOP = repo root. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
for p in gmm-align-compiled kaldi-gpu-service; do
  [ -x "$BIN/$p" ] || { echo "SKIP: $BIN/$p not built"; exit 77; }
done
enable=$TOP/tools/enable-recipe.sh check=$TOP/tools/check-recipe.sh
tmp=$(mktemp -d /tmp/enable-recipe-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
version=$(sed -n 's/^#define KIO_PLUGIN_VERSION "\(.*\)"$/\1/p' "$TOP/base/sys/version.h")
[ -n "$version" ] || { echo "FAIL: no KIO_PLUGIN_VERSION in base/sys/version.h"; exit 1; }
id="kaldi-gpu-align $version"
replaced="gmm-align-compiled align-equal-compiled gmm-acc-stats-ali compile-train-graphs gmm-align align-equal gmm-est gmm-sum-accs gmm-acc-mllt ali-to-post ali-to-phones weight-silence-post gmm-acc-stats-twofeats acc-tree-stats sum-tree-stats build-tree cluster-phones gmm-est-fmllr"
# Our service directory and its sockets stay in the test's directory.
export KALDI_GPU_SERVICE_DIR=$tmp/svc
mkdir -m 700 "$tmp/svc"

# A stock-style Kaldi tree: fake programs that say whose they are.
K=$tmp/kaldi
mkdir -p "$K/tools/config" "$K/src/bin" "$K/src/gmmbin" "$K/egs/wsj/s5/steps"
for p in $replaced; do
  d=$K/src/gmmbin; case $p in align-equal*|compile-train-graphs|ali-to-post|ali-to-phones|weight-silence-post|*-tree-stats|build-tree|cluster-phones) d=$K/src/bin ;; esac
  printf '#!/bin/sh\necho "fake Kaldi %s" >&2\nexit 0\n' "$p" >"$d/$p"
  chmod +x "$d/$p"
done
cat >"$K/tools/config/common_path.sh" <<'EOF'
[ -z "$KALDI_ROOT" ] && echo >&2 "The variable KALDI_ROOT must be already defined" && exit 1
export PATH=\
${KALDI_ROOT}/src/bin:\
${KALDI_ROOT}/src/gmmbin:\
$PATH
EOF
R=$K/egs/wsj/s5
cat >"$R/path.sh" <<'EOF'
export KALDI_ROOT=`pwd`/../../..
[ -f $KALDI_ROOT/tools/env.sh ] && . $KALDI_ROOT/tools/env.sh
export PATH=$PWD/utils/:$KALDI_ROOT/tools/openfst/bin:$PWD:$PATH
[ ! -f $KALDI_ROOT/tools/config/common_path.sh ] && echo >&2 "The standard file $KALDI_ROOT/tools/config/common_path.sh is not present -> Exit!" && exit 1
. $KALDI_ROOT/tools/config/common_path.sh
export LC_ALL=C
EOF
cp "$R/path.sh" "$tmp/orig.path.sh"
# A steps-style script: sources path.sh, runs gmm-align-compiled on the
# fixtures, its log as run.pl would keep it.
cat >"$R/steps/align.sh" <<EOF
#!/bin/bash
. ./path.sh
cd "$TOP/tests/data" || exit 1
gmm-align-compiled --use-gpu=no --beam=10 --retry-beam=40 models/mono/final.mdl \\
  "ark:gunzip -c edge/mono.fsts.gz|" ark:edge/feats.ark ark:/dev/null
EOF
chmod +x "$R/steps/align.sh"

check_out() {  # NAME EXPECTED_RC [ENV...]: runs the check in R into $tmp/NAME.out
  local name=$1 want=$2; shift 2
  (cd "$R" && env "$@" "$check") >"$tmp/$name.out" 2>&1
  local rc=$?
  [ "$rc" = "$want" ] || { fail "$name: check-recipe exit $rc, expected $want"; sed 's/^/    /' "$tmp/$name.out"; }
}
count() { grep -c "$1" "$2"; }

# 1. Stock: Kaldi's programs, NOT ENABLED; and the README's old advice
#    (export PATH=ours:$PATH before the recipe) does not survive path.sh.
check_out stock 1
nrep=$(echo $replaced | wc -w)
[ "$(count "KALDI'S" "$tmp/stock.out")" = "$nrep" ] || fail "stock: expected $nrep programs reported as Kaldi's"
grep -q '^NOT ENABLED' "$tmp/stock.out" || fail "stock: no NOT ENABLED verdict"
check_out exported 1 PATH="$BIN:$PATH"
grep -q "^gmm-align-compiled .*KALDI'S.*$K/egs/wsj/s5/../../../src/gmmbin/gmm-align-compiled (hides $BIN/gmm-align-compiled)" \
  "$tmp/exported.out" || fail "exported PATH: check does not show Kaldi's program hiding ours"
(cd "$R" && PATH="$BIN:$PATH" steps/align.sh) >"$tmp/exported.log" 2>&1
grep -q '^fake Kaldi gmm-align-compiled$' "$tmp/exported.log" || fail "exported PATH: the steps script did not run Kaldi's (the trap is gone?)"

# 2. Enable: ours, ENABLED, the steps script runs ours, whose log says so.
"$enable" --bin "$BIN" "$R" >"$tmp/enable.out" 2>&1 || { fail "enable-recipe failed"; cat "$tmp/enable.out"; }
cp "$R/path.sh" "$tmp/enabled.path.sh"
check_out enabled 0
# the replaced programs, gmm-align-acc-compiled and the service
[ "$(count "ours ($id)" "$tmp/enabled.out")" = $((nrep + 2)) ] ||
  fail "enabled: expected $((nrep + 2)) programs reported as ours ($id)"
grep -q '^ENABLED' "$tmp/enabled.out" || fail "enabled: no ENABLED verdict"
for k in "program: $id (kaldi-gpu-service)" "CUDA_VISIBLE_DEVICES: " "service directory: $tmp/svc" \
         "service socket: $tmp/svc/gpu-" "rounding profile: " "gpus\?[ :]"; do
  grep -q "^  $k" "$tmp/enabled.out" || fail "enabled: no '$k' line from the service's description"
done
(cd "$R" && steps/align.sh) >"$tmp/ours.log" 2>&1
first=$(grep -m1 '^LOG' "$tmp/ours.log")
case "$first" in
  "LOG (gmm-align-compiled["*"]:kio_log_ours():"*") $id (GPU plugin program, not Kaldi's own gmm-align-compiled)") ;;
  *) fail "enabled: the steps script's first LOG line is not ours: $first"; sed 's/^/    /' "$tmp/ours.log" | head -5 ;;
esac
grep -q '^fake Kaldi' "$tmp/ours.log" && fail "enabled: Kaldi's program still ran"
# the steps scripts' greps of logs must not catch our line
echo "$first" | grep -q -E -w 'Overall|WARNING|ERROR|no stats|transform-feats' &&
  fail "our first LOG line matches a steps script's grep: $first"

# 3. Idempotent; KALDI_ONLY=true leaves ours out.
"$enable" --bin "$BIN" "$R" >"$tmp/enable2.out" 2>&1 || fail "enable-recipe (second time) failed"
cmp -s "$R/path.sh" "$tmp/enabled.path.sh" || { fail "enabling twice changed path.sh"; diff "$tmp/enabled.path.sh" "$R/path.sh"; }
grep -q unchanged "$tmp/enable2.out" || fail "enabling twice: no 'unchanged' message"
check_out kaldi_only 1 KALDI_ONLY=true
grep -q '^NOT ENABLED' "$tmp/kaldi_only.out" || fail "KALDI_ONLY=true: our programs still first"

# 4. path.sh's own environment reaches the check.
printf 'export CUDA_VISIBLE_DEVICES=3\nexport KALDI_GPU_BLAS_PROFILE=hsw\n' >"$R/env.sh"
sed -i 's|^export LC_ALL=C$|&\n. ./env.sh|' "$R/path.sh"
check_out env 0
grep -q '^  CUDA_VISIBLE_DEVICES: 3$' "$tmp/env.out" || fail "path.sh's CUDA_VISIBLE_DEVICES not shown"
grep -q '^  rounding profile: hsw ' "$tmp/env.out" || fail "path.sh's KALDI_GPU_BLAS_PROFILE not shown"
cp "$tmp/enabled.path.sh" "$R/path.sh"

# 5. Undo: the original bytes; again: nothing to do.
"$enable" --undo "$R" >"$tmp/undo.out" 2>&1 || fail "enable-recipe --undo failed"
cmp -s "$R/path.sh" "$tmp/orig.path.sh" || { fail "undo did not restore path.sh"; diff "$tmp/orig.path.sh" "$R/path.sh"; }
check_out undone 1
grep -q '^NOT ENABLED' "$tmp/undone.out" || fail "after undo: not reported as Kaldi's"
"$enable" --undo "$R" >"$tmp/undo2.out" 2>&1 || fail "second undo failed"
cmp -s "$R/path.sh" "$tmp/orig.path.sh" || fail "second undo changed path.sh"

# 6. A path.sh without a final newline: enabled, then restored exactly.
mkdir -p "$tmp/r2"
printf 'export KALDI_ROOT=%s\n. $KALDI_ROOT/tools/config/common_path.sh' "$K" >"$tmp/r2/path.sh"
cp "$tmp/r2/path.sh" "$tmp/r2.orig"
"$enable" --bin "$BIN" "$tmp/r2" >/dev/null 2>&1 || fail "enable (no final newline) failed"
(cd "$tmp/r2" && "$check") >"$tmp/r2.out" 2>&1 || { fail "no final newline: not enabled"; cat "$tmp/r2.out"; }
"$enable" --undo "$tmp/r2" >/dev/null 2>&1
cmp -s "$tmp/r2/path.sh" "$tmp/r2.orig" || fail "no final newline: undo did not restore the bytes"

# 7. Refusals: a linked path.sh (shared with other recipes), no path.sh,
#    a bin directory without our programs; a failing path.sh.
mkdir -p "$tmp/r3" "$tmp/empty"
ln -s "$tmp/orig.path.sh" "$tmp/r3/path.sh"
"$enable" --bin "$BIN" "$tmp/r3" >"$tmp/r3.out" 2>&1 && fail "a linked path.sh was not refused"
cmp -s "$tmp/orig.path.sh" "$R/path.sh" || fail "the link's target changed"
"$enable" --bin "$BIN" "$tmp/empty" >/dev/null 2>&1 && fail "a directory without path.sh was not refused"
"$enable" --bin "$tmp/empty" "$R" >/dev/null 2>&1 && fail "a --bin without our programs was not refused"
cmp -s "$R/path.sh" "$tmp/orig.path.sh" || fail "a refused enable changed path.sh"
"$enable" >/dev/null 2>&1; [ $? = 2 ] || fail "enable-recipe without a directory: exit not 2"
printf 'export KALDI_ROOT=%s/nowhere\n[ ! -f $KALDI_ROOT/tools/config/common_path.sh ] && echo >&2 "The standard file is not present -> Exit!" && exit 1\n' \
  "$tmp" >"$tmp/empty/path.sh"
(cd "$tmp/empty" && "$check") >"$tmp/bad.out" 2>&1 && fail "a failing path.sh was reported as fine"
grep -q 'sourcing path.sh failed' "$tmp/bad.out" && grep -q 'not present -> Exit!' "$tmp/bad.out" ||
  { fail "a failing path.sh: no reason shown"; cat "$tmp/bad.out"; }

# 8. Every program's first LOG line names us (inputs missing: it starts,
#    then fails on its input as Kaldi's would).
cd "$tmp" || exit 1
x=$tmp/none
for spec in "align-equal-compiled 3" "align-equal 6" "compile-train-graphs 5" "gmm-acc-stats-ali 4" \
            "gmm-align-acc-compiled 5" "gmm-align-compiled 4" "gmm-align 6"; do
  set -- $spec
  args=(); for ((i = 0; i < $2; i++)); do args+=("$x.$i"); done
  "$BIN/$1" "${args[@]}" >"$tmp/$1.log" 2>&1
  first=$(grep -m1 '^LOG' "$tmp/$1.log")
  case "$first" in
    "LOG ($1["*"]:kio_log_ours():"*") $id (GPU plugin program, not Kaldi's own $1)") ;;
    *) fail "$1: first LOG line: ${first:-none}"; head -3 "$tmp/$1.log" | sed 's/^/    /' ;;
  esac
  # usage errors and --help print no such line (as Kaldi's print none)
  "$BIN/$1" >"$tmp/$1.usage" 2>&1
  "$BIN/$1" --help >>"$tmp/$1.usage" 2>&1
  grep -q kio_log_ours "$tmp/$1.usage" && fail "$1: our LOG line with the usage text"
done

[ $fails -eq 0 ] && echo "enable-recipe / check-recipe: all checks passed"
[ $fails -eq 0 ]
