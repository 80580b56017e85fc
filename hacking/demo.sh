#!/usr/bin/env bash
# make demo: a rolling driver upgrade (550 -> 580) of a simulated 8-node Slurm GPU fleet, batch mode with a canary of 1.
# gpu-03 fails DCGM on the new driver only (rolled back), gpu-05 never returns from its reboot (quarantined),
# gpu-07 was drained by an admin (left alone). Needs root (podman nodes, Slurm daemons), like make test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
state=${GPUFLEET_DEMO_STATE:-$root/build/demo}
fleet() { tests/sim/fleet --state-dir "$state" "$@"; }

# This checkout as gpufleet.lifecycle.
mkdir -p build/collections/ansible_collections/gpufleet
ln -sfn ../../../.. build/collections/ansible_collections/gpufleet/lifecycle
export ANSIBLE_COLLECTIONS_PATH="$root/build/collections" ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_RETRY_FILES_ENABLED=False

echo "== 1. a fresh simulated fleet: 8 H100 nodes on driver 550, real Slurm"
fleet down >/dev/null 2>&1 || true
inventory=$(fleet up --nodes 8 --scheduler slurm | tail -n 1)
slurm_conf=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["all"]["vars"]["gpufleet_slurm_environment"]["SLURM_CONF"])' "$inventory")

echo "== 2. the faults: gpu-03 fails DCGM on 580 only, gpu-05 hangs on reboot, gpu-07 drained by an admin"
fleet fault gpu-03 diag_fail branch=580 gpu=2 >/dev/null
fleet fault gpu-05 reboot_hang >/dev/null
SLURM_CONF=$slurm_conf scontrol update NodeName=gpu-07 State=DRAIN Reason="admin: fan replacement"

run_id=demo-$(date -u +%Y%m%dT%H%M%SZ)
results=$state/results/$run_id
cat > "$state/pin.yml" <<'PIN'
# The new pin: driver 580 with its Fabric Manager, container toolkit 1.17, DCGM 4.
driver: 580.65.06
fabric_manager: 580.65.06
container_toolkit: 1.17.0
dcgm: 4.1.0
PIN
cat > "$state/vars.yml" <<VARS
gpufleet_pin_file: $state/pin.yml
gpufleet_serial: [1, 3, 4]          # a canary of 1, then 3, then 4
gpufleet_max_fail_percentage: 50
gpufleet_run_id: $run_id
gpufleet_results_dir: $results
gpufleet_reboot_timeout: 30
gpufleet_drain_timeout: 60
# The simulated nodes: boot time of PID 1, and the Xid log the fleet writes.
gpufleet_boot_time_command: stat -c %Z /proc/1
node_validate_kernel_log_command: [sh, -c, "cat /var/lib/gpufleet-sim/xid.log 2>/dev/null; true"]
VARS

echo "== 3. ansible-playbook gpufleet.lifecycle.rolling_restart (batches [1, 3, 4], max_fail_percentage 50)"
set +e
ansible-playbook -i "$inventory" playbooks/rolling_restart.yml -e "@$state/vars.yml" | tee "$state/rolling_restart.log" \
    | grep -E '^(PLAY|TASK \[gpufleet.lifecycle.node_upgrade : (Print|Fail))|^ +"gpu-|rollout stops|^gpu-..  *:'
rc=${PIPESTATUS[0]}
set -e

echo "== 4. each node's result"
python3 - "$results" <<'PY'
import json, os, sys
folder = sys.argv[1]
for name in sorted(os.listdir(folder)):
    with open(os.path.join(folder, name), encoding='utf-8') as handle:
        result = json.load(handle)
    before, after = result['versions_before'].get('driver'), (result['versions_after'] or {}).get('driver')
    print('%-7s %-12s %-10s %s -> %s  %ss  %s' % (result['node'], result['state'], result['phase'], before, after,
                                                 result['total_seconds'], result['reason'][:110]))
PY
echo "Slurm:"
SLURM_CONF=$slurm_conf sinfo -N -o '%N %T %E' | sed 's/^/  /'
echo
echo "ansible-playbook exited $rc (nodes rolled back or quarantined count as failed)."
echo "Results (one JSON per node): $results"
echo "Full log: $state/rolling_restart.log    Stop the fleet: tests/sim/fleet --state-dir $state down"
