# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Offline stand-in for the get-pip.py script that ansible-test downloads.

ansible-test bootstraps pip into every virtual environment it creates with a
get-pip script fetched from a host that is not reachable from these machines.
It uses ~/.ansible/test/cache/get_pip_<version>.py when that file exists, so
``make test`` installs this file there.  It bootstraps pip from the standard
library's ``ensurepip`` and then runs ``pip install`` with the arguments it was
given (pip==<version> and friends), minus get-pip's own ``--no-setuptools`` /
``--no-wheel`` flags.

``ensurepip`` rewrites the environment of its own process (it sets
PIP_CONFIG_FILE=/dev/null and drops PIP_* variables), which would make pip lose
the machine's CA and index settings; the install therefore runs with a copy of
the environment taken before the bootstrap.
"""

import ensurepip
import os
import subprocess
import sys

GET_PIP_ONLY_FLAGS = ('--no-setuptools', '--no-wheel')


def main():
    """Bootstrap pip, then install what ansible-test asked for."""
    environment = dict(os.environ)
    arguments = [argument for argument in sys.argv[1:] if argument not in GET_PIP_ONLY_FLAGS]
    ensurepip.bootstrap(upgrade=True)
    subprocess.check_call([sys.executable, '-m', 'pip', 'install'] + arguments, env=environment)


if __name__ == '__main__':
    main()
