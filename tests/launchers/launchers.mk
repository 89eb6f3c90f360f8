# make test-launchers: oobx jobs under srun, mpirun and mpiexec (docs/launchers.md)
