# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Role variables are documented once, in each role's meta/argument_specs.yml.

docs/role-variables.md is generated from the specs (hacking/render_role_docs.py) and must not be stale; the defaults
and the spec name the same variables with the same defaults; the role READMEs link to the generated page instead of
listing variables themselves.
"""

import importlib.util
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'hacking', 'render_role_docs.py')


def _load_renderer():
    spec = importlib.util.spec_from_file_location('gpufleet_render_role_docs', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RENDER = _load_renderer()
ROLES = RENDER.roles_with_specs(ROOT)


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding='utf-8') as handle:
        return handle.read()


def test_generated_role_variables_doc_is_current():
    stale, message = RENDER.check(ROOT, RENDER.render(ROOT))
    assert not stale, '%s\nRegenerate it: python hacking/render_role_docs.py' % message


def test_check_mode_exit_status(tmp_path):
    for role in ('one', 'two'):
        os.makedirs(str(tmp_path / 'roles' / role / 'meta'))
        (tmp_path / 'roles' / role / 'meta' / 'argument_specs.yml').write_text(
            'argument_specs:\n  main:\n    short_description: Role %s.\n    options: &o\n      %s_x:\n        type: int\n'
            '        default: 1\n        description: C(x) is I(y).\n  other:\n    short_description: Same.\n    options: *o\n'
            % (role, role), encoding='utf-8')
    os.makedirs(str(tmp_path / 'docs'))
    assert RENDER.main(['--root', str(tmp_path), '--check']) == 1
    assert RENDER.main(['--root', str(tmp_path)]) == 0
    assert RENDER.main(['--root', str(tmp_path), '--check']) == 0
    text = (tmp_path / 'docs' / 'role-variables.md').read_text(encoding='utf-8')
    assert '| `one_x` | `int` | `1` |  | `x` is `y`. |' in text
    assert 'Same variables as [`main`](#two-main).' in text
    assert text == RENDER.render(str(tmp_path))
    (tmp_path / 'roles' / 'two' / 'meta' / 'argument_specs.yml').write_text(
        'argument_specs:\n  main:\n    short_description: Changed.\n', encoding='utf-8')
    stale, message = RENDER.check(str(tmp_path), RENDER.render(str(tmp_path)))
    assert stale and 'python hacking/render_role_docs.py' in message and '+Changed.' in message


@pytest.mark.parametrize('text, markdown', [
    ('C(gpu_stack_pin) is I(empty)', '`gpu_stack_pin` is `empty`'),
    ('M(gpufleet.lifecycle.gpu_facts) and P(gpufleet.lifecycle.slurm_node#module)', '`gpufleet.lifecycle.gpu_facts` and `gpufleet.lifecycle.slurm_node`'),
    ('O(a=b) V(c) E(HOME) RV(x.y)', '`a=b` `c` `HOME` `x.y`'),
    ('C({SLURM_CONF: /etc/slurm/slurm.conf})', '`{SLURM_CONF: /etc/slurm/slurm.conf}`'),
    ('nvidia-driver-<branch>-server', 'nvidia-driver-&lt;branch&gt;-server'),
    ('C(nvidia-driver-<branch>-server)', '`nvidia-driver-<branch>-server`'),
    ('B(never) L(the docs,https://example.org) U(https://example.org)', '**never** [the docs](https://example.org) <https://example.org>'),
    ('vmlinuz-* and ABC(x)', 'vmlinuz-\\* and ABC(x)'),
])
def test_markup(text, markdown):
    assert RENDER.markup(text) == markdown


@pytest.mark.parametrize('value, text', [
    ('', '""'), ('server', 'server'), ('/etc/gpufleet', '/etc/gpufleet'), ('2', '"2"'), ('yes', '"yes"'),
    ("{{ gpufleet_pin | default({}) }}", '"{{ gpufleet_pin | default({}) }}"'), (True, 'true'), (None, 'null'), (300, '300'),
    ([1, 3], '[1, 3]'), ({}, '{}'), (['rolled_back', 'quarantined'], '[rolled_back, quarantined]'), ({'a': 'b c'}, '{a: b c}'),
])
def test_default_values_as_yaml(value, text):
    assert RENDER.yaml_value(value) == text


def test_a_table_cell_escapes_pipes():
    assert RENDER.cell(RENDER.code('{{ x | default(1) }}')) == '`{{ x \\| default(1) }}`'


@pytest.mark.parametrize('role', ROLES)
def test_defaults_and_spec_name_the_same_variables(role):
    specs = yaml.safe_load(_read('roles', role, 'meta', 'argument_specs.yml'))['argument_specs']
    options = specs['main'].get('options') or {}
    path = os.path.join(ROOT, 'roles', role, 'defaults', 'main.yml')
    defaults = yaml.safe_load(_read('roles', role, 'defaults', 'main.yml')) if os.path.isfile(path) else {}
    defaults = defaults or {}
    assert sorted(set(defaults) - set(options)) == [], '%s: variables in defaults/main.yml without a spec entry (document them in the spec)' % role
    assert sorted(set(options) - set(defaults)) == [], '%s: spec options without a value in defaults/main.yml' % role
    differ = dict((name, (option['default'], defaults[name])) for name, option in options.items()
                  if 'default' in option and option['default'] != defaults[name])
    assert differ == {}, '%s: spec default != defaults/main.yml (spec, defaults)' % role


@pytest.mark.parametrize('role', ROLES)
def test_every_entry_point_is_in_the_generated_doc(role):
    text = _read('docs', 'role-variables.md')
    specs = yaml.safe_load(_read('roles', role, 'meta', 'argument_specs.yml'))['argument_specs']
    for name in specs:
        assert '### %s: %s' % (role, name) in text


@pytest.mark.parametrize('role', ROLES)
def test_readme_links_to_the_generated_doc_and_lists_no_variables(role):
    text = _read('roles', role, 'README.md')
    assert '../../docs/role-variables.md#%s' % role in text
    rows = [line for line in text.splitlines() if re.match(r'\|\s*`%s_' % re.escape(role), line)]
    assert rows == [], '%s/README.md has a variable table; the variables belong in meta/argument_specs.yml' % role
