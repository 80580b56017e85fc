# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout policy: the ``gpufleet_*`` variables that decide how fast and how safely a fleet moves.

Controller-side, no Ansible import.  :func:`load_policy` reads the variables (as Ansible hands them over:
``-e gpufleet_window=10`` arrives as the text ``"10"``), validates every one and returns a frozen
:class:`Policy`.  A bad value raises :class:`PolicyError` naming the variable, what it must be and what it
got, before any node is touched.  The variables, their defaults and examples are in ``docs/rollout-policy.md``.

The maintenance window format (:func:`parse_maintenance_window`)::

    gpufleet_maintenance_window:            # one window, or a list of them
      days: [sat, sun]                      # the days a window STARTS on; default every day
      start: "22:00"                        # local wall-clock time, HH:MM
      end: "06:00"                          # end <= start: the window crosses midnight into the next day
      timezone: Europe/Berlin               # IANA name, default UTC

``end: "24:00"`` is the end of the day; ``start == end`` is refused (empty or whole day? say which).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
import zoneinfo

DAYS = ('mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun')
_DAY_ALIASES = {
    'monday': 'mon', 'tuesday': 'tue', 'wednesday': 'wed', 'thursday': 'thu', 'friday': 'fri',
    'saturday': 'sat', 'sunday': 'sun',
}
_TIME = re.compile(r'^([01]?[0-9]|2[0-4]):([0-5][0-9])$')
_PERCENT = re.compile(r'^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$')
_NUMBER = re.compile(r'^\s*[0-9]+(?:\.[0-9]+)?\s*$')
_URL = re.compile(r'^https?://[^\s/]+', re.IGNORECASE)
_VARIABLE_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')

# name -> default; the order is the order of the documentation.
DEFAULTS = {
    'gpufleet_window': 1,
    'gpufleet_canary': 1,
    'gpufleet_capacity_floor': 0.0,
    'gpufleet_domain_var': None,
    'gpufleet_domain_max': None,
    'gpufleet_max_fail_percentage': 0,
    'gpufleet_budget_window': True,
    'gpufleet_job_aware': True,
    'gpufleet_predrain': True,
    'gpufleet_maintenance_window': None,
    'gpufleet_soak_seconds': 0,
    'gpufleet_retries': 0,
    'gpufleet_escalation': None,
    'gpufleet_pin_fault_threshold': 2,
    'gpufleet_pin_fault_early_nodes': 10,
    'gpufleet_circuit_breaker_threshold': 3,
    'gpufleet_circuit_breaker_window': 3600,
}
VARIABLES = tuple(DEFAULTS)


class PolicyError(ValueError):
    """A policy variable with a value that cannot be used; the message starts with the variable's name."""

    def __init__(self, variable, message):
        self.variable = variable
        super().__init__('%s: %s' % (variable, message))


def _shown(value):
    return '%r (%s)' % (value, type(value).__name__)


@dataclasses.dataclass(frozen=True)
class Window:
    """One recurring maintenance window: it opens on ``days`` at ``start`` (minutes after local midnight)."""

    days: tuple
    start: int
    end: int
    timezone: str

    @property
    def crosses_midnight(self):
        return self.end <= self.start

    def to_dict(self):
        return {'days': list(self.days), 'start': _hhmm(self.start), 'end': _hhmm(self.end), 'timezone': self.timezone}


@dataclasses.dataclass(frozen=True)
class Policy:
    """A validated rollout policy.  ``window`` and ``capacity_floor`` keep the form they were given in."""

    window: object = 1                 # int >= 1, or a share of the rollout's nodes as a float in (0, 1]
    canary: int = 1
    capacity_floor: float = 0.0        # share of the fleet's GPUs that must stay schedulable, 0 = no floor
    domain_var: str | None = None
    domain_max: int | None = None
    max_fail_percentage: float | None = 0
    budget_window: bool = True         # the window never exceeds what the failure budget can still absorb
    job_aware: bool = True             # a job's nodes go together, at its declared checkpoint (the gate's job rules)
    predrain: bool = True              # the nodes still to go carry a soft "going soon" mark (_predrain)
    maintenance_window: tuple = ()     # of Window; empty = always open
    soak_seconds: float = 0
    retries: int = 0
    escalation: object = None          # tuple argv, or a URL text
    pin_fault_threshold: int | None = 2
    pin_fault_early_nodes: int = 10
    circuit_breaker_threshold: int | None = 3
    circuit_breaker_window: float = 3600

    def window_size(self, total):
        """The window as a node count for a rollout of ``total`` nodes: a share rounds down, at least 1."""
        if isinstance(self.window, float):
            return max(1, int(math.floor(total * self.window + 1e-9)))
        return self.window

    def budget_cap(self, total, failed):
        """How many nodes may be in flight so that the failure budget keeps its promise, or None (no cap).

        The budget allows ``floor(max_fail_percentage * total / 100)`` failures; with ``failed`` spent, at most the failures
        it can still absorb plus one may be in flight: if every one of them fails, the run pauses having exceeded the
        budget by the one failure that showed it is spent, never by more.  None without a budget or with
        ``gpufleet_budget_window: false``.
        """
        if not self.budget_window or self.max_fail_percentage is None or not total:
            return None
        allowed = int(math.floor(self.max_fail_percentage * total / 100.0 + 1e-9))
        return max(0, allowed - failed) + 1

    def in_maintenance_window(self, now):
        """True when admissions are allowed at ``now`` (an aware datetime)."""
        return in_maintenance_window(self.maintenance_window, now)

    def to_dict(self):
        """The policy with the variables' names, as ``state.json`` records it."""
        window = self.window
        if isinstance(window, float):
            window = '%s%%' % _number_text(window * 100)
        return {
            'gpufleet_window': window,
            'gpufleet_canary': self.canary,
            'gpufleet_capacity_floor': self.capacity_floor,
            'gpufleet_domain_var': self.domain_var,
            'gpufleet_domain_max': self.domain_max,
            'gpufleet_max_fail_percentage': self.max_fail_percentage,
            'gpufleet_budget_window': self.budget_window,
            'gpufleet_job_aware': self.job_aware,
            'gpufleet_predrain': self.predrain,
            'gpufleet_maintenance_window': [w.to_dict() for w in self.maintenance_window] or None,
            'gpufleet_soak_seconds': self.soak_seconds,
            'gpufleet_retries': self.retries,
            'gpufleet_escalation': list(self.escalation) if isinstance(self.escalation, tuple) else self.escalation,
            'gpufleet_pin_fault_threshold': self.pin_fault_threshold,
            'gpufleet_pin_fault_early_nodes': self.pin_fault_early_nodes,
            'gpufleet_circuit_breaker_threshold': self.circuit_breaker_threshold,
            'gpufleet_circuit_breaker_window': self.circuit_breaker_window,
        }


def _number_text(value):
    return ('%f' % value).rstrip('0').rstrip('.')


def _hhmm(minutes):
    return '%02d:%02d' % divmod(minutes, 60)


def _number(variable, value, what, allow_float=True):
    """An int or float from a number or its text (``-e`` values are text); booleans refused."""
    if isinstance(value, bool) or value is None:
        raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))
        if not allow_float and value != int(value):
            raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))
        return value if allow_float else int(value)
    if isinstance(value, str) and _NUMBER.match(value):
        number = float(value)
        if number == int(number) and '.' not in value:
            return int(value.strip())
        if not allow_float:
            raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))
        return number
    raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))


def whole(variable, value, minimum=0):
    """A whole number >= ``minimum``."""
    what = 'a whole number >= %d' % minimum
    number = _number(variable, value, what, allow_float=False)
    if number < minimum:
        raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))
    return int(number)


def seconds(variable, value):
    """A duration in seconds >= 0 (whole or fractional)."""
    number = _number(variable, value, 'a number of seconds >= 0')
    if number < 0:
        raise PolicyError(variable, 'must be a number of seconds >= 0, got %s' % _shown(value))
    return number


def share(variable, value, what):
    """A share in [0, 1] from ``0.9``, ``"0.9"`` or ``"90%"``."""
    if isinstance(value, str):
        match = _PERCENT.match(value)
        if match:
            number = float(match.group(1)) / 100
            if number > 1:
                raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))
            return number
    number = float(_number(variable, value, what))
    if not 0 <= number <= 1:
        raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))
    return number


def parse_window(value):
    """``gpufleet_window``: a node count >= 1, or ``"N%"`` of the rollout's nodes (0 < N <= 100)."""
    variable = 'gpufleet_window'
    what = 'a node count >= 1 or a percentage such as "10%"'
    if isinstance(value, str):
        match = _PERCENT.match(value)
        if match:
            number = float(match.group(1))
            if not 0 < number <= 100:
                raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))
            return number / 100
    number = _number(variable, value, what, allow_float=False)
    if number < 1:
        raise PolicyError(variable, 'must be %s, got %s' % (what, _shown(value)))
    return int(number)


def parse_day(variable, value):
    if isinstance(value, str):
        day = value.strip().lower()
        day = _DAY_ALIASES.get(day, day)
        if day in DAYS:
            return day
    raise PolicyError(variable, 'days: %s is not a day; use %s' % (_shown(value), ', '.join(DAYS)))


def parse_time(variable, key, value):
    """``HH:MM`` (``24:00`` allowed) to minutes after midnight."""
    match = _TIME.match(value.strip()) if isinstance(value, str) else None
    if match:
        minutes = int(match.group(1)) * 60 + int(match.group(2))
        if minutes <= 24 * 60:
            return minutes
    hint = ' (quote it: YAML reads an unquoted 22:00 as a number)' if isinstance(value, int) else ''
    raise PolicyError(variable, '%s must be a time "HH:MM", got %s%s' % (key, _shown(value), hint))


def parse_maintenance_window(value):
    """``gpufleet_maintenance_window``: None/empty (always open), one mapping, or a list of mappings."""
    variable = 'gpufleet_maintenance_window'
    if value is None or value == '' or value == [] or value == {}:
        return ()
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, (list, tuple)):
        raise PolicyError(variable, 'must be a mapping {days, start, end, timezone} or a list of them, got %s' % _shown(value))
    windows = []
    for index, item in enumerate(items):
        name = variable if isinstance(value, dict) else '%s[%d]' % (variable, index)
        if not isinstance(item, dict):
            raise PolicyError(name, 'must be a mapping {days, start, end, timezone}, got %s' % _shown(item))
        unknown = sorted(set(item) - {'days', 'start', 'end', 'timezone'})
        if unknown:
            raise PolicyError(name, 'unknown key(s) %s; the keys are days, start, end, timezone' % ', '.join(map(str, unknown)))
        for key in ('start', 'end'):
            if key not in item:
                raise PolicyError(name, '%s is missing (a time "HH:MM")' % key)
        days = item.get('days', list(DAYS))
        if isinstance(days, str):
            days = [days]
        if not isinstance(days, (list, tuple)) or not days:
            raise PolicyError(name, 'days must be a non-empty list such as [mon, tue], got %s' % _shown(days))
        parsed_days = tuple(sorted({parse_day(name, day) for day in days}, key=DAYS.index))
        start = parse_time(name, 'start', item['start'])
        end = parse_time(name, 'end', item['end'])
        if start == 24 * 60:
            raise PolicyError(name, 'start must be before 24:00, got %s' % _shown(item['start']))
        if start == end:
            raise PolicyError(name, 'start and end are both %s: for a whole day write start "00:00", end "24:00"' % _hhmm(start))
        timezone = item.get('timezone', 'UTC')
        if not isinstance(timezone, str) or not timezone:
            raise PolicyError(name, 'timezone must be an IANA name such as Europe/Berlin, got %s' % _shown(timezone))
        try:
            zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise PolicyError(name, 'timezone %r is not a known time zone (%s)' % (timezone, exc)) from None
        windows.append(Window(days=parsed_days, start=start, end=end, timezone=timezone))
    return tuple(windows)


def _local(now, window):
    if now.tzinfo is None:
        raise ValueError('now must be an aware datetime (with a time zone), got %r' % (now,))
    return now.astimezone(zoneinfo.ZoneInfo(window.timezone))


def window_open(window, now):
    """True when ``now`` falls inside this recurring window (local wall-clock time of its time zone)."""
    local = _local(now, window)
    minute = local.hour * 60 + local.minute
    today = DAYS[local.weekday()]
    yesterday = DAYS[(local.weekday() - 1) % 7]
    if not window.crosses_midnight:
        return today in window.days and window.start <= minute < window.end
    return (today in window.days and minute >= window.start) or (yesterday in window.days and minute < window.end)


def in_maintenance_window(windows, now):
    """No windows: always open; else open when any window is."""
    return not windows or any(window_open(window, now) for window in windows)


def next_opening(windows, now):
    """The earliest aware datetime >= ``now`` at which a window is open (``now`` itself when open), or None."""
    if in_maintenance_window(windows, now):
        return now
    best = None
    for window in windows:
        zone = zoneinfo.ZoneInfo(window.timezone)
        local = _local(now, window)
        for ahead in range(0, 8):
            day = local.date() + datetime.timedelta(days=ahead)
            if DAYS[day.weekday()] not in window.days:
                continue
            hours, minutes = divmod(window.start, 60)
            candidate = datetime.datetime(day.year, day.month, day.day, hours, minutes, tzinfo=zone)
            # A start inside a DST gap does not exist; the round trip through UTC moves it to the first valid minute.
            candidate = candidate.astimezone(datetime.timezone.utc)
            if candidate >= now:
                if best is None or candidate < best:
                    best = candidate
                break
    return best


def parse_escalation(value):
    """``gpufleet_escalation``: None, an argument list (a command) or an http(s) URL (POSTed to)."""
    variable = 'gpufleet_escalation'
    if value is None or value == '' or value == []:
        return None
    if isinstance(value, str):
        if _URL.match(value.strip()):
            return value.strip()
        raise PolicyError(variable, 'a text must be an http(s) URL; give a command as a list of arguments '
                                    '(never a shell string), got %s' % _shown(value))
    if isinstance(value, (list, tuple)):
        if not all(isinstance(arg, str) and arg for arg in value):
            raise PolicyError(variable, 'a command must be a list of non-empty texts, got %s' % _shown(value))
        return tuple(value)
    raise PolicyError(variable, 'must be a command (list of arguments) or an http(s) URL, got %s' % _shown(value))


def _optional(variable, value, parse):
    """``None``/empty text disables a rule."""
    if value is None or value == '':
        return None
    return parse(variable, value)


def load_policy(variables):
    """Validate the ``gpufleet_*`` policy variables found in ``variables`` (a mapping) and return a :class:`Policy`.

    Missing variables take their default (:data:`DEFAULTS`).  Raises :class:`PolicyError` naming the variable.
    """
    if not isinstance(variables, dict):
        raise PolicyError('variables', 'must be a mapping of variable names to values, got %s' % _shown(variables))
    raw = dict(DEFAULTS)
    raw.update({key: value for key, value in variables.items() if key in DEFAULTS})

    domain_var = raw['gpufleet_domain_var']
    if domain_var in (None, ''):
        domain_var = None
    elif not isinstance(domain_var, str) or not _VARIABLE_NAME.match(domain_var):
        raise PolicyError('gpufleet_domain_var', 'must be the name of a host variable such as rack, got %s' % _shown(domain_var))
    domain_max = _optional('gpufleet_domain_max', raw['gpufleet_domain_max'], lambda v, x: whole(v, x, 1))
    if domain_max is not None and domain_var is None:
        raise PolicyError('gpufleet_domain_max', 'is set (%d) but gpufleet_domain_var is not: which host variable names the domain?'
                          % domain_max)
    if domain_var is not None and domain_max is None:
        domain_max = 1

    max_fail = raw['gpufleet_max_fail_percentage']
    if max_fail not in (None, ''):
        if isinstance(max_fail, str) and _PERCENT.match(max_fail):
            max_fail = _PERCENT.match(max_fail).group(1)
        max_fail = _number('gpufleet_max_fail_percentage', max_fail, 'a percentage between 0 and 100')
        if not 0 <= max_fail <= 100:
            raise PolicyError('gpufleet_max_fail_percentage', 'must be a percentage between 0 and 100, got %s'
                              % _shown(raw['gpufleet_max_fail_percentage']))
    else:
        max_fail = None

    breaker_threshold = _optional('gpufleet_circuit_breaker_threshold', raw['gpufleet_circuit_breaker_threshold'],
                                  lambda v, x: whole(v, x, 1))
    breaker_window = seconds('gpufleet_circuit_breaker_window', raw['gpufleet_circuit_breaker_window'])
    if breaker_threshold is not None and breaker_window <= 0:
        raise PolicyError('gpufleet_circuit_breaker_window', 'must be > 0 seconds while gpufleet_circuit_breaker_threshold is set, got %s'
                          % _shown(raw['gpufleet_circuit_breaker_window']))

    return Policy(
        window=parse_window(raw['gpufleet_window']),
        canary=whole('gpufleet_canary', raw['gpufleet_canary'], 0),
        capacity_floor=share('gpufleet_capacity_floor', raw['gpufleet_capacity_floor'] if raw['gpufleet_capacity_floor'] not in (None, '') else 0,
                             'a share of GPUs between 0 and 1 such as 0.9 or "90%"'),
        domain_var=domain_var,
        domain_max=domain_max,
        max_fail_percentage=max_fail,
        budget_window=flag('gpufleet_budget_window', raw['gpufleet_budget_window']),
        job_aware=flag('gpufleet_job_aware', raw['gpufleet_job_aware']),
        predrain=flag('gpufleet_predrain', raw['gpufleet_predrain']),
        maintenance_window=parse_maintenance_window(raw['gpufleet_maintenance_window']),
        soak_seconds=seconds('gpufleet_soak_seconds', raw['gpufleet_soak_seconds']),
        retries=whole('gpufleet_retries', raw['gpufleet_retries'], 0),
        escalation=parse_escalation(raw['gpufleet_escalation']),
        pin_fault_threshold=_optional('gpufleet_pin_fault_threshold', raw['gpufleet_pin_fault_threshold'], lambda v, x: whole(v, x, 1)),
        pin_fault_early_nodes=whole('gpufleet_pin_fault_early_nodes', raw['gpufleet_pin_fault_early_nodes'], 1),
        circuit_breaker_threshold=breaker_threshold,
        circuit_breaker_window=breaker_window,
    )


def flag(variable, value):
    """A yes/no variable: a boolean, or true/false/yes/no/on/off/1/0 as text."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if text in ('true', 'yes', 'on', '1'):
        return True
    if text in ('false', 'no', 'off', '0'):
        return False
    raise PolicyError(variable, 'must be true or false, got %s' % _shown(value))


def node_domains(hostvars, domain_var):
    """``{node: domain}`` from each node's host variables; a node without the variable is an error naming it.

    ``hostvars`` maps inventory_hostname to that host's variables.  With no ``domain_var`` every domain is None.
    """
    if domain_var is None:
        return {node: None for node in hostvars}
    domains = {}
    missing = []
    for node, host_vars in hostvars.items():
        value = host_vars.get(domain_var) if isinstance(host_vars, dict) else None
        if value is None or value == '' or isinstance(value, (dict, list)):
            missing.append(node)
        else:
            domains[node] = str(value)
    if missing:
        shown_nodes = ', '.join(sorted(missing)[:10]) + (' and %d more' % (len(missing) - 10) if len(missing) > 10 else '')
        raise PolicyError('gpufleet_domain_var', 'host variable %r is not set (or not a scalar) on %s' % (domain_var, shown_nodes))
    return domains
