/* Loads preload_check_mod.so (linked with the real libibverbs and librdmacm)
 * with dlopen and runs it: what the core does with liboobx-verbs.so. This
 * program itself links neither library. Usage: preload_dlopen MODULE [full] */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: preload_dlopen MODULE [full]\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("preload_dlopen: %s\n", dlerror());
        return 1;
    }
    int (*run)(int, char **) = (int (*)(int, char **))dlsym(h, "preload_check_main");
    if (!run) {
        printf("preload_dlopen: %s\n", dlerror());
        return 1;
    }
    return run(argc - 1, argv + 1);
}
