#!/bin/sh
# mmdebstrap --customize-hook for the simulated node image; $1 is the new root file system.
# Everything node-specific (sshd port, hardware, faults, the fake tools, the apt repository)
# is bind-mounted by tests/sim/fleet.py when a node starts; this only prepares the mount points.
set -eu
root=$1
here=$(dirname "$0")

# Only the local repository of dummy NVIDIA packages: nodes install nothing from the network.
rm -f "$root/etc/apt/sources.list"
mkdir -p "$root/etc/apt/sources.list.d" "$root/srv/gpufleet-repo"
echo 'deb [trusted=yes] file:/srv/gpufleet-repo ./' > "$root/etc/apt/sources.list.d/gpufleet-sim.list"
rm -rf "$root"/var/lib/apt/lists/*

# The boot step of every simulated boot.
install -m 0644 "$here/gpufleet-sim-boot.service" "$root/etc/systemd/system/gpufleet-sim-boot.service"
mkdir -p "$root/etc/systemd/system/sysinit.target.wants"
ln -sf ../gpufleet-sim-boot.service "$root/etc/systemd/system/sysinit.target.wants/gpufleet-sim-boot.service"

# Mount points for the per-node bind mounts.
mkdir -p "$root/usr/lib/gpufleet-sim/gpufleet_sim" "$root/etc/gpufleet-sim" "$root/root/.ssh" "$root/var/lib/gpufleet-sim"
chmod 0700 "$root/root/.ssh"
touch "$root/etc/ssh/sshd_config.d/gpufleet-node.conf"

# Units that have nothing to do in a container.
for unit in getty@tty1.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
