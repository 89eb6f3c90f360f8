# topo/: device and interface choice; always part of the core library
# (hwloc-backed ranking only when hwloc is found).
TOPO_SRC := $(wildcard topo/*.c)
