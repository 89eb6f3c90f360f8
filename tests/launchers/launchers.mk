# make test-launchers: oobx jobs under srun, mpirun and mpiexec (docs/launchers.md).
# Installs Open MPI, MPICH, Slurm and munge (tools/install-deps.sh launchers),
# starts a single-node Slurm and runs launch-check and oobx-demo under each;
# then hydra, Open MPI and a two-node Slurm on two emulated nodes.
LAUNCH_CHECK_BIN := $(BUILD)/tests/launchers/launch-check
$(LAUNCH_CHECK_BIN): $(OBJDIR)/tests/launchers/launch_check.o $(LIBOOBX_SO)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LDFLAGS) -L$(BLD_LIB) -Wl,-rpath,'$$ORIGIN/../../lib' -loobx

# The build runs in a second make: this one read the Makefiles before the
# install, when pkg-config found no PMIx and PMIX_SO was empty.
test-launchers:
	@sh tools/install-deps.sh launchers
	@$(MAKE) --no-print-directory launchers-build
	@bash tests/launchers/run-launchers.sh $(BUILD)
launchers-build: $(LIBOOBX_SO) $(PMIX_SO) $(BINDIR)/oobx-demo $(BINDIR)/oobx-run $(LAUNCH_CHECK_BIN)
	@[ -n "$(PMIX_SO)" ] || { echo "oobx: test-launchers: PMIx not found (pkg-config pmix) after the install of libpmix-dev" >&2; exit 1; }
.PHONY: test-launchers launchers-build
