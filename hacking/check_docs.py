# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check that ansible-doc lists and renders every plugin of the collection.

Plugins are found in this checkout; ansible-doc reads whatever copy of
gpufleet.lifecycle ANSIBLE_COLLECTIONS_PATH points to (``make docs`` points it
at the collection installed from the built tarball).

Action plugins share their documentation with the module of the same name, so
they are covered by the module check.  Exits non-zero, naming each plugin that
failed, when a plugin is missing from ``ansible-doc -l`` or does not render.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTION = 'gpufleet.lifecycle'
# plugins/<folder> -> ansible-doc plugin type
DOCUMENTED = {'modules': 'module', 'callback': 'callback', 'lookup': 'lookup', 'filter': 'filter', 'test': 'test', 'inventory': 'inventory'}


def documented_elsewhere(path):
    """A filter or test file without DOCUMENTATION: its plugins are documented in .yml files."""
    with open(path, encoding='utf-8') as handle:
        return 'DOCUMENTATION' not in handle.read()


def plugins_on_disk():
    """(type, fully qualified name) for each plugin file."""
    found = []
    for folder, plugin_type in sorted(DOCUMENTED.items()):
        path = os.path.join(ROOT, 'plugins', folder)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            if name.startswith('_'):
                continue
            # Filter and test files may hold several plugins, each documented in a <name>.yml beside the file.
            if plugin_type in ('filter', 'test') and name.endswith('.yml'):
                found.append((plugin_type, '%s.%s' % (COLLECTION, name[:-4])))
            elif name.endswith('.py') and (plugin_type not in ('filter', 'test') or not documented_elsewhere(os.path.join(path, name))):
                found.append((plugin_type, '%s.%s' % (COLLECTION, name[:-3])))
    return found


def run(argv):
    """Run ansible-doc; return (rc, stdout, stderr)."""
    process = subprocess.run(argv, capture_output=True, text=True, check=False)
    return process.returncode, process.stdout, process.stderr


def main():
    """Check listing and rendering; print one line per plugin."""
    errors = []
    plugins = plugins_on_disk()
    for plugin_type in sorted(set(plugin_type for plugin_type, dummy in plugins)):
        rc, out, err = run(['ansible-doc', '-t', plugin_type, '-l', COLLECTION, '--json'])
        listed = json.loads(out) if rc == 0 and out.strip() else {}
        for wanted_type, name in plugins:
            if wanted_type == plugin_type and name not in listed:
                errors.append('%s %s is not listed by ansible-doc -l (rc=%s) %s' % (plugin_type, name, rc, err.strip()))
    for plugin_type, name in plugins:
        rc, out, err = run(['ansible-doc', '-t', plugin_type, name])
        if rc != 0 or not out.strip() or '[WARNING]' in err or 'ERROR' in err:
            errors.append('%s %s does not render (rc=%s): %s' % (plugin_type, name, rc, err.strip()))
        else:
            print('ansible-doc ok: %s %s' % (plugin_type, name))
    for error in errors:
        print('ERROR: ' + error)
    if not plugins:
        print('ERROR: no plugins found')
        return 1
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
