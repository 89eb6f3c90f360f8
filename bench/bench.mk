# bench/: benchmarks
