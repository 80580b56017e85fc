# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated fleet's fault table: every fault, its settings (type, default) and what it does, in one place.

Everyone who needs a fault's name, settings or defaults reads them here:

* ``fleet fault NODE NAME key=value ...`` (tests/sim/fleet_faults.py) validates and completes the settings with
  :func:`parse_settings` before it writes ``faults.json``;
* the tools inside a node read ``faults.json`` through ``state.load_faults``, which completes it with
  :func:`apply_defaults` (the module is bind-mounted into every node with the rest of ``gpufleet_sim``);
* the "Faults" table of tests/sim/README.md is printed from :data:`TABLE` by tests/sim/render_fault_table.py
  (tests/unit/sim/test_fault_table.py fails when the README and the table differ).

So a new fault, a new setting or a changed default is one edit here. Standard library only; Python 3.8+.
"""

import collections

# Xid 79: "GPU has fallen off the bus"; the xid fault with it also makes the GPU lost (state.lost_gpus).
XID_FALLEN_OFF_BUS = 79
# nccl_slow without busbw: the bus bandwidth saturates at the profile's peak divided by this ("a tenth").
NCCL_SLOW_DEFAULT_DIVISOR = 10.0


class FaultError(ValueError):
    """A fault request that cannot be applied."""


class Setting(collections.namedtuple('Setting', 'name kind default doc choices above derive')):
    """One ``key=value`` of a fault.

    ``kind``: int, float or str (what ``key=value`` is converted with); ``default``: the value when the key is not
    given (None: no default, the key is optional); ``doc``: the README's words for it; ``choices``: the values it
    accepts (empty: any); ``above``: a number the value must be above; ``derive``: a function (settings with the
    defaults applied) -> the value when the key is not given, for a default that depends on another setting.
    """

    __slots__ = ()

    def __new__(cls, name, kind, default=None, doc='', choices=(), above=None, derive=None):
        return super(Setting, cls).__new__(cls, name, kind, default, doc, tuple(choices), above, derive)


Fault = collections.namedtuple('Fault', 'name settings description')


def _diag_test(settings):
    return 'software' if int(settings['level']) <= 1 else 'memory'


# The faults, in the README's order.
TABLE = (
    Fault('diag_fail', (
        Setting('level', int, 1, 'fails at this level and above'),
        Setting('test', str, doc='default `memory` for level >= 2, `software` for 1', derive=_diag_test),
        Setting('gpu', int, 0),
        Setting('branch', int, doc='optional: fails only while a driver of that branch is loaded'),
    ), '`dcgmi diag` reports that test failed on that GPU with a real DCGM message'),
    Fault('reboot_hang', (), 'the next boot never comes back: sshd is stopped and masked (the node stays unreachable)'),
    Fault('slow_boot', (
        Setting('seconds', int, 30),
    ), 'every boot takes that much longer before sshd starts (a large server\'s POST and memory training); uneven '
       'per-node durations for `benchmarks/makespan.py`'),
    Fault('fm_fail', (
        Setting('mismatch', str, doc='optional: a Fabric Manager version'),
    ), '`nvidia-fabricmanager` fails to start; with `mismatch=550.127.05` the Fabric Manager reads as that version (left '
       'on another branch than the driver) and fails with the real `driver interface version ... don\'t match with driver '
       'version ...` message unless that driver is loaded'),
    Fault('dpkg_fail', (
        Setting('package', str, doc='default: any NVIDIA package'),
    ), 'that package\'s `preinst` fails, so `dpkg`/`apt` fail mid-install'),
    Fault('dkms_fail', (
    ), 'the fake `dkms` fails to build: after a reboot into a kernel without the module, `nvidia-smi` cannot communicate with '
       'the driver'),
    Fault('xid', (
        Setting('gpu', int, 0),
        Setting('xid', int, XID_FALLEN_OFF_BUS),
    ), 'an Xid line in the kernel log; Xid 79 also makes the GPU lost (`GPU has fallen off the bus`)'),
    Fault('long_job', (
        Setting('seconds', int, 3600),
    ), 'a scheduler job or pod that holds the node (Slurm: an `sbatch` job on the node; Kubernetes: a pod on it)'),
    Fault('dpkg_lock', (
        Setting('seconds', int, 30),
    ), 'a process named `unattended-upgr` takes `/var/lib/dpkg/lock-frontend` and then `/var/lib/dpkg/lock` the way apt '
       'does (`open(O_RDWR|O_CREAT|O_NOFOLLOW, 0640)` and an fcntl `F_SETLK` write lock on the whole file) and holds them '
       '`seconds`, as unattended-upgrades does on real fleets: `dpkg` fails with `dpkg frontend lock was locked by another '
       'process with pid N`, `apt-get` waits up to its `DPkg::Lock::Timeout`'),
    Fault('gpu_lost', (
        Setting('gpu', int, 0),
    ), 'the next boot does not find that GPU: `nvidia-smi` and `dcgmi` show one GPU less (the boot step records '
       '`absent_gpus` in `boot.json`) until a boot without the fault'),
    Fault('nccl_slow', (
        Setting('busbw', float, doc='GB/s, default a tenth of the profile\'s', above=0),
        Setting('branch', int, doc='optional: only while a driver of that branch is loaded'),
    ), '`all_reduce_perf` runs, but its bus bandwidth saturates at `busbw` instead of the profile\'s (as with NVLink down '
       'and the traffic over PCIe)'),
    Fault('nccl_fail', (
        Setting('error', str, 'system', choices=('cuda', 'system', 'internal', 'invalid_argument', 'invalid_usage', 'remote')),
        Setting('branch', int, doc='optional'),
    ), '`all_reduce_perf` fails setting up its communicators with nccl-tests\' own line, `<node>: Test NCCL failure '
       'common.cu:1279 \'unhandled system error (run with NCCL_DEBUG=INFO for details) / \'` then ` .. <node> pid N: Test '
       'failure common.cu:1100`, on stdout, exit 3'),
    Fault('gpu_held', (
        Setting('gpu', int, 0),
        Setting('seconds', int, 3600),
    ), 'a process opens `/dev/nvidiactl` and `/dev/nvidia<gpu>` and keeps them open, as a job does: `/proc/PID/fd`, '
       '`fuser` and `lsof` show it, so `driver_reload` refuses to unload the driver and names it; the process ends after '
       '`seconds`, at `fleet fault NODE clear`, or with the next reboot (it does not come back, whatever `faults.json` says)'),
)
FAULTS = collections.OrderedDict((fault.name, fault) for fault in TABLE)
KIND_NAMES = {int: 'integer', float: 'number', str: 'text'}


def names():
    """The fault names, sorted."""
    return sorted(FAULTS)


def settings_of(name):
    """``{key: Setting}`` of fault ``name`` (FaultError for an unknown fault)."""
    if name not in FAULTS:
        raise FaultError('unknown fault %s; faults: %s' % (name, ', '.join(names())))
    return collections.OrderedDict((setting.name, setting) for setting in FAULTS[name].settings)


def defaults(name):
    """``{key: default}`` of fault ``name``: the settings that have a fixed default ({} for an unknown fault)."""
    if name not in FAULTS:
        return {}
    return dict((setting.name, setting.default) for setting in FAULTS[name].settings if setting.default is not None)


def default(name, key):
    """The default of setting ``key`` of fault ``name`` (None when it has none)."""
    return defaults(name).get(key)


def kind_of(key):
    """The type of setting ``key`` (int, float, str), whichever fault has it; None for a key no fault has."""
    for fault in TABLE:
        for setting in fault.settings:
            if setting.name == key:
                return setting.kind
    return None


def apply_defaults(name, settings):
    """``settings`` of fault ``name`` completed with the table's defaults (a new dict; derived defaults too).

    A derived default fills a key that is missing or empty, from the other settings (after their defaults)."""
    merged = defaults(name)
    merged.update(settings or {})
    for setting in FAULTS[name].settings if name in FAULTS else ():
        if setting.derive is not None and not merged.get(setting.name):
            merged[setting.name] = setting.derive(merged)
    return merged


def coerce(settings):
    """Setting values written as text (a hand-written faults.json) converted to their type where they read as one;
    other values are left as they are (the node's tools read what they can)."""
    out = {}
    for key, value in settings.items():
        kind = kind_of(key)
        if kind is int and isinstance(value, str) and value.strip().lstrip('-').isdigit():
            value = int(value.strip())
        elif kind is float and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        out[key] = value
    return out


def parse_settings(name, arguments):
    """``['level=3', 'gpu=2']`` -> ``{'level': 3, 'gpu': 2, ...}`` for fault ``name``, checked, defaults applied
    (what ``fleet fault`` writes to faults.json)."""
    known = settings_of(name)
    given = {}
    for argument in arguments:
        key, separator, value = argument.partition('=')
        if not separator or key not in known:
            raise FaultError('fault %s takes %s, got %r' % (name, ', '.join('%s=' % k for k in known) or 'no settings', argument))
        setting = known[key]
        try:
            given[key] = setting.kind(value)
        except ValueError:
            raise FaultError('fault %s: %s must be a %s, got %r' % (name, key, setting.kind.__name__, value))
    result = apply_defaults(name, given)
    for key, setting in known.items():
        if key not in result:
            continue
        if setting.choices and result[key] not in setting.choices:
            raise FaultError('fault %s: %s must be one of %s, got %r' % (name, key, ', '.join(setting.choices), result[key]))
        if setting.above is not None and result[key] <= setting.above:
            raise FaultError('fault %s: %s must be above %s, got %r' % (name, key, setting.above, result[key]))
    return result


# --------------------------------------------------------------------------- the README's table

def literal(value):
    """A default as the README writes it: text in backticks, numbers bare."""
    return '`%s`' % value if isinstance(value, str) else str(value)


def describe_setting(setting):
    """The README's words for one setting: ``\\`level\\` (integer, default 1: fails at this level and above)``."""
    words = KIND_NAMES.get(setting.kind, setting.kind.__name__)
    if setting.default is not None:
        words += ', default %s' % literal(setting.default)
        if setting.doc:
            words += ': ' + setting.doc
    elif setting.doc:
        words += ', ' + setting.doc
    if setting.choices:
        words += '; one of %s' % ', '.join(literal(choice) for choice in setting.choices)
    return '`%s` (%s)' % (setting.name, words)


def markdown_rows():
    """The README's fault table (header and one row per fault), as lines without newlines."""
    lines = ['| fault | settings | effect |', '| --- | --- | --- |']
    for fault in TABLE:
        keys = ', '.join(describe_setting(setting) for setting in fault.settings) or '-'
        cells = ['`%s`' % fault.name, keys, fault.description]
        lines.append('| %s |' % ' | '.join(cell.replace('|', '\\|') for cell in cells))
    return lines
