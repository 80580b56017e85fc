# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/_procedure.py: the per-node procedure, one test per rule (the role's YAML only runs the steps)."""

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _procedure
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._procedure import (
    PHASE_STATES, PHASES, STEPS, ProcedureError, StepFailed, advance, checked_options, fail, precheck, reboot_required, rescue_plan,
    result_fields, start)

OK = {'health': 'ok', 'driver_source': 'host_package', 'driver_version': '550.127.05', 'packages': {}, 'tools': {},
      'recorded_pin': {'driver': '550.127.05'}, 'previous_pin': None, 'pending_reboot': None, 'gpu_count': 8}
BROKEN = dict(OK, health='broken', health_reason='gpu_lost', health_message='Unable to determine the device handle for GPU0000:18:00.0: Unknown Error')
OLD = {'driver': '550.127.05'}
NEW = {'driver': '580.65.06'}
DRAINED = {'action': 'drain', 'outcome': 'done', 'message': 'node drained: gpufleet upgrade'}
CONVERGED = {'facts': OK, 'changed_components': ['driver'], 'check_mode': False}
REBOOTED = {'reload': {'skipped': True}, 'os': {'changed': True, 'rebooted': True}}
PASSED = {'passed': True, 'checks': [], 'message': ''}
FAILED = {'passed': False, 'checks': [{'name': 'dcgm_diag_r1', 'passed': False, 'message': 'memory'}], 'message': 'dcgm_diag_r1: memory'}


def options(**extra):
    return dict({'node': 'gpu-01'}, **extra)


def walk(state, *outcomes):
    """The procedure after each outcome in turn (the steps' answers)."""
    for index, outcome in enumerate(outcomes):
        state = advance(state, outcome, 10.0 + index)
    return state


def at_validate(**extra):
    return walk(start(options(**extra), OK, NEW, 1.0), DRAINED, CONVERGED, REBOOTED)


# ---- one vocabulary

def test_every_phase_a_step_enters_is_a_phase_with_its_ledger_state():
    assert set(PHASE_STATES) == set(PHASES)
    for path in _procedure._PHASE_OF.values():
        assert set(path) <= set(STEPS) and set(path.values()) <= set(PHASES)


# ---- start (the pre-check)

def test_start_a_healthy_node_goes_to_the_drain():
    state = start(options(), OK, NEW, 1.0)
    assert (state['next'], state['phase'], state['target'], state['pin_recorded']) == ('drain', 'drain', NEW, OLD)
    assert state['marks'] == [['precheck', 1.0], ['drain', 1.0]] and state['read_on_failure'] is False


def test_start_a_skipped_node_ends_left_alone():
    state = start(options(skip=True), OK, None, 1.0)
    assert (state['next'], state['state'], state['reason']) == ('end', 'left_alone', 'skipped (node_upgrade_skip)')


def test_start_a_gpu_operator_node_ends_left_alone():
    state = start(options(), dict(OK, driver_source='container'), NEW, 1.0)
    assert state['state'] == 'left_alone' and 'driver_source=container' in state['reason']


def test_start_a_broken_node_goes_to_the_quarantine_with_why():
    state = start(options(), BROKEN, NEW, 1.0)
    assert (state['next'], state['phase']) == ('quarantine', 'quarantine')
    assert state['why'].startswith('broken before the upgrade (gpu_lost): Unable to determine') and state['scheduler_reason'] == state['why'][:200]


def test_start_a_rollback_without_a_previous_pin_ends_left_alone():
    state = start(options(previous_pin=True), OK, None, 1.0)
    assert state['state'] == 'left_alone' and 'no previous pin recorded on the node' in state['reason']


def test_start_refuses_options_and_facts_it_does_not_know():
    with pytest.raises(ProcedureError, match='node_upgrade_reboot_method'):
        start(options(reboot_method='kexec'), OK, NEW, 1.0)
    with pytest.raises(ProcedureError, match='options.skip'):
        start(options(skip='maybe'), OK, NEW, 1.0)
    with pytest.raises(ProcedureError, match='facts'):
        start(options(), None, NEW, 1.0)
    assert checked_options({'skip': 'False', 'bmc': 'true'})['skip'] is False


# ---- after the drain

@pytest.mark.parametrize('outcome', ['done', 'none'])
def test_a_drained_node_goes_to_the_converge(outcome):
    state = walk(start(options(), OK, NEW, 1.0), dict(DRAINED, outcome=outcome))
    assert (state['next'], state['phase'], state['drain']['outcome']) == ('converge', 'converge', outcome)
    assert state['read_on_failure'] is True


@pytest.mark.parametrize('outcome, final', [('left_alone', 'left_alone'), ('skipped', 'left_alone'), ('deferred', 'deferred')])
def test_a_drain_that_did_not_drain_ends_the_procedure(outcome, final):
    state = walk(start(options(), OK, NEW, 1.0), {'action': 'drain', 'outcome': outcome, 'message': 'drain timed out: job 12'})
    assert (state['next'], state['state'], state['reason'], state['phase']) == ('end', final, 'drain timed out: job 12', 'drain')


def test_an_unknown_drain_answer_fails_closed():
    with pytest.raises(ProcedureError, match="outcome 'forced'"):
        walk(start(options(), OK, NEW, 1.0), dict(DRAINED, outcome='forced'))


@pytest.mark.parametrize('policy, step', [('always', 'reboot'), ('required', 'validate')])
def test_a_reboot_only_run_skips_the_converge(policy, step):
    state = walk(start(options(reboot=policy), OK, None, 1.0), DRAINED)
    assert state['next'] == step and 'converge' not in [mark[0] for mark in state['marks']]


# ---- after the converge: the reboot rule

@pytest.mark.parametrize('facts, pin, changed, check_mode, needed', [
    (OK, NEW, ['driver'], False, True),                                       # the driver packages moved
    (OK, {'kernel': '6.8.0-45-generic'}, ['kernel'], False, True),             # a new kernel
    (dict(OK, pending_reboot='kernel 6.8.0-45'), {'dcgm': '4.1.0'}, [], False, True),   # an earlier run's kernel, not booted
    (dict(OK, health_reason='driver_library_mismatch', driver_version=None), NEW, [], False, True),  # NVML newer than the module
    (dict(OK, driver_version='550.127.05'), NEW, [], False, True),            # loaded driver not the pinned one
    (dict(OK, driver_version='580.65.06'), NEW, ['dcgm'], False, False),      # nothing that needs a reboot
    (dict(OK, driver_version='550.127.05'), NEW, [], True, False),           # check mode: nothing was installed
    (dict(OK, driver_version='550.127.05'), {'dcgm': '4.1.0'}, [], False, False),   # no driver in the pin
])
def test_reboot_required(facts, pin, changed, check_mode, needed):
    assert reboot_required(facts, pin, changed, check_mode=check_mode) is needed


def test_a_converge_that_needs_a_reboot_goes_to_the_reboot():
    state = walk(start(options(), OK, NEW, 1.0), DRAINED, CONVERGED)
    assert (state['next'], state['phase'], state['reboot']['method']) == ('reboot', 'reboot', 'os')


def test_a_converge_that_needs_no_reboot_goes_to_the_validation_unless_every_node_reboots():
    quiet = {'facts': dict(OK, driver_version='580.65.06'), 'changed_components': ['dcgm'], 'check_mode': False}
    assert walk(start(options(), OK, NEW, 1.0), DRAINED, quiet)['next'] == 'validate'
    assert walk(start(options(reboot='always'), OK, NEW, 1.0), DRAINED, quiet)['next'] == 'reboot'


# ---- after the reboot

def test_a_node_back_from_the_reboot_goes_to_the_validation_and_clears_the_mark():
    state = at_validate()
    assert (state['next'], state['phase'], state['clear_reboot_mark']) == ('validate', 'validate', True)
    assert state['reboot'] == {'method': 'os', 'rebooted': True, 'reloaded': False, 'fallback': '', 'power_cycled': False, 'used': 'os',
                               'message': ''}


def test_a_driver_reload_needs_no_reboot_and_keeps_the_mark():
    state = walk(start(options(reboot_method='driver_reload'), OK, NEW, 1.0), DRAINED, CONVERGED,
                 {'reload': {'reloaded': True}, 'os': {'skipped': True}})
    assert state['next'] == 'validate' and state['reboot']['used'] == 'driver_reload' and not state['reboot']['rebooted']
    assert state['clear_reboot_mark'] is False


def test_a_driver_reload_that_fell_back_reboots_and_says_why():
    state = walk(start(options(reboot_method='driver_reload'), OK, NEW, 1.0), DRAINED, CONVERGED,
                 {'reload': {'reloaded': False, 'reason': 'nvidia-persistenced holds the GPUs'}, 'os': {'changed': True}})
    assert state['reboot']['used'] == 'os' and state['reboot']['rebooted'] and state['reboot']['fallback'] == 'nvidia-persistenced holds the GPUs'


HUNG = [('os', {'failed': True, 'msg': 'timed out waiting for the node'}), ('os', {'unreachable': True, 'msg': 'ssh: no route'}),
        ('bmc', {'skipped': True})]


@pytest.mark.parametrize('method, os_result', HUNG)
def test_a_node_that_hangs_with_a_bmc_is_power_cycled(method, os_result):
    state = walk(start(options(reboot_method=method, bmc=True), OK, NEW, 1.0), DRAINED, CONVERGED, {'reload': {}, 'os': os_result})
    assert (state['next'], state['phase']) == ('power_cycle', 'reboot')


def test_a_node_that_hangs_without_a_bmc_is_quarantined_as_unreachable():
    state = walk(start(options(reboot_timeout=45), OK, NEW, 1.0), DRAINED, CONVERGED, {'reload': {}, 'os': {'failed': True, 'msg': 'timed out'}})
    assert (state['next'], state['unreachable'], state['read_on_failure']) == ('quarantine', True, False)
    assert state['why'] == ('unreachable after the reboot: reboot: did not come back from the reboot within 45 s (timed out); '
                            'no BMC configured for a power cycle')


@pytest.mark.parametrize('after, back', [({'rc': 0, 'stdout': '1700000300'}, True), ({'rc': 0, 'stdout': '1700000000'}, False),
                                         ({'rc': 1, 'stdout': ''}, False), ({'skipped': True}, False)])
def test_a_node_is_back_from_a_power_cycle_when_its_boot_time_changed(after, back):
    assert _procedure.booted_again({'rc': 0, 'stdout': '1700000000'}, after) is back


def test_after_the_power_cycle():
    hung = walk(start(options(bmc=True), OK, NEW, 1.0), DRAINED, CONVERGED, {'reload': {}, 'os': {'failed': True, 'msg': 'timed out'}})
    back = advance(hung, {'before': {'rc': 0, 'stdout': '1700000000'}, 'after': {'rc': 0, 'stdout': '1700000300'}}, 20.0)
    assert back['next'] == 'validate' and back['reboot']['power_cycled'] and back['reboot']['used'] == 'bmc' and back['clear_reboot_mark']
    lost = advance(hung, {'before': {'rc': 0, 'stdout': '1700000000'}, 'after': {'skipped': True}}, 20.0)
    assert lost['next'] == 'quarantine' and lost['unreachable'] and lost['why'].startswith('unreachable after the reboot: reboot: did not')


# ---- after the validation

def test_a_node_that_passes_goes_to_the_uncordon():
    state = advance(at_validate(), PASSED, 30.0)
    assert (state['next'], state['phase'], state['validation']) == ('uncordon', 'uncordon', PASSED)


def test_a_node_that_fails_the_validation_fails_the_step():
    with pytest.raises(StepFailed, match='gpu-01: not fit for service: dcgm_diag_r1: memory') as caught:
        advance(at_validate(), FAILED, 30.0)
    assert caught.value.state['validation'] == FAILED


def test_no_validation_result_fails_closed():
    with pytest.raises(ProcedureError, match='no validation result'):
        advance(at_validate(), {}, 30.0)


# ---- the last step

def test_the_uncordon_ends_done():
    state = walk(at_validate(), PASSED, {'action': 'uncordon', 'outcome': 'done'})
    assert (state['next'], state['state'], state['reason'], state['phase']) == ('end', 'done', '', 'uncordon')


@pytest.mark.parametrize('outcome, final', [('done', 'quarantined'), ('none', 'quarantined'), ('left_alone', 'left_alone')])
def test_the_quarantine_ends_quarantined_with_why(outcome, final):
    state = advance(start(options(), BROKEN, NEW, 1.0), {'action': 'quarantine', 'outcome': outcome, 'message': 'drained by ops'}, 2.0)
    assert state['state'] == final
    assert state['reason'] == (state['why'] if final == 'quarantined' else 'drained by ops')


def test_advance_with_no_step_running_fails():
    with pytest.raises(ProcedureError, match='nothing to advance'):
        advance(start(options(skip=True), OK, None, 1.0), DRAINED, 2.0)


# ---- after a failure

def test_a_failure_before_any_change_puts_the_node_back():
    state = fail(start(options(), OK, NEW, 1.0), 'gpu-01: scontrol timed out', now=2.0)
    assert (state['next'], state['phase'], state['recovering']) == ('uncordon', 'restore', 'restore')
    done = advance(state, {'action': 'uncordon', 'outcome': 'done'}, 3.0)
    assert (done['state'], done['reason']) == ('deferred', 'drain: scontrol timed out')


def test_a_failed_validation_after_a_new_pin_rolls_back_to_the_previous_pin():
    state = fail(at_validate(), 'gpu-01: not fit for service: dcgm_diag_r1: memory', facts_now=dict(OK, recorded_pin=NEW, previous_pin=OLD),
                 validation=FAILED, now=30.0)
    assert (state['next'], state['phase'], state['converge_pin'], state['rollback_pin']) == ('converge', 'rollback', OLD, OLD)
    assert state['validation'] == FAILED and state['failure'] == 'validate: not fit for service: dcgm_diag_r1: memory'
    state = walk(state, CONVERGED, REBOOTED)
    assert (state['next'], state['phase']) == ('validate', 'rollback_validate')
    state = walk(state, PASSED, {'action': 'uncordon', 'outcome': 'done'})
    assert state['state'] == 'rolled_back' and state['rollback_validation'] == PASSED
    assert state['reason'] == 'rolled back to the previous pin after validate: not fit for service: dcgm_diag_r1: memory'
    assert [mark[0] for mark in state['marks']] == ['precheck', 'drain', 'converge', 'reboot', 'validate', 'rollback', 'rollback_reboot',
                                                    'rollback_validate', 'uncordon']


def test_a_node_that_fails_on_both_pins_is_an_rma_suspect():
    state = fail(at_validate(), 'not fit', facts_now=dict(OK, recorded_pin=NEW, previous_pin=OLD), validation=FAILED, now=30.0)
    state = walk(state, CONVERGED, REBOOTED)
    state = fail(state, 'gpu-01: not fit for service: dcgm_diag_r1: memory', validation=FAILED, now=40.0)
    assert (state['next'], state['rma'], state['rollback_validation']) == ('quarantine', True, FAILED)
    assert state['why'] == 'suspect hardware (RMA): failed on the new pin and on the previous pin: validate: not fit'


def test_a_recovery_that_fails_otherwise_quarantines_and_says_what_came_before():
    state = fail(at_validate(), 'not fit', facts_now=dict(OK, recorded_pin=NEW, previous_pin=OLD), validation=FAILED, now=30.0)
    state = fail(state, 'gpu-01: apt failed', now=31.0)
    assert state['next'] == 'quarantine' and not state['rma'] and state['why'] == 'rollback: apt failed; before it: validate: not fit'


def test_a_converge_that_changed_nothing_is_validated_as_it_is():
    at_converge = walk(start(options(), OK, NEW, 1.0), DRAINED)
    state = fail(at_converge, 'package_plan: the repository has no nvidia-driver-580', facts_now=OK, now=5.0)
    assert (state['next'], state['phase'], state['recovering']) == ('validate', 'rollback_validate', 'revalidate')
    # As it is: never against the pin it did not reach (that would fail it and quarantine a node nothing changed).
    assert state['converge_pin'] is None
    state = walk(state, PASSED, {'action': 'uncordon', 'outcome': 'done'})
    assert (state['state'], state['reason']) == ('deferred', 'put back as it was after converge: package_plan: the repository has no nvidia-driver-580')


def test_a_failed_uncordon_quarantines_and_never_rolls_back_a_node_that_may_be_in_service():
    at_uncordon = advance(at_validate(), PASSED, 30.0)
    state = fail(at_uncordon, 'gpu-01: the marker could not be cleared', facts_now=dict(OK, recorded_pin=NEW, previous_pin=OLD), now=31.0)
    assert state['next'] == 'quarantine' and not state['recovering']
    assert state['why'] == 'the uncordon failed after the node passed its validation: uncordon: the marker could not be cleared'


def test_a_node_lost_in_the_rollback_reboot_is_quarantined_after_its_first_failure():
    state = fail(at_validate(), 'gpu-01: not fit for service: dcgm_diag_r1: memory', facts_now=dict(OK, recorded_pin=NEW, previous_pin=OLD),
                 validation=FAILED, now=30.0)
    state = walk(state, CONVERGED, {'reload': {}, 'os': {'failed': True, 'msg': 'timed out'}})
    assert state['next'] == 'quarantine' and state['unreachable'] and state['phase'] == 'quarantine'
    assert state['why'].startswith('rollback_reboot: did not come back from the reboot within 1200 s (timed out)')
    assert state['why'].endswith('; before it: validate: not fit for service: dcgm_diag_r1: memory')


def test_only_the_answer_to_this_steps_call_is_followed():
    state = start(options(), OK, NEW, 1.0)
    assert state['request'] == 'gpu-01/1.000000/1'
    with pytest.raises(ProcedureError, match='not the answer to this step'):
        advance(state, dict(DRAINED, request='gpu-01/0.500000/7'), 2.0)
    assert advance(state, dict(DRAINED, request=state['request']), 2.0)['request'] != state['request']


def test_a_state_another_run_left_is_not_this_runs():
    left = at_validate()
    left['owner'] = '4242:99'
    assert _procedure.fresh(left) and not _procedure.fresh(left, '5151:12')
    state = fail(left, 'gpu-01: gpu_facts: unreachable', now=40.0, options=options(), owner='5151:12')
    assert (state['phase'], state['recovering'], state['owner']) == ('restore', 'restore', '5151:12')


def test_a_failure_with_nothing_to_roll_back_quarantines():
    state = fail(at_validate(), 'not fit', facts_now=dict(OK, recorded_pin=NEW, previous_pin=OLD), validation=FAILED, now=30.0,
                 options=options())
    assert state['next'] == 'converge'     # this run recorded NEW: a rollback
    already = fail(start(options(), dict(OK, recorded_pin=NEW), NEW, 1.0) | {'phase': 'validate', 'pin_recorded': NEW}, 'not fit',
                   facts_now=dict(OK, recorded_pin=NEW, previous_pin=OLD), validation=FAILED, now=2.0)
    assert already['next'] == 'quarantine' and already['why'] == 'nothing to roll back (the node was already on the pin): validate: not fit'


def test_a_failure_before_the_procedure_started_starts_one_that_puts_the_node_back():
    ended = start(options(skip=True), OK, None, 1.0)
    for state in (None, ended):
        state = fail(state, 'gpu-01: gpu_facts: nvidia-smi timed out', now=2.0, options=options())
        assert (state['next'], state['phase'], state['failure']) == ('uncordon', 'restore', 'precheck: gpu_facts: nvidia-smi timed out')


def test_the_facts_read_after_a_failure_count_only_when_the_read_worked():
    assert _procedure.facts_of({'changed': False, 'ansible_facts': {'gpufleet': OK}}) == OK
    for registered in ({'skipped': True}, {'failed': True, 'ansible_facts': {'gpufleet': OK}}, {'unreachable': True}, None, {}):
        assert _procedure.facts_of(registered) is None


def test_the_scheduler_reason_is_one_short_line():
    state = start(options(reason='upgrade\nto 580\x07' + 'x' * 300), OK, NEW, 1.0)
    assert '\n' not in state['scheduler_reason'] and '\x07' not in state['scheduler_reason'] and len(state['scheduler_reason']) == 200


def test_the_result_of_a_procedure_that_never_ended_carries_the_error():
    fields = result_fields(fail(at_validate(), 'x', now=3.0), error='apt failed')
    assert fields['state'] == '' and fields['reason'] == 'apt failed'
    assert result_fields(None, error='')['phase'] == 'precheck'


# ---- the rules the procedure's steps use (moved from module_utils/_upgrade.py with their tests)

def test_precheck_proceeds_on_a_healthy_node():
    assert precheck(OK) == {'action': 'proceed', 'reason': '', 'takeover': False}


@pytest.mark.parametrize('choice, action', [('quarantine', 'quarantine'), ('skip', 'left_alone'), ('upgrade', 'proceed')])
def test_a_broken_node_is_never_silently_upgraded(choice, action):
    decided = precheck(BROKEN, on_broken=choice)
    assert decided['action'] == action
    if action != 'proceed':
        assert decided['reason'] == 'broken before the upgrade (gpu_lost): Unable to determine the device handle for GPU0000:18:00.0: Unknown Error'


@pytest.mark.parametrize('caught', ['converging', 'rebooting', 'validating', 'rolling_back'])
def test_a_node_this_procedure_left_broken_goes_on_after_a_crash(caught):
    decided = precheck(BROKEN, resumed_from=caught)
    assert decided['action'] == 'proceed' and decided['reason'].startswith('caught %s by a crash, gpu_lost' % caught), decided


@pytest.mark.parametrize('caught', ['', 'admitted', 'cordoned', 'drained'])
def test_a_node_broken_before_this_procedure_changed_it_is_still_quarantined(caught):
    # Caught before the converge: nothing was changed yet, so broken is how the node came.
    assert precheck(BROKEN, resumed_from=caught)['action'] == 'quarantine'


def test_gpu_operator_driver_and_skip_are_left_alone():
    assert precheck(dict(OK, driver_source='container'))['action'] == 'left_alone'
    assert precheck(OK, skip=True)['action'] == 'left_alone'
    with pytest.raises(ProcedureError, match='node_upgrade_on_broken'):
        precheck(OK, on_broken='ignore')


def test_rescue_unreachable_is_quarantined():
    assert rescue_plan('reboot', unreachable=True, pin_before=OLD, pin_after=NEW, previous_pin=OLD, target_pin=NEW)['action'] == 'quarantine'


@pytest.mark.parametrize('phase', ['precheck', 'drain'])
def test_rescue_before_any_change_restores(phase):
    assert rescue_plan(phase)['action'] == 'restore'


@pytest.mark.parametrize('caught', ['converging', 'rebooting', 'validating', 'rolling_back'])
def test_rescue_after_a_crash_rolls_back_what_the_run_recorded_before_it(caught):
    # The killed controller had converged the node to NEW (recorded, previous OLD); the procedure started again on NEW.
    plan = rescue_plan('validate', pin_before=NEW, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True, resumed_from=caught)
    assert plan == {'action': 'rollback', 'reason': '', 'rollback_pin': OLD}


def test_rescue_without_a_crash_does_not_roll_back_a_node_that_was_already_on_the_pin():
    plan = rescue_plan('validate', pin_before=NEW, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True)
    assert plan['action'] == 'quarantine' and 'already on the pin' in plan['reason'], plan
    plan = rescue_plan('validate', pin_before=NEW, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True, resumed_from='cordoned')
    assert plan['action'] == 'quarantine', plan


def test_rescue_rolls_back_what_this_run_recorded():
    plan = rescue_plan('validate', pin_before=OLD, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True)
    assert plan == {'action': 'rollback', 'reason': '', 'rollback_pin': OLD}
    # First use of gpufleet on the node: no pin.json before, gpu_stack recorded the installed versions as previous.
    assert rescue_plan('converge', pin_before=None, pin_after=NEW, previous_pin=OLD, target_pin=NEW)['rollback_pin'] == OLD


def test_rescue_never_rolls_back_to_a_stale_previous_pin():
    # The node was already on the pin: pin.previous.json is from an older run, not this one.
    plan = rescue_plan('validate', pin_before=NEW, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True)
    assert plan['action'] == 'quarantine' and 'already on the pin' in plan['reason']


def test_rescue_revalidates_a_converge_that_changed_nothing():
    assert rescue_plan('converge', pin_before=OLD, pin_after=OLD, previous_pin=None, target_pin=NEW)['action'] == 'revalidate'


def test_rescue_reboot_only_run_quarantines():
    plan = rescue_plan('validate', pin_before=OLD, pin_after=OLD, previous_pin=None, target_pin=None, validation_failed=True)
    assert plan['action'] == 'quarantine' and 'no pin in this run' in plan['reason']


# ---- one driver source per node (issue 27): never a second driver, a take-over only when asked

RUNFILE = dict(OK, driver_source='runfile', driver_source_evidence='/usr/bin/nvidia-uninstall', recorded_pin=None, packages={})
# The real H100 node: a working open-module driver from a tree no package owns, no systemd, one GPU.
UNOWNED = dict(OK, driver_source='unowned', driver_source_evidence='/usr/local/nvidia/bin/nvidia-smi, /usr/local/nvidia/version',
               driver_version='580.159.04', kernel_module_flavor='open', systemd=False, gpu_count=1, recorded_pin=None)
UNINSTALLED = {'argv': ['/usr/bin/nvidia-uninstall', '--silent'], 'rc': 0, 'stdout': ['Uninstallation of existing driver: done.'], 'stderr': []}
# package_pin_takeover as package_pin sets it: ran (with what the uninstaller did), or not.
RAN = dict(UNINSTALLED, ran=True)


def test_a_converge_on_a_runfile_driver_ends_left_alone_naming_the_source_and_what_to_do():
    state = start(options(), RUNFILE, NEW, 1.0)
    assert (state['next'], state['state'], state['takeover']) == ('end', 'left_alone', None)
    assert state['reason'] == (
        "node_upgrade_pin.driver: the driver came from NVIDIA's runfile installer (driver_source=runfile: /usr/bin/nvidia-uninstall): "
        "installing the pinned driver packages would put a second driver on the node; upgrade it with the runfile, or set "
        "gpufleet_driver_takeover=true to remove it with nvidia-uninstall and install the packages")
    # Nothing changed and no scheduler call: the procedure never left the pre-check.
    assert state['marks'] == [['precheck', 1.0]] and state['steps'] == 0


@pytest.mark.parametrize('takeover', [False, True])
def test_a_converge_on_an_unowned_driver_ends_left_alone_even_when_a_takeover_is_asked(takeover):
    state = start(options(driver_takeover=takeover), UNOWNED, NEW, 1.0)
    assert (state['next'], state['state'], state['takeover']) == ('end', 'left_alone', None)
    assert 'driver_source=unowned: /usr/local/nvidia/bin/nvidia-smi, /usr/local/nvidia/version' in state['reason']
    assert 'remove' in state['reason'] and ('cannot take this node over' in state['reason']) is takeover


@pytest.mark.parametrize('node', [RUNFILE, UNOWNED])
def test_a_broken_node_is_quarantined_whatever_its_driver_source(node):
    """on_broken decides first: a broken runfile or unowned node is never left in service because the converge is refused."""
    broken = dict(node, health='broken', health_reason='gpu_lost', health_message='Unable to determine the device handle for GPU0')
    state = start(options(), broken, NEW, 1.0)
    assert state['next'] == 'quarantine', state
    assert state['why'].startswith('broken before the upgrade (gpu_lost)') and 'driver_source=%s' % node['driver_source'] in state['why']
    assert start(options(on_broken='skip'), broken, NEW, 1.0)['state'] == 'left_alone'


def test_a_takeover_asked_on_a_gpu_operator_node_ends_left_alone_naming_the_variable():
    for pin in (NEW, None):
        state = start(options(driver_takeover='true'), dict(OK, driver_source='container'), pin, 1.0)
        assert (state['next'], state['state'], state['marks']) == ('end', 'left_alone', [['precheck', 1.0]])
        assert state['reason'].startswith("gpufleet_driver_takeover=true on a node whose driver the GPU Operator's driver container manages")


@pytest.mark.parametrize('node', [RUNFILE, UNOWNED])
def test_a_reboot_only_run_reboots_and_validates_a_node_whatever_its_driver_source(node):
    state = start(options(converge=False, reboot='always'), node, None, 1.0)
    assert state['next'] == 'drain' and state['takeover'] is None
    state = walk(state, DRAINED)
    assert state['next'] == 'reboot'


@pytest.mark.parametrize('pin', [{'dcgm': '4.1.0'}, {'container_toolkit': '1.17.0'}])
def test_a_converge_that_installs_no_driver_goes_ahead_on_a_runfile_node(pin):
    assert start(options(), RUNFILE, pin, 1.0)['next'] == 'drain'


def test_a_takeover_of_a_runfile_node_converges_reboots_validates_and_is_recorded():
    state = start(options(driver_takeover=True), RUNFILE, NEW, 1.0)
    assert state['next'] == 'drain' and state['takeover']['from'] == 'runfile'
    assert state['takeover']['evidence'] == '/usr/bin/nvidia-uninstall' and state['takeover']['uninstaller'] is None
    assert walk(state, DRAINED, dict(CONVERGED, facts=RUNFILE, takeover={'ran': False}))['takeover']['uninstaller'] is None
    state = walk(state, DRAINED, dict(CONVERGED, facts=RUNFILE, takeover=RAN))
    assert state['next'] == 'reboot' and state['takeover']['uninstaller'] == UNINSTALLED
    state = walk(state, REBOOTED, PASSED, {'action': 'uncordon', 'outcome': 'done'})
    assert state['state'] == 'done'
    assert result_fields(state)['takeover']['uninstaller'] == UNINSTALLED


def test_a_takeover_that_fails_its_validation_is_quarantined_there_is_no_previous_package_pin():
    state = walk(start(options(driver_takeover=True), RUNFILE, NEW, 1.0), DRAINED, dict(CONVERGED, takeover=RAN), REBOOTED)
    # gpu_stack recorded the installed packages as the previous pin (the container toolkit): never a "rollback" to that.
    after = dict(OK, recorded_pin=NEW, previous_pin={'container_toolkit': '1.17.0'})
    state = fail(state, 'gpu-01: not fit for service: dcgm_diag_r1: memory', facts_now=after, validation=FAILED, now=30.0)
    assert (state['next'], state['recovering']) == ('quarantine', '')
    assert state['why'].startswith("no previous package pin to roll back to after the take-over (the driver before it was NVIDIA's "
                                   "runfile driver, removed by /usr/bin/nvidia-uninstall): validate: not fit for service")


def test_a_takeover_whose_converge_failed_after_the_uninstaller_or_unread_is_quarantined():
    at_converge = walk(start(options(driver_takeover=True), RUNFILE, NEW, 1.0), DRAINED)
    for facts_now in (dict(OK, driver_source=None, health='absent', recorded_pin=NEW), None):
        state = fail(at_converge, 'gpu-01: apt failed', facts_now=facts_now, now=5.0)
        assert state['next'] == 'quarantine' and state['why'].startswith('no previous package pin to roll back to after the take-over')


def test_a_takeover_refused_in_its_preflight_puts_the_node_back_as_it_was():
    # The uninstaller is not on the node (package_plan refuses before gpu_stack records anything): the runfile driver is still there.
    at_converge = walk(start(options(driver_takeover=True), RUNFILE, NEW, 1.0), DRAINED)
    state = fail(at_converge, 'gpu-01: gpu_stack_driver_takeover=true: the take-over needs NVIDIA\'s uninstaller', facts_now=RUNFILE, now=5.0)
    assert (state['next'], state['recovering']) == ('validate', 'revalidate')


def test_a_takeover_is_not_asked_on_a_host_package_node():
    state = start(options(driver_takeover=True), OK, NEW, 1.0)
    assert state['next'] == 'drain' and state['takeover'] is None


# ---- the driver flavor (issue 27)

@pytest.mark.parametrize('flavor, loaded, needed', [('open', 'proprietary', True), ('server', 'open', True), ('cuda-drivers', 'open', True),
                                                    ('open', 'open', False), ('server', 'proprietary', False), ('', 'open', False),
                                                    ('open', None, False)])
def test_a_loaded_module_of_the_other_flavor_needs_a_reboot(flavor, loaded, needed):
    node = dict(OK, driver_version='580.65.06', kernel_module_flavor=loaded)
    assert reboot_required(node, NEW, [], driver_flavor=flavor or None) is needed
    assert reboot_required(node, NEW, [], check_mode=True, driver_flavor=flavor or None) is False
    assert reboot_required(node, {'dcgm': '4.1.0'}, [], driver_flavor=flavor or None) is False


def test_the_procedure_reboots_a_node_whose_packages_switched_flavor_but_not_its_module():
    node = dict(OK, driver_version='580.65.06', kernel_module_flavor='proprietary')
    state = walk(start(options(driver_flavor='open'), node, NEW, 1.0), DRAINED, {'facts': node, 'changed_components': [], 'check_mode': False})
    assert state['next'] == 'reboot'
    same = walk(start(options(driver_flavor='server'), node, NEW, 1.0), DRAINED, {'facts': node, 'changed_components': [], 'check_mode': False})
    assert same['next'] == 'validate'


def test_the_new_options_are_checked_and_name_their_variable():
    with pytest.raises(ProcedureError, match='node_upgrade_driver_flavor must be one of server, open, cuda-drivers'):
        checked_options({'driver_flavor': 'proprietary'})
    with pytest.raises(ProcedureError, match='options.driver_takeover'):
        checked_options({'driver_takeover': 'perhaps'})
    assert checked_options({'driver_takeover': 'yes', 'driver_flavor': None})['driver_takeover'] is True
    assert checked_options({})['driver_flavor'] == ''


@pytest.mark.parametrize('loaded, asked, flavor', [('open', '', 'open'), ('proprietary', '', 'server'), (None, '', 'server'),
                                                   ('open', 'server', 'server'), ('proprietary', 'open', 'open')])
def test_without_a_flavor_asked_the_converge_keeps_the_loaded_module_s(loaded, asked, flavor):
    """A converge never switches a flavor nobody asked to switch (an open-only GPU would come back without a driver)."""
    state = start(options(driver_flavor=asked), dict(OK, kernel_module_flavor=loaded), NEW, 1.0)
    assert state['options']['driver_flavor'] == flavor and state['next'] == 'drain'
