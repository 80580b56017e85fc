# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared attribute documentation for the collection's modules."""


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Attribute blocks used by several modules."""

    DOCUMENTATION = r'''
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
'''

    # A module that only reads the node.
    READ_ONLY = r'''
options: {}
attributes:
  check_mode:
    support: full
    details: The module changes nothing on the node, so it runs the same way in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: When run twice in a row on an unchanged node, the results are the same.
'''
