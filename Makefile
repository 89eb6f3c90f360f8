# oobx: the one build entry.
#   make              library, module(s), tools, tests (build/)
#   make test         install missing Debian packages, build, run the test suite
#   make demo         install missing Debian packages, build, run the 8-rank demo
#   make bench        the standard benchmark matrix (bench/)
#   make install PREFIX=/usr/local
#   make SAN=address|undefined|thread   sanitizer build in build-$(SAN)/

PREFIX  ?= /usr/local
SAN     ?=
ifeq ($(SAN),)
BUILD   ?= build
else
BUILD   ?= build-$(SAN)
endif
CC      ?= cc
CXX     ?= c++
PKG_CONFIG ?= pkg-config

OPT      ?= -O2
CPPFLAGS += -D_GNU_SOURCE -Iinclude -Isrc -Itopo
CFLAGS   += -std=c11 $(OPT) -g -Wall -Wextra -fPIC -pthread
LDFLAGS  += -pthread
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

LIBDIR  := $(BUILD)/lib
BINDIR  := $(BUILD)/bin
OBJDIR  := $(BUILD)/obj

# ---- the core library -------------------------------------------------------
CORE_SRC := $(wildcard src/*.c)
LIB_LIBS := -ldl -lm
ifeq ($(HAVE_HWLOC),1)
CPPFLAGS += -DOOBX_HAVE_HWLOC=1
LIB_LIBS += $(shell $(PKG_CONFIG) --libs hwloc)
endif
include topo/topo.mk
CORE_OBJ := $(patsubst %.c,$(OBJDIR)/%.o,$(CORE_SRC) $(TOPO_SRC))

LIBOOBX_SO := $(LIBDIR)/liboobx.so
LIBOOBX_A  := $(LIBDIR)/liboobx.a

ALL_TARGETS := $(LIBOOBX_SO) $(LIBOOBX_A)

$(OBJDIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIBOOBX_SO): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,liboobx.so -o $@ $^ $(LDFLAGS) $(LIB_LIBS)

$(LIBOOBX_A): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# programs link the shared library and find it next to themselves
PROG_LDFLAGS = $(LDFLAGS) -L$(LIBDIR) -Wl,-rpath,'$$ORIGIN/../lib' -loobx

# ---- optional parts, each in its own folder ----------------------------------
include ucx/ucx.mk
include verbs/verbs.mk
include tools/tools.mk
include tests/tests.mk
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
install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/oobx.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(LIBDIR)/liboobx*.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(LIBOOBX_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(INSTALL_BINS) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|1.0.0|g' oobx.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/oobx.pc

clean:
	rm -rf build build-*

.PHONY: all deps test demo run-demo install clean check

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# the examples in docs/ run before the suites, so `make check` still ends with its summary line
check: check-examples
