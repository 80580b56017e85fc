#!/usr/bin/env bash
# The sh -c scripts of section 2 expand in their own shell, on purpose.
# shellcheck disable=SC2016
# Capture what a real NVIDIA node shows, for tests and for the facts' design: run on the node (as root) from a checkout
# of this collection; writes into OUT (default ./build/real-node) one file per capture, byte-exact as the command printed
# it, and a .source.txt sidecar for each naming the command.  Nothing on the node is changed.
#   hacking/capture_real_node.sh [OUT]
# Captures:
#   gather-raw.bin / gather-facts.json  drift_check's one shell command (_gather.script) as the node answered it, and the
#                                       gpufleet facts the controller assembles from it (_gather.parse + _facts.assemble)
#   driver-evidence.txt                 where the loaded driver comes from: its files, mounts, module, installer traces,
#                                       PID 1, persistence daemon (one section per command, each headed by the command)
set -o nounset -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/real-node}
mkdir -p "$out"
where="$(uname -srm); $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null | tr -d '"'); GPU: $(timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1); captured $(date -u +%Y-%m-%d)"

sidecar() {
    # sidecar FILE COMMAND
    printf 'sample: %s\nwhere: %s\nfidelity: byte-exact output as the command printed it, captured to a file on that machine (nothing edited)\ncommand that produced it: %s\n' \
        "$(basename "$1")" "$where" "$2" > "$1.source.txt"
}

# 1. drift_check's read of a node: the collection's own script, run as the action runs it, parsed as the action parses it.
collections=$(mktemp -d)
mkdir -p "$collections/ansible_collections/gpufleet"
ln -s "$root" "$collections/ansible_collections/gpufleet/lifecycle"
PYTHONPATH=$collections timeout 300 python3 - "$out" <<'EOF'
import json
import os
import secrets
import subprocess
import sys

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _gather
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import assemble

out = sys.argv[1]
boundary = 'gpufleet-gather-%s' % secrets.token_hex(16)
argv = _gather.argv(_gather.script(), boundary, _gather.COMMAND_TIMEOUT, _gather.PACKAGE_TIMEOUT, _gather.STATE_DIR)
data = subprocess.run(argv, stdout=subprocess.PIPE, check=False, timeout=600).stdout
with open(os.path.join(out, 'gather-raw.bin'), 'wb') as handle:
    handle.write(data)
with open(os.path.join(out, 'gather-boundary.txt'), 'w', encoding='utf-8') as handle:
    handle.write(boundary + '\n')
raw = _gather.parse(data, boundary, _gather.COMMAND_TIMEOUT, _gather.PACKAGE_TIMEOUT)
with open(os.path.join(out, 'gather-facts.json'), 'w', encoding='utf-8') as handle:
    json.dump({'gpufleet': assemble(raw), 'warnings': raw['warnings']}, handle, indent=2, sort_keys=True, default=str)
    handle.write('\n')
EOF
echo "gather: rc=$?"
sidecar "$out/gather-raw.bin" "/bin/sh -c SCRIPT BOUNDARY 60 120 /etc/gpufleet, SCRIPT being plugins/module_utils/_gather.script() of this checkout (the boundary is in gather-boundary.txt)"
sidecar "$out/gather-facts.json" "_facts.assemble(_gather.parse(gather-raw.bin)) of this checkout: what drift_check assembles on the controller, not an NVIDIA output"

# 2. Where the loaded driver comes from.
evidence=$out/driver-evidence.txt
: > "$evidence"
section() {
    {
        printf '### %s\n' "$*"
        timeout 30 "$@" 2>&1
        printf '### rc=%s\n\n' "$?"
    } >> "$evidence"
}

section cat /proc/driver/nvidia/version
section cat /sys/module/nvidia/version
section ls -la /sys/module/nvidia
section cat /sys/module/nvidia/taint
section sh -c 'grep -i nvidia /proc/modules'
section sh -c 'grep -i nvidia /proc/mounts'
section ls -la /usr/local/nvidia /usr/local/nvidia/bin /usr/local/nvidia/lib64
section sh -c 'for f in /usr/local/nvidia/version /usr/local/nvidia/kernel.release; do echo "== $f"; cat "$f"; done'
section sh -c 'command -v nvidia-smi nvidia-persistenced nvidia-uninstall nvidia-installer dkms modinfo lsmod systemctl'
section ls -la /var/log/nvidia-installer.log /usr/lib/nvidia /usr/share/doc/NVIDIA_GLX-1.0 /etc/modprobe.d
section sh -c 'ls /lib/modules/$(uname -r) 2>&1 | head -n 20; find / -xdev -name "nvidia*.ko*" 2>/dev/null | head -n 20'
section sh -c 'dpkg -S /usr/local/nvidia/bin/nvidia-smi "$(command -v nvidia-smi)"'
section cat /proc/1/comm
section sh -c 'ps -eo pid,comm,args 2>/dev/null | grep -i nvidia | grep -v grep'
section nvidia-smi --query-gpu=persistence_mode,driver_version,vbios_version,pci.bus_id --format=csv
section ls -la /proc/driver/nvidia /proc/driver/nvidia/gpus
section cat /proc/driver/nvidia/params
section sh -c 'cat /proc/driver/nvidia/gpus/*/information'
sidecar "$evidence" "hacking/capture_real_node.sh section 2: each '### COMMAND' heading is followed by that command's stdout and stderr as printed, then its exit status"
ls -la "$out"
