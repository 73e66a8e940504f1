# Build: ./configure && make. Targets: all test test-gpu test-asan bench demo install clean.
# A fresh checkout needs no set-up step: the first make installs the Debian
# packages that are missing (tools/install-deps.sh) and runs ./configure.
.DEFAULT_GOAL := all
-include config.mk
config.mk:
	tools/install-deps.sh
	./configure

HAVE_CUDA ?= 0
SAN ?=
OPT ?= -O2
# -ffp-contract=off: no fused multiply-add, so the CPU path rounds exactly as written.
# -fPIC: the same objects make the static libraries and the shared one
# (no interposition: calls inside an object may be inlined as without
# -fPIC; docs/journal/python.md: no measurable cost on the CPU path).
PIC ?= -fPIC -fno-semantic-interposition
CFLAGS = -std=c11 -D_GNU_SOURCE -I. $(OPT) -g -Wall -Wextra -ffp-contract=off -pthread $(PIC) \
         -DKIO_HAVE_CUDA=$(HAVE_CUDA) $(SAN) $(EXTRA_CFLAGS)
CXXFLAGS = -std=c++17 -I. $(OPT) -g -Wall -Wextra -Wno-unused-parameter $(PIC) $(FST_CFLAGS) $(SAN)
NVCCFLAGS = -O3 -std=c++17 -I. $(CUDA_GENCODE) -DKIO_HAVE_CUDA=1 -Xcompiler -Wall,-fPIC --fmad=false \
            $(EXTRA_NVCCFLAGS)

# One static library per folder, linked top to bottom: a call from a lower
# folder to a higher one fails to link, so the dependencies stay one-way
# (docs/architecture.md draws them).
LAYERS := train api gpu-service fmllr gpu-acc gpu-align gpu-feats train-graphs device tree base/program \
          base/feat base/model base/matrix base/io base/sys
# The public library (include/kaldi-gpu-align.h): api/ and the layers below
# it that a client needs (not the service's own side), one shared object
# exporting only kga_* (api/kaldi-gpu-align.map).
SO_LAYERS := api gpu-acc gpu-align gpu-feats train-graphs device base/feat base/model \
             base/matrix base/io base/sys
layer_src = $(sort $(wildcard $(1)/*.c $(1)/*.cc) $(if $(filter 1,$(HAVE_CUDA)),$(wildcard $(1)/*.cu)))
layer_objs = $(call obj,$(call layer_src,$(1)))
lib_name = $(BUILD)/lib$(subst /,-,$(1)).a

BUILD ?= build$(if $(SAN),-san)
obj = $(patsubst %,$(BUILD)/%.o,$(1))

LIBS      := $(foreach l,$(LAYERS),$(call lib_name,$(l)))
SHLIB     := $(BUILD)/libkaldi-gpu-align.so
LDLIBS    := $(FST_LIBS) $(CUDA_LIBS) $(ZLIB_LIBS) -ldl -lpthread -lm

PROGS := $(patsubst %.c,%,$(sort $(wildcard gmmbin-gpu/*.c)))
# Check suites by kind: unit, Kaldi parity (against Kaldi's own outputs),
# GPU (device path against the CPU path); all built into $(BUILD)/tests/KIND/.
TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(sort $(wildcard tests/unit/check_*.c tests/parity/check_*.c tests/gpu/check_*.c)))
# C tools: the user's (tools/) and the developers' (dev/*/), all built into $(BUILD)/tools/.
TOOL_SRC := $(sort $(wildcard tools/*.c dev/*/*.c))
TOOLS := $(addprefix $(BUILD)/tools/,$(basename $(notdir $(TOOL_SRC))))
# gpu-hog: another process holding a GPU's memory (dev/device/memory-check.sh)
TOOLS += $(if $(filter 1,$(HAVE_CUDA)),$(BUILD)/tools/gpu-hog)

.SECONDARY:
.PHONY: all test test-gpu test-asan bench bench-acc demo install clean lint fuzz settings-doc emu
TEST_PROGS := $(patsubst gmmbin-gpu/%,$(BUILD)/test-bin/%,$(PROGS))
all: $(if $(SAN),$(patsubst gmmbin-gpu/%,$(BUILD)/gmmbin-gpu/%,$(PROGS)),$(PROGS)) $(TESTS) $(TOOLS) $(TEST_PROGS) \
     $(SHLIB)

$(BUILD)/%.c.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%.cc.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -MMD -MP -c $< -o $@
# config.mk: a new --cuda-arch rebuilds the device code.
$(BUILD)/%.cu.o: %.cu config.mk
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
# The feature cache's entries name the code that computed them: a hash of
# base/'s sources (every program of one build shares its entries).
FEAT_CODE_SRC = $(sort $(wildcard base/*/*.c base/*/*.h))
$(BUILD)/base/feat/feat-cache.c.o: $(FEAT_CODE_SRC)
$(BUILD)/base/feat/feat-cache.c.o: CFLAGS += -DKIO_FEAT_CODE_ID='"$(shell cat $(FEAT_CODE_SRC) | cksum | tr " " -)"'
# The device code this build carries, for kaldi-gpu-service --describe.
$(BUILD)/device/cuda-util.cu.o: NVCCFLAGS += -DKIO_CUDA_SASS='"$(CUDA_SASS)"' -DKIO_CUDA_PTX=$(CUDA_PTX)

define layer_rule
$(call lib_name,$(1)): $(call layer_objs,$(1))
	@rm -f $$@; $$(if $$^,ar rcs $$@ $$^,printf "!<arch>\n" > $$@)
endef
$(foreach l,$(LAYERS),$(eval $(call layer_rule,$(l))))

# (A sanitizer build leaves the sanitizer runtime to the program that
# loads the library: no --no-undefined there.)
$(SHLIB): $(foreach l,$(SO_LAYERS),$(call lib_name,$(l))) api/kaldi-gpu-align.map
	$(CXX) $(SAN) -shared -o $@ -Wl,-soname,libkaldi-gpu-align.so.1 \
	  -Wl,--version-script=api/kaldi-gpu-align.map $(if $(SAN),,-Wl,--no-undefined) \
	  -Wl,--whole-archive $(call lib_name,api) -Wl,--no-whole-archive \
	  $(foreach l,$(filter-out api,$(SO_LAYERS)),$(call lib_name,$(l))) $(LDLIBS)

# Programs are linked with the C++ driver because of the OpenFst bridge.
gmmbin-gpu/%: $(BUILD)/gmmbin-gpu/%.c.o $(LIBS)
	$(CXX) $(SAN) -o $@ $< $(LIBS) $(LDLIBS)
$(BUILD)/gmmbin-gpu/%: $(BUILD)/gmmbin-gpu/%.c.o $(LIBS)
	$(CXX) $(SAN) -o $@ $< $(LIBS) $(LDLIBS)
# Test builds link the test hooks' reader ahead of the libraries (its
# kio_test_hook replaces the shipped one, which always says "off").
TEST_HOOKS := $(BUILD)/tests/lib/test-hooks.c.o
$(BUILD)/tests/%: $(BUILD)/tests/%.c.o $(BUILD)/tests/lib/test-util.c.o $(TEST_HOOKS) $(LIBS)
	$(CXX) $(SAN) -o $@ $< $(TEST_EXTRA) $(BUILD)/tests/lib/test-util.c.o $(TEST_HOOKS) $(LIBS) $(LDLIBS) $(CHECK_LIBS)
# The aligner's device tests share their fixtures (tests/lib/align-fixture.c).
$(BUILD)/tests/gpu/check_gpu_align: $(BUILD)/tests/lib/align-fixture.c.o
$(BUILD)/tests/gpu/check_gpu_align: TEST_EXTRA = $(BUILD)/tests/lib/align-fixture.c.o
$(BUILD)/tests/gpu/check_gpu_rebind: $(BUILD)/tests/lib/align-fixture.c.o
$(BUILD)/tests/gpu/check_gpu_rebind: TEST_EXTRA = $(BUILD)/tests/lib/align-fixture.c.o
# The programs again with the test hooks on, for the command-line tests.
$(BUILD)/test-bin/%: $(BUILD)/gmmbin-gpu/%.c.o $(TEST_HOOKS) $(LIBS)
	@mkdir -p $(dir $@)
	$(CXX) $(SAN) -o $@ $< $(TEST_HOOKS) $(LIBS) $(LDLIBS)
$(BUILD)/tests/%.c.o: CFLAGS += $(CHECK_CFLAGS)
define tool_rule
$(BUILD)/tools/$(basename $(notdir $(1))): $(call obj,$(1)) $(LIBS)
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(SAN) -o $$@ $$< $$(LIBS) $$(LDLIBS)
endef
$(foreach t,$(TOOL_SRC),$(eval $(call tool_rule,$(t))))
$(BUILD)/tools/gpu-hog: dev/device/gpu-hog.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 $(CUDA_GENCODE) -o $@ $<

# The device code on tests/emu's host emulation of CUDA: the programs that
# hold device memory, built with the test hooks, for the allocation-failure
# tests (tests/cli/alloc-fail.sh: a failure at every point of a job). Needs
# the CUDA headers only (HAVE_CUDA=1); built by `make test`.
EMU_DIR := $(BUILD)/emu
# (the GPU service too: its device path, tests/cli/service-emu.sh; its
# trapping kernel is the emulator's stand-in)
EMU_PROGS := gmm-align-compiled gmm-acc-stats-ali gmm-align-acc-compiled gmm-train-gpu \
             kaldi-gpu-service
EMU_C := $(filter-out base/sys/test-hooks.c,$(sort $(wildcard base/*/*.c device/*.c gpu-feats/*.c \
           gpu-align/*.c gpu-acc/*.c api/*.c train-graphs/*.c train/*.c gpu-service/*.c))) \
         tests/lib/test-hooks.c
EMU_CU := $(sort $(wildcard gpu-feats/*.cu gpu-align/*.cu gpu-acc/*.cu))
EMU_CC := $(sort $(wildcard base/*/*.cc train-graphs/*.cc))
EMU_OBJS := $(patsubst %,$(EMU_DIR)/%.o,$(EMU_C) $(EMU_CU) $(EMU_CC) tests/emu/cuda-emu.cc)
EMU_CXXFLAGS = -std=c++17 -I. $(OPT) -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas \
               -ffp-contract=off -I$(CUDA_DIR)/include -DKIO_HAVE_CUDA=1 $(SAN)
EMU_BINS := $(if $(filter 1,$(HAVE_CUDA)),$(addprefix $(EMU_DIR)/bin/,$(EMU_PROGS)))
$(EMU_DIR)/%.c.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(EMU_DIR)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -x c++ -include tests/emu/cuda-emu.h -MMD -MP -c $< -o $@
$(EMU_DIR)/%.cc.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -MMD -MP -c $< -o $@
$(EMU_DIR)/libemu.a: $(EMU_OBJS)
	@rm -f $@; ar rcs $@ $^
$(EMU_DIR)/bin/%: $(EMU_DIR)/gmmbin-gpu/%.c.o $(EMU_DIR)/libemu.a
	@mkdir -p $(dir $@)
	$(CXX) $(SAN) -o $@ $< $(EMU_DIR)/libemu.a $(FST_LIBS) $(ZLIB_LIBS) -ldl -lpthread -lrt -lm
emu: $(EMU_BINS)

# Unit suites run from tests/data (paths as in the Kaldi fixture commands),
# then the command-line tests against Kaldi's logs and outputs.
test: all emu
	@tests/run-tests.sh $(BUILD) $(PROGS:gmmbin-gpu/%=%)

# GPU suites only; fails (instead of skipping) when no GPU is usable.
test-gpu: all
	@KIO_REQUIRE_GPU=1 tests/run-tests.sh --gpu $(BUILD)

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer. Its
# device code is for this machine's GPU only (nvcc -arch=native; nvcc's
# default sm_75 without one): the test build needs no other, and the fat
# build of every architecture would cost CI about 2 more minutes.
test-asan:
	$(MAKE) SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" OPT=-O1 \
	  CUDA_GENCODE=-arch=native CUDA_SASS=native CUDA_PTX=0 all
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  tests/run-tests.sh --san build-san

bench: all
	@dev/bench/bench.sh; a=$$?; echo; dev/bench/bench-graphs.sh; b=$$?; echo; \
	  dev/bench/est-bench.sh; c=$$?; echo; \
	  ACC_READ_COPIES=100 ACC_READ_PROGRAM=0 dev/bench/acc-read-bench.sh; d=$$?; echo; \
	  dev/bench/twofeats-bench.sh; e=$$?; \
	  exit $$((a | b | c | d | e))

# CPU gmm-acc-stats-ali vs Kaldi's (KALDI_BUNDLE or KALDI_ROOT), 1 and 2 jobs at once.
bench-acc: all
	@dev/bench/acc-bench.sh

demo: all
	@tools/demo.sh

# libFuzzer harnesses for the readers (clang); FUZZ_SECONDS per harness (60).
fuzz:
	@tests/fuzz/run.sh

# docs/settings.md from the settings table (base/sys/settings.h).
settings-doc: all
	$(BUILD)/tools/settings-doc > docs/settings.md

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --suppress=missingIncludeSystem -I. base device train-graphs gpu-feats gpu-align gpu-acc fmllr gpu-service api train tree gmmbin-gpu tools

PREFIX ?= /usr/local
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(SHLIB) $(DESTDIR)$(PREFIX)/lib/libkaldi-gpu-align.so.1
	ln -sf libkaldi-gpu-align.so.1 $(DESTDIR)$(PREFIX)/lib/libkaldi-gpu-align.so
	install -m 644 include/kaldi-gpu-align.h $(DESTDIR)$(PREFIX)/include

clean:
	rm -rf build build-san $(PROGS)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
