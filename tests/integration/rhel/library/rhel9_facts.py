# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Test-only module: make a simulated (Debian) node's facts say Rocky Linux 9, so the roles take their dnf path."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, ansible_facts={'os_family': 'RedHat', 'distribution': 'Rocky',
                                                   'distribution_major_version': '9', 'pkg_mgr': 'dnf'})


if __name__ == '__main__':
    main()
