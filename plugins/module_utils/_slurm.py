# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers and rules for Slurm's node states, for the slurm_node module.

Pure functions, standard library only (no Ansible imports), Python 3.8+:

* ``check_node_name(name)`` accepts one plain Slurm node name and nothing a shell or a host list could expand;
* ``parse_show_node(text)`` reads one ``scontrol show node -o NAME`` line (Slurm 22.05 and later);
* ``parse_squeue_jobs(text)`` reads ``squeue -h -w NAME -o '%i|%u|%T|%j'``;
* ``classify_error(rc, stdout, stderr)`` names why a Slurm client failed (unknown node, controller unreachable);
* ``decide(node, state, ...)`` is the module's decision: which ``scontrol`` update, what to wait for, and when
  to leave a node alone (drained or down with a reason this collection did not set);
* ``wait_done(wait, node, previous)`` and ``describe_wait_timeout`` are the rules of the wait that follows;
* ``is_gpufleet_reason``, ``held_by_others``, ``drain_done``, ``resume_done``, ``reboot_done`` are the rules they use;
* ``declared_checkpoint(comment)``, ``parse_requeue_jobs(text)`` and ``requeue_choice(jobs, now, mode)``: which running jobs of
  a node a drain requeues (those whose declared checkpoint has passed: they restart from it, nothing lost).

``scontrol show node -o`` prints ``Key=value`` pairs separated by spaces, and some values hold spaces
themselves (``OS=Linux 6.1.0-26-amd64 #1 SMP ...``, ``Reason=gpufleet: drained for upgrade [root@2026-11-21T20:00:00]``).
A key is a ``Name=`` token that follows white space; the value runs to the next key.  ``Reason=`` is free text
that may itself look like ``key=value``; Slurm ends it with `` [user@time]``, which bounds it.
"""

import datetime
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._command import escape_controls, to_text

GPUFLEET_REASON_PREFIX = 'gpufleet:'

NODE_NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z')
SQUEUE_FORMAT = '%i|%u|%T|%j'
# The running jobs of a node with what a requeue needs: id, every node, GPUs per node (gres), start, comment (free text, last).
SQUEUE_REQUEUE_FORMAT = '%i|%N|%b|%S|%k'
# A job declares its next checkpoint in its comment: gpufleet.io/checkpoint=<ISO time> (docs/scheduler.md#jobs).
CHECKPOINT_KEY = 'gpufleet.io/checkpoint'
REQUEUE_MODES = ('never', 'checkpointed')
_CHECKPOINT_RE = re.compile(re.escape(CHECKPOINT_KEY) + r'=(\S+)')
# A job id as squeue prints it: 1234, an array task 1234_7, a heterogeneous job's component 1234+0.
_JOB_ID_RE = re.compile(r'^[0-9]+(?:[_+][0-9]+)?\Z')
_HOSTLIST_RE = re.compile(r'^([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)$')
_GRES_GPU_RE = re.compile(r'(?:^|[,/:])gpu(?::[^:,()]+)?:([0-9]+)')

_KEY_RE = re.compile(r'(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=')
_REASON_KEY_RE = re.compile(r'(?:^|(?<=\s))Reason=')
_REASON_SUFFIX_RE = re.compile(r'\s*\[([^\s\[\]@]*)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\](?=\s|\Z)')
_BASE_STATE_RE = re.compile(r'^([A-Z_]+)([*~#%$@^!-]*)\Z')
_FLAG_RE = re.compile(r'^[A-Z_]+\Z')
_EMPTY = frozenset(('', '(null)', 'None', 'n/a', 'N/A'))

# Suffixes of older Slurm releases and of sinfo's short states, as flags.
_SUFFIX_FLAGS = {
    '*': 'NOT_RESPONDING',
    '~': 'POWERED_DOWN',
    '#': 'POWERING_UP',
    '%': 'POWERING_DOWN',
    '$': 'MAINTENANCE',
    '@': 'REBOOT_REQUESTED',
    '^': 'REBOOT_ISSUED',
    '!': 'POWER_DOWN',
    '-': 'PLANNED',
}
# Base states that still have (or finish) work: a drained node in one of these is DRAINING.
_BUSY_STATES = frozenset(('MIXED', 'ALLOCATED', 'COMPLETING'))
REBOOT_FLAGS = frozenset(('REBOOT_REQUESTED', 'REBOOT_ISSUED'))


class SlurmParseError(ValueError):
    """The text is not what the Slurm client prints for the request."""


class SlurmWrongNodeError(SlurmParseError):
    """``scontrol show node NAME`` answered about another node."""


def check_node_name(name):
    """Return ``name`` when it is one plain Slurm node name; raise ValueError otherwise.

    Rejects shell metacharacters, white space, a leading ``-`` (an option to the client), host-list
    brackets and commas (several nodes), and names longer than 63 characters.
    """
    if not isinstance(name, str) or not NODE_NAME_RE.match(name):
        raise ValueError('invalid Slurm node name %r: give one node name of letters, digits, ".", "_" and "-", '
                         'starting with a letter or digit, at most 63 characters (no host lists, spaces or shell characters)' % (name,))
    return name


def _decode(text, what):
    if not isinstance(text, (str, bytes, bytearray)):
        raise SlurmParseError('%s must be str or bytes, not %s' % (what, type(text).__name__))
    return to_text(text)


def _fields(line):
    """``Key=value`` pairs of one line, values running to the next key (white space around them stripped)."""
    matches = list(_KEY_RE.finditer(line))
    fields = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        fields[match.group(1)] = line[match.end():end].strip()
    return fields


def _split_reason(line):
    """Cut ``Reason=... [user@time]`` out of the line: (rest of the line, raw reason, text, user, time) or None."""
    match = _REASON_KEY_RE.search(line)
    if match is None:
        return None
    rest = line[match.end():]
    suffix = _REASON_SUFFIX_RE.search(rest)
    if suffix is None:
        return None
    raw = rest[:suffix.end()].strip()
    text = rest[:suffix.start()].strip()
    return line[:match.start()] + ' ' + rest[suffix.end():], raw, text, suffix.group(1), suffix.group(2)


def parse_state(state):
    """``MIXED+DRAIN``, ``DOWN*+DRAIN`` ... -> (base_state, flags).  ``*`` and other suffixes become flags."""
    if not state:
        raise SlurmParseError('empty node state')
    parts = state.split('+')
    match = _BASE_STATE_RE.match(parts[0])
    if match is None:
        raise SlurmParseError('unreadable node state %r' % state)
    base = match.group(1)
    flags = []
    for part in parts[1:]:
        part_match = _BASE_STATE_RE.match(part)
        if part_match is None:
            raise SlurmParseError('unreadable node state %r' % state)
        flags.append(part_match.group(1))
        flags.extend(_SUFFIX_FLAGS[char] for char in part_match.group(2))
    flags.extend(_SUFFIX_FLAGS[char] for char in match.group(2))
    # Older releases print DRAINED/DRAINING/DRAIN as the base state.
    if base in ('DRAINED', 'DRAINING', 'DRAIN'):
        flags.append('DRAIN')
        base = 'MIXED' if base == 'DRAINING' else 'IDLE'
    unique = []
    for flag in flags:
        if flag not in unique:
            unique.append(flag)
    return base, unique


def drain_state(base_state, flags):
    """``none``, ``draining`` (DRAIN with work left: MIXED, ALLOCATED, COMPLETING) or ``drained``."""
    if 'DRAIN' not in flags:
        return 'none'
    if base_state in _BUSY_STATES or 'COMPLETING' in flags:
        return 'draining'
    return 'drained'


def _value(fields, key):
    value = fields.get(key)
    if value is None or value in _EMPTY:
        return None
    return value


def parse_show_node(text, name=None):
    """Parse one ``scontrol show node -o NAME`` line.

    Returns every ``Key=value`` field as printed, plus ``name``, ``state`` (raw ``State=``), ``base_state``,
    ``flags``, ``responding``, ``drain_state``, ``reason`` (without ``[user@time]``, control characters
    escaped), ``reason_user``, ``reason_time`` and ``boot_time`` (None where Slurm prints ``None``).
    Bytes that are not UTF-8 become ``\\xNN`` escapes.  With ``name``, a line about another node raises
    ``SlurmWrongNodeError``: the module acts only on the node it asked about.
    """
    text = _decode(text, 'scontrol output')
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise SlurmParseError('empty output: scontrol printed no node')
    if len(lines) > 1:
        raise SlurmParseError('expected one line of scontrol show node -o, got %d lines' % len(lines))
    line = lines[0].strip()
    if not line.startswith('NodeName='):
        raise SlurmParseError('not a line of scontrol show node -o: %r' % line[:200])
    reason = _split_reason(line)
    if reason is not None:
        line = reason[0]
    fields = _fields(line)
    result = dict(fields)
    reason_text = reason_user = reason_time = None
    if reason is not None:
        result['Reason'] = reason[1]
        reason_text, reason_user, reason_time = reason[2] or None, reason[3] or None, reason[4]
    else:
        reason_text = _value(fields, 'Reason')
    if not fields.get('NodeName'):
        raise SlurmParseError('node line without a NodeName: %r' % line[:200])
    if 'State' not in fields:
        raise SlurmParseError('node line without a State: %r' % line[:200])
    if name is not None and fields['NodeName'] != name:
        raise SlurmWrongNodeError('scontrol show node %s answered about node %s' % (name, escape_controls(fields['NodeName'][:200])))
    base, flags = parse_state(fields['State'])
    result.update(
        name=fields['NodeName'],
        state=fields['State'],
        base_state=base,
        flags=flags,
        responding='NOT_RESPONDING' not in flags,
        drain_state=drain_state(base, flags),
        reason=escape_controls(reason_text) if reason_text is not None else None,
        reason_user=reason_user,
        reason_time=reason_time,
        boot_time=_value(fields, 'BootTime'),
    )
    return result


def parse_squeue_jobs(text):
    """Jobs from ``squeue -h -w NAME -o '%i|%u|%T|%j'``: a list of {id, user, state, name}."""
    text = _decode(text, 'squeue output')
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.strip().split('|', 3)
        if len(parts) != 4 or not parts[0] or not parts[2]:
            raise SlurmParseError("not a line of squeue -o '%s': %r" % (SQUEUE_FORMAT, line[:200]))
        jobs.append({'id': parts[0], 'user': parts[1], 'state': parts[2], 'name': parts[3]})
    return jobs


def describe_jobs(jobs):
    """``12 (alice, train-llm, RUNNING), 13 (...)`` for messages; ``none`` for no jobs."""
    if not jobs:
        return 'none'
    return ', '.join('%s (%s, %s, %s)' % (job['id'], job['user'], job['name'], job['state']) for job in jobs)


def classify_error(rc, stdout, stderr):
    """Why a Slurm client failed: {'error': node_not_found|controller_unreachable|slurm_error, 'message': its words}."""
    message = ((stderr or '').strip() or (stdout or '').strip() or 'exit status %s and no output' % rc)
    lowered = message.lower()
    if re.search(r'node \S+ not found|invalid node name', lowered):
        error = 'node_not_found'
    elif re.search(r'unable to contact slurm controller|connection refused|connect failure|'
                   r'socket timed out|communication connection failure|zero bytes were transmitted', lowered):
        error = 'controller_unreachable'
    elif 'munge' in lowered or 'authentication' in lowered:
        error = 'authentication_failed'
    else:
        error = 'slurm_error'
    return {'error': error, 'message': message}


def is_gpufleet_reason(reason):
    """True when the reason was set by this collection (it starts with ``gpufleet:``)."""
    return bool(reason) and reason.strip().startswith(GPUFLEET_REASON_PREFIX)


def gpufleet_reason(reason):
    """The reason as the module sets it: prefixed with ``gpufleet:`` unless it already is."""
    reason = (reason or '').strip()
    if not reason:
        raise ValueError('a reason is required')
    if re.search(r'[\x00-\x1f\x7f]', reason):
        raise ValueError('the reason must be one line without control characters: %r' % reason)
    if is_gpufleet_reason(reason):
        return reason
    return '%s %s' % (GPUFLEET_REASON_PREFIX, reason)


def held_by_others(node):
    """True when the node is drained or down and its reason was not set by this collection (or it has none)."""
    held = 'DRAIN' in node['flags'] or node['base_state'] == 'DOWN'
    return held and not is_gpufleet_reason(node['reason'])


def drain_done(node):
    """The node is DRAINED: DRAIN flag and no work left."""
    return node['drain_state'] == 'drained'


def resume_done(node):
    """Resumed: no DRAIN flag, not DOWN, and the node responds."""
    return 'DRAIN' not in node['flags'] and node['base_state'] != 'DOWN' and node['responding']


def reboot_pending(node):
    """A reboot was requested or issued and has not completed."""
    return bool(REBOOT_FLAGS.intersection(node['flags']))


def reboot_done(node, boot_time_before):
    """The reboot completed: BootTime later than ``boot_time_before`` (ISO times), no REBOOT_* flag, responding."""
    if reboot_pending(node) or not node['responding'] or not node['boot_time']:
        return False
    return boot_time_before is None or node['boot_time'] > boot_time_before


# --------------------------------------------------------------------------- the module's decision

STATES = ('present', 'drained', 'resumed', 'rebooted')
WAITS = {
    'drained': 'DRAINED',
    'resumed': 'resumed (no DRAIN flag, responding)',
    'rebooted': 'rebooted (BootTime after %s, no REBOOT_* flag)',
}


def decide(node, state, reason=None, force_reason=False, nextstate='resume', replace_reason=False):
    """What slurm_node does with ``node`` (as ``parse_show_node`` returns it) to reach ``state``.

    ``reason`` is the reason as the module sets it (``gpufleet_reason``); required for ``drained`` and ``rebooted``.
    Returns ``{'update': scontrol arguments or [] (nothing to change), 'wait': None or the state to wait for
    (``drained``, ``resumed``, ``rebooted``), 'drained_by_others': bool, 'ours': bool, 'msg': None or why it
    leaves the node alone}``.

    A node drained or down whose reason this collection did not set (an admin's ``bad DIMM``, Slurm's
    ``Not responding``) is left alone - no update, no wait - unless ``force_reason``. A node this collection drained
    keeps its reason unless ``replace_reason`` (a quarantine saying why).
    """
    if state not in STATES:
        raise ValueError('unknown state %r: one of %s' % (state, ', '.join(STATES)))
    if state in ('drained', 'rebooted') and not reason:
        raise ValueError('a reason is required with state=%s' % state)
    name = node['name']
    others = held_by_others(node)
    decision = {'update': [], 'wait': None, 'drained_by_others': False, 'ours': is_gpufleet_reason(node['reason']), 'msg': None}
    if state == 'present':
        decision['drained_by_others'] = others
        return decision
    if others and not force_reason:
        decision['drained_by_others'] = True
        decision['msg'] = '%s is %s with reason %s set by others; left alone (force_reason=true acts anyway)' % (
            name, node['state'], escape_controls(repr(node['reason']), keep_newlines=False))
        return decision
    if state == 'drained':
        replace = force_reason or (replace_reason and decision['ours'])
        if 'DRAIN' not in node['flags'] or (replace and node['reason'] != reason):
            decision['update'] = ['update', 'NodeName=%s' % name, 'State=DRAIN', 'Reason=%s' % reason]
        decision['wait'] = 'drained'
    elif state == 'resumed':
        if not resume_done(node) and ('DRAIN' in node['flags'] or node['base_state'] == 'DOWN'):
            decision['update'] = ['update', 'NodeName=%s' % name, 'State=RESUME']
        decision['wait'] = 'resumed'
    else:
        if not reboot_pending(node):
            decision['update'] = ['reboot', 'ASAP', 'nextstate=%s' % nextstate.upper(), 'reason=%s' % reason, name]
        decision['wait'] = 'rebooted'
    return decision


def restore_after_timeout(previous, decision):
    """The scontrol arguments that put a node back as it was after a drain that ran out of time, [] when there is nothing to undo.

    Only a drain this call set is undone: a node that already had the DRAIN flag (a drain of an earlier run) stays drained.
    """
    if decision['update'] and 'DRAIN' not in previous['flags'] and previous['base_state'] != 'DOWN':
        return ['update', 'NodeName=%s' % previous['name'], 'State=RESUME']
    return []


def wait_done(wait, node, previous):
    """True when ``node`` reached what ``decide`` said to wait for; ``previous`` is the node before the update."""
    if wait == 'drained':
        return drain_done(node)
    if wait == 'resumed':
        return resume_done(node)
    if wait == 'rebooted':
        return reboot_done(node, previous['boot_time'])
    raise ValueError('nothing to wait for: %r' % (wait,))


def describe_wait(wait, previous):
    """What the wait waits for, in words: ``DRAINED``, ``resumed (...)``, ``rebooted (BootTime after ...)``."""
    what = WAITS[wait]
    return what % previous['boot_time'] if wait == 'rebooted' else what


def describe_wait_timeout(wait, node, previous, timeout, jobs):
    """The message of a wait that ran out: the node, what it did not reach, its state, the jobs still draining."""
    still = ''
    if node['drain_state'] == 'draining':
        still = ' (DRAINING, jobs still running: %s)' % describe_jobs(jobs)
    return escape_controls('%s: not %s after %s s; state %s%s; the node is left as it is' % (
        node['name'], describe_wait(wait, previous), timeout, node['state'], still))


# ------------------------------------------------------------------ requeue at a declared checkpoint

def timestamp(text):
    """An ISO time (Slurm's local ``2026-11-24T12:00:00``, or with a zone, ``Z`` too) to epoch seconds; None when not a time."""
    if not isinstance(text, str) or text.strip() in _EMPTY or text.strip() in ('Unknown', 'NONE'):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace('Z', '+00:00'))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.timestamp()


def declared_checkpoint(comment):
    """The next checkpoint a job declares (``gpufleet.io/checkpoint=<ISO time>`` in its comment) in epoch seconds, or None."""
    match = _CHECKPOINT_RE.search(comment or '')
    return timestamp(match.group(1)) if match else None


def expand_hostlist(text):
    """A Slurm host list (``gpu-[01-03,07],login1``) to names; one bracket group per name, as Slurm prints node lists."""
    names = []
    depth = 0
    part = ''
    parts = []
    for char in text or '':
        if char == ',' and depth == 0:
            parts.append(part)
            part = ''
            continue
        depth += char == '['
        depth -= char == ']'
        part += char
    parts.append(part)
    for part in (part.strip() for part in parts):
        if not part:
            continue
        match = _HOSTLIST_RE.match(part)
        if not match:
            names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(','):
            low, _dash, high = item.partition('-')
            if not low.isdigit() or (high and not high.isdigit()):
                raise SlurmParseError('unreadable Slurm host list %r' % text)
            for number in range(int(low), int(high or low) + 1):
                names.append('%s%0*d%s' % (prefix, len(low), number, suffix))
    return names


def gres_gpus(gres):
    """GPUs per node in a job's or node's gres (``gpu:8``, ``gres/gpu:h100:8``, ``gres:gpu:4,gres:nic:1``); 0 when none."""
    return sum(int(count) for count in _GRES_GPU_RE.findall(gres or ''))


def parse_requeue_jobs(text):
    """Jobs from ``squeue -h -w NAME -t RUNNING -o '%i|%N|%b|%S|%k'``: [{id, nodes (the host list as printed), gpus_per_node,
    start, checkpoint}] (epoch seconds or None). A heterogeneous job's component (``1234+0``) is its job ``1234`` (requeued
    whole, once). A checkpoint declared before the job (re)started is an old one (Slurm keeps the comment across a requeue):
    the job declares nothing until it declares a new one."""
    text = _decode(text, 'squeue output')
    jobs = []
    seen = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.strip().split('|', 4)
        if len(parts) != 5 or not _JOB_ID_RE.match(parts[0]):
            raise SlurmParseError("not a line of squeue -o '%s': %r" % (SQUEUE_REQUEUE_FORMAT, line[:200]))
        job_id = parts[0].split('+', 1)[0]
        if job_id in seen:
            continue
        seen.add(job_id)
        start, checkpoint = timestamp(parts[3]), declared_checkpoint(parts[4])
        if checkpoint is not None and start is not None and checkpoint < start:
            checkpoint = None
        jobs.append({'id': job_id, 'nodes': parts[1], 'gpus_per_node': gres_gpus(parts[2]), 'start': start, 'checkpoint': checkpoint})
    return jobs


def requeue_choice(jobs, now, mode):
    """The jobs a drain requeues now (``mode`` ``checkpointed``): those whose declared checkpoint is at or before ``now``
    (epoch seconds); ``never``: none. A job that declares nothing is waited for, never requeued."""
    if mode not in REQUEUE_MODES:
        raise ValueError('requeue must be one of %s, got %r' % (', '.join(REQUEUE_MODES), mode))
    if mode == 'never':
        return []
    return [job for job in jobs if job.get('checkpoint') is not None and job['checkpoint'] <= now]


def _iso(stamp):
    return datetime.datetime.fromtimestamp(stamp, tz=datetime.timezone.utc).isoformat() if stamp is not None else None


def requeue_record(job, now):
    """What a requeued job's record says (RV(requeued)): its id, nodes, GPUs (per-node gres times its nodes), the declared
    checkpoint, its start and when it was requeued (ISO times)."""
    try:
        count = len(expand_hostlist(job['nodes']))
    except SlurmParseError:
        count = 1
    return {'id': job['id'], 'nodes': job['nodes'], 'gpus': job['gpus_per_node'] * count, 'checkpoint': _iso(job.get('checkpoint')),
            'start': _iso(job.get('start')), 'at': _iso(now)}
