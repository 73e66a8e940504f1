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
CFLAGS = -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -ffp-contract=off -pthread \
         -DKIO_HAVE_CUDA=$(HAVE_CUDA) $(SAN) $(EXTRA_CFLAGS)
CXXFLAGS = -std=c++17 $(OPT) -g -Wall -Wextra -Wno-unused-parameter $(FST_CFLAGS) $(SAN)
NVCCFLAGS = -O3 -std=c++17 $(CUDA_GENCODE) -DKIO_HAVE_CUDA=1 -Xcompiler -Wall,-fPIC --fmad=false \
            $(EXTRA_NVCCFLAGS)

BASE_C   := $(sort $(wildcard base/*.c))
BASE_CXX := $(sort $(wildcard base/*.cc))
TGRAPH_C := $(sort $(wildcard train-graphs/*.c))
TGRAPH_CXX := $(sort $(wildcard train-graphs/*.cc))
FEATS_C  := $(sort $(wildcard gpu-feats/*.c))
ALIGN_C  := $(sort $(wildcard gpu-align/*.c))
ACC_C    := $(sort $(wildcard gpu-acc/*.c))
SVC_C    := $(sort $(wildcard gpu-service/*.c))
ifeq ($(HAVE_CUDA),1)
BASE_CU  := $(sort $(wildcard base/*.cu))
FEATS_CU := $(sort $(wildcard gpu-feats/*.cu))
ALIGN_CU := $(sort $(wildcard gpu-align/*.cu))
ACC_CU   := $(sort $(wildcard gpu-acc/*.cu))
endif

BUILD ?= build$(if $(SAN),-san)
obj = $(patsubst %,$(BUILD)/%.o,$(1))

BASE_LIB  := $(BUILD)/libkbase.a
TGRAPH_LIB := $(BUILD)/libtgraph.a
FEATS_LIB := $(BUILD)/libgfeat.a
ALIGN_LIB := $(BUILD)/libgalign.a
ACC_LIB   := $(BUILD)/libgacc.a
SVC_LIB   := $(BUILD)/libgsvc.a
LIBS      := $(SVC_LIB) $(ACC_LIB) $(ALIGN_LIB) $(FEATS_LIB) $(TGRAPH_LIB) $(BASE_LIB)
LDLIBS    := $(FST_LIBS) $(CUDA_LIBS) $(ZLIB_LIBS) -ldl -lpthread -lm

PROGS := $(patsubst %.c,%,$(sort $(wildcard gmmbin-gpu/*.c)))
TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(sort $(wildcard tests/check_*.c)))
TOOLS := $(patsubst tools/%.c,$(BUILD)/tools/%,$(sort $(wildcard tools/*.c)))

.SECONDARY:
.PHONY: all test test-gpu test-asan bench bench-acc demo install clean lint fuzz
all: $(if $(SAN),$(patsubst gmmbin-gpu/%,$(BUILD)/gmmbin-gpu/%,$(PROGS)),$(PROGS)) $(TESTS) $(TOOLS)

$(BUILD)/%.c.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%.cc.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BASE_LIB): $(call obj,$(BASE_C) $(BASE_CXX) $(BASE_CU))
	@rm -f $@; $(if $^,ar rcs $@ $^,printf "!<arch>\n" > $@)
$(TGRAPH_LIB): $(call obj,$(TGRAPH_C) $(TGRAPH_CXX))
	@rm -f $@; $(if $^,ar rcs $@ $^,printf "!<arch>\n" > $@)
$(FEATS_LIB): $(call obj,$(FEATS_C) $(FEATS_CU))
	@rm -f $@; $(if $^,ar rcs $@ $^,printf "!<arch>\n" > $@)
$(ALIGN_LIB): $(call obj,$(ALIGN_C) $(ALIGN_CU))
	@rm -f $@; $(if $^,ar rcs $@ $^,printf "!<arch>\n" > $@)
$(ACC_LIB): $(call obj,$(ACC_C) $(ACC_CU))
	@rm -f $@; $(if $^,ar rcs $@ $^,printf "!<arch>\n" > $@)
$(SVC_LIB): $(call obj,$(SVC_C))
	@rm -f $@; $(if $^,ar rcs $@ $^,printf "!<arch>\n" > $@)

# Programs are linked with the C++ driver because of the OpenFst bridge.
gmmbin-gpu/%: $(BUILD)/gmmbin-gpu/%.c.o $(LIBS)
	$(CXX) $(SAN) -o $@ $< $(LIBS) $(LDLIBS)
$(BUILD)/gmmbin-gpu/%: $(BUILD)/gmmbin-gpu/%.c.o $(LIBS)
	$(CXX) $(SAN) -o $@ $< $(LIBS) $(LDLIBS)
$(BUILD)/tests/%: $(BUILD)/tests/%.c.o $(BUILD)/tests/test-util.c.o $(LIBS)
	$(CXX) $(SAN) -o $@ $< $(BUILD)/tests/test-util.c.o $(LIBS) $(LDLIBS) $(CHECK_LIBS)
$(BUILD)/tests/%.c.o: CFLAGS += $(CHECK_CFLAGS)
$(BUILD)/tools/%: $(BUILD)/tools/%.c.o $(LIBS)
	$(CXX) $(SAN) -o $@ $< $(LIBS) $(LDLIBS)

# Unit suites run from tests/data (paths as in the Kaldi fixture commands),
# then the command-line tests against Kaldi's logs and outputs.
test: all
	@tests/run-tests.sh $(BUILD) $(PROGS:gmmbin-gpu/%=%)

# GPU suites only; fails (instead of skipping) when no GPU is usable.
test-gpu: all
	@KIO_REQUIRE_GPU=1 tests/run-tests.sh --gpu $(BUILD)

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan:
	$(MAKE) SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" OPT=-O1 all
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  tests/run-tests.sh --san build-san

bench: all
	@tools/bench.sh; a=$$?; echo; tools/bench-graphs.sh; b=$$?; exit $$((a | b))

# CPU gmm-acc-stats-ali vs Kaldi's (KALDI_BUNDLE or KALDI_ROOT), 1 and 2 jobs at once.
bench-acc: all
	@tools/acc-bench.sh

demo: all
	@tools/demo.sh

# libFuzzer harnesses for the readers (clang); FUZZ_SECONDS per harness (60).
fuzz:
	@tests/fuzz/run.sh

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --suppress=missingIncludeSystem -I base base train-graphs gpu-feats gpu-align gpu-acc gpu-service gmmbin-gpu tools

PREFIX ?= /usr/local
install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin

clean:
	rm -rf build build-san $(PROGS)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
