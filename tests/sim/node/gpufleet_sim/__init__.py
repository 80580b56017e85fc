# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake NVIDIA tools of the simulated GPU fleet, and the node state model they share.

Every tool is a module run as ``python3 -m gpufleet_sim.<module>`` (with
``PYTHONPATH=/usr/lib/gpufleet-sim`` inside a node) and prints the real tool's formats
from the node's state files (see ``state`` and tests/sim/README.md, "The node contract"):

* ``nvidia_smi``           nvidia-smi (``-q -x``, ``-q``, ``--query-gpu``, ``-L``, ``-i``, ``-pm``, table)
* ``dcgmi``                dcgmi (``-v``/``--version``, ``diag``)
* ``nv_fabricmanager``     nv-fabricmanager (``--version``, the daemon)
* ``nvidia_persistenced``  nvidia-persistenced (``--version``, the daemon)
* ``nvidia_ctk``           nvidia-ctk (``--version``)
* ``nvidia_container_cli`` nvidia-container-cli (``-V``/``--version``)
* ``nvcc``                 nvcc (``--version``)
* ``dkms``                 dkms (``status``, ``autoinstall``, ``install``, ``build``, ``add``, ``remove``)
* ``boot``                 the boot step (picks the kernel, "loads" its module, writes boot.json)
* ``maint``                helper for the dummy packages' maintainer scripts (``dpkg_fail``)
* ``dpkg_lock``            the ``dpkg_lock`` fault: holds the dpkg locks as unattended-upgrades does
* ``gpu_hold``             the ``gpu_held`` fault: keeps ``/dev/nvidiactl`` and ``/dev/nvidiaN`` open as a job does
* ``holder``               the background holder both faults above run (pid file, signals, start and stop)
* ``nccl_tests``           nccl-tests ``all_reduce_perf`` (installed per node: ``fleet nccl-tests NODE``)
* ``fault_table``          the faults, their settings (types, defaults) and effects: the one table ``fleet fault``,
                           ``state.load_faults`` and tests/sim/README.md's Faults table read

Standard library only; Python 3.8+ (the nodes run Debian bookworm's 3.11).
"""
