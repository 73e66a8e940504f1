#!/bin/sh
# Builds tests/gpu/check_gpu_align against a host emulation of CUDA (cuda-emu.*)
# and runs it: exercises the CUDA path's logic (batching, packing, offsets,
# kernels, regrowth, results) on a machine without a GPU. Not part of
# `make test`. Usage: tests/emu/run.sh [BUILD_DIR] (default build-emu);
# EMU_SUITES="align rebind acc jobsum feats featalign" (default: all six).
set -e
cd "$(dirname "$0")/../.."
# The fixtures' rounding, as tests/run-tests.sh sets it (the suites choose
# other profiles themselves where they test them).
export KALDI_GPU_BLAS_PROFILE=skx
# The host layers below the device code (base/ and device/), C and C++ files.
# Test builds: the test hooks' reader instead of the shipped stub.
HOST_C="$(find base device -name '*.c' ! -name test-hooks.c | sort) tests/lib/test-hooks.c"
HOST_CC=$(find base device -name '*.cc' | sort)
B=${1:-build-emu}
mkdir -p "$B"
CF="-std=c11 -D_GNU_SOURCE -I. -O2 -g -Wall -Wextra -ffp-contract=off -pthread -DKIO_HAVE_CUDA=1"
XF="-std=c++17 -I. -O2 -g -Wall -Wextra -ffp-contract=off -I/usr/local/cuda/include -DKIO_HAVE_CUDA=1"
# Self-test of the emulator's barriers/atomics first (cuda-emu.cc's main).
g++ $XF -DGALIGN_EMU_SELFTEST tests/emu/cuda-emu.cc -o "$B/cuda-emu-selftest"
"$B/cuda-emu-selftest"
# shared by both suites: the emulator and the OpenFst bridge
g++ $XF -c tests/emu/cuda-emu.cc -o "$B/cuda-emu.o"
for f in $HOST_CC; do
  g++ -std=c++17 -I. -O2 -g -c "$f" -o "$B/$(echo "$f" | tr / _).o"
done
suites=${EMU_SUITES:-align rebind acc jobsum feats featalign}  # which suites to build and run
case " $suites " in *" align "*|*" rebind "*|*" featalign "*)
objs=""
for f in $HOST_C gpu-feats/*.c gpu-align/*.c; do
  o="$B/$(echo "$f" | tr / _).o"
  gcc $CF -c "$f" -o "$o"; objs="$objs $o"
done
for f in $HOST_CC; do
  objs="$objs $B/$(echo "$f" | tr / _).o"
done
for f in gpu-feats/*.cu gpu-align/*.cu; do
  o="$B/$(echo "$f" | tr / _).o"
  g++ $XF -Wno-unused-parameter -x c++ -include tests/emu/cuda-emu.h -c "$f" -o "$o"; objs="$objs $o"
done
EMU_LIBS="-lfst -lcheck_pic -lsubunit -lz -lrt -lm -lpthread -ldl"
;; esac
case " $suites " in *" align "*)
for f in tests/lib/test-util.c tests/lib/align-fixture.c tests/gpu/check_gpu_align.c; do
  gcc $CF -c "$f" -o "$B/$(echo "$f" | tr / _).o"
done
g++ -o "$B/check_gpu_align" $objs "$B/tests_lib_test-util.c.o" "$B/tests_lib_align-fixture.c.o" \
  "$B/tests_gpu_check_gpu_align.c.o" \
  "$B/cuda-emu.o" $EMU_LIBS
(cd tests/data && CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-10} "../../$B/check_gpu_align")
;; esac

# The GPU service's pooled aligner rebound to other models and options
# (tests/gpu/check_gpu_rebind), both backends.
case " $suites " in *" rebind "*)
for f in tests/lib/test-util.c tests/lib/align-fixture.c tests/gpu/check_gpu_rebind.c; do
  gcc $CF -c "$f" -o "$B/$(echo "$f" | tr / _).o"
done
g++ -o "$B/check_gpu_rebind" $objs "$B/tests_lib_test-util.c.o" "$B/tests_lib_align-fixture.c.o" \
  "$B/tests_gpu_check_gpu_rebind.c.o" "$B/cuda-emu.o" $EMU_LIBS
(cd tests/data && CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-10} "../../$B/check_gpu_rebind")
;; esac

# gmm-align-compiled on the emulated device with the feature chain on the
# device (KALDI_GPU_FEATS_GPU=1) against the CPU chain: tests/cli/gpu-feats.sh.
case " $suites " in *" featalign "*)
mkdir -p "$B/bin" "$B/tools"
# the program works through the public library (api/, which also holds the
# accumulator's side)
pobjs=""
for f in api/*.c gpu-acc/*.c; do
  o="$B/prog_$(echo "$f" | tr / _).o"
  gcc $CF -c "$f" -o "$o"; pobjs="$pobjs $o"
done
for f in gpu-acc/*.cu; do
  o="$B/prog_$(echo "$f" | tr / _).o"
  g++ $XF -Wno-unused-parameter -x c++ -include tests/emu/cuda-emu.h -c "$f" -o "$o"; pobjs="$pobjs $o"
done
gcc $CF -c gmmbin-gpu/gmm-align-compiled.c -o "$B/gmm-align-compiled.o"
g++ -o "$B/bin/gmm-align-compiled" "$B/gmm-align-compiled.o" $pobjs $objs "$B/cuda-emu.o" $EMU_LIBS
gcc $CF -c dev/oracles/gfeat-testdata.c -o "$B/gfeat-testdata.o"
g++ -o "$B/tools/gfeat-testdata" "$B/gfeat-testdata.o" $objs "$B/cuda-emu.o" $EMU_LIBS
GFEAT_EMU=1 BIN="$B/bin" TOOLS="$B/tools" TOP="$PWD" bash tests/cli/gpu-feats.sh
;; esac


# The same for the statistics accumulator: tests/gpu/check_gpu_acc against the
# emulated device (bit-identity of GPU and CPU statistics).
case " $suites " in *" acc "*)
aobjs=""
for f in $HOST_C gpu-feats/*.c gpu-align/*.c gpu-acc/*.c tests/lib/test-util.c tests/gpu/check_gpu_acc.c; do
  o="$B/acc_$(echo "$f" | tr / _).o"
  gcc $CF -c "$f" -o "$o"; aobjs="$aobjs $o"
done
for f in $HOST_CC; do
  aobjs="$aobjs $B/$(echo "$f" | tr / _).o"
done
for f in gpu-feats/*.cu gpu-align/*.cu gpu-acc/*.cu; do
  o="$B/acc_$(echo "$f" | tr / _).o"
  g++ $XF -Wno-unused-parameter -x c++ -include tests/emu/cuda-emu.h -c "$f" -o "$o"; aobjs="$aobjs $o"
done
g++ -o "$B/check_gpu_acc" $aobjs "$B/cuda-emu.o" -lfst -lcheck_pic -lsubunit -lz -lrt -lm -lpthread -ldl
(cd tests/data && CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-10} "../../$B/check_gpu_acc")
;; esac

# The jobs' statistics summed on the device (tests/gpu/check_gpu_jobsum)
# against the host's sum (train/sum-accs.c): the same bits.
case " $suites " in *" jobsum "*)
jobjs=""
for f in $HOST_C gpu-feats/*.c gpu-align/*.c gpu-acc/*.c train/sum-accs.c train/est.c \
         tests/lib/test-util.c tests/gpu/check_gpu_jobsum.c; do
  o="$B/acc_$(echo "$f" | tr / _).o"
  gcc $CF -c "$f" -o "$o"; jobjs="$jobjs $o"
done
for f in $HOST_CC; do
  jobjs="$jobjs $B/$(echo "$f" | tr / _).o"
done
for f in gpu-feats/*.cu gpu-align/*.cu gpu-acc/*.cu; do
  o="$B/acc_$(echo "$f" | tr / _).o"
  g++ $XF -Wno-unused-parameter -x c++ -include tests/emu/cuda-emu.h -c "$f" -o "$o"; jobjs="$jobjs $o"
done
g++ -o "$B/check_gpu_jobsum" $jobjs "$B/cuda-emu.o" -lfst -lcheck_pic -lsubunit -lz -lrt -lm -lpthread -ldl
(cd tests/data && CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-10} "../../$B/check_gpu_jobsum")
;; esac


# The device feature chain: tests/gpu/check_gpu_feats (device features byte for
# byte against the CPU in-process chain and Kaldi's archives).
case " $suites " in *" feats "*)
fobjs=""
for f in $HOST_C gpu-feats/*.c tests/lib/test-util.c tests/gpu/check_gpu_feats.c; do
  o="$B/feats_$(echo "$f" | tr / _).o"
  gcc $CF -c "$f" -o "$o"; fobjs="$fobjs $o"
done
for f in $HOST_CC; do
  fobjs="$fobjs $B/$(echo "$f" | tr / _).o"
done
for f in gpu-feats/*.cu; do
  o="$B/feats_$(echo "$f" | tr / _).o"
  g++ $XF -Wno-unused-parameter -x c++ -include tests/emu/cuda-emu.h -c "$f" -o "$o"; fobjs="$fobjs $o"
done
g++ -o "$B/check_gpu_feats" $fobjs "$B/cuda-emu.o" -lfst -lcheck_pic -lsubunit -lz -lrt -lm -lpthread -ldl
(cd tests/data && CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-10} "../../$B/check_gpu_feats")
;; esac
