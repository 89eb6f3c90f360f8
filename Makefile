# oobx: the one build entry.
#   make              library, module(s), tools, tests (build/)
#   make test         install missing Debian packages, build, run the test suite
#   make demo         install missing Debian packages, build, run the 8-rank demo
#   make bench        the standard benchmark matrix (bench/)
#   make install PREFIX=/usr/local [LIBDIR=... DESTDIR=...]; make uninstall
#   make SAN=address|undefined|thread   sanitizer build in build-$(SAN)/

PREFIX  ?= /usr/local
# install directories, as packagers expect them (DESTDIR is prepended at install)
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR_INST ?= $(PREFIX)/bin
MODULEDIR  ?= $(LIBDIR)/oobx
SAN     ?=
ifeq ($(SAN),)
BUILD   ?= build
else
BUILD   ?= build-$(SAN)
endif
CC      ?= cc
CXX     ?= c++
PKG_CONFIG ?= pkg-config

# the one source of the version: include/oobx.h
version_part = $(shell sed -n 's/^\#define OOBX_VERSION_$(1) \([0-9]*\).*/\1/p' include/oobx.h)
VERSION_MAJOR := $(call version_part,MAJOR)
VERSION_MINOR := $(call version_part,MINOR)
VERSION_PATCH := $(call version_part,PATCH)
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)
SONAME  := liboobx.so.$(VERSION_MAJOR)

OPT      ?= -O2
CPPFLAGS += -D_GNU_SOURCE -Iinclude -Isrc -Itopo
# only what OOBX_API marks leaves a shared object
CFLAGS   += -std=c11 $(OPT) -g -Wall -Wextra -fPIC -pthread -fvisibility=hidden
# bind every symbol at load (full RELRO): no lazy PLT resolution inside a
# timed init, and the GOT read-only after it (docs/design.md, "Bound at load")
LDFLAGS  += -pthread -Wl,-z,relro -Wl,-z,now
ifneq ($(SAN),)
CFLAGS   += -fsanitize=$(SAN) -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=$(SAN)
endif

have = $(shell $(PKG_CONFIG) --exists $(1) 2>/dev/null && echo 1)
HAVE_UCX    := $(call have,ucx)
HAVE_HWLOC  := $(call have,hwloc)
HAVE_VERBS  := $(if $(and $(call have,libibverbs),$(call have,librdmacm)),1)
HAVE_CMOCKA := $(call have,cmocka)
HAVE_GBENCH := $(call have,benchmark)

# build tree: BLD_LIB holds the libraries, BLD_LIB/oobx the transport modules
BLD_LIB := $(BUILD)/lib
BLD_MOD := $(BLD_LIB)/oobx
BINDIR  := $(BUILD)/bin
OBJDIR  := $(BUILD)/obj

# ---- the core library -------------------------------------------------------
CORE_SRC := $(filter-out src/moddir.c,$(wildcard src/*.c))
# libsodium: the keyed hashes and random nonces of authentication (src/auth.c)
SODIUM_LIBS := $(shell $(PKG_CONFIG) --libs libsodium 2>/dev/null || echo -lsodium)
LIB_LIBS := -ldl -lm $(SODIUM_LIBS)
PC_REQUIRES := libsodium
# hwloc: only the topology module links it (topo/topo.mk), never the core
ifeq ($(HAVE_HWLOC),1)
CPPFLAGS += -DOOBX_HAVE_HWLOC=1
endif
include topo/topo.mk
CORE_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(CORE_SRC) $(TOPO_SRC))
$(CORE_OBJ): CPPFLAGS += -DOOBX_BUILDING_LIBRARY
# pure helpers that the modules link as well (hidden in each)
# what modules take of the core as objects (auth.o: the verbs handshake's proofs, with libsodium)
MODULE_CORE_OBJ := $(OBJDIR)/src/util.o $(OBJDIR)/src/cma.o $(OBJDIR)/src/ringbuf.o $(OBJDIR)/src/tp_common.o $(OBJDIR)/src/auth.o

# the module directory: one object for the build tree, one for the install
MODDIR_OBJ      := $(OBJDIR)/moddir-build.o
MODDIR_INST_OBJ := $(OBJDIR)/moddir-install.o
$(MODDIR_OBJ): src/moddir.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -DOOBX_BUILDING_LIBRARY -DOOBX_MODULE_DIR_BUILTIN='"$(abspath $(BLD_MOD))"' $(CFLAGS) -c $< -o $@
$(MODDIR_INST_OBJ): src/moddir.c FORCE
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -DOOBX_BUILDING_LIBRARY -DOOBX_MODULE_DIR_BUILTIN='"$(MODULEDIR)"' $(CFLAGS) -c $< -o $@

LIBOOBX_SO_FILE := $(BLD_LIB)/liboobx.so.$(VERSION)
LIBOOBX_SO := $(BLD_LIB)/liboobx.so
LIBOOBX_A  := $(BLD_LIB)/liboobx.a
# every internal symbol reachable, for the unit tests and oobx-info
LIBOOBX_INT_A := $(OBJDIR)/liboobx-internal.a

ALL_TARGETS := $(LIBOOBX_SO) $(LIBOOBX_A) $(LIBOOBX_INT_A) $(TOPO_SO)

$(OBJDIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# link_so OUT, MODDIR-OBJECT
define link_so
	@mkdir -p $(dir $(1))
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -o $(1) $(CORE_OBJ) $(2) $(LDFLAGS) $(LIB_LIBS)
endef
# link_a OUT, MODDIR-OBJECT: one relocatable object whose internals are local,
# so that a static application can define any name it likes
define link_a
	@mkdir -p $(dir $(1))
	$(LD) -r -o $(1:.a=.o) $(CORE_OBJ) $(2)
	objcopy --localize-hidden $(1:.a=.o)
	rm -f $(1) && ar rcs $(1) $(1:.a=.o) && rm -f $(1:.a=.o)
endef

$(LIBOOBX_SO_FILE): $(CORE_OBJ) $(MODDIR_OBJ)
	$(call link_so,$@,$(MODDIR_OBJ))
$(LIBOOBX_SO): $(LIBOOBX_SO_FILE)
	ln -sf liboobx.so.$(VERSION) $(BLD_LIB)/$(SONAME)
	ln -sf $(SONAME) $@
$(LIBOOBX_A): $(CORE_OBJ) $(MODDIR_OBJ)
	$(call link_a,$@,$(MODDIR_OBJ))
$(LIBOOBX_INT_A): $(CORE_OBJ) $(MODDIR_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# programs link the shared library and find it next to themselves
PROG_LDFLAGS = $(LDFLAGS) -L$(BLD_LIB) -Wl,-rpath,'$$ORIGIN/../lib' -loobx
# modules: their objects and the pure helpers, nothing of the core
MODULE_LDFLAGS = -shared -Wl,--no-undefined $(LDFLAGS)
$(OBJDIR)/ucx/%.o $(OBJDIR)/verbs/%.o: CPPFLAGS += -DOOBX_MODULE

# ---- optional parts, each in its own folder ----------------------------------
include ucx/ucx.mk
include pmix/pmix.mk
include verbs/verbs.mk
include tools/tools.mk
include tests/tests.mk
include tests/launchers/launchers.mk
include bench/bench.mk
include docs/docs.mk

all: $(ALL_TARGETS)
	@true

.DEFAULT_GOAL := all

# ---- the two commands of README ------------------------------------------------
deps:
	@sh tools/install-deps.sh test

test:
	@sh tools/install-deps.sh test
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory check

demo:
	@sh tools/install-deps.sh demo
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory run-demo

run-demo: all
	@sh tools/demo.sh $(BUILD)

# ---- install ------------------------------------------------------------------
# The installed library is linked again with the installed module directory.
INST_STAGE := $(BUILD)/install
INST_SO_FILE := $(INST_STAGE)/liboobx.so.$(VERSION)
INST_A := $(INST_STAGE)/liboobx.a
INST_MODULES = $(notdir $(MODULE_SOS))
INST_PC := $(INST_STAGE)/oobx.pc

$(INST_SO_FILE): $(CORE_OBJ) $(MODDIR_INST_OBJ)
	$(call link_so,$@,$(MODDIR_INST_OBJ))
$(INST_A): $(CORE_OBJ) $(MODDIR_INST_OBJ)
	$(call link_a,$@,$(MODDIR_INST_OBJ))
$(INST_PC): oobx.pc.in FORCE
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|g' -e 's|@REQUIRES_PRIVATE@|$(PC_REQUIRES)|g' \
	    -e 's|@LIBS_PRIVATE@|$(LIB_LIBS) -pthread|g' $< > $@

install: all $(INST_SO_FILE) $(INST_A) $(INST_PC) $(INSTALL_BINS_STAGED)
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(MODULEDIR) $(DESTDIR)$(BINDIR_INST)
	install -m 644 include/oobx.h include/oobx_debug.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(INST_SO_FILE) $(DESTDIR)$(LIBDIR)/
	ln -sf liboobx.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/liboobx.so
	install -m 644 $(INST_A) $(DESTDIR)$(LIBDIR)/
	$(if $(MODULE_SOS),install -m 755 $(MODULE_SOS) $(DESTDIR)$(MODULEDIR)/)
	install -m 644 $(INST_PC) $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 755 $(INSTALL_BINS) $(INSTALL_BINS_STAGED) $(DESTDIR)$(BINDIR_INST)/

# removes exactly what install put there (and the directories it made, when empty)
uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/oobx.h $(DESTDIR)$(INCLUDEDIR)/oobx_debug.h
	rm -f $(DESTDIR)$(LIBDIR)/liboobx.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/liboobx.so
	rm -f $(DESTDIR)$(LIBDIR)/liboobx.a $(DESTDIR)$(LIBDIR)/pkgconfig/oobx.pc
	rm -f $(addprefix $(DESTDIR)$(MODULEDIR)/,$(INST_MODULES))
	rm -f $(addprefix $(DESTDIR)$(BINDIR_INST)/,$(notdir $(INSTALL_BINS) $(INSTALL_BINS_STAGED)))
	-rmdir $(DESTDIR)$(MODULEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig 2>/dev/null

FORCE:

clean:
	rm -rf build build-*

.PHONY: all deps test demo run-demo install uninstall clean check FORCE

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# the examples in docs/ run before the suites, so `make check` still ends with its summary line
check: check-examples
