# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Put the get-pip stand-in where the installed ansible-test looks for its cache.

The pip version is read from ansible-test's own source, so an ansible-core
upgrade that moves the pinned pip still finds its bootstrap script.
"""

import os
import re
import shutil
import sys

import ansible_test


def pip_version():
    """Return the pip version the installed ansible-test bootstraps."""
    source = os.path.join(os.path.dirname(ansible_test.__file__), '_internal', 'python_requirements.py')
    with open(source, encoding='utf-8') as handle:
        match = re.search(r"pip='([0-9.]+)'", handle.read())
    if not match:
        sys.exit('cannot find the pip version in %s' % source)
    return match.group(1)


def main():
    """Install the stand-in unless an identical file is already there."""
    version = pip_version()
    target = os.path.expanduser('~/.ansible/test/cache/get_pip_%s.py' % version.replace('.', '_'))
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'get_pip_standin.py')
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(source, 'rb') as handle:
        wanted = handle.read()
    if os.path.exists(target):
        with open(target, 'rb') as handle:
            if handle.read() == wanted:
                return
    shutil.copyfile(source, target)
    print('installed the offline get-pip stand-in for pip %s at %s' % (version, target))


if __name__ == '__main__':
    main()
