#!/bin/sh
# Builds the libFuzzer harnesses of tests/fuzz/ against the base/ library,
# instrumented with ASan + UBSan (+ libFuzzer coverage), into build-fuzz/
# (override with FUZZ_BUILD). Needs clang/clang++ >= 11 with libclang_rt.fuzzer.
# Usage: tests/fuzz/build.sh [harness...]   (default: all tests/fuzz/fuzz_*.c/.cc)
set -eu
cd "$(dirname "$0")/../.."
B=${FUZZ_BUILD:-build-fuzz}
CC=${FUZZ_CC:-clang}
CXX=${FUZZ_CXX:-clang++}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
COMMON="-O1 -g $SAN -DKIO_HAVE_CUDA=0 -pthread -I."
CFLAGS="-std=c11 -D_GNU_SOURCE -ffp-contract=off -Wall -Wextra $COMMON"
CXXFLAGS="-std=c++17 -Wall -Wextra -Wno-unused-parameter $COMMON"
FST_LIBS=$(sed -n 's/^FST_LIBS *= *//p' config.mk 2>/dev/null || true)
: "${FST_LIBS:=-lfst}"

mkdir -p "$B/obj"
objs=""
# Library objects: every base/, device/ and train-graphs/ .c and .cc (no CUDA: the nocuda
# stubs), and gpu-acc's Posterior holder (fuzz_posterior).
for src in $(find base device -name '*.c' -o -name '*.cc' | sort) train-graphs/*.c train-graphs/*.cc \
           gpu-acc/mllt-post.c; do
  o="$B/obj/$(echo "$src" | tr / _).o"
  objs="$objs $o"
  [ -f "$o" ] && [ "$o" -nt "$src" ] && [ -z "$(find base device train-graphs gpu-acc -name '*.h' -newer "$o")" ] && continue
  case "$src" in
    *.cc) echo "  CXX $src"; $CXX $CXXFLAGS -fsanitize=fuzzer-no-link -c "$src" -o "$o" ;;
    *)    echo "  CC  $src"; $CC $CFLAGS -fsanitize=fuzzer-no-link -c "$src" -o "$o" ;;
  esac
done
rm -f "$B/libkbase-fuzz.a"
ar rcs "$B/libkbase-fuzz.a" $objs

LIBS="$B/libkbase-fuzz.a $FST_LIBS -lz -ldl -lpthread -lm"

# The seed-corpus generator is an ordinary program: it links libFuzzer's
# runtime without its main (the library objects carry coverage callbacks).
NOMAIN="$($CC --print-runtime-dir)/libclang_rt.fuzzer_no_main-$(uname -m).a"
echo "  LD  $B/make-seeds"
$CC $CFLAGS -c tests/fuzz/make-seeds.c -o "$B/obj/make-seeds.o"
$CXX $SAN -o "$B/make-seeds" "$B/obj/make-seeds.o" $LIBS "$NOMAIN"

if [ $# -eq 0 ]; then set -- tests/fuzz/fuzz_*.c tests/fuzz/fuzz_*.cc; fi
for h in "$@"; do
  name=$(basename "$(basename "$h" .c)" .cc)
  echo "  LD  $B/$name"
  if [ -f "tests/fuzz/$name.cc" ]; then
    $CXX $CXXFLAGS -fsanitize=fuzzer -c "tests/fuzz/$name.cc" -o "$B/obj/$name.o"
  else
    $CC $CFLAGS -fsanitize=fuzzer -c "tests/fuzz/$name.c" -o "$B/obj/$name.o"
  fi
  $CXX $SAN -fsanitize=fuzzer -o "$B/$name" "$B/obj/$name.o" $LIBS
done
