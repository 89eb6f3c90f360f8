# ucx/: the UCX transport, a module loaded on demand (liboobx-ucx.so).
UCX_SRC := $(wildcard ucx/*.c)
ifeq ($(HAVE_UCX)$(if $(UCX_SRC),1),11)
UCX_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(UCX_SRC))
UCX_SO  := $(LIBDIR)/liboobx-ucx.so
$(OBJDIR)/ucx/%.o: CPPFLAGS += $(shell $(PKG_CONFIG) --cflags ucx)
$(UCX_SO): $(UCX_OBJ) $(LIBOOBX_SO)
	$(CC) -shared -o $@ $(UCX_OBJ) $(LDFLAGS) -L$(LIBDIR) -Wl,-rpath,'$$ORIGIN' -loobx $(shell $(PKG_CONFIG) --libs ucx)
ALL_TARGETS += $(UCX_SO)
check-ucx:
	@OOBX_TEST_UCX=1 bash tests/run-tests.sh $(BUILD) check
.PHONY: check-ucx
else
$(info oobx: UCX not found (pkg-config ucx) or ucx/ empty; the UCX transport is not built)
endif
