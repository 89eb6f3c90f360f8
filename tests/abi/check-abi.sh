#!/usr/bin/env bash
# The library as users get it: exported symbols, soname, modules, a program
# that defines names like common internals, and install/uninstall into a
# temporary prefix with pkg-config. Prints cmocka-style lines so that
# run-tests.sh counts each check.
#
#   bash tests/abi/check-abi.sh BUILD_DIR
set -u
cd "$(dirname "$0")/../.."
build=${1:-build}
build_abs=$(cd "$build" && pwd)
mk_args=(${OOBX_ABI_MAKE_ARGS:-})
lib=$build/lib
tmp=$(mktemp -d /tmp/oobx-abi.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cc=${CC:-cc}
version=$(sed -n 's/^#define OOBX_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' include/oobx.h | paste -sd.)
major=${version%%.*}
ucx_built=0
[ -e "$lib/oobx/liboobx-ucx.so" ] && ucx_built=1

. tests/cmocka-lines.sh
check() { # check NAME COMMAND...: runs the command, its output goes to the log
    local name=$1
    shift
    echo "[ RUN      ] $name"
    if "$@" >"$tmp/out" 2>&1; then
        sed 's/^/  /' "$tmp/out" | tail -20
        cm_result "$name" 0
    else
        tail -40 "$tmp/out" | cm_excerpt "$name"
        cm_result "$name" 1
    fi
}

exports_only_oobx() {
    local bad
    nm -D --defined-only "$lib/liboobx.so" | awk '{print $3}' | sort >"$tmp/syms"
    echo "$(wc -l <"$tmp/syms") exported: $(tr '\n' ' ' <"$tmp/syms")"
    bad=$(grep -v '^oobx_[a-z]' "$tmp/syms"; grep '^oobx__' "$tmp/syms")
    [ -z "$bad" ] || { echo "not public: $bad"; return 1; }
    # every declared call of the public headers is exported
    for f in $(grep -ho 'OOBX_API [^(]*\<oobx_[a-z_]*(' include/oobx.h include/oobx_debug.h | grep -o 'oobx_[a-z_]*'); do
        grep -qx "$f" "$tmp/syms" || { echo "declared but not exported: $f"; return 1; }
    done
}

soname_versioned() {
    local so
    so=$(readelf -d "$lib/liboobx.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    echo "SONAME $so; $(ls -l "$lib"/liboobx.so* | awk '{print $9, $10, $11}' | tr '\n' ';')"
    [ "$so" = "liboobx.so.$major" ] || return 1
    [ "$(readlink "$lib/liboobx.so")" = "liboobx.so.$major" ] || return 1
    [ "$(readlink "$lib/liboobx.so.$major")" = "liboobx.so.$version" ] || return 1
    [ "$("$build/bin/oobx-info" -v)" = "$version" ]
}

modules_export_entry_only() {
    local n=0
    for m in "$lib"/oobx/liboobx-*.so; do
        [ -e "$m" ] || continue
        n=$((n + 1))
        local syms
        syms=$(nm -D --defined-only "$m" | awk '{print $3}' | tr '\n' ' ')
        echo "$(basename "$m"): exports: $syms; needs: $(readelf -d "$m" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
        # a transport module's one entry, a launcher's rendezvous module's (PMIx), the hwloc module's
        case "$(basename "$m")" in
        liboobx-pmix.so) [ "$syms" = "oobx_kvs_module_init " ] || return 1 ;;
        liboobx-topo.so) [ "$syms" = "oobx_topo_module_init " ] || return 1 ;;
        *) [ "$syms" = "oobx_tp_module_init " ] || return 1 ;;
        esac
        readelf -d "$m" | grep -q 'NEEDED.*liboobx' && { echo "$m links the core"; return 1; }
    done
    [ "$n" -gt 0 ] || echo "(no module built)"
}

core_needs_little() {
    # what every process of a job maps: the core needs libsodium and the C library, nothing
    # more; hwloc (with libudev and libm) is the topology module's, loaded when a choice needs it
    local needed
    needed=$(readelf -d "$lib/liboobx.so.$version" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    echo "liboobx.so needs: $needed"
    case " $needed" in *" libhwloc"* | *" libudev"* | *" libucp"* | *" libibverbs"*) return 1 ;; esac
    if pkg-config --exists hwloc 2>/dev/null; then
        [ -e "$lib/oobx/liboobx-topo.so" ] || { echo "hwloc is here but $lib/oobx/liboobx-topo.so was not built"; return 1; }
    fi
}

static_archive_clean() {
    # global definitions of the shipped archive: the public calls only
    local bad
    bad=$(nm -g --defined-only "$lib/liboobx.a" | awk 'NF == 3 {print $3}' | grep -v '^oobx_[a-z]' ; \
          nm -g --defined-only "$lib/liboobx.a" | awk 'NF == 3 {print $3}' | grep '^oobx__')
    echo "global definitions: $(nm -g --defined-only "$lib/liboobx.a" | awk 'NF == 3' | wc -l)"
    [ -z "$bad" ] || { echo "internal names visible in liboobx.a: $bad"; return 1; }
}

run4() { # run4 PROGRAM [VAR=value...]: 4 ranks under the build's oobx-run, from $tmp/elsewhere
    local prog=$1
    shift
    mkdir -p "$tmp/elsewhere"
    (cd "$tmp/elsewhere" && env OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo "$@" \
        timeout -k 5 120 "$build_abs/bin/oobx-run" -n 4 --timeout 60 -- "$prog")
}

clash_shared() {
    $cc -Iinclude -o "$tmp/clash-shared" tests/abi/clash.c -L"$lib" -Wl,-rpath,"$build_abs/lib" -loobx || return 1
    run4 "$tmp/clash-shared" >"$tmp/clash.log" 2>&1
    local rc=$?
    cat "$tmp/clash.log"
    [ $rc -eq 0 ] && [ "$(grep -c ': ok' "$tmp/clash.log")" -eq 4 ]
}

prefix=$tmp/prefix
do_install() {
    make -s --no-print-directory "${mk_args[@]}" BUILD="$build" install PREFIX="$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; return 1; }
    (cd "$prefix" && find . \( -type f -o -type l \) | sort)
    # the layout
    for f in include/oobx.h include/oobx_debug.h lib/liboobx.so lib/liboobx.so.$major lib/liboobx.so.$version \
             lib/liboobx.a lib/pkgconfig/oobx.pc bin/oobx-run bin/oobx-info; do
        [ -e "$prefix/$f" ] || { echo "missing: $f"; return 1; }
    done
    [ $ucx_built -eq 0 ] || [ -e "$prefix/lib/oobx/liboobx-ucx.so" ] || { echo "missing: lib/oobx/liboobx-ucx.so"; return 1; }
    [ ! -e "$lib/oobx/liboobx-topo.so" ] || [ -e "$prefix/lib/oobx/liboobx-topo.so" ] || { echo "missing: lib/oobx/liboobx-topo.so"; return 1; }
    find "$prefix" -name '*emu*' | grep -q . && { echo "the emulated verbs device was installed"; return 1; }
    # the installed copies know the installed module directory, not the build tree
    strings "$prefix/lib/liboobx.so.$version" | grep -qx "$prefix/lib/oobx" || { echo "installed liboobx.so does not name $prefix/lib/oobx"; return 1; }
    strings "$prefix/lib/liboobx.so.$version" "$prefix/lib/liboobx.a" "$prefix/bin/oobx-info" | grep -q "$build_abs" && { echo "installed files name the build tree"; return 1; }
    "$prefix/bin/oobx-info" | grep -q "modules from $prefix/lib/oobx" || { "$prefix/bin/oobx-info"; return 1; }
}

pc() { PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config "$@"; }

readme_example() { # readme_example shared|static
    local kind=$1 out=$tmp/readme-$1 libs tp=socket
    [ $ucx_built -eq 1 ] && tp=ucx
    if [ "$kind" = shared ]; then
        libs=$(pc --libs oobx)
    else
        # the archive, and everything pkg-config --static says it needs
        libs=$(pc --static --libs oobx | sed 's/-loobx\b/-l:liboobx.a/')
    fi
    echo "cc docs/examples/readme.c $(pc --cflags oobx) $libs"
    # shellcheck disable=SC2086
    $cc -o "$out" docs/examples/readme.c $(pc --cflags oobx) $libs || return 1
    if [ "$kind" = static ]; then
        readelf -d "$out" | grep -q 'NEEDED.*liboobx' && { echo "static build needs liboobx.so"; return 1; }
    fi
    mkdir -p "$tmp/elsewhere"
    (cd "$tmp/elsewhere" && env LD_LIBRARY_PATH="$prefix/lib" OOBX_TRANSPORT=$tp OOBX_LOG_LEVEL=info \
        OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo timeout -k 5 120 "$prefix/bin/oobx-run" -n 4 --timeout 60 -- "$out") \
        >"$tmp/readme.log" 2>&1
    local rc=$?
    grep -v 'init timings' "$tmp/readme.log" | tail -8
    [ $rc -eq 0 ] && [ "$(grep -c "rank [0-9]*/4: transport $tp\( (OOBX_TRANSPORT=auto)\)\?$" "$tmp/readme.log")" -eq 4 ]
}

clash_static() {
    local libs
    libs=$(pc --static --libs oobx | sed 's/-loobx\b/-l:liboobx.a/')
    # shellcheck disable=SC2086
    $cc -o "$tmp/clash-static" tests/abi/clash.c $(pc --cflags oobx) $libs || return 1
    run4 "$tmp/clash-static" >"$tmp/clash.log" 2>&1
    local rc=$?
    cat "$tmp/clash.log"
    [ $rc -eq 0 ] && [ "$(grep -c ': ok' "$tmp/clash.log")" -eq 4 ]
}

do_uninstall() {
    make -s --no-print-directory "${mk_args[@]}" BUILD="$build" uninstall PREFIX="$prefix" >"$tmp/uninstall.log" 2>&1 || { cat "$tmp/uninstall.log"; return 1; }
    local left
    left=$(cd "$prefix" && find . \( -type f -o -type l \))
    [ -z "$left" ] || { echo "left after uninstall: $left"; return 1; }
}

destdir_roundtrip() {
    local d=$tmp/destdir
    make -s --no-print-directory "${mk_args[@]}" BUILD="$build" install DESTDIR="$d" PREFIX=/opt/oobx LIBDIR=/opt/oobx/lib64 >/dev/null 2>&1 || return 1
    [ -e "$d/opt/oobx/lib64/liboobx.so.$version" ] && [ -e "$d/opt/oobx/lib64/pkgconfig/oobx.pc" ] || return 1
    grep -q '^libdir=/opt/oobx/lib64$' "$d/opt/oobx/lib64/pkgconfig/oobx.pc" || return 1
    strings "$d/opt/oobx/lib64/liboobx.so.$version" | grep -qx /opt/oobx/lib64/oobx || return 1
    make -s --no-print-directory "${mk_args[@]}" BUILD="$build" uninstall DESTDIR="$d" PREFIX=/opt/oobx LIBDIR=/opt/oobx/lib64 >/dev/null 2>&1 || return 1
    local left
    left=$(find "$d" \( -type f -o -type l \))
    [ -z "$left" ] || { echo "left: $left"; return 1; }
}

echo "[==========] Running 12 test(s)."
check exports_only_oobx exports_only_oobx
check soname_versioned soname_versioned
check modules_export_entry_only modules_export_entry_only
check core_needs_little core_needs_little
check static_archive_clean static_archive_clean
check clash_shared clash_shared
check install_layout do_install
check readme_example_shared readme_example shared
check readme_example_static readme_example static
check clash_static clash_static
check uninstall_leaves_nothing do_uninstall
check destdir_libdir_roundtrip destdir_roundtrip
cm_summary
