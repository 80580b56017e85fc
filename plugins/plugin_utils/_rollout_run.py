# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout gate's steps on the run as a whole, on localhost: ``summary`` (the end of a batch), ``finish`` and
``control`` (an operator's verb, one small function each: :data:`RUN_VERBS`, :data:`NODE_VERBS`).

Each step is a function of a :class:`._run_context.RunContext`.
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _members
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._run_context import GateError


def _pause(ledger, decision):
    ledger.set_status('paused', decision.reason, details={'rule': decision.rule, 'rules': list(decision.rules or (decision.rule,)), 'by': 'gate'})


def members_now(context, ledger, state, spec=None):
    """(each member's standing {name: alive | left | dead}, the nodes in flight held by a dead member {node: member})."""
    members = ledger.members()
    if not members:
        return {}, {}
    stale = _ledger.member_stale_seconds(spec if spec is not None else context.args['ledger'])
    now, here = context.clock.time(), _ledger.socket.gethostname()
    return (_members.summary(members, now, stale, here, _ledger.process_alive),
            _members.held(state['nodes'], members, now, stale, here, _ledger.process_alive, in_flight=_gate.IN_FLIGHT))


def _files(context, ledger, spec, report):
    report.update(ledger_file=ledger.backend.location(ledger.run_id, _ledger.LEDGER), state_file=ledger.backend.location(ledger.run_id, _ledger.STATE),
                  results_dir=context.results_dir(spec))
    report['summary'] = dict(report)   # what the playbooks hand AWX (set_stats gpufleet_rollout_summary)
    return report


def summary(context):
    """Batch mode, the end of a batch: the run's summary from the ledger (the one summary builder, as at the finish) and the
    run's pause when a rule holds - the gate's own run-level rules (failure budget over the run, pin-fault detector, circuit
    breaker, operator) or this batch's failures over I(max_fail_percentage) of the batch (Ansible stops the rollout then).
    I(batch): the hosts of this batch."""
    args = context.args
    spec = args['ledger']
    ledger = context.ledger(spec)
    policy = _policy.load_policy(ledger.head['policy'])
    pause_set = None
    with ledger.locked() as state:
        rollout = _rollout.rollout_view(_ledger.node_view(state), context.breaker(state))
        decision = _gate.pause_decision(policy, rollout, context.clock.utcnow()) or \
            _rollout.batch_stop(state, args['batch'], args['max_fail_percentage'], args['fail_states'], args['failed_before'])
        if decision is not None and state['status'] != 'paused':
            _pause(ledger, decision)
            pause_set = decision
        report = _rollout.summary(state)
        final = [node for node in args['batch'] if node in state['nodes'] and state['nodes'][node]['state'] in _gate.FINAL]
    context.soft_undo(ledger, final)
    if pause_set is not None:
        context.escalate(policy.escalation, _rollout.escalation_payload(ledger.run_id, pause_set.to_dict(), ledger.head))
    report = _files(context, ledger, spec, report)
    context.result.update(report, changed=pause_set is not None, paused=report['status'] == 'paused', msg=report['message'])


def finish(context):
    """This controller's part of the run is over: it leaves the run (I(member)); the run is ``finished`` when every node of
    the fleet is final (whichever controller sees it last), ``paused`` (the task fails) when a pause rule holds; the fleet
    lock I(fleet) is released once no controller of the run is alive."""
    args = context.args
    spec = args['ledger']
    ledger = context.ledger(spec)
    policy = _policy.load_policy(ledger.state['policy'])
    pause_set = None
    if args['member']:
        ledger.leave(args['member'], context.clock.time())
    with ledger.locked() as state:
        rollout = _rollout.rollout_view(_ledger.node_view(state), context.breaker(state))
        decision = _gate.pause_decision(policy, rollout, context.clock.utcnow())
        if decision is not None and state['status'] != 'paused':
            _pause(ledger, decision)
            pause_set = decision
        elif _rollout.finishes(state, decision is not None):
            # Every node is final: nothing is left for a resume; a batch's own stop (Ansible's rule) does not outlive it.
            counts = _rollout.summary(state)['counts']
            ledger.set_status('finished', 'every node is final: %s' % ', '.join('%d %s' % (counts[name], name) for name in sorted(counts)))
        standing, held = members_now(context, ledger, state, spec)
        report = _rollout.summary(state, standing, held)
    if pause_set is not None:
        context.escalate(policy.escalation, _rollout.escalation_payload(ledger.run_id, pause_set.to_dict(), ledger.state))
    others = sorted(name for name, status in standing.items() if status == 'alive' and name != args['member'])
    # The run ends here (finished, paused, or this controller's part done): the last controller takes back every mark the
    # ledger records (a crashed one's too), another only its own; a resume sets them again.
    context.soft_undo(ledger, member=None if not others else args['member'])
    if args['fleet'] and (report['status'] == 'finished' or not others):
        ledger.backend.release(args['fleet'], ledger.run_id)
    report = _files(context, ledger, spec, report)
    context.result.update(report, changed=False, msg='%s; ledger %s, state %s' % (report['message'], report['ledger_file'], report['state_file']))
    if report['status'] == 'paused':
        context.result['failed'] = True
        context.result['msg'] = 'rollout paused: %s' % context.result['msg']


# ---------------------------------------------------------------------------------------------- control: one function per verb

def _skip(ledger, state, node, reason, args):
    if state['nodes'][node]['state'] != _gate.PENDING:
        raise GateError('%s is %s, not pending: only a node not started yet is skipped (a node in flight finishes its procedure)'
                        % (node, state['nodes'][node]['state']))
    ledger.transition(node, 'left_alone', 'skipped: %s' % reason)


def _retry(ledger, state, node, reason, args):
    ledger.transition(node, _gate.PENDING, 'retry: %s' % reason, operator=True)


def _release(ledger, state, node, reason, args):
    if state['nodes'][node]['state'] != 'quarantined':
        raise GateError('%s is %s, not quarantined: only a quarantined node is released' % (node, state['nodes'][node]['state']))
    ledger.transition(node, 'validating', 'release: re-validating: %s' % reason, operator=True)


def _released(ledger, state, node, reason, args):
    to, why = _rollout.release_decision(state.get('pin'), args['validation'], args['passed'])
    ledger.transition(node, to, why)


# The verbs on the run (ledger, reason) and on nodes (ledger, state, node, reason, args), under the run lock.
RUN_VERBS = {
    'pause': lambda ledger, reason: ledger.set_status('paused', reason, details={'rule': 'operator', 'rules': ['operator'], 'by': 'operator'}),
    'resume': lambda ledger, reason: ledger.set_status('running', reason),
    'reset_breaker': lambda ledger, reason: ledger.reset_breaker(reason),
}
NODE_VERBS = {'skip': _skip, 'retry': _retry, 'release': _release, 'released': _released}
VERBS = ('pause', 'resume', 'skip', 'retry', 'release', 'released', 'reset_breaker')


def control(context):
    """An operator's verb (I(verb)) on a run (I(run_id), else the last unfinished run of this inventory) or on its I(nodes)."""
    args = context.args
    verb = args['verb']
    if not verb:
        raise GateError('verb: one of %s is required' % ', '.join(VERBS))
    if not args['run_dir']:
        raise GateError('run_dir: gpufleet_run_dir must be the folder of the ledgers')
    backend = context.backend(context.ledger_spec())
    run_id = args['run_id']
    if not run_id:
        inventory = context.inventory()
        run_id = _ledger.last_unfinished(backend, inventory)
        if not run_id:
            raise GateError('run_id: no unfinished run of inventory %s in %s; give gpufleet_run_id' % (inventory, backend.location()))
    ledger = _ledger.RunLedger.open(backend, run_id)
    reason = args['reason'] or 'by an operator'
    nodes = list(dict.fromkeys(args['nodes']))
    if verb in NODE_VERBS and not nodes:
        raise GateError('nodes: %s needs the nodes (gpufleet_nodes)' % verb)
    done = []
    with ledger.locked() as state:
        for node in nodes:
            if node not in state['nodes']:
                raise GateError('%s is not a node of run %s' % (node, run_id))
        if verb in RUN_VERBS:
            RUN_VERBS[verb](ledger, reason)
        for node in nodes:
            if verb in NODE_VERBS:
                NODE_VERBS[verb](ledger, state, node, reason, args)
            done.append(node)
        standing, held = members_now(context, ledger, state, context.ledger_spec())
        report = _rollout.summary(state, standing, held)
    # The soft pre-drain's marks: a run no controller runs now (crashed, paused, over) keeps none; a skipped or released node
    # keeps none either.
    if not any(status == 'alive' for status in standing.values()):
        unmarked = context.soft_undo(ledger)
    else:
        unmarked = context.soft_undo(ledger, done) if verb in ('skip', 'release') else {}
    context.result.update(report, changed=True, verb=verb, nodes=done, pin=state.get('pin') or {}, soft_unmarked=unmarked,
                          msg='%s %s: %s' % (verb, ', '.join(done) or 'run ' + run_id, report['message']))
