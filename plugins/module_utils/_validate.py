# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Is this node fit for service?  The verdict of gpufleet.lifecycle.node_validate, decided in one place.

Pure functions, standard library only (no Ansible imports), Python 3.8+:

* ``parse_nccl(text)`` reads the output of nccl-tests' ``all_reduce_perf`` (average bus bandwidth,
  out-of-bounds values, ``#wrong`` counts);
* ``evaluate(...)`` turns what the role gathered (the ``gpufleet`` facts, the ``drift_check`` result,
  the kernel log of this boot, the ``dcgm_diag`` ladder, the NCCL run) into
  ``{'passed': bool, 'checks': [{'name', 'passed', 'message'}], 'failed': [names]}``.

Each failed check's message names the GPU (index and PCI address) where one is at fault and quotes
the tool's own words.  A check that could not be verified fails: "not checked" is never "passed".
"""

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _nvidia_smi

# Kernel-log findings that make a node unfit: every Xid, a GPU fallen off the bus, a failed adapter init.
_NCCL_AVG_RE = re.compile(r'^#\s*Avg bus bandwidth\s*:\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)', re.MULTILINE)
_NCCL_OOB_RE = re.compile(r'^#\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)', re.MULTILINE)
_NCCL_ROW_RE = re.compile(r'^\s*\d+\s+\d+\s+\S+\s+\S+\s+-?\d+\s')
# nccl-tests prints its failures on stdout (src/common.h CUDACHECK / NCCLCHECK: "<host>: Test NCCL failure <file>:<line> '<words>'")
# and NCCL's last error after the run (src/util.cu writeErrors: "# error: <words>").
_NCCL_ERROR_RE = re.compile(r'^(?:\S+: Test (?:NCCL|CUDA) failure .*|# error: .*)$', re.MULTILINE)
# exit codes / messages of a command that is not installed (ansible.builtin.command reports rc 2 and [Errno 2])
_MISSING_MARKERS = ('No such file or directory', 'command not found', 'not found')

DIAG_LEVEL_COST = {1: 'seconds', 2: 'about 2 minutes', 3: '15 to 30 minutes', 4: '1 to 2 hours'}


class ValidationInputError(ValueError):
    """Input of the wrong shape (names the field)."""


def parse_nccl(text):
    """``{'avg_busbw': float or None, 'out_of_bounds': int or None, 'wrong': int, 'rows': int, 'error': str or None}`` of an
    all_reduce_perf run; ``error`` is the first failure line nccl-tests printed on stdout (CUDA or NCCL failure, NCCL's last error)."""
    text = text or ''
    avg = _NCCL_AVG_RE.search(text)
    error = _NCCL_ERROR_RE.search(text)
    oob = _NCCL_OOB_RE.search(text)
    wrong = 0
    rows = 0
    for line in text.splitlines():
        if not _NCCL_ROW_RE.match(line):
            continue
        rows += 1
        cells = line.split()
        # size count type redop root time algbw busbw #wrong time algbw busbw #wrong
        for position in (8, 12):
            if position < len(cells) and cells[position].isdigit():
                wrong += int(cells[position])
    return {
        'avg_busbw': float(avg.group(1)) if avg else None,
        'out_of_bounds': int(oob.group(1)) if oob else None,
        'wrong': wrong,
        'rows': rows,
        'error': error.group(0).strip() if error else None,
    }


def _check(name, passed, message):
    return {'name': name, 'passed': bool(passed), 'message': message}


def _gpu_label(gpu):
    return 'GPU %s (%s%s)' % (gpu.get('index'), gpu.get('pci_bus_id') or 'unknown PCI address',
                              (', ' + gpu['uuid']) if gpu.get('uuid') else '')


def _pci_key(address):
    """``00000000:18:00.0`` / ``0000:18:00`` / ``18:00.0`` -> ``18:00`` (bus:device, lower case)."""
    if not address:
        return None
    parts = str(address).lower().split(':')
    if len(parts) < 2:
        return None
    return '%s:%s' % (parts[-2], parts[-1].split('.')[0])


def _gpu_by_pci(facts, address):
    key = _pci_key(address)
    for gpu in facts.get('gpus') or []:
        if key and _pci_key(gpu.get('pci_bus_id')) == key:
            return gpu
    return None


def _first_line(text):
    lines = [line.strip() for line in str(text or '').splitlines() if line.strip()]
    return lines[0] if lines else ''


def _health(facts):
    if facts.get('health') == 'ok':
        return _check('health', True, 'nvidia-smi reads %d GPU(s), driver %s' % (facts.get('gpu_count') or 0, facts.get('driver_version')))
    return _check('health', False, 'node is %s (%s): %s' % (facts.get('health'), facts.get('health_reason'),
                                                            (facts.get('health_message') or '').strip()))


def _drift_message(component, entry):
    if isinstance(entry, dict) and 'expected' not in entry:
        # per-GPU components (vbios, gsp_firmware): {index: {model, uuid, expected, actual}}
        parts = []
        for index in sorted(entry, key=lambda key: int(key) if str(key).isdigit() else str(key)):
            value = entry[index] or {}
            parts.append('GPU %s (%s%s): %s expected %s, actual %s' % (
                index, value.get('model') or 'unknown model', (', ' + value['uuid']) if value.get('uuid') else '',
                component, value.get('expected'), value.get('actual')))
        return '; '.join(parts)
    entry = entry or {}
    return '%s: expected %s, actual %s%s' % (component, entry.get('expected'), entry.get('actual'),
                                             (' (%s)' % entry['source']) if entry.get('source') else '')


def _pin(drift):
    status = drift.get('status')
    if drift.get('failed') and not status:
        return _check('pin', False, 'drift_check failed: %s' % (drift.get('msg') or 'no message'))
    if status == 'in_sync':
        return _check('pin', True, 'every pinned component reads the pin (%s)' % ', '.join(drift.get('checked') or []))
    if status == 'drifted':
        drifted = drift.get('drift') or {}
        return _check('pin', False, 'off the pin: ' + '; '.join(_drift_message(name, drifted[name]) for name in sorted(drifted)))
    if status == 'broken':
        return _check('pin', False, 'not checked: the node is broken (%s)' % (drift.get('health_reason') or 'see the health check'))
    return _check('pin', False, 'nothing pinned could be checked on this node (status %s)' % status)


def _gpu_count(facts, expected):
    actual = facts.get('gpu_count') or 0
    if actual == expected:
        return _check('gpu_count', True, '%d GPU(s), as before' % actual)
    message = 'nvidia-smi lists %d GPU(s), %d before' % (actual, expected)
    attached = facts.get('attached_gpus')
    if attached is not None and attached != actual:
        message += ' (attached_gpus %s)' % attached
    return _check('gpu_count', False, message)


def _xid(facts, kernel_log):
    rc = kernel_log.get('rc')
    if kernel_log.get('skipped'):
        return None
    if rc not in (0, None) or (rc is None and kernel_log.get('failed')):
        return _check('xid', False, 'could not read the kernel log of this boot (rc %s): %s' % (
            rc, _first_line(kernel_log.get('stderr')) or _first_line(kernel_log.get('msg'))))
    found = _nvidia_smi.find_kernel_gpu_errors(kernel_log.get('stdout') or '')
    if not found:
        return _check('xid', True, 'no Xid or GPU error in the kernel log since this boot')
    parts = []
    for event in found:
        gpu = _gpu_by_pci(facts, event.get('pci'))
        where = _gpu_label(gpu) if gpu else 'GPU at PCI %s' % (event.get('pci') or 'unknown')
        what = 'Xid %s' % event['xid'] if event.get('xid') is not None else event['kind'].replace('_', ' ')
        parts.append('%s: %s: %s' % (where, what, event['line'].splitlines()[-1]))
    return _check('xid', False, '; '.join(parts))


def _service(facts, unit):
    service = (facts.get('services') or {}).get(unit) or {}
    return service.get('active'), service.get('sub')


def _no_systemd(facts):
    """The facts say the node has no systemctl (``systemd: false``): every unit reads null, which says nothing about the
    daemons; the checks then go by what nvidia-smi reports."""
    return facts.get('systemd') is False


def _unit_words(facts, unit):
    """How the unit reads, for a message: ``active``, ``inactive (dead)``, ``not installed``, or that there is no systemd."""
    if _no_systemd(facts):
        return 'no systemd to ask about %s' % unit
    active, sub = _service(facts, unit)
    return '%s is %s%s' % (unit, active or 'not installed', (' (%s)' % sub) if sub else '')


def _fabric_states(facts):
    """(GPUs that report a fabric state, messages of those whose state is not Completed / status not Success)."""
    reported = []
    bad = []
    for gpu in facts.get('gpus') or []:
        fabric = gpu.get('fabric') or {}
        state = fabric.get('state')
        if state is None:
            continue
        reported.append(gpu)
        if state != 'Completed' or (fabric.get('status') not in (None, 'Success')):
            bad.append('%s: fabric state %s, status %s' % (_gpu_label(gpu), state, fabric.get('status')))
    return reported, bad


def _fabric(facts):
    """Fabric Manager on an NVSwitch system: its systemd unit active; on a node without systemd, nvidia-smi's per-GPU fabric
    state (Completed on every GPU that reports one, and at least one reports it), never failed only for the missing systemctl."""
    if not (facts.get('nvswitch_count') or 0):
        return []
    checks = []
    count = facts['nvswitch_count']
    reported, bad = _fabric_states(facts)
    active, sub = _service(facts, 'nvidia-fabricmanager')
    if active == 'active':
        checks.append(_check('fabric_manager', True, 'nvidia-fabricmanager is active (%d NVSwitch)' % count))
    elif _no_systemd(facts) and reported and not bad:
        checks.append(_check('fabric_manager', True, 'no systemd to ask about nvidia-fabricmanager; nvidia-smi reports fabric state '
                                                     'Completed on every GPU (%d NVSwitch)' % count))
    elif _no_systemd(facts):
        checks.append(_check('fabric_manager', False, 'no systemd to ask about nvidia-fabricmanager and %s: cannot tell that Fabric '
                                                      'Manager runs on an NVSwitch system (%d NVSwitch)' % (
                                                          'nvidia-smi reports no fabric state' if not reported else 'not every GPU '
                                                          'reports fabric state Completed', count)))
    else:
        checks.append(_check('fabric_manager', False, 'nvidia-fabricmanager is %s%s on an NVSwitch system (%d NVSwitch)' % (
            active or 'not installed', (' (%s)' % sub) if sub else '', count)))
    if bad:
        checks.append(_check('fabric_state', False, '; '.join(bad)))
    elif facts.get('health') == 'ok':
        checks.append(_check('fabric_state', True, 'fabric state Completed on every GPU that reports one'))
    else:
        checks.append(_check('fabric_state', False, 'not checked: the node is broken (health check)'))
    return checks


def _persistence_modes(facts):
    """``[(gpu, 'Enabled'|'Disabled'|None)]`` as nvidia-smi reports each GPU's persistence mode (the facts' gpus[]); when no
    GPU carries one, the node-wide ``persistence_mode`` (Enabled: every GPU; Disabled: some GPU) stands for all of them."""
    gpus = facts.get('gpus') or []
    modes = [(gpu, gpu.get('persistence_mode')) for gpu in gpus]
    node_wide = facts.get('persistence_mode')
    if not any(mode for dummy, mode in modes) and node_wide in ('Enabled', 'Disabled'):
        return [(gpu, node_wide) for gpu in gpus] or [({'index': 'any'}, node_wide)]
    return modes


def _persistenced(facts):
    """Persistence mode: what nvidia-smi reports per GPU first, the nvidia-persistenced unit as one source among others.

    Passes when every GPU reports Enabled (whatever keeps it: nvidia-persistenced with or without systemd, or nvidia-smi -pm 1),
    or when the unit is active and no GPU reports Disabled; fails naming the GPUs that report Disabled, and when neither
    nvidia-smi nor the unit answers (a node without systemd is never failed only because systemctl is missing, nor passed
    blindly)."""
    modes = _persistence_modes(facts)
    disabled = [gpu for gpu, mode in modes if mode == 'Disabled']
    active, dummy = _service(facts, 'nvidia-persistenced')
    unit = _unit_words(facts, 'nvidia-persistenced')
    if disabled:
        return _check('persistenced', False, 'persistence mode is Disabled on %s (nvidia-smi); %s' % (
            ', '.join(_gpu_label(gpu) for gpu in disabled), unit))
    if modes and all(mode == 'Enabled' for dummy, mode in modes):
        return _check('persistenced', True, 'persistence mode Enabled on every GPU (%d, nvidia-smi); %s' % (len(modes), unit))
    if active == 'active':
        unknown = [gpu for gpu, mode in modes if mode is None]
        return _check('persistenced', True, 'nvidia-persistenced is active%s' % (
            '; nvidia-smi reports no persistence mode for %d GPU(s)' % len(unknown) if unknown else ''))
    unknown = [gpu for gpu, mode in modes if mode is None]
    what = ('nvidia-smi reports no persistence mode for %s' % ', '.join(_gpu_label(gpu) for gpu in unknown) if unknown
            else 'nvidia-smi lists no GPU')
    return _check('persistenced', False, 'cannot confirm persistence mode: %s and %s' % (what, unit))


def _diag_failures(result, facts):
    parts = []
    gpus = dict((gpu.get('index'), gpu) for gpu in facts.get('gpus') or [])
    for failure in result.get('failures') or []:
        gpu = gpus.get(failure.get('gpu'))
        where = _gpu_label(gpu) if gpu else ('GPU %s' % failure['gpu'] if failure.get('gpu') is not None else 'system')
        parts.append('%s: %s: %s' % (where, failure.get('test'), (failure.get('message') or '').strip()))
    return '; '.join(parts)


def _diag(level, result, facts):
    name = 'dcgm_diag_r%s' % level
    if result is None or result.get('skipped') and result.get('ladder_stopped'):
        return _check(name, False, 'not run: an earlier level of the ladder failed')
    if result.get('skipped'):
        return _check(name, False, 'not run: %s' % (result.get('msg') or result.get('skip_reason') or 'skipped'))
    if 'passed' not in result:
        return _check(name, False, 'dcgmi diag -r %s could not run (%s): %s' % (
            level, result.get('reason') or 'failed', (result.get('msg') or '').strip()))
    if result['passed']:
        summary = result.get('summary') or {}
        return _check(name, True, 'dcgmi diag -r %s passed (%s pass, %s skip, %s warn)' % (
            level, summary.get('pass', 0), summary.get('skip', 0), summary.get('warn', 0)))
    return _check(name, False, 'dcgmi diag -r %s failed: %s' % (level, _diag_failures(result, facts) or 'see the warnings'))


def _nccl(result, min_busbw):
    text = (result.get('stdout') or '') + '\n' + (result.get('stderr') or '')
    message = result.get('msg') or ''
    if result.get('rc') == 127 and not (result.get('stdout') or '').strip() or \
            result.get('rc') == 2 and any(marker in message + text for marker in _MISSING_MARKERS):
        return _check('nccl', True, 'skipped: nccl-tests all_reduce_perf is not installed')
    parsed = parse_nccl(result.get('stdout'))
    if result.get('rc') not in (0, None):
        return _check('nccl', False, 'all_reduce_perf failed (rc %s): %s' % (
            result.get('rc'), parsed['error'] or _first_line(result.get('stderr')) or _first_line(message)))
    if parsed['avg_busbw'] is None:
        return _check('nccl', False, 'all_reduce_perf printed no "Avg bus bandwidth" line')
    if parsed['wrong'] or parsed['out_of_bounds']:
        return _check('nccl', False, 'all_reduce_perf found wrong results (#wrong %d, out of bounds values %s)' % (
            parsed['wrong'], parsed['out_of_bounds']))
    if min_busbw and parsed['avg_busbw'] < float(min_busbw):
        return _check('nccl', False, 'all_reduce_perf average bus bandwidth %.3f GB/s is below the threshold %s GB/s' % (
            parsed['avg_busbw'], min_busbw))
    return _check('nccl', True, 'all_reduce_perf average bus bandwidth %.3f GB/s%s' % (
        parsed['avg_busbw'], (' (threshold %s GB/s)' % min_busbw) if min_busbw else ''))


def ladder_entries(result, levels):
    """The ladder of a ``dcgm_diag levels=...`` result: its ``ladder``; when the module could not start it (dcgmi missing),
    the first level carries the module's answer and the others were not run."""
    if isinstance(result.get('ladder'), list):
        return result['ladder']
    levels = list(levels or [1])
    return [{'level': levels[0], 'result': result}] + [{'level': level, 'result': None} for level in levels[1:]]


def evaluate(facts, drift=None, expected_gpu_count=None, kernel_log=None, diag=None, nccl=None, nccl_min_busbw=0,
             persistenced=True, diag_levels=None):
    """The verdict.  ``diag`` is a list of ``{'level': n, 'result': dcgm_diag result or None}`` in ladder order, or the
    result of ``dcgm_diag levels=diag_levels`` (:func:`ladder_entries`); ``None`` for an input means that check is not wanted."""
    if isinstance(diag, dict):
        diag = ladder_entries(diag, diag_levels)
    if not isinstance(facts, dict):
        raise ValidationInputError('facts must be the gpufleet facts (a mapping), got %s' % type(facts).__name__)
    checks = [_health(facts)]
    if drift is not None:
        if not isinstance(drift, dict):
            raise ValidationInputError('drift must be a drift_check result (a mapping)')
        checks.append(_pin(drift))
    if expected_gpu_count not in (None, ''):
        try:
            expected = int(expected_gpu_count)
        except (TypeError, ValueError):
            raise ValidationInputError('expected_gpu_count must be a number, got %r' % (expected_gpu_count,))
        checks.append(_gpu_count(facts, expected))
    if kernel_log is not None:
        xid = _xid(facts, kernel_log)
        if xid:
            checks.append(xid)
    checks.extend(_fabric(facts))
    if persistenced:
        checks.append(_persistenced(facts))
    for entry in diag or []:
        checks.append(_diag(entry.get('level'), entry.get('result'), facts))
    if nccl is not None:
        checks.append(_nccl(nccl, nccl_min_busbw))
    failed = [check['name'] for check in checks if not check['passed']]
    return {'passed': not failed, 'checks': checks, 'failed': failed,
            'message': 'fit for service' if not failed else '; '.join(
                '%s: %s' % (check['name'], check['message']) for check in checks if not check['passed'])}
