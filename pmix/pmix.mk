# pmix/: the PMIx key-value store for oobx_comm_init_from_env, a module
# loaded on demand (liboobx-pmix.so; Debian: libpmix-dev), so that liboobx
# links no PMIx.
HAVE_PMIX := $(call have,pmix)
PMIX_SRC := $(wildcard pmix/*.c)
ifeq ($(HAVE_PMIX)$(if $(PMIX_SRC),1),11)
PMIX_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(PMIX_SRC))
PMIX_SO  := $(BLD_MOD)/liboobx-pmix.so
$(OBJDIR)/pmix/%.o: CPPFLAGS += $(shell $(PKG_CONFIG) --cflags pmix)
$(PMIX_SO): $(PMIX_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(MODULE_LDFLAGS) -o $@ $(PMIX_OBJ) $(shell $(PKG_CONFIG) --libs pmix)
ALL_TARGETS += $(PMIX_SO)
MODULE_SOS += $(PMIX_SO)
else
$(info oobx: PMIx not found (pkg-config pmix); liboobx-pmix.so is not built (mpirun and srun --mpi=pmix then need OOBX_COMM_ID))
endif
