# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-node procedure of gpufleet.lifecycle.node_upgrade: its one state, and what comes next.

Pure functions, standard library only (no Ansible import), Python 3.8+.  The role's YAML runs only the steps that touch
the node or its scheduler (facts, drain, stack, reboot, power cycle, validate, uncordon, quarantine); after each one the
``gpufleet.lifecycle.upgrade_phase`` action calls :func:`advance` with what the step returned, and the new state's
``next`` names the step the YAML runs next (:data:`STEPS`).  Every decision of the procedure is a rule here:

* :func:`start`: go ahead, leave the node alone, or quarantine it before anything changes (:func:`precheck`); one driver
  source per node: a converge never installs a second driver (``_stack.driver_source_plan``), and takes a runfile driver
  over only when the operator asks (``driver_takeover``);
* after the drain: go on, or end ``left_alone`` / ``deferred`` (:data:`DRAIN_ENDS`);
* after the converge: reboot (which way) or not (:func:`reboot_required`);
* after the reboot: validate, power-cycle through the BMC, or quarantine a node that did not come back;
* after the validation: uncordon, or fail (not fit for service);
* after a failure (:func:`fail`): roll back to the previous pin, put the node back, validate it as it is, or quarantine
  it, and after a second failure quarantine it (an RMA suspect when it failed on both pins) (:func:`rescue_plan`); after a
  take-over there is no previous package pin: quarantine;
* after the uncordon or the quarantine: the final state (:data:`STATES`).

The state is a JSON-able mapping (the fact ``_node_upgrade``); :data:`PHASES` is the one vocabulary of phase names (the
ledger's states, the phase times and the result use it).  An input a rule does not know raises :class:`ProcedureError`:
the procedure fails closed, never guesses.
"""

import copy
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._drift import DRIVER_FLAVORS, MODULE_FLAVOR
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._stack import RUNFILE_UNINSTALLER, driver_source_plan
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._upgrade import STATES, choice, versions
# What the role's YAML runs next; ``end``: nothing, record the result.
STEPS = ('drain', 'converge', 'reboot', 'power_cycle', 'validate', 'uncordon', 'quarantine', 'end')
# The phases of the procedure -> the rollout ledger state a node is in while that phase runs (None: no state of its own).
PHASE_STATES = {
    'precheck': None,
    'drain': 'cordoned',
    'converge': 'converging',
    'reboot': 'rebooting',
    'validate': 'validating',
    'uncordon': None,
    'rollback': 'rolling_back',
    'rollback_reboot': 'rolling_back',
    # A re-validation without a rollback (nothing had changed) validates; after a rollback the node stays rolling_back.
    'rollback_validate': 'validating',
    'restore': None,
    'quarantine': None,
}
PHASES = tuple(PHASE_STATES)
# Phases before anything on the node changes: a failure there puts the node back as it was.
BEFORE_CHANGE = ('precheck', 'drain')
ON_BROKEN = ('quarantine', 'skip', 'upgrade')
REBOOT_POLICIES = ('always', 'required')
REBOOT_METHODS = ('os', 'driver_reload', 'bmc')
# Rollout ledger states a node caught by a crash may be in once this procedure may have changed its packages: broken
# there is how the procedure left it (NVML newer than the loaded driver until the reboot), not how it came.
CHANGED_BY_US = ('converging', 'rebooting', 'validating', 'rolling_back')
# node_drain's outcomes of a drain that end the procedure; done and none let it go on.
DRAIN_ENDS = {'left_alone': 'left_alone', 'skipped': 'left_alone', 'deferred': 'deferred'}
DRAIN_GOES_ON = ('done', 'none')
# node_drain's outcomes of a quarantine; of an uncordon (every one ends in the procedure's final state).
QUARANTINE_ENDS = {'done': 'quarantined', 'none': 'quarantined', 'left_alone': 'left_alone', 'skipped': 'left_alone'}
UNCORDON_OUTCOMES = ('done', 'none', 'left_alone', 'skipped')
# The phase a step runs in: normally, in a rollback (converge, reboot, validate to the previous pin), in a re-validation.
_PHASE_OF = {
    '': {'drain': 'drain', 'converge': 'converge', 'reboot': 'reboot', 'power_cycle': 'reboot', 'validate': 'validate',
         'uncordon': 'uncordon', 'quarantine': 'quarantine'},
    'rollback': {'converge': 'rollback', 'reboot': 'rollback_reboot', 'power_cycle': 'rollback_reboot',
                 'validate': 'rollback_validate', 'uncordon': 'uncordon', 'quarantine': 'quarantine'},
    'revalidate': {'validate': 'rollback_validate', 'uncordon': 'uncordon', 'quarantine': 'quarantine'},
    'restore': {'uncordon': 'restore', 'quarantine': 'quarantine'},
}
# What the node's final state is once the uncordon of each path is through.
_UNCORDON_STATE = {'': 'done', 'rollback': 'rolled_back', 'revalidate': 'deferred', 'restore': 'deferred'}
SCHEDULER_REASON_MAX = 200
RMA_REASON = 'suspect hardware (RMA): failed on the new pin and on the previous pin'
# The operator's variable that asks for a take-over, as the messages name it (node_upgrade_driver_takeover defaults to it).
TAKEOVER_VARIABLE = 'gpufleet_driver_takeover'
TAKEOVER_QUARANTINE = ('no previous package pin to roll back to after the take-over (the driver before it was NVIDIA\'s runfile '
                       'driver, removed by %s)' % RUNFILE_UNINSTALLER)


class ProcedureError(ValueError):
    """An input or a step the procedure does not know (names the variable or the step)."""


def _choice(value, choices, name):
    return choice(value, choices, name, ProcedureError)


def _pin_of(value):
    return value if isinstance(value, dict) and value else None


def one_line(text, limit=SCHEDULER_REASON_MAX):
    """``text`` as one line of at most ``limit`` characters (Slurm refuses control characters in a reason)."""
    return re.sub(r'[\x00-\x1f\x7f]+', ' ', str(text or '')).strip()[:limit]


def precheck(facts, on_broken='quarantine', skip=False, resumed_from='', pin=None, takeover=False):
    """Before the cordon: ``{'action': 'proceed'|'left_alone'|'quarantine', 'reason': str, 'takeover': bool}``.

    A node whose driver the GPU Operator manages (``driver_source: container``) is left alone: a host
    pin must not fight the operator; ``takeover`` asked on such a node is a bad combination, left alone with a reason that
    names the variable (nothing changed, no scheduler call: a failure here would go through the restore path's uncordon).
    A converge (``pin``, None for a reboot-only run) never puts a second driver on a node (``_stack.driver_source_plan``):
    on a ``runfile`` driver it is refused unless ``takeover`` (then ``takeover`` is True: the converge removes the runfile
    driver with NVIDIA's uninstaller first), on an ``unowned`` driver it is refused whatever ``takeover`` says; the node is
    left alone with the reason naming the source, its evidence and what to do.  A reboot-only run does not touch the driver:
    it goes ahead on every source but ``container``.
    A node that is already ``broken`` is never upgraded as if it were
    merely drifted: ``on_broken`` decides (``quarantine``: cordon it with the reason, ``skip``: leave it
    alone and report it, ``upgrade``: go ahead, the validation decides).  ``resumed_from``: the ledger state
    a crash caught the node in (the rollout gate's ``caught``); from :data:`CHANGED_BY_US` a broken node goes
    ahead whatever ``on_broken`` says: this procedure broke it half-way, the procedure finishes and validates.
    """
    _choice(on_broken, ON_BROKEN, 'node_upgrade_on_broken')
    if not isinstance(facts, dict):
        raise ProcedureError('facts must be the gpufleet facts (a mapping)')
    if skip:
        return {'action': 'left_alone', 'reason': 'skipped (node_upgrade_skip)', 'takeover': False}
    source = facts.get('driver_source')
    if source == 'container':
        if takeover:
            decided = driver_source_plan(pin, source, facts.get('driver_source_evidence') or '', True, 'node_upgrade_pin', TAKEOVER_VARIABLE)
            return {'action': 'left_alone', 'reason': decided['reason'], 'takeover': False}
        return {'action': 'left_alone', 'reason': "the GPU Operator's driver container manages this node's driver (driver_source=container)",
                'takeover': False}
    decided = {'action': 'proceed'}
    if pin is not None:
        decided = driver_source_plan(pin, source, facts.get('driver_source_evidence') or '', takeover, 'node_upgrade_pin', TAKEOVER_VARIABLE)
    refused = decided['action'] == 'refuse'
    taking_over = decided['action'] == 'takeover'
    if facts.get('health') == 'broken':
        words = (facts.get('health_message') or '').strip().splitlines()
        if resumed_from in CHANGED_BY_US:
            if refused:
                return {'action': 'left_alone', 'reason': decided['reason'], 'takeover': False}
            return {'action': 'proceed', 'takeover': taking_over,
                    'reason': 'caught %s by a crash, %s as the upgrade left it: the procedure goes on and the validation decides' % (
                        resumed_from, facts.get('health_reason'))}
        reason = 'broken before the upgrade (%s): %s' % (facts.get('health_reason'), words[0] if words else 'no message')
        # A broken node is never left in service because its driver source refuses the converge: on_broken decides first.
        if on_broken == 'quarantine':
            return {'action': 'quarantine', 'reason': reason + ('; %s' % decided['reason'] if refused else ''), 'takeover': False}
        if on_broken == 'skip':
            return {'action': 'left_alone', 'reason': reason + ('; %s' % decided['reason'] if refused else ''), 'takeover': False}
    if refused:
        return {'action': 'left_alone', 'reason': decided['reason'], 'takeover': False}
    return {'action': 'proceed', 'reason': decided.get('reason') or '', 'takeover': taking_over}


def rescue_plan(phase, unreachable=False, pin_before=None, pin_after=None, previous_pin=None, target_pin=None,
                validation_failed=False, resumed_from=''):
    """After a failure in ``phase``: ``{'action', 'reason', 'rollback_pin'}``.

    ``action``:
      * ``quarantine``: the node is unreachable, the uncordon failed after it passed its validation (it may be in service:
        never rolled back under its jobs), or it failed and there is nothing to roll back to (a reboot-only run, or a
        node that was already on the pin);
      * ``restore``: nothing on the node changed yet (pre-check, drain): put it back as it was;
      * ``rollback``: this run recorded a new pin on the node (``pin.json`` went from ``pin_before`` to
        ``pin_after``): converge to ``previous_pin`` (gpu_stack's ``pin.previous.json``), reboot, validate;
      * ``revalidate``: the converge failed before it recorded or changed anything: validate the node as it is.

    ``resumed_from``: the ledger state a controller crash caught the node in; from :data:`CHANGED_BY_US` the pin the
    node had when this procedure started again (``pin_before``) may already be this rollout's, recorded before the
    crash, so the target pin recorded on the node counts as this run's and ``previous_pin`` is what it rolls back to.
    """
    _choice(phase, PHASES, 'phase')
    before, after, previous, target = _pin_of(pin_before), _pin_of(pin_after), _pin_of(previous_pin), _pin_of(target_pin)
    if unreachable:
        return {'action': 'quarantine', 'reason': 'unreachable after the reboot', 'rollback_pin': None}
    if phase == 'uncordon':
        # The node passed its validation and may be back in service already: never rolled back under its jobs.
        return {'action': 'quarantine', 'reason': 'the uncordon failed after the node passed its validation', 'rollback_pin': None}
    if phase in BEFORE_CHANGE:
        return {'action': 'restore', 'reason': '', 'rollback_pin': None}
    recorded_now = after is not None and (after != before or resumed_from in CHANGED_BY_US) and (target is None or after == target)
    if recorded_now and previous is not None and previous != after:
        return {'action': 'rollback', 'reason': '', 'rollback_pin': previous}
    if recorded_now:
        return {'action': 'quarantine', 'reason': 'no previous pin recorded on the node to roll back to', 'rollback_pin': None}
    if phase == 'converge' and target is not None and before != target and not validation_failed:
        return {'action': 'revalidate', 'reason': 'the converge failed before it changed the node', 'rollback_pin': None}
    if target is None:
        return {'action': 'quarantine', 'reason': 'nothing to roll back (no pin in this run)', 'rollback_pin': None}
    return {'action': 'quarantine', 'reason': 'nothing to roll back (the node was already on the pin)', 'rollback_pin': None}


def reboot_required(facts, pin, changed_components, check_mode=False, driver_flavor=None):
    """Whether a converge to ``pin`` needs a reboot: the driver or the kernel packages changed in this run
    (``changed_components``: the components whose packages moved), an earlier run installed a kernel it did not boot yet
    (``pending_reboot``), or a driver is not loaded yet (the node reads a driver/library mismatch, a loaded driver
    other than the pinned one, or, with ``driver_flavor``, a loaded kernel module of the other flavor)."""
    facts = facts if isinstance(facts, dict) else {}
    pin = pin if isinstance(pin, dict) else {}
    if set(changed_components or ()) & {'driver', 'kernel'}:
        return True
    if facts.get('pending_reboot') is not None:
        return True
    if 'driver' not in pin or check_mode:
        return False
    if (facts.get('health_reason') or '') in ('driver_library_mismatch', 'driver_unreachable'):
        return True
    loaded = facts.get('kernel_module_flavor')
    if driver_flavor in MODULE_FLAVOR and loaded is not None and loaded != MODULE_FLAVOR[driver_flavor]:
        return True
    return facts.get('driver_version') is not None and facts.get('driver_version') != str(pin['driver'])


def checked_options(options):
    """``options`` with their defaults, each checked: a choice names its variable, a boolean comes from its templated forms."""
    options = dict(options or {})
    _choice(options.get('on_broken', 'quarantine'), ON_BROKEN, 'node_upgrade_on_broken')
    _choice(options.get('reboot', 'required'), REBOOT_POLICIES, 'node_upgrade_reboot')
    _choice(options.get('reboot_method', 'os'), REBOOT_METHODS, 'node_upgrade_reboot_method')
    if options.get('driver_flavor') not in (None, ''):
        _choice(options['driver_flavor'], DRIVER_FLAVORS, 'node_upgrade_driver_flavor')
    defaults = {'on_broken': 'quarantine', 'skip': False, 'resumed_from': '', 'reboot': 'required', 'reboot_method': 'os',
                'power_cycle_on_hang': True, 'bmc': False, 'reason': 'gpufleet upgrade', 'reboot_timeout': 1200, 'node': '',
                'converge': True, 'previous_pin': False, 'driver_takeover': False, 'driver_flavor': ''}
    for key, value in defaults.items():
        options.setdefault(key, value)
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ProcedureError('options: unknown keys %s' % ', '.join(unknown))
    for key in ('skip', 'power_cycle_on_hang', 'bmc', 'converge', 'previous_pin', 'driver_takeover'):
        options[key] = _truthy(options[key], 'options.' + key)
    options['driver_flavor'] = options['driver_flavor'] or ''
    return options


def _truthy(value, name):
    """A boolean from a role variable (a bool, or the strings and numbers Ansible templates one into); anything else fails."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ('true', 'yes', 'on', '1'):
        return True
    if text in ('false', 'no', 'off', '0', ''):
        return False
    raise ProcedureError('%s: %r is not a boolean' % (name, value))


def _enter(state, step, now):
    """``state`` moved on to ``step``: its phase (by the path it is on) and a mark when the phase changes."""
    state['next'] = _choice(step, STEPS, 'step')
    if step == 'end':
        return state
    phase = _PHASE_OF[state['recovering']].get(step)
    if phase is None:
        raise ProcedureError('step %s is not a step of the %s path' % (step, state['recovering'] or 'upgrade'))
    if phase != state['phase']:
        state['phase'] = phase
        state['marks'].append([phase, now])
    # The identifier of this step's scheduler call (node_drain_request): its answer, never an earlier call's, is followed.
    state['steps'] = state.get('steps', 0) + 1
    state['request'] = '%s/%s/%d' % (state['options']['node'], state.get('id') or '', state['steps'])
    # Whether a failure from here on reads the node again first (nothing to read before the change, nor from a lost node).
    state['read_on_failure'] = phase not in BEFORE_CHANGE and not state['unreachable']
    state['scheduler_reason'] = one_line(state['why'] if step == 'quarantine' else state['options']['reason'])
    return state


def _end(state, final, reason):
    state['state'] = _choice(final, STATES, 'state')
    state['reason'] = reason or ''
    return _enter(state, 'end', None)


def _new_state(options, now, owner, facts=None, pin=None):
    """A procedure in pre-check on a node with ``facts`` converging to ``pin``; ``next`` is set by the first rule."""
    facts = facts or {}
    return {
        'next': '', 'phase': 'precheck', 'marks': [['precheck', now]], 'state': '', 'reason': '', 'recovering': '',
        'id': '%.6f' % (now or 0), 'steps': 0, 'request': '', 'owner': owner or '', 'options': options,
        'before': {'versions': versions(facts) if facts else {}, 'gpu_count': facts.get('gpu_count')},
        'target': pin, 'converge_pin': pin, 'pin_recorded': facts.get('recorded_pin'),
        'drain': None, 'reboot': {}, 'validation': None, 'rollback_validation': None, 'rollback_pin': None, 'rma': False,
        'unreachable': False, 'failure': '', 'why': '', 'read_on_failure': False, 'clear_reboot_mark': False, 'scheduler_reason': '',
        # A take-over of a runfile driver (precheck): {'from', 'evidence', 'reason', 'uninstaller'}; None: none.
        'takeover': None,
    }


def start(options, facts, pin, now, owner=''):
    """The state of a new procedure on a node with ``facts`` (gpufleet facts) converging to ``pin`` (the pinned versions,
    None for a reboot-only run), and the first step: ``drain``, ``quarantine`` (broken before the upgrade) or ``end``
    (left alone).  ``options``: converge, previous_pin (the pin is the node's own previous pin: a node without one is left
    alone), on_broken, skip, resumed_from, reboot, reboot_method, power_cycle_on_hang, bmc (a BMC is configured), reason
    (the scheduler's reason), reboot_timeout, node, driver_takeover (take a runfile driver over), driver_flavor (the flavor the
    converge installs: its loaded module decides a reboot; '' the role's default).  ``owner``: who runs the procedure (the
    action's ansible-playbook process), so that a state left by another run (a fact cache keeps facts between runs) is never
    taken for this one's (:func:`fresh`)."""
    options = checked_options(options)
    facts = facts if isinstance(facts, dict) else None
    if facts is None:
        raise ProcedureError('facts: the node gave no gpufleet facts')
    pin = _pin_of(pin)
    if not options['driver_flavor']:
        # No flavor asked: the converge keeps the loaded kernel module's (a switch nobody asked for could leave an open-only
        # GPU without a driver); no module loaded reads as the proprietary server flavor, the roles' own default.
        options['driver_flavor'] = 'open' if facts.get('kernel_module_flavor') == 'open' else 'server'
    state = _new_state(options, now, owner, facts, pin)
    if options['converge'] and options['previous_pin'] and pin is None and not options['skip']:
        return _end(state, 'left_alone', 'no previous pin recorded on the node (pin.previous.json): nothing to roll back to')
    decided = precheck(facts, on_broken=options['on_broken'], skip=options['skip'], resumed_from=options['resumed_from'] or '',
                       pin=pin if options['converge'] else None, takeover=options['driver_takeover'])
    if decided['action'] == 'left_alone':
        return _end(state, 'left_alone', decided['reason'])
    if decided['takeover']:
        state['takeover'] = {'from': facts.get('driver_source'), 'evidence': facts.get('driver_source_evidence') or '',
                             'reason': decided['reason'], 'uninstaller': None}
    if decided['action'] == 'quarantine':
        state['why'] = decided['reason']
        return _enter(state, 'quarantine', now)
    return _enter(state, 'drain', now)


def _answer(state, outcome):
    """The scheduler's answer to this step's call: ``outcome`` when it echoes the step's request, else a ProcedureError (an
    earlier call's answer is never followed)."""
    if not isinstance(outcome, dict) or outcome.get('request', state['request']) != state['request']:
        raise ProcedureError('node_drain_result is not the answer to this step (request %r, expected %r)'
                             % ((outcome or {}).get('request') if isinstance(outcome, dict) else None, state['request']))
    return outcome.get('outcome')


def _after_drain(state, outcome, now):
    answer = _answer(state, outcome)
    state['drain'] = outcome
    if answer in DRAIN_ENDS:
        return _end(state, DRAIN_ENDS[answer], outcome.get('message') or '')
    if answer not in DRAIN_GOES_ON:
        raise ProcedureError('node_drain_result.outcome %r is not one the procedure knows' % (answer,))
    if state['converge_pin'] is not None:
        return _enter(state, 'converge', now)
    # A reboot-only run: nothing to converge.
    return _after_converge(state, {}, now)


def _after_converge(state, outcome, now):
    """``outcome``: ``facts`` (the node's gpufleet facts before the converge), ``changed_components`` (the components whose
    packages moved), ``check_mode``, ``takeover`` (package_pin's ``package_pin_takeover``: what NVIDIA's uninstaller did,
    ``{'ran': False}`` when it did not run); ``{}`` for a reboot-only run (nothing converged)."""
    outcome = outcome if isinstance(outcome, dict) else {}
    options = state['options']
    ran = outcome.get('takeover') if isinstance(outcome.get('takeover'), dict) and outcome['takeover'].get('ran') else None
    if state.get('takeover') is not None and ran and not state['recovering']:
        state['takeover']['uninstaller'] = dict((key, value) for key, value in ran.items() if key != 'ran')
    state['reboot'] = {'method': options['reboot_method'], 'rebooted': False, 'fallback': '', 'power_cycled': False}
    needed = bool(outcome) and reboot_required(outcome.get('facts'), state['converge_pin'], outcome.get('changed_components'),
                                               check_mode=bool(outcome.get('check_mode')), driver_flavor=options.get('driver_flavor'))
    if options['reboot'] == 'always' or needed:
        return _enter(state, 'reboot', now)
    return _enter(state, 'validate', now)


def _lost(state, message):
    """A node that did not come back: unreachable, quarantined (its scheduler is asked from the controller)."""
    options = state['options']
    text = '%s: did not come back from the reboot within %s s (%s)%s' % (
        options['node'], options['reboot_timeout'], message or '', '' if options['bmc'] else '; no BMC configured for a power cycle')
    lost = '%s: %s' % (state['phase'], text.replace(options['node'] + ': ', '', 1) if options['node'] else text)
    state['unreachable'] = True
    if state['recovering']:
        # Lost while recovering (the rollback's reboot): the first failure stays the one the node is quarantined after.
        state['why'] = '%s; before it: %s' % (lost, state['failure'])
        return state
    state['failure'] = lost
    state['why'] = 'unreachable after the reboot: %s' % lost
    return state


def _after_reboot(state, outcome, now):
    """``outcome``: ``reload`` (driver_reload's result, or skipped) and ``os`` (ansible.builtin.reboot's, or skipped)."""
    outcome = outcome if isinstance(outcome, dict) else {}
    reload_result = outcome.get('reload') if isinstance(outcome.get('reload'), dict) else {}
    os_result = outcome.get('os') if isinstance(outcome.get('os'), dict) else {}
    options = state['options']
    method = options['reboot_method']
    reloaded = bool(reload_result.get('reloaded'))
    hung = method == 'bmc' or bool(os_result.get('failed')) or bool(os_result.get('unreachable'))
    message = str(os_result.get('msg') or '') if hung else ''
    state['reboot'] = {'method': method, 'rebooted': False, 'reloaded': reloaded, 'fallback': str(reload_result.get('reason') or ''),
                       'power_cycled': False, 'used': 'driver_reload' if reloaded else ('bmc' if method == 'bmc' else 'os'), 'message': message}
    state['clear_reboot_mark'] = False
    if reloaded:
        return _enter(state, 'validate', now)
    if not hung:
        state['reboot']['rebooted'] = True
        state['clear_reboot_mark'] = True
        return _enter(state, 'validate', now)
    if method == 'bmc' or (options['power_cycle_on_hang'] and options['bmc']):
        return _enter(state, 'power_cycle', now)
    return _enter(_lost(state, message), 'quarantine', now)


def booted_again(before, after):
    """Whether a node came back from a power cycle: the boot time (or boot id) read after it (``after``, a registered command
    result; skipped when the node never answered) differs from the one read before (``before``)."""
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    if after.get('skipped') or after.get('rc', 1) != 0:
        return False
    return str(after.get('stdout') or '') != str(before.get('stdout') or '')


def _after_power_cycle(state, outcome, now):
    """``outcome``: ``before`` and ``after``, the boot time read before the power cycle and once the node answered again."""
    outcome = outcome if isinstance(outcome, dict) else {}
    back = booted_again(outcome.get('before'), outcome.get('after'))
    state['reboot'].update(power_cycled=back, rebooted=back, used='bmc' if back or state['options']['reboot_method'] == 'bmc' else 'os')
    if back:
        state['clear_reboot_mark'] = True
        return _enter(state, 'validate', now)
    return _enter(_lost(state, state['reboot'].get('message')), 'quarantine', now)


def _after_validate(state, outcome, now):
    """``outcome``: node_validate_result. Not fit for service: :class:`StepFailed` (the YAML's rescue runs :func:`fail`)."""
    if not isinstance(outcome, dict) or 'passed' not in outcome:
        raise ProcedureError('node_validate_result: no validation result')
    key = 'validation' if not state['recovering'] else 'rollback_validation'
    state[key] = outcome
    state['clear_reboot_mark'] = False
    if not outcome['passed']:
        raise StepFailed('%s: not fit for service: %s' % (state['options']['node'], outcome.get('message') or 'validation failed'), state)
    return _enter(state, 'uncordon', now)


def _after_scheduler(state, outcome, now):
    """The last step (uncordon or quarantine) answered: the final state."""
    del now
    answer = _answer(state, outcome)
    if state['next'] == 'quarantine':
        if answer not in QUARANTINE_ENDS:
            raise ProcedureError('node_drain_result.outcome %r is not one the procedure knows' % (answer,))
        final = QUARANTINE_ENDS[answer]
        return _end(state, final, state['why'] if final == 'quarantined' else outcome.get('message') or '')
    if answer not in UNCORDON_OUTCOMES:
        raise ProcedureError('node_drain_result.outcome %r is not one the procedure knows' % (answer,))
    path = state['recovering']
    reason = {'': '', 'restore': state['failure'],
              'rollback': 'rolled back to the previous pin after %s' % state['failure'],
              'revalidate': 'put back as it was after %s' % state['failure']}[path]
    return _end(state, _UNCORDON_STATE[path], reason)


_AFTER = {'drain': _after_drain, 'converge': _after_converge, 'reboot': _after_reboot, 'power_cycle': _after_power_cycle,
          'validate': _after_validate, 'uncordon': _after_scheduler, 'quarantine': _after_scheduler}


class StepFailed(Exception):
    """The step ran and the node failed it (not fit for service); ``state`` is the procedure with what the step found."""

    def __init__(self, message, state):
        super().__init__(message)
        self.state = state


def advance(state, outcome, now):
    """The procedure after its step ``state['next']`` returned ``outcome``: a new state (``state`` is not changed).

    Raises :class:`StepFailed` when the node failed the step, :class:`ProcedureError` on an outcome no rule knows."""
    state = copy.deepcopy(state)
    step = state.get('next')
    if step not in _AFTER:
        raise ProcedureError('no step is running (next is %r): nothing to advance' % (step,))
    return _AFTER[step](state, outcome, now)


def fresh(state, owner=None):
    """Whether ``state`` is a procedure in progress (not one that ended, nor none) of ``owner`` (when given)."""
    return isinstance(state, dict) and state.get('next') not in (None, '', 'end') and (owner is None or state.get('owner') == owner)


def fail(state, message, facts_now=None, validation=None, now=None, options=None, owner=None):
    """The procedure after a step failed with ``message``: the recovery (a rollback, a re-validation, the node put back, or
    a quarantine) as the next step.  ``facts_now``: the node's gpufleet facts read after the failure (None when not read);
    ``validation``: node_validate_result when a validation failed.  A ``state`` that is not in progress (the failure came
    before the procedure started: the facts could not be read; or one another run left) starts a new one in pre-check from
    ``options``."""
    if not fresh(state, owner):
        state = dict(_new_state(checked_options(options), now, owner), next='drain')
    state = copy.deepcopy(state)
    state['clear_reboot_mark'] = False
    node = state['options']['node']
    text = str(message or 'failed')
    if node:
        text = text.replace(node + ': ', '')
    failure = '%s: %s' % (state['phase'], text)
    facts_now = facts_now if isinstance(facts_now, dict) else {}
    if state['recovering']:
        # The recovery failed too: quarantine; an RMA suspect when it failed the validation on both pins.
        if state['phase'] == 'rollback_validate' and isinstance(validation, dict):
            state['rollback_validation'] = validation
        rma = (state['recovering'] == 'rollback' and _failed(state['rollback_validation']) and _failed(state['validation']))
        state['rma'] = rma
        state['why'] = '%s: %s' % (RMA_REASON if rma else '%s; before it' % failure, state['failure'])
        return _enter(state, 'quarantine', now)
    if state['phase'] == 'validate' and isinstance(validation, dict):
        state['validation'] = validation
    state['failure'] = failure
    if state.get('takeover') is not None and state['phase'] not in BEFORE_CHANGE and not _takeover_untouched(state, facts_now):
        # The take-over began (or the node could not be read): the runfile driver it removed came from no package pin.
        state['why'] = '%s: %s' % (TAKEOVER_QUARANTINE, failure)
        return _enter(state, 'quarantine', now)
    plan = rescue_plan(state['phase'], unreachable=state['unreachable'], pin_before=state['pin_recorded'],
                       pin_after=facts_now.get('recorded_pin'), previous_pin=facts_now.get('previous_pin'), target_pin=state['target'],
                       validation_failed=_failed(state['validation']) and state['phase'] == 'validate',
                       resumed_from=state['options']['resumed_from'] or '')
    if plan['action'] == 'quarantine':
        state['why'] = '%s: %s' % (plan['reason'], failure) if plan['reason'] else failure
        return _enter(state, 'quarantine', now)
    state['recovering'] = plan['action']
    if plan['action'] == 'rollback':
        state['rollback_pin'] = plan['rollback_pin']
        state['converge_pin'] = plan['rollback_pin']
        return _enter(state, 'converge', now)
    if plan['action'] == 'revalidate':
        # Nothing changed: the node is validated as it is (health, GPUs, DCGM), not against the pin it never reached.
        state['converge_pin'] = None
        return _enter(state, 'validate', now)
    return _enter(state, 'uncordon', now)


def _takeover_untouched(state, facts_now):
    """Whether a take-over's converge failed before it changed anything: in its pre-flight (gpu_stack records the pin, then
    runs the uninstaller), so the node read after the failure still has the runfile driver and the pin recorded before."""
    return (state['phase'] == 'converge' and bool(facts_now) and facts_now.get('driver_source') == 'runfile'
            and facts_now.get('recorded_pin') == state['pin_recorded'])


def facts_of(registered):
    """The gpufleet facts of a registered ``gpu_facts`` result; None when it was skipped, failed or did not reach the node."""
    if not isinstance(registered, dict) or registered.get('skipped') or registered.get('failed') or registered.get('unreachable'):
        return None
    facts = (registered.get('ansible_facts') or {}).get('gpufleet') if isinstance(registered.get('ansible_facts'), dict) else None
    return facts if isinstance(facts, dict) else None


def _failed(validation):
    return isinstance(validation, dict) and validation.get('passed') is False


def result_fields(state, error=''):
    """The keyword arguments of :func:`_upgrade.result` from a procedure's state; a state that never reached a final
    state (its recovery failed, or the procedure never started) gives ``state`` '' and the error as the reason."""
    state = state if isinstance(state, dict) else {}
    final = state.get('state') or ''
    return {
        'state': final,
        'phase': state.get('phase') or 'precheck',
        'reason': state.get('reason') if final else (str(error or '') or state.get('why') or ''),
        'marks': state.get('marks') or [],
        'versions_before': (state.get('before') or {}).get('versions') or {},
        'gpu_count_before': (state.get('before') or {}).get('gpu_count'),
        'validation': state.get('validation'),
        'rollback_validation': state.get('rollback_validation'),
        'pin': state.get('target'),
        'rollback_pin': state.get('rollback_pin'),
        'rma': bool(state.get('rma')),
        'drain': state.get('drain'),
        'reboot': state.get('reboot') or {},
        'takeover': state.get('takeover'),
    }
