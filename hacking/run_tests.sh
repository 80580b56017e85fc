#!/usr/bin/env bash
# Run the test suites in order, stop at the first failure, end with one summary line.
# Usage: hacking/run_tests.sh all|sanity|units|lint|docs|integration
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export ANSIBLE_COLLECTIONS_PATH="$root/build/collections"
export ANSIBLE_NOCOLOR=1 PY_COLORS=0 NO_COLOR=1

passed=()
run_suite() {
    local name=$1
    shift
    local start=$SECONDS
    echo "=== $name"
    if ! "$@"; then
        echo "=== $name FAILED after $((SECONDS - start))s"
        echo "make-test: ${#passed[@]} passed, 1 failed"
        exit 1
    fi
    passed+=("$name ($((SECONDS - start))s)")
}

collection_link() {
    # ansible, ansible-doc and ansible-lint find the checkout as gpufleet.lifecycle through this link.
    local link="$root/build/collections/ansible_collections/gpufleet/lifecycle"
    mkdir -p "$(dirname "$link")"
    [ -L "$link" ] || ln -s ../../../.. "$link"
}

suite_sanity() {
    local tree
    tree=$(python hacking/build_tree.py)
    (cd "$tree" && ansible-test sanity --venv --python 3.11 --color no)
}

suite_units() {
    python -m pytest -q -p no:cacheprovider tests/unit
}

suite_lint() {
    ansible-lint --profile production --offline
}

suite_docs() {
    # Build the collection, install the tarball into an empty path, and check ansible-doc against that copy.
    rm -rf build/dist build/installed
    ansible-galaxy collection build --force --output-path build/dist . >/dev/null
    ANSIBLE_COLLECTIONS_PATH="$root/build/installed" ansible-galaxy collection install --force build/dist/gpufleet-lifecycle-*.tar.gz -p build/installed >/dev/null
    ANSIBLE_COLLECTIONS_PATH="$root/build/installed" ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false python hacking/check_docs.py
}

suite_integration() {
    python -m pytest -q -p no:cacheprovider tests/integration
}

collection_link
what=${1:-all}
case $what in
    all)
        run_suite sanity suite_sanity
        run_suite units suite_units
        run_suite lint suite_lint
        run_suite docs suite_docs
        run_suite integration suite_integration
        ;;
    sanity|units|lint|docs|integration)
        run_suite "$what" "suite_$what"
        ;;
    *)
        echo "unknown suite: $what" >&2
        exit 2
        ;;
esac
echo "suites: ${passed[*]}"
echo "make-test: ${#passed[@]} passed, 0 failed"
