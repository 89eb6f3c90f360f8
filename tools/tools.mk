# tools/: oobx-run (local launcher; needs no library), oobx-info (version,
# transports, interface choice, settings), oobx-demo (what `make demo` runs).
TOOLS_LIB := $(filter-out tools/oobx-run.c,$(wildcard tools/oobx-*.c))
TOOLS     := $(BINDIR)/oobx-run $(patsubst tools/%.c,$(BINDIR)/%,$(TOOLS_LIB))

$(BINDIR)/oobx-run: $(OBJDIR)/tools/oobx-run.o
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LDFLAGS)

# oobx-info shows the library's insides (settings, transport table, topology):
# it links the internal archive
$(BINDIR)/oobx-info: $(OBJDIR)/tools/oobx-info.o $(LIBOOBX_INT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIBOOBX_INT_A) $(LDFLAGS) $(LIB_LIBS)

$(BINDIR)/oobx-%: $(OBJDIR)/tools/oobx-%.o $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(PROG_LDFLAGS)

# keep the objects (make would delete them as intermediates of the chain)
.SECONDARY: $(patsubst $(BINDIR)/%,$(OBJDIR)/tools/%.o,$(TOOLS))

ALL_TARGETS  += $(TOOLS)
INSTALL_BINS += $(BINDIR)/oobx-run
# the installed oobx-info is linked with the installed module directory
INSTALL_BINS_STAGED += $(BUILD)/install/oobx-info
$(BUILD)/install/oobx-info: $(OBJDIR)/tools/oobx-info.o $(CORE_OBJ) $(MODDIR_INST_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(OBJDIR)/tools/oobx-info.o $(CORE_OBJ) $(MODDIR_INST_OBJ) $(LDFLAGS) $(LIB_LIBS)

# build only the launcher (no library needed)
oobx-run: $(BINDIR)/oobx-run
.PHONY: oobx-run

# oobx-run's own checks: shell ranks (4096 of them among others), and the
# root socket hand-off with real ranks of docs/hello (which needs the library)
check-tools: $(BINDIR)/oobx-run $(BUILD)/docs/hello
	@sh tools/test-oobx-run.sh $(BUILD)
# 10,240 shell ranks, and 10,240 ranks of docs/hello over 16 roots (long)
test-long-run: $(BINDIR)/oobx-run $(BUILD)/docs/hello
	@sh tools/test-oobx-run.sh $(BUILD) long
.PHONY: check-tools test-long-run
