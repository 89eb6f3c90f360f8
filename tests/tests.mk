# tests/: unit tests (cmocka), the conformance and fault suites, fuzz targets.
#   make check          every suite, the conformance suite once per transport variant
#   make check-san      the same at reduced size (OOBX_TEST_SCALE=small), for SAN=address|undefined
#   make test-long      bigger runs (256 ranks, 1 GiB p2p, 1000 init/destroy cycles)
#   make fuzz           libFuzzer targets (clang), each for FUZZ_TIME seconds
# The last line of check is "tests: N passed, N failed, N skipped".

TEST_BUILD   := $(BUILD)/tests
TEST_CPPFLAGS := -Itests $(shell $(PKG_CONFIG) --cflags cmocka 2>/dev/null)
TEST_CMOCKA  := $(shell $(PKG_CONFIG) --libs cmocka 2>/dev/null || echo -lcmocka)

# unit tests: linked with the static library so that internals are reachable
TEST_UNIT_SRC := $(wildcard tests/unit/test_*.c)
ifeq ($(UCX_OBJ),)
TEST_UNIT_SRC := $(filter-out tests/unit/test_ucx_%,$(TEST_UNIT_SRC))
endif
# the emulated RDMA device's tests (test_verbs_emu) need its objects, the verbs
# transport's (test_verbs_tp) the transport's objects as well
ifeq ($(VERBS_EMU_OBJ),)
TEST_UNIT_SRC := $(filter-out tests/unit/test_verbs_%,$(TEST_UNIT_SRC))
endif
ifeq ($(VERBS_OBJ),)
TEST_UNIT_SRC := $(filter-out tests/unit/test_verbs_tp.c,$(TEST_UNIT_SRC))
endif
TEST_UNIT_BIN := $(patsubst tests/unit/%.c,$(TEST_BUILD)/unit/%,$(TEST_UNIT_SRC))

# the transport contract: one program for every transport (OOBX_TEST_TP=socket|ucx|verbs)
# that gets the ops as the core does (oobx__tp_lookup), so ucx and verbs are
# tested as the module files of the build tree
TEST_CONTRACT_BIN := $(TEST_BUILD)/contract/test_tp_contract

# multi-rank suites: linked with the shared library, so transport modules load
TEST_SUITE_BIN := $(patsubst tests/%.c,$(TEST_BUILD)/%,$(wildcard tests/conformance/conformance.c tests/fault/fault.c))
TEST_HARNESS_OBJ := $(OBJDIR)/tests/harness.o
TEST_SUITE_LDFLAGS = $(LDFLAGS) -L$(BLD_LIB) -Wl,-rpath,'$$ORIGIN/../../lib' -loobx

# wire parsers: the same targets as regression programs over tests/fuzz/corpus
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REGRESS_BIN := $(patsubst %,$(TEST_BUILD)/fuzz/regress_%,$(FUZZ_TARGETS))
# the transports' wire parsers are pure (no UCX or verbs headers): every fuzz
# program, mkseeds and the libFuzzer build link them, whether or not the
# transport itself is built
FUZZ_WIRE_SRC := $(wildcard verbs/verbs_wire.c ucx/ucx_wire.c)
FUZZ_WIRE_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(FUZZ_WIRE_SRC))
FUZZ_WIRE_CPPFLAGS := -Iverbs -Iucx
$(OBJDIR)/tests/fuzz/%.o: CPPFLAGS += $(FUZZ_WIRE_CPPFLAGS)

$(OBJDIR)/tests/%.o: CPPFLAGS += $(TEST_CPPFLAGS)
# objects shared by several programs are kept (not intermediate), so that
# parallel builds never remove one that another link still needs
FUZZ_REGRESS_OBJ := $(OBJDIR)/tests/fuzz/regress.o $(patsubst %,$(OBJDIR)/tests/fuzz/fuzz_%.o,$(FUZZ_TARGETS))
.SECONDARY: $(FUZZ_REGRESS_OBJ) $(FUZZ_WIRE_OBJ) $(OBJDIR)/tests/harness.o

ifeq ($(HAVE_CMOCKA),1)
ALL_TARGETS += $(TEST_UNIT_BIN) $(TEST_SUITE_BIN) $(TEST_CONTRACT_BIN)
endif
ALL_TARGETS += $(FUZZ_REGRESS_BIN)

TEST_UNIT_UCX_BIN  := $(filter $(TEST_BUILD)/unit/test_ucx_%,$(TEST_UNIT_BIN))
TEST_UNIT_VERBS_BIN := $(filter $(TEST_BUILD)/unit/test_verbs_%,$(TEST_UNIT_BIN))
TEST_UNIT_CORE_BIN := $(filter-out $(TEST_UNIT_UCX_BIN) $(TEST_UNIT_VERBS_BIN),$(TEST_UNIT_BIN))
$(TEST_UNIT_CORE_BIN): $(TEST_BUILD)/unit/%: $(OBJDIR)/tests/unit/%.o $(LIBOOBX_INT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIBOOBX_INT_A) $(LDFLAGS) $(LIB_LIBS) $(TEST_CMOCKA)
# the UCX transport's own unit tests also link its objects
$(OBJDIR)/tests/unit/test_ucx_%.o: CPPFLAGS += -Iucx $(shell $(PKG_CONFIG) --cflags ucx 2>/dev/null)
$(TEST_UNIT_UCX_BIN): $(TEST_BUILD)/unit/%: $(OBJDIR)/tests/unit/%.o $(UCX_OBJ) $(LIBOOBX_INT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(UCX_OBJ) $(LIBOOBX_INT_A) $(LDFLAGS) $(LIB_LIBS) $(shell $(PKG_CONFIG) --libs ucx 2>/dev/null) $(TEST_CMOCKA)

# the verbs transport's own test: linked with the emulated device's objects
# instead of libibverbs/librdmacm, so it always runs on the emulation
$(OBJDIR)/tests/unit/test_verbs_%.o: CPPFLAGS += -Iverbs -Iverbs/emu
$(TEST_BUILD)/unit/test_verbs_tp: $(OBJDIR)/tests/unit/test_verbs_tp.o $(VERBS_OBJ) $(VERBS_EMU_OBJ) $(LIBOOBX_INT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(VERBS_OBJ) $(VERBS_EMU_OBJ) $(LIBOOBX_INT_A) $(LDFLAGS) $(LIB_LIBS) $(TEST_CMOCKA)

$(TEST_CONTRACT_BIN): $(OBJDIR)/tests/contract/test_tp_contract.o $(LIBOOBX_INT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIBOOBX_INT_A) $(LDFLAGS) $(LIB_LIBS) $(TEST_CMOCKA)

$(TEST_BUILD)/conformance/conformance: $(OBJDIR)/tests/conformance/conformance.o $(TEST_HARNESS_OBJ) $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(filter %.o,$^) $(TEST_SUITE_LDFLAGS) $(TEST_CMOCKA)

$(TEST_BUILD)/fault/fault: $(OBJDIR)/tests/fault/fault.o $(TEST_HARNESS_OBJ) $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(filter %.o,$^) $(TEST_SUITE_LDFLAGS) $(TEST_CMOCKA)

# ---- the emulated RDMA device's tests (the device itself: verbs/emu/emu.mk) ----------
#   make check-verbs-emu    test_verbs_emu, which also runs the LD_PRELOAD checks
ifneq ($(VERBS_EMU_OBJ),)
# the LD_PRELOAD check: linked with the real libraries, run with and without the emulation
VERBS_EMU_PRELOAD_CHECK := $(TEST_BUILD)/verbs-emu/preload_check
$(VERBS_EMU_PRELOAD_CHECK): $(OBJDIR)/tests/verbs-emu/preload_check.o
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LDFLAGS) $(shell $(PKG_CONFIG) --libs librdmacm libibverbs)
# the same as a module loaded with dlopen by a program that links neither library
VERBS_EMU_PRELOAD_DLOPEN := $(TEST_BUILD)/verbs-emu/preload_dlopen
VERBS_EMU_PRELOAD_MOD := $(TEST_BUILD)/verbs-emu/preload_check_mod.so
$(OBJDIR)/tests/verbs-emu/preload_check_mod.o: tests/verbs-emu/preload_check.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fvisibility=default -DPRELOAD_MODULE -MMD -MP -c $< -o $@
$(VERBS_EMU_PRELOAD_MOD): $(OBJDIR)/tests/verbs-emu/preload_check_mod.o
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $< $(LDFLAGS) $(shell $(PKG_CONFIG) --libs librdmacm libibverbs)
$(VERBS_EMU_PRELOAD_DLOPEN): $(OBJDIR)/tests/verbs-emu/preload_dlopen.o | $(VERBS_EMU_PRELOAD_MOD)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LDFLAGS) -ldl
ALL_TARGETS += $(VERBS_EMU_PRELOAD_CHECK) $(VERBS_EMU_PRELOAD_DLOPEN) $(VERBS_EMU_PRELOAD_MOD)

# the device's own test: linked with its objects, not with -libverbs/-lrdmacm;
# runs the preload checks too (it finds them in ../verbs-emu/)
VERBS_EMU_TEST := $(TEST_BUILD)/unit/test_verbs_emu
$(VERBS_EMU_TEST): $(OBJDIR)/tests/unit/test_verbs_emu.o $(VERBS_EMU_OBJ) | $(VERBS_EMU_SO) $(VERBS_EMU_PRELOAD_CHECK) $(VERBS_EMU_PRELOAD_DLOPEN)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(VERBS_EMU_OBJ) $(LDFLAGS) $(TEST_CMOCKA)
ifeq ($(HAVE_CMOCKA),1)
check-verbs-emu: $(VERBS_EMU_TEST) $(VERBS_EMU_SO) $(VERBS_EMU_PRELOAD_CHECK) $(VERBS_EMU_PRELOAD_DLOPEN)
	timeout -k 5 300 $(VERBS_EMU_TEST)
.PHONY: check-verbs-emu
endif
endif

$(TEST_BUILD)/fuzz/regress_%: $(OBJDIR)/tests/fuzz/fuzz_%.o $(OBJDIR)/tests/fuzz/regress.o $(FUZZ_WIRE_OBJ) $(LIBOOBX_INT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(OBJDIR)/tests/fuzz/fuzz_$*.o $(OBJDIR)/tests/fuzz/regress.o $(FUZZ_WIRE_OBJ) $(LIBOOBX_INT_A) $(LDFLAGS) $(LIB_LIBS)

# seeds for the corpus (make fuzz-seeds rewrites tests/fuzz/corpus/*/seed-*)
$(TEST_BUILD)/fuzz/mkseeds: $(OBJDIR)/tests/fuzz/mkseeds.o $(FUZZ_WIRE_OBJ) $(LIBOOBX_INT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(FUZZ_WIRE_OBJ) $(LIBOOBX_INT_A) $(LDFLAGS) $(LIB_LIBS)
fuzz-seeds: $(TEST_BUILD)/fuzz/mkseeds
	$(TEST_BUILD)/fuzz/mkseeds tests/fuzz/corpus

TEST_RUN = bash tests/run-tests.sh $(BUILD)

ifeq ($(HAVE_CMOCKA),1)
check: $(ALL_TARGETS)
	@$(TEST_RUN) check
check-san: $(ALL_TARGETS)
	@$(TEST_RUN) check-san
test-long: $(ALL_TARGETS)
	@$(TEST_RUN) long
else
check check-san test-long:
	@echo "oobx: cmocka not found (pkg-config cmocka): install libcmocka-dev to run the tests" >&2
	@echo "tests: 0 passed, 1 failed, 0 skipped"
	@false
endif

# ---- libFuzzer (clang) ----------------------------------------------------------
FUZZ_CC   ?= clang
FUZZ_TIME ?= 20
FUZZ_BUILD := build-fuzz
FUZZ_CFLAGS := -std=c11 -O1 -g -fno-omit-frame-pointer -pthread -fsanitize=fuzzer-no-link,address,undefined
FUZZ_CORE_OBJ := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(CORE_SRC) $(TOPO_SRC) $(FUZZ_WIRE_SRC)) \
                 $(FUZZ_BUILD)/obj/moddir.o
FUZZ_BIN := $(patsubst %,$(FUZZ_BUILD)/fuzz_%,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(TEST_CPPFLAGS) $(FUZZ_WIRE_CPPFLAGS) $(FUZZ_CFLAGS) -c $< -o $@
# the fuzz targets load no module: the build tree's directory will do
$(FUZZ_BUILD)/obj/moddir.o: src/moddir.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) -DOOBX_MODULE_DIR_BUILTIN='"$(abspath $(BLD_MOD))"' $(FUZZ_CFLAGS) -c $< -o $@
$(FUZZ_BUILD)/liboobx-fuzz.a: $(FUZZ_CORE_OBJ)
	rm -f $@ && ar rcs $@ $^
$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/liboobx-fuzz.a
	$(FUZZ_CC) -fsanitize=fuzzer,address,undefined -pthread -o $@ $^ $(LIB_LIBS)

fuzz-build: $(FUZZ_BIN)
fuzz: $(FUZZ_BIN)
	@bash tests/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_TIME) $(FUZZ_TARGETS)

.PHONY: check-san test-long fuzz fuzz-build fuzz-seeds
