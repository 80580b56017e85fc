# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Copy the checkout into build/ansible_collections/gpufleet/lifecycle.

ansible-test must run from inside an ``ansible_collections/<ns>/<name>`` path.
Nobody should have to clone into such a path, so this copies the files git
knows about (tracked, plus untracked files that are not ignored) into the build
folder, replacing what an earlier run left there.  The copy gets a git
repository of its own: it lies inside this checkout's ignored ``build/``
folder, and ansible-test would otherwise list files through the outer
repository, which ignores all of them.
"""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEST = os.path.join(ROOT, 'build', 'ansible_collections', 'gpufleet', 'lifecycle')


def tracked_files():
    """Files of the working tree that git tracks or would track."""
    output = subprocess.check_output(
        ['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'], cwd=ROOT)
    names = sorted(set(name for name in output.decode('utf-8').split('\0') if name))
    return [name for name in names if os.path.isfile(os.path.join(ROOT, name))]


def main():
    """Rebuild the tree and print its path."""
    if os.path.islink(DEST):
        os.unlink(DEST)
    elif os.path.isdir(DEST):
        shutil.rmtree(DEST)
    for name in tracked_files():
        target = os.path.join(DEST, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, name), target)
    subprocess.check_call(['git', 'init', '--quiet', DEST])
    sys.stdout.write(DEST + '\n')


if __name__ == '__main__':
    main()
