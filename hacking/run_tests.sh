#!/usr/bin/env bash
# Run the test suites in order, stop at the first failure, end with one summary line.
# Usage: hacking/run_tests.sh all|sanity|units|lint|docs|integration|core216
# core216 (part of all): the unit tests and the stand-in integration tests again under ansible-core 2.16, the oldest
# release meta/runtime.yml accepts, from .venv-216 (make creates it from requirements-core216.txt).
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

# Integration tests that need no simulated fleet and no Slurm daemons: stand-in NVIDIA tools, or the fake Kubernetes API
# in-process (kubernetes.core's k8s_drain against a PodDisruptionBudget).
STAND_IN_INTEGRATION=(tests/integration/test_gpu_facts.py tests/integration/test_dcgm_diag.py tests/integration/test_package_plan_commands.py
                      tests/integration/test_sim_kube_quantities.py)
VENV216="$root/.venv-216"

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

core216() {
    # Run "$@" with .venv-216 first on PATH, once it is sure to hold ansible-core 2.16; the collection is found the
    # same way as under .venv (ANSIBLE_COLLECTIONS_PATH above).
    local version
    if [ ! -x "$VENV216/bin/python" ]; then
        echo "$VENV216 is missing: run make test or make core216 (they create it from requirements-core216.txt)" >&2
        return 1
    fi
    version=$("$VENV216/bin/python" -c 'from ansible.release import __version__; print(__version__)') || return 1
    case $version in
        2.16.*) echo "ansible-core $version from $VENV216" ;;
        *) echo "$VENV216 holds ansible-core $version, not 2.16: remove it and run make core216" >&2; return 1 ;;
    esac
    PATH="$VENV216/bin:$PATH" "$@"
}

suite_units_216() {
    core216 python -m pytest -q -p no:cacheprovider tests/unit
}

suite_integration_216() {
    core216 python -m pytest -q -p no:cacheprovider "${STAND_IN_INTEGRATION[@]}"
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
        run_suite units-2.16 suite_units_216
        run_suite lint suite_lint
        run_suite docs suite_docs
        run_suite integration-2.16 suite_integration_216
        run_suite integration suite_integration
        ;;
    core216)
        run_suite units-2.16 suite_units_216
        run_suite integration-2.16 suite_integration_216
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
