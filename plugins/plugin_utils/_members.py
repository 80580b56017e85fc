# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controllers of one run (its members): who they are, which are alive, which nodes a dead one holds.

Several controllers run one rollout together: AWX job slices of one job, or ``ansible-playbook --limit`` shards started by
hand with the same ``gpufleet_run_id``.  Each is a member of the run, kept in the ledger's ``members`` document
(``_ledger.RunLedger.join``, ``heartbeat``, ``leave``) with a heartbeat its keeper process renews while its
``ansible-playbook`` lives.  Pure: no I/O, no clock (``now`` is epoch seconds, ``alive_pid`` is injected).

A member is alive while it has not left and its heartbeat is younger than ``stale`` seconds; on the host it ran on, a
member whose process is gone is dead at once (the same rule as the fleet lock's).  A node in flight records the member
that admitted it (its record's ``member``): another member never takes it while that one is alive, and once it is dead
the node is *held by a dead member* until a rerun of its controller (or any member whose inventory has it) resumes it.
"""

from __future__ import annotations

MEMBERS_DOC = 'members'


def member_id(host, pid, job=None):
    """A member's name: ``awx-job-<id>@<host>:<pid>`` for an AWX job, else ``<host>:<pid>``."""
    name = '%s:%s' % (host, pid)
    return 'awx-job-%s@%s' % (job, name) if job not in (None, '') else name


def record(holder, now, hosts=0, job=None):
    """A new member's record from its fleet-lock holder identity (``_ledger.holder_identity``)."""
    return {'host': holder.get('host'), 'pid': holder.get('pid'), 'pid_start': holder.get('pid_start'), 'joined': now,
            'heartbeat': now, 'left': None, 'hosts': int(hosts or 0), 'job': None if job in (None, '') else str(job)}


def alive(member, now, stale, here=None, alive_pid=None):
    """Whether ``member`` (a record) is alive at ``now``: not left, heartbeat within ``stale`` seconds, and - on ``here``,
    the host asking, with ``alive_pid`` given - its process still running."""
    if not isinstance(member, dict) or member.get('left') is not None:
        return False
    beat = member.get('heartbeat')
    if not isinstance(beat, (int, float)) or isinstance(beat, bool) or now - beat > stale:
        return False
    if here is not None and alive_pid is not None and member.get('host') == here:
        return bool(alive_pid(member.get('pid'), member.get('pid_start')))
    return True


def live(members, now, stale, here=None, alive_pid=None):
    """The names of the live members of ``members`` ({name: record})."""
    return {name for name, member in (members or {}).items() if alive(member, now, stale, here, alive_pid)}


def held(nodes, members, now, stale, here=None, alive_pid=None, in_flight=()):
    """{node: member} of the nodes in flight (states ``in_flight``) whose member is not alive: held by a dead member.

    ``nodes``: {name: record}; a node in flight without a member (a run of one controller before members existed) is not
    listed."""
    living = live(members, now, stale, here, alive_pid)
    return {name: rec.get('member') for name, rec in sorted(nodes.items())
            if rec.get('state') in in_flight and rec.get('member') and rec.get('member') not in living}


def holder_of(node_record, me, living):
    """The live member other than ``me`` that holds ``node_record`` (in flight), or None: then ``me`` may take it."""
    member = (node_record or {}).get('member')
    if member and member != me and member in living:
        return member
    return None


def beat(members, name, now):
    """``members`` with ``name``'s heartbeat set to ``now``; None when ``name`` is not a member or has left."""
    member = (members or {}).get(name)
    if not isinstance(member, dict) or member.get('left') is not None:
        return None
    return dict(members, **{name: dict(member, heartbeat=now)})


def leave(members, name, when):
    """``members`` with ``name`` marked left at ``when`` (epoch seconds); unchanged when not a member."""
    member = (members or {}).get(name)
    if not isinstance(member, dict):
        return dict(members or {})
    return dict(members, **{name: dict(member, left=when)})


def summary(members, now, stale, here=None, alive_pid=None):
    """{name: 'alive' | 'left' | 'dead'} for the run's report."""
    shown = {}
    for name, member in sorted((members or {}).items()):
        if isinstance(member, dict) and member.get('left') is not None:
            shown[name] = 'left'
        else:
            shown[name] = 'alive' if alive(member, now, stale, here, alive_pid) else 'dead'
    return shown
