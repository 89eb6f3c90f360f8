# ucx/: the UCX transport, a module loaded on demand (liboobx-ucx.so).
UCX_SRC := $(wildcard ucx/*.c)
ifeq ($(HAVE_UCX)$(if $(UCX_SRC),1),11)
UCX_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(UCX_SRC))
UCX_SO  := $(BLD_MOD)/liboobx-ucx.so
$(OBJDIR)/ucx/%.o: CPPFLAGS += $(shell $(PKG_CONFIG) --cflags ucx)
$(UCX_SO): $(UCX_OBJ) $(MODULE_CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(MODULE_LDFLAGS) -o $@ $(UCX_OBJ) $(MODULE_CORE_OBJ) $(shell $(PKG_CONFIG) --libs ucx) $(SODIUM_LIBS)
ALL_TARGETS += $(UCX_SO)
MODULE_SOS += $(UCX_SO)
# the transport's own test and the transport contract (over the module file)
# under each UCX transport selection (loopback only)
UCX_UNIT_TLS := tcp posix,self sysv,self cma,tcp,self default
check-ucx-unit: $(BUILD)/tests/unit/test_ucx_tp $(BUILD)/tests/unit/test_ringbuf $(BUILD)/tests/contract/test_tp_contract $(UCX_SO)
	@$(BUILD)/tests/unit/test_ringbuf
	@set -e; for tls in $(UCX_UNIT_TLS); do \
	    if [ $$tls = default ]; then unset UCX_TLS; else export UCX_TLS=$$tls; fi; \
	    echo "==== test_ucx_tp UCX_TLS=$$tls"; \
	    UCX_NET_DEVICES=lo timeout -k 5 300 $(BUILD)/tests/unit/test_ucx_tp; \
	    echo "==== test_tp_contract OOBX_TEST_TP=ucx UCX_TLS=$$tls"; \
	    OOBX_TEST_TP=ucx UCX_NET_DEVICES=lo timeout -k 5 300 $(BUILD)/tests/contract/test_tp_contract; \
	done
.PHONY: check-ucx-unit
else
$(info oobx: UCX not found (pkg-config ucx) or ucx/ empty; the UCX transport is not built)
endif
