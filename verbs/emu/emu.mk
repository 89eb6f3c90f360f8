# verbs/emu/: the emulated RDMA device (libibverbs + librdmacm over TCP on loopback), for hosts
# without an RDMA device. docs/transports/verbs-emu.md.
#   liboobx-verbs-emu.so    LD_PRELOAD it under a program linked with -libverbs -lrdmacm
#   VERBS_EMU_OBJ           or link these objects into a test instead of the two libraries
# Its tests are in tests/ (tests/unit/test_verbs_emu.c, tests/verbs-emu/; make check-verbs-emu).
ifeq ($(HAVE_VERBS),1)
VERBS_EMU_SRC := $(wildcard verbs/emu/*.c)
VERBS_EMU_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(VERBS_EMU_SRC))
# the libibverbs/librdmacm entry points are the device's interface: exported
# (the build hides everything by default; emu.h hides the internals)
$(VERBS_EMU_OBJ): CFLAGS += -fvisibility=default
# a test device: built under tests/, never installed
VERBS_EMU_SO  := $(BUILD)/tests/verbs-emu/liboobx-verbs-emu.so
# no version script: an unversioned definition satisfies the versioned references
# (ibv_get_device_list@IBVERBS_1.1 ...) of objects linked with the real libraries
$(VERBS_EMU_SO): $(VERBS_EMU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,liboobx-verbs-emu.so -o $@ $(VERBS_EMU_OBJ) $(LDFLAGS)
ALL_TARGETS += $(VERBS_EMU_SO)
else
$(info oobx: libibverbs/librdmacm headers not found (pkg-config); the emulated verbs device is not built)
endif
