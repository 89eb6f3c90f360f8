# verbs/: the raw verbs transport (librdmacm + libibverbs), a module loaded on demand (liboobx-verbs.so),
# and verbs/emu/: a software RDMA device for hosts without one (tests).
-include verbs/emu/emu.mk
VERBS_SRC := $(filter-out verbs/test_%.c,$(wildcard verbs/*.c))
ifeq ($(HAVE_VERBS)$(if $(VERBS_SRC),1),11)
VERBS_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(VERBS_SRC))
VERBS_SO  := $(BLD_MOD)/liboobx-verbs.so
$(VERBS_SO): $(VERBS_OBJ) $(MODULE_CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(MODULE_LDFLAGS) -o $@ $(VERBS_OBJ) $(MODULE_CORE_OBJ) -lrdmacm -libverbs $(SODIUM_LIBS)
ALL_TARGETS += $(VERBS_SO)
MODULE_SOS += $(VERBS_SO)
# its own unit test is tests/unit/test_verbs_tp.c (rules in tests/tests.mk)
else
$(info oobx: libibverbs/librdmacm not found (pkg-config) or verbs/ empty; the verbs transport is not built)
endif
