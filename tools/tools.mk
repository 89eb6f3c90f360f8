# tools/: oobx-run, oobx-info
TOOLS := $(patsubst tools/%.c,$(BINDIR)/%,$(wildcard tools/oobx-*.c))
$(BINDIR)/%: $(OBJDIR)/tools/%.o $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(PROG_LDFLAGS)
ALL_TARGETS += $(TOOLS)
INSTALL_BINS += $(TOOLS)
