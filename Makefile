# thaw — build, test, run.  `make help` lists the targets.
#
# Layout: every .c under common/ criu/ store/ remote/ function/ restore/ prewarm/
# server/ goes into libthaw.a, except files named *_main.c, which are programs.
# Each test/test_*.c is a test program, each test/*.sh an end-to-end test script, each
# test/fuzz/fuzz_*.c a libFuzzer target.  Adding a file needs no edit here.
#
# Each object depends on the headers it includes (-MMD -MP: the compiler
# writes its .d file beside it) and on $(B)/.cflags, which changes when the
# compiler or its flags do (git's GIT-CFLAGS habit): `make DEVELOPER=1`,
# O=1 or EXTRA_CFLAGS=... rebuild what they change.

CC       ?= gcc
CLANG    ?= clang
SANITIZE ?=
comma    := ,
STATIC   ?=
O        ?= 2
DEVELOPER ?=

PKGS     := liburing libzstd jansson libmicrohttpd libcrypto
CFLAGS   := -std=gnu11 -O$(O) -g -Wall -Wextra -Wno-unused-parameter -Wshadow \
            -Wformat=2 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -I. -pthread \
            $(EXTRA_CFLAGS)
# DEVELOPER=1: a warning is an error (the tree builds without any).
ifneq ($(DEVELOPER),)
  CFLAGS += -Werror
endif
DEPFLAGS := -MMD -MP
# libcurl: thaw-bench's load generator and the S3 client of the remote tier (remote/s3.c).
CURL_LIBS  := $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)
LDLIBS_DYN := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -luring -lzstd -ljansson -lmicrohttpd -lcrypto) $(CURL_LIBS) -ldl -lm

ifneq ($(SANITIZE),)
  CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -O1
  LDFLAGS += -fsanitize=$(SANITIZE)
  B := build/san-$(subst $(comma),-,$(SANITIZE))
else ifneq ($(STATIC),)
  B := build/static
else
  B := build
endif
ifneq ($(STATIC),)
  # The GPU machine has none of these libraries: link them in; glibc stays
  # dynamic (the GPU host's is newer).  libmicrohttpd.a would drag in GnuTLS
  # and its chain (p11-kit has no .a): this thawd serves plain HTTP only (it
  # refuses --tls-cert), so the stand-ins in common/static_notls.c take
  # GnuTLS's place (-u pulls them in).
  # libcurl (the S3 client, tests, benches) stays shared:
  # gpu-pack puts it and its libraries in lib/ beside test/ and bench/, found
  # through this RPATH (DT_RPATH, so that libcurl's own libraries are too).
  CFLAGS += -DTHAW_STATIC
  LDFLAGS += -Wl,--disable-new-dtags,-rpath,'$$ORIGIN/../lib'
  LDLIBS := -Wl,-u,thaw_static_notls -Wl,-Bstatic -luring -lzstd -ljansson -lmicrohttpd \
            -lcrypto -Wl,-Bdynamic $(CURL_LIBS) -ldl -lm -lpthread -latomic
else
  LDLIBS := $(LDLIBS_DYN)
endif

LIB_DIRS  := common criu store remote function images restore prewarm server
LIB_SRCS  := $(filter-out %_main.c,$(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)))
LIB_OBJS  := $(LIB_SRCS:%.c=$(B)/obj/%.o)
LIB       := $(B)/libthaw.a

CLI_SRCS  := $(wildcard cli/*.c)
# libthaw-cuda.so's C sources (interpose/; built at the end of this file).
INTERPOSE_C := $(wildcard interpose/*.c)
PROGS     := $(B)/thaw $(if $(wildcard server/thawd_main.c),$(B)/thawd)
# A bench is one file, bench/NAME.c, or a directory of them with a main.c,
# bench/NAME/*.c; either way the program is $(B)/bench/NAME.
BENCH_SRCS:= $(wildcard bench/*.c)
BENCH_DIRS:= $(patsubst bench/%/main.c,%,$(wildcard bench/*/main.c))
BENCHES   := $(BENCH_SRCS:bench/%.c=$(B)/bench/%) $(BENCH_DIRS:%=$(B)/bench/%)
TEST_SRCS := $(wildcard test/test_*.c)
# Not TESTS: that is run-tests.sh's filter, passed through from the environment.
TEST_PROGS:= $(TEST_SRCS:test/%.c=$(B)/test/%)
FUZZ_SRCS := $(wildcard test/fuzz/fuzz_*.c)
FUZZERS   := $(FUZZ_SRCS:test/fuzz/%.c=build/fuzz/%)

.PHONY: all deps test run clean lint lint-changed lint-deep fuzz bench gpu-pack help
# Keep objects make would otherwise treat as intermediate and delete.
.SECONDARY:
all: $(PROGS) $(TEST_PROGS) $(BENCHES)

help:
	@echo "targets:"
	@echo "make, make all  build thaw, thawd, tests and benchmarks into $(B)/"
	@echo "make deps       install what is missing (apt packages, CRIU 4.2 prefix in .deps/)"
	@echo "make test       deps + build (DEVELOPER=1) + make lint + run every test"
	@echo "                (ends with 'N passed, N failed, N skipped');"
	@echo "                TESTS='word ...' make test runs only the tests whose name contains a word;"
	@echo "                tests run side by side (JOBS=N; JOBS=1 one at a time)"
	@echo "make run        deps + build + start thawd on ./data (or thaw doctor before thawd exists)"
	@echo "make bench      build the benchmarks only ($(B)/bench/)"
	@echo "make fuzz       build the libFuzzer targets (clang, build/fuzz/)"
	@echo "make lint       the include rule (scripts/check-includes.sh), clang-tidy, cppcheck"
	@echo "                (again: only the sources changed since; make -j: side by side)"
	@echo "make lint-changed  lint only the sources a change touches (git); TESTS=word make test runs it"
	@echo "make lint-deep  make lint with clang-tidy's analyzer deeper (100000 nodes a function,"
	@echo "                not 15000: ~2.5x the CPU), before landing a change to intricate code"
	@echo "make gpu-pack   pack .gpu/ for the GPU machine (scripts/gpu-pack.sh)"
	@echo "make clean      remove build/ (every build directory under it)"
	@echo "make help       this list"
	@echo "variables:"
	@echo "DEVELOPER=1     warnings are errors (-Werror)"
	@echo "SANITIZE=address,undefined | SANITIZE=thread   sanitizers (build/san-*/)"
	@echo "STATIC=1        static build for the GPU machine (build/static/)"
	@echo "O=1             optimisation level (default 2);  EXTRA_CFLAGS=...  more flags"

# The compiler and its flags in a file, rewritten only when they change.  At
# parse time, so that `make -n` and `make -q` see the objects that are up to
# date as up to date (a FORCE rule would make them all look stale).
CFLAGS_NOW := $(strip $(CC) $(CFLAGS))
ifneq ($(CFLAGS_NOW),$(shell cat $(B)/.cflags 2>/dev/null))
  $(shell mkdir -p $(B) && echo '$(CFLAGS_NOW)' >$(B)/.cflags)
endif

$(B)/obj/%.o: %.c $(B)/.cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(B)/thaw: $(CLI_SRCS:%.c=$(B)/obj/%.o) $(LIB)
	$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS)

$(B)/thawd: $(B)/obj/server/thawd_main.o $(LIB)
	$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS)

$(B)/test/%: $(B)/obj/test/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS) $(CURL_LIBS)

$(B)/bench/%: $(B)/obj/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS) $(if $(STATIC),,$(CURL_LIBS))

# bench/NAME/*.c -> $(B)/bench/NAME (an explicit rule: it wins over the one above).
define BENCH_DIR_RULE
$(B)/bench/$(1): $(patsubst %.c,$(B)/obj/%.o,$(wildcard bench/$(1)/*.c)) $(LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -pthread -o $$@ $$^ $$(LDLIBS) $$(if $$(STATIC),,$$(CURL_LIBS))
endef
$(foreach d,$(BENCH_DIRS),$(eval $(call BENCH_DIR_RULE,$(d))))
-include $(wildcard $(B)/obj/bench/*/*.d)

# libFuzzer targets: the library is rebuilt with clang and the fuzzer's
# sanitizers, in its own object directory, with the same flags whatever
# SANITIZE, STATIC, O or DEVELOPER say (build/fuzz/ is shared by them all:
# switching must not make its objects stale, nor mix two sanitizers).
FUZZ_CFLAGS := $(filter-out -Wshadow -Wformat=2 -Werror -DTHAW_STATIC -O% -fsanitize=% \
                 -fno-omit-frame-pointer,$(CFLAGS)) -O1 -fsanitize=fuzzer-no-link,address,undefined
FUZZ_CFLAGS_NOW := $(strip $(CLANG) $(FUZZ_CFLAGS))
ifneq ($(FUZZ_CFLAGS_NOW),$(shell cat build/fuzz/.cflags 2>/dev/null))
  $(shell mkdir -p build/fuzz && echo '$(FUZZ_CFLAGS_NOW)' >build/fuzz/.cflags)
endif
build/fuzz/obj/%.o: %.c build/fuzz/.cflags
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) $(DEPFLAGS) -c -o $@ $<
# The fuzzers parse what reaches thaw from outside (chunks, CRIU images,
# manifests, packs, request paths): they need only the modules below, linked
# from an archive so that each takes just the objects it calls.  Compiling
# the whole library with two sanitizers cost make test minutes of CPU for
# objects no fuzzer links; a fuzzer of another module adds its directory.
FUZZ_LIB_SRCS := $(filter-out %_main.c,$(wildcard common/*.c criu/*.c store/*.c)) \
                 server/route.c $(wildcard function/spec*.c)
# (It depends on the Makefile too: a source added to the list is an object
# .SECONDARY would otherwise let make skip while the archive is newer.)
build/fuzz/libthaw-fuzz.a: $(FUZZ_LIB_SRCS:%.c=build/fuzz/obj/%.o) Makefile
	@rm -f $@
	$(AR) rcs $@ $(filter %.o,$^)
build/fuzz/%: build/fuzz/obj/test/fuzz/%.o build/fuzz/libthaw-fuzz.a
	$(CLANG) -fsanitize=fuzzer,address,undefined -pthread -o $@ $^ $(LDLIBS_DYN)
fuzz: $(FUZZERS)
bench: $(BENCHES)

deps:
	@scripts/deps.sh

# The plain build is a developer's: warnings fail it, and lint runs as a job
# of run-tests.sh ("lint": its log $(B)/test-logs/lint.log) beside the tests
# that share the machine, failing make test if it fails (CI runs exactly
# this).  TESTS=word lints only what a change touches (lint-changed).
# Sanitizer builds keep their own flags, and lint no part of them.
NPROC := $(shell nproc 2>/dev/null || echo 1)
# The lint job's command, for run-tests.sh to run.  A variable of its own:
# a recipe line that names $(MAKE) itself runs even under `make -n`, and
# this one runs the tests.
LINT_CMD = $(if $(SANITIZE),,$(MAKE) --no-print-directory -j$(NPROC) DEVELOPER=1 B=$(B) $(if $(TESTS),lint-changed,lint))
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) $(if $(SANITIZE),,DEVELOPER=1) all fuzz
	@B=$(B) LINT='$(LINT_CMD)' scripts/run-tests.sh

run: deps
	@$(MAKE) --no-print-directory all
	@B=$(B) scripts/run.sh

gpu-pack:
	@scripts/gpu-pack.sh

# make lint: the include rule on the whole tree, clang-tidy on each source
# of the library, the command and libthaw-cuda.so (interpose/, with the
# flags it is built with), cppcheck on those, bench/ and test/.  A
# source's clang-tidy leaves a stamp, $(B)/lint/FILE.ok, that depends on its
# object (rebuilt when the source, a header it includes or the flags change):
# a second make lint checks only what changed since, and make -j checks
# sources side by side.  make lint-changed: clang-tidy and cppcheck on the
# sources a change in the work tree touches (scripts/changed-sources.sh).
ifeq ($(LINT_SCOPE),changed)
  LINT_CHANGED  := $(shell scripts/changed-sources.sh)
  TIDY_SRCS     := $(filter $(LIB_SRCS) $(CLI_SRCS) $(INTERPOSE_C),$(LINT_CHANGED))
  CPPCHECK_ARGS := $(LINT_CHANGED)
else
  TIDY_SRCS     := $(LIB_SRCS) $(CLI_SRCS) $(INTERPOSE_C)
  CPPCHECK_ARGS := $(LIB_DIRS) interpose cli bench test
endif
# clang-tidy's checks: its defaults less what .clang-tidy turns off; any
# warning fails lint (.clang-tidy's WarningsAsErrors).
# TIDY_NODES: how far the static analyzer explores each function (its
# exploded graph's nodes), nearly all of lint's CPU: most of it goes to
# functions that use the budget up and find nothing more.  CPU of a
# from-scratch make -j2 lint (time's user + sys, cppcheck's ~30 s included)
# on the 2-core development machine, shared with others' builds:
#   225000 (the default)  ~535 s
#   100000                 250-289 s (make lint-deep)
#    50000                 192 s
#    25000                 133-153 s
#    15000                 107 s (make lint, so make test)
# Every real defect the analyzer has found is found at 15000, and at 10000:
# 01d8f13's criu_image.c:746 (memcpy from NULL), and, re-run on the parents
# of the commits that fixed them, b3fe2cd's engine.c:296 and tier_root.c:187
# and 4e5de89's spec_mounts.c:117.  Of 01d8f13's 20 warnings at 100000,
# 15000 reports 15: the 5 it misses (remote_fetch.c:483, mapped.c:619, 621
# and 680, shim.c:152) were false positives.  Deeper budgets find more paths
# to the same kinds of fault: make lint-deep (100000, stamps of its own in
# $(B)/lint-deep/) is there before landing a change to intricate code.
TIDY_NODES := 15000
LINT_DIR := lint
lint: $(TIDY_SRCS:%.c=$(B)/$(LINT_DIR)/%.ok)
	scripts/check-includes.sh
	$(if $(CPPCHECK_ARGS),cppcheck --quiet --error-exitcode=1 --enable=warning$(comma)portability \
	  --inline-suppr -I. -D_GNU_SOURCE $(CPPCHECK_ARGS))
lint-changed:
	@$(MAKE) --no-print-directory LINT_SCOPE=changed lint
lint-deep:
	@$(MAKE) --no-print-directory TIDY_NODES=100000 LINT_DIR=lint-deep lint
$(B)/$(LINT_DIR)/%.ok: $(B)/obj/%.o .clang-tidy
	@mkdir -p $(dir $@)
	clang-tidy --quiet $*.c -- $(filter-out -Werror,$(CFLAGS)) \
	  -Xclang -analyzer-config -Xclang max-nodes=$(TIDY_NODES)
	@touch $@
# interpose/'s objects are position-independent ones, built with flags of
# their own (below): its stamps depend on those, and its checks use them.
$(B)/$(LINT_DIR)/interpose/%.ok: $(B)/obj/pic/interpose/%.c.o .clang-tidy
	@mkdir -p $(dir $@)
	clang-tidy --quiet interpose/$*.c -- $(filter-out -Werror,$(INTERPOSE_CFLAGS)) \
	  -Xclang -analyzer-config -Xclang max-nodes=$(TIDY_NODES)
	@touch $@

# No format target.  The C is laid out by hand in the kernel's style (tabs,
# K&R braces, 100 columns: README.md, "Layout"); Debian 12's clang-format 14
# would rewrite 220 of its 278 C files (8,448 changed lines), so a `make
# format` either rewrites the tree under everyone's open changes or, left
# unchecked by lint, formats nothing the tree follows.

clean:
	rm -rf build

# The headers each object was built with (none yet on a fresh tree).
-include $(wildcard $(B)/obj/*/*.d build/fuzz/obj/*/*.d build/fuzz/obj/test/fuzz/*.d)

# libthaw-cuda.so: preloaded into GPU functions (interpose/, docs/DESIGN.md
# "GPU memory").  It links nothing of thaw's and no CUDA header: position-
# independent, hidden by default, only the driver's names exported.
INTERPOSE_SRCS := $(wildcard interpose/*.c interpose/*.S)
INTERPOSE_OBJS := $(patsubst %,$(B)/obj/pic/%.o,$(INTERPOSE_SRCS))
INTERPOSE_CFLAGS = $(filter-out -fsanitize=% -DTHAW_STATIC,$(CFLAGS)) -fPIC -fvisibility=hidden
$(B)/obj/pic/%.c.o: %.c $(B)/.cflags
	@mkdir -p $(dir $@)
	$(CC) $(INTERPOSE_CFLAGS) $(DEPFLAGS) -c -o $@ $<
$(B)/obj/pic/%.S.o: %.S $(B)/.cflags
	@mkdir -p $(dir $@)
	$(CC) -I. -fPIC $(DEPFLAGS) -c -o $@ $<
$(B)/libthaw-cuda.so: $(INTERPOSE_OBJS)
	$(CC) -shared -fPIC -Wl,-z,defs -Wl,-z,now -o $@ $^ -ldl -lpthread
all: $(B)/libthaw-cuda.so
-include $(wildcard $(B)/obj/pic/interpose/*.d)
