# Sourced by the shell test scripts (tests/abi, tests/scale, tests/quiet):
# they print cmocka's lines, so that run-tests.sh counts each check like a
# unit test.
#   cm_result NAME STATUS   one check ended (0: passed)
#   cm_why NAME TEXT        why a check failed, as an "ERROR: " line, which
#                           run-tests.sh repeats at the end of a failed run
#   ... | cm_excerpt NAME   lines of its output, the same way
#   cm_summary              the closing lines; its status is 0 when all passed
cm_names=() cm_results=()

cm_result() {
    if [ "$2" -eq 0 ]; then
        echo "[       OK ] $1"
        cm_results+=(0)
    else
        echo "[  FAILED  ] $1"
        cm_results+=(1)
    fi
    cm_names+=("$1")
}

cm_why() {
    echo "ERROR: $1: $2"
}

cm_excerpt() {
    sed "s/^/ERROR: $1 | /"
}

cm_summary() {
    local nfail=0 r i
    for r in "${cm_results[@]}"; do [ "$r" -eq 0 ] || nfail=$((nfail + 1)); done
    echo "[==========] ${#cm_names[@]} test(s) run."
    echo "[  PASSED  ] $(( ${#cm_names[@]} - nfail )) test(s)."
    if [ $nfail -gt 0 ]; then
        echo "[  FAILED  ] $nfail test(s), listed below:"
        for i in "${!cm_names[@]}"; do [ "${cm_results[$i]}" -eq 0 ] || echo "[  FAILED  ] ${cm_names[$i]}"; done
    fi
    [ $nfail -eq 0 ]
}
