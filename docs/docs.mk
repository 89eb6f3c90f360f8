# docs/examples/*.c are compiled (and run by `make check`) so they cannot rot.
DOC_EXAMPLES := $(patsubst docs/examples/%.c,$(BUILD)/docs/%,$(wildcard docs/examples/*.c))
$(BUILD)/docs/%: docs/examples/%.c $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -L$(BLD_LIB) -Wl,-rpath,'$$ORIGIN/../lib' -loobx $(LDFLAGS)
ALL_TARGETS += $(DOC_EXAMPLES)

check-examples: $(DOC_EXAMPLES) $(BINDIR)/oobx-run
	@echo 'examples: docs/examples (hello under oobx-run, unique_id as threads)'
	@OOBX_TRANSPORT=socket OOBX_SOCKET_IFNAME=lo $(BINDIR)/oobx-run -n 4 --timeout 60 -- $(BUILD)/docs/hello
	@OOBX_SOCKET_IFNAME=lo $(BUILD)/docs/unique_id
.PHONY: check-examples
