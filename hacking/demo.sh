#!/usr/bin/env bash
# make demo: a rolling driver upgrade (550 -> 580) of a simulated 8-node Slurm GPU fleet, window mode: a sliding window of 2
# after a canary of 1, through the rollout gate, with its ledger.
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
runs=$state/runs
ledger=$runs/$run_id
# A fresh fleet, a fresh ledger: an earlier demo's runs would give the planner their node durations (the node that hung
# last time, longest, would go first as the canary).
rm -rf "$runs" "$state/results" "$state/report"
cat > "$state/vars.yml" <<VARS
gpufleet_pin_file: $state/pin.yml
gpufleet_window: 2                  # a sliding window of 2 nodes, refilled as each node finishes
gpufleet_canary: 1                  # the first node goes alone and must pass before the window opens
gpufleet_max_fail_percentage: 50
gpufleet_run_dir: $runs
gpufleet_run_id: $run_id
gpufleet_results_dir: $results
gpufleet_gate_poll: 1
gpufleet_reboot_timeout: 30
gpufleet_drain_timeout: 60
# The simulated nodes: boot time of PID 1, and the Xid log the fleet writes.
gpufleet_boot_time_command: stat -c %Z /proc/1
node_validate_kernel_log_command: [sh, -c, "cat /var/lib/gpufleet-sim/xid.log 2>/dev/null; true"]
VARS

echo "== 3. ansible-playbook gpufleet.lifecycle.rolling_restart (window 2 after a canary of 1, max_fail_percentage 50)"
set +e
# forks: the window plus the hosts waiting at the gate (docs/rollout-policy.md).
# The fleet report callback: live progress lines here, report.{json,md,html}, junit.xml and metrics.prom at the end.
ANSIBLE_CALLBACKS_ENABLED=gpufleet.lifecycle.fleet_report GPUFLEET_REPORT_DIR=$state/report \
    ansible-playbook -i "$inventory" playbooks/rolling_restart.yml -f 8 -e "@$state/vars.yml" > "$state/rolling_restart.log" 2>&1
rc=$?
grep -E '→|fleet:' "$state/rolling_restart.log" | head -60 || true
set -e
echo "the gate's admissions and each node's final state, from the ledger ($ledger/ledger.jsonl):"
python3 - "$ledger/ledger.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], encoding='utf-8') as handle:
    for line in handle:
        event = json.loads(line)
        if event['node'] is None or event['to'] in ('admitted', 'done', 'rolled_back', 'quarantined', 'deferred', 'left_alone'):
            print('  %s %-7s %-12s -> %-12s %s' % (event['time'][11:19], event['node'] or 'run', event['from'], event['to'],
                                                  (event.get('reason') or '')[:100]))
PY

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
echo "ansible-playbook exited $rc (window mode: non-zero when the rollout paused - budget, pin fault, circuit breaker - or failed)."
echo "Ledger: $ledger/ledger.jsonl    State: $ledger/state.json"
echo "Report: $state/report/report.html (also report.json, report.md, junit.xml, metrics.prom)"
echo "Results (one JSON per node): $results"
echo "Full log: $state/rolling_restart.log    Stop the fleet: tests/sim/fleet --state-dir $state down"
