# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout policy: defaults, every variable's accepted forms, and refusals that name the variable."""

import datetime

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._policy import (
    DEFAULTS, PolicyError, in_maintenance_window, load_policy, next_opening, node_domains, parse_maintenance_window)

UTC = datetime.timezone.utc


def test_defaults():
    policy = load_policy({})
    assert policy.window == 1 and policy.canary == 1 and policy.capacity_floor == 0
    assert policy.max_fail_percentage == 0 and policy.maintenance_window == ()
    assert policy.pin_fault_threshold == 2 and policy.circuit_breaker_threshold == 3 and policy.circuit_breaker_window == 3600
    assert sorted(policy.to_dict()) == sorted(DEFAULTS)


@pytest.mark.parametrize('value, total, size', [
    (3, 100, 3), ('3', 100, 3), ('10%', 1024, 102), ('10 %', 5, 1), ('100%', 8, 8), ('2.5%', 400, 10),
])
def test_window_count_and_percent(value, total, size):
    assert load_policy({'gpufleet_window': value}).window_size(total) == size


def test_window_percent_kept_in_state():
    assert load_policy({'gpufleet_window': '10%'}).to_dict()['gpufleet_window'] == '10%'


@pytest.mark.parametrize('variable, value, words', [
    ('gpufleet_window', 0, 'node count >= 1'),
    ('gpufleet_window', '0%', 'percentage'),
    ('gpufleet_window', '150%', 'percentage'),
    ('gpufleet_window', 'ten', 'node count'),
    ('gpufleet_window', True, 'node count'),
    ('gpufleet_window', 2.5, 'node count'),
    ('gpufleet_canary', -1, 'whole number >= 0'),
    ('gpufleet_capacity_floor', 1.5, 'between 0 and 1'),
    ('gpufleet_capacity_floor', '120%', 'between 0 and 1'),
    ('gpufleet_domain_var', 'rack-id', 'host variable'),
    ('gpufleet_max_fail_percentage', 101, 'between 0 and 100'),
    ('gpufleet_soak_seconds', -5, 'seconds >= 0'),
    ('gpufleet_retries', 'x', 'whole number'),
    ('gpufleet_escalation', 'notify-send oops', 'list of arguments'),
    ('gpufleet_escalation', ['notify', ''], 'non-empty texts'),
    ('gpufleet_escalation', {'url': 'x'}, 'command'),
    ('gpufleet_pin_fault_threshold', 0, '>= 1'),
    ('gpufleet_pin_fault_early_nodes', 0, '>= 1'),
    ('gpufleet_circuit_breaker_threshold', 0, '>= 1'),
    ('gpufleet_circuit_breaker_window', 'soon', 'seconds'),
])
def test_bad_value_names_the_variable(variable, value, words):
    with pytest.raises(PolicyError) as caught:
        load_policy({variable: value})
    assert str(caught.value).startswith(variable + ':')
    assert caught.value.variable == variable
    assert words in str(caught.value)
    assert repr(value) in str(caught.value) or variable == 'gpufleet_escalation'


def test_extra_vars_arrive_as_text():
    policy = load_policy({'gpufleet_canary': '2', 'gpufleet_soak_seconds': '30.5', 'gpufleet_capacity_floor': '0.9',
                          'gpufleet_max_fail_percentage': '5%'})
    assert (policy.canary, policy.soak_seconds, policy.capacity_floor, policy.max_fail_percentage) == (2, 30.5, 0.9, 5)


def test_capacity_floor_percent():
    assert load_policy({'gpufleet_capacity_floor': '90%'}).capacity_floor == pytest.approx(0.9)


def test_domain_max_defaults_to_one_with_a_domain_var():
    policy = load_policy({'gpufleet_domain_var': 'rack'})
    assert (policy.domain_var, policy.domain_max) == ('rack', 1)


def test_domain_max_without_domain_var_refused():
    with pytest.raises(PolicyError, match=r'^gpufleet_domain_max: .*gpufleet_domain_var is not'):
        load_policy({'gpufleet_domain_max': 2})


def test_breaker_and_budget_can_be_switched_off():
    policy = load_policy({'gpufleet_circuit_breaker_threshold': None, 'gpufleet_max_fail_percentage': None,
                          'gpufleet_pin_fault_threshold': ''})
    assert policy.circuit_breaker_threshold is None and policy.max_fail_percentage is None and policy.pin_fault_threshold is None


def test_escalation_forms():
    assert load_policy({'gpufleet_escalation': ['/usr/local/bin/page', '--team', 'gpu']}).escalation == ('/usr/local/bin/page', '--team', 'gpu')
    assert load_policy({'gpufleet_escalation': 'https://hooks.example.com/x'}).escalation == 'https://hooks.example.com/x'


def test_unrelated_variables_ignored():
    assert load_policy({'gpufleet_scheduler': 'slurm', 'other': 1}).window == 1


# ---- maintenance windows

BERLIN_NIGHT = {'days': ['mon', 'Tuesday'], 'start': '22:00', 'end': '06:00', 'timezone': 'Europe/Berlin'}


def at(text):
    return datetime.datetime.fromisoformat(text)


@pytest.mark.parametrize('moment, inside', [
    ('2026-11-23T21:30:00+00:00', True),    # Monday 22:30 in Berlin (UTC+1)
    ('2026-11-23T20:59:00+00:00', False),   # Monday 21:59 Berlin
    ('2026-11-24T04:59:00+00:00', True),    # Tuesday 05:59 Berlin: Monday's window, after midnight
    ('2026-11-24T05:00:00+00:00', False),   # Tuesday 06:00 Berlin: closed
    ('2026-11-25T04:00:00+00:00', True),    # Wednesday 05:00: Tuesday's window
    ('2026-11-26T04:00:00+00:00', False),   # Thursday 05:00: Wednesday has no window
    ('2026-11-22T22:00:00+00:00', False),   # Sunday 23:00 Berlin
])
def test_window_crossing_midnight(moment, inside):
    windows = parse_maintenance_window(BERLIN_NIGHT)
    assert in_maintenance_window(windows, at(moment)) is inside


def test_window_follows_daylight_saving():
    windows = parse_maintenance_window({'days': ['sat'], 'start': '02:30', 'end': '04:00', 'timezone': 'America/New_York'})
    # 2026-07-04 is a Saturday: EDT (UTC-4), 02:30 local = 06:30 UTC; in January EST (UTC-5) it is 07:30 UTC.
    assert in_maintenance_window(windows, at('2026-07-04T06:45:00+00:00'))
    assert not in_maintenance_window(windows, at('2027-01-02T06:45:00+00:00'))
    assert in_maintenance_window(windows, at('2027-01-02T07:45:00+00:00'))


def test_list_of_windows_and_whole_day():
    windows = parse_maintenance_window([{'days': ['sat', 'sun'], 'start': '00:00', 'end': '24:00'},
                                        {'days': 'wed', 'start': '12:00', 'end': '13:00', 'timezone': 'UTC'}])
    assert in_maintenance_window(windows, at('2026-11-28T23:59:00+00:00'))   # Saturday
    assert in_maintenance_window(windows, at('2026-11-25T12:30:00+00:00'))   # Wednesday noon
    assert not in_maintenance_window(windows, at('2026-11-25T13:00:00+00:00'))


def test_no_window_is_always_open():
    assert in_maintenance_window((), at('2026-11-25T13:00:00+00:00'))


def test_next_opening():
    windows = parse_maintenance_window(BERLIN_NIGHT)
    assert next_opening(windows, at('2026-11-25T12:00:00+00:00')) == at('2026-11-30T21:00:00+00:00')  # next Monday 22:00 CET
    inside = at('2026-11-23T21:30:00+00:00')
    assert next_opening(windows, inside) == inside


@pytest.mark.parametrize('value, words', [
    ({'start': '22:00'}, 'end is missing'),
    ({'start': 2200, 'end': '06:00'}, 'quote it'),
    ({'start': '25:00', 'end': '06:00'}, 'HH:MM'),
    ({'start': '22:00', 'end': '22:00'}, 'whole day'),
    ({'start': '22:00', 'end': '06:00', 'timezone': 'Mars/Olympus'}, 'not a known time zone'),
    ({'start': '22:00', 'end': '06:00', 'days': ['funday']}, 'not a day'),
    ({'start': '22:00', 'end': '06:00', 'days': []}, 'non-empty list'),
    ({'start': '22:00', 'end': '06:00', 'hours': 3}, 'unknown key'),
    ('always', 'mapping'),
])
def test_bad_maintenance_window(value, words):
    with pytest.raises(PolicyError) as caught:
        load_policy({'gpufleet_maintenance_window': value})
    assert str(caught.value).startswith('gpufleet_maintenance_window')
    assert words in str(caught.value)


def test_bad_window_in_a_list_names_its_index():
    with pytest.raises(PolicyError, match=r'^gpufleet_maintenance_window\[1\]: '):
        load_policy({'gpufleet_maintenance_window': [BERLIN_NIGHT, {'start': '1:00'}]})


def test_node_domains():
    assert node_domains({'a': {'rack': 'r1'}, 'b': {'rack': 7}}, 'rack') == {'a': 'r1', 'b': '7'}
    assert node_domains({'a': {}}, None) == {'a': None}
    with pytest.raises(PolicyError, match=r"^gpufleet_domain_var: host variable 'rack' is not set .* on b, c$"):
        node_domains({'a': {'rack': 'r1'}, 'b': {}, 'c': {'rack': ''}}, 'rack')
