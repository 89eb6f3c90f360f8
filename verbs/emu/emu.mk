# verbs/emu/: the emulated RDMA device (libibverbs + librdmacm over TCP on loopback), for hosts
# without an RDMA device. docs/transports/verbs-emu.md.
#   liboobx-verbs-emu.so    LD_PRELOAD it under a program linked with -libverbs -lrdmacm
#   VERBS_EMU_OBJ           or link these objects into a test instead of the two libraries
#   make check-verbs-emu    the device's own tests
ifeq ($(HAVE_VERBS),1)
VERBS_EMU_SRC := $(filter-out verbs/emu/test_%.c verbs/emu/preload_%.c,$(wildcard verbs/emu/*.c))
VERBS_EMU_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(VERBS_EMU_SRC))
# a test device: built under tests/, never installed
VERBS_EMU_SO  := $(BUILD)/tests/verbs-emu/liboobx-verbs-emu.so
# no version script: an unversioned definition satisfies the versioned references
# (ibv_get_device_list@IBVERBS_1.1 ...) of objects linked with the real libraries
$(VERBS_EMU_SO): $(VERBS_EMU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,liboobx-verbs-emu.so -o $@ $(VERBS_EMU_OBJ) $(LDFLAGS)
ALL_TARGETS += $(VERBS_EMU_SO)

# the LD_PRELOAD check: linked with the real libraries, run with and without the emulation
VERBS_EMU_PRELOAD_CHECK := $(BUILD)/tests/verbs-emu/preload_check
$(VERBS_EMU_PRELOAD_CHECK): $(OBJDIR)/verbs/emu/preload_check.o
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LDFLAGS) $(shell $(PKG_CONFIG) --libs librdmacm libibverbs)
# the same as a module loaded with dlopen by a program that links neither library
VERBS_EMU_PRELOAD_DLOPEN := $(BUILD)/tests/verbs-emu/preload_dlopen
VERBS_EMU_PRELOAD_MOD := $(BUILD)/tests/verbs-emu/preload_check_mod.so
$(OBJDIR)/verbs/emu/preload_check_mod.o: verbs/emu/preload_check.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DPRELOAD_MODULE -MMD -MP -c $< -o $@
$(VERBS_EMU_PRELOAD_MOD): $(OBJDIR)/verbs/emu/preload_check_mod.o
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $< $(LDFLAGS) $(shell $(PKG_CONFIG) --libs librdmacm libibverbs)
$(VERBS_EMU_PRELOAD_DLOPEN): $(OBJDIR)/verbs/emu/preload_dlopen.o | $(VERBS_EMU_PRELOAD_MOD)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LDFLAGS) -ldl
ALL_TARGETS += $(VERBS_EMU_PRELOAD_CHECK) $(VERBS_EMU_PRELOAD_DLOPEN) $(VERBS_EMU_PRELOAD_MOD)

ifeq ($(HAVE_CMOCKA),1)
VERBS_EMU_TEST := $(BUILD)/tests/unit/test_verbs_emu
$(OBJDIR)/verbs/emu/test_emu.o: CPPFLAGS += $(shell $(PKG_CONFIG) --cflags cmocka 2>/dev/null)
# linked with the objects, not with -libverbs/-lrdmacm; runs the preload check too
$(VERBS_EMU_TEST): $(OBJDIR)/verbs/emu/test_emu.o $(VERBS_EMU_OBJ) | $(VERBS_EMU_SO) $(VERBS_EMU_PRELOAD_CHECK) $(VERBS_EMU_PRELOAD_DLOPEN)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(OBJDIR)/verbs/emu/test_emu.o $(VERBS_EMU_OBJ) $(LDFLAGS) $(TEST_CMOCKA)
ALL_TARGETS += $(VERBS_EMU_TEST)
check-verbs-emu: $(VERBS_EMU_TEST) $(VERBS_EMU_SO) $(VERBS_EMU_PRELOAD_CHECK) $(VERBS_EMU_PRELOAD_DLOPEN)
	timeout -k 5 300 $(VERBS_EMU_TEST)
.PHONY: check-verbs-emu
endif
else
$(info oobx: libibverbs/librdmacm headers not found (pkg-config); the emulated verbs device is not built)
endif
