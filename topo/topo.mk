# topo/: device and interface choice. The interface choice, the pure helpers
# (topo_common.c, linked into the module too) and the device ranking's front
# are part of the core library; the ranking with hwloc is a module of its own
# (liboobx-topo.so), built when hwloc is found and loaded only when a choice
# needs it (topo/topo_rank.c).
TOPO_SRC := $(filter-out topo/topo_hwloc.c,$(wildcard topo/*.c))
ifeq ($(HAVE_HWLOC),1)
TOPO_SO := $(BLD_MOD)/liboobx-topo.so
$(OBJDIR)/topo/topo_hwloc.o: CPPFLAGS += $(shell $(PKG_CONFIG) --cflags hwloc)
$(TOPO_SO): $(OBJDIR)/topo/topo_hwloc.o $(OBJDIR)/topo/topo_common.o
	@mkdir -p $(dir $@)
	$(CC) $(MODULE_LDFLAGS) -o $@ $^ $(shell $(PKG_CONFIG) --libs hwloc)
MODULE_SOS += $(TOPO_SO)
else
$(info oobx: hwloc not found (pkg-config hwloc); devices are not ranked by locality)
endif
