# verbs/: the raw verbs transport (librdmacm + libibverbs), a module loaded on demand (liboobx-verbs.so),
# and verbs/emu/: a software RDMA device for hosts without one (tests).
-include verbs/emu/emu.mk
VERBS_SRC := $(filter-out verbs/test_%.c,$(wildcard verbs/*.c))
ifeq ($(HAVE_VERBS)$(if $(VERBS_SRC),1),11)
VERBS_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(VERBS_SRC))
VERBS_SO  := $(BLD_MOD)/liboobx-verbs.so
$(VERBS_SO): $(VERBS_OBJ) $(MODULE_CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(MODULE_LDFLAGS) -o $@ $(VERBS_OBJ) $(MODULE_CORE_OBJ) -lrdmacm -libverbs
ALL_TARGETS += $(VERBS_SO)
MODULE_SOS += $(VERBS_SO)
# the transport's own unit test: linked with the emulated device's objects
# instead of libibverbs/librdmacm, so it always runs on the emulation
VERBS_TEST := $(BUILD)/tests/unit/test_verbs_tp
$(OBJDIR)/verbs/test_verbs_tp.o: CPPFLAGS += -Itests -Iverbs $(shell $(PKG_CONFIG) --cflags cmocka 2>/dev/null)
$(VERBS_TEST): $(OBJDIR)/verbs/test_verbs_tp.o $(VERBS_OBJ) $(VERBS_EMU_OBJ) $(LIBOOBX_INT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(OBJDIR)/verbs/test_verbs_tp.o $(VERBS_OBJ) $(VERBS_EMU_OBJ) $(LIBOOBX_INT_A) $(LDFLAGS) $(LIB_LIBS) $(TEST_CMOCKA)
.SECONDARY: $(OBJDIR)/verbs/test_verbs_tp.o
ifeq ($(HAVE_CMOCKA)$(if $(VERBS_EMU_OBJ),1),11)
ALL_TARGETS += $(VERBS_TEST)
endif
else
$(info oobx: libibverbs/librdmacm not found (pkg-config) or verbs/ empty; the verbs transport is not built)
endif
