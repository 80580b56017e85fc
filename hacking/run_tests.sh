#!/usr/bin/env bash
# Run the test suites, stop at the first failure, end with the suite times, the slowest tests and one summary line.
# Usage: hacking/run_tests.sh all|sanity|units|lint|docs|integration|core216
# core216 (part of all): the unit tests and the stand-in integration tests again under ansible-core 2.16, the oldest
# release meta/runtime.yml accepts, from .venv-216 (make creates it from requirements-core216.txt).
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export ANSIBLE_COLLECTIONS_PATH="$root/build/collections"
export ANSIBLE_NOCOLOR=1 PY_COLORS=0 NO_COLOR=1

# Each pytest suite writes its tests' times (conftest.py) to build/test-times/<suite>.tsv; the end of the run lists the
# slowest of all of them in build/test-times.txt.
TIMES=$root/build/test-times
TIMES_REPORT=$root/build/test-times.txt
SLOWEST=15
# The integration suite's pytest-xdist workers: its tests mostly wait (reboots, polls, SSH), each module keeps its fleet
# on one worker (--dist loadscope). GPUFLEET_TEST_WORKERS=0 runs it in one process.
WORKERS=${GPUFLEET_TEST_WORKERS:-4}

passed=()
run_suite() {
    local name=$1
    shift
    local start=$SECONDS
    echo "=== $name"
    if ! GPUFLEET_TEST_TIMES="$TIMES/$name.tsv" "$@"; then
        echo "=== $name FAILED after $((SECONDS - start))s"
        background_integration_stop
        times_report
        echo "make-test: ${#passed[@]} passed, 1 failed"
        exit 1
    fi
    passed+=("$name ($((SECONDS - start))s)")
}

times_report() {
    # The suites' times and the slowest tests of every suite that ran, in build/test-times.txt and on stdout.
    [ -d "$TIMES" ] || return 0
    {
        echo "suites: ${passed[*]}"
        echo "the $SLOWEST slowest tests (wall seconds: setup + call + teardown; CPU seconds of the test and what it waited for; suite):"
        for file in "$TIMES"/*.tsv; do
            [ -e "$file" ] || continue
            awk -F '\t' -v suite="$(basename "$file" .tsv)" '{ printf "%8.1f %8.1f  %-16s %s\n", $1, $2, suite, $3 }' "$file"
        done | sort -rn -k1,1 | awk -v n="$SLOWEST" 'NR <= n'   # awk reads to the end: no SIGPIPE under pipefail
    } > "$TIMES_REPORT"
    cat "$TIMES_REPORT"
}

# "all" starts the integration suite at once, in the background, beside the other suites: first the simulated fleet's host
# packages (podman, Slurm, ...) and node images (debian12 and rocky9, the default branch and profile; tests/sim/fleet
# prebuild, which needs only the system python3) while make venv sets up .venv in the foreground, then, once .venv is
# ready, its pytest workers. Its tests mostly wait, the other suites mostly compute: together they take little more
# than the integration suite alone. Its output is printed when it ends (build/integration.log meanwhile).
INTEGRATION_LOG=$root/build/integration.log
VENV_READY=$root/build/venv-ready
integration_pid=
integration_start=

prebuild() {
    mkdir -p "$root/build"
    tests/sim/fleet --state-dir "$root/build/sim-prebuild" prebuild --os debian12 --os rocky9 > "$root/build/prebuild.log" 2>&1 || {
        echo "the simulated fleet's prebuild failed (build/prebuild.log):"
        tail -n 40 "$root/build/prebuild.log"
        return 1
    }
    echo "prebuild: $(grep "ready in" "$root/build/prebuild.log")"
}

venv_wait() {
    # The background suite's pytest runs from .venv: wait until the foreground's make venv has made it.
    while [ ! -e "$VENV_READY" ]; do
        sleep 1
    done
}

suite_venv() {
    "${MAKE:-make}" --no-print-directory -C "$root" venv && touch "$VENV_READY"
}

background_integration_start() {
    mkdir -p "$root/build"
    integration_start=$SECONDS
    # Job control: the background suite gets a process group of its own, so that a failure elsewhere can stop all of it.
    set -m
    (prebuild && venv_wait && GPUFLEET_TEST_TIMES="$TIMES/integration.tsv" suite_integration) > "$INTEGRATION_LOG" 2>&1 &
    integration_pid=$!
    set +m
    echo "=== integration: started in the background (the fleet's prebuild, then $WORKERS workers once .venv is ready; build/integration.log)"
}

background_integration_stop() {
    # A foreground suite failed: interrupt the integration suite (pytest tears its fleets down on SIGINT) and wait for it.
    [ -n "$integration_pid" ] || return 0
    kill -INT -- "-$integration_pid" 2>/dev/null || true
    local waited=0
    while kill -0 "$integration_pid" 2>/dev/null && [ $waited -lt 300 ]; do
        sleep 1
        waited=$((waited + 1))
    done
    kill -KILL -- "-$integration_pid" 2>/dev/null || true
    integration_pid=
}

background_integration_wait() {
    local rc=0
    echo "=== integration (started in the background)"
    wait "$integration_pid" || rc=$?
    integration_pid=
    cat "$INTEGRATION_LOG"
    if [ $rc -ne 0 ]; then
        echo "=== integration FAILED after $((SECONDS - integration_start))s"
        times_report
        echo "make-test: ${#passed[@]} passed, 1 failed"
        exit 1
    fi
    passed+=("integration ($((SECONDS - integration_start))s)")
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
    python -m pytest -q -p no:cacheprovider -n 2 tests/unit
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
    local parallel=()
    [ "$WORKERS" -gt 0 ] && parallel=(-n "$WORKERS" --dist loadscope --no-loadscope-reorder)
    python -m pytest -q -p no:cacheprovider "${parallel[@]}" tests/integration
}

collection_link
rm -rf "$TIMES" "$TIMES_REPORT"
# However this script ends (a failed suite, an error of its own, an interrupt), the background suite ends with it.
trap background_integration_stop EXIT
what=${1:-all}
case $what in
    all)
        rm -f "$VENV_READY"
        background_integration_start
        run_suite venv suite_venv
        run_suite sanity suite_sanity
        run_suite units suite_units
        run_suite units-2.16 suite_units_216
        run_suite lint suite_lint
        run_suite docs suite_docs
        run_suite integration-2.16 suite_integration_216
        background_integration_wait
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
times_report
echo "make-test: ${#passed[@]} passed, 0 failed"
