# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write docs/role-variables.md from every role's meta/argument_specs.yml.

Each role variable is documented once, in its role's argument spec (which is
also what ``ansible-doc -t role`` shows and what Ansible validates a role's
input against).  This script renders those specs as one Markdown page: a
section per role, a subsection per entry point with its variables as a table
(variable, type, default, choices, description).  An entry point whose options
are the same as ``main``'s (the specs share them through a YAML anchor) says so
instead of repeating the table.  A variable the spec gives no default shows the
value of the role's ``defaults/main.yml``, the value the role really uses.

    python hacking/render_role_docs.py          # (re)write docs/role-variables.md
    python hacking/render_role_docs.py --check  # exit 1 when docs/role-variables.md is stale

The output depends only on the spec files (and the defaults files): same specs,
same bytes.
"""

import argparse
import difflib
import json
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join('docs', 'role-variables.md')
COLLECTION = 'gpufleet.lifecycle'
REGENERATE = 'python hacking/render_role_docs.py'

# Ansible's documentation markup (the subset roles use, and the rest of it for safety): name -> rendering.
_MARKUP = re.compile(r'\b(RV|C|I|M|O|V|E|P|B|U|L)\(([^)]*)\)|\bHORIZONTALLINE\b')
_PLAIN_SCALAR = re.compile(r'[A-Za-z0-9_./=+-][A-Za-z0-9_./=+ :-]*(?<! )\Z')
_PLAIN_ESCAPES = (('\\', '\\\\'), ('`', '\\`'), ('*', '\\*'), ('<', '&lt;'), ('>', '&gt;'))


def code(text):
    """A Markdown code span holding text verbatim."""
    fence = '``' if '`' in text else '`'
    pad = ' ' if fence == '``' or text.startswith('`') or text.endswith('`') else ''
    return '%s%s%s%s%s' % (fence, pad, text, pad, fence)


def plain(text):
    """Text outside any markup, escaped so Markdown shows it as written (no HTML tags, no emphasis)."""
    for old, new in _PLAIN_ESCAPES:
        text = text.replace(old, new)
    return text


def _render_markup(match):
    """One markup item as Markdown."""
    if match.group(1) is None:
        return '\n\n---\n\n'
    name, arg = match.group(1), match.group(2)
    if name == 'B':
        return '**%s**' % plain(arg)
    if name == 'U':
        return '<%s>' % arg
    if name == 'L':
        label, dummy, url = arg.rpartition(',')
        return '[%s](%s)' % (plain(label.strip()), url.strip())
    if name == 'P':
        # P(namespace.collection.name#type): the plugin's name.
        return code(arg.split('#', 1)[0])
    # C, I, M, O, V, E, RV: code, options and values, environment variables, return values, module names.
    return code(arg)


def markup(text):
    """Ansible doc markup (C(), I(), M(), O(), V(), ...) as Markdown; plain text escaped."""
    parts = []
    last = 0
    for match in _MARKUP.finditer(text):
        parts.append(plain(text[last:match.start()]))
        parts.append(_render_markup(match))
        last = match.end()
    parts.append(plain(text[last:]))
    return ''.join(parts)


def paragraphs(value):
    """A description (a string or a list of strings) as a list of strings."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [' '.join(str(item).split()) for item in value]
    return [' '.join(str(value).split())]


def yaml_value(value):
    """A value as YAML flow style on one line, as it would be written in vars (strings quoted only where YAML needs it)."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if value is None:
        return 'null'
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dict):
        return '{%s}' % ', '.join('%s: %s' % (yaml_value(key), yaml_value(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return '[%s]' % ', '.join(yaml_value(item) for item in value)
    text = str(value)
    if _PLAIN_SCALAR.match(text) and ': ' not in text and yaml.safe_load(text) == text:
        return text
    return json.dumps(text)


def cell(text):
    """Text for a table cell: one line, pipes escaped (GitHub tables escape them even in code spans)."""
    return ' '.join(text.split('\n')).replace('|', '\\|')


def option_type(option):
    """The type column: type, list elements, no_log."""
    kind = option.get('type', 'str')
    if option.get('elements'):
        kind = '%s of %s' % (kind, option['elements'])
    text = code(kind)
    if option.get('no_log'):
        text += ' (no_log)'
    return text


def option_default(name, option, defaults):
    """The default column: the spec's default; else required; else the value of defaults/main.yml."""
    if 'default' in option:
        return code(yaml_value(option['default']))
    if option.get('required'):
        return 'required'
    if name in defaults:
        return code(yaml_value(defaults[name]))
    return '-'


def option_rows(options, defaults, prefix=''):
    """Table rows of options (suboptions as parent.child rows below their parent)."""
    rows = []
    for name, option in options.items():
        option = option or {}
        full = prefix + name
        choices = ', '.join(code(yaml_value(choice)) for choice in option.get('choices') or [])
        description = '<br>'.join(markup(text) for text in paragraphs(option.get('description')))
        if option.get('aliases'):
            description += '<br>Aliases: %s.' % ', '.join(code(alias) for alias in option['aliases'])
        rows.append('| %s |' % ' | '.join(cell(column) for column in (
            code(full), option_type(option), option_default(name, option, defaults if not prefix else {}),
            choices, description)))
        if option.get('suboptions'):
            rows.extend(option_rows(option['suboptions'], {}, full + '.'))
    return rows


def anchor(role, entry_point):
    """The heading id GitHub gives to '### <role>: <entry point>'."""
    return '%s-%s' % (role, entry_point.lower())


def load_role(root, role):
    """(argument_specs mapping, defaults mapping) of one role."""
    with open(os.path.join(root, 'roles', role, 'meta', 'argument_specs.yml'), encoding='utf-8') as handle:
        specs = (yaml.safe_load(handle) or {}).get('argument_specs') or {}
    defaults = {}
    path = os.path.join(root, 'roles', role, 'defaults', 'main.yml')
    if os.path.isfile(path):
        with open(path, encoding='utf-8') as handle:
            defaults = yaml.safe_load(handle) or {}
    return specs, defaults


def roles_with_specs(root):
    """Names of the roles that have meta/argument_specs.yml, sorted."""
    folder = os.path.join(root, 'roles')
    return sorted(name for name in os.listdir(folder)
                  if os.path.isfile(os.path.join(folder, name, 'meta', 'argument_specs.yml')))


def entry_points(specs):
    """Entry point names: main first, then the others in the spec's order."""
    names = list(specs)
    return (['main'] if 'main' in specs else []) + [name for name in names if name != 'main']


def render_entry_point(role, name, spec, main_spec, defaults):
    """Markdown lines of one entry point."""
    lines = ['### %s: %s' % (role, name), '']
    if spec.get('short_description'):
        lines += [markup(' '.join(str(spec['short_description']).split())), '']
    for text in paragraphs(spec.get('description')):
        lines += ['- ' + markup(text)]
    if spec.get('description'):
        lines += ['']
    options = spec.get('options') or {}
    if name != 'main' and main_spec is not None and options and options == (main_spec.get('options') or {}):
        lines += ['Same variables as [`main`](#%s).' % anchor(role, 'main'), '']
    elif not options:
        lines += ['No variables.', '']
    else:
        lines += ['| variable | type | default | choices | description |', '| --- | --- | --- | --- | --- |']
        lines += option_rows(options, defaults)
        lines += ['']
    return lines


def render(root=ROOT):
    """The whole page, as a string."""
    roles = roles_with_specs(root)
    lines = [
        '# Role variables',
        '',
        '<!-- Generated by hacking/render_role_docs.py from roles/*/meta/argument_specs.yml; do not edit.',
        '     Change the argument spec, then run: %s -->' % REGENERATE,
        '',
        "Every role variable is documented once, in its role's `meta/argument_specs.yml`. This page is generated from those",
        'files by `%s` (a unit test, `tests/unit/test_role_docs.py`, fails when it is stale);' % REGENERATE,
        '`ansible-doc -t role %s.<role>` shows the same. A default the spec does not give is the value of the' % COLLECTION,
        "role's `defaults/main.yml` (for `node_upgrade` and `node_validate` mostly a playbook variable `gpufleet_*` with a",
        'fallback). The playbook variables (`gpufleet_*`) are in [playbooks.md](playbooks.md).',
        '',
        '| role | entry points | what it does |',
        '| --- | --- | --- |',
    ]
    loaded = {}
    for role in roles:
        specs, defaults = load_role(root, role)
        loaded[role] = (specs, defaults)
        main_spec = specs.get('main') or {}
        points = ', '.join('[`%s`](#%s)' % (name, anchor(role, name)) for name in entry_points(specs))
        lines.append('| [%s](#%s) | %s | %s |' % (role, role, points,
                                                  cell(markup(' '.join(str(main_spec.get('short_description', '')).split())))))
    lines.append('')
    for role in roles:
        specs, defaults = loaded[role]
        lines += ['## %s' % role, '',
                  '`%s.%s`; [README](../roles/%s/README.md), spec: [`roles/%s/meta/argument_specs.yml`](../roles/%s/meta/argument_specs.yml).'
                  % (COLLECTION, role, role, role, role), '']
        for name in entry_points(specs):
            lines += render_entry_point(role, name, specs[name] or {}, specs.get('main'), defaults)
    while lines and lines[-1] == '':
        lines.pop()
    return '\n'.join(lines) + '\n'


def check(root, rendered):
    """Compare rendered with the file; return (stale, message)."""
    path = os.path.join(root, OUTPUT)
    try:
        with open(path, encoding='utf-8') as handle:
            current = handle.read()
    except FileNotFoundError:
        return True, '%s does not exist; run: %s' % (OUTPUT, REGENERATE)
    if current == rendered:
        return False, '%s is up to date' % OUTPUT
    diff = list(difflib.unified_diff(current.splitlines(), rendered.splitlines(), OUTPUT, OUTPUT + ' (from the specs)', lineterm='', n=1))
    shown = diff[:60] + (['... (%d more diff lines)' % (len(diff) - 60)] if len(diff) > 60 else [])
    return True, '%s is stale (an argument spec changed); run: %s\n%s' % (OUTPUT, REGENERATE, '\n'.join(shown))


def main(argv=None):
    """Write or check the page; exit status 1 when --check finds it stale."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--check', action='store_true', help='only compare; exit 1 when %s is stale' % OUTPUT)
    parser.add_argument('--root', default=ROOT, help='the collection checkout (default: this script\'s)')
    args = parser.parse_args(argv)
    rendered = render(args.root)
    if args.check:
        stale, message = check(args.root, rendered)
        print(message, file=sys.stderr if stale else sys.stdout)
        return 1 if stale else 0
    path = os.path.join(args.root, OUTPUT)
    with open(path, 'w', encoding='utf-8', newline='\n') as handle:
        handle.write(rendered)
    print('wrote %s' % OUTPUT)
    return 0


if __name__ == '__main__':
    sys.exit(main())
