#!/usr/bin/env bash
# Install the Debian packages the test suites use, when missing (root on Debian/Ubuntu only).
#   The shellcheck program: ansible-test sanity's shellcheck test skips itself without it.
set -o errexit -o nounset -o pipefail

missing=()
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "warning: ${missing[*]} not installed and cannot be installed here (needs root and apt-get)" >&2
    exit 0
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
