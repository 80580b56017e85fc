# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Node images of the simulated fleet (tests/sim/fleet.py): a fleet prunes only images of its own node operating system."""

import importlib.util
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_SPEC = importlib.util.spec_from_file_location('gpufleet_sim_test_fleet_images', os.path.join(ROOT, 'tests', 'sim', 'fleet.py'))
FLEET = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(FLEET)

IMAGES = ['localhost/gpufleet-sim-node:base-c69823ac8d162133', 'localhost/gpufleet-sim-node:550-fm-804ed3df14c2e8b5',
          'localhost/gpufleet-sim-node:550-fm-12f75c4e52de36fe', 'localhost/gpufleet-sim-node:base-rocky9-16e85373c9e5aec3',
          'localhost/gpufleet-sim-node:rocky9-550-fm-4caf0932f1324889', 'localhost/gpufleet-sim-node:rocky9-550-fm-0000000000000000']


class Recorder(FLEET.Fleet):
    """A Fleet whose podman lists IMAGES and records what it is asked to remove."""

    def __init__(self, state_dir):
        super().__init__(state_dir)
        self.removed = []

    def podman(self, *arguments, **kwargs):
        if arguments[0] == 'rmi':
            self.removed.append(arguments[1])
        return subprocess.CompletedProcess(['podman'] + list(arguments), 0, '\n'.join(IMAGES) + '\n', '')


@pytest.mark.parametrize('reference, operating_system', [
    (IMAGES[0], 'debian12'), (IMAGES[1], 'debian12'), (IMAGES[3], 'rocky9'), (IMAGES[4], 'rocky9'),
])
def test_image_os(reference, operating_system):
    assert FLEET.Fleet.image_os(reference) == operating_system


def test_a_debian_fleet_leaves_the_rocky_images_alone(tmp_path):
    fleet = Recorder(str(tmp_path))
    fleet.prune_images({IMAGES[0], IMAGES[1]}, 'debian12')
    assert fleet.removed == [IMAGES[2]]


def test_a_rocky_fleet_leaves_the_debian_images_alone(tmp_path):
    fleet = Recorder(str(tmp_path))
    fleet.prune_images({IMAGES[3], IMAGES[4]}, 'rocky9')
    assert fleet.removed == [IMAGES[5]]


@pytest.mark.parametrize('reference, kind', [
    (IMAGES[0], 'base'), (IMAGES[1], '550-fm'), (IMAGES[3], 'base-rocky9'), (IMAGES[4], 'rocky9-550-fm'),
    ('localhost/gpufleet-sim-node:580-0123456789abcdef', '580'), ('localhost/other:550-fm-804ed3df14c2e8b5', None),
    ('localhost/gpufleet-sim-node:latest', None),
])
def test_image_kind(reference, kind):
    assert FLEET.image_kind(reference) == kind


def test_a_fleet_leaves_the_images_of_another_branch_alone(tmp_path):
    # A fleet on 580 beside one on 550 (pytest-xdist workers, a demo beside the tests): only stale 580 images go.
    fleet = Recorder(str(tmp_path))
    fleet.prune_images({IMAGES[0], 'localhost/gpufleet-sim-node:580-fm-0123456789abcdef'}, 'debian12')
    assert fleet.removed == []
    fleet.prune_images({IMAGES[0], IMAGES[2]}, 'debian12')
    assert fleet.removed == [IMAGES[1]]
