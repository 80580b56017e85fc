#!/usr/bin/env bash
# Install the Debian packages the test suites use, when missing (root on Debian/Ubuntu only).
#   the shellcheck program: ansible-test sanity's shellcheck test skips itself without it.
#   rpm (>= 4.16): the unit tests check the rpm version comparison against the real rpm; rpmbuild (in Debian's rpm)
#     and createrepo-c (createrepo_c, modifyrepo_c) build the simulated fleet's rpm repository (rocky9 nodes).
#   chromium: the fleet report's integration test opens report.html in headless Chromium (screenshot and DOM).
# A suite whose tool is missing fails and says what to install; none skips (docs/development.md, "Missing tools").
set -o errexit -o nounset -o pipefail

missing=()
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
command -v rpmbuild >/dev/null 2>&1 || missing+=(rpm)
command -v createrepo_c >/dev/null 2>&1 || missing+=(createrepo-c)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "warning: ${missing[*]} not installed and cannot be installed here (needs root and apt-get)" >&2
    exit 0
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Wait for a dpkg lock another process holds (unattended-upgrades, a parallel make test) rather than fail, and take the
# simulated fleet's build lock (tests/sim/fleet.py BUILD_LOCK), held by its own apt-get runs and image builds: make test
# starts the fleet's prebuild beside this script, and two apt-get update at once would fight over the lists lock.
build_lock=${GPUFLEET_SIM_BUILD_LOCK:-${TMPDIR:-/tmp}/gpufleet-sim-build-$(id -u).lock}
apt=(flock "$build_lock" apt-get -o DPkg::Lock::Timeout=300)
"${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    "${apt[@]}" update -qq >/dev/null
    "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
