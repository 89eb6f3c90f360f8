# Sourced by the shell test scripts (tests/abi, tests/scale): they print
# cmocka's lines, so that run-tests.sh counts each check like a unit test.
#   cm_result NAME STATUS   one check ended (0: passed)
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
