# ucx/: the UCX transport, a module loaded on demand (liboobx-ucx.so).
ifeq ($(HAVE_UCX),1)
UCX_SRC := $(wildcard ucx/*.c)
UCX_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(UCX_SRC))
UCX_SO  := $(LIBDIR)/liboobx-ucx.so
$(OBJDIR)/ucx/%.o: CPPFLAGS += $(shell $(PKG_CONFIG) --cflags ucx)
$(UCX_SO): $(UCX_OBJ) $(LIBOOBX_SO)
	$(CC) -shared -o $@ $(UCX_OBJ) $(LDFLAGS) -L$(LIBDIR) -Wl,-rpath,'$$ORIGIN' -loobx $(shell $(PKG_CONFIG) --libs ucx)
ALL_TARGETS += $(UCX_SO)
else
$(info oobx: UCX not found (pkg-config ucx); the UCX transport is not built)
endif
