# bench/: Google Benchmark benchmarks of oobx, the MPI peers, the report and plots.
# Not part of `all`: they need packages `make test` does not install
# (tools/install-deps.sh bench: g++ libbenchmark-dev python3-matplotlib
# openmpi-bin libopenmpi-dev mpich libmpich-dev).
#
#   make bench          standard matrix + peers + report + plots (~10 min on 2 cores)
#   make bench-quick    one-minute subset
#   make bench-peers    build and run only the MPI and ucx_perftest peers, then report + plots
#   make bench-targets  the figures other issues ask for, as one table (~30 s)
#   make bench-plots    report + plots from the results already in $(BENCH_OUT)
#   make bench-build    build the benchmark programs only
# BENCH_OUT=dir puts results, report and plots elsewhere (docs/perf for the published set).

BENCH_OUT    ?= $(BUILD)/bench
BENCH_PY     ?= $(firstword $(wildcard /usr/bin/python3) python3)
BENCH_CXX    ?= $(CXX)
BENCH_CXXFLAGS := -std=c++17 $(OPT) -g -Wall -Wextra -pthread \
                  $(filter -fsanitize=% -fno-omit-frame-pointer,$(CFLAGS))
BENCH_GB_CFLAGS = $(shell $(PKG_CONFIG) --cflags benchmark 2>/dev/null)
BENCH_GB_LIBS   = $(shell $(PKG_CONFIG) --libs benchmark 2>/dev/null || echo -lbenchmark)
MPICC_OPENMPI ?= mpicc.openmpi
MPICC_MPICH   ?= mpicc.mpich

BENCH_BINS := $(BINDIR)/oobx-bench $(BINDIR)/oobx-init-time
BENCH_PEER_BINS = $(if $(shell command -v $(MPICC_OPENMPI) 2>/dev/null),$(BINDIR)/oobx-mpi-peer.openmpi) \
                  $(if $(shell command -v $(MPICC_MPICH) 2>/dev/null),$(BINDIR)/oobx-mpi-peer.mpich)

$(OBJDIR)/bench/%.o: bench/%.cc
	@mkdir -p $(dir $@)
	$(BENCH_CXX) $(CPPFLAGS) $(BENCH_CXXFLAGS) $(BENCH_GB_CFLAGS) -MMD -MP -c $< -o $@

$(BINDIR)/oobx-bench: $(OBJDIR)/bench/oobx_bench.o $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(BENCH_CXX) -o $@ $< $(BENCH_GB_LIBS) $(PROG_LDFLAGS)

# make install installs oobx-bench where Google Benchmark and a C++ compiler
# are found, linked to find the installed library in $(LIBDIR)
ifeq ($(HAVE_GBENCH)$(if $(shell command -v $(BENCH_CXX) 2>/dev/null),1),11)
INSTALL_BINS_STAGED += $(BUILD)/install/oobx-bench
$(BUILD)/install/oobx-bench: $(OBJDIR)/bench/oobx_bench.o $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(BENCH_CXX) -o $@ $< $(BENCH_GB_LIBS) $(LDFLAGS) -L$(BLD_LIB) -Wl,-rpath,$(LIBDIR) -loobx
# make check-tools checks oobx-bench outside a launcher and its JSON
check-tools: $(BINDIR)/oobx-bench
endif

# the start-up benchmark needs nothing but the library: built with `all`, used by the scale tests too
$(BINDIR)/oobx-boot: $(OBJDIR)/bench/oobx_boot.o $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(PROG_LDFLAGS)
ALL_TARGETS += $(BINDIR)/oobx-boot

# the failure benchmark's rank (bench/failure.py): built with `all`
$(BINDIR)/oobx-failure: $(OBJDIR)/bench/oobx_failure.o $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(PROG_LDFLAGS)
ALL_TARGETS += $(BINDIR)/oobx-failure

$(BINDIR)/oobx-init-time: $(OBJDIR)/bench/oobx_init_time.o $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(PROG_LDFLAGS)

# what opening a connection costs (docs/security.md)
$(BINDIR)/oobx-first-contact: $(OBJDIR)/bench/oobx_first_contact.o $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(PROG_LDFLAGS)
ALL_TARGETS += $(BINDIR)/oobx-first-contact

# The MPI peers use nothing of oobx: built with each MPI's own compiler wrapper.
$(BINDIR)/oobx-mpi-peer.openmpi: bench/mpi_peer.c
	@mkdir -p $(dir $@)
	$(MPICC_OPENMPI) -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -o $@ $<

$(BINDIR)/oobx-mpi-peer.mpich: bench/mpi_peer.c
	@mkdir -p $(dir $@)
	$(MPICC_MPICH) -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -o $@ $<

BENCH_RUN    = $(BENCH_PY) bench/run.py --build $(BUILD) --out $(BENCH_OUT)
# $(call bench-report,what was run): the report (markdown) and the plots of
# $(BENCH_OUT); the summary tables go to the terminal as well
bench-report = $(BENCH_PY) bench/plot.py --out $(BENCH_OUT) && \
               $(BENCH_PY) bench/report.py --out $(BENCH_OUT) --print --command "$(1)$(if $(filter-out build,$(BUILD)), BUILD=$(BUILD))$(if $(filter-out $(BUILD)/bench,$(BENCH_OUT)), BENCH_OUT=$(BENCH_OUT))"

bench-deps:
	@if [ -f tools/install-deps.sh ]; then sh tools/install-deps.sh bench; fi

bench-build: all $(BENCH_BINS)
	@true

bench-peers-build: $(BENCH_PEER_BINS)
	@true

bench: bench-deps
	@$(MAKE) --no-print-directory bench-build bench-peers-build
	$(BENCH_RUN) --clean --matrix standard
	$(call bench-report,make bench)

bench-quick: bench-deps
	@$(MAKE) --no-print-directory bench-build bench-peers-build
	$(BENCH_RUN) --clean --matrix quick
	$(call bench-report,make bench-quick)

bench-peers: bench-deps
	@$(MAKE) --no-print-directory bench-peers-build
	$(BENCH_RUN) --matrix standard --parts peers,perftest
	$(call bench-report,make bench-peers)

# the figures the other issues ask for (init at 64 ranks, allgather, p2p against
# raw TCP and ucx_perftest), printed as one table; about half a minute
BENCH_TARGETS_OUT ?= $(BUILD)/bench-targets
bench-targets: bench-deps
	@$(MAKE) --no-print-directory bench-build
	$(BENCH_PY) bench/run.py --build $(BUILD) --out $(BENCH_TARGETS_OUT) --clean --matrix targets
	$(BENCH_PY) bench/report.py --out $(BENCH_TARGETS_OUT) --targets --command "make bench-targets"

bench-plots:
	$(call bench-report,make bench-plots)

.PHONY: bench bench-quick bench-peers bench-targets bench-plots bench-build bench-peers-build bench-deps

# ---- start-up at scale (docs/scaling.md) -------------------------------------
# 1k, 4k and 10k ranks, 1 and 16 roots, one host and 16 emulated hosts, phases,
# fds and memory per rank; TCPStore beside it where `import torch` works.
# SCALE_RANKS=1024,4096 SCALE_ROOTS=1,16 SCALE_HOSTS=1,16 narrow it; SCALE_NETNS=1
# emulates the hosts with network namespaces (oobx-run --hosts, as root);
# SCALE_TABLE=4096,10240 (the default) adds oobx_allgather_table runs at those
# counts (16 roots, the most hosts), SCALE_TABLE= none. SCALE_MARGIN (seconds a
# rank, default 0.0012) leaves a machine that creates processes slowly more room
# before the common instant; the table's "late starts" says when it was short.
SCALE_RANKS ?= 1024,4096,10240
SCALE_ROOTS ?= 1,16
SCALE_HOSTS ?= 1,16
SCALE_TCPSTORE ?= 1024,4096
SCALE_TABLE ?= 4096,10240
bench-scale: all
	$(BENCH_PY) bench/scale.py $(BUILD) $(BENCH_OUT)/scale --ranks $(SCALE_RANKS) --roots $(SCALE_ROOTS) \
	    --hosts $(SCALE_HOSTS) --tcpstore $(SCALE_TCPSTORE) --table $(SCALE_TABLE)
.PHONY: bench-scale
