/* The module directory of this copy of the library: the build tree's, or the
 * installed one's. The Makefile compiles this file once for each with
 * OOBX_MODULE_DIR_BUILTIN set to an absolute path. */
#include "tp_table.h"

#ifndef OOBX_MODULE_DIR_BUILTIN
#error "OOBX_MODULE_DIR_BUILTIN must be set by the build (an absolute directory)"
#endif

const char oobx__module_dir_builtin[] = OOBX_MODULE_DIR_BUILTIN;
